//! The HTTP API's JSON bodies (§5.4), as a client sees them: depend on this module to talk to
//! `penguin serve` with types instead of hand-built JSON. Stream events are
//! [`penguin_sse_transport::ServerEvent`].

use penguin_engine::ThinkingLevel;
use penguin_sse_transport::SessionStatus;
use serde::{Deserialize, Serialize};

/// How a session's tool calls are approved (§5.6). Read again at every approval, so a change
/// takes effect on the next call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Every call runs.
    #[default]
    AllowAll,
    /// Every call is denied.
    DenyAll,
    /// Calls of read-only tools run; the rest are asked.
    ReadOnly,
    /// Every call is asked: `approval_request`, then `POST /approvals/:toolCallId`.
    AlwaysAsk,
}

impl ApprovalMode {
    /// Every mode.
    pub const ALL: [ApprovalMode; 4] = [
        ApprovalMode::AllowAll,
        ApprovalMode::DenyAll,
        ApprovalMode::ReadOnly,
        ApprovalMode::AlwaysAsk,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::AllowAll => "allow-all",
            ApprovalMode::DenyAll => "deny-all",
            ApprovalMode::ReadOnly => "read-only",
            ApprovalMode::AlwaysAsk => "always-ask",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<ApprovalMode> {
        ApprovalMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

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

/// `GET /api/sessions`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionList {
    /// Loaded sessions first (newest id first), then those only on disk.
    pub sessions: Vec<SessionInfo>,
}

/// `POST /api/sessions`.
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

/// `PATCH /api/sessions/:id`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchSessionRequest {
    /// A new approval mode.
    pub approval_mode: Option<ApprovalMode>,
    /// A new title.
    pub title: Option<String>,
}

/// One part of a task's input.
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

/// `POST /api/sessions/:id/tasks`.
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

/// `POST /steer`.
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

/// `POST /approvals/:toolCallId`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run the call.
    Allow,
    /// Deny it.
    Deny,
}

/// The body of `POST /approvals/:toolCallId`.
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
}

/// `GET /api/sessions/:id/processes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessList {
    /// Oldest first.
    pub processes: Vec<ProcessInfo>,
}
