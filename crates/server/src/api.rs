//! The HTTP API's JSON bodies (protocol [§5.8](penguin_omni_protocol::spec#s5.8) *Endpoints*), as a client
//! sees them: depend on this module to talk to
//! `penguin serve` with types instead of hand-built JSON. Stream events are
//! [`penguin_sse_transport::ServerEvent`].
//!
//! Every body is a JSON object sent with `Content-Type: application/json` and
//! `Authorization: Bearer <token>`. Field names are camelCase, enum values as written below;
//! an unknown value is a 400 `invalid_field` naming the field (`input[1].imageUrl`) and what
//! it should have been. Absent optional fields and `null` mean the same.
//!
//! ## Routes
//!
//! Every route the server answers, one per row (a test checks this table against the router).
//! `/api` routes need the token; the page's three do not (they hold no data). Path parameters
//! are written as the router names them: `{id}` a session id, `{item}` the id a steering input
//! or follow-up was accepted with, `{call}` a `tool_call_id`, `{process}` a background command's
//! `processId`. Streams are SSE (`text/event-stream`) or WebSocket: an event without a name is
//! an OmniMessage of the session's run, one named `server_event` is a
//! [`ServerEvent`](penguin_sse_transport::ServerEvent) (`task_state`, `approval_request`,
//! `session_title`, `goal_state`, …); every event has an id `<epoch>-<seq>`.
//!
//! | route | body or query | answer | what |
//! |---|---|---|---|
//! | `POST /api/sessions` | [`CreateSessionRequest`]: `{"workspace": "/src/app", "approvalMode": "always-ask"}` (every field optional: `{}` is fine) | 201 [`SessionEnvelope`] | create a session |
//! | `GET /api/sessions` | `?limit=N[&before=CURSOR][&archived=true\|all][&search=TEXT]` (all optional) | 200 [`SessionList`] | the sessions on disk and in memory, pinned first, then most recently active first; with `limit`, `page: {hasMore, before?}` and `before=<page.before>` gives the next page (same `archived` and `search`); archived sessions only with `archived=true` (`all`: both); `search` keeps those whose title or first prompt holds every word of it, whatever the case; each row has its `workspace`, to group by |
//! | `GET /api/sessions/{id}` | none | 200 [`SessionEnvelope`] | one session, loaded from its trace when it is not in memory; `plan` is the model's latest `update_plan` |
//! | `PATCH /api/sessions/{id}` | [`PatchSessionRequest`]: any of `{"title": "refactor", "approvalMode": "read-only", "archived": true, "pinned": true}` | 200 [`SessionEnvelope`] | rename, change the approval mode (from the next approval on), archive or bring back, pin or unpin |
//! | `DELETE /api/sessions/{id}` | none | 204 | delete the session and its trace |
//! | `GET /api/sessions/{id}/messages` | none, `?tailLimit=N`, or `?before=F:O[&limit=N]` | 200 [`MessagesPage`] | the history: records with `tracePosition`, subagent runs expanded, pending inputs, the `live` tail to join a stream at |
//! | `GET /api/sessions/{id}/stream` | `Last-Event-ID` header (optional; `?access_token=` may carry the token) | 200 SSE | replay after that id (or `resync_required`), then `task_state` and pending `approval_request`s, then live |
//! | `GET /api/sessions/{id}/socket` | WebSocket upgrade, `?lastEventId=` (optional), `?access_token=` | 101, then JSON text frames: arrays of `{id, event?, data}` | the same stream over a WebSocket (a browser's tabs are not limited to six HTTP/1.1 connections) |
//! | `GET /api/sessions/{id}/state` | none | 200 `[ServerEvent]` | what a connecting stream is offered first: `task_state`, then pending `approval_request`s |
//! | `GET /api/sessions/{id}/goal` | none | 200 `{"goal": {objective, status, budget, used, rounds, updatedAt} \| null}` | the session's goal (goal mode) |
//! | `POST /api/sessions/{id}/fork` | `{}` or `{"position": {"fileIndex": F, "ordinal": O}}` | 201 [`SessionEnvelope`] | a new session with this one's trace up to the end or up to that position |
//! | `POST /api/sessions/{id}/rewind` | `{"to": N, "files"?: true, "conversation"?: true, "apply"?: false}` (or `"at": {"fileIndex", "ordinal"}`, a task's first input, for `to`) | 200 `{"to": N, "files"?: [`RewindFiles`], "session"?: SessionInfo}` | the workspace as before task N (what would change; with `apply`, changed) and the conversation forked after task N-1 (409 `no_checkpoints`, `no_checkpoint`, `task_in_progress`) |
//! | `GET /api/sessions/{id}/trace` | none | 200 JSON lines (`application/x-ndjson`, an attachment) | the session's Trace to take away: its files in order, `{"type":"trace_rotate"}` between them |
//! | `POST /api/sessions/import` | an exported Trace (JSON lines) | 201 `{"session": {"id"}}` | the Trace made a session here, checked first (400 `invalid_trace` naming the problems, 409 `session_exists`) |
//! | `GET /api/sessions/{id}/skills` | none | 200 `{"skills": [{name, description, …}]}` | the skills its workspace is offered (the factory's) |
//! | `POST /api/sessions/{id}/tasks` | [`TaskRequest`]: `{"input": [{"type": "text", "text": "Fix the build"}]}` | 202 [`TaskAccepted`] | start a task, or queue a follow-up (`queueIfBusy`); `goal: true` or `{budget}` runs it as a goal |
//! | `POST /api/sessions/{id}/steer` | [`SteerRequest`]: `{"text": "use the other branch"}` | 202 [`SteerAccepted`] | steer the running task (409 `not_running` when none runs) |
//! | `DELETE /api/sessions/{id}/steer/{item}` | none | 200 [`Recalled`] | take back a steering input not delivered yet |
//! | `DELETE /api/sessions/{id}/follow-ups/{item}` | none | 200 [`Recalled`] | take back a queued follow-up |
//! | `POST /api/sessions/{id}/approvals/{call}` | [`ApprovalRequestBody`]: `{"decision": "allow"}` | 204 | answer an `approval_request` (404 `approval_not_found` when the call no longer waits) |
//! | `POST /api/sessions/{id}/abort` | none | 202 (a task was interrupted), 204 (none ran) | interrupt the running task |
//! | `POST /api/sessions/{id}/retry-now` | none | 200 [`RetryNow`] | cut a reconnect wait short |
//! | `POST /api/sessions/{id}/compact` | none | 202 [`CompactAccepted`] | compact the context now |
//! | `GET /api/sessions/{id}/processes` | none | 200 [`ProcessList`] | the session's background commands |
//! | `POST /api/sessions/{id}/processes/{process}/kill` | none | 204 (404 `process_not_found`) | kill one |
//! | `DELETE /api/sessions/{id}/processes/{process}` | none | 204 (404 `process_not_found`) | the same: kill it if it runs, and forget it (a finished one leaves the list) |
//! | `GET /api/sessions/{id}/files` | `?path=DIR` (relative to the workspace; absent: its root) | 200 [`FileListing`] | one folder of the session's workspace, through the file tools' confinement: ignored files, `.git` and penguin's data root left out (400 `path_refused` for a path out of the workspace or into the data root, by `..`, absolute or through a link; 404 `file_not_found`; 400 `not_a_directory`) |
//! | `GET /api/sessions/{id}/files/content` | `?path=FILE[&download=1]` | 200 the bytes | a file of the workspace, read through the file tools' door: text as `text/plain` (never HTML), PNG, JPEG, GIF and WebP images as themselves, anything else and every download as an `attachment`; always `nosniff` and a sandboxing `Content-Security-Policy` (400 `path_refused`, `not_a_file` for a folder, FIFO or device; 404 `file_not_found`; 413 `file_too_large` past 2 MiB unless downloaded) |
//! | `GET /api/sessions/{id}/files/changes` | none | 200 [`FileChanges`] | the files the session changed: the workspace now against its checkpoint from before its first task, with unified diffs (409 `no_checkpoints` when it keeps none) |
//! | `GET /api/models` | none | 200 [`ModelList`] | the models a create may name, the default first; each with `baseUrl`, `apiKeyEnv` (a variable's name, never a key), `keySet`, `configured` |
//! | `POST /api/models` | `{"name": "local", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:8080/v1", "model": "qwen", "apiKeyEnv"?: "LOCAL_KEY", "default"?: true}` | 201 [`ModelList`] | add a `[models.NAME]` to `config.toml`, its comments and layout kept (400 `invalid_field` naming the field, 409 `model_exists`) |
//! | `PUT /api/models/{name}` | [`ModelFields`], any of them, and `"default"?: true` | 200 [`ModelList`] | change a configured model, or make it the default (404 `model_not_found`) |
//! | `DELETE /api/models/{name}` | none | 200 [`ModelList`] | remove a configured model (the default too: the default is then `demo`) |
//! | `POST /api/models/test` | `{"model": "local"}` | 200 `{model, provider, modelId, ok, latencyMs, totalMs, reply, streaming, tools, vision, failure}` | one-line requests to the model: latency, streaming, tool calling and vision (each `{status: works\|fails\|skipped, detail}`), or the classified failure (`{kind, cause, hint}`) |
//! | `POST /api/models/discover` | `{"protocol": "ollama", "baseUrl"?: "http://127.0.0.1:11434", "apiKeyEnv"?: "…"}` | 200 `{"models": ["qwen2.5-coder:7b", …]}` (502 `endpoint_unreachable`) | the model ids the endpoint itself lists (`GET {base}/models`, Ollama's `/api/tags`), offered when adding |
//! | `GET /api/memory` | none | 200 `{"scopes": [...]}` | the agent's memory, by scope (the factory's) |
//! | `GET /api/usage` | `?from=YYYY-MM-DD&to=YYYY-MM-DD&groupBy=day\|model\|session` (all optional; RFC 3339 times too) | 200 [`UsageReport`](crate::usage::UsageReport) | tokens and cost per day, model or session, added up from the traces ([`crate::usage`]) |
//! | `GET /api/price` | `?provider=P&model=M` | 200 `{"price": {input, cachedInput, cacheWrite, output} \| null}` | a model's price, dollars per million tokens (the factory's) |
//! | `POST /api/explain` | `{"status": 429, "errorMessage": "…", "attempt": 2}` (a failed `request_end`'s fields) | 200 `{kind, cause, hint, ended}` | a failed model request in the CLI's words |
//! | `GET /api/events` | `Last-Event-ID` header (optional), `?access_token=` | 200 SSE | the user channel: `session_created`, `session_state`, `session_title` of every session |
//! | `GET /api/events/socket` | WebSocket upgrade, `?lastEventId=`, `?access_token=` | 101, then JSON text frames | the user channel over a WebSocket |
//! | `GET /` | none | 200 HTML | the web app's page (the session list) |
//! | `GET /sessions/{id}` | none | 200 HTML | the same page, opening one session |
//! | `GET /usage` | none | 200 HTML | the same page, showing usage and cost (a chart per day, totals by model) |
//! | `GET /models` | none | 200 HTML | the same page, showing the models: add, change, remove, test, set the default |
//! | `GET /assets/{name}` | `If-None-Match` (optional) | 200 (or 304) with an `ETag` | the page's scripts, styles and icon, compiled in ([`crate::web::ASSETS`]) |
//!
//! Errors answer [`ErrorBody`]: `{"error": {"code": "invalid_field", "message": "approvalMode:
//! expected allow-all, deny-all, read-only or always-ask, got \"ask\""}}`.
//!
//! A task's input is a list of parts, texts and images, sent to the model as one user turn in
//! that order; it needs at least one non-blank text or one image:
//!
//! ```json
//! {
//!   "input": [
//!     {"type": "text", "text": "What is in this screenshot?"},
//!     {"type": "image_url", "imageUrl": "data:image/png;base64,iVBORw0KGgo..."}
//!   ],
//!   "thinkingLevel": "high",
//!   "queueIfBusy": true
//! }
//! ```
//!
//! With the types:
//!
//! ```
//! use penguin_server::api::{ApprovalMode, CreateSessionRequest, InputPart, TaskRequest};
//!
//! let create = CreateSessionRequest {
//!     approval_mode: Some(ApprovalMode::AlwaysAsk),
//!     ..CreateSessionRequest::default()
//! };
//! assert_eq!(serde_json::to_string(&create).unwrap(),
//!     r#"{"provider":null,"model":null,"workspace":null,"approvalMode":"always-ask"}"#);
//! let task = TaskRequest::text("Fix the build");
//! assert_eq!(serde_json::to_string(&task).unwrap(),
//!     r#"{"input":[{"type":"text","text":"Fix the build"}],"thinkingLevel":null,"queueIfBusy":false}"#);
//! # let _ = InputPart::Text { text: String::new() };
//! ```

