//! Ordering invariants of the engine over generated scenarios: random model scripts (segments,
//! tool calls, failures cut mid-stream), tool durations, approval decisions and delays, abort
//! points and steering, all on tokio's paused clock.
//!
//! For every generated session:
//! - the StreamValidator finds no violation of the guarantees (§0.5, `docs/protocol.md#s0.5`);
//! - the trace equals, run by run, the prompt followed by the stream minus partials and
//!   origin-tagged messages;
//! - each request's tool outputs are in call order;
//! - across runs every committed tool_call is answered exactly once (carry-over included);
//! - the abort, when present, is the run's last message.

#[path = "script.rs"]
mod script;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use penguin::engine::{CancellationToken, Engine, InitialState, RunOptions};
use penguin::omni_protocol::validator::StreamValidator;
use penguin::omni_protocol::{EventPayload, Frame, ModelPayload, OmniMessage, StopReason};
use penguin::scenario::{MemoryTrace, Scenario};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Clone, Debug)]
struct GenRequest {
    thinking: bool,
    text_deltas: usize,
    calls: usize,
    outcome: StopReason,
    cut: usize,
    delays: Vec<u64>,
}

#[derive(Clone, Debug)]
struct GenRun {
    abort_after: Option<u64>,
    steer_after: Option<u64>,
}

#[derive(Clone, Debug)]
struct Gen {
    requests: Vec<GenRequest>,
    tool_delays: Vec<Vec<u64>>,
    approvals: Vec<(u8, u64)>,
    runs: Vec<GenRun>,
    max_reconnects: u32,
}

fn gen() -> impl Strategy<Value = Gen> {
    let outcome = prop_oneof![
        12 => Just(StopReason::Completed),
        2 => Just(StopReason::Timeout),
        1 => Just(StopReason::Failed),
        1 => Just(StopReason::Malformed),
        1 => Just(StopReason::Auth),
    ];
    let request = (
        any::<bool>(),
        0usize..3,
        0usize..4,
        outcome,
        0usize..40,
        proptest::collection::vec(0u64..60, 40),
    )
        .prop_map(
            |(thinking, text_deltas, calls, outcome, cut, delays)| GenRequest {
                thinking,
                text_deltas,
                calls,
                outcome,
                cut,
                delays,
            },
        );
    let run = (
        proptest::option::weighted(0.4, 0u64..900),
        proptest::option::weighted(0.3, 0u64..400),
    )
        .prop_map(|(abort_after, steer_after)| GenRun {
            abort_after,
            steer_after,
        });
    (
        proptest::collection::vec(request, 1..7),
        proptest::collection::vec(proptest::collection::vec(0u64..250, 4), 24),
        proptest::collection::vec((0u8..10, 0u64..40), 24),
        proptest::collection::vec(run, 1..4),
        0u32..3,
    )
        .prop_map(
            |(requests, tool_delays, approvals, runs, max_reconnects)| Gen {
                requests,
                tool_delays,
                approvals,
                runs,
                max_reconnects,
            },
        )
}

fn model(payload: Value) -> Value {
    json!({"type": "model_msg", "payload": payload})
}

fn partial(kind: &str, field: &str, event: &str, content: &str, extra: &[(&str, &str)]) -> Value {
    let mut p = json!({"type": kind, "role": if kind == "partial_tool_call_output" { "user" } else { "assistant" }, "event_type": event});
    for (k, v) in extra {
        p[*k] = json!(v);
    }
    p[field] = json!(content);
    p["stop_reason"] = json!("completed");
    model(p)
}

