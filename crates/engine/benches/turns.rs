//! Engine overhead: a scripted model streaming many deltas and tool calls through the whole
//! turn loop (merge queue, approvals, concurrent tools, trace hook), on a paused clock so only
//! the engine's own work is timed. Run with `cargo bench -p penguin-engine`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use penguin_engine::scripted::{ScriptedApprover, ScriptedEnvironment};
use penguin_engine::{Engine, EngineConfig, Frame, InitialState, RunOptions, TraceSink};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::LlmOutcome;
use penguin_omni_protocol::{build, StopReason, StreamEventType::*, TokenCounts};

#[derive(Default)]
struct CountingTrace(AtomicUsize);

impl TraceSink for CountingTrace {
    fn record(&self, frame: &Frame) {
        self.0.fetch_add(frame.json().len(), Ordering::Relaxed);
    }
}

fn step(message: penguin_omni_protocol::OmniMessage) -> Step {
    Step {
        delay: Duration::ZERO,
        message,
    }
}

fn main() {
    let ok = StopReason::Completed;
    for (deltas, calls) in [(200_000usize, 0usize), (20_000, 2_000)] {
        let mut stream = vec![step(build::partial_text(Start, "", ok))];
        stream.extend(
            (0..deltas).map(|i| step(build::partial_text(Delta, format!("token{i} "), ok))),
        );
        stream.push(step(build::partial_text(Stop, "", ok)));
        stream.push(step(build::assistant_text("(long)", ok)));
        let mut tools = HashMap::new();
        for c in 0..calls {
            let id = format!("call_{c}");
            stream.push(step(build::tool_call("probe", "{}", &id, ok, None)));
            tools.insert(
                id.clone(),
                vec![Step {
                    delay: Duration::from_millis(c as u64 % 7),
                    message: build::tool_call_output("out", &id, ok),
                }],
            );
        }
        stream.push(step(build::token_usage(
            TokenCounts::new(0, 10, 10),
            TokenCounts::new(0, 10, 10),
        )));
        let done = ScriptedRequest {
            stream: vec![step(build::token_usage(
                TokenCounts::default(),
                TokenCounts::default(),
            ))],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        };
        let model = ScriptedModel::new(vec![
            ScriptedRequest {
                stream,
                outcome: LlmOutcome::completed(),
                end_delay: std::time::Duration::ZERO,
            },
            done,
        ]);
        let approver = Arc::new(
            ScriptedApprover::from_json(&serde_json::json!({"default": "allow"})).unwrap(),
        );
        let trace = Arc::new(CountingTrace::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let start = Instant::now();
        let n = rt.block_on(async {
            let engine = Engine::with_parts(
                Box::new(model),
                Arc::new(ScriptedEnvironment::new(tools)),
                EngineConfig::default(),
                Some(trace.clone()),
                InitialState::default(),
            );
            let options = RunOptions::new(approver);
            engine
                .run(vec![build::user_text("go")], options)
                .unwrap()
                .count()
                .await
        });
        let secs = start.elapsed().as_secs_f64();
        println!(
            "engine: {deltas} deltas + {calls} tool calls: {n} messages in {secs:.3}s = {:.0} messages/s ({} trace bytes)",
            n as f64 / secs,
            trace.0.load(Ordering::Relaxed)
        );
    }
}