use penguin_engine::ThinkingLevel;
use penguin_sse_transport::SessionStatus;
use serde::{Deserialize, Serialize};

/// How a session's tool calls are approved: penguin-engine's, re-exported here where the API's
/// bodies use it (JSON `"always-ask"`, `"allow-all"`, `"deny-all"`, `"read-only"`).
pub use penguin_engine::ApprovalMode;

/// A session as the API lists and returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// The title given with `PATCH`.
    pub title: Option<String>,
    /// How its tool calls are approved.
    pub approval_mode: ApprovalMode,
    /// Idle, running or compacting.
    pub state: SessionStatus,
    /// Follow-ups waiting for the running task to end.
    pub queued: usize,
    /// `session_meta.provider`.
    pub provider: Option<String>,
    /// `session_meta.model_id`.
    pub model: Option<String>,
    /// The configured name of its model (`GET /api/models`' `name`), when the server's
    /// factory names its models: what a person recognises, where `provider` and `model` may be
    /// the same for two configured models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// The workspace its tools act on.
    pub workspace: Option<String>,
    /// `subagent` or `schedule`; `null` for a user-created session.
    pub source: Option<String>,
    /// When it was created (or loaded by this process).
    pub created_at: Option<String>,
    /// When it last started or ended a task in this process.
    pub last_active_at: Option<String>,
    /// Whether it has written anything.
    pub has_trace: bool,
    /// Trace records this process could not write (absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trace_write_failures: u64,
    /// The sandbox its commands run under (absent when the session is not loaded, or its
    /// tools have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
    /// The model's latest plan (its last completed `update_plan` call's arguments:
    /// `{explanation?, plan: [{step, status}]}`), when it keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<serde_json::Value>,
    /// Archived: left out of `GET /api/sessions` unless `?archived=true` (or `all`).
    #[serde(default)]
    pub archived: bool,
    /// Pinned: listed before the sessions that are not.
    #[serde(default)]
    pub pinned: bool,
}

