//! Sessions: an engine, its Trace, and the session's invariants (`session_meta`).
//!
//! A session's first run (in each process that loads it) yields `tool_list_ready` before
//! anything else and writes `session_meta` to the Trace before anything else; the engine writes
//! the prompt, then the owed `tool_list_ready`, then the turn.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::stream::{self, BoxStream, StreamExt};
use penguin_engine::{
    CancellationToken, Counters, Engine, EngineBusy, EngineConfig, Environment, InitialState, Llm,
    RunOptions, TraceSink,
};
use penguin_omni_protocol::{build, ContextWindow, Frame, OmniMessage, SessionMeta};
use penguin_tools::policy::CommandPolicy;
use penguin_tools::Sandbox;
use penguin_trace_store::{
    new_session_id, resume_session, Durability, Resumed, TraceError, TraceLocation, Writer,
};

/// What a host runs when a background notice arrives.
pub type NoticeHook = Arc<std::sync::Mutex<Option<Arc<dyn Fn() + Send + Sync>>>>;

/// What a host runs with each live message of the session's background work.
pub type BackgroundMessageHook = Arc<dyn Fn(OmniMessage) + Send + Sync>;

type MessageHook = Arc<std::sync::Mutex<Option<BackgroundMessageHook>>>;

/// Routes the reports of the environment's background work to the engine as harness notices
/// (delivered at the running task's next input assembly, or with the next run), then tells
/// the host, which may start a task for them while the session is idle; and routes the live
/// messages of background subagents to the host, past the engine (so never into the Trace).
fn route_background(engine: &Engine, env: &Arc<dyn Environment>) -> (NoticeHook, MessageHook) {
    let hook: NoticeHook = Arc::default();
    let messages: MessageHook = Arc::default();
    if let Some(background) = env.background() {
        // Weak: the listener lives in the environment the engine owns.
        let (engine, hook) = (engine.notifier(), Arc::downgrade(&hook));
        background.set_listener(Arc::new(move |done| {
            if !engine.notify(done.notice()) {
                return;
            }
            let Some(hook) = hook.upgrade() else {
                return;
            };
            let host = hook.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(host) = host {
                host();
            }
        }));
        let host = Arc::downgrade(&messages);
        background.set_forward(Arc::new(move |msg| {
            // Display copies: with no host listening they are dropped (the child's own Trace
            // keeps them).
            let Some(host) = host.upgrade() else {
                return;
            };
            let host = host.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(host) = host {
                host(msg);
            }
        }));
    }
    (hook, messages)
}

/// The trace-store writer as the engine's trace sink.
#[derive(Clone, Debug)]
pub struct WriterSink(pub Writer);

impl TraceSink for WriterSink {
    fn record(&self, frame: &Frame) {
        self.0.record(frame);
    }

    fn rotate(&self) {
        self.0.rotate();
    }
}

/// What a new session is made of.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// Where traces live (data root, project, agent).
    pub location: TraceLocation,
    /// Provider group recorded in `session_meta.provider`.
    pub provider: String,
    /// Upstream model id.
    pub model_id: String,
    /// The model's context window, when known.
    pub context_window: Option<u64>,
    /// The fully assembled system prompt.
    pub system_prompt: String,
    /// The workspace the tools act on.
    pub workspace: PathBuf,
    /// `subagent` or `schedule`; `None` for a user-created session.
    pub source: Option<String>,
    /// When the Trace is fsynced.
    pub durability: Durability,
    /// Engine settings.
    pub engine: EngineConfig,
}

/// A session could not be created or resumed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The Trace could not be opened or read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The workspace of a resumed session is gone.
    #[error("the session's workspace {0} no longer exists")]
    WorkspaceMissing(String),
    /// No model could be picked for the session.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Building the model failed.
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    /// The session's tools could not be built.
    #[error("tools: {0}")]
    Tools(String),
}

