//! Property tests: sessions the engine could have recorded, written through the Writer, resume
//! to exactly the history the engine committed; any truncation still resumes to a structurally
//! valid history.

use std::collections::HashSet;
use std::path::Path;

use penguin_omni_protocol::{build, ModelPayload, OmniMessage, StopReason, TokenCounts};
use penguin_trace_store::{
    parse_trace_lines, placeholder, resume_trace, Durability, ReadMode, Writer, WriterConfig,
};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Completed,
    /// Retried: the next request of the run resends the same input.
    Timeout,
    /// Ends the run with an abort event.
    Aborted,
    /// A permanent failure: also ends the run with an abort event.
    Failed,
}

#[derive(Clone, Debug)]
struct Req {
    thinking: bool,
    calls: Vec<bool>, // per call: its output is written before request_end
    outcome: Outcome,
    /// For an uncommitted request: the tools that did run still write their outputs.
    orphan_outputs: bool,
    /// For a completed request: the user aborts before the late outputs exist (approval wait).
    abort_before_outputs: bool,
}

#[derive(Clone, Debug)]
struct Run {
    prompts: u8,
    requests: Vec<Req>,
}

fn req() -> impl Strategy<Value = Req> {
    (
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 0..3),
        prop_oneof![
            4 => Just(Outcome::Completed),
            1 => Just(Outcome::Timeout),
            1 => Just(Outcome::Aborted),
            1 => Just(Outcome::Failed),
        ],
        any::<bool>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(thinking, calls, outcome, orphan_outputs, abort_before_outputs)| Req {
                thinking,
                calls,
                outcome,
                orphan_outputs,
                abort_before_outputs,
            },
        )
}

fn session() -> impl Strategy<Value = Vec<Run>> {
    prop::collection::vec(
        (1u8..3, prop::collection::vec(req(), 1..4))
            .prop_map(|(prompts, requests)| Run { prompts, requests }),
        1..5,
    )
}

/// What the engine recorded, and what it committed.
struct Simulated {
    trace: Vec<OmniMessage>,
    history: Vec<OmniMessage>,
    carry_over: Vec<OmniMessage>,
    turns: u64,
    last_total: u64,
}

fn simulate(runs: &[Run]) -> Simulated {
    let mut trace = Vec::new();
    let mut history = Vec::new();
    // Eligible user-side messages written since the last request_begin took its input.
    let mut inputs: Vec<OmniMessage> = Vec::new();
    // Committed calls whose output was never written (an abort during approval).
    let mut unanswered: Vec<String> = Vec::new();
    let (mut turns, mut total, mut n) = (0u64, 0u64, 0u64);
    for (r, run) in runs.iter().enumerate() {
        for p in 0..run.prompts {
            let m = build::user_text(format!("prompt {r}.{p}"));
            trace.push(m.clone());
            inputs.push(m);
        }
        for (q, req) in run.requests.iter().enumerate() {
            trace.push(build::request_begin());
            let snapshot = std::mem::take(&mut inputs);
            let committed = matches!(req.outcome, Outcome::Completed);
            let mut assistant = Vec::new();
            if req.thinking {
                assistant.push(build::thinking(
                    format!("think {r}.{q}"),
                    StopReason::Completed,
                    None,
                ));
            }
            let text_stop = if committed {
                StopReason::Completed
            } else {
                StopReason::Aborted
            };
            assistant.push(build::assistant_text(format!("say {r}.{q}"), text_stop));
            trace.extend(assistant.iter().cloned());
            let mut late = Vec::new();
            for (k, early) in req.calls.iter().enumerate() {
                n += 1;
                let id = format!("call{n}");
                let call = build::tool_call(
                    "t",
                    format!("{{\"k\":{k}}}"),
                    id.clone(),
                    StopReason::Completed,
                    None,
                );
                trace.push(call.clone());
                assistant.push(call);
                let out =
                    build::tool_call_output(format!("out {id}"), id.clone(), StopReason::Completed);
                if *early && (committed || req.orphan_outputs) {
                    trace.push(out.clone());
                    if committed {
                        inputs.push(out);
                    }
                } else {
                    late.push((id, out));
                }
            }
            total += 10;
            trace.push(build::token_usage(
                TokenCounts::new(0, total, 0),
                TokenCounts::new(0, 10, 0),
            ));
            let status = match req.outcome {
                Outcome::Completed => StopReason::Completed,
                Outcome::Timeout => StopReason::Timeout,
                Outcome::Aborted => StopReason::Aborted,
                Outcome::Failed => StopReason::Failed,
            };
            trace.push(build::request_end(status, Default::default()));
            if committed {
                turns += 1;
                history.extend(unanswered.drain(..).map(|id| placeholder(&id)));
                history.extend(snapshot);
                history.extend(assistant);
                if req.abort_before_outputs && !late.is_empty() {
                    unanswered.extend(late.into_iter().map(|(id, _)| id));
                    trace.push(build::abort(Some("aborted by user".into())));
                    break;
                }
                for (_, out) in late {
                    trace.push(out.clone());
                    inputs.push(out);
                }
            } else {
                let mut keep = snapshot;
                keep.append(&mut inputs);
                inputs = keep;
                if req.orphan_outputs {
                    trace.extend(late.into_iter().map(|(_, out)| out));
                }
                if matches!(req.outcome, Outcome::Aborted | Outcome::Failed) {
                    trace.push(build::abort(Some("run ended".into())));
                    break;
                }
            }
        }
    }
    let mut carry_over = inputs;
    carry_over.extend(unanswered.iter().map(|id| placeholder(id)));
    Simulated {
        trace,
        history,
        carry_over,
        turns,
        last_total: total,
    }
}

