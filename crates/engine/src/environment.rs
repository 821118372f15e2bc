use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use penguin_llm_providers::{CancellationToken, MessageSink};
use penguin_omni_protocol::background::{BackgroundKind, BackgroundTaskDone};
use penguin_omni_protocol::{
    ApprovalDecision, Frame, McpConnectResult, OmniMessage, ToolCall, ToolDefinition,
};

/// What a tool may do, for approval policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Reads only.
    Read,
    /// Reads and writes.
    ReadWrite,
}

/// One approved call handed to the Environment.
#[derive(Clone)]
pub struct ToolCallRequest {
    /// The complete `tool_call` message.
    pub call: OmniMessage,
    /// The user's interrupt.
    pub cancel: CancellationToken,
    /// The run's approver, so a tool that spawns a child session can pass it on.
    pub approver: Option<Arc<dyn Approver>>,
    /// The run's thinking level, inherited by child sessions.
    pub thinking_level: Option<penguin_llm_providers::ThinkingLevel>,
}

impl ToolCallRequest {
    /// The tool_call payload.
    pub fn tool_call(&self) -> &ToolCall {
        match self.call.model() {
            Some(penguin_omni_protocol::ModelPayload::ToolCall(tc)) => tc,
            _ => unreachable!("the engine only dispatches tool_call messages"),
        }
    }
}

impl fmt::Debug for ToolCallRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCallRequest")
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

/// The Environment, one of the protocol's five actors
/// ([§0.1](penguin_omni_protocol::spec#s0.1) *The five actors*): executes approved calls,
/// closing each out as [§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out* says.
///
/// Contract: `execute` streams the call's output into `sink` and ends with **exactly one**
/// complete `tool_call_output` for the call's id. It must not panic; if it does, or returns
/// without that output, the engine answers the call with a `failed` `[tool error]` output so
/// pairing still holds, first closing a `partial_tool_call_output` segment the tool left open
/// (the error as its last delta) so the fragments still concatenate to the output. Messages
/// carrying an `origin` (a child session's stream) are forwarded to the stream and never
/// recorded.
///
/// **The engine never gives [`Environment::tools`] to the model.** It uses them only to
/// dispatch and approve calls; the model offers whatever tools it was built with. A real
/// model needs them at construction, e.g. `ModelConfig::tools = env.tools()` for the HTTP
/// models of `penguin-llm-providers` (the facade's `Session::create_for_model` does that).
/// A model that never heard of a tool never calls it.
///
/// An `#[async_trait]` trait: the signatures rustdoc shows (`Pin<Box<dyn Future…>>`) are what
/// the attribute expands `async fn` to. Implement it with the same attribute, re-exported as
/// [`crate::async_trait`]; without it the compiler answers E0195 ("lifetime parameters … do
/// not match the trait declaration") on a signature that looks identical.
///
/// ```
/// use penguin_engine::{
///     async_trait, build, Environment, MessageSink, Permission, StopReason, ToolCallRequest,
///     ToolDefinition,
/// };
///
/// struct Clock;
///
/// #[async_trait]
/// impl Environment for Clock {
///     async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
///         let id = request.tool_call().tool_call_id.clone();
///         sink.emit(build::tool_call_output("12:00", id, StopReason::Completed)).await;
///     }
///
///     fn tools(&self) -> Vec<ToolDefinition> {
///         vec![ToolDefinition { name: "clock".into(), description: "The time.".into(), parameters: None }]
///     }
///
///     fn permission(&self, _tool: &str) -> Permission {
///         Permission::Read
///     }
/// }
/// ```
#[async_trait]
pub trait Environment: Send + Sync {
    /// Executes one approved call.
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink);

    /// The tools offered to the model.
    fn tools(&self) -> Vec<ToolDefinition>;

    /// What a tool may do; unknown tools are treated as read-write.
    fn permission(&self, name: &str) -> Permission;

    /// The servers whose tools are only known once connected (MCP), in config order. A
    /// session connects them before its first run and streams that phase as
    /// `mcp_connect_begin` / `mcp_connect_end`; empty (the default) means there is no phase.
    fn connect_servers(&self) -> Vec<String> {
        Vec::new()
    }

    /// Connects [`Environment::connect_servers`], each bounded by its own timeout, and returns
    /// one result per server; afterwards [`Environment::tools`] includes what they offer. A
    /// server that fails is a failed result, never an error. `None` when `cancel` fired
    /// first: the attempt is dropped (nothing stays connected) and the next call starts over.
    /// Once connected, a call returns the same results without connecting again.
    async fn connect(&self, _cancel: &CancellationToken) -> Option<Vec<McpConnectResult>> {
        Some(Vec::new())
    }

    /// The work this environment keeps running past its tool calls (background commands,
    /// background subagents), for the host to list, kill and hear from. `None`: it has none.
    fn background(&self) -> Option<Arc<dyn BackgroundWork>> {
        None
    }

    /// The tools whose calls [`Environment::grant_unsandboxed`] can let run outside the
    /// confinement (a sandbox) their commands run under; empty when it confines nothing. An
    /// approver offers "run this once unsandboxed" for these, and only these.
    fn unsandboxed_tools(&self) -> Vec<String> {
        Vec::new()
    }

    /// Lets `call` run once outside the confinement its commands run under: an approver
    /// offering "run this once unsandboxed" asks before allowing the call. `false` when nothing
    /// was granted: `call` is not of one of the [`Environment::unsandboxed_tools`].
    fn grant_unsandboxed(&self, _call: &ToolCall) -> bool {
        false
    }

    /// What `call` would change, computed without changing anything, for the person asked to
    /// approve it: an edit's unified diff, or why the call would fail. `None` (the default):
    /// nothing to show beyond the call's arguments. Never runs anything with effects.
    async fn preview(&self, _call: &ToolCall) -> Option<String> {
        None
    }
}

