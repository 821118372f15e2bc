//! Generated scenarios of the shapes random differential testing found penguin and the
//! reference disagreeing on, run through the scenario runner (paused clock, same-instant order):
//! empty carry-over blocks, image-only and mixed-role steering, goal-round inputs, and tools
//! whose output is ready at dispatch.
//!
//! For every generated scenario:
//! - the StreamValidator finds no violation in the stream of all runs;
//! - the trace is, run by run, the prompt followed by the stream minus partials;
//! - a `[turn_aborted]`/`[turn_retried]` block sent to the model has no empty body line;
//! - a goal round reaches the model only as the prompt of its own run, never carried over;
//! - each `[user_steering]` text holds user texts only, and whatever else its input held (an
//!   image, a non-user text) follows it;
//! - an output ready at dispatch comes before the model's next message.

#[path = "script.rs"]
mod script;

use std::sync::Arc;

use futures::StreamExt;
use penguin::engine::{CancellationToken, Engine, EngineConfig, InitialState, RunOptions};
use penguin::omni_protocol::markers::parse_goal_message;
use penguin::omni_protocol::validator::StreamValidator;
use penguin::omni_protocol::{EventPayload, Frame, ModelPayload, OmniMessage};
use penguin::scenario::{timer_delay, MemoryTrace, Scenario};
use proptest::prelude::*;
use serde_json::{json, Value};

const IMAGE: &str = "https://example.com/a.png";

/// A goal round's input, numbered after its run so a carried-over copy can be told apart.
fn goal(run: usize) -> String {
    format!("[goal]\nround: {}\nThis message was sent automatically by goal mode.\n[/goal]\n\nmake all tests pass", run + 1)
}

#[derive(Clone, Debug)]
enum Unit {
    Thinking,
    Text,
    WholeText,
    Call { streamed: bool },
}

#[derive(Clone, Debug)]
enum Tool {
    Unscripted,
    /// One complete output at dispatch.
    Instant,
    /// start, delta, stop, complete, all at dispatch.
    InstantStream,
    Delayed(u64),
}

#[derive(Clone, Debug)]
struct Request {
    units: Vec<Unit>,
    delays: Vec<u64>,
    /// Cut after this many steps with a failed outcome; `None` completes.
    cut: Option<usize>,
}

#[derive(Clone, Debug)]
enum Input {
    Empty,
    Goal,
    EmptyBlock,
    Text,
    TextAndImage,
}

#[derive(Clone, Debug)]
enum Steer {
    ImageOnly,
    MixedRoles,
    Blank,
    Text,
}

#[derive(Clone, Debug)]
struct Run {
    input: Input,
    abort_after: Option<u64>,
    steer: Vec<(u64, Steer)>,
}

#[derive(Clone, Debug)]
struct Gen {
    requests: Vec<Request>,
    tools: Vec<(Tool, u8)>,
    runs: Vec<Run>,
}

fn gen() -> impl Strategy<Value = Gen> {
    let unit = prop_oneof![
        Just(Unit::Thinking),
        Just(Unit::Text),
        Just(Unit::WholeText),
        any::<bool>().prop_map(|streamed| Unit::Call { streamed }),
    ];
    let request = (
        proptest::collection::vec(unit, 0..4),
        proptest::collection::vec(
            prop_oneof![3 => Just(0u64), 1 => Just(5), 1 => Just(20), 1 => Just(45)],
            24,
        ),
        proptest::option::weighted(0.2, 0usize..12),
    )
        .prop_map(|(units, delays, cut)| Request { units, delays, cut });
    let tool = prop_oneof![
        Just(Tool::Unscripted),
        Just(Tool::Instant),
        Just(Tool::InstantStream),
        (1u64..60).prop_map(Tool::Delayed),
    ];
    let input = prop_oneof![
        Just(Input::Empty),
        Just(Input::Goal),
        Just(Input::EmptyBlock),
        Just(Input::Text),
        Just(Input::TextAndImage),
    ];
    let steer = prop_oneof![
        Just(Steer::ImageOnly),
        Just(Steer::MixedRoles),
        Just(Steer::Blank),
        Just(Steer::Text),
    ];
    let run = (
        input,
        proptest::option::weighted(0.5, prop_oneof![Just(0u64), Just(10), 1u64..120]),
        proptest::collection::vec((prop_oneof![Just(0u64), 1u64..80], steer), 0..3),
    )
        .prop_map(|(input, abort_after, steer)| Run {
            input,
            abort_after,
            steer,
        });
    (
        proptest::collection::vec(request, 1..6),
        proptest::collection::vec((tool, 0u8..10), 12),
        proptest::collection::vec(run, 1..4),
    )
        .prop_map(|(requests, tools, runs)| Gen {
            requests,
            tools,
            runs,
        })
}

