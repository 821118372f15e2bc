//! A scripted model: plays the `llm` part of a scenario file
//! (`shared/spec/scenario-format.md`) against the engine, on tokio time, so tests can run on a
//! paused clock.
//!
//! The step player ([`play`]) and its segment bookkeeping ([`OpenSegments`]) are shared with
//! the scripted environment in the engine crate: a scripted tool closes its open output segment
//! exactly the way the model closes its segments.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use penguin_omni_protocol::{
    build, EventPayload, ModelPayload, OmniMessage, StopReason, StreamEventType, Timestamp,
    TokenCounts,
};
use serde_json::Value;

use crate::{Llm, LlmOutcome, LlmRequest, MessageSink};

/// One scripted step: wait `delay` (after the previous step), then yield `message`.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Relative delay.
    pub delay: Duration,
    /// The message, restamped when it is emitted.
    pub message: OmniMessage,
}

/// The script for one model request.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedRequest {
    /// What the model streams.
    pub stream: Vec<Step>,
    /// How the request ends (default: completed).
    pub outcome: LlmOutcome,
}

/// A scenario value that is not what the format says, with the path of the offending field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ScriptError {
    /// Dotted path inside the scenario file (`llm[0].stream[2].message.payload.text`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ScriptError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ScriptError {
        ScriptError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Parses a `stream` array of `{delay_ms, message}` steps.
pub fn parse_steps(value: &Value, path: &str) -> Result<Vec<Step>, ScriptError> {
    let items = value
        .as_array()
        .ok_or_else(|| ScriptError::new(path, "expected an array of steps"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let p = format!("{path}[{i}]");
            let obj = step
                .as_object()
                .ok_or_else(|| ScriptError::new(&p, "expected an object {delay_ms, message}"))?;
            let delay = match obj.get("delay_ms") {
                None => 0,
                Some(v) => v.as_u64().ok_or_else(|| {
                    ScriptError::new(format!("{p}.delay_ms"), "expected a non-negative integer")
                })?,
            };
            let msg = obj
                .get("message")
                .ok_or_else(|| ScriptError::new(format!("{p}.message"), "missing"))?;
            let message = OmniMessage::from_value_stamping(msg.clone()).map_err(|e| {
                let field = if e.path.is_empty() {
                    format!("{p}.message")
                } else {
                    format!("{p}.message.{}", e.path)
                };
                ScriptError::new(field, e.message)
            })?;
            Ok(Step {
                delay: Duration::from_millis(delay),
                message,
            })
        })
        .collect()
}

/// Parses one `llm` entry: `{stream, outcome?}`.
pub fn parse_request(value: &Value, path: &str) -> Result<ScriptedRequest, ScriptError> {
    let obj = value
        .as_object()
        .ok_or_else(|| ScriptError::new(path, "expected an object {stream, outcome}"))?;
    let stream = match obj.get("stream") {
        Some(s) => parse_steps(s, &format!("{path}.stream"))?,
        None => Vec::new(),
    };
    let outcome = match obj.get("outcome") {
        None | Some(Value::Null) => LlmOutcome::completed(),
        Some(o) => parse_outcome(o, &format!("{path}.outcome"))?,
    };
    Ok(ScriptedRequest { stream, outcome })
}

fn parse_outcome(value: &Value, path: &str) -> Result<LlmOutcome, ScriptError> {
    let obj = value.as_object().ok_or_else(|| {
        ScriptError::new(path, "expected an object {status, message?, permanent?}")
    })?;
    let status = obj
        .get("status")
        .ok_or_else(|| ScriptError::new(format!("{path}.status"), "missing"))?
        .as_str()
        .ok_or_else(|| ScriptError::new(format!("{path}.status"), "expected a string"))?
        .parse::<StopReason>()
        .map_err(|e| ScriptError::new(format!("{path}.status"), e))?;
    let error_message = match obj.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(ScriptError::new(
                format!("{path}.message"),
                "expected a string",
            ))
        }
    };
    let permanent = match obj.get("permanent") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ScriptError::new(
                format!("{path}.permanent"),
                "expected a boolean",
            ))
        }
    };
    Ok(LlmOutcome {
        status,
        error_message,
        permanent,
    })
}

