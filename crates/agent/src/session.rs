//! Sessions: an engine, its Trace, and the session's invariants (`session_meta`).
//!
//! A session's first run (in each process that loads it) yields `tool_list_ready` before
//! anything else and writes `session_meta` to the Trace before anything else; the engine writes
//! the prompt, then the owed `tool_list_ready`, then the turn.
//!
//! # The connect phase (MCP)
//!
//! When the session's tools have servers to connect ([`Environment::connect_servers`]), the first
//! run streams `mcp_connect_begin`, connects, then streams `mcp_connect_end` and the resulting
//! `tool_list_ready` before the engine's turn, and the Trace holds the three right after the run's
//! input ([§2.14](penguin_omni_protocol::spec#s2.14) *The session layer*). The engine is not
//! changed for this: it was built owing its `tool_list_ready` after the first input, and the
//! session's trace sink writes the connect pair and the real tool list in that record's place, so
//! they land exactly where the engine's ordering puts its bootstrap records. A model built before
//! the tools were known is rebuilt for them (see [`Session::set_model_rebuild`]) and takes over at
//! the first request.
//!
//! An interrupt during the connect ends the run with `mcp_connect_end(aborted)` and
//! `abort("user")`; the session writes the input, the pair and the abort itself (the engine has
//! not run), keeps the input for the next run, which connects again, and makes sure the engine
//! does not write that input a second time.

#[cfg(feature = "tools")]
mod checkpoints;
mod connect;
#[cfg(feature = "server")]
mod files;
mod fork;

pub use penguin_trace_store::{ForkError, ForkPoint, Forked};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::stream::{self, BoxStream, StreamExt};
use penguin_engine::{
    CancellationToken, Engine, EngineBusy, EngineConfig, Environment, InitialState, Llm, RunOptions,
};
use penguin_omni_protocol::{build, ContextWindow, Frame, OmniMessage, SessionMeta};
use penguin_tools::policy::CommandPolicy;
#[cfg(feature = "tools")]
use penguin_tools::Sandbox;
use penguin_trace_store::{
    new_session_id, resume_session, Durability, Resumed, TraceError, TraceLocation, Writer,
};

pub use crate::models::ModelRebuild;
use connect::{tools_of, Boot, ConnectPhase, Connecting, Owed, SessionSink, SwapLlm};

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a new session is made of: where its Trace goes and the workspace its tools act on,
/// then whatever differs from the defaults, set with the `with_` methods.
///
/// ```
/// use penguin_agent::session::SessionSpec;
/// use penguin_trace_store::{Durability, TraceLocation};
///
/// let location = TraceLocation::new("/tmp/penguin-data", "default", "penguin");
/// let spec = SessionSpec::new(location, "/tmp/project")
///     .with_model("scripted", "scenario")
///     .with_system_prompt("You are terse.")
///     .with_durability(Durability::Never);
/// assert_eq!(spec.model_id, "scenario");
/// assert_eq!(spec.source, None);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionSpec {
    /// Where traces live (data root, project, agent).
    pub location: TraceLocation,
    /// Provider group recorded in `session_meta.provider` (empty by default; a session built
    /// for a [`ModelSpec`](crate::models::ModelSpec) takes the model's).
    pub provider: String,
    /// Upstream model id (empty by default, as `provider`).
    pub model_id: String,
    /// The model's context window, when known (unknown by default).
    pub context_window: Option<u64>,
    /// The fully assembled system prompt (empty by default).
    pub system_prompt: String,
    /// The workspace the tools act on.
    pub workspace: PathBuf,
    /// `subagent` or `schedule`; `None` (the default) for a user-created session.
    pub source: Option<String>,
    /// When the Trace is fsynced ([`Durability::default`] by default).
    pub durability: Durability,
    /// Engine settings ([`EngineConfig::default`] by default).
    pub engine: EngineConfig,
}

impl SessionSpec {
    /// A session writing its Trace under `location`, its tools acting on `workspace`, every
    /// other field at its default.
    pub fn new(location: TraceLocation, workspace: impl Into<PathBuf>) -> SessionSpec {
        SessionSpec {
            location,
            provider: String::new(),
            model_id: String::new(),
            context_window: None,
            system_prompt: String::new(),
            workspace: workspace.into(),
            source: None,
            durability: Durability::default(),
            engine: EngineConfig::default(),
        }
    }

