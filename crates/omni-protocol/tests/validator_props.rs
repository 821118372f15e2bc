//! The validator against a model of a correct producer: every generated stream is accepted,
//! and every single mutation of a stream is caught.

use penguin_omni_protocol::build::{self, RetryDetail};
use penguin_omni_protocol::validator::{validate_jsonl, Rule, StreamValidator, Violation};
use penguin_omni_protocol::StreamEventType::{Delta, Start, Stop};
use penguin_omni_protocol::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

/// SplitMix64: the interleaving of producers is drawn from a seed so that proptest shrinks the
/// structure while the arrival order stays reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Debug)]
struct CallSpec {
    /// `None`: the model emits the complete tool_call only.
    args: Option<Vec<String>>,
    decision: ApprovalDecision,
    /// `None`: the tool emits its complete output only.
    output: Option<Vec<String>>,
    /// The complete call carries re-serialized JSON arguments (§1.8) instead of the deltas.
    reserialized: bool,
}

#[derive(Clone, Debug)]
struct TurnSpec {
    thinking: Option<Vec<String>>,
    text: Option<Vec<String>>,
    calls: Vec<CallSpec>,
    /// A timed-out attempt precedes the successful one.
    retried: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunEnd {
    /// The run ends after its last turn settles.
    Normal,
    /// Interrupted while tools ran: their aborted outputs, then `abort` (Case A).
    AbortAfterTools,
    /// Interrupted mid-stream: segments closed as aborted, a committed call left without
    /// approval or output, `request_end(aborted)`, then `abort` (Case B).
    AbortMidStream,
}

#[derive(Clone, Debug)]
struct RunSpec {
    notice: bool,
    turns: Vec<TurnSpec>,
    end: RunEnd,
}

#[derive(Clone, Debug)]
struct StreamSpec {
    runs: Vec<RunSpec>,
    child: Option<RunSpec>,
    seed: u64,
}

fn fragments() -> impl Strategy<Value = Vec<String>> {
    vec("[a-z {}\":,]{0,6}", 0..4)
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    (
        option::of(fragments()),
        prop_oneof![
            4 => Just(ApprovalDecision::Allow),
            1 => Just(ApprovalDecision::Deny),
            1 => Just(ApprovalDecision::Forbidden)
        ],
        option::of(fragments()),
        any::<bool>(),
    )
        .prop_map(|(args, decision, output, reserialized)| CallSpec {
            args,
            decision,
            output,
            reserialized,
        })
}

fn turn_spec() -> impl Strategy<Value = TurnSpec> {
    (
        option::of(fragments()),
        option::of(fragments()),
        vec(call_spec(), 0..4),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(thinking, text, calls, retried)| TurnSpec {
            thinking,
            text,
            calls,
            retried,
        })
}

fn run_spec() -> impl Strategy<Value = RunSpec> {
    (
        any::<bool>(),
        vec(turn_spec(), 1..4),
        prop_oneof![
            Just(RunEnd::Normal),
            Just(RunEnd::AbortAfterTools),
            Just(RunEnd::AbortMidStream)
        ],
    )
        .prop_map(|(notice, turns, end)| RunSpec { notice, turns, end })
}

fn stream_spec() -> impl Strategy<Value = StreamSpec> {
    (vec(run_spec(), 1..4), option::of(run_spec()), any::<u64>())
        .prop_map(|(runs, child, seed)| StreamSpec { runs, child, seed })
}

/// A spec in which every mutation below has something to act on: the first turn streams
/// thinking, text, an allowed call with streamed output and a denied call, and the last run
/// ends with an abort.
fn rich_spec() -> impl Strategy<Value = StreamSpec> {
    (
        stream_spec(),
        vec("[a-z]{1,4}", 1..4),
        prop_oneof![Just(RunEnd::AbortAfterTools), Just(RunEnd::AbortMidStream)],
    )
        .prop_map(|(mut spec, pieces, end)| {
            let rich = TurnSpec {
                thinking: Some(pieces.clone()),
                text: Some(pieces.clone()),
                calls: vec![
                    CallSpec {
                        args: Some(pieces.clone()),
                        decision: ApprovalDecision::Allow,
                        output: Some(pieces.clone()),
                        reserialized: false,
                    },
                    CallSpec {
                        args: Some(pieces),
                        decision: ApprovalDecision::Deny,
                        output: None,
                        reserialized: false,
                    },
                ],
                retried: false,
            };
            spec.runs[0].turns.insert(0, rich);
            spec.runs.last_mut().expect("at least one run").end = end;
            spec
        })
}

fn usage() -> OmniMessage {
    let c = TokenCounts::new(0, 3, 2);
    build::token_usage(c, c)
}

/// start, a delta per piece, stop: what a producer streams for one segment.
fn segment(
    make: impl Fn(StreamEventType, String, StopReason) -> OmniMessage,
    pieces: &[String],
    stop: StopReason,
) -> Vec<OmniMessage> {
    let mut out = vec![make(Start, String::new(), StopReason::Completed)];
    out.extend(
        pieces
            .iter()
            .map(|p| make(Delta, p.clone(), StopReason::Completed)),
    );
    out.push(make(Stop, String::new(), stop));
    out
}

/// One producer's queue. A tool's queue opens when the driver emits its approval.
struct Producer {
    messages: std::collections::VecDeque<OmniMessage>,
    /// For the driver: after emitting message `n`, open tool queue `k`.
    opens: Vec<(usize, usize)>,
    emitted: usize,
    open: bool,
}

/// The merge queue: producers' messages interleave at random, each producer's order preserved.
fn merge(mut producers: Vec<Producer>, rng: &mut Rng, out: &mut Vec<OmniMessage>) {
    loop {
        let ready: Vec<usize> = (0..producers.len())
            .filter(|&i| producers[i].open && !producers[i].messages.is_empty())
            .collect();
        if ready.is_empty() {
            break;
        }
        let p = ready[rng.below(ready.len())];
        let msg = producers[p].messages.pop_front().expect("ready producer");
        let n = producers[p].emitted;
        producers[p].emitted += 1;
        out.push(msg);
        let opened: Vec<usize> = producers[p]
            .opens
            .iter()
            .filter(|(after, _)| *after == n)
            .map(|(_, k)| *k)
            .collect();
        for k in opened {
            producers[k].open = true;
        }
    }
    assert!(
        producers.iter().all(|p| p.messages.is_empty()),
        "every producer drains"
    );
}

fn generate_run(run: &RunSpec, prefix: &str, rng: &mut Rng, out: &mut Vec<OmniMessage>) {
    if run.notice {
        out.push(build::user_text_from(
            "a background task finished",
            TextSender::Harness,
        ));
    }
    for (t, turn) in run.turns.iter().enumerate() {
        if turn.retried {
            out.push(build::request_begin());
            out.extend(segment(
                build::partial_text,
                &["cut ".to_owned()],
                StopReason::Timeout,
            ));
            out.push(build::assistant_text("cut ", StopReason::Timeout));
            out.push(build::request_end(
                StopReason::Timeout,
                RetryDetail {
                    attempt: Some(1),
                    retry_in_ms: Some(2000),
                    ..RetryDetail::default()
                },
            ));
        }
        let interrupted_tools = run.end == RunEnd::AbortAfterTools && t + 1 == run.turns.len();
        let mut driver = Vec::new();
        let mut opens = Vec::new();
        let mut tools = Vec::new();
        driver.push(build::request_begin());
        if let Some(p) = &turn.thinking {
            driver.extend(segment(build::partial_thinking, p, StopReason::Completed));
            driver.push(build::thinking(p.concat(), StopReason::Completed, None));
        }
        if let Some(p) = &turn.text {
            driver.extend(segment(build::partial_text, p, StopReason::Completed));
            driver.push(build::assistant_text(p.concat(), StopReason::Completed));
        }
        for (k, call) in turn.calls.iter().enumerate() {
            let id = format!("{prefix}call_{t}_{k}");
            let args = match &call.args {
                Some(p) => {
                    driver.extend(segment(
                        |e, s, r| {
                            build::partial_tool_call(
                                e,
                                if e == Start { "tool" } else { "" },
                                s,
                                id.as_str(),
                                r,
                            )
                        },
                        p,
                        StopReason::Completed,
                    ));
                    p.concat()
                }
                None => r#"{"k":1}"#.to_owned(),
            };
            // A provider may hand back parsed arguments that the engine re-serializes.
            let args = match serde_json::from_str::<serde_json::Value>(&args) {
                Ok(v) if call.reserialized => v.to_string(),
                _ => args,
            };
            driver.push(build::tool_call(
                "tool",
                args,
                id.as_str(),
                StopReason::Completed,
                None,
            ));
            driver.push(build::approval_decision(call.decision, id.as_str()));
            match call.decision {
                ApprovalDecision::Allow => {
                    opens.push((driver.len() - 1, tools.len() + 1));
                    let stop = if interrupted_tools {
                        StopReason::Aborted
                    } else {
                        StopReason::Completed
                    };
                    let mut msgs = Vec::new();
                    let text = match &call.output {
                        Some(p) => {
                            msgs.extend(segment(
                                |e, s, r| build::partial_tool_call_output(e, s, id.as_str(), r),
                                p,
                                stop,
                            ));
                            p.concat()
                        }
                        None => "done".to_owned(),
                    };
                    msgs.push(build::tool_call_output(text, id.as_str(), stop));
                    tools.push(msgs);
                }
                ApprovalDecision::Deny => driver.push(build::tool_call_output(
                    "Tool call denied by user.",
                    id.as_str(),
                    StopReason::Aborted,
                )),
                ApprovalDecision::Forbidden => driver.push(build::tool_call_output(
                    "Tool call denied by policy.",
                    id.as_str(),
                    StopReason::Aborted,
                )),
            }
        }
        driver.push(usage());
        driver.push(build::request_end(
            StopReason::Completed,
            RetryDetail {
                attempt: turn.retried.then_some(2),
                ..RetryDetail::default()
            },
        ));
        let mut producers = vec![Producer {
            messages: driver.into(),
            opens,
            emitted: 0,
            open: true,
        }];
        producers.extend(tools.into_iter().map(|msgs| Producer {
            messages: msgs.into(),
            opens: Vec::new(),
            emitted: 0,
            open: false,
        }));
        merge(producers, rng, out);
    }
    match run.end {
        RunEnd::Normal => {}
        RunEnd::AbortAfterTools => out.push(build::abort(Some("aborted by user".into()))),
        RunEnd::AbortMidStream => {
            out.push(build::request_begin());
            out.extend(segment(
                build::partial_text,
                &["I will".to_owned()],
                StopReason::Aborted,
            ));
            out.push(build::assistant_text("I will", StopReason::Aborted));
            // Committed, then the abort fired during the approval wait: no decision, no output.
            out.push(build::tool_call(
                "tool",
                "{}",
                format!("{prefix}call_cut"),
                StopReason::Completed,
                None,
            ));
            // A call cut off mid-arguments is closed synthetically and never dispatched.
            out.extend(segment(
                |e, s, r| {
                    build::partial_tool_call(e, "", s, format!("{prefix}call_torn").as_str(), r)
                },
                &["{\"pa".to_owned()],
                StopReason::Aborted,
            ));
            out.push(build::tool_call(
                "",
                "{\"pa",
                format!("{prefix}call_torn"),
                StopReason::Aborted,
                None,
            ));
            out.push(build::request_end(
                StopReason::Aborted,
                RetryDetail {
                    attempt: Some(1),
                    ..RetryDetail::default()
                },
            ));
            out.push(build::abort(Some("aborted by user".into())));
        }
    }
}

fn generate(spec: &StreamSpec) -> Vec<OmniMessage> {
    let mut rng = Rng(spec.seed);
    let mut main = Vec::new();
    for (r, run) in spec.runs.iter().enumerate() {
        generate_run(run, &format!("r{r}_"), &mut rng, &mut main);
    }
    let Some(child_run) = &spec.child else {
        return main;
    };
    let mut child = vec![build::session_meta(SessionMeta {
        session_id: "session-child".into(),
        provider: "p".into(),
        model_id: "m".into(),
        model_context_window: ContextWindow::Tokens(128_000),
        system_prompt: String::new(),
        agent_state: "/a".into(),
        workspace: "/w".into(),
        source: Some("subagent".into()),
        forked_from: None,
    })];
    // The child reuses the parent's id scheme on purpose: ids are per origin.
    generate_run(child_run, "r0_", &mut rng, &mut child);
    let child: Vec<OmniMessage> = child
        .into_iter()
        .map(|m| m.with_origin("session-child"))
        .collect();
    let (mut i, mut j) = (0, 0);
    let mut merged = Vec::with_capacity(main.len() + child.len());
    while i < main.len() || j < child.len() {
        if j == child.len() || (i < main.len() && rng.below(2) == 0) {
            merged.push(main[i].clone());
            i += 1;
        } else {
            merged.push(child[j].clone());
            j += 1;
        }
    }
    merged
}

fn dump(stream: &[OmniMessage]) -> String {
    stream
        .iter()
        .enumerate()
        .map(|(i, m)| format!("{i:3} {}", m.to_json()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(stream: &[OmniMessage]) -> Vec<Violation> {
    StreamValidator::validate(stream)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn correct_streams_are_accepted(spec in stream_spec()) {
        let stream = generate(&spec);
        let found = check(&stream);
        prop_assert!(found.is_empty(), "{}\n{}", found.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"), dump(&stream));
        let jsonl: String = stream.iter().map(|m| m.to_json() + "\n").collect();
        let report = validate_jsonl(jsonl.as_bytes());
        prop_assert!(report.is_ok(), "{}", report);
        prop_assert_eq!(report.messages, stream.len());
    }
}

#[derive(Clone, Copy, Debug)]
enum Mutation {
    DropStop,
    CompleteBeforeStop,
    DropComplete,
    CorruptDelta,
    OutputBeforeApproval,
    DropApproval,
    DuplicateApproval,
    DuplicateOutput,
    DropDenialOutput,
    OutputForUnknownCall,
    UsageAfterRequestEnd,
    LlmMessageAfterUsage,
    DropRequestEnd,
    DropRequestBegin,
    NestedRequestBegin,
    SomethingAfterAbort,
    DropToolOutput,
}

const MUTATIONS: &[Mutation] = &[
    Mutation::DropStop,
    Mutation::CompleteBeforeStop,
    Mutation::DropComplete,
    Mutation::CorruptDelta,
    Mutation::OutputBeforeApproval,
    Mutation::DropApproval,
    Mutation::DuplicateApproval,
    Mutation::DuplicateOutput,
    Mutation::DropDenialOutput,
    Mutation::OutputForUnknownCall,
    Mutation::UsageAfterRequestEnd,
    Mutation::LlmMessageAfterUsage,
    Mutation::DropRequestEnd,
    Mutation::DropRequestBegin,
    Mutation::NestedRequestBegin,
    Mutation::SomethingAfterAbort,
    Mutation::DropToolOutput,
];

fn main_origin(stream: &[OmniMessage], pred: impl Fn(&OmniMessage) -> bool) -> Vec<usize> {
    (0..stream.len())
        .filter(|&i| stream[i].origin.is_none() && pred(&stream[i]))
        .collect()
}

fn event_type(m: &OmniMessage) -> Option<StreamEventType> {
    m.model()
        .and_then(ModelPayload::partial_parts)
        .map(|(e, _)| e)
}

/// The complete message that answers the stop at `stop`.
fn complete_of(stream: &[OmniMessage], stop: usize) -> usize {
    let p = stream[stop].model().expect("a partial");
    let ty = p.complete_type_of_partial();
    let id = p.tool_call_id();
    (stop + 1..stream.len())
        .find(|&j| {
            stream[j].origin.is_none()
                && stream[j]
                    .model()
                    .is_some_and(|q| Some(q.type_name()) == ty && q.tool_call_id() == id)
        })
        .expect("a complete follows every stop")
}

fn decision_of(m: &OmniMessage) -> Option<(ApprovalDecision, &str)> {
    match m.event() {
        Some(EventPayload::ApprovalDecision {
            decision,
            tool_call_id,
            ..
        }) => Some((*decision, tool_call_id)),
        _ => None,
    }
}

/// Applies `mutation` at a target chosen by `pick`; the rich spec guarantees a target exists.
fn mutate(stream: &mut Vec<OmniMessage>, mutation: Mutation, pick: usize) {
    let choose = |c: Vec<usize>| -> usize {
        assert!(!c.is_empty(), "no target for {mutation:?}");
        c[pick % c.len()]
    };
    let is = |ty: &'static str| move |m: &OmniMessage| m.payload_type() == ty;
    match mutation {
        Mutation::DropStop => {
            let i = choose(main_origin(stream, |m| event_type(m) == Some(Stop)));
            stream.remove(i);
        }
        Mutation::CompleteBeforeStop => {
            let i = choose(main_origin(stream, |m| event_type(m) == Some(Stop)));
            let j = complete_of(stream, i);
            let complete = stream.remove(j);
            stream.insert(i, complete);
        }
        Mutation::DropComplete => {
            let i = choose(main_origin(stream, |m| event_type(m) == Some(Stop)));
            let j = complete_of(stream, i);
            stream.remove(j);
        }
        Mutation::CorruptDelta => {
            let i = choose(main_origin(stream, |m| event_type(m) == Some(Delta)));
            match &mut stream[i].body {
                Body::Model(ModelPayload::PartialText(p)) => p.text.push('#'),
                Body::Model(ModelPayload::PartialThinking(p)) => p.thinking.push('#'),
                // '#' keeps the arguments from parsing as the same JSON value.
                Body::Model(ModelPayload::PartialToolCall(p)) => p.arguments.push('#'),
                Body::Model(ModelPayload::PartialToolCallOutput(p)) => p.output.push('#'),
                other => unreachable!("not a delta: {other:?}"),
            }
        }
        Mutation::OutputBeforeApproval => {
            let a = choose(main_origin(stream, |m| {
                matches!(decision_of(m), Some((ApprovalDecision::Allow, _)))
            }));
            let id = decision_of(&stream[a]).expect("approval").1.to_owned();
            let o = (a + 1..stream.len())
                .find(|&j| {
                    stream[j].origin.is_none() && stream[j].tool_call_id() == Some(id.as_str())
                })
                .expect("an allowed call has output");
            let out = stream.remove(o);
            stream.insert(a, out);
        }
        Mutation::DropApproval => {
            let a = choose(main_origin(stream, |m| {
                matches!(decision_of(m), Some((ApprovalDecision::Allow, _)))
            }));
            stream.remove(a);
        }
        Mutation::DuplicateApproval => {
            let a = choose(main_origin(stream, |m| decision_of(m).is_some()));
            let copy = stream[a].clone();
            stream.insert(a + 1, copy);
        }
        Mutation::DuplicateOutput => {
            let i = choose(main_origin(stream, is("tool_call_output")));
            let copy = stream[i].clone();
            let at = pick % (stream.len() - i) + i + 1;
            stream.insert(at, copy);
        }
        Mutation::DropDenialOutput => {
            let a = choose(main_origin(
                stream,
                |m| matches!(decision_of(m), Some((d, _)) if d != ApprovalDecision::Allow),
            ));
            let id = decision_of(&stream[a]).expect("denial").1.to_owned();
            let o = (a + 1..stream.len())
                .find(|&j| {
                    stream[j].origin.is_none() && stream[j].tool_call_id() == Some(id.as_str())
                })
                .expect("a denial has its synthetic output");
            stream.remove(o);
        }
        Mutation::OutputForUnknownCall => {
            let i = choose(main_origin(stream, is("tool_call_output")));
            if let Body::Model(ModelPayload::ToolCallOutput(out)) = &mut stream[i].body {
                out.tool_call_id = "call_nobody_made".into();
            }
        }
        Mutation::UsageAfterRequestEnd => {
            let u = choose(main_origin(stream, is("token_usage")));
            let e = (u + 1..stream.len())
                .find(|&j| stream[j].origin.is_none() && stream[j].payload_type() == "request_end")
                .expect("request_end follows token_usage");
            let usage = stream.remove(u);
            stream.insert(e, usage);
        }
        Mutation::LlmMessageAfterUsage => {
            let u = choose(main_origin(stream, is("token_usage")));
            let late = match pick % 3 {
                0 => build::assistant_text("late", StopReason::Completed),
                1 => build::partial_thinking(Start, "", StopReason::Completed),
                _ => build::tool_call("tool", "{}", "call_late", StopReason::Completed, None),
            };
            stream.insert(u + 1, late);
        }
        Mutation::DropRequestEnd => {
            let i = choose(main_origin(stream, is("request_end")));
            stream.remove(i);
        }
        Mutation::DropRequestBegin => {
            let i = choose(main_origin(stream, is("request_begin")));
            stream.remove(i);
        }
        Mutation::NestedRequestBegin => {
            let i = choose(main_origin(stream, is("request_begin")));
            let at = pick % (stream.len() - i) + i + 1;
            stream.insert(at, build::request_begin());
        }
        Mutation::SomethingAfterAbort => {
            let a = *main_origin(stream, is("abort"))
                .last()
                .expect("the rich spec aborts");
            let late = match pick % 5 {
                0 => build::assistant_text("late", StopReason::Completed),
                1 => build::tool_call_output("late", "r0_call_0_0", StopReason::Completed),
                2 => usage(),
                3 => build::request_end(StopReason::Completed, RetryDetail::default()),
                _ => build::partial_text(Start, "", StopReason::Completed),
            };
            stream.insert(a + 1, late);
        }
        Mutation::DropToolOutput => {
            // The complete output of an allowed call (its last message).
            let a = choose(main_origin(stream, |m| {
                matches!(decision_of(m), Some((ApprovalDecision::Allow, _)))
            }));
            let id = decision_of(&stream[a]).expect("approval").1.to_owned();
            let o = (a + 1..stream.len())
                .find(|&j| {
                    stream[j].origin.is_none()
                        && stream[j].payload_type() == "tool_call_output"
                        && stream[j].tool_call_id() == Some(id.as_str())
                })
                .expect("an allowed call has output");
            stream.remove(o);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_single_mutation_is_caught(
        spec in rich_spec(),
        m in 0..MUTATIONS.len(),
        pick in any::<usize>(),
    ) {
        let mut stream = generate(&spec);
        let clean = check(&stream);
        prop_assert!(clean.is_empty(), "{:?}\n{}", clean, dump(&stream));
        let mutation = MUTATIONS[m];
        mutate(&mut stream, mutation, pick);
        let found = check(&stream);
        prop_assert!(!found.is_empty(), "{:?} went unnoticed:\n{}", mutation, dump(&stream));
    }
}

/// Each mutation, on a fixed stream, is reported under the rule that names it.
#[test]
fn mutations_map_to_their_rules() {
    let spec = StreamSpec {
        runs: vec![RunSpec {
            notice: false,
            turns: vec![TurnSpec {
                thinking: Some(vec!["a".into(), "b".into()]),
                text: Some(vec!["c".into()]),
                calls: vec![
                    CallSpec {
                        args: Some(vec!["{}".into()]),
                        decision: ApprovalDecision::Allow,
                        output: Some(vec!["out".into()]),
                        reserialized: false,
                    },
                    CallSpec {
                        args: None,
                        decision: ApprovalDecision::Deny,
                        output: None,
                        reserialized: false,
                    },
                ],
                retried: false,
            }],
            end: RunEnd::AbortMidStream,
        }],
        child: None,
        seed: 7,
    };
    let expectations: &[(Mutation, usize, Rule)] = &[
        (Mutation::DropStop, 0, Rule::SegmentOrder),
        (Mutation::CompleteBeforeStop, 0, Rule::SegmentOrder),
        (Mutation::DropComplete, 1, Rule::CompleteAfterStop),
        (Mutation::CorruptDelta, 0, Rule::DeltaConcat),
        (Mutation::OutputBeforeApproval, 0, Rule::ApprovalPosition),
        (Mutation::DropApproval, 0, Rule::ApprovalPosition),
        (Mutation::DuplicateApproval, 0, Rule::ApprovalPosition),
        (Mutation::DuplicateOutput, 0, Rule::PairingDuplicateOutput),
        (Mutation::DropDenialOutput, 0, Rule::DenialOutput),
        (Mutation::OutputForUnknownCall, 0, Rule::PairingUnknownCall),
        (Mutation::UsageAfterRequestEnd, 0, Rule::RequestEndUsage),
        (Mutation::LlmMessageAfterUsage, 0, Rule::UsageTail),
        (
            Mutation::LlmMessageAfterUsage,
            0,
            Rule::RequestEndFollowsUsage,
        ),
        (Mutation::DropRequestEnd, 0, Rule::RequestPairing),
        (Mutation::DropRequestBegin, 1, Rule::RequestPairing),
        (Mutation::NestedRequestBegin, 0, Rule::RequestPairing),
        (Mutation::SomethingAfterAbort, 0, Rule::AbortLast),
        (Mutation::DropToolOutput, 0, Rule::CompleteAfterStop),
    ];
    let clean = generate(&spec);
    assert!(check(&clean).is_empty(), "{}", dump(&clean));
    for &(mutation, pick, rule) in expectations {
        let mut stream = clean.clone();
        mutate(&mut stream, mutation, pick);
        let found = check(&stream);
        assert!(
            found.iter().any(|v| v.rule == rule),
            "{mutation:?} should break {rule}; found {found:?}\n{}",
            dump(&stream)
        );
    }
}

#[test]
fn a_dropped_tool_output_without_fragments_is_missing() {
    let call = |id: &str| build::tool_call("t", "{}", id, StopReason::Completed, None);
    let stream = [
        build::request_begin(),
        call("a"),
        build::approval_decision(ApprovalDecision::Allow, "a"),
        usage(),
        build::request_end(StopReason::Completed, RetryDetail::default()),
    ];
    let found = check(&stream);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rule, Rule::PairingMissingOutput);
    assert_eq!(found[0].index, None);
    assert!(found[0]
        .to_string()
        .starts_with("end of stream: pairing_missing_output: tool_call a (message 1)"));
}