#[derive(Debug)]
struct Segment {
    kind: &'static str,
    name: String,
    tool_call_id: String,
    content: String,
    /// The stop fragment was yielded (with this reason) and the complete message is still owed.
    stopped: Option<StopReason>,
}

/// The `partial_*` segments a producer has opened and not yet completed, in opening order.
///
/// A segment stays tracked after its stop fragment until its complete message is yielded, so
/// an interrupt that lands between the two still produces the complete message: the stream
/// keeps "complete right after stop" even when a script is cut at that point.
#[derive(Debug, Default)]
pub struct OpenSegments {
    open: Vec<Segment>,
}

impl OpenSegments {
    /// Tracks a message the producer has just yielded.
    pub fn observe(&mut self, msg: &OmniMessage) {
        let Some(p) = msg.model() else {
            return;
        };
        if !p.is_partial() {
            // A complete message settles the oldest stopped segment of its kind.
            let id = p.tool_call_id().unwrap_or("");
            let settles = |s: &Segment| {
                s.stopped.is_some()
                    && partial_to_complete(s.kind) == Some(p.type_name())
                    && s.tool_call_id == id
            };
            if let Some(i) = self.open.iter().position(settles) {
                self.open.remove(i);
            }
            return;
        }
        let (event, content) = p.partial_parts().expect("partial");
        let kind = p.type_name();
        let id = p.tool_call_id().unwrap_or("");
        let pos = self
            .open
            .iter()
            .position(|s| s.kind == kind && s.tool_call_id == id && s.stopped.is_none());
        match (event, pos) {
            (StreamEventType::Start, _) => {
                if let Some(i) = pos {
                    self.open.remove(i);
                }
                let name = match p {
                    ModelPayload::PartialToolCall(c) => c.name.clone(),
                    _ => String::new(),
                };
                self.open.push(Segment {
                    kind,
                    name,
                    tool_call_id: id.to_owned(),
                    content: content.to_owned(),
                    stopped: None,
                });
            }
            (StreamEventType::Delta, Some(i)) => self.open[i].content.push_str(content),
            (StreamEventType::Stop, Some(i)) => {
                self.open[i].content.push_str(content);
                self.open[i].stopped = Some(p.stop_reason().unwrap_or(StopReason::Completed));
            }
            _ => {}
        }
    }

    /// True when a segment of `kind` (a `partial_*` type) has started and not stopped.
    pub fn is_open(&self, kind: &str) -> bool {
        self.open
            .iter()
            .any(|s| s.kind == kind && s.stopped.is_none())
    }

    /// Closes every open segment in opening order: a stop fragment with empty content and
    /// `reason`, then the complete message holding what the segment streamed, with `reason`.
    /// A segment already stopped only gets its owed complete message, with its stop's reason.
    pub fn close_all(&mut self, reason: StopReason) -> Vec<OmniMessage> {
        use StreamEventType::Stop;
        let mut out = Vec::new();
        for s in self.open.drain(..) {
            let stopped = s.stopped;
            let reason = stopped.unwrap_or(reason);
            let (stop, complete) = match s.kind {
                "partial_text" => (
                    build::partial_text(Stop, "", reason),
                    build::assistant_text(s.content, reason),
                ),
                "partial_thinking" => (
                    build::partial_thinking(Stop, "", reason),
                    build::thinking(s.content, reason, None),
                ),
                "partial_tool_call" => (
                    build::partial_tool_call(Stop, "", "", &s.tool_call_id, reason),
                    build::tool_call(s.name, s.content, s.tool_call_id, reason, None),
                ),
                _ => (
                    build::partial_tool_call_output(Stop, "", &s.tool_call_id, reason),
                    build::tool_call_output(s.content, s.tool_call_id, reason),
                ),
            };
            if stopped.is_none() {
                out.push(stop);
            }
            out.push(complete);
        }
        out
    }
}

