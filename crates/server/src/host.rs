//! The seam between the server and whoever builds sessions: [`SessionFactory`] makes
//! [`HostedSession`]s, the server owns everything else (ids, channels, approvals, follow-ups).
//!
//! The server never builds a model or a tool itself, so it compiles without any provider, and
//! a scripted factory (tests, `penguin serve --provider scripted`) plugs in like a real one.

use std::path::PathBuf;
use std::sync::Arc;

use futures::stream::BoxStream;
use penguin_engine::{CancellationToken, Engine, EngineBusy, Environment, RunOptions};
use penguin_omni_protocol::{Frame, OmniMessage, SessionMeta};
use penguin_trace_store::{Durability, TraceLocation, Writer};

use crate::api::{SandboxInfo, SandboxSettings};

/// A session as the server drives it: an engine with its Trace.
pub trait HostedSession: Send + 'static {
    /// The session id.
    fn id(&self) -> &str;

    /// The session's `session_meta` payload.
    fn meta(&self) -> &SessionMeta;

    /// Starts a run (the session writes `session_meta` and owed bootstrap records first).
    fn run(
        &mut self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy>;

    /// Compacts the context now, as a task with its own stream.
    fn compact(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy>;

    /// The engine: steering, reconnect skips, compactability.
    fn engine(&self) -> &Engine;

    /// The Trace writer: flushes and failure counters.
    fn writer(&self) -> &Writer;

    /// The session's tools, consulted for `read-only` approvals.
    fn environment(&self) -> Arc<dyn Environment>;

    /// Runs `hook` after each background notice is queued on the engine, so an idle session
    /// can start a task carrying it. Sessions without background work never call it.
    fn on_notice(&self, _hook: Arc<dyn Fn() + Send + Sync>) {}

    /// Runs `hook` with each live message of the session's background work (a background
    /// subagent's stream, origin-tagged): no run's stream carries these and the Trace never
    /// holds them, so the server publishes them itself. Sessions without such work never
    /// call it.
    fn on_background_message(&self, _hook: Arc<dyn Fn(OmniMessage) + Send + Sync>) {}

    /// The sandbox its commands run under, when its tools have one.
    fn sandbox(&self) -> Option<SandboxInfo> {
        None
    }

    /// Its workspace's files as before task `to` (counted from 1 as a fork counts them):
    /// what a rewind would change, and with `apply` the change made (the paths changed
    /// between its tasks, `yours`, only `with_yours`). `None` (the default):
    /// the session keeps no checkpoints; `Some(Err)` says why this rewind cannot be made.
    fn rewind_files(
        &self,
        _to: usize,
        _apply: bool,
        _with_yours: bool,
    ) -> Option<Result<crate::api::RewindFiles, String>> {
        None
    }

    /// Its workspace's files as a person browses them (`GET …/files`, `…/files/content`,
    /// `…/files/changes`), every path confined as the session's file tools confine theirs
    /// and `data_root` (the server's: traces, token) never shown, wherever it lies. `None`
    /// (the default): this session offers no files.
    fn files(&self, _data_root: &std::path::Path) -> Option<Arc<dyn WorkspaceFiles>> {
        None
    }

    /// Runs `input` in goal mode: rounds on this session until the model declares the
    /// objective complete or blocked (or a `budget` of tokens, a round limit or an abort ends
    /// it). The stream carries each round's input itself and ends with one `goal_finished`.
    /// Sessions without goal mode refuse with [`GoalRefusal::Unsupported`] (the default).
    fn run_goal(
        &mut self,
        _input: Vec<OmniMessage>,
        _budget: Option<u64>,
        _options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, GoalRefusal> {
        Err(GoalRefusal::Unsupported)
    }

    /// What the session runs as it leaves this server (its `session_end` hooks), `reason`
    /// saying why: `unload` (idle, unloaded; a later request loads it again), `delete`, or
    /// `exit` (the server shuts down). The server asks once per load, after the session's last
    /// task, and awaits the future (at shutdown, before the process ends). The default runs
    /// nothing.
    fn end(&self, _reason: &str) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    /// The session's latest goal as `GET /api/sessions/{id}/goal` shows it (`objective`,
    /// `status`, `budget`, `used`, `rounds`, `updatedAt`), `None` when it never had one.
    fn goal(&self) -> Option<serde_json::Value> {
        None
    }
}

/// A session's workspace, read for a person ([`HostedSession::files`]). Called on a blocking
/// thread. Every path is relative to the workspace (or absolute within it) and must be
/// confined as the file tools confine theirs: no `..`, absolute path, link or race may lead
/// out of the workspace or into penguin's data root.
pub trait WorkspaceFiles: Send + Sync {
    /// The entries of the folder `path` (`""`: the workspace's root).
    fn list(&self, path: &str) -> Result<crate::api::FileListing, FilesError>;

    /// The regular file `path`, opened to be read (its handle is what is served).
    fn open(&self, path: &str) -> Result<OpenFile, FilesError>;

    /// The files the session changed, with their diffs.
    fn changes(&self) -> Result<crate::api::FileChanges, FilesError>;
}

/// A file of a workspace, opened by [`WorkspaceFiles::open`].
#[derive(Debug)]
pub struct OpenFile {
    /// Relative to the workspace, links resolved.
    pub path: String,
    /// Open to read.
    pub file: std::fs::File,
    /// Bytes, when opened.
    pub size: u64,
}

/// Why a workspace's file cannot be shown: one variant per answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// The path leads out of the workspace or into penguin's own state (answered 400
    /// `path_refused`); the message says which, and how.
    #[error("{0}")]
    Refused(String),
    /// Nothing is there (answered 404 `file_not_found`).
    #[error("{0}")]
    NotFound(String),
    /// Something is there but not what was asked (answered 400 `not_a_directory` or
    /// `not_a_file`).
    #[error("{0}")]
    WrongKind(String),
    /// The session keeps no checkpoints, so what it changed is not known (answered 409
    /// `no_checkpoints`).
    #[error("{0}")]
    NoCheckpoints(String),
    /// Anything else (answered 500).
    #[error("{0}")]
    Internal(String),
}

/// The body of `POST /api/sessions`, after validation, plus where the trace must live.
#[derive(Clone, Debug)]
pub struct CreateSession {
    /// `provider` of the request, when given.
    pub provider: Option<String>,
    /// `model` of the request, when given.
    pub model: Option<String>,
    /// `workspace` of the request, when given.
    pub workspace: Option<PathBuf>,
    /// `sandbox` of the request, when given (the factory validates it).
    pub sandbox: Option<SandboxSettings>,
    /// `mcpServers` of the request: MCP servers this session adds (the factory validates them).
    pub mcp_servers: Vec<serde_json::Value>,
    /// Where the session's Trace must live: the server reads history from there.
    pub location: TraceLocation,
    /// The server's durability policy.
    pub durability: Durability,
}

/// A session found on disk that this process has not loaded yet.
#[derive(Clone, Debug)]
pub struct LoadSession {
    /// Where its Trace lives. It knows the session's newest file, as the server's index found
    /// it ([`TraceLocation::known_trace`]), so `penguin_trace_store::resume_session` opens that
    /// file instead of reading every date directory.
    pub location: TraceLocation,
    /// Its id (already checked to name an existing trace).
    pub session_id: String,
    /// The sandbox it was created with, when it asked for one.
    pub sandbox: Option<SandboxSettings>,
    /// The `mcpServers` it was created with.
    pub mcp_servers: Vec<serde_json::Value>,
    /// The server's durability policy.
    pub durability: Durability,
}

/// An error of a factory's own making, carried as it is by [`FactoryError`] (downcast it to
/// the factory's type to tell its cases apart).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a factory could not give a session: one variant per answer of the API.
///
/// ```
/// use penguin_server::FactoryError;
///
/// let e = FactoryError::invalid_request("workspace", "/nowhere is not an existing directory");
/// assert_eq!(e.to_string(), "workspace: /nowhere is not an existing directory");
/// let e = FactoryError::internal(std::io::Error::other("disk full"));
/// assert!(matches!(&e, FactoryError::Internal(source) if source.is::<std::io::Error>()));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FactoryError {
    /// The request asked for something this factory does not offer (answered 400
    /// `invalid_request`).
    #[error("{field}: {reason}")]
    InvalidRequest {
        /// The request's field at fault, as the API spells it: `provider`, `workspace`,
        /// `sandbox.mode`, `mcpServers[0]`.
        field: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// The stored session's workspace is gone (answered 409 `workspace_missing`).
    #[error("the session's workspace {0} no longer exists")]
    WorkspaceMissing(String),
    /// The stored session cannot be continued here (answered 409 `session_unrecoverable`):
    /// the factory's error, e.g. a trace that does not resume, or a model this server does not
    /// serve.
    #[error(transparent)]
    Unrecoverable(BoxError),
    /// Anything else (answered 500): the factory's error, e.g. a trace that cannot be created.
    #[error(transparent)]
    Internal(BoxError),
}

impl FactoryError {
    /// [`FactoryError::InvalidRequest`] for `field`.
    pub fn invalid_request(field: impl Into<String>, reason: impl Into<String>) -> FactoryError {
        FactoryError::InvalidRequest {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// [`FactoryError::Unrecoverable`] carrying `source` (any error, or a message).
    pub fn unrecoverable(source: impl Into<BoxError>) -> FactoryError {
        FactoryError::Unrecoverable(source.into())
    }

    /// [`FactoryError::Internal`] carrying `source` (any error, or a message).
    pub fn internal(source: impl Into<BoxError>) -> FactoryError {
        FactoryError::Internal(source.into())
    }
}

/// Why a session did not start a goal ([`HostedSession::run_goal`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GoalRefusal {
    /// This session has no goal mode.
    #[error("this server's sessions have no goal mode")]
    Unsupported,
    /// A task or goal is running.
    #[error(transparent)]
    Busy(#[from] EngineBusy),
    /// The input is no objective (empty, or not text), or its GOAL.yaml cannot be written.
    #[error("{0}")]
    Invalid(String),
}

/// Why a change to the models, a test or a listing was refused: one variant per answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelsError {
    /// This factory's models are not configured in a file it may change (answered 501
    /// `models_not_editable`).
    #[error("this server's models are not read from a config.toml it can change")]
    NotEditable,
    /// A field's value cannot be used (answered 400 `invalid_field`).
    #[error("{field}: {reason}")]
    Invalid {
        /// The field, as the API spells it (`name`, `protocol`, `baseUrl`, `model`,
        /// `apiKeyEnv`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No configured model of that name (answered 404 `model_not_found`).
    #[error("{0}")]
    NotFound(String),
    /// `POST` of a name already configured (answered 409 `model_exists`).
    #[error("{0}")]
    Exists(String),
    /// The endpoint could not be asked for its models (answered 502 `endpoint_unreachable`).
    #[error("{0}")]
    Unreachable(String),
    /// Anything else, e.g. `config.toml` cannot be read or written (answered 500).
    #[error(transparent)]
    Internal(BoxError),
}

/// Builds the sessions a server hosts.
pub trait SessionFactory: Send + Sync {
    /// A new session. Nothing needs to be written before its first run.
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError>;

    /// A session from its Trace (after a restart, or after it was unloaded).
    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError>;

    /// The models a request may name (`GET /api/models`, the web app's model list), the
    /// default first. Empty (the default) when the factory takes no model names.
    fn models(&self) -> Vec<crate::api::ModelChoice> {
        Vec::new()
    }

    /// The skills a session working in `workspace` is offered (`GET /api/sessions/{id}/skills`),
    /// each as the factory describes it (at least `name` and `description`). Empty by default.
    fn skills(&self, _workspace: &std::path::Path) -> Vec<serde_json::Value> {
        Vec::new()
    }

    /// The agent's memory: its scopes and their notes (`GET /api/memory`). Empty by default.
    fn memory(&self) -> Vec<serde_json::Value> {
        Vec::new()
    }

    /// What `tokens` of `model_id` (served by the adapter `provider`) cost, in dollars
    /// (`GET /api/usage`); `None` (the default) when the model has no price.
    fn cost(
        &self,
        _provider: &str,
        _model_id: &str,
        _tokens: &penguin_omni_protocol::TokenCounts,
    ) -> Option<f64> {
        None
    }

    /// The price of `model_id` as the factory describes it (`GET /api/price`: dollars per
    /// million tokens, `{input, cachedInput, cacheWrite, output}`); `None` by default.
    fn price(&self, _provider: &str, _model_id: &str) -> Option<serde_json::Value> {
        None
    }

    /// Changes the configured models (`POST`, `PUT`, `DELETE /api/models`); [`SessionFactory::models`]
    /// answers with the change from then on. Called on a blocking thread: it may write files.
    /// Refused ([`ModelsError::NotEditable`]) by default.
    fn edit_models(&self, _edit: &crate::api::ModelEdit) -> Result<(), ModelsError> {
        Err(ModelsError::NotEditable)
    }

    /// Tries the model named `name` with one-line requests (`POST /api/models/test`): the
    /// report as the factory writes it. Refused by default.
    fn test_model(
        &self,
        _name: &str,
    ) -> futures::future::BoxFuture<'static, Result<serde_json::Value, ModelsError>> {
        Box::pin(async { Err(ModelsError::NotEditable) })
    }

    /// The model ids the endpoint of `fields` lists (`POST /api/models/discover`). Refused by
    /// default.
    fn endpoint_models(
        &self,
        _fields: &crate::api::ModelFields,
    ) -> futures::future::BoxFuture<'static, Result<Vec<String>, ModelsError>> {
        Box::pin(async { Err(ModelsError::NotEditable) })
    }
}
