//! Scenario files: a scripted model, scripted tools and scripted approvals driving the real
//! engine (`shared/spec/scenario-format.md`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use penguin_engine::scripted::{ScriptedApprover, ScriptedEnvironment};
use penguin_engine::{
    Approver, CancellationToken, CompactionConfig, Engine, EngineConfig, InitialState, RunOptions,
    TraceSink,
};
use penguin_llm_providers::scripted::{parse_request, parse_steps, ScriptError, ScriptedModel};
use penguin_omni_protocol::{CompactionMode, Frame, OmniMessage};
use serde_json::value::RawValue;
use serde_json::Value;

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

fn check_keys(
    obj: &serde_json::Map<String, Value>,
    path: &str,
    allowed: &[&str],
) -> Result<(), ScriptError> {
    let allowed: HashSet<&str> = allowed.iter().copied().collect();
    match obj.keys().find(|k| !allowed.contains(k.as_str())) {
        Some(k) => {
            let at = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            Err(ScriptError::new(at, "unknown field"))
        }
        None => Ok(()),
    }
}

fn ms(v: &Value, path: &str) -> Result<Duration, ScriptError> {
    v.as_u64()
        .map(Duration::from_millis)
        .ok_or_else(|| ScriptError::new(path, "expected a non-negative integer (milliseconds)"))
}

fn message(v: &Value, path: &str) -> Result<OmniMessage, ScriptError> {
    OmniMessage::from_value_exact(v.clone()).map_err(|e| {
        let p = if e.path.is_empty() {
            path.to_owned()
        } else {
            format!("{path}.{}", e.path)
        };
        ScriptError::new(p, e.message)
    })
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a serde_json::Map<String, Value>, ScriptError> {
    v.as_object()
        .ok_or_else(|| ScriptError::new(path, "expected an object"))
}

/// v2 `engine.compaction`.
fn compaction(v: &Value) -> Result<CompactionConfig, ScriptError> {
    let path = "engine.compaction";
    let c = object(v, path)?;
    check_keys(
        c,
        path,
        &["mode", "max_context_length", "max_session_turns", "prompt"],
    )?;
    let int = |key: &str| -> Result<i64, ScriptError> {
        match c.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| ScriptError::new(format!("{path}.{key}"), "expected an integer")),
        }
    };
    let mode = match c.get("mode").and_then(Value::as_str) {
        None | Some("summarize") => CompactionMode::Summarize,
        Some("discard") => CompactionMode::Discard,
        Some(other) => {
            return Err(ScriptError::new(
                format!("{path}.mode"),
                format!("expected \"summarize\" or \"discard\", got {other:?}"),
            ))
        }
    };
    let prompt = match c.get("prompt") {
        None | Some(Value::Null) => "Summarize the conversation so far.".to_owned(),
        Some(Value::String(p)) => p.clone(),
        Some(_) => {
            return Err(ScriptError::new(
                format!("{path}.prompt"),
                "expected a string",
            ))
        }
    };
    Ok(CompactionConfig {
        // ≤ 0 or absent: that trigger is off.
        max_context_length: u64::try_from(int("max_context_length")?).unwrap_or(0),
        max_session_turns: int("max_session_turns")?.max(0),
        mode,
        prompt,
    })
}

/// v2 `session`.
fn session(v: &Value) -> Result<ScenarioSession, ScriptError> {
    let s = object(v, "session")?;
    check_keys(
        s,
        "session",
        &["session_meta", "tool_list", "bootstrap_records"],
    )?;
    let one = |key: &str| -> Result<Option<OmniMessage>, ScriptError> {
        match s.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(m) => message(m, &format!("session.{key}")).map(Some),
        }
    };
    Ok(ScenarioSession {
        session_meta: one("session_meta")?,
        tool_list: one("tool_list")?,
        bootstrap_records: match s.get("bootstrap_records") {
            None | Some(Value::Null) => None,
            Some(v) => Some(messages(v, "session.bootstrap_records")?),
        },
    })
}

/// `llm`, one request at a time.
fn llm_requests(raw: &RawValue) -> Result<ScriptedModel, ScriptError> {
    let items: Vec<&RawValue> = serde_json::from_str(raw.get())
        .map_err(|_| ScriptError::new("llm", "expected an array of requests"))?;
    let requests = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let v: Value = serde_json::from_str(item.get()).unwrap_or(Value::Null);
            parse_request(&v, &format!("llm[{i}]"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ScriptedModel::new(requests))
}

/// `tools`, one tool at a time.
fn tool_scripts(raw: &RawValue) -> Result<ScriptedEnvironment, ScriptError> {
    if raw.get().trim() == "null" {
        return Ok(ScriptedEnvironment::default());
    }
    let items: std::collections::BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())
        .map_err(|_| ScriptError::new("tools", "expected an object keyed by tool_call_id"))?;
    let mut scripts = std::collections::HashMap::with_capacity(items.len());
    for (id, item) in items {
        let path = format!("tools.{id}");
        let v: Value = serde_json::from_str(item.get()).unwrap_or(Value::Null);
        let script = object(&v, &path)?;
        check_keys(script, &path, &["stream"])?;
        let stream = script
            .get("stream")
            .ok_or_else(|| ScriptError::new(format!("{path}.stream"), "missing"))?;
        scripts.insert(id, parse_steps(stream, &format!("{path}.stream"))?);
    }
    Ok(ScriptedEnvironment::new(scripts))
}