/// Where reports of settled background launches go.
pub type BackgroundListener = Arc<dyn Fn(BackgroundTaskDone) + Send + Sync>;

/// Where the live messages of background work go: a background subagent's stream,
/// origin-tagged. They bypass the engine (never recorded in the parent Trace), so the session
/// hands them to its host.
pub type BackgroundForward = Arc<dyn Fn(OmniMessage) + Send + Sync>;

/// One piece of background work, as a host lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackgroundTask {
    /// The handle the model uses (`process_id`, `subagent_id`).
    pub id: String,
    /// Command or subagent.
    pub kind: BackgroundKind,
    /// What runs: a command line, a subagent's task.
    pub label: String,
    /// Whether it still runs.
    pub running: bool,
    /// How it ended (`exit code 0`, ...), once it has.
    pub detail: Option<String>,
    /// The OS process (group) of a command.
    pub pid: Option<i32>,
    /// When it started, in milliseconds since the epoch, when known.
    pub started_at_ms: Option<u64>,
    /// Its latest lines of output, for a person to glance at (a command's).
    pub recent: Option<String>,
    /// The TCP ports it listens on (a dev server's), within what its sandbox lets it bind.
    pub ports: Vec<u16>,
}

/// Work an environment keeps running past its tool calls.
pub trait BackgroundWork: Send + Sync {
    /// Where reports of settled background launches go (the session turns them into harness
    /// notices); replaces an earlier listener.
    fn set_listener(&self, listener: BackgroundListener);

    /// Where the live messages of background work go; replaces an earlier one. Work that
    /// streams nothing (commands) ignores it.
    fn set_forward(&self, _forward: BackgroundForward) {}

    /// What runs, or has ended and not been collected yet.
    fn tasks(&self) -> Vec<BackgroundTask>;

    /// Ends one (a killed task sends no report); false when the id is unknown.
    fn kill(&self, id: &str) -> bool;

    /// Ends everything at once: the session is going away.
    fn kill_all(&self);
}

/// Why an approver could not answer. The engine logs it and denies the call (the reference's
/// "the approve callback threw").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The call carries no `tool_call_id`, so no answer could be matched to it.
    #[error("a tool call without tool_call_id cannot be approved")]
    MissingToolCallId,
    /// Whoever answers is gone (a closed terminal, a stopped server) or failed.
    #[error("{0}")]
    Unavailable(String),
}

/// Decides whether a tool call may run.
///
/// An `Err` is the reference's "the approve callback threw": the engine treats it as deny.
///
/// An `#[async_trait]` trait, like [`Environment`]: implement it with the attribute
/// re-exported as [`crate::async_trait`].
///
/// ```
/// use penguin_engine::{
///     async_trait, ApprovalDecision, ApprovalError, Approver, ModelPayload, OmniMessage,
/// };
///
/// /// Allows reads only.
/// struct ReadsOnly;
///
/// #[async_trait]
/// impl Approver for ReadsOnly {
///     async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
///         let read = matches!(call.model(), Some(ModelPayload::ToolCall(c)) if c.name == "read_file");
///         Ok(if read { ApprovalDecision::Allow } else { ApprovalDecision::Deny })
///     }
/// }
/// ```
#[async_trait]
pub trait Approver: Send + Sync {
    /// Answers for one complete `tool_call` message (carrying an origin when it comes from a
    /// child session).
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError>;

    /// The whole answer: the decision, and who decided and why when it was not the host (a
    /// hook), with the arguments the call runs with when they were rewritten. The engine asks
    /// this one; by default it is [`Approver::approve`]'s decision alone. An approver that
    /// wraps another forwards it, so the inner one's decider and reason are kept.
    async fn verdict(&self, call: &OmniMessage) -> Result<Verdict, ApprovalError> {
        self.approve(call).await.map(Verdict::from)
    }