    /// This spec with `session_meta`'s `provider` and `model_id`.
    pub fn with_model(
        mut self,
        provider: impl Into<String>,
        model_id: impl Into<String>,
    ) -> SessionSpec {
        self.provider = provider.into();
        self.model_id = model_id.into();
        self
    }

    /// This spec with the model's context window (`None`: unknown).
    pub fn with_context_window(mut self, tokens: Option<u64>) -> SessionSpec {
        self.context_window = tokens;
        self
    }

    /// This spec with `prompt` as the system prompt.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> SessionSpec {
        self.system_prompt = prompt.into();
        self
    }

    /// This spec with `source` (`subagent`, `schedule`; `None`: a user-created session).
    pub fn with_source(mut self, source: Option<String>) -> SessionSpec {
        self.source = source;
        self
    }

    /// This spec with the Trace fsynced as `durability` says.
    pub fn with_durability(mut self, durability: Durability) -> SessionSpec {
        self.durability = durability;
        self
    }

    /// This spec with `engine` as the engine's settings.
    pub fn with_engine(mut self, engine: EngineConfig) -> SessionSpec {
        self.engine = engine;
        self
    }
}

/// A session could not be created or resumed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The session's tools could not be built: the tool builder's own error (an embedder's
    /// `make_env`, a subagent spawner).
    #[error("tools: {0}")]
    Tools(#[source] ToolsError),
}

/// Why a session's tools could not be built: whatever error the caller's tool builder gave.
pub type ToolsError = Box<dyn std::error::Error + Send + Sync>;