fn model(payload: Value) -> Value {
    json!({"type": "model_msg", "payload": payload})
}

fn fragment(kind: &str, field: &str, event: &str, content: &str, id: Option<&str>) -> Value {
    let role = if kind == "partial_tool_call_output" {
        "user"
    } else {
        "assistant"
    };
    let mut p = json!({"type": kind, "role": role, "event_type": event, field: content});
    if let Some(id) = id {
        p["tool_call_id"] = json!(id);
        if kind == "partial_tool_call" {
            p["name"] = json!(if event == "start" { "write_file" } else { "" });
        }
    }
    model(p)
}

fn user_text(text: &str) -> Value {
    model(json!({"type": "text", "role": "user", "text": text}))
}

fn image() -> Value {
    model(json!({"type": "image_url", "role": "user", "image_url": IMAGE}))
}

/// Builds the scenario file; also returns the ids of calls whose output is ready at dispatch.
fn scenario(g: &Gen) -> (Value, Vec<String>) {
    let mut llm = Vec::new();
    let mut tools = serde_json::Map::new();
    let mut by_id = serde_json::Map::new();
    let mut instant = Vec::new();
    let mut n = 0;
    for req in &g.requests {
        let mut steps: Vec<Value> = Vec::new();
        for unit in &req.units {
            match unit {
                Unit::Thinking => {
                    steps.push(fragment("partial_thinking", "thinking", "start", "", None));
                    steps.push(fragment("partial_thinking", "thinking", "delta", "hmm", None));
                    steps.push(fragment("partial_thinking", "thinking", "stop", "", None));
                    steps.push(model(json!({"type": "thinking", "role": "assistant", "thinking": "hmm", "stop_reason": "completed"})));
                }
                Unit::Text => {
                    steps.push(fragment("partial_text", "text", "start", "", None));
                    steps.push(fragment("partial_text", "text", "delta", "ok", None));
                    steps.push(fragment("partial_text", "text", "stop", "", None));
                    steps.push(model(json!({"type": "text", "role": "assistant", "text": "ok", "stop_reason": "completed"})));
                }
                Unit::WholeText => steps.push(model(
                    json!({"type": "text", "role": "assistant", "text": "said", "stop_reason": "completed"}),
                )),
                Unit::Call { streamed } => {
                    let id = format!("c{n}");
                    let (tool, approval) = &g.tools[n % g.tools.len()];
                    n += 1;
                    if *streamed {
                        steps.push(fragment("partial_tool_call", "arguments", "start", "", Some(&id)));
                        steps.push(fragment("partial_tool_call", "arguments", "delta", "{}", Some(&id)));
                        steps.push(fragment("partial_tool_call", "arguments", "stop", "", Some(&id)));
                    }
                    steps.push(model(json!({"type": "tool_call", "role": "assistant", "name": "write_file", "arguments": "{}", "tool_call_id": id, "stop_reason": "completed"})));
                    let output = model(json!({"type": "tool_call_output", "role": "user", "output": "done", "tool_call_id": id, "stop_reason": "completed"}));
                    let part = |event: &str, content: &str| {
                        fragment("partial_tool_call_output", "output", event, content, Some(&id))
                    };
                    let script = match tool {
                        Tool::Unscripted => None,
                        Tool::Instant => Some(json!([{"delay_ms": 0, "message": output}])),
                        Tool::InstantStream => Some(json!([
                            {"delay_ms": 0, "message": part("start", "")},
                            {"delay_ms": 0, "message": part("delta", "done")},
                            {"delay_ms": 0, "message": part("stop", "")},
                            {"delay_ms": 0, "message": output}
                        ])),
                        Tool::Delayed(d) => Some(json!([
                            {"delay_ms": d, "message": part("start", "")},
                            {"delay_ms": d, "message": part("delta", "done")},
                            {"delay_ms": 0, "message": part("stop", "")},
                            {"delay_ms": 0, "message": output}
                        ])),
                    };
                    if let Some(stream) = script {
                        tools.insert(id.clone(), json!({ "stream": stream }));
                    }
                    let decision = match approval {
                        0..=6 => json!("allow"),
                        7 => json!("deny"),
                        8 => json!({"decision": "allow", "delay_ms": 15}),
                        _ => json!("throw"),
                    };
                    if *approval <= 6 && matches!(tool, Tool::Unscripted | Tool::Instant) {
                        instant.push(id.clone());
                    }
                    by_id.insert(id, decision);
                }
            }
        }
        let mut entry = json!({});
        match req.cut {
            Some(cut) => {
                steps.truncate(cut);
                // Never between a stop and its complete: that is a broken script.
                if steps
                    .last()
                    .is_some_and(|m| m["payload"]["event_type"] == "stop")
                {
                    steps.pop();
                }
                entry["outcome"] = json!({"status": "failed", "message": "cut"});
            }
            None => steps.push(
                json!({"type": "event_msg", "payload": {"type": "token_usage",
                "session": {"cache_read": 0, "cache_write": 10, "output": 2, "total": 12},
                "request": {"cache_read": 0, "cache_write": 10, "output": 2, "total": 12}}}),
            ),
        }
        let stream = script::timed_stream(steps, &req.delays);
        entry["stream"] = json!(stream);
        llm.push(entry);
    }
    let runs: Vec<Value> = g
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let input = match r.input {
                Input::Empty => json!([]),
                Input::Goal => json!([user_text(&goal(i))]),
                Input::EmptyBlock => json!([user_text("[turn_aborted]\n[/turn_aborted]")]),
                Input::Text => json!([user_text("go")]),
                Input::TextAndImage => json!([
                    user_text("look"),
                    model(json!({"type": "image_url", "role": "user", "image_url": "https://example.com/prompt.png"}))
                ]),
            };
            let steer: Vec<Value> = r
                .steer
                .iter()
                .map(|(after, s)| {
                    let input = match s {
                        Steer::ImageOnly => json!([image()]),
                        Steer::MixedRoles => json!([
                            model(json!({"type": "text", "role": "assistant", "text": "assistant steer"})),
                            user_text("user steer")
                        ]),
                        Steer::Blank => json!([user_text("   ")]),
                        Steer::Text => json!([user_text("faster")]),
                    };
                    json!({"after_ms": after, "input": input})
                })
                .collect();
            let mut run = json!({"input": input, "steer": steer});
            if let Some(a) = r.abort_after {
                run["abort_after_ms"] = json!(a);
            }
            run
        })
        .collect();
    let file = json!({
        "engine": {"max_reconnects": 1, "reconnect_backoff_ms": 10, "reconnect_backoff_max_ms": 20},
        "approvals": {"default": "allow", "by_id": by_id},
        "llm": llm,
        "tools": tools,
        "runs": runs
    });
    (file, instant)
}