/// Builds a scenario file from the generated parameters.
fn scenario(g: &Gen) -> Value {
    let mut llm = Vec::new();
    let mut tools = serde_json::Map::new();
    let mut by_id = serde_json::Map::new();
    let mut call_n = 0;
    for (r, req) in g.requests.iter().enumerate() {
        // Units: each a segment's start..complete; a cut lands between units or inside one
        // before its stop, so the script itself always obeys the streaming discipline.
        let mut units: Vec<Vec<Value>> = Vec::new();
        if req.thinking {
            units.push(vec![
                partial("partial_thinking", "thinking", "start", "", &[]),
                partial("partial_thinking", "thinking", "delta", "hmm", &[]),
                partial("partial_thinking", "thinking", "stop", "", &[]),
                model(json!({"type": "thinking", "role": "assistant", "thinking": "hmm", "stop_reason": "completed"})),
            ]);
        }
        if req.text_deltas > 0 {
            let mut u = vec![partial("partial_text", "text", "start", "", &[])];
            let mut full = String::new();
            for d in 0..req.text_deltas {
                let piece = format!("t{r}.{d} ");
                full.push_str(&piece);
                u.push(partial("partial_text", "text", "delta", &piece, &[]));
            }
            u.push(partial("partial_text", "text", "stop", "", &[]));
            u.push(model(json!({"type": "text", "role": "assistant", "text": full, "stop_reason": "completed"})));
            units.push(u);
        }
        for _ in 0..req.calls {
            let id = format!("call_{call_n}");
            let args = format!("{{\"n\":{call_n}}}");
            units.push(vec![
                partial("partial_tool_call", "arguments", "start", "", &[("name", "probe"), ("tool_call_id", &id)]),
                partial("partial_tool_call", "arguments", "delta", &args, &[("name", ""), ("tool_call_id", &id)]),
                partial("partial_tool_call", "arguments", "stop", "", &[("name", ""), ("tool_call_id", &id)]),
                model(json!({"type": "tool_call", "role": "assistant", "name": "probe", "arguments": args, "tool_call_id": id, "stop_reason": "completed"})),
            ]);
            let d = &g.tool_delays[call_n % g.tool_delays.len()];
            let out = format!("out {call_n}");
            tools.insert(
                id.clone(),
                json!({"stream": [
                    {"delay_ms": d[0], "message": partial("partial_tool_call_output", "output", "start", "", &[("tool_call_id", &id)])},
                    {"delay_ms": d[1], "message": partial("partial_tool_call_output", "output", "delta", "out ", &[("tool_call_id", &id)])},
                    {"delay_ms": d[2], "message": partial("partial_tool_call_output", "output", "delta", &call_n.to_string(), &[("tool_call_id", &id)])},
                    {"delay_ms": d[3], "message": partial("partial_tool_call_output", "output", "stop", "", &[("tool_call_id", &id)])},
                    {"delay_ms": 0, "message": model(json!({"type": "tool_call_output", "role": "user", "output": out, "tool_call_id": id, "stop_reason": "completed"}))}
                ]}),
            );
            let (kind, delay) = g.approvals[call_n % g.approvals.len()];
            let decision = match kind {
                0..=5 => "allow",
                6 | 7 => "deny",
                8 => "forbidden",
                _ => "throw",
            };
            by_id.insert(id, json!({"decision": decision, "delay_ms": delay}));
            call_n += 1;
        }
        let mut steps: Vec<Value> = Vec::new();
        if req.outcome == StopReason::Completed {
            steps.extend(units.into_iter().flatten());
            steps.push(
                json!({"type": "event_msg", "payload": {"type": "token_usage",
                "session": {"cache_read": 0, "cache_write": 10, "output": 2, "total": 12},
                "request": {"cache_read": 0, "cache_write": 10, "output": 2, "total": 12}}}),
            );
        } else {
            let mut budget = req.cut;
            for u in units {
                if budget >= u.len() {
                    budget -= u.len();
                    steps.extend(u);
                } else {
                    // Inside the unit, never past its stop (a stop without its complete would be
                    // a broken script, not an engine behaviour).
                    steps.extend(u.into_iter().take(budget.min(2)));
                    break;
                }
            }
        }
        let stream = script::timed_stream(steps, &req.delays);
        let mut entry = json!({"stream": stream});
        if req.outcome != StopReason::Completed {
            entry["outcome"] =
                json!({"status": req.outcome.as_str(), "message": "scripted failure"});
        }
        llm.push(entry);
    }
    let runs: Vec<Value> = g
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut run = json!({"input": [model(json!({"type": "text", "role": "user", "text": format!("prompt {i}")}))]});
            if let Some(a) = r.abort_after {
                run["abort_after_ms"] = json!(a);
            }
            if let Some(s) = r.steer_after {
                run["steer"] = json!([{"after_ms": s, "input": [model(json!({"type": "text", "role": "user", "text": "faster"}))]}]);
            }
            run
        })
        .collect();
    json!({
        "engine": {"max_reconnects": g.max_reconnects, "reconnect_backoff_ms": 10, "reconnect_backoff_max_ms": 40},
        "approvals": {"default": "allow", "by_id": by_id},
        "llm": llm,
        "tools": tools,
        "runs": runs
    })
}

struct Observed {
    runs: Vec<(Vec<OmniMessage>, Vec<Frame>)>,
    trace: Vec<Frame>,
    requests: Vec<Vec<OmniMessage>>,
    carry_over: Vec<OmniMessage>,
}

fn execute(scenario: Scenario) -> Observed {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let trace = MemoryTrace::default();
        let model = scenario.llm.clone();
        let engine = Engine::with_parts(
            Box::new(scenario.llm),
            Arc::new(scenario.tools),
            scenario.engine,
            Some(Arc::new(trace.clone())),
            InitialState::default(),
        );
        let approver = scenario.approvals.map_or(
            Arc::new(penguin::engine::DenyAll) as Arc<dyn penguin::engine::Approver>,
            |a| Arc::new(a),
        );
        let mut runs = Vec::new();
        for run in scenario.runs {
            let cancel = CancellationToken::new();
            let mut stream = engine
                .run(
                    run.input.clone(),
                    RunOptions::new(approver.clone()).with_cancel(cancel.clone()),
                )
                .unwrap();
            let mut timers = tokio::task::JoinSet::new();
            if let Some(after) = run.abort_after {
                let c = cancel.clone();
                timers.spawn(async move {
                    tokio::time::sleep(after).await;
                    c.cancel();
                });
            }
            for (after, input) in run.steer {
                let e = engine.clone();
                timers.spawn(async move {
                    tokio::time::sleep(after).await;
                    e.steer(input);
                });
            }
            let mut frames = Vec::new();
            while let Some(f) = stream.next().await {
                frames.push(f);
            }
            timers.abort_all();
            runs.push((run.input, frames));
        }
        Observed {
            runs,
            trace: trace.records(),
            requests: model.requests(),
            carry_over: engine.pending_carry_over(),
        }
    })
}

