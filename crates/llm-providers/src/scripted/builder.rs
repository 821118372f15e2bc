//! [`ScriptedRequestBuilder`]: a well-formed scripted request without writing its fragments.

use std::time::Duration;

use penguin_omni_protocol::{build, OmniMessage, StopReason, StreamEventType, TokenCounts};

use super::{ScriptedRequest, Step};
use crate::LlmOutcome;

/// The gap a [`ScriptedRequestBuilder`] puts between two steps unless told otherwise: small
/// enough not to slow a test on the real clock, and not zero, so a step is a moment of its own
/// (on a paused clock, other tasks get to run between two fragments, as with a real model).
pub const DEFAULT_DELAY: Duration = Duration::from_millis(1);

/// Builds a [`ScriptedRequest`] the way a model streams: each segment as its fragments
/// (`start`, one `delta`, `stop`) followed by its complete message, then a final `token_usage`
/// when the request completes. Every fragment has the shapes
/// [`build::partial_text`] documents, so the stream passes the
/// [`StreamValidator`](penguin_omni_protocol::validator::StreamValidator).
///
/// ```
/// use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest};
///
/// let model = ScriptedModel::new(vec![
///     // The first request reads a file ...
///     ScriptedRequest::builder()
///         .text("Let me look.")
///         .tool_call("read_file", r#"{"path":"a.txt"}"#, "call_1")
///         .usage(120, 12)
///         .build(),
///     // ... the second, which gets its output, answers.
///     ScriptedRequest::builder().text("It says hello.").usage(150, 5).build(),
/// ]);
/// # let _ = model;
/// ```
///
/// A request built with no segment streams only its `token_usage`. `token_usage` carries the
/// same counts as the request's and the session's: a script of several requests that cares
/// about the session's running total gives it with [`session_usage`](Self::session_usage).
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build`"]
pub struct ScriptedRequestBuilder {
    steps: Vec<Step>,
    delay: Duration,
    pause: Duration,
    request: TokenCounts,
    session: Option<TokenCounts>,
    outcome: LlmOutcome,
}

impl Default for ScriptedRequestBuilder {
    fn default() -> Self {
        ScriptedRequestBuilder {
            steps: Vec::new(),
            delay: DEFAULT_DELAY,
            pause: Duration::ZERO,
            request: TokenCounts::default(),
            session: None,
            outcome: LlmOutcome::completed(),
        }
    }
}

impl ScriptedRequest {
    /// A [`ScriptedRequestBuilder`].
    pub fn builder() -> ScriptedRequestBuilder {
        ScriptedRequestBuilder::default()
    }
}

impl ScriptedRequestBuilder {
    /// The same as [`ScriptedRequest::builder`].
    pub fn new() -> ScriptedRequestBuilder {
        ScriptedRequestBuilder::default()
    }

    fn step(&mut self, message: OmniMessage) {
        let delay = self.delay + std::mem::take(&mut self.pause);
        self.steps.push(Step { delay, message });
    }

    /// An assistant text: `partial_text` start `""`, delta `text`, stop `""`, then the
    /// complete `text`.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        use StreamEventType::*;
        let text = text.into();
        let done = StopReason::Completed;
        self.step(build::partial_text(Start, "", done));
        self.step(build::partial_text(Delta, text.clone(), done));
        self.step(build::partial_text(Stop, "", done));
        self.step(build::assistant_text(text, done));
        self
    }

    /// A thinking segment, shaped like [`text`](Self::text): `partial_thinking` fragments,
    /// then the complete `thinking`.
    pub fn thinking(mut self, thinking: impl Into<String>) -> Self {
        use StreamEventType::*;
        let thinking = thinking.into();
        let done = StopReason::Completed;
        self.step(build::partial_thinking(Start, "", done));
        self.step(build::partial_thinking(Delta, thinking.clone(), done));
        self.step(build::partial_thinking(Stop, "", done));
        self.step(build::thinking(thinking, done, None));
        self
    }

    /// A tool call: `partial_tool_call` start (with `name`, arguments `""`), delta (name `""`,
    /// the `arguments` JSON text), stop (both `""`), each with `tool_call_id`; then the
    /// complete `tool_call`. The engine asks for its approval when the complete arrives.
    pub fn tool_call(
        mut self,
        name: impl Into<String>,
        arguments: impl Into<String>,
        tool_call_id: impl Into<String>,
    ) -> Self {
        use StreamEventType::*;
        let (name, arguments, id) = (name.into(), arguments.into(), tool_call_id.into());
        let done = StopReason::Completed;
        self.step(build::partial_tool_call(
            Start,
            name.clone(),
            "",
            id.clone(),
            done,
        ));
        self.step(build::partial_tool_call(
            Delta,
            "",
            arguments.clone(),
            id.clone(),
            done,
        ));
        self.step(build::partial_tool_call(Stop, "", "", id.clone(), done));
        self.step(build::tool_call(name, arguments, id, done, None));
        self
    }

    /// Any message, as it is (e.g. a segment cut short, to script a broken model).
    pub fn message(mut self, message: OmniMessage) -> Self {
        self.step(message);
        self
    }

    /// The request's token counts: `input` prompt tokens (uncached) and `output` tokens.
    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.request = TokenCounts::new(0, input, output);
        self
    }

    /// The session's counts in the `token_usage` (default: the request's).
    pub fn session_usage(mut self, session: TokenCounts) -> Self {
        self.session = Some(session);
        self
    }

    /// The gap before each following step (default [`DEFAULT_DELAY`]).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// One more wait before the next step only: a model that pauses (for an interrupt or a
    /// steer to land in, on a paused clock).
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause += pause;
        self
    }

    /// How the request ends (default: completed). Only a completed request streams its
    /// `token_usage`; segments left open are closed with this status by the model.
    pub fn outcome(mut self, outcome: LlmOutcome) -> Self {
        self.outcome = outcome;
        self
    }

    /// The request fails with `message` after its steps (the engine retries it on its
    /// reconnect ladder).
    pub fn fail(self, message: impl Into<String>) -> Self {
        self.outcome(LlmOutcome::with_message(StopReason::Failed, message))
    }

    /// The request: its steps, then for a completed one its `token_usage`.
    pub fn build(mut self) -> ScriptedRequest {
        if self.outcome.status == StopReason::Completed {
            let session = self.session.unwrap_or(self.request);
            self.step(build::token_usage(session, self.request));
        }
        ScriptedRequest {
            stream: self.steps,
            outcome: self.outcome,
            end_delay: Duration::ZERO,
        }
    }
}

impl From<ScriptedRequestBuilder> for ScriptedRequest {
    fn from(builder: ScriptedRequestBuilder) -> ScriptedRequest {
        builder.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripted::ScriptedModel;
    use crate::{Llm, LlmRequest};
    use penguin_omni_protocol::validator::StreamValidator;
    use penguin_omni_protocol::{ApprovalDecision, ModelPayload};

    /// Plays `request` through the scripted model as the engine would see it, wrapped in
    /// `request_begin`/`request_end`, each tool call approved and answered after it.
    async fn played(request: ScriptedRequest) -> (Vec<OmniMessage>, LlmOutcome) {
        let mut model = ScriptedModel::new(vec![request]);
        let mut out = Vec::new();
        let req = LlmRequest {
            new_messages: vec![build::user_text("hi")],
            cancel: Default::default(),
            thinking_level: None,
        };
        let outcome = model.stream_generate(req, &mut out).await;
        let mut stream = vec![build::request_begin()];
        let mut answers = Vec::new();
        for msg in out {
            let call = match msg.model() {
                Some(ModelPayload::ToolCall(tc)) => Some(tc.tool_call_id.clone()),
                _ => None,
            };
            stream.push(msg);
            if let Some(id) = call {
                stream.push(build::approval_decision(ApprovalDecision::Allow, &id));
                answers.push(build::tool_call_output("ok", id, StopReason::Completed));
            }
        }
        stream.push(build::request_end(outcome.status, Default::default()));
        stream.extend(answers);
        (stream, outcome)
    }

    fn shapes(stream: &[OmniMessage]) -> Vec<String> {
        stream
            .iter()
            .map(|m| {
                let mut s = m.payload_type().to_owned();
                if let Some((event, content)) = m.model().and_then(ModelPayload::partial_parts) {
                    s = format!("{s} {event:?} {content:?}");
                }
                s
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_built_request_streams_well_formed_segments_and_its_usage() {
        let request = ScriptedRequest::builder()
            .thinking("Hmm.")
            .text("Hello")
            .tool_call("read_file", r#"{"path":"a"}"#, "call_1")
            .usage(10, 2)
            .build();
        assert!(request.stream.iter().all(|s| s.delay == DEFAULT_DELAY));
        let (stream, outcome) = played(request).await;
        assert_eq!(outcome, LlmOutcome::completed());
        assert_eq!(StreamValidator::validate(&stream), []);
        assert_eq!(
            shapes(&stream),
            [
                "request_begin",
                "partial_thinking Start \"\"",
                "partial_thinking Delta \"Hmm.\"",
                "partial_thinking Stop \"\"",
                "thinking",
                "partial_text Start \"\"",
                "partial_text Delta \"Hello\"",
                "partial_text Stop \"\"",
                "text",
                "partial_tool_call Start \"\"",
                "partial_tool_call Delta \"{\\\"path\\\":\\\"a\\\"}\"",
                "partial_tool_call Stop \"\"",
                "tool_call",
                "approval_decision",
                "token_usage",
                "request_end",
                "tool_call_output",
            ]
        );
        // The name is on the start only; the complete has it and the whole arguments.
        let names: Vec<&str> = stream
            .iter()
            .filter_map(|m| match m.model() {
                Some(ModelPayload::PartialToolCall(p)) => Some(p.name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["read_file", "", ""]);
        let usage = stream.iter().find_map(|m| match m.event() {
            Some(penguin_omni_protocol::EventPayload::TokenUsage { request, session }) => {
                Some((*request, *session))
            }
            _ => None,
        });
        let counts = TokenCounts::new(0, 10, 2);
        assert_eq!(usage, Some((counts, counts)));
        assert_eq!(counts.total, 12);
    }

    #[tokio::test(start_paused = true)]
    async fn delays_pauses_and_session_counts_are_the_callers() {
        let session = TokenCounts::new(0, 100, 20);
        let request = ScriptedRequest::builder()
            .delay(Duration::ZERO)
            .text("a")
            .pause(Duration::from_secs(3))
            .text("b")
            .session_usage(session)
            .build();
        let delays: Vec<u64> = request
            .stream
            .iter()
            .map(|s| s.delay.as_millis() as u64)
            .collect();
        assert_eq!(delays, [0, 0, 0, 0, 3000, 0, 0, 0, 0]);
        let started = tokio::time::Instant::now();
        let (stream, _) = played(request).await;
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(StreamValidator::validate(&stream), []);
        let mut model = ScriptedModel::new(vec![ScriptedRequest::builder()
            .session_usage(session)
            .build()]);
        let req = LlmRequest {
            new_messages: Vec::new(),
            cancel: Default::default(),
            thinking_level: None,
        };
        model.stream_generate(req, &mut Vec::new()).await;
        assert_eq!(model.session_tokens(), session);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_request_has_no_usage_and_still_validates() {
        let request = ScriptedRequest::builder()
            .text("partial answer")
            .fail("connection reset")
            .build();
        assert!(request.stream.iter().all(|s| s.message.event().is_none()));
        let (stream, outcome) = played(request).await;
        assert_eq!(outcome.status, StopReason::Failed);
        assert_eq!(outcome.error_message.as_deref(), Some("connection reset"));
        assert_eq!(StreamValidator::validate(&stream), []);
        // Empty: only the usage.
        let empty = ScriptedRequest::from(ScriptedRequestBuilder::new());
        assert_eq!(empty.stream.len(), 1);
        assert_eq!(StreamValidator::validate(&played(empty).await.0), []);
    }
}
