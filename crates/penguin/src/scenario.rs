//! Scenario files: a scripted model, scripted tools and scripted approvals driving the real
//! engine (`shared/spec/scenario-format.md`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use penguin_engine::scripted::{ScriptedApprover, ScriptedEnvironment};
use penguin_engine::{
    Approver, CancellationToken, Engine, EngineConfig, InitialState, RunOptions, TraceSink,
};
use penguin_llm_providers::scripted::{ScriptError, ScriptedModel};
use penguin_omni_protocol::{Frame, OmniMessage};
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
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ScriptError::new("(file)", format!("invalid JSON: {e}")))?;
        let obj = value
            .as_object()
            .ok_or_else(|| ScriptError::new("(file)", "expected a JSON object"))?;
        check_keys(
            obj,
            "",
            &["description", "engine", "approvals", "llm", "tools", "runs"],
        )?;
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
                ],
            )?;
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
        let llm = ScriptedModel::from_json(
            obj.get("llm")
                .ok_or_else(|| ScriptError::new("llm", "missing"))?,
        )?;
        let tools = match obj.get("tools") {
            None | Some(Value::Null) => ScriptedEnvironment::default(),
            Some(t) => ScriptedEnvironment::from_json(t)?,
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
            check_keys(r, &path, &["input", "abort_after_ms", "steer"])?;
            let input = messages(
                r.get("input")
                    .ok_or_else(|| ScriptError::new(format!("{path}.input"), "missing"))?,
                &format!("{path}.input"),
            )?;
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
            });
        }
        Ok(Scenario {
            description,
            engine,
            approvals,
            llm,
            tools,
            runs,
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
    /// The `new_messages` of every model request.
    pub requests: Vec<Vec<OmniMessage>>,
}

/// A trace sink that keeps records in memory, in order.
#[derive(Debug, Default, Clone)]
pub struct MemoryTrace {
    records: Arc<Mutex<Vec<Frame>>>,
}

impl MemoryTrace {
    /// Everything recorded so far.
    pub fn records(&self) -> Vec<Frame> {
        self.records.lock().expect("memory trace lock").clone()
    }
}

impl TraceSink for MemoryTrace {
    fn record(&self, frame: &Frame) {
        self.records
            .lock()
            .expect("memory trace lock")
            .push(frame.clone());
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
) -> (Vec<Frame>, Vec<Vec<OmniMessage>>) {
    let model = scenario.llm.clone();
    // Scenarios run on a paused clock, where the reference's order of same-instant messages
    // is the order to reproduce.
    let config = EngineConfig {
        same_instant_order: true,
        ..scenario.engine
    };
    let engine = Engine::with_parts(
        Box::new(scenario.llm),
        Arc::new(scenario.tools),
        config,
        Some(trace),
        InitialState::default(),
    );
    let approver: Option<Arc<dyn Approver>> =
        scenario.approvals.map(|a| Arc::new(a) as Arc<dyn Approver>);
    let mut stream_out = Vec::new();
    for run in scenario.runs {
        let cancel = CancellationToken::new();
        let options = RunOptions {
            approver: approver.clone(),
            cancel: cancel.clone(),
            thinking_level: None,
        };
        let mut stream = engine
            .run(run.input, options)
            .expect("runs execute one after another");
        let mut timers = tokio::task::JoinSet::new();
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
            stream_out.push(frame);
        }
        timers.abort_all();
    }
    (stream_out, model.requests())
}

/// Parses and runs a scenario on a fresh paused-clock runtime, collecting the observables.
#[cfg(feature = "scenario")]
pub fn run_scenario_blocking(scenario: Scenario) -> std::io::Result<ScenarioOutput> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let trace = MemoryTrace::default();
    let (stream, requests) = rt.block_on(run_scenario(scenario, Arc::new(trace.clone())));
    Ok(ScenarioOutput {
        stream,
        trace: trace.records(),
        requests,
    })
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