    /// Asks a person about `call` whatever the approval mode would answer: a hook asked for
    /// one (`permissionDecision: "ask"`), which an allow-all mode must not answer in their
    /// place. `None` when nobody can answer here (a run without a terminal): the default, so
    /// only an approver that reaches a person says otherwise. An approver that wraps another
    /// forwards it.
    async fn ask_person(
        &self,
        _call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        None
    }
}

/// An approver's whole answer for one call ([`Approver::verdict`]), streamed and written as
/// its `approval_decision` ([§2.5](penguin_omni_protocol::spec#s2.5) *One turn*).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// allow, deny or forbidden.
    pub decision: ApprovalDecision,
    /// Who decided, when not the host: `hook:<command>`.
    pub decided_by: Option<String>,
    /// Why: a denial's synthetic output carries it to the model.
    pub reason: Option<String>,
    /// The arguments an allowed call runs with instead of the model's (JSON text).
    pub updated_arguments: Option<String>,
}

impl Verdict {
    /// `decision`, decided by `decided_by` for `reason`.
    pub fn by(
        decision: ApprovalDecision,
        decided_by: impl Into<String>,
        reason: Option<String>,
    ) -> Verdict {
        Verdict {
            decision,
            decided_by: Some(decided_by.into()),
            reason,
            updated_arguments: None,
        }
    }

    /// This verdict, with the call run on `arguments` (JSON text) instead of the model's.
    pub fn with_updated_arguments(mut self, arguments: Option<String>) -> Verdict {
        self.updated_arguments = arguments;
        self
    }
}

impl From<ApprovalDecision> for Verdict {
    fn from(decision: ApprovalDecision) -> Verdict {
        Verdict {
            decision,
            decided_by: None,
            reason: None,
            updated_arguments: None,
        }
    }
}

/// Allows every call (`penguin run --yes`, tests, trusted automation).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

#[async_trait]
impl Approver for AllowAll {
    async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        Ok(ApprovalDecision::Allow)
    }
}

/// How a session's tool calls are approved ([§5.6](penguin_omni_protocol::spec#s5.6) *Approvals*).
/// Read again at every approval, so a change takes effect on the next call.
///
/// Spelled in kebab-case on the wire: `"read-only"` (the default: calls of tools that change
/// nothing, reading, listing, searching and the plan, run; edits and commands are asked),
/// `"always-ask"`, `"allow-all"`, `"deny-all"`; in `POST /api/sessions` and `PATCH
/// /api/sessions/:id` as `{"approvalMode": "always-ask"}`. It lives here, below the server and
/// the session layer, so a host without the server (and `config.toml`'s `[session] approval`)
/// names the same modes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Every call runs.
    AllowAll,
    /// Every call is denied.
    DenyAll,
    /// Calls of read-only tools run; the rest (edits, commands, tools that may change
    /// something) are asked. The default: asking before a read or a plan update protects
    /// nothing the sandbox does not, and a one-line fix should not take six approvals.
    #[default]
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

    /// What the mode asks and what it lets run, in a person's words (a session line, a
    /// mode picker).
    pub fn describe(self) -> &'static str {
        match self {
            ApprovalMode::AllowAll => "every tool call runs without asking",
            ApprovalMode::DenyAll => "every tool call is denied",
            ApprovalMode::ReadOnly => {
                "asks before edits and commands; reads, searches and plans run"
            }
            ApprovalMode::AlwaysAsk => "asks before every tool call",
        }
    }
}

/// Denies every call: a run that must not run tools ([`RunOptions::new`](crate::RunOptions::new)
/// takes it where a host has nobody to ask). The model gets the protocol's denial output.
#[derive(Clone, Copy, Debug, Default)]
pub struct DenyAll;

#[async_trait]
impl Approver for DenyAll {
    async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        Ok(ApprovalDecision::Deny)
    }
}

/// Where the engine records the Trace.
///
/// `record` is called at the moment a message enters the run's queue, under the queue's
/// lock, so it must not block: hand the frame to a writer thread or buffer it. The engine
/// hands over only recordable messages (no partials, no origin-tagged messages). A failing
/// sink reports its failure its own way and never stops the engine.
///
/// `penguin-trace-store`'s `Writer` is one with that crate's `engine` feature: pass
/// `Some(Arc::new(writer))` to [`Engine::with_parts`](crate::Engine::with_parts). The engine
/// writes the prompt and what follows, never the `session_meta` a file starts with: write it
/// first yourself (see `penguin_trace_store::Writer`), or a later resume fails.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `TraceSink`",
    note = "penguin-trace-store's `Writer` is one only with that crate's `engine` feature: `penguin-trace-store = {{ version = \"0.1\", features = [\"engine\"] }}`"
)]
pub trait TraceSink: Send + Sync {
    /// Records one message.
    fn record(&self, frame: &Frame);

    /// Starts the next file: the context so far was compacted. Later records go to the new
    /// file; a record is never split. Sinks without files ignore it.
    fn rotate(&self) {}
}