fn messages(v: &Value, path: &str) -> Result<Vec<OmniMessage>, ScriptError> {
    let items = v
        .as_array()
        .ok_or_else(|| ScriptError::new(path, "expected an array of OmniMessages"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            OmniMessage::from_value_exact(m.clone()).map_err(|e| {
                let p = if e.path.is_empty() {
                    format!("{path}[{i}]")
                } else {
                    format!("{path}[{i}].{}", e.path)
                };
                ScriptError::new(p, e.message)
            })
        })
        .collect()
}

impl Scenario {
    /// Parses a scenario file's text.
    pub fn parse(text: &str) -> Result<Scenario, ScriptError> {
        // The scripts (`llm`, `tools`) are most of a large file: each request and tool is
        // turned into a JSON tree and then into messages one at a time, never the whole file
        // at once.
        let top: std::collections::BTreeMap<String, &RawValue> = serde_json::from_str(text)
            .map_err(|e| match serde_json::from_str::<Value>(text) {
                Ok(_) => ScriptError::new("(file)", "expected a JSON object"),
                Err(_) => ScriptError::new("(file)", format!("invalid JSON: {e}")),
            })?;
        let tree = |raw: &RawValue| -> Value {
            // Already checked as JSON by the parse above.
            serde_json::from_str(raw.get()).unwrap_or(Value::Null)
        };
        let obj: serde_json::Map<String, Value> = top
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "llm" | "tools"))
            .map(|(k, raw)| (k.clone(), tree(raw)))
            .collect();
        let obj = &obj;
        let allowed = [
            "description",
            "engine",
            "approvals",
            "llm",
            "tools",
            "runs",
            "session",
        ];
        if let Some(k) = top.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ScriptError::new(k.clone(), "unknown field"));
        }
        let description = match obj.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ScriptError::new("description", "expected a string")),
        };
        let mut engine = EngineConfig::default();
        if let Some(e) = obj.get("engine").filter(|v| !v.is_null()) {
            let e = e
                .as_object()
                .ok_or_else(|| ScriptError::new("engine", "expected an object"))?;
            check_keys(
                e,
                "engine",
                &[
                    "max_turns",
                    "max_reconnects",
                    "reconnect_backoff_ms",
                    "reconnect_backoff_max_ms",
                    "compaction",
                    "compaction_max_reconnects",
                ],
            )?;
            if let Some(c) = e.get("compaction").filter(|v| !v.is_null()) {
                engine.compaction = Some(compaction(c)?);
            }
            if let Some(v) = e.get("compaction_max_reconnects").filter(|v| !v.is_null()) {
                engine.compaction_max_reconnects = Some(
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            ScriptError::new(
                                "engine.compaction_max_reconnects",
                                "expected a non-negative integer",
                            )
                        })?,
                );
            }
            if let Some(v) = e.get("max_turns") {
                engine.max_turns = v
                    .as_i64()
                    .ok_or_else(|| ScriptError::new("engine.max_turns", "expected an integer"))?;
            }
            if let Some(v) = e.get("max_reconnects") {
                engine.max_reconnects =
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            ScriptError::new(
                                "engine.max_reconnects",
                                "expected a non-negative integer",
                            )
                        })?;
            }
            if let Some(v) = e.get("reconnect_backoff_ms") {
                engine.reconnect_backoff = ms(v, "engine.reconnect_backoff_ms")?;
            }
            if let Some(v) = e.get("reconnect_backoff_max_ms") {
                engine.reconnect_backoff_max = ms(v, "engine.reconnect_backoff_max_ms")?;
            }
        }
        let approvals = match obj.get("approvals") {
            None | Some(Value::Null) => None,
            Some(a) => Some(ScriptedApprover::from_json(a)?),
        };
        let llm = llm_requests(
            top.get("llm")
                .ok_or_else(|| ScriptError::new("llm", "missing"))?,
        )?;
        let tools = match top.get("tools") {
            None => ScriptedEnvironment::default(),
            Some(raw) => tool_scripts(raw)?,
        };
        let runs_v = obj
            .get("runs")
            .ok_or_else(|| ScriptError::new("runs", "missing"))?;
        let runs_a = runs_v
            .as_array()
            .ok_or_else(|| ScriptError::new("runs", "expected an array"))?;
        let mut runs = Vec::new();
        for (i, r) in runs_a.iter().enumerate() {
            let path = format!("runs[{i}]");
            let r = r
                .as_object()
                .ok_or_else(|| ScriptError::new(&path, "expected an object"))?;
            check_keys(
                r,
                &path,
                &["input", "abort_after_ms", "steer", "notices", "compact"],
            )?;
            let compact = match r.get("compact") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ScriptError::new(
                        format!("{path}.compact"),
                        "expected a boolean",
                    ))
                }
            };
            // A compaction run takes no input.
            let input = match r.get("input") {
                None if compact => Vec::new(),
                v => messages(
                    v.ok_or_else(|| ScriptError::new(format!("{path}.input"), "missing"))?,
                    &format!("{path}.input"),
                )?,
            };
            let mut notices = Vec::new();
            if let Some(n) = r.get("notices").filter(|v| !v.is_null()) {
                let n = n.as_array().ok_or_else(|| {
                    ScriptError::new(format!("{path}.notices"), "expected an array")
                })?;
                for (j, entry) in n.iter().enumerate() {
                    let np = format!("{path}.notices[{j}]");
                    let e = object(entry, &np)?;
                    check_keys(e, &np, &["after_ms", "message"])?;
                    let after = ms(
                        e.get("after_ms")
                            .ok_or_else(|| ScriptError::new(format!("{np}.after_ms"), "missing"))?,
                        &format!("{np}.after_ms"),
                    )?;
                    let msg = message(
                        e.get("message")
                            .ok_or_else(|| ScriptError::new(format!("{np}.message"), "missing"))?,
                        &format!("{np}.message"),
                    )?;
                    notices.push((after, msg));
                }
            }
            let abort_after = match r.get("abort_after_ms") {
                None | Some(Value::Null) => None,
                Some(v) => Some(ms(v, &format!("{path}.abort_after_ms"))?),
            };
            let mut steer = Vec::new();
            if let Some(s) = r.get("steer").filter(|v| !v.is_null()) {
                let s = s.as_array().ok_or_else(|| {
                    ScriptError::new(format!("{path}.steer"), "expected an array")
                })?;
                for (j, entry) in s.iter().enumerate() {
                    let sp = format!("{path}.steer[{j}]");
                    let e = entry.as_object().ok_or_else(|| {
                        ScriptError::new(&sp, "expected an object {after_ms, input}")
                    })?;
                    check_keys(e, &sp, &["after_ms", "input"])?;
                    let after = ms(
                        e.get("after_ms")
                            .ok_or_else(|| ScriptError::new(format!("{sp}.after_ms"), "missing"))?,
                        &format!("{sp}.after_ms"),
                    )?;
                    let input = messages(
                        e.get("input")
                            .ok_or_else(|| ScriptError::new(format!("{sp}.input"), "missing"))?,
                        &format!("{sp}.input"),
                    )?;
                    steer.push((after, input));
                }
            }
            runs.push(ScenarioRun {
                input,
                abort_after,
                steer,
                notices,
                compact,
            });
        }
        let session = match obj.get("session") {
            None | Some(Value::Null) => ScenarioSession::default(),
            Some(v) => session(v)?,
        };
        Ok(Scenario {
            description,
            engine,
            approvals,
            llm,
            tools,
            runs,
            session,
        })
    }
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