fn partial_to_complete(kind: &str) -> Option<&'static str> {
    match kind {
        "partial_text" => Some("text"),
        "partial_thinking" => Some("thinking"),
        "partial_tool_call" => Some("tool_call"),
        "partial_tool_call_output" => Some("tool_call_output"),
        _ => None,
    }
}

/// How [`play`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Played {
    /// Every step was yielded.
    Finished,
    /// The cancellation fired while waiting; nothing after it was yielded.
    Aborted,
}

/// Plays `steps` into `sink` on tokio time, tracking open segments in `open`.
///
/// Each message is restamped as it is emitted. Stops at the first wait the cancellation
/// interrupts.
pub async fn play(
    steps: &[Step],
    cancel: &tokio_util::sync::CancellationToken,
    open: &mut OpenSegments,
    sink: &mut dyn MessageSink,
) -> Played {
    for step in steps {
        if cancel.is_cancelled() {
            return Played::Aborted;
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Played::Aborted,
            _ = tokio::time::sleep(step.delay) => {}
        }
        let msg = build::restamped(step.message.clone(), Timestamp::now());
        open.observe(&msg);
        sink.emit(msg).await;
    }
    Played::Finished
}

/// Plays a scenario's `llm` entries, one per request, in order across every run.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    requests: VecDeque<ScriptedRequest>,
    log: Vec<Vec<OmniMessage>>,
    session: TokenCounts,
}

impl ScriptedModel {
    /// A model that plays `requests` in order.
    pub fn new(requests: Vec<ScriptedRequest>) -> ScriptedModel {
        ScriptedModel {
            shared: Arc::new(Mutex::new(Shared {
                requests: requests.into(),
                ..Shared::default()
            })),
        }
    }