/// One session: a conversation with its Trace.
pub struct Session {
    id: String,
    meta: OmniMessage,
    tool_list: OmniMessage,
    engine: Engine,
    writer: Writer,
    meta_written: bool,
    announced: bool,
    policy: CommandPolicy,
    env: Arc<dyn Environment>,
    // Called after a background notice was queued: an idle host starts a task for it.
    notice_hook: NoticeHook,
    message_hook: MessageHook,
    sandbox: Option<Sandbox>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("engine", &self.engine)
            .finish()
    }
}

fn agent_state_dir(location: &TraceLocation) -> String {
    location
        .root
        .join(&location.project)
        .join("agents")
        .join(&location.agent)
        .join("agent_state")
        .display()
        .to_string()
}

impl Session {
    /// Creates a new session. Nothing is written until the first run.
    pub fn create(
        spec: SessionSpec,
        llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
    ) -> Result<Session, SessionError> {
        let id = new_session_id();
        let writer = Writer::create(&spec.location, &id, spec.durability)?;
        let meta = build::session_meta(SessionMeta {
            session_id: id.clone(),
            provider: spec.provider,
            model_id: spec.model_id,
            model_context_window: spec.context_window.map_or(
                ContextWindow::Other("unknown".into()),
                ContextWindow::Tokens,
            ),
            system_prompt: spec.system_prompt,
            agent_state: agent_state_dir(&spec.location),
            workspace: absolute(&spec.workspace),
            source: spec.source,
        });
        let tool_list = build::tool_list_ready(env.tools());
        let initial = InitialState {
            bootstrap_records: vec![tool_list.clone()],
            ..InitialState::default()
        };
        let engine = Engine::with_parts(
            llm,
            env.clone(),
            spec.engine,
            Some(Arc::new(WriterSink(writer.clone()))),
            initial,
        );
        engine.set_context_head(meta.clone(), Some(tool_list.clone()));
        let (notice_hook, message_hook) = route_background(&engine, &env);
        Ok(Session {
            id,
            meta,
            tool_list,
            engine,
            writer,
            notice_hook,
            message_hook,
            meta_written: false,
            announced: false,
            policy: Default::default(),
            env,
            sandbox: None,
        })
    }

    /// Reads a session's newest trace file and what resuming it gives, without building
    /// anything: the caller picks the model from `resumed.meta` and then calls
    /// [`Session::resume`].
    pub fn load(
        location: &TraceLocation,
        session_id: &str,
        durability: Durability,
    ) -> Result<(Resumed, Writer), SessionError> {
        let r = resume_session(location, session_id, durability)?;
        if let Some(meta) = &r.resumed.meta {
            if !Path::new(&meta.workspace).is_dir() {
                return Err(SessionError::WorkspaceMissing(meta.workspace.clone()));
            }
        }
        Ok((r.resumed, r.writer))
    }

    /// Continues a loaded session: appends to the same trace file; the next run sends the
    /// rebuilt carry-over before its prompt.
    pub fn resume(
        resumed: Resumed,
        writer: Writer,
        engine_config: EngineConfig,
        llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
    ) -> Result<Session, SessionError> {
        let meta_payload = resumed
            .meta
            .clone()
            .ok_or_else(|| TraceError::MissingMeta {
                path: writer.current_path(),
            })?;
        let meta = build::session_meta(meta_payload);
        let tool_list = build::tool_list_ready(env.tools());
        let initial = InitialState {
            carry_over: resumed.carry_over,
            pending_summary: resumed.pending_summary,
            counters: Counters {
                session_turns: resumed.session_turns,
                last_request_total: resumed.last_request_total,
                session_tokens: resumed.session_tokens,
            },
            bootstrap_records: vec![tool_list.clone()],
            // A compacted context's file is finished: the first write starts the next one
            // (so merely loading a session never writes).
            pending_trace_rotation: resumed.context_closed,
            from_compaction: resumed.context_closed,
        };
        let engine = Engine::with_parts(
            llm,
            env.clone(),
            engine_config,
            Some(Arc::new(WriterSink(writer.clone()))),
            initial,
        );
        engine.set_context_head(meta.clone(), Some(tool_list.clone()));
        let id = meta
            .session_meta()
            .map(|m| m.session_id.clone())
            .unwrap_or_default();
        let (notice_hook, message_hook) = route_background(&engine, &env);
        Ok(Session {
            id,
            meta,
            tool_list,
            engine,
            writer,
            notice_hook,
            message_hook,
            meta_written: true,
            announced: false,
            policy: Default::default(),
            env,
            sandbox: None,
        })
    }