/// The sandbox a session's commands run under, as this host's kernel enforces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    /// The effective mode: `workspace-write`, `read-only` or `off` (`off` too when the kernel
    /// cannot confine commands at all).
    pub mode: String,
    /// The mode asked for; `null` for the default.
    pub requested: Option<String>,
    /// Whether commands may open TCP connections and bind TCP ports.
    pub network: bool,
    /// TCP ports allowed while the network is off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_ports: Vec<u16>,
    /// The kernel's Landlock ABI version; `null` without Landlock.
    pub landlock_abi: Option<u8>,
    /// Protections asked for that this kernel cannot give (`landlock`, `truncate`, `network`,
    /// `device-ioctl`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_enforced: Vec<String>,
    /// One line for display, e.g. `sandbox: workspace-write, network off (Landlock ABI 7)`.
    pub summary: String,
    /// The tools a call of which can be allowed to run once outside the sandbox
    /// (`{"decision": "allow_unsandboxed"}`): the session's environment says which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsandboxed_tools: Vec<String>,
}

/// `sandbox` in `POST /api/sessions`: overrides of the server's sandbox for one session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSettings {
    /// `workspace-write`, `read-only` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `false` blocks TCP for the session's commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `{"session": …}`: the answer of create, get and patch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionEnvelope {
    /// The session.
    pub session: SessionInfo,
}

