//! Scenario files: a scripted model, scripted tools and scripted approvals driving the real
//! engine (`docs/scenario-format.md`).

// The door (clippy.toml) is for paths a command can change: a scenario's files are the user's
// test data, in folders penguin makes for the run.
#![allow(clippy::disallowed_methods)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use penguin_engine::scripted::{ScriptedApprover, ScriptedEnvironment};
use penguin_engine::{
    Approver, CancellationToken, DenyAll, Engine, EngineConfig, Environment, InitialState,
    Permission, RunOptions, ToolCallRequest, TraceSink,
};
use penguin_llm_providers::scripted::{ScriptError, ScriptedModel};
use penguin_llm_providers::MessageSink;
use penguin_omni_protocol::{Frame, OmniMessage, ToolDefinition};

mod parse;
mod stream;

/// One run of a scenario.
#[derive(Clone, Debug)]
pub struct ScenarioRun {
    /// The prompt.
    pub input: Vec<OmniMessage>,
    /// Fire the run's interrupt this long after it starts.
    pub abort_after: Option<Duration>,
    /// Steering inputs and when to send them, relative to the run's start.
    pub steer: Vec<(Duration, Vec<OmniMessage>)>,
    /// Background notices and when they arrive (zero: before the run starts).
    pub notices: Vec<(Duration, OmniMessage)>,
    /// A manual `compact()` instead of a run (the input is ignored).
    pub compact: bool,
    /// A goal run instead of a plain one: the input is the objective.
    pub goal: Option<ScenarioGoal>,
}

/// A run's goal (`runs[i].goal`): how the loop is set up and what the scripted tools write
/// to GOAL.yaml.
#[derive(Clone, Debug, Default)]
pub struct ScenarioGoal {
    /// Token budget; `None`: unlimited.
    pub budget: Option<u64>,
    /// Round backstop; `None`: the loop's default.
    pub max_rounds: Option<u64>,
    /// GOAL.yaml's path as the model is told it (the real file is in a temporary folder).
    pub file: String,
    /// Keyed by tool_call_id: when that call is dispatched, GOAL.yaml gets this text
    /// (`None`: the file is removed) before the tool's script plays.
    pub writes: std::collections::HashMap<String, Option<String>>,
}

impl ScenarioGoal {
    /// The path shown when the file says none.
    pub const DEFAULT_FILE: &'static str = "/scratchpad/session/GOAL.yaml";
}

/// GOAL.yaml's text by tool_call_id (`None`: the file is removed).
type GoalWrites = std::collections::HashMap<String, Option<String>>;

/// The scripted tools, writing GOAL.yaml for the calls a goal run names.
struct GoalTools {
    inner: ScriptedEnvironment,
    /// The running goal's real file and its writes.
    goal: Mutex<Option<(std::path::PathBuf, GoalWrites)>>,
}

#[penguin_engine::async_trait]
impl Environment for GoalTools {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let write = {
            let goal = self.goal.lock().unwrap_or_else(|p| p.into_inner());
            goal.as_ref().and_then(|(file, writes)| {
                writes
                    .get(&request.tool_call().tool_call_id)
                    .map(|text| (file.clone(), text.clone()))
            })
        };
        if let Some((file, text)) = write {
            let _ = match text {
                Some(text) => std::fs::write(&file, text),
                None => std::fs::remove_file(&file),
            };
        }
        self.inner.execute(request, sink).await
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.inner.tools()
    }

    fn permission(&self, name: &str) -> Permission {
        self.inner.permission(name)
    }
}

/// A temporary folder for one goal run's GOAL.yaml, removed when dropped.
struct GoalDir(std::path::PathBuf);

impl GoalDir {
    fn new() -> GoalDir {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        GoalDir(
            std::env::temp_dir().join(format!("penguin-scenario-goal-{}-{n}", std::process::id())),
        )
    }
}

impl Drop for GoalDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the session around the bare engine brings (v2 `session`).
#[derive(Clone, Debug, Default)]
pub struct ScenarioSession {
    /// Rewritten at the head of each new trace file.
    pub session_meta: Option<OmniMessage>,
    /// Written after the bootstrap records, and at the head of each new file.
    pub tool_list: Option<OmniMessage>,
    /// The first run's owed records; `None`: the first run owes nothing.
    pub bootstrap_records: Option<Vec<OmniMessage>>,
}

/// A parsed scenario file.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Free text.
    pub description: String,
    /// Engine settings (defaults where the file is silent).
    pub engine: EngineConfig,
    /// The approver; absent means the engine's default (deny everything).
    pub approvals: Option<ScriptedApprover>,
    /// The model's script.
    pub llm: ScriptedModel,
    /// The tools' scripts.
    pub tools: ScriptedEnvironment,
    /// The runs, executed one after another on one engine.
    pub runs: Vec<ScenarioRun>,
    /// The session's head records (v2).
    pub session: ScenarioSession,
}