    /// Starts a run. The first run of this load yields `tool_list_ready` first.
    pub fn run(
        &mut self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        // The command policy sits in front of whatever approver the host brings.
        let options = RunOptions {
            approver: self.policy.wrap(options.approver),
            ..options
        };
        if !self.meta_written {
            self.writer.record_message(self.meta.clone());
            self.meta_written = true;
        }
        let stream = self.engine.run(input, options)?;
        let head: Vec<Frame> = if self.announced {
            Vec::new()
        } else {
            vec![Frame::new(self.tool_list.clone())]
        };
        self.announced = true;
        Ok(stream::iter(head).chain(stream).boxed())
    }

    /// Lets the engine compact this session's context, building each new context's model from
    /// `spec` (the session's system prompt and tools). Compaction also needs
    /// `EngineConfig::compaction`.
    pub fn enable_compaction(&self, spec: &crate::models::ModelSpec) {
        let system_prompt = self
            .meta
            .session_meta()
            .map(|m| m.system_prompt.clone())
            .unwrap_or_default();
        let tools = match self.tool_list.event() {
            Some(penguin_omni_protocol::EventPayload::ToolListReady { tools }) => tools.clone(),
            _ => Vec::new(),
        };
        self.engine
            .enable_compaction(crate::models::llm_factory(spec, system_prompt, tools));
    }

    /// Compacts the context now, as a task with its own stream (empty when there is nothing
    /// to compact; see `engine().compactability()`).
    pub fn compact(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        if self.engine.compactability() != penguin_engine::Compactability::Ok {
            // Nothing to do: write nothing either (a fresh session keeps no empty trace file).
            return Ok(stream::empty().boxed());
        }
        if !self.meta_written {
            self.writer.record_message(self.meta.clone());
            self.meta_written = true;
        }
        Ok(self.engine.compact(cancel)?.boxed())
    }

    /// Sets the commands this session never runs (answered `forbidden` without asking).
    pub fn set_command_policy(&mut self, policy: CommandPolicy) {
        self.policy = policy;
    }

    /// Records the sandbox its tools confine commands with, for status displays. The tools
    /// enforce it; this only says what it is.
    pub fn set_sandbox(&mut self, sandbox: Sandbox) {
        self.sandbox = Some(sandbox);
    }

    /// The sandbox its commands run under, when its tools have one.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The session's `session_meta` message.
    pub fn meta(&self) -> &OmniMessage {
        &self.meta
    }

    /// The engine: steer, skip a reconnect wait, read counters.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The Trace writer (flush, failure counters).
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// The session's tools.
    pub fn environment(&self) -> &Arc<dyn Environment> {
        &self.env
    }

    /// Runs `hook` after each background notice is queued (on the thread that settled the
    /// work): an idle host starts a task with [`Engine::take_notices`]; a running task
    /// delivers them itself.
    pub fn on_notice(&self, hook: Arc<dyn Fn() + Send + Sync>) {
        *self.notice_hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// Runs `hook` with each live message of the session's background work (a background
    /// subagent's stream, origin-tagged), on the task that produced it. These messages bypass
    /// the engine: they are in no run's stream and never in this session's Trace (the child's
    /// own Trace keeps them), so a host that shows them publishes them itself. One hook; a
    /// later call replaces it.
    pub fn on_background_message(&self, hook: BackgroundMessageHook) {
        *self.message_hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }
}

fn absolute(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}