fn text(m: &OmniMessage) -> Option<&str> {
    match m.model() {
        Some(ModelPayload::Text(t)) => Some(&t.text),
        _ => None,
    }
}

fn is_steering(m: &OmniMessage) -> bool {
    text(m).is_some_and(|t| t.starts_with("[user_steering]\n"))
}

fn strip_timestamp(json: &str) -> Value {
    let mut v: Value = serde_json::from_str(json).unwrap();
    v.as_object_mut().unwrap().remove("timestamp");
    v
}

/// One run: its prompt, its stream, and the requests the model got during it.
type RunObserved = (Vec<OmniMessage>, Vec<Frame>, Vec<Vec<OmniMessage>>);

struct Observed {
    runs: Vec<RunObserved>,
    trace: Vec<Frame>,
}

/// Runs the scenario as `penguin scenario run` does (paused clock, same-instant order), keeping
/// each run's stream and requests apart.
fn execute(scenario: Scenario) -> Observed {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let trace = MemoryTrace::default();
        let model = scenario.llm.clone();
        let config = EngineConfig {
            same_instant_order: true,
            ..scenario.engine
        };
        let engine = Engine::with_parts(
            Box::new(scenario.llm),
            Arc::new(scenario.tools),
            config,
            Some(Arc::new(trace.clone())),
            InitialState::default(),
        );
        let approver = scenario.approvals.map_or(
            Arc::new(penguin::engine::DenyAll) as Arc<dyn penguin::engine::Approver>,
            |a| Arc::new(a),
        );
        let mut runs = Vec::new();
        for run in scenario.runs {
            let before = model.requests().len();
            let cancel = CancellationToken::new();
            let options = RunOptions::new(approver.clone()).with_cancel(cancel.clone());
            let mut stream = engine.run(run.input.clone(), options).unwrap();
            let mut timers = tokio::task::JoinSet::new();
            if let Some(after) = run.abort_after {
                timers.spawn(async move {
                    tokio::time::sleep(timer_delay(after)).await;
                    cancel.cancel();
                });
            }
            for (after, input) in run.steer {
                let e = engine.clone();
                timers.spawn(async move {
                    tokio::time::sleep(timer_delay(after)).await;
                    e.steer(input);
                });
            }
            let mut frames = Vec::new();
            while let Some(f) = stream.next().await {
                frames.push(f);
            }
            timers.abort_all();
            runs.push((run.input, frames, model.requests()[before..].to_vec()));
        }
        Observed {
            runs,
            trace: trace.records(),
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn generated_scenarios_keep_the_contract(g in gen()) {
        let (file, instant) = scenario(&g);
        let obs = execute(Scenario::parse(&file.to_string()).unwrap());
        let stream: Vec<&OmniMessage> = obs.runs.iter().flat_map(|(_, f, _)| f.iter().map(Frame::message)).collect();

        let violations = StreamValidator::validate(stream.iter().copied());
        prop_assert!(violations.is_empty(), "validator: {}", violations.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n"));

        // Stream order = trace order: per run, the prompt, then the recordable stream.
        let mut expected = Vec::new();
        for (input, frames, _) in &obs.runs {
            expected.extend(input.iter().map(|m| strip_timestamp(&m.to_json())));
            expected.extend(frames.iter().filter(|f| f.message().is_recordable()).map(|f| strip_timestamp(f.json())));
        }
        let trace: Vec<Value> = obs.trace.iter().map(|f| strip_timestamp(f.json())).collect();
        prop_assert_eq!(trace, expected);

        for (r, (_, _, requests)) in obs.runs.iter().enumerate() {
            for m in requests.iter().flatten() {
                let Some(t) = text(m) else { continue };
                if t.starts_with("[turn_aborted]") || t.starts_with("[turn_retried]") {
                    prop_assert!(!t.contains("\n\n[/turn_"), "an empty body line: {:?}", t);
                    prop_assert!(!t.contains("[user_input][goal]\n"), "a goal round transcribed as is: {:?}", t);
                }
                if parse_goal_message(t).is_some() {
                    prop_assert_eq!(t, goal(r), "a goal round carried over");
                }
            }
        }

        for (i, m) in stream.iter().enumerate() {
            if is_steering(m) {
                prop_assert!(!text(m).unwrap().contains("assistant steer"), "steering holds user texts only");
            }
            // A steering image or non-user text follows its steering text.
            let extra = matches!(m.model(), Some(ModelPayload::ImageUrl(u)) if u.image_url == IMAGE) || text(m) == Some("assistant steer");
            if extra {
                prop_assert!(i > 0 && is_steering(stream[i - 1]), "steering's other messages follow its text");
            }
            if text(m) == Some("[user_steering]\n\n[/user_steering]") {
                prop_assert!(matches!(stream.get(i + 1).and_then(|n| n.model()), Some(ModelPayload::ImageUrl(_))), "an empty steering text carries an image");
            }
        }

        // An output ready at dispatch comes before the model's next message.
        for id in &instant {
            let decided = stream.iter().position(|m| matches!(m.event(), Some(EventPayload::ApprovalDecision { tool_call_id, .. }) if tool_call_id == id));
            let Some(decided) = decided else { continue };
            let answered = stream[decided..].iter().position(|m| matches!(m.model(), Some(ModelPayload::ToolCallOutput(o)) if &o.tool_call_id == id));
            prop_assert!(answered.is_some(), "{} answered", id);
            let between = &stream[decided + 1..decided + answered.unwrap()];
            let model_went_on = between.iter().any(|m| {
                matches!(m.event(), Some(EventPayload::RequestEnd { .. }))
                    || matches!(m.model(), Some(p) if !matches!(p, ModelPayload::ToolCallOutput(_) | ModelPayload::PartialToolCallOutput(_)))
            });
            prop_assert!(!model_went_on, "the output of {} came after the model went on", id);
        }
    }
}
