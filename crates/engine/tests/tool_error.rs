//! A tool that ends (or panics) without its complete `tool_call_output` gets a `[tool error]`
//! answer from the engine. When the tool had already streamed `partial_tool_call_output`
//! fragments, that answer must keep the stream rules those fragments started: the segment is
//! closed before the complete output, and the fragments concatenate to the complete's content.
//! Every stream here goes through the `StreamValidator`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_engine::{
    AllowAll, Engine, EngineConfig, Environment, Frame, Permission, RunOptions, ToolCallRequest,
};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::{LlmOutcome, MessageSink};
use penguin_omni_protocol::validator::StreamValidator;
use penguin_omni_protocol::{
    build, ModelPayload, OmniMessage, StopReason, StreamEventType, TokenCounts, ToolDefinition,
};

const ENDED: &str = "[tool error] the environment ended without a tool_call_output";

/// How the misbehaving tool ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Returns without answering.
    Return,
    /// Panics without answering.
    Panic,
}

/// A tool that streams `fragments` of its output (`None` for no segment at all), optionally
/// stops the segment, and then ends without the complete output.
#[derive(Clone, Debug)]
struct Unanswering {
    fragments: Option<Vec<&'static str>>,
    stop: bool,
    end: End,
}

#[async_trait]
impl Environment for Unanswering {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let id = request.tool_call().tool_call_id.clone();
        let fragment = |event, text: &str, reason| {
            build::partial_tool_call_output(event, text, id.as_str(), reason)
        };
        if let Some(fragments) = &self.fragments {
            sink.emit(fragment(StreamEventType::Start, "", StopReason::Completed))
                .await;
            for text in fragments {
                sink.emit(fragment(
                    StreamEventType::Delta,
                    text,
                    StopReason::Completed,
                ))
                .await;
            }
            if self.stop {
                sink.emit(fragment(StreamEventType::Stop, "", StopReason::Completed))
                    .await;
            }
        }
        if let End::Panic = self.end {
            panic!("the tool fell over");
        }
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    fn permission(&self, _name: &str) -> Permission {
        Permission::Read
    }
}

fn step(message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(1),
        message,
    }
}

fn usage() -> Step {
    let c = TokenCounts::new(0, 10, 1);
    step(build::token_usage(c, c))
}

/// Runs one call of `tool` to its end and returns the stream, the answer the call got, and
/// what the next request sent the model.
async fn run(tool: Unanswering) -> (Vec<OmniMessage>, OmniMessage, Vec<OmniMessage>) {
    let model = ScriptedModel::new(vec![
        ScriptedRequest {
            stream: vec![
                step(build::tool_call(
                    "read_file",
                    "{}",
                    "c1",
                    StopReason::Completed,
                    None,
                )),
                usage(),
            ],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        },
        ScriptedRequest {
            stream: vec![usage()],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        },
    ]);
    let engine = Engine::new(
        Box::new(model.clone()),
        Arc::new(tool),
        EngineConfig::default(),
    );
    let options = RunOptions::new(Arc::new(AllowAll));
    let stream: Vec<OmniMessage> = engine
        .run(vec![build::user_text("go")], options)
        .unwrap()
        .map(|f: Frame| f.message().clone())
        .collect()
        .await;
    let violations = StreamValidator::validate(&stream);
    assert!(
        violations.is_empty(),
        "{}\n{stream:#?}",
        violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let answer = stream
        .iter()
        .find(|m| matches!(m.model(), Some(ModelPayload::ToolCallOutput(_))))
        .expect("the call is answered")
        .clone();
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the run goes on with the answer");
    (stream, answer, requests[1].clone())
}

fn output(msg: &OmniMessage) -> (&str, Option<StopReason>) {
    match msg.model() {
        Some(ModelPayload::ToolCallOutput(o)) => (o.output.as_str(), o.stop_reason),
        _ => panic!("not a tool_call_output: {msg:?}"),
    }
}

/// The call's output fragments, as `event:text`.
fn fragments(stream: &[OmniMessage]) -> Vec<String> {
    stream
        .iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::PartialToolCallOutput(p)) => Some(format!(
                "{}:{}:{}",
                p.event_type.as_str(),
                p.output,
                p.stop_reason.map_or("-", StopReason::as_str)
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_open_segment_is_closed_with_the_error_as_its_last_fragment() {
    for end in [End::Return, End::Panic] {
        let (stream, answer, next) = run(Unanswering {
            fragments: Some(vec!["alpha", " beta"]),
            stop: false,
            end,
        })
        .await;
        let error = match end {
            End::Return => ENDED.to_owned(),
            End::Panic => "[tool error] the tool fell over".to_owned(),
        };
        assert_eq!(
            fragments(&stream),
            [
                "start::completed".to_owned(),
                "delta:alpha:completed".to_owned(),
                "delta: beta:completed".to_owned(),
                format!("delta:\n{error}:completed"),
                "stop::failed".to_owned(),
            ],
            "{end:?}"
        );
        let want = format!("alpha beta\n{error}");
        assert_eq!(output(&answer), (want.as_str(), Some(StopReason::Failed)));
        assert_eq!(next, [answer], "the model gets the same answer");
    }
}

#[tokio::test(start_paused = true)]
async fn a_segment_with_only_its_start_gets_the_error_alone() {
    let (stream, answer, _) = run(Unanswering {
        fragments: Some(vec![]),
        stop: false,
        end: End::Return,
    })
    .await;
    assert_eq!(
        fragments(&stream),
        [
            "start::completed".to_owned(),
            format!("delta:{ENDED}:completed"),
            "stop::failed".to_owned()
        ]
    );
    assert_eq!(output(&answer), (ENDED, Some(StopReason::Failed)));
}

#[tokio::test(start_paused = true)]
async fn a_stopped_segment_is_completed_with_exactly_what_it_streamed() {
    for end in [End::Return, End::Panic] {
        let (stream, answer, _) = run(Unanswering {
            fragments: Some(vec!["alpha"]),
            stop: true,
            end,
        })
        .await;
        assert_eq!(fragments(&stream).len(), 3, "nothing after the stop");
        assert_eq!(
            output(&answer),
            ("alpha", Some(StopReason::Failed)),
            "{end:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_streamed_nothing_gets_the_error_alone() {
    for (end, error) in [
        (End::Return, ENDED),
        (End::Panic, "[tool error] the tool fell over"),
    ] {
        let (stream, answer, _) = run(Unanswering {
            fragments: None,
            stop: false,
            end,
        })
        .await;
        assert!(fragments(&stream).is_empty());
        assert_eq!(output(&answer), (error, Some(StopReason::Failed)));
    }
}