/// The three observables of a scenario run.
#[derive(Debug, Default)]
pub struct ScenarioOutput {
    /// Every message the runs yielded, in stream order.
    pub stream: Vec<Frame>,
    /// Every record the trace received, in order.
    pub trace: Vec<Frame>,
    /// Where the trace rotated to a new file: before the record at each of these indices.
    pub rotations: Vec<usize>,
    /// The `new_messages` of every model request.
    pub requests: Vec<Vec<OmniMessage>>,
}

impl ScenarioOutput {
    /// The `--trace` lines (see [`trace_lines`]).
    pub fn trace_lines(&self) -> Vec<&str> {
        trace_lines(&self.trace, &self.rotations)
    }
}

/// The `--trace` lines: every record, and `{"type":"trace_rotate"}` before the record at each
/// rotation index, so they read as the concatenation of every file of the session.
pub fn trace_lines<'a>(trace: &'a [Frame], rotations: &[usize]) -> Vec<&'a str> {
    let mut out = Vec::with_capacity(trace.len() + rotations.len());
    let mut rotations = rotations.iter().peekable();
    for (i, frame) in trace.iter().enumerate() {
        while rotations.next_if(|&&r| r == i).is_some() {
            out.push(TRACE_ROTATE);
        }
        out.push(frame.json());
    }
    out.extend(rotations.map(|_| TRACE_ROTATE));
    out
}

/// The `--trace` line that marks a rotation: the one `penguin trace check` reads as a file
/// boundary.
pub const TRACE_ROTATE: &str = penguin_trace_store::ROTATE_MARKER;

/// A trace sink that keeps records, and where the files rotate, in memory, in order.
#[derive(Debug, Default, Clone)]
pub struct MemoryTrace {
    inner: Arc<Mutex<(Vec<Frame>, Vec<usize>)>>,
}

impl MemoryTrace {
    /// Everything recorded so far.
    pub fn records(&self) -> Vec<Frame> {
        self.inner.lock().expect("memory trace lock").0.clone()
    }

    /// Where the trace rotated: before the record at each index.
    pub fn rotations(&self) -> Vec<usize> {
        self.inner.lock().expect("memory trace lock").1.clone()
    }
}

impl TraceSink for MemoryTrace {
    fn record(&self, frame: &Frame) {
        self.inner
            .lock()
            .expect("memory trace lock")
            .0
            .push(frame.clone());
    }

    fn rotate(&self) {
        let mut inner = self.inner.lock().expect("memory trace lock");
        let at = inner.0.len();
        inner.1.push(at);
    }
}

/// When a run's timer (abort, steer) fires. The reference sets a timer for these, and a timer
/// never fires at the instant it was set (node runs a 0 ms timer 1 ms later): everything the
/// run does at that instant comes first.
pub fn timer_delay(after: Duration) -> Duration {
    after.max(Duration::from_millis(1))
}