/// The `--trace` line that marks a rotation.
pub const TRACE_ROTATE: &str = r#"{"type":"trace_rotate"}"#;

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
    let engine = Engine::with_parts(
        Box::new(scenario.llm),
        Arc::new(scenario.tools),
        config,
        Some(trace),
        initial,
    );
    if let Some(meta) = session.session_meta {
        engine.set_context_head(meta, session.tool_list);
    }
    // A compacted context is played by the same script: clones share its queue of requests.
    let next_context = model.clone();
    engine.enable_compaction(Arc::new(move |_| Box::new(next_context.clone())));
    let approver: Option<Arc<dyn Approver>> =
        scenario.approvals.map(|a| Arc::new(a) as Arc<dyn Approver>);
    for run in scenario.runs {
        let cancel = CancellationToken::new();
        let options = RunOptions {
            approver: approver.clone(),
            cancel: cancel.clone(),
            thinking_level: None,
        };
        // Notices due at 0 ms are waiting before the run starts.
        let (now, later): (Vec<_>, Vec<_>) = run
            .notices
            .into_iter()
            .partition(|(after, _)| after.is_zero());
        for (_, notice) in now {
            engine.notify(notice);
        }
        let started = if run.compact {
            engine.compact(cancel.clone())
        } else {
            engine.run(run.input, options)
        };
        let mut stream = started.expect("runs execute one after another");
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
        for (after, input) in run.steer {
            let engine = engine.clone();
            timers.spawn(async move {
                tokio::time::sleep(timer_delay(after)).await;
                engine.steer(input);
            });
        }
        while let Some(frame) = stream.next().await {
            on_frame(frame);
        }
        timers.abort_all();
    }
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
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::parse(&text).map_err(|source| ScenarioError::Invalid {
            path: path.to_path_buf(),
            source,
        })
    }
}