    /// Parses a scenario's `llm` array.
    pub fn from_json(llm: &Value) -> Result<ScriptedModel, ScriptError> {
        let items = llm
            .as_array()
            .ok_or_else(|| ScriptError::new("llm", "expected an array of requests"))?;
        let requests = items
            .iter()
            .enumerate()
            .map(|(i, r)| parse_request(r, &format!("llm[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(ScriptedModel::new(requests))
    }

    /// The `new_messages` of every request so far, in order (the `--requests` observable).
    /// Clones of this model share the log.
    pub fn requests(&self) -> Vec<Vec<OmniMessage>> {
        self.shared.lock().expect("scripted model lock").log.clone()
    }
}

#[async_trait]
impl Llm for ScriptedModel {
    async fn stream_generate(
        &mut self,
        request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        let script = {
            let mut shared = self.shared.lock().expect("scripted model lock");
            shared.log.push(request.new_messages.clone());
            shared.requests.pop_front()
        };
        let Some(script) = script else {
            return LlmOutcome::with_message(
                StopReason::Failed,
                "scenario has no script for this request",
            );
        };
        let mut open = OpenSegments::default();
        let mut tap = TokenTap {
            inner: sink,
            last: None,
        };
        match play(&script.stream, &request.cancel, &mut open, &mut tap).await {
            Played::Finished => {
                for m in open.close_all(script.outcome.status) {
                    tap.emit(m).await;
                }
                if let Some(session) = tap.last {
                    self.shared.lock().expect("scripted model lock").session = session;
                }
                script.outcome
            }
            Played::Aborted => {
                for m in open.close_all(StopReason::Aborted) {
                    sink.emit(m).await;
                }
                LlmOutcome::new(StopReason::Aborted)
            }
        }
    }

    fn session_tokens(&self) -> TokenCounts {
        self.shared.lock().expect("scripted model lock").session
    }
}

/// Remembers the session counts of the last token_usage passing through.
struct TokenTap<'a> {
    inner: &'a mut dyn MessageSink,
    last: Option<TokenCounts>,
}

#[async_trait]
impl MessageSink for TokenTap<'_> {
    async fn emit(&mut self, msg: OmniMessage) {
        if let Some(EventPayload::TokenUsage { session, .. }) = msg.event() {
            self.last = Some(*session);
        }
        self.inner.emit(msg).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_steps() -> Value {
        json!([
            {"delay_ms": 5, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "start", "text": "", "stop_reason": "completed"}}},
            {"delay_ms": 100, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "Hel", "stop_reason": "completed"}}},
            {"delay_ms": 100, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "lo", "stop_reason": "completed"}}}
        ])
    }

    fn types(msgs: &[OmniMessage]) -> Vec<String> {
        msgs.iter()
            .map(|m| {
                let p = m.model().unwrap();
                format!("{}:{}", p.type_name(), p.stop_reason().unwrap())
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn closes_open_segments_with_the_outcome_status() {
        let mut model = ScriptedModel::from_json(
            &json!([{"stream": text_steps(), "outcome": {"status": "timeout"}}]),
        )
        .unwrap();
        let mut out = Vec::new();
        let req = LlmRequest {
            new_messages: vec![build::user_text("hi")],
            cancel: Default::default(),
            thinking_level: None,
        };
        let outcome = model.stream_generate(req, &mut out).await;
        assert_eq!(outcome.status, StopReason::Timeout);
        assert_eq!(
            types(&out)[3..],
            [
                "partial_text:timeout".to_string(),
                "text:timeout".to_string()
            ]
        );
        assert_eq!(out[4].model().unwrap().content(), Some("Hello"));
        assert_eq!(model.requests().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn abort_while_waiting_closes_with_aborted() {
        let mut model = ScriptedModel::from_json(&json!([{"stream": text_steps()}])).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            c.cancel();
        });
        let mut out = Vec::new();
        let req = LlmRequest {
            new_messages: vec![],
            cancel,
            thinking_level: None,
        };
        let outcome = model.stream_generate(req, &mut out).await;
        assert_eq!(outcome, LlmOutcome::new(StopReason::Aborted));
        assert_eq!(
            types(&out),
            [
                "partial_text:completed",
                "partial_text:completed",
                "partial_text:aborted",
                "text:aborted"
            ]
        );
        assert_eq!(out[3].model().unwrap().content(), Some("Hel"));
    }

    #[tokio::test(start_paused = true)]
    async fn abort_between_stop_and_complete_still_yields_the_complete() {
        let steps = json!([
            {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "start", "text": "", "stop_reason": "completed"}}},
            {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "Hi", "stop_reason": "completed"}}},
            {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "stop", "text": "", "stop_reason": "completed"}}},
            {"delay_ms": 100, "message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "Hi", "stop_reason": "completed"}}}
        ]);
        let mut model = ScriptedModel::from_json(&json!([{ "stream": steps }])).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.cancel();
        });
        let mut out = Vec::new();
        let req = LlmRequest {
            new_messages: vec![],
            cancel,
            thinking_level: None,
        };
        assert_eq!(
            model.stream_generate(req, &mut out).await.status,
            StopReason::Aborted
        );
        assert_eq!(
            types(&out),
            [
                "partial_text:completed",
                "partial_text:completed",
                "partial_text:completed",
                "text:completed"
            ]
        );
        assert_eq!(out[3].model().unwrap().content(), Some("Hi"));
    }

    #[tokio::test]
    async fn unscripted_request_fails() {
        let mut model = ScriptedModel::new(vec![]);
        let req = LlmRequest {
            new_messages: vec![],
            cancel: Default::default(),
            thinking_level: None,
        };
        let outcome = model.stream_generate(req, &mut Vec::new()).await;
        assert_eq!(
            outcome,
            LlmOutcome::with_message(
                StopReason::Failed,
                "scenario has no script for this request"
            )
        );
    }

    #[test]
    fn bad_scripts_name_the_field() {
        let err = ScriptedModel::from_json(&json!([{"stream": [{"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant"}}}]}])).unwrap_err();
        assert_eq!(err.path, "llm[0].stream[0].message.payload.event_type");
        let err =
            ScriptedModel::from_json(&json!([{"outcome": {"status": "exploded"}}])).unwrap_err();
        assert_eq!(err.path, "llm[0].outcome.status");
    }
}
