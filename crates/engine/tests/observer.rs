//! `RunOptions::with_observer`: the observer sees every message as the engine emits it, in
//! stream order, and a run it cancels starts no request after the message that made it.
//! A host's cost budget depends on this: checked on the consumer's side of the stream, it
//! could see a request's `token_usage` only after the engine had started the next request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_engine::{
    AllowAll, CancellationToken, Engine, EngineConfig, Environment, Frame, Permission, RunOptions,
    ToolCallRequest,
};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::{LlmOutcome, MessageSink};
use penguin_omni_protocol::{
    build, Body, EventPayload, OmniMessage, StopReason, TokenCounts, ToolDefinition,
};

/// A tool that answers at once, before the model's stream has ended.
struct Instant;

#[async_trait]
impl Environment for Instant {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let id = request.tool_call().tool_call_id.clone();
        sink.emit(build::tool_call_output(
            "contents",
            id,
            StopReason::Completed,
        ))
        .await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    fn permission(&self, _name: &str) -> Permission {
        Permission::Read
    }
}

fn step(ms: u64, message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(ms),
        message,
    }
}

fn usage(ms: u64) -> Step {
    let c = TokenCounts::new(0, 10, 1);
    step(ms, build::token_usage(c, c))
}

fn is_usage(msg: &OmniMessage) -> bool {
    matches!(msg.body, Body::Event(EventPayload::TokenUsage { .. }))
}

#[tokio::test(start_paused = true)]
async fn a_run_cancelled_by_its_observer_makes_no_request_after_the_usage_that_did_it() {
    let model = ScriptedModel::new(vec![
        ScriptedRequest {
            stream: vec![
                step(
                    1,
                    build::tool_call("read_file", "{}", "c1", StopReason::Completed, None),
                ),
                // The tool has answered long before the request's usage arrives.
                usage(50),
            ],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        },
        ScriptedRequest {
            stream: vec![
                step(
                    1,
                    build::assistant_text("never asked", StopReason::Completed),
                ),
                usage(1),
            ],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        },
    ]);
    let engine = Engine::new(
        Box::new(model.clone()),
        Arc::new(Instant),
        EngineConfig::default(),
    );
    let cancel = CancellationToken::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let observer = {
        let (seen, cancel) = (seen.clone(), cancel.clone());
        Arc::new(move |msg: &OmniMessage| {
            seen.lock().unwrap().push(msg.clone());
            if is_usage(msg) {
                cancel.cancel();
            }
        })
    };
    let options = RunOptions::new(Arc::new(AllowAll))
        .with_cancel(cancel)
        .with_observer(observer);
    let stream: Vec<OmniMessage> = engine
        .run(vec![build::user_text("go")], options)
        .unwrap()
        .map(|f: Frame| f.message().clone())
        .collect()
        .await;
    assert_eq!(model.requests().len(), 1, "no request after the usage");
    assert_eq!(*seen.lock().unwrap(), stream, "the observer saw the stream");
    let last = stream.last().expect("a stream");
    assert!(
        matches!(last.body, Body::Event(EventPayload::Abort { .. })),
        "the run ends as an interrupted one: {last:?}"
    );
}