/// Runs every run of `scenario` on one engine, recording into `trace`.
///
/// Timing follows tokio time; run it on a paused clock to make it deterministic and instant.
pub async fn run_scenario(
    scenario: Scenario,
    trace: Arc<dyn TraceSink>,
    on_frame: &mut dyn FnMut(Frame),
) -> Vec<Vec<OmniMessage>> {
    let model = scenario.llm.clone();
    // Scenarios run on a paused clock, where the reference's order of same-instant messages
    // is the order to reproduce.
    let config = EngineConfig {
        same_instant_order: true,
        ..scenario.engine
    };
    let session = scenario.session;
    let initial = InitialState {
        // The first run owes its bootstrap records, then the tool list, after its input.
        bootstrap_records: session
            .bootstrap_records
            .map(|records| {
                records
                    .into_iter()
                    .chain(session.tool_list.clone())
                    .collect()
            })
            .unwrap_or_default(),
        ..InitialState::default()
    };
    let tools = Arc::new(GoalTools {
        inner: scenario.tools,
        goal: Mutex::new(None),
    });
    let engine = Engine::with_parts(
        Box::new(scenario.llm),
        tools.clone(),
        config,
        Some(trace.clone()),
        initial,
    );
    if let Some(meta) = session.session_meta {
        engine.set_context_head(meta, session.tool_list);
    }
    // A compacted context is played by the same script: clones share its queue of requests.
    let next_context = model.clone();
    engine.enable_compaction(Arc::new(move |_| Box::new(next_context.clone())));
    // A scenario without approvals denies every call, as its reference run did.
    let approver: Arc<dyn Approver> = match scenario.approvals {
        Some(a) => Arc::new(a),
        None => Arc::new(DenyAll),
    };
    for run in scenario.runs {
        let cancel = CancellationToken::new();
        let options = RunOptions::new(approver.clone()).with_cancel(cancel.clone());
        // The reference sets a run's timers in the order abort, steers, notices, and each
        // timer's consequences run before the next one fires: an abort ends the run, and the
        // steers and notices due at its instant or later are cleared with it, never arriving.
        let abort_at = run.abort_after.map(timer_delay);
        let before_abort = |after: &Duration| abort_at.is_none_or(|at| timer_delay(*after) < at);
        // Notices due at 0 ms are waiting before the run starts.
        let (now, later): (Vec<_>, Vec<_>) = run
            .notices
            .into_iter()
            .partition(|(after, _)| after.is_zero());
        let later = later.into_iter().filter(|(after, _)| before_abort(after));
        for (_, notice) in now {
            engine.notify(notice);
        }
        let mut goal_dir = None;
        let mut stream = if let Some(goal) = run.goal {
            let dir = GoalDir::new();
            let file = dir.0.join(crate::goal::GOAL_FILE_NAME);
            let root = dir.0.clone();
            *tools.goal.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((file.clone(), goal.writes));
            goal_dir = Some(dir);
            let engine = engine.clone();
            let run = crate::goal::GoalRun {
                input: run.input,
                options: crate::goal::GoalOptions {
                    budget: goal.budget,
                    max_rounds: goal.max_rounds,
                    file: None,
                },
                root,
                file,
                shown_file: Some(goal.file),
                cancel: cancel.clone(),
                trace: Some(trace.clone()),
                state: Default::default(),
            };
            crate::goal::run_goal(
                run,
                Box::new(move |input| Ok(engine.run(input, options.clone())?.boxed())),
            )
            .unwrap_or_else(|e| {
                // A goal that cannot start (no objective) ends at once, as the reference's
                // throws end its run.
                tracing::warn!("scenario goal run: {e}");
                futures::stream::empty().boxed()
            })
        } else {
            let started = if run.compact {
                engine.compact(cancel.clone())
            } else {
                engine.run(run.input, options)
            };
            started.expect("runs execute one after another").boxed()
        };
        let mut timers = tokio::task::JoinSet::new();
        for (after, notice) in later {
            let engine = engine.clone();
            timers.spawn(async move {
                tokio::time::sleep(timer_delay(after)).await;
                engine.notify(notice);
            });
        }
        if let Some(after) = run.abort_after {
            let cancel = cancel.clone();
            timers.spawn(async move {
                tokio::time::sleep(timer_delay(after)).await;
                cancel.cancel();
            });
        }
        for (after, input) in run
            .steer
            .into_iter()
            .filter(|(after, _)| before_abort(after))
        {
            let engine = engine.clone();
            timers.spawn(async move {
                tokio::time::sleep(timer_delay(after)).await;
                engine.steer(input);
            });
        }
        while let Some(frame) = stream.next().await {
            on_frame(frame);
        }
        drop(stream);
        timers.abort_all();
        *tools.goal.lock().unwrap_or_else(|p| p.into_inner()) = None;
        drop(goal_dir);
    }
    // A played scenario's engine holds every script and the whole context.
    crate::free_elsewhere("penguin-free-scenario", engine);
    model.requests()
}

/// Parses and runs a scenario on a fresh paused-clock runtime, collecting the observables.
#[cfg(feature = "scenario")]
pub fn run_scenario_blocking(scenario: Scenario) -> std::io::Result<ScenarioOutput> {
    let mut stream = Vec::new();
    let trace = MemoryTrace::default();
    let requests =
        run_scenario_streaming(scenario, Arc::new(trace.clone()), &mut |f| stream.push(f))?;
    Ok(ScenarioOutput {
        stream,
        trace: trace.records(),
        rotations: trace.rotations(),
        requests,
    })
}

/// [`run_scenario`] on a fresh paused-clock runtime, handing each streamed frame to `on_frame`
/// as it comes (a large scenario's stream need not be held in memory).
#[cfg(feature = "scenario")]
pub fn run_scenario_streaming(
    scenario: Scenario,
    trace: Arc<dyn TraceSink>,
    on_frame: &mut dyn FnMut(Frame),
) -> std::io::Result<Vec<Vec<OmniMessage>>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    Ok(rt.block_on(run_scenario(scenario, trace, on_frame)))
}

/// A scenario file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid scenario (the error names the field path).
    #[error("invalid scenario {}: {source}", path.display())]
    Invalid {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong, and where.
        source: ScriptError,
    },
}

impl Scenario {
    /// Reads and parses a scenario file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Scenario, ScenarioError> {
        let path = path.as_ref();
        let read_error = |source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        };
        // Read as it streams when it is well-formed; the whole text otherwise, for the error.
        if let Some(scenario) = stream::read(path).map_err(read_error)? {
            return Ok(scenario);
        }
        let text = std::fs::read_to_string(path).map_err(read_error)?;
        Scenario::parse(&text).map_err(|source| ScenarioError::Invalid {
            path: path.to_path_buf(),
            source,
        })
    }
}