/// One model a session may be created with (`GET /api/models`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelChoice {
    /// What `POST /api/sessions` names as `model`.
    pub name: String,
    /// Its wire protocol (`openai-chat`, `anthropic-messages`, …, `demo`).
    pub provider: String,
    /// The upstream model id.
    pub model_id: String,
    /// Whether a session that names no model gets this one.
    pub default: bool,
    /// Where its endpoint is (`null` for the built-in demo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The NAME of the environment variable its key is read from (never the key), when it
    /// takes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Whether that variable is set where the server runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_set: Option<bool>,
    /// Whether it is a `[models.NAME]` of `config.toml`, which `PUT` and `DELETE
    /// /api/models/{name}` change (the built-in demo and a model given by flags are not).
    #[serde(default)]
    pub configured: bool,
}

/// A model's fields as `POST /api/models` and `PUT /api/models/{name}` take them. In a `PUT`,
/// an absent field is left as it is and `""` takes `baseUrl` or `apiKeyEnv` out (back to the
/// protocol's default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelFields {
    /// The adapter: `openai-chat`, `openai-responses`, `anthropic-messages`, `gemini`,
    /// `ollama`.
    pub protocol: Option<String>,
    /// The endpoint; absent: the protocol's default.
    pub base_url: Option<String>,
    /// The upstream model id.
    pub model: Option<String>,
    /// The NAME of the environment variable holding the key. The API takes no key.
    pub api_key_env: Option<String>,
}