/// One session: a conversation with its Trace.
pub struct Session {
    id: String,
    /// `session_meta`, as written to the Trace and given to the engine as the context head.
    meta: OmniMessage,
    /// The same, typed.
    session_meta: SessionMeta,
    /// The session's `tool_list_ready`: the one the engine owes until a connect replaces it.
    tool_list: Arc<Mutex<OmniMessage>>,
    engine: Engine,
    writer: Writer,
    sink: Arc<SessionSink>,
    next_llm: Arc<Mutex<Option<Box<dyn Llm>>>>,
    boot: Arc<Mutex<Boot>>,
    meta_written: bool,
    /// The session goes on on another model than its Trace's head names: the next run
    /// writes a `session_meta` naming it first.
    meta_changed: bool,
    policy: CommandPolicy,
    env: Arc<dyn Environment>,
    // Called after a background notice was queued: an idle host starts a task for it.
    notice_hook: NoticeHook,
    message_hook: MessageHook,
    #[cfg(feature = "tools")]
    sandbox: Option<Sandbox>,
    /// Where the workspace's checkpoint before each task goes, when enabled.
    #[cfg(feature = "tools")]
    checkpoints: Option<checkpoints::Checkpoints>,
    /// The user's programs at the session's decision points, once set.
    #[cfg(feature = "tools")]
    hooks: Option<crate::hooks::Hooks>,
    /// Where the engine's tools find them (`post_tool_use`).
    #[cfg(feature = "tools")]
    hook_slot: crate::hooks::HookSlot,
    /// The last goal run of this load.
    goal: crate::goal::SharedGoalState,
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
        Session::create_with_id(spec, new_session_id(), llm, env)
    }

    /// [`Session::create`] under an id chosen beforehand (a new one).
    fn create_with_id(
        spec: SessionSpec,
        id: String,
        llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
    ) -> Result<Session, SessionError> {
        let writer = Writer::create(&spec.location, &id, spec.durability)?;
        let meta = SessionMeta {
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
            forked_from: None,
        };
        let initial = InitialState::default();
        Ok(Session::assemble(
            meta,
            writer,
            spec.engine,
            llm,
            env,
            initial,
            false,
        ))
    }

    /// Reads a session's newest trace file and what resuming it gives, without building
    /// anything: the caller picks the model from `resumed.meta` and then calls
    /// [`Session::resume`]. A trace without a `session_meta` fails
    /// ([`TraceError::MissingMeta`]), as does a session whose workspace is gone
    /// ([`SessionError::WorkspaceMissing`]).
    pub fn load(
        location: &TraceLocation,
        session_id: &str,
        durability: Durability,
    ) -> Result<(Resumed<SessionMeta>, Writer), SessionError> {
        let r = resume_session(location, session_id, durability)?;
        if !Path::new(&r.resumed.meta.workspace).is_dir() {
            return Err(SessionError::WorkspaceMissing(r.resumed.meta.workspace));
        }
        Ok((r.resumed, r.writer))
    }

    /// Continues a loaded session: appends to the same trace file; `llm` is given the
    /// committed history ([`Llm::set_history`]) and the next run sends the rebuilt
    /// carry-over before its prompt.
    pub fn resume(
        mut resumed: Resumed<SessionMeta>,
        writer: Writer,
        engine_config: EngineConfig,
        mut llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
    ) -> Result<Session, SessionError> {
        // The model holds the conversation (in its wire form), the engine the rest.
        let history = std::mem::take(&mut resumed.history);
        // A goal's rounds are in the conversation; its state is rebuilt from the whole file.
        let had_goal = history.iter().any(|m| crate::goal::round_of(m).is_some());
        if !history.is_empty() {
            llm.set_history(&history);
        }
        // Free the rebuilt messages on another thread (a long session's are tens of thousands,
        // milliseconds to free) rather than make the session wait for it.
        if history.len() > 1000 {
            crate::free_elsewhere("penguin-free-history", history);
        }
        let meta = resumed.meta.clone();
        // The last goal, as its rounds left it in the trace (nothing runs it now).
        let goal = match had_goal {
            true => penguin_trace_store::read_trace_tolerant(&writer.current_path())
                .ok()
                .and_then(|records| crate::goal::latest_goal(records.iter(), false)),
            false => None,
        };
        // A compacted context's file is finished: its first write starts the next one, so
        // merely loading a session never writes (`pending_trace_rotation`).
        let initial = InitialState::from(resumed);
        let session = Session::assemble(meta, writer, engine_config, llm, env, initial, true);
        *lock(&session.goal) = goal;
        Ok(session)
    }

    /// Creates a session with a model built from `model` for it: its provider, id and context
    /// window recorded in `spec` (whatever `spec` said of them), the system prompt and the
    /// environment's tools given to the model, and compaction through the same spec.
    pub fn create_for_model(
        mut spec: SessionSpec,
        model: &crate::models::ModelSpec,
        env: Arc<dyn Environment>,
    ) -> Result<Session, SessionError> {
        spec.provider = model.protocol.as_str().to_owned();
        spec.model_id = model.model_id.clone();
        spec.context_window = model.context_window;
        // The session id is known before the model: it is the model's prompt cache key.
        let id = new_session_id();
        let cx = crate::models::ModelContext {
            system_prompt: spec.system_prompt.clone(),
            tools: env.tools(),
            workspace: Some(spec.workspace.clone()),
            cache_key: Some(id.clone()),
            ..crate::models::ModelContext::default()
        };
        let rebuild = crate::models::model_rebuild(model, cx.clone());
        let llm = crate::models::build_llm(model, cx)?;
        let mut session = Session::create_with_id(spec, id, llm, env)?;
        session.set_model_rebuild(rebuild);
        session.enable_compaction(model);
        Ok(session)
    }

    /// Resumes a session with a model built from `spec` for it: the recorded system prompt and
    /// history, the environment's tools (rebuilt when a connect phase changes them), and
    /// compaction through the same spec.
    pub fn resume_for_model(
        resumed: Resumed<SessionMeta>,
        writer: Writer,
        engine_config: EngineConfig,
        spec: &crate::models::ModelSpec,
        env: Arc<dyn Environment>,
    ) -> Result<Session, SessionError> {
        let cx = crate::models::ModelContext {
            system_prompt: resumed.meta.system_prompt.clone(),
            tools: env.tools(),
            history: Vec::new(),
            session_tokens: resumed.session_tokens,
            workspace: Some(PathBuf::from(&resumed.meta.workspace)),
            cache_key: Some(resumed.meta.session_id.clone()),
        };
        // A model rebuilt for the connected tools continues the same conversation; the first
        // one gets it from Session::resume, as any model does.
        let rebuild = crate::models::model_rebuild(
            spec,
            crate::models::ModelContext {
                history: resumed.history.clone(),
                ..cx.clone()
            },
        );
        let llm = crate::models::build_llm(spec, cx)?;
        let mut session = Session::resume(resumed, writer, engine_config, llm, env)?;
        session.set_model_rebuild(rebuild);
        session.enable_compaction(spec);
        session.go_on_with(spec);
        Ok(session)
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        session_meta: SessionMeta,
        writer: Writer,
        config: EngineConfig,
        llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
        mut initial: InitialState,
        meta_written: bool,
    ) -> Session {
        let id = session_meta.session_id.clone();
        let meta = build::session_meta(session_meta.clone());
        let tool_list = build::tool_list_ready(env.tools());
        initial.bootstrap_records = vec![tool_list.clone()];
        let next_llm = Arc::new(Mutex::new(None));
        let llm: Box<dyn Llm> = if env.connect_servers().is_empty() {
            llm
        } else {
            Box::new(SwapLlm {
                current: llm,
                next: next_llm.clone(),
            })
        };
        let sink = Arc::new(SessionSink {
            writer: writer.clone(),
            owed: Mutex::new(Owed::default()),
        });
        #[cfg(feature = "tools")]
        let hook_slot = crate::hooks::HookSlot::default();
        // The engine runs the tools behind the session's post_tool_use hooks, set later.
        #[cfg(feature = "tools")]
        let engine_env = crate::hooks::HookedEnv::wrap(env.clone(), hook_slot.clone());
        #[cfg(not(feature = "tools"))]
        let engine_env = env.clone();
        let engine = Engine::with_parts(llm, engine_env, config, Some(sink.clone()), initial);
        engine.set_context_head(meta.clone(), Some(tool_list.clone()));
        let (notice_hook, message_hook) = route_background(&engine, &env);
        Session {
            id,
            meta,
            session_meta,
            tool_list: Arc::new(Mutex::new(tool_list)),
            engine,
            writer,
            sink,
            notice_hook,
            message_hook,
            next_llm,
            boot: Arc::new(Mutex::new(Boot::default())),
            meta_written,
            meta_changed: false,
            policy: Default::default(),
            env,
            #[cfg(feature = "tools")]
            sandbox: None,
            #[cfg(feature = "tools")]
            checkpoints: None,
            #[cfg(feature = "tools")]
            hooks: None,
            #[cfg(feature = "tools")]
            hook_slot,
            goal: Default::default(),
        }
    }

    /// How to build the session's model for the tools its connect phase finds (MCP servers).
    /// Without it the model keeps the tools it was built with.
    pub fn set_model_rebuild(&mut self, rebuild: ModelRebuild) {
        lock(&self.boot).rebuild = Some(rebuild);
    }

    /// Starts a run. The first run of this load yields `tool_list_ready` first, after the
    /// connect phase when the tools have servers to connect.
    pub fn run(
        &mut self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        if self.goal_running() {
            return Err(EngineBusy);
        }
        let starter = self.starter();
        starter.check_idle()?;
        self.write_meta();
        #[cfg(feature = "tools")]
        self.take_checkpoint();
        let stream = starter.start(input, options)?;
        #[cfg(feature = "tools")]
        let stream = self.checkpoint_after(stream);
        Ok(stream)
    }

    fn write_meta(&mut self) {
        // A writer that started before the first run was given the head by the host (a
        // server stores a session's head before it ever runs, to unload it or to replicate it).
        if self.meta_changed || (!self.meta_written && !self.writer.started()) {
            self.writer.record_message(self.meta.clone());
            self.meta_written = true;
            self.meta_changed = false;
        }
    }

    /// The session goes on on `spec` where its head names another model (a resume with
    /// `--model`, chat's `/model`): its Trace gets a `session_meta` naming that model before
    /// the next run, so the requests from there are priced as that model's and a later resume
    /// goes on with it, and files after a rotation start with it. Nothing else of the head
    /// changes.
    fn go_on_with(&mut self, spec: &crate::models::ModelSpec) {
        let meta = &self.session_meta;
        if meta.provider == spec.protocol.as_str() && meta.model_id == spec.model_id {
            return;
        }
        let mut meta = meta.clone();
        meta.provider = spec.protocol.as_str().to_owned();
        meta.model_id = spec.model_id.clone();
        meta.model_context_window = spec.context_window.map_or(
            ContextWindow::Other("unknown".into()),
            ContextWindow::Tokens,
        );
        self.meta = build::session_meta(meta.clone());
        self.session_meta = meta;
        self.meta_changed = true;
        self.engine
            .set_context_head(self.meta.clone(), Some(lock(&self.tool_list).clone()));
    }

    /// What starting a run needs, detached from `&mut self` (a goal starts its rounds with it).
    fn starter(&self) -> RunStarter {
        RunStarter {
            policy: self.policy.clone(),
            boot: self.boot.clone(),
            engine: self.engine.clone(),
            env: self.env.clone(),
            writer: self.writer.clone(),
            sink: self.sink.clone(),
            next_llm: self.next_llm.clone(),
            tool_list: self.tool_list.clone(),
            meta: self.meta.clone(),
            #[cfg(feature = "tools")]
            hooks: self.hooks.clone(),
        }
    }

    /// Runs a goal (goal mode, `docs/goal-mode.md`): `input` (user text) is the objective,
    /// and rounds run on this session until the model marks GOAL.yaml `complete` or `blocked`,
    /// a round is interrupted or cut at `max_turns`, or the budget is spent (then one wrap-up
    /// round). Each round's input is streamed before the round; the stream ends with exactly
    /// one `goal_finished`, also written to the Trace. `options.cancel` interrupts the whole
    /// goal. GOAL.yaml goes to `goal.file`, else [`Session::goal_file`]; it is written now.
    /// [`Session::goal`] follows the run.
    pub fn run_goal(
        &mut self,
        input: Vec<OmniMessage>,
        goal: crate::goal::GoalOptions,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, crate::goal::GoalError> {
        if self.goal_running() {
            return Err(EngineBusy.into());
        }
        crate::goal::objective_of(&input)?;
        let starter = self.starter();
        starter.check_idle()?;
        self.write_meta();
        #[cfg(feature = "tools")]
        self.take_checkpoint();
        let file = goal.file.clone().unwrap_or_else(|| self.goal_file());
        let state = self.goal.clone();
        let root = crate::goal::goal_root(Path::new(&self.session_meta.workspace), &file);
        let run = crate::goal::GoalRun {
            input,
            options: goal,
            root,
            file,
            shown_file: None,
            cancel: options.cancel.clone(),
            trace: Some(self.sink.clone()),
            state,
        };
        // Every round runs with the caller's options: its approver, thinking level and
        // interrupt.
        let runner: crate::goal::RoundRunner =
            Box::new(move |input| starter.start(input, options.clone()));
        let stream = crate::goal::run_goal(run, runner)?;
        #[cfg(feature = "tools")]
        let stream = self.checkpoint_after(stream);
        Ok(stream)
    }

    /// Where this session's goals keep GOAL.yaml (and the model its PLAN.md):
    /// `<workspace>/.penguin/scratchpad/<session id>/GOAL.yaml`.
    pub fn goal_file(&self) -> PathBuf {
        crate::goal::default_goal_file(Path::new(&self.session_meta.workspace), &self.id)
    }

    /// The last goal run in this process (running or ended), for status displays and the
    /// server's `GET …/goal`; `None` when this load ran none (a host that reloads a session
    /// rebuilds it from the Trace with [`crate::goal::latest_goal`]).
    pub fn goal(&self) -> Option<crate::goal::GoalState> {
        lock(&self.goal).clone()
    }

    /// True while a goal's rounds are running.
    pub fn goal_running(&self) -> bool {
        lock(&self.goal)
            .as_ref()
            .is_some_and(|g| g.status == crate::goal::GoalStatus::Active)
    }

    /// Lets the engine compact this session's context, building each new context's model from
    /// `spec` (the session's system prompt and tools). Compaction also needs
    /// `EngineConfig::compaction`.
    pub fn enable_compaction(&self, spec: &crate::models::ModelSpec) {
        let system_prompt = self.session_meta.system_prompt.clone();
        let tools = tools_of(&lock(&self.tool_list));
        lock(&self.boot).compaction = Some(spec.clone());
        self.engine.enable_compaction(crate::models::llm_factory(
            spec,
            crate::models::ModelContext {
                system_prompt,
                tools,
                workspace: Some(PathBuf::from(&self.session_meta.workspace)),
                cache_key: Some(self.session_meta.session_id.clone()),
                ..Default::default()
            },
        ));
    }

    /// Compacts the context now, as a task with its own stream (empty when there is nothing
    /// to compact; see `engine().compactability()`).
    pub fn compact(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        if lock(&self.boot).connecting || self.goal_running() {
            return Err(EngineBusy);
        }
        // A prompt's or a stop's hooks are running: a run is about to start.
        #[cfg(feature = "tools")]
        if self.hooks.as_ref().is_some_and(|h| h.busy()) {
            return Err(EngineBusy);
        }
        if self.engine.compactability() != penguin_engine::Compactability::Ok {
            // Nothing to do: write nothing either (a fresh session keeps no empty trace file).
            return Ok(stream::empty().boxed());
        }
        if !self.meta_written || self.meta_changed {
            self.writer.record_message(self.meta.clone());
            self.meta_written = true;
            self.meta_changed = false;
        }
        #[cfg(feature = "tools")]
        if let Some(hooks) = self
            .hooks
            .clone()
            .filter(|h| h.has(crate::hooks::HookEvent::PreCompact))
        {
            // The hooks run first, then the compaction (nothing when a run began meanwhile).
            let engine = self.engine.clone();
            return Ok(stream::once(async move {
                hooks.pre_compact("manual").await;
                match engine.compact(cancel) {
                    Ok(run) => run.boxed(),
                    Err(EngineBusy) => stream::empty().boxed(),
                }
            })
            .flatten()
            .boxed());
        }
        Ok(self.engine.compact(cancel)?.boxed())
    }

    /// Sets the commands this session never runs (answered `forbidden` without asking).
    pub fn set_command_policy(&mut self, policy: CommandPolicy) {
        self.policy = policy;
    }

    /// Records the sandbox its tools confine commands with, for status displays. The tools
    /// enforce it; this only says what it is.
    #[cfg(feature = "tools")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
    pub fn set_sandbox(&mut self, sandbox: Sandbox) {
        self.sandbox = Some(sandbox);
    }

    /// Runs `hooks` at this session's decision points (`docs/hooks.md`) from its next run on.
    #[cfg(feature = "tools")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
    pub fn set_hooks(&mut self, hooks: crate::hooks::Hooks) {
        let resumed = self.meta_written || self.writer.started();
        hooks.bind(
            &self.id,
            &self.writer.current_path(),
            self.engine.notifier(),
            resumed,
        );
        *lock(&self.hook_slot) = Some(hooks.clone());
        if hooks.has(crate::hooks::HookEvent::PreCompact) {
            // A compaction the engine starts on its own (a limit reached) gets the same
            // pre_compact hooks as one the user asks for (`Session::compact`).
            let before = hooks.clone();
            self.engine.before_compaction(Arc::new(move |_reason| {
                let hooks = before.clone();
                Box::pin(async move { hooks.pre_compact("auto").await })
            }));
        }
        self.hooks = Some(hooks);
    }

    /// The session's hooks, when set.
    #[cfg(feature = "tools")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
    pub fn hooks(&self) -> Option<&crate::hooks::Hooks> {
        self.hooks.as_ref()
    }

    /// Ends the session for its hooks: runs `session_end` (`reason`: `exit`, `other`, …).
    /// Nothing else changes; a host calls it when it closes the session.
    pub async fn end(&self, reason: &str) {
        #[cfg(feature = "tools")]
        if let Some(hooks) = &self.hooks {
            hooks.session_end(reason).await;
        }
        #[cfg(not(feature = "tools"))]
        let _ = reason;
    }

    /// The sandbox its commands run under, when its tools have one.
    #[cfg(feature = "tools")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
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

    /// Names `source` as the session this new one came from (`session_meta.forked_from`), as
    /// a fork's is named: a counterfactual replay of a source's first task has no history to
    /// fork, and is linked all the same. False (nothing changed) once the session's head is
    /// written: a session's invariants never change after that.
    pub fn set_forked_from(&mut self, source: &str) -> bool {
        if self.meta_written || self.writer.started() {
            return false;
        }
        self.session_meta.forked_from = Some(source.to_owned());
        let mut meta = build::session_meta(self.session_meta.clone());
        meta.timestamp = self.meta.timestamp.clone();
        self.meta = meta;
        self.engine
            .set_context_head(self.meta.clone(), Some(lock(&self.tool_list).clone()));
        true
    }

    /// The session's invariants: the payload of [`Session::meta`].
    pub fn session_meta(&self) -> &SessionMeta {
        &self.session_meta
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

/// Starts runs on a session's parts (see [`Session::run`]).
#[derive(Clone)]
struct RunStarter {
    policy: CommandPolicy,
    boot: Arc<Mutex<Boot>>,
    engine: Engine,
    env: Arc<dyn Environment>,
    writer: Writer,
    sink: Arc<SessionSink>,
    next_llm: Arc<Mutex<Option<Box<dyn Llm>>>>,
    tool_list: Arc<Mutex<OmniMessage>>,
    meta: OmniMessage,
    #[cfg(feature = "tools")]
    hooks: Option<crate::hooks::Hooks>,
}

impl RunStarter {
    fn check_idle(&self) -> Result<(), EngineBusy> {
        #[cfg(feature = "tools")]
        if self.hooks.as_ref().is_some_and(|h| h.busy()) {
            return Err(EngineBusy);
        }
        if lock(&self.boot).connecting || self.engine.is_running() {
            return Err(EngineBusy);
        }
        Ok(())
    }

    fn start(
        &self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        #[cfg(feature = "tools")]
        if let Some(hooks) = self.hooks.clone().filter(|h| h.drives_runs()) {
            self.check_idle()?;
            let starter = self.clone();
            let start: crate::hooks::Start =
                Arc::new(move |input, options| starter.start_engine(input, options));
            return Ok(crate::hooks::drive(hooks, input, options, start));
        }
        self.start_engine(input, options)
    }

    fn start_engine(
        &self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        // The command policy sits in front of whatever approver the host brings, and the
        // session's pre_tool_use hooks between the two.
        let mut options = options;
        #[cfg(feature = "tools")]
        if let Some(hooks) = &self.hooks {
            options.approver =
                crate::hooks::HookApprover::wrap(hooks, self.policy.clone(), options.approver);
        }
        options.approver = self.policy.wrap(options.approver);
        let (announced, carry) = {
            let mut boot = lock(&self.boot);
            if boot.connecting || self.engine.is_running() {
                return Err(EngineBusy);
            }
            let carry = if boot.announced {
                Vec::new()
            } else {
                std::mem::take(&mut boot.carry_input)
            };
            (boot.announced, carry)
        };
        if announced {
            return Ok(self.engine.run(input, options)?.boxed());
        }
        let servers = self.env.connect_servers();
        if servers.is_empty() {
            let stream = self.engine.run(input, options)?;
            lock(&self.boot).announced = true;
            let head = Frame::new(lock(&self.tool_list).clone());
            return Ok(stream::iter([head]).chain(stream).boxed());
        }
        lock(&self.boot).connecting = true;
        let phase = ConnectPhase {
            guard: Connecting(self.boot.clone()),
            engine: self.engine.clone(),
            env: self.env.clone(),
            writer: self.writer.clone(),
            sink: self.sink.clone(),
            next_llm: self.next_llm.clone(),
            tool_list: self.tool_list.clone(),
            meta: self.meta.clone(),
            input: carry.into_iter().chain(input).collect(),
            options,
        };
        let begin = build::mcp_connect_begin(servers);
        Ok(stream::iter([Frame::new(begin.clone())])
            .chain(stream::once(phase.finish(begin)).flatten())
            .boxed())
    }
}

fn absolute(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

#[cfg(test)]
mod tests;