fn is_output(m: &OmniMessage) -> bool {
    matches!(m.model(), Some(ModelPayload::ToolCallOutput(_)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_keeps_the_seed_guarantees(g in gen()) {
        let file = scenario(&g);
        let obs = execute(Scenario::parse(&file.to_string()).unwrap());

        // The whole multi-run stream keeps every guarantee of §0.5.
        let stream: Vec<&OmniMessage> = obs.runs.iter().flat_map(|(_, f)| f.iter().map(Frame::message)).collect();
        let violations = StreamValidator::validate(stream.iter().copied());
        prop_assert!(violations.is_empty(), "validator: {}", violations.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n"));

        // Stream order = trace order: per run, the prompt, then the recordable stream.
        let mut expected_trace = Vec::new();
        for (input, frames) in &obs.runs {
            expected_trace.extend(input.iter().map(|m| m.to_json()));
            expected_trace.extend(frames.iter().filter(|f| f.message().is_recordable()).map(|f| f.json().to_owned()));
        }
        let trace: Vec<String> = obs.trace.iter().map(|f| f.json().to_owned()).collect();
        // Prompts are stamped when parsed, so compare them without timestamps.
        prop_assert_eq!(trace.len(), expected_trace.len());
        for (t, e) in trace.iter().zip(&expected_trace) {
            let strip = |s: &str| { let mut v: Value = serde_json::from_str(s).unwrap(); v.as_object_mut().unwrap().remove("timestamp"); v };
            prop_assert_eq!(strip(t), strip(e));
        }

        // The abort, when present, is the run's last message, and appears at most once.
        for (_, frames) in &obs.runs {
            let aborts: Vec<usize> = frames.iter().enumerate().filter(|(_, f)| matches!(f.message().event(), Some(EventPayload::Abort { .. }))).map(|(i, _)| i).collect();
            prop_assert!(aborts.len() <= 1);
            if let Some(&i) = aborts.first() {
                prop_assert_eq!(i, frames.len() - 1, "abort is the run's last message");
            }
        }

        // Map requests to their outcomes and collect committed calls, in call order.
        let all: Vec<&OmniMessage> = obs.runs.iter().flat_map(|(_, f)| f.iter().map(Frame::message)).collect();
        let mut statuses = Vec::new();
        let mut call_order: HashMap<String, usize> = HashMap::new();
        let mut committed: Vec<String> = Vec::new();
        let mut current: Vec<String> = Vec::new();
        for m in &all {
            match (m.event(), m.model()) {
                (Some(EventPayload::RequestBegin), _) => current.clear(),
                (Some(EventPayload::RequestEnd { status, .. }), _) => {
                    statuses.push(*status);
                    if *status == StopReason::Completed {
                        committed.append(&mut current);
                    }
                }
                (_, Some(ModelPayload::ToolCall(c))) if c.stop_reason != Some(StopReason::Aborted) && !m.has_origin() => {
                    let next = call_order.len();
                    call_order.entry(c.tool_call_id.clone()).or_insert(next);
                    if c.stop_reason.is_none_or(|r| r == StopReason::Completed) {
                        current.push(c.tool_call_id.clone());
                    }
                }
                _ => {}
            }
        }
        prop_assert_eq!(statuses.len(), obs.requests.len(), "one request_end per model request");

        // Each request's tool outputs are in call order.
        for input in &obs.requests {
            let positions: Vec<usize> = input.iter().filter(|m| is_output(m)).filter_map(|m| call_order.get(m.tool_call_id().unwrap()).copied()).collect();
            prop_assert!(positions.windows(2).all(|w| w[0] < w[1]), "outputs out of call order: {:?}", positions);
        }

        // Every committed call is answered exactly once across completed requests and the
        // final carry-over; nothing else is answered.
        let mut answers: HashMap<String, usize> = HashMap::new();
        for (input, status) in obs.requests.iter().zip(&statuses) {
            if *status == StopReason::Completed {
                for m in input.iter().filter(|m| is_output(m)) {
                    *answers.entry(m.tool_call_id().unwrap().to_owned()).or_default() += 1;
                }
            }
        }
        for m in obs.carry_over.iter().filter(|m| is_output(m)) {
            *answers.entry(m.tool_call_id().unwrap().to_owned()).or_default() += 1;
        }
        for id in &committed {
            prop_assert_eq!(answers.get(id).copied().unwrap_or(0), 1, "committed call {} answered once", id);
        }
        for id in answers.keys() {
            prop_assert!(committed.contains(id), "answer for uncommitted call {}", id);
        }
    }
}