/// A change to the configured models, as the server hands it to its factory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelEdit {
    /// `POST /api/models`: a new `[models.NAME]`; `default` makes it the default model.
    Add {
        /// Its name.
        name: String,
        /// Its fields (`protocol` and `model` required).
        fields: ModelFields,
        /// Whether it becomes the default.
        default: bool,
    },
    /// `PUT /api/models/{name}`: the fields given changed; `default` makes it the default.
    Change {
        /// Its name.
        name: String,
        /// The fields to change.
        fields: ModelFields,
        /// Whether it becomes the default.
        default: bool,
    },
    /// `DELETE /api/models/{name}`.
    Remove {
        /// Its name.
        name: String,
    },
}

/// `GET /api/models`; also what `POST`, `PUT` and `DELETE /api/models` answer (the list after
/// the change).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// The default first; empty when the server's factory takes no model names.
    pub models: Vec<ModelChoice>,
}

/// `GET /api/sessions[?limit=N[&before=CURSOR]]`.
///
/// Most recently active first (`lastActiveAt`, else `createdAt`; then id). With `limit`, one
/// page of at most that many and `page`; the next page is `?limit=N&before=<page.before>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionList {
    /// The sessions of this page (every session without `limit`).
    pub sessions: Vec<SessionInfo>,
    /// Where the list continues; present when `limit` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<PageInfo>,
}

/// `POST /api/sessions`: every field optional, so `{}` creates a session with the server's
/// defaults.
///
/// ```json
/// {
///   "workspace": "/home/me/src/app",
///   "approvalMode": "always-ask",
///   "sandbox": {"mode": "read-only", "network": false},
///   "mcpServers": [{"name": "fs", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."]}]
/// }
/// ```
///
/// `provider` and `model` pick among what the server's factory offers (the `penguin` CLI's:
/// a configured model's name in `model`); a factory that offers one model ignores them or
/// answers 400 naming the field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSessionRequest {
    /// A provider the server offers.
    pub provider: Option<String>,
    /// The model id.
    pub model: Option<String>,
    /// The workspace (default: the server's).
    pub workspace: Option<String>,
    /// The approval mode (default `allow-all`).
    pub approval_mode: Option<ApprovalMode>,
    /// The sandbox (default: the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSettings>,
    /// MCP servers for this session only, in addition to the server's (entries as in
    /// `[[mcp_servers]]` of `config.toml`; the session factory validates them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<serde_json::Value>,
}