fn json(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter()
        .map(|m| {
            let mut m = m.clone();
            // Placeholders are built at resume time: compare them without their timestamp.
            if m.model().and_then(|p| p.content()) == Some(penguin_trace_store::PLACEHOLDER_OUTPUT)
            {
                m.timestamp = penguin_omni_protocol::Timestamp::from_unix_millis(0);
            }
            m.to_json()
        })
        .collect()
}

/// Every completed tool_call in history ++ carry-over is answered exactly once, after it, and
/// every output answers an earlier call.
fn assert_paired(msgs: &[&OmniMessage]) -> Result<(), TestCaseError> {
    let mut calls = HashSet::new();
    let mut answered = HashSet::new();
    for m in msgs {
        match m.model() {
            Some(ModelPayload::ToolCall(tc)) if tc.stop_reason == Some(StopReason::Completed) => {
                prop_assert!(
                    calls.insert(tc.tool_call_id.clone()),
                    "call {} twice",
                    tc.tool_call_id
                );
            }
            Some(ModelPayload::ToolCallOutput(o)) => {
                prop_assert!(
                    calls.contains(&o.tool_call_id),
                    "output {} before its call",
                    o.tool_call_id
                );
                prop_assert!(
                    answered.insert(o.tool_call_id.clone()),
                    "{} answered twice",
                    o.tool_call_id
                );
            }
            _ => {}
        }
    }
    prop_assert_eq!(calls, answered);
    Ok(())
}

fn write_through_writer(trace: &[OmniMessage]) -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let w = Writer::open(
        WriterConfig::new(dir.path(), "session-p")
            .date_dir("2026-01-01")
            .durability(Durability::Never),
    )
    .unwrap();
    for m in trace {
        assert!(w.record_message(m.clone()));
    }
    w.flush().unwrap();
    assert_eq!(w.failed_writes(), 0);
    let bytes = std::fs::read(w.current_path()).unwrap();
    (dir, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn resume_restores_the_committed_history(runs in session()) {
        let sim = simulate(&runs);
        let (_dir, bytes) = write_through_writer(&sim.trace);
        let read = parse_trace_lines(&bytes, ReadMode::Strict, Path::new("p")).unwrap();
        prop_assert_eq!(json(&read.messages), json(&sim.trace));
        let r = resume_trace(&read.messages);
        prop_assert_eq!(json(&r.history), json(&sim.history));
        prop_assert_eq!(json(&r.carry_over), json(&sim.carry_over));
        prop_assert_eq!(r.session_turns, sim.turns);
        prop_assert_eq!(r.session_tokens.total, sim.last_total);
        prop_assert_eq!(r.last_request_total, 10);
        let all: Vec<&OmniMessage> = r.history.iter().chain(&r.carry_over).collect();
        assert_paired(&all)?;
    }

    #[test]
    fn any_truncation_resumes_to_a_valid_history(
        runs in session(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 24),
    ) {
        let sim = simulate(&runs);
        let (_dir, bytes) = write_through_writer(&sim.trace);
        // Every line boundary and the bytes around it, plus random offsets inside lines.
        let mut offsets: Vec<usize> = vec![0, bytes.len()];
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' {
                offsets.extend([i, i + 1, (i + 2).min(bytes.len())]);
            }
        }
        offsets.extend(cuts.iter().map(|c| c.index(bytes.len() + 1)));
        let full = json(&sim.trace);
        for cut in offsets {
            let prefix = &bytes[..cut];
            let read = parse_trace_lines(prefix, ReadMode::Strict, Path::new("p")).unwrap();
            // Exactly the records whose JSON lies wholly before the cut survive.
            let whole = prefix.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count()
                - usize::from(read.torn_tail.is_some());
            prop_assert_eq!(&json(&read.messages)[..], &full[..whole], "cut at {}", cut);
            let r = resume_trace(&read.messages);
            let all: Vec<&OmniMessage> = r.history.iter().chain(&r.carry_over).collect();
            assert_paired(&all)?;
            prop_assert!(r.session_turns <= sim.turns);
        }
    }
}
