//! Replaying a real session (`penguin replay`, `docs/rewind.md`): its Trace rebuilt as a
//! scenario file (the model's committed output per request, each tool's output and when it
//! came, the approvals, the steering, the aborts), run through the engine on a paused clock,
//! and the new Trace compared with the old one record by record.
//!
//! A session becomes a regression test of the harness this way: keep the scenario
//! (`--out FILE`) and the suite replays it from then on. What the Trace does not hold enough of
//! to replay exactly (a crash mid-stream, a goal file changed with no call) is named by its
//! record, never guessed at. Settings the Trace does not hold are read from what they did: a
//! compaction's mode, prompt and threshold from its records, a goal run's file, budget and
//! round limit from its rounds and how it ended, the turn limit from the text that reached it. A subagent call replays as its tool: its output and the child session it
//! started; the child replays from its own Trace.

use penguin_omni_protocol::{
    CompactionMode, CompactionReason, EventPayload, GoalOutcomeStatus, ModelPayload, OmniMessage,
    Role,
};
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
    /// When it starts, on the replay's clock (see `shift` in [`scenario_of`]).
    start_ms: i64,
    input: Vec<Value>,
    steer: Vec<Value>,
    notices: Vec<Value>,
    abort_after_ms: Option<i64>,
    /// A compaction by hand between tasks, which takes no input.
    compact: bool,
    /// A goal run's `goal` (its input is the objective).
    goal: Option<Map<String, Value>>,
}

impl Run {
    fn starting(at: i64, input: Value) -> Run {
        Run {
            start_ms: at,
            input: vec![input],
            steer: Vec::new(),
            notices: Vec::new(),
            abort_after_ms: None,
            compact: false,
            goal: None,
        }
    }

    fn into_value(self) -> Value {
        let mut run = Map::new();
        if self.compact {
            run.insert("compact".into(), json!(true));
            return Value::Object(run);
        }
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
        if let Some(goal) = self.goal {
            run.insert("goal".into(), Value::Object(goal));
        }
        Value::Object(run)
    }
}

/// The compaction settings a session's compactions show.
#[derive(Default)]
struct Compactions {
    mode: Option<CompactionMode>,
    prompt: Option<String>,
    /// The smallest context size, and number of requests, that set one off.
    context: Option<u64>,
    turns: Option<u64>,
    /// The one in progress: its reason, and whether its prompt was read.
    open: Option<(CompactionReason, bool)>,
}

impl Compactions {
    fn into_value(self) -> Option<Value> {
        let mode = self.mode?;
        let mut c = json!({ "mode": mode });
        if let Some(p) = self.prompt {
            c["prompt"] = json!(p);
        }
        // Absent, a trigger is off: no compaction of that kind happened.
        if let Some(n) = self.context {
            c["max_context_length"] = json!(n);
        }
        if let Some(n) = self.turns {
            c["max_session_turns"] = json!(n);
        }
        Some(c)
    }
}

/// What a goal round's message says: its round, the goal file's path, its content as the
/// round saw it, the budget (`None`: unbounded), and the text after the block.
struct GoalRound<'a> {
    round: u64,
    file: &'a str,
    content: &'a str,
    budget: Option<u64>,
    body: &'a str,
}

fn goal_round(text: &str) -> Option<GoalRound<'_>> {
    let rest = text.strip_prefix("[goal]\nround: ")?;
    let (block, body) = rest.split_once("\n[/goal]\n\n")?;
    let round = block.lines().next()?.parse().ok()?;
    let file = block.lines().find_map(|l| l.strip_prefix("Goal file: "))?;
    let content = block.split_once("```yaml\n")?.1.split_once("\n```")?.0;
    let budget = block.lines().find_map(|l| l.strip_prefix("Budget: "))?;
    let budget = match budget.strip_prefix("none") {
        Some(_) => None,
        None => Some(
            budget
                .split_once(" / ")?
                .1
                .split_once(' ')?
                .0
                .parse()
                .ok()?,
        ),
    };
    Some(GoalRound {
        round,
        file,
        content,
        budget,
        body,
    })
}