/// `PATCH /api/sessions/:id`: the fields to change, the others stay.
///
/// ```json
/// {"title": "refactor the parser", "approvalMode": "read-only"}
/// ```
///
/// A new approval mode applies from the next approval on: calls already waiting for a
/// decision keep waiting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchSessionRequest {
    /// A new approval mode.
    pub approval_mode: Option<ApprovalMode>,
    /// A new title.
    pub title: Option<String>,
    /// Archive it (`true`) or bring it back (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
    /// Pin it (`true`) or unpin it (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<bool>,
}

/// One part of a task's input, tagged by `type`:
///
/// - `{"type": "text", "text": "Fix the build"}`: a user text;
/// - `{"type": "image_url", "imageUrl": "https://…/shot.png"}` or a `data:image/png;base64,…`
///   URL: an image for models with vision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputPart {
    /// A user text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by URL (`data:` URLs included).
    ImageUrl {
        /// The URL.
        #[serde(rename = "imageUrl")]
        image_url: String,
    },
}

/// `POST /api/sessions/:id/tasks`: start a task on an idle session (202), or, with
/// `queueIfBusy`, queue it as a follow-up that starts when the running task ends (202 with
/// `queued: true`; without it a busy session answers 409 `task_in_progress`).
///
/// ```json
/// {"input": [{"type": "text", "text": "Now run the tests"}], "thinkingLevel": "low", "queueIfBusy": true}
/// ```
///
/// `thinkingLevel` is one of `none`, `low`, `medium`, `high`, `xhigh`, `max` (absent: the
/// model's default). The task's messages arrive on the session's stream
/// (`GET /api/sessions/:id/stream`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRequest {
    /// What to send: at least one non-blank text or an image.
    pub input: Vec<InputPart>,
    /// Thinking effort of this task.
    pub thinking_level: Option<ThinkingLevel>,
    /// Queue as a follow-up when a task is running instead of answering 409.
    #[serde(default)]
    pub queue_if_busy: bool,
}

impl TaskRequest {
    /// A task of one text, at the model's default thinking level, not queued.
    pub fn text(text: impl Into<String>) -> TaskRequest {
        TaskRequest {
            input: vec![InputPart::Text { text: text.into() }],
            thinking_level: None,
            queue_if_busy: false,
        }
    }
}

/// The 202 of `POST /tasks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAccepted {
    /// The session.
    pub session_id: String,
    /// Whether the input was queued as a follow-up.
    pub queued: bool,
}

/// The 202 of `POST /compact`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactAccepted {
    /// The session.
    pub session_id: String,
}

/// `POST /api/sessions/:id/steer`: text for the running task, delivered to the model at its
/// next input assembly (once the tool calls in flight settled), marked `[user_steering]`.
///
/// ```json
/// {"text": "use the other branch"}
/// ```
///
/// A session with no running task answers 409 `not_running` (send a task instead); the
/// answer's id recalls the text while it is still waiting (`DELETE …/steer/:id`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SteerRequest {
    /// Non-blank text.
    pub text: String,
}

/// The 202 of `POST /steer`: the id to recall it with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SteerAccepted {
    /// The steering input's id.
    pub id: String,
}

