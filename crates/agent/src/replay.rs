//! Replaying a real session (`penguin replay`, `docs/rewind.md`): its Trace rebuilt as a
//! scenario file (the model's committed output per request, each tool's output and when it
//! came, the approvals, the steering, the aborts), run through the engine on a paused clock,
//! and the new Trace compared with the old one record by record.
//!
//! A session becomes a regression test of the harness this way: keep the scenario
//! (`--out FILE`) and the suite replays it from then on. What the Trace does not hold enough of
//! to replay exactly (a compaction, a subagent, a goal round, a crash mid-stream) is named by
//! its record, never guessed at.

use penguin_omni_protocol::{EventPayload, ModelPayload, OmniMessage, Role};
use serde_json::{json, Map, Value};

/// Why a Trace cannot be replayed exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record {record} ({kind}): {why}")]
pub struct NotReplayable {
    /// The record's number among the session's records (from 1, `session_meta` included).
    pub record: usize,
    /// What the record is.
    pub kind: String,
    /// Why it stops an exact replay.
    pub why: String,
}

/// The first record where a replay's Trace departs from the original.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// Its number among the compared records (from 1; `session_meta` and `tool_list_ready`
    /// are not compared).
    pub record: usize,
    /// The original record, timestamp aside (`None`: the replay wrote more).
    pub expected: Option<Value>,
    /// The replay's (`None`: the replay wrote fewer).
    pub got: Option<Value>,
}

/// A message as a scenario file holds it: no timestamp (the runner stamps what it emits).
fn scripted(msg: &OmniMessage) -> Value {
    let mut v = serde_json::to_value(msg).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("timestamp");
    }
    v
}

fn ms(msg: &OmniMessage) -> i64 {
    chrono::DateTime::parse_from_rfc3339(msg.timestamp.as_str())
        .map(|t| t.timestamp_millis())
        .unwrap_or(0)
}