/// The text the engine writes when a run reached its turn limit, and that limit.
fn max_turns_reached(text: &str) -> Option<i64> {
    text.strip_prefix("[reached max turns (")?
        .strip_suffix("); stopping]")?
        .parse()
        .ok()
}

/// The goal run being rebuilt: the content its rounds showed, and the calls of its last round.
struct OpenGoal {
    content: String,
    calls: Vec<String>,
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
    // When each call was made, for its output's delay (a replayed call runs from then).
    let mut dispatched: std::collections::HashMap<String, i64> = Default::default();
    // The subagent calls not answered yet, in the order they were made, and the child
    // sessions each started (the `subagent` pointers, with when they came).
    let mut open_subagent_calls: Vec<String> = Vec::new();
    let mut children: std::collections::HashMap<String, Vec<(i64, String)>> = Default::default();
    // Whether the last request called tools (its run goes on with their outputs), and the
    // calls still waiting for their output.
    let mut turn_called = false;
    let mut waiting: std::collections::HashSet<String> = Default::default();
    // When the last request began, and when the record before this one was written.
    let mut begun_at = i64::MIN;
    let mut prev_at = i64::MIN;
    // How far the replay's clock is behind the original's: a replayed run starts as soon as
    // the one before ended, and a request as soon as its input is complete, so the waits
    // before them (a person typing, the session starting) are not replayed. A record written
    // at `at` comes at `at - shift` in the replay; runs' timers count from the run's start
    // on that clock.
    let mut shift: i64 = 0;
    let mut compactions = Compactions::default();
    let mut goal: Option<OpenGoal> = None;
    let mut max_turns: Option<i64> = None;
    for (i, msg) in records.iter().enumerate() {
        // A record's time is never before the one written ahead of it: a message stamped as it
        // was made can reach the Trace after later-stamped ones (a subagent's pointer).
        let at = ms(msg).max(prev_at);
        // The first record waits for nothing before it.
        let before = Some(std::mem::replace(&mut prev_at, at))
            .filter(|b| *b != i64::MIN)
            .unwrap_or(at);
        if msg.has_origin() {
            return Err(stop(
                i,
                msg,
                "a subagent's record in its parent's Trace, which never holds one",
            ));
        }
        if msg.session_meta().is_some() {
            continue;
        }
        if let Some(ModelPayload::Text(t)) = msg.model() {
            if t.role == Role::User && t.text.starts_with("[context_summary]") {
                // A compaction's summary, which the engine writes itself.
                continue;
            }
            if let Some(n) = max_turns_reached(&t.text).filter(|_| t.role == Role::Assistant) {
                // The engine's own, when a run reached the turn limit: the limit it had.
                if max_turns.is_some_and(|m| m != n) {
                    return Err(stop(i, msg, "another turn limit than the one before (the settings changed during the session)"));
                }
                max_turns = Some(n);
                continue;
            }
            if let (Role::User, Some(r)) = (t.role, goal_round(&t.text)) {
                if r.round > 1 {
                    // The engine's next round, from the same objective.
                    if let Some(g) = &mut goal {
                        g.calls.clear();
                    }
                    continue;
                }
                // A goal run starts: its input is the objective after the block.
                let mut spec = Map::new();
                spec.insert("file".into(), json!(r.file));
                if let Some(b) = r.budget {
                    spec.insert("budget".into(), json!(b));
                }
                let mut input = scripted(msg);
                input["payload"]["text"] = json!(r.body);
                shift += (at - before).max(0);
                let mut run = Run::starting(at - shift, input);
                run.goal = Some(spec);
                runs.push(run);
                in_run = true;
                run_requested = false;
                goal = Some(OpenGoal {
                    content: r.content.to_owned(),
                    calls: Vec::new(),
                });
                continue;
            }
            if let Some((_, prompted)) = &mut compactions.open {
                if t.role == Role::User {
                    // Its prompt, then after an unusable attempt the engine's guidance.
                    if !*prompted && request.is_none() {
                        *prompted = true;
                        match &compactions.prompt {
                            Some(p) if *p != t.text => {
                                return Err(stop(
                                    i,
                                    msg,
                                    "a compaction prompt unlike the one before (the settings changed during the session)",
                                ))
                            }
                            _ => compactions.prompt = Some(t.text.clone()),
                        }
                    }
                    continue;
                }
            }
        }
        if let Some(event) = msg.event() {
            match event {
                EventPayload::ToolListReady { .. } => {}
                EventPayload::RequestBegin if compactions.open.is_some() => {
                    // The compaction's request: scripted as any other, no turn of the task.
                    shift += (at - before).max(0);
                    request = Some((Vec::new(), at));
                }
                EventPayload::RequestBegin => {
                    if !in_run {
                        return Err(stop(i, msg, "a request outside any task"));
                    }
                    run_requested = true;
                    turn_called = false;
                    begun_at = at;
                    shift += (at - before).max(0);
                    request = Some((Vec::new(), at));
                }
                EventPayload::RequestEnd {
                    status,
                    error_message,
                    ..
                } => {
                    let Some((steps, last)) = request.take() else {
                        return Err(stop(i, msg, "a request's end without its beginning"));
                    };
                    let mut outcome = json!({ "status": status });
                    if let Some(m) = error_message {
                        outcome["message"] = json!(m);
                    }
                    // The stream's end can lag its last message (a tool's output between).
                    if at > last {
                        outcome["delay_ms"] = json!(at - last);
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
                    decided_by,
                    reason,
                    updated_arguments,
                } => {
                    // The approval comes as long after its call as it did (a person takes
                    // time; a rule answers in the same millisecond), and the call runs from
                    // then; a hook's decision names the hook, its reason and the arguments it
                    // rewrote, as the scenario's approver gives them back.
                    let decision = serde_json::to_value(decision).unwrap_or_default();
                    let called = dispatched.get(tool_call_id).copied().unwrap_or(at);
                    let mut answer = json!({ "decision": decision });
                    if at > called {
                        answer["delay_ms"] = json!(at - called);
                    }
                    match decided_by.as_deref().map(|by| by.strip_prefix("hook:")) {
                        None => {}
                        Some(Some(hook)) => {
                            answer["hook"] = json!(hook);
                            if let Some(r) = reason {
                                answer["reason"] = json!(r);
                            }
                            if let Some(a) = updated_arguments {
                                answer["updated_arguments"] = json!(a);
                            }
                        }
                        Some(None) => {
                            return Err(stop(i, msg, "a decision by something a scenario cannot name (only a person's or a hook's replay)"));
                        }
                    }
                    if answer.as_object().is_some_and(|o| o.len() == 1) {
                        answer = decision;
                    }
                    by_id.insert(tool_call_id.clone(), answer);
                    dispatched.insert(tool_call_id.clone(), at);
                }
                EventPayload::Abort { reason } => {
                    let user = reason.as_deref().is_some_and(|r| r.starts_with("aborted"));
                    if let (true, Some(run)) = (user, runs.last_mut()) {
                        run.abort_after_ms = Some(at - shift - run.start_ms);
                    }
                    in_run = false;
                }
                EventPayload::CompactionBegin {
                    reason,
                    mode,
                    context,
                    turns,
                } => {
                    if compactions.mode.is_some_and(|m| m != *mode) {
                        return Err(stop(
                            i,
                            msg,
                            "a compaction in another mode than the one before (the settings changed during the session)",
                        ));
                    }
                    compactions.mode = Some(*mode);
                    match reason {
                        CompactionReason::Context => {
                            compactions.context =
                                Some(compactions.context.map_or(*context, |c| c.min(*context)));
                        }
                        CompactionReason::Turns => {
                            compactions.turns =
                                Some(compactions.turns.map_or(*turns, |t| t.min(*turns)));
                        }
                        CompactionReason::Manual => {
                            // Between tasks (the engine compacts by hand only then), as a
                            // run of its own.
                            shift += (at - before).max(0);
                            let mut run = Run::starting(at - shift, Value::Null);
                            run.input.clear();
                            run.compact = true;
                            runs.push(run);
                        }
                    }
                    // Discard writes no prompt.
                    compactions.open = Some((*reason, *mode == CompactionMode::Discard));
                }
                EventPayload::CompactionEnd { .. } if compactions.open.take().is_none() => {
                    return Err(stop(i, msg, "a compaction's end without its beginning"));
                }
                EventPayload::Subagent { session_id } => {
                    // The child's session_meta reached the call's tool, which left this
                    // pointer: the replayed tool streams one again, and the engine leaves the
                    // same pointer. A call made earlier starts its child first.
                    let Some(call) = open_subagent_calls
                        .iter()
                        .find(|c| !children.contains_key(*c))
                        .cloned()
                    else {
                        return Err(stop(
                            i,
                            msg,
                            "a subagent pointer with no subagent call waiting for it",
                        ));
                    };
                    children
                        .entry(call)
                        .or_default()
                        .push((at, session_id.clone()));
                }
                EventPayload::GoalFinished {
                    outcome, rounds, ..
                } => {
                    let Some(open) = goal.take() else {
                        return Err(stop(i, msg, "a goal's end without its first round"));
                    };
                    let aborted = runs.last().is_some_and(|r| r.abort_after_ms.is_some());
                    let Some(spec) = runs.last_mut().and_then(|r| r.goal.as_mut()) else {
                        return Err(stop(i, msg, "a goal's end in a run that is not its own"));
                    };
                    match outcome {
                        GoalOutcomeStatus::Complete | GoalOutcomeStatus::Blocked => {
                            // The last round set the status (or broke or removed the file,
                            // which reads as blocked): through its last call.
                            let Some(call) = open.calls.last() else {
                                return Err(stop(i, msg, "a goal file that changed with no call in the goal's last round (by hand?)"));
                            };
                            let status = serde_json::to_value(outcome).unwrap_or_default();
                            let status = status.as_str().unwrap_or("blocked");
                            let text = match open.content.rsplit_once("status: ") {
                                Some((head, _)) => format!("{head}status: {status}\n"),
                                None => format!("{}\nstatus: {status}\n", open.content),
                            };
                            spec.insert("writes".into(), json!({ call.clone(): text }));
                        }
                        // Ended by a person's abort, or by the turn limit (`max_turns`), or
                        // else by the round limit, which it reached.
                        GoalOutcomeStatus::Aborted if !aborted && max_turns.is_none() => {
                            spec.insert("max_rounds".into(), json!(rounds));
                        }
                        GoalOutcomeStatus::Aborted | GoalOutcomeStatus::BudgetLimited => {}
                    }
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
                        "after_ms": (at - shift - run.start_ms).max(0),
                        "input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": inner}}],
                    }));
                } else if ENGINE_MARKERS.iter().any(|m| text.starts_with(m)) {
                    // The engine writes these itself (carry-over, a retried turn).
                } else if t.sender.is_some()
                    && request.is_none()
                    && run_requested
                    && !turn_called
                    && waiting.is_empty()
                {
                    // A harness notice after the run's last answer: it came once the session
                    // was idle, and its host started a run for it (the engine writes the same
                    // records when a notice waiting at a run's end keeps the run going).
                    shift += (at - before).max(0);
                    let mut idle = Run::starting(at - shift, Value::Null);
                    idle.input.clear();
                    idle.notices
                        .push(json!({ "after_ms": 0, "message": scripted(msg) }));
                    runs.push(idle);
                    run_requested = false;
                } else if t.sender.is_some() {
                    // A harness notice (a background task's end) delivered mid-task, with the
                    // input of the request after it: it was waiting when that input was put
                    // together, right after the record before it (the last tool output). On a
                    // paused clock it must be due before that instant, and after the input of
                    // the request before was put together.
                    let due = at.min(before - 1).max(begun_at + 1);
                    run.notices.push(
                        json!({ "after_ms": (due - shift - run.start_ms).max(0), "message": scripted(msg) }),
                    );
                } else if !run_requested {
                    // More of the task's input (an image, a second part).
                    run.input.push(scripted(msg));
                } else {
                    // A new task: the engine adds no plain text of the person's mid-run.
                    shift += (at - before).max(0);
                    runs.push(Run::starting(at - shift, scripted(msg)));
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
                        shift += (at - before).max(0);
                        runs.push(Run::starting(at - shift, scripted(msg)));
                        in_run = true;
                        run_requested = false;
                    }
                }
            }
            Some(ModelPayload::ToolCallOutput(_)) if compactions.open.is_some() => {
                // The engine's repair of a call a compaction attempt made.
            }
            Some(ModelPayload::ToolCallOutput(o)) => {
                // A denied or forbidden call's output is the engine's own.
                let decision = by_id
                    .get(&o.tool_call_id)
                    .map(|d| d.get("decision").unwrap_or(d));
                if decision.is_some_and(|d| d != "allow") {
                    continue;
                }
                waiting.remove(&o.tool_call_id);
                let mut last = dispatched.get(&o.tool_call_id).copied().unwrap_or(at);
                open_subagent_calls.retain(|c| *c != o.tool_call_id);
                let mut stream = Vec::new();
                for (when, child) in children.remove(&o.tool_call_id).unwrap_or_default() {
                    stream.push(
                        json!({ "delay_ms": (when - last).max(0), "message": child_head(&child) }),
                    );
                    last = when;
                }
                stream.push(json!({ "delay_ms": (at - last).max(0), "message": scripted(msg) }));
                tools.insert(o.tool_call_id.clone(), json!({ "stream": stream }));
            }
            Some(_) => match &mut request {
                Some((steps, last)) => {
                    if let Some(ModelPayload::ToolCall(c)) =
                        msg.model().filter(|_| compactions.open.is_none())
                    {
                        if let Some(g) = &mut goal {
                            g.calls.push(c.tool_call_id.clone());
                        }
                        dispatched.insert(c.tool_call_id.clone(), at);
                        turn_called = true;
                        waiting.insert(c.tool_call_id.clone());
                        if c.name == SUBAGENT_TOOL {
                            open_subagent_calls.push(c.tool_call_id.clone());
                        }
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
    let mut scenario = json!({
        "description": "replayed from a session's trace (penguin replay)",
        "approvals": { "default": "allow", "by_id": by_id },
        "llm": llm,
        "tools": tools,
        "runs": runs.into_iter().map(Run::into_value).collect::<Vec<_>>(),
    });
    if let Some(c) = compactions.into_value() {
        scenario["engine"]["compaction"] = c;
    }
    if let Some(n) = max_turns {
        scenario["engine"]["max_turns"] = json!(n);
    }
    Ok(scenario)
}

/// The tool that starts a child session (its pointer is in the parent's Trace).
const SUBAGENT_TOOL: &str = "run_subagent";

/// What a child session's stream starts with, as its parent's tool forwards it: its
/// `session_meta`, one hop of origin. Only its id reaches the parent's Trace (the pointer).
fn child_head(session_id: &str) -> Value {
    let mut head = penguin_omni_protocol::build::session_meta(penguin_omni_protocol::SessionMeta {
        session_id: session_id.to_owned(),
        provider: "scripted".into(),
        model_id: "replayed".into(),
        model_context_window: penguin_omni_protocol::ContextWindow::Other("unknown".into()),
        system_prompt: String::new(),
        agent_state: String::new(),
        workspace: String::new(),
        source: Some("subagent".into()),
        forked_from: None,
    });
    head.origin = Some(vec![session_id.to_owned()]);
    scripted(&head)
}

/// User texts the engine writes itself: replayed by the engine, never scripted.
const ENGINE_MARKERS: [&str; 2] = ["[turn_aborted]", "[turn_retried]"];

/// `records` as they are compared: timestamps, `session_meta` and `tool_list_ready` aside, an
/// absent `stop_reason` counted as `completed` (as scenario observables are compared).
fn comparable(records: &[OmniMessage]) -> Vec<&OmniMessage> {
    records
        .iter()
        .filter(|m| m.session_meta().is_none())
        .filter(|m| !matches!(m.event(), Some(EventPayload::ToolListReady { .. })))
        .collect()
}

fn compared(m: &OmniMessage) -> Value {
    let mut v = scripted(m);
    if let Some(p) = v.get_mut("payload").and_then(Value::as_object_mut) {
        if p.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| matches!(t, "text" | "thinking" | "tool_call" | "tool_call_output"))
            && !p.contains_key("stop_reason")
        {
            p.insert("stop_reason".into(), json!("completed"));
        }
    }
    v
}

/// Who wrote a record: the engine (`None`, first), or the tool of a call (its id, or the
/// child session a subagent call started).
fn producer(msg: &OmniMessage) -> Option<String> {
    match (msg.model(), msg.event()) {
        (Some(ModelPayload::ToolCallOutput(o)), _) => Some(o.tool_call_id.clone()),
        (Some(ModelPayload::PartialToolCallOutput(p)), _) => Some(p.tool_call_id.clone()),
        (_, Some(EventPayload::Subagent { session_id })) => Some(session_id.clone()),
        _ => None,
    }
}

/// A session's records against its replay's: how many were compared, or the first that
/// differs. In order, timestamps, `session_meta` and `tool_list_ready` aside (see
/// `comparable`).
///
/// Within one millisecond of the original the order of records from different producers (the
/// engine's own, each tool's) was a race on a real clock, where the replay's paused clock
/// follows the engine's rule: the records the original wrote in one millisecond are compared,
/// as a group, with as many of the replay's, both in one order (the engine's first, then each
/// tool's by call, each producer's own order kept). Across milliseconds, and within one
/// producer, the order is compared as written.
pub fn compare(
    original: &[OmniMessage],
    replayed: &[OmniMessage],
) -> Result<usize, Box<Difference>> {
    let (expected, got) = (comparable(original), comparable(replayed));
    // Each record's millisecond, never before the one written ahead of it (see `scenario_of`).
    let mut latest = i64::MIN;
    let stamped: Vec<(i64, &OmniMessage)> = expected
        .iter()
        .map(|m| {
            latest = latest.max(ms(m));
            (latest, *m)
        })
        .collect();
    let mut at = 0;
    for group in stamped.chunk_by(|a, b| a.0 == b.0) {
        let group: Vec<&OmniMessage> = group.iter().map(|(_, m)| *m).collect();
        let theirs = got
            .get(at..(at + group.len()).min(got.len()))
            .unwrap_or_default();
        let (mut ours, mut theirs) = (group.clone(), theirs.to_vec());
        ours.sort_by_key(|m| producer(m));
        theirs.sort_by_key(|m| producer(m));
        for (k, ours) in ours.iter().enumerate() {
            let (e, g) = (compared(ours), theirs.get(k).map(|m| compared(m)));
            if Some(&e) != g.as_ref() {
                return Err(Box::new(Difference {
                    record: at + k + 1,
                    expected: Some(e),
                    got: g,
                }));
            }
        }
        at += group.len();
    }
    match got.get(at) {
        None => Ok(at),
        Some(extra) => Err(Box::new(Difference {
            record: at + 1,
            expected: None,
            got: Some(compared(extra)),
        })),
    }
}