/// What rewinding a session's files to before a task changes (`POST
/// /api/sessions/{id}/rewind`): each path put back, each removed, each left as it is because
/// the checkpoint did not keep it, and, once applied, each that failed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindFiles {
    /// Paths put back as they were (changed, deleted or of another kind since).
    pub restore: Vec<String>,
    /// Paths made since, removed.
    pub remove: Vec<String>,
    /// Of `restore` and `remove`, the paths changed between the session's tasks (by a
    /// person, not by its tasks): kept unless the request says `"yours": true`.
    #[serde(default)]
    pub yours: Vec<String>,
    /// Paths the checkpoint left out, each with why: left as they are.
    pub left_alone: Vec<String>,
    /// Paths that could not be rewound, each with why (only once applied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

/// A decision for `POST /approvals/:toolCallId`: `"allow"`, `"allow_always"`, `"deny"` or
/// `"allow_unsandboxed"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run the call.
    Allow,
    /// Run it, and from now on every call its `approval_request.always` names (this load of
    /// the session).
    AllowAlways,
    /// Deny it: the model gets "Tool call denied by user." as its output.
    Deny,
    /// Run this one command outside the session's sandbox (409 `not_sandboxed` when the
    /// session has no sandbox or the call is not one the sandbox could let out, see
    /// [`SandboxInfo::unsandboxed_tools`]).
    AllowUnsandboxed,
}

/// The body of `POST /api/sessions/:id/approvals/:toolCallId`, answering the
/// `approval_request` event of a pending call (its `toolCallId`, a subagent's included):
///
/// ```json
/// {"decision": "allow"}
/// ```
///
/// 204 when the call was waiting, 404 `approval_not_found` when it was not (already decided,
/// or its task ended).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequestBody {
    /// The decision.
    pub decision: Decision,
}

/// `POST /retry-now`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryNow {
    /// Whether a reconnect wait was cut short.
    pub skipped: bool,
}

/// What `DELETE /steer/:id` and `DELETE /follow-ups/:id` give back, so a client can offer it
/// again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recalled {
    /// The text.
    pub text: String,
    /// Images it carried.
    pub images: u32,
    /// Files it carried.
    pub files: u32,
    /// A follow-up's thinking level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<ThinkingLevel>,
}

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// A machine-readable code and a message for a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// e.g. `session_not_found`, `invalid_field`, `task_in_progress`.
    pub code: String,
    /// What was wrong, naming the field or the state.
    pub message: String,
}

/// `GET /api/sessions/:id/messages`: the history, then what is still streaming.
///
/// Query: none (everything), `tailLimit=N` (the last N units), or `before=F:O[&limit=N]` (the
/// units recorded before trace position `F:O`, the newest N of them). A unit is one record of
/// the session's own trace, together with what it expands to (a `subagent` pointer becomes the
/// child's whole run, so a page never splits one), or one pending input not recorded yet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagesPage {
    /// Trace records (and inputs not written yet), oldest first, subagent pointers expanded.
    pub messages: Vec<serde_json::Value>,
    /// The fragments of the segment streaming now, while a task runs (never on a `before`
    /// page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<penguin_sse_transport::LiveTail>,
    /// Where older history continues; present when `tailLimit` or `before` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<PageInfo>,
}

/// The paging part of a [`MessagesPage`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageInfo {
    /// Whether units older than this page exist.
    pub has_more: bool,
    /// The `before` value that fetches the page just older than this one (when `has_more`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
}

/// One background command of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    /// The `process_id` the model uses.
    pub process_id: String,
    /// The command line.
    pub command: String,
    /// The OS pid of its shell (its process group).
    pub pid: Option<i32>,
    /// Whether it still runs.
    pub running: bool,
    /// How it ended (`exit code 0`, ...), once it has.
    pub exit: Option<String>,
    /// When it started, in milliseconds since the epoch, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
    /// Its latest lines of output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<String>,
    /// The TCP ports it listens on (a dev server's), within what its sandbox lets it bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
}

/// `GET /api/sessions/:id/processes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessList {
    /// Oldest first.
    pub processes: Vec<ProcessInfo>,
}