/// What a record is, in a word, for messages.
fn kind(msg: &OmniMessage) -> String {
    let v = serde_json::to_value(msg).unwrap_or_default();
    v.get("payload")
        .and_then(|p| p.get("type"))
        .or_else(|| v.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("record")
        .to_owned()
}

/// One run being rebuilt.
struct Run {
    start_ms: i64,
    input: Vec<Value>,
    steer: Vec<Value>,
    notices: Vec<Value>,
    abort_after_ms: Option<i64>,
}

impl Run {
    fn starting(at: i64, input: Value) -> Run {
        Run {
            start_ms: at,
            input: vec![input],
            steer: Vec::new(),
            notices: Vec::new(),
            abort_after_ms: None,
        }
    }

    fn into_value(self) -> Value {
        let mut run = Map::new();
        run.insert("input".into(), Value::Array(self.input));
        if !self.steer.is_empty() {
            run.insert("steer".into(), Value::Array(self.steer));
        }
        if !self.notices.is_empty() {
            run.insert("notices".into(), Value::Array(self.notices));
        }
        if let Some(after) = self.abort_after_ms {
            run.insert("abort_after_ms".into(), json!(after.max(0)));
        }
        Value::Object(run)
    }
}

/// The scenario that replays `records` (a session's records, every file in order).
pub fn scenario_of(records: &[OmniMessage]) -> Result<Value, NotReplayable> {
    let stop = |i: usize, msg: &OmniMessage, why: &str| NotReplayable {
        record: i + 1,
        kind: kind(msg),
        why: why.to_owned(),
    };
    let mut runs: Vec<Run> = Vec::new();
    let mut llm: Vec<Value> = Vec::new();
    let mut tools = Map::new();
    let mut by_id = Map::new();
    // The request being rebuilt: its steps and when the last one came.
    let mut request: Option<(Vec<Value>, i64)> = None;
    let mut in_run = false;
    // Whether the current run's first request has begun (its input is complete).
    let mut run_requested = false;
    // When each call was dispatched (its approval, else its call), for its output's delay.
    let mut dispatched: std::collections::HashMap<String, i64> = Default::default();
    for (i, msg) in records.iter().enumerate() {
        if msg.has_origin() {
            return Err(stop(
                i,
                msg,
                "a subagent's record: subagents are not replayed yet",
            ));
        }
        if msg.session_meta().is_some() {
            continue;
        }
        let at = ms(msg);
        if let Some(event) = msg.event() {
            match event {
                EventPayload::ToolListReady { .. } => {}
                EventPayload::RequestBegin => {
                    if !in_run {
                        return Err(stop(i, msg, "a request outside any task"));
                    }
                    run_requested = true;
                    request = Some((Vec::new(), at));
                }
                EventPayload::RequestEnd {
                    status,
                    error_message,
                    ..
                } => {
                    let Some((steps, _)) = request.take() else {
                        return Err(stop(i, msg, "a request's end without its beginning"));
                    };
                    let mut outcome = json!({ "status": status });
                    if let Some(m) = error_message {
                        outcome["message"] = json!(m);
                    }
                    llm.push(json!({ "stream": steps, "outcome": outcome }));
                }
                EventPayload::TokenUsage { .. } => {
                    match &mut request {
                        Some((steps, last)) => {
                            steps.push(json!({ "delay_ms": (at - *last).max(0), "message": scripted(msg) }));
                            *last = at;
                        }
                        None => return Err(stop(i, msg, "token usage outside a request")),
                    }
                }
                EventPayload::ApprovalDecision {
                    decision,
                    tool_call_id,
                    ..
                } => {
                    by_id.insert(
                        tool_call_id.clone(),
                        serde_json::to_value(decision).unwrap_or_default(),
                    );
                    dispatched.insert(tool_call_id.clone(), at);
                }
                EventPayload::Abort { reason } => {
                    let user = reason.as_deref().is_some_and(|r| r.starts_with("aborted"));
                    if let (true, Some(run)) = (user, runs.last_mut()) {
                        run.abort_after_ms = Some(at - run.start_ms);
                    }
                    in_run = false;
                }
                EventPayload::CompactionBegin { .. } | EventPayload::CompactionEnd { .. } => {
                    return Err(stop(i, msg, "a compaction: its replay is not built yet"));
                }
                _ if kind(msg).starts_with("goal") => {
                    return Err(stop(i, msg, "a goal round: goal runs are not replayed yet"));
                }
                _ => {}
            }
            continue;
        }
        match msg.model() {
            Some(ModelPayload::Text(t)) if t.role == Role::User && in_run => {
                let text = t.text.as_str();
                let run = runs.last_mut().expect("in a run");
                if let Some(inner) = text
                    .starts_with("[user_steering]")
                    .then(|| penguin_omni_protocol::markers::find_block(text, "user_steering"))
                    .flatten()
                {
                    run.steer.push(json!({
                        "after_ms": (at - run.start_ms).max(0),
                        "input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": inner}}],
                    }));
                } else if ENGINE_MARKERS.iter().any(|m| text.starts_with(m)) {
                    // The engine writes these itself (carry-over, a retried turn).
                } else if t.sender.is_some() {
                    // A harness notice (a background task's end) delivered mid-task.
                    run.notices.push(
                        json!({ "after_ms": (at - run.start_ms).max(0), "message": scripted(msg) }),
                    );
                } else if !run_requested {
                    // More of the task's input (an image, a second part).
                    run.input.push(scripted(msg));
                } else {
                    // A new task: the engine adds no plain text of the person's mid-run.
                    runs.push(Run::starting(at, scripted(msg)));
                    run_requested = false;
                }
            }
            Some(
                ModelPayload::Text(_) | ModelPayload::ImageUrl(_) | ModelPayload::InlineData(_),
            ) if request.is_none() => {
                let user = scripted(msg)["payload"]["role"] == "user";
                if !user {
                    return Err(stop(i, msg, "a model message outside a request (the session may have crashed mid-stream)"));
                }
                match runs.last_mut().filter(|_| in_run && !run_requested) {
                    Some(run) => run.input.push(scripted(msg)),
                    None => {
                        runs.push(Run::starting(at, scripted(msg)));
                        in_run = true;
                        run_requested = false;
                    }
                }
            }
            Some(ModelPayload::ToolCallOutput(o)) => {
                // A denied or forbidden call's output is the engine's own.
                if by_id.get(&o.tool_call_id).is_some_and(|d| d != "allow") {
                    continue;
                }
                let from = dispatched.get(&o.tool_call_id).copied().unwrap_or(at);
                tools.insert(
                    o.tool_call_id.clone(),
                    json!({ "stream": [{ "delay_ms": (at - from).max(0), "message": scripted(msg) }] }),
                );
            }
            Some(_) => match &mut request {
                Some((steps, last)) => {
                    if let Some(ModelPayload::ToolCall(c)) = msg.model() {
                        dispatched.insert(c.tool_call_id.clone(), at);
                    }
                    steps
                        .push(json!({ "delay_ms": (at - *last).max(0), "message": scripted(msg) }));
                    *last = at;
                }
                None => return Err(stop(
                    i,
                    msg,
                    "a model message outside a request (the session may have crashed mid-stream)",
                )),
            },
            None => {}
        }
    }
    if request.is_some() {
        return Err(NotReplayable {
            record: records.len(),
            kind: "request_begin".into(),
            why: "the last request never ended (a crash mid-stream)".into(),
        });
    }
    Ok(json!({
        "description": "replayed from a session's trace (penguin replay)",
        "approvals": { "default": "allow", "by_id": by_id },
        "llm": llm,
        "tools": tools,
        "runs": runs.into_iter().map(Run::into_value).collect::<Vec<_>>(),
    }))
}

/// User texts the engine writes itself: replayed by the engine, never scripted.
const ENGINE_MARKERS: [&str; 2] = ["[turn_aborted]", "[turn_retried]"];

/// `records` as they are compared: timestamps, `session_meta` and `tool_list_ready` aside, an
/// absent `stop_reason` counted as `completed` (as scenario observables are compared).
pub fn comparable(records: &[OmniMessage]) -> Vec<Value> {
    records
        .iter()
        .filter(|m| m.session_meta().is_none())
        .filter(|m| !matches!(m.event(), Some(EventPayload::ToolListReady { .. })))
        .map(|m| {
            let mut v = scripted(m);
            if let Some(p) = v.get_mut("payload").and_then(Value::as_object_mut) {
                if p.get("type").and_then(Value::as_str).is_some_and(|t| {
                    matches!(t, "text" | "thinking" | "tool_call" | "tool_call_output")
                }) && !p.contains_key("stop_reason")
                {
                    p.insert("stop_reason".into(), json!("completed"));
                }
            }
            v
        })
        .collect()
}

/// The first difference between two comparable record lists, if any.
pub fn first_difference(expected: &[Value], got: &[Value]) -> Option<Difference> {
    let n = expected.len().max(got.len());
    (0..n)
        .find(|&i| expected.get(i) != got.get(i))
        .map(|i| Difference {
            record: i + 1,
            expected: expected.get(i).cloned(),
            got: got.get(i).cloned(),
        })
}