/// One entry of a listed folder of a session's workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    /// Its name in the folder.
    pub name: String,
    /// `file`, `dir`, `symlink` (never followed in a listing) or `other` (a FIFO, socket or
    /// device).
    pub kind: String,
    /// Bytes (a link's own size).
    pub size: u64,
    /// Last modified, milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ms: Option<u64>,
    /// Where a link points, as written in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// `GET /api/sessions/{id}/files?path=DIR`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileListing {
    /// The folder, relative to the workspace (`""` for its root).
    pub path: String,
    /// Folders first, then by name; what the ignore files exclude, `.git` and penguin's own
    /// state are left out.
    pub entries: Vec<FileEntry>,
}

/// One file a session changed, with its diff.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangedFile {
    /// Relative to the workspace.
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub status: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// The unified diff (`--- a/P`, `+++ b/P`, `/dev/null` for a side that does not exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Why there is no diff (a binary file, a diff too large to show).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The file changed between the session's tasks too (by a person, or anything that was
    /// not one of its tasks): the diff holds their change as well.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub others: bool,
}

/// `GET /api/sessions/{id}/files/changes`: the workspace now against its checkpoint from
/// before the session's first task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChanges {
    /// When that checkpoint was taken, milliseconds since the epoch.
    pub since_ms: u64,
    /// By path.
    pub files: Vec<ChangedFile>,
    /// Paths the checkpoint left out (too large, unreadable), `path (why)`: their changes are
    /// not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The bodies the docs show read into the types, and the types write them back.
    #[test]
    fn documented_bodies_read_and_write() {
        let create: CreateSessionRequest = serde_json::from_value(json!({
            "workspace": "/home/me/src/app",
            "approvalMode": "always-ask",
            "sandbox": {"mode": "read-only", "network": false},
            "mcpServers": [{"name": "fs", "command": "npx"}]
        }))
        .unwrap();
        assert_eq!(create.approval_mode, Some(ApprovalMode::AlwaysAsk));
        assert_eq!(create.sandbox.unwrap().network, Some(false));
        assert_eq!(create.mcp_servers.len(), 1);
        let empty: CreateSessionRequest = serde_json::from_value(json!({})).unwrap();
        assert_eq!(empty, CreateSessionRequest::default());

        for mode in ApprovalMode::ALL {
            let v = serde_json::to_value(mode).unwrap();
            assert_eq!(v, json!(mode.as_str()));
            assert_eq!(ApprovalMode::parse(mode.as_str()), Some(mode));
        }

        let patch: PatchSessionRequest =
            serde_json::from_value(json!({"title": "refactor", "approvalMode": "read-only"}))
                .unwrap();
        assert_eq!(patch.approval_mode, Some(ApprovalMode::ReadOnly));

        let task: TaskRequest = serde_json::from_value(json!({
            "input": [
                {"type": "text", "text": "What is in this screenshot?"},
                {"type": "image_url", "imageUrl": "data:image/png;base64,iVBORw0KGgo="}
            ],
            "thinkingLevel": "high",
            "queueIfBusy": true
        }))
        .unwrap();
        assert!(
            matches!(&task.input[1], InputPart::ImageUrl { image_url } if image_url.starts_with("data:"))
        );
        assert_eq!(task.thinking_level, Some(ThinkingLevel::High));
        assert!(task.queue_if_busy);
        assert_eq!(
            serde_json::to_value(TaskRequest::text("hi")).unwrap(),
            json!({"input": [{"type": "text", "text": "hi"}], "thinkingLevel": null, "queueIfBusy": false})
        );

        for (decision, wire) in [
            (Decision::Allow, "allow"),
            (Decision::Deny, "deny"),
            (Decision::AllowUnsandboxed, "allow_unsandboxed"),
            (Decision::AllowAlways, "allow_always"),
        ] {
            let body = ApprovalRequestBody { decision };
            assert_eq!(
                serde_json::to_value(&body).unwrap(),
                json!({"decision": wire})
            );
        }
        let steer: SteerRequest =
            serde_json::from_value(json!({"text": "use the other branch"})).unwrap();
        assert_eq!(steer.text, "use the other branch");
    }
}
