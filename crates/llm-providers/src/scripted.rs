//! A scripted model: plays the `llm` part of a scenario file
//! (`docs/scenario-format.md`) against the engine, on tokio time, so tests can run on a
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
    build, exact_in_place, Body, EventPayload, InPlace, ModelPayload, OmniMessage, StopReason,
    StreamEventType, Text, Thinking, Timestamp, TokenCounts, ToolCall, ToolCallOutput,
};
use serde_json::Value;

use crate::{Llm, LlmOutcome, LlmRequest, MessageSink};

mod builder;

pub use builder::{ScriptedRequestBuilder, DEFAULT_DELAY};

/// One scripted step: wait `delay` (after the previous step), then yield `message`.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Relative delay.
    pub delay: Duration,
    /// The message, restamped when it is emitted.
    pub message: OmniMessage,
}

/// The script for one model request: from a scenario file's `llm` entry
/// ([`parse_request_json`]), or built with [`ScriptedRequest::builder`].
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedRequest {
    /// What the model streams.
    pub stream: Vec<Step>,
    /// How the request ends (default: completed).
    pub outcome: LlmOutcome,
    /// How long after its last step the request ends (`outcome.delay_ms`; default none): a
    /// real stream's end can lag its last message, and a replayed session keeps that.
    pub end_delay: Duration,
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

/// Rejects the first key of `obj` that is not in `allowed`, naming it: a scenario file that
/// says something the runner would ignore must not run as if it had not said it.
pub fn check_keys(
    obj: &serde_json::Map<String, Value>,
    path: &str,
    allowed: &[&str],
) -> Result<(), ScriptError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) if path.is_empty() => Err(ScriptError::new(k.clone(), "unknown field")),
        Some(k) => Err(ScriptError::new(format!("{path}.{k}"), "unknown field")),
        None => Ok(()),
    }
}

/// One message a script gives verbatim, at `path`: a field it would drop is an error naming
/// it (`path.payload.colour`), see [`OmniMessage::from_value_exact`].
pub fn exact_message(v: &Value, path: &str) -> Result<OmniMessage, ScriptError> {
    OmniMessage::from_value_exact(v.clone()).map_err(|e| {
        let field = if e.path.is_empty() {
            path.to_owned()
        } else {
            format!("{path}.{}", e.path)
        };
        ScriptError::new(field, e.message)
    })
}

/// [`exact_message`] on JSON text, without a JSON tree for the common message; `path` is
/// only built for an error.
pub fn exact_message_json(
    text: &str,
    path: impl Fn() -> String,
) -> Result<OmniMessage, ScriptError> {
    OmniMessage::from_json_exact(text).map_err(|e| {
        let path = path();
        let field = if e.path.is_empty() {
            path
        } else {
            format!("{path}.{}", e.path)
        };
        ScriptError::new(field, e.message)
    })
}

/// One step as read in a single pass; its message is checked by [`exact_message_json`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep<'a> {
    #[serde(default)]
    delay_ms: u64,
    #[serde(borrow)]
    message: &'a serde_json::value::RawValue,
}

/// One `llm` entry as read in a single pass. No stream (absent or null) is rare, and only the
/// tree way tells the two apart, so it is not read here.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest<'a> {
    #[serde(borrow)]
    stream: Vec<RawStep<'a>>,
    #[serde(borrow, default)]
    outcome: Option<&'a serde_json::value::RawValue>,
}

fn steps(raw: &[RawStep<'_>], path: impl Fn() -> String) -> Result<Vec<Step>, ScriptError> {
    // Sized up front: collecting `Result`s grows the vector by doubling, and a step is large.
    let mut out = Vec::with_capacity(raw.len());
    for (i, step) in raw.iter().enumerate() {
        out.push(Step {
            delay: Duration::from_millis(step.delay_ms),
            message: exact_message_json(step.message.get(), || format!("{}[{i}].message", path()))?,
        });
    }
    Ok(out)
}

fn request(
    raw: &RawRequest<'_>,
    path: impl Fn() -> String,
) -> Result<ScriptedRequest, ScriptError> {
    let stream = steps(&raw.stream, || format!("{}.stream", path()))?;
    let (outcome, end_delay) = outcome(raw.outcome, path)?;
    Ok(ScriptedRequest {
        stream,
        outcome,
        end_delay,
    })
}

/// An entry's `outcome` and how long after the last step it comes: completed, at once, when
/// absent.
fn outcome(
    raw: Option<&serde_json::value::RawValue>,
    path: impl Fn() -> String,
) -> Result<(LlmOutcome, Duration), ScriptError> {
    match raw {
        None => Ok((LlmOutcome::completed(), Duration::ZERO)),
        Some(o) => {
            let path = format!("{}.outcome", path());
            parse_outcome(&json_tree(o.get(), &path)?, &path)
        }
    }
}

/// One `llm` entry, or one tool's script, read in one pass, messages included (see
/// [`exact_in_place`]).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InPlaceScript<'a> {
    stream: Vec<InPlaceStep>,
    #[serde(borrow, default)]
    outcome: Option<&'a serde_json::value::RawValue>,
}

/// One step of an [`InPlaceScript`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InPlaceStep {
    #[serde(default)]
    delay_ms: u64,
    message: InPlace,
}

impl InPlaceScript<'_> {
    fn steps(self) -> Vec<Step> {
        self.stream
            .into_iter()
            .map(|step| Step {
                delay: Duration::from_millis(step.delay_ms),
                message: step.message.0,
            })
            .collect()
    }
}

/// [`parse_steps`] on the JSON text of a `stream` array: each step read straight into its
/// message; anything unusual is parsed as a tree for the error that names it.
pub fn parse_steps_json(text: &str, path: &str) -> Result<Vec<Step>, ScriptError> {
    match serde_json::from_str::<Vec<RawStep<'_>>>(text) {
        Ok(raw) => steps(&raw, || path.to_owned()),
        Err(_) => parse_steps(&json_tree(text, path)?, path),
    }
}

/// [`parse_request`] on the JSON text of one `llm` entry.
pub fn parse_request_json(text: &str, path: &str) -> Result<ScriptedRequest, ScriptError> {
    // The common request in one pass; anything else step by step, for the error that names it.
    if let Some(raw) = exact_in_place::<InPlaceScript<'_>>(text) {
        let (outcome, end_delay) = outcome(raw.outcome, || path.to_owned())?;
        return Ok(ScriptedRequest {
            stream: raw.steps(),
            outcome,
            end_delay,
        });
    }
    match serde_json::from_str::<RawRequest<'_>>(text) {
        Ok(raw) => request(&raw, || path.to_owned()),
        Err(_) => parse_request(&json_tree(text, path)?, path),
    }
}

/// The `llm` array of a scenario from its JSON text, errors naming `llm[i]...`. The whole
/// array is read in one pass when it is well-formed, entry by entry when not.
pub fn parse_requests_json(text: &str) -> Result<Vec<ScriptedRequest>, ScriptError> {
    if let Ok(raw) = serde_json::from_str::<Vec<RawRequest<'_>>>(text) {
        let mut out = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            out.push(request(r, || format!("llm[{i}]"))?);
        }
        return Ok(out);
    }
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(text)
        .map_err(|_| ScriptError::new("llm", "expected an array of requests"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_request_json(item.get(), &format!("llm[{i}]")))
        .collect()
}

/// One tool's script as read in a single pass.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript<'a> {
    #[serde(borrow)]
    stream: Vec<RawStep<'a>>,
}

/// Tool scripts (`{tool_call_id: {stream}}`) from JSON text in one pass, when well-formed;
/// `None` sends the caller the way that names what is wrong.
pub fn parse_tool_streams_json(
    text: &str,
) -> Option<Result<std::collections::HashMap<String, Vec<Step>>, ScriptError>> {
    let raw: std::collections::HashMap<String, RawScript<'_>> = serde_json::from_str(text).ok()?;
    // In id order, so the first error named is the same on every run.
    let mut ids: Vec<&String> = raw.keys().collect();
    ids.sort();
    let mut out = std::collections::HashMap::with_capacity(raw.len());
    for id in ids {
        match steps(&raw[id].stream, || format!("tools.{id}.stream")) {
            Ok(s) => {
                out.insert(id.clone(), s);
            }
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(out))
}

/// One tool's script (`{stream}`) from its JSON text, when well-formed; `None` as for
/// [`parse_tool_streams_json`].
pub fn parse_tool_stream_json(text: &str, id: &str) -> Option<Result<Vec<Step>, ScriptError>> {
    if let Some(raw) = exact_in_place::<InPlaceScript<'_>>(text) {
        // A tool's script has no outcome.
        if raw.outcome.is_none() {
            return Some(Ok(raw.steps()));
        }
    }
    let raw: RawScript<'_> = serde_json::from_str(text).ok()?;
    Some(steps(&raw.stream, || format!("tools.{id}.stream")))
}

/// The JSON tree of a piece of a scenario file (a `RawValue`'s text), or an error at `path`.
///
/// A piece whose syntax was checked can still fail here: a number out of range (`1e400`) is
/// valid JSON but no `f64`. The parser's line and column count from the piece's start, not
/// the file's, so they are left out.
pub fn json_tree(text: &str, path: &str) -> Result<Value, ScriptError> {
    serde_json::from_str(text).map_err(|e| {
        let full = e.to_string();
        let what = match full.rfind(" at line ") {
            Some(at) if e.line() > 0 => &full[..at],
            _ => &full,
        };
        ScriptError::new(path, format!("invalid JSON: {what}"))
    })
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
            check_keys(obj, &p, &["delay_ms", "message"])?;
            let delay = match obj.get("delay_ms") {
                None => 0,
                Some(v) => v.as_u64().ok_or_else(|| {
                    ScriptError::new(format!("{p}.delay_ms"), "expected a non-negative integer")
                })?,
            };
            let msg = obj
                .get("message")
                .ok_or_else(|| ScriptError::new(format!("{p}.message"), "missing"))?;
            let message = exact_message(msg, &format!("{p}.message"))?;
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
    check_keys(obj, path, &["stream", "outcome"])?;
    let stream = match obj.get("stream") {
        Some(s) => parse_steps(s, &format!("{path}.stream"))?,
        None => Vec::new(),
    };
    let (outcome, end_delay) = match obj.get("outcome") {
        None | Some(Value::Null) => (LlmOutcome::completed(), Duration::ZERO),
        Some(o) => parse_outcome(o, &format!("{path}.outcome"))?,
    };
    Ok(ScriptedRequest {
        stream,
        outcome,
        end_delay,
    })
}

fn parse_outcome(value: &Value, path: &str) -> Result<(LlmOutcome, Duration), ScriptError> {
    let obj = value.as_object().ok_or_else(|| {
        ScriptError::new(
            path,
            "expected an object {status, message?, permanent?, delay_ms?}",
        )
    })?;
    check_keys(obj, path, &["status", "message", "permanent", "delay_ms"])?;
    let delay = match obj.get("delay_ms") {
        None | Some(Value::Null) => Duration::ZERO,
        Some(v) => Duration::from_millis(v.as_u64().ok_or_else(|| {
            ScriptError::new(
                format!("{path}.delay_ms"),
                "expected a whole number of milliseconds",
            )
        })?),
    };
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
    Ok((
        LlmOutcome {
            status,
            error_message,
            permanent,
        },
        delay,
    ))
}

#[derive(Debug)]
struct Segment {
    /// The start fragment, which the closing stop fragment copies.
    start: ModelPayload,
    tool_call_id: String,
    content: String,
}

/// The `partial_*` segments a producer has opened and not yet stopped, in opening order.
///
/// A segment is open from its start fragment to its stop fragment. A stopped segment is not
/// open even when its complete message never came: a script cut there breaks the streaming
/// discipline, and replaying it faithfully means the stream shows that, so nothing is added
/// for it.
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
        let Some((event, content)) = p.partial_parts() else {
            return;
        };
        let kind = std::mem::discriminant(p);
        let id = p.tool_call_id().unwrap_or("");
        let pos = self
            .open
            .iter()
            .position(|s| std::mem::discriminant(&s.start) == kind && s.tool_call_id == id);
        match (event, pos) {
            // A second start of the same segment replaces it where it stands: the reference
            // keys segments in an insertion-ordered map.
            (StreamEventType::Start, Some(i)) => {
                self.open[i] = Segment {
                    start: p.clone(),
                    tool_call_id: id.to_owned(),
                    content: content.to_owned(),
                };
            }
            (StreamEventType::Start, None) => self.open.push(Segment {
                start: p.clone(),
                tool_call_id: id.to_owned(),
                content: content.to_owned(),
            }),
            (StreamEventType::Delta, Some(i)) => self.open[i].content.push_str(content),
            (StreamEventType::Stop, Some(i)) => {
                self.open.remove(i);
            }
            _ => {}
        }
    }

    /// True when some segment has started and not stopped.
    pub fn any_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Closes every open segment in opening order: a stop fragment (the start fragment with
    /// empty content, `reason`, and for a tool call an empty name), then the complete message
    /// holding what the segment streamed, with `reason`.
    pub fn close_all(&mut self, reason: StopReason) -> Vec<OmniMessage> {
        use StreamEventType::Stop;
        let mut out = Vec::new();
        for s in self.open.drain(..) {
            let (stop, complete) = match s.start {
                ModelPayload::PartialText(mut p) => {
                    let role = p.role;
                    (p.event_type, p.text, p.stop_reason) = (Stop, String::new(), Some(reason));
                    let complete = ModelPayload::Text(Text {
                        role,
                        text: s.content,
                        stop_reason: Some(reason),
                        fidelity: None,
                        sender: None,
                    });
                    (ModelPayload::PartialText(p), complete)
                }
                ModelPayload::PartialThinking(mut p) => {
                    let role = p.role;
                    (p.event_type, p.thinking, p.stop_reason) = (Stop, String::new(), Some(reason));
                    let complete = ModelPayload::Thinking(Thinking {
                        role,
                        thinking: s.content,
                        stop_reason: Some(reason),
                        fidelity: None,
                    });
                    (ModelPayload::PartialThinking(p), complete)
                }
                ModelPayload::PartialToolCall(mut p) => {
                    let complete = ModelPayload::ToolCall(ToolCall {
                        role: p.role,
                        name: std::mem::take(&mut p.name),
                        arguments: s.content,
                        tool_call_id: p.tool_call_id.clone(),
                        stop_reason: Some(reason),
                        fidelity: None,
                    });
                    (p.event_type, p.arguments, p.stop_reason) =
                        (Stop, String::new(), Some(reason));
                    (ModelPayload::PartialToolCall(p), complete)
                }
                ModelPayload::PartialToolCallOutput(mut p) => {
                    let complete = ModelPayload::ToolCallOutput(ToolCallOutput {
                        role: p.role,
                        output: s.content,
                        images: None,
                        tool_call_id: p.tool_call_id.clone(),
                        stop_reason: Some(reason),
                    });
                    (p.event_type, p.output, p.stop_reason) = (Stop, String::new(), Some(reason));
                    (ModelPayload::PartialToolCallOutput(p), complete)
                }
                _ => unreachable!("only partial fragments open segments"),
            };
            out.push(OmniMessage::new(Body::Model(stop)));
            out.push(OmniMessage::new(Body::Model(complete)));
        }
        out
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

/// Plays `steps` into `sink` on tokio time, tracking open segments in `open` and showing each
/// message to `seen` before it goes (what a player remembers of its stream, without a sink
/// layer of its own around `sink`: one less boxed future per message).
///
/// Each message is restamped as it is emitted. Stops at the first wait the cancellation
/// interrupts.
pub async fn play(
    steps: impl IntoIterator<Item = Step, IntoIter: Send>,
    cancel: &tokio_util::sync::CancellationToken,
    open: &mut OpenSegments,
    sink: &mut dyn MessageSink,
    mut seen: impl FnMut(&OmniMessage) + Send,
) -> Played {
    for step in steps {
        if cancel.is_cancelled() {
            return Played::Aborted;
        }
        // A zero delay does not wait at all, as in the reference: the step belongs to the
        // same instant, so nothing else gets to run before it.
        if !step.delay.is_zero() {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Played::Aborted,
                _ = tokio::time::sleep(step.delay) => {}
            }
            // A timer of the run (its interrupt, a steer) due at this same instant was set
            // before this step's and goes first in the reference; let it.
            tokio::task::yield_now().await;
            if cancel.is_cancelled() {
                return Played::Aborted;
            }
        }
        let msg = build::restamped(step.message, Timestamp::now());
        open.observe(&msg);
        seen(&msg);
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
        // The session counts of the last token_usage streamed.
        let mut last = None;
        let remember = |msg: &OmniMessage| {
            if let Some(EventPayload::TokenUsage { session, .. }) = msg.event() {
                last = Some(*session);
            }
        };
        // A request's script plays once: its messages move into the stream.
        let played = play(script.stream, &request.cancel, &mut open, sink, remember).await;
        // An interrupt that fired while the last step was being delivered (the engine waits
        // on an approval there) still ends the request as aborted.
        let played = match played {
            Played::Finished if request.cancel.is_cancelled() => Played::Aborted,
            other => other,
        };
        // A stream whose end lagged its last message ends that much later (an interrupt
        // meanwhile ends it as aborted).
        let played = match played {
            Played::Finished if !script.end_delay.is_zero() => {
                tokio::select! {
                    biased;
                    () = request.cancel.cancelled() => Played::Aborted,
                    () = tokio::time::sleep(script.end_delay) => Played::Finished,
                }
            }
            other => other,
        };
        match played {
            Played::Finished => {
                for m in open.close_all(script.outcome.status) {
                    sink.emit_closure(m).await;
                }
                if let Some(session) = last {
                    self.shared.lock().expect("scripted model lock").session = session;
                }
                script.outcome
            }
            Played::Aborted => {
                for m in open.close_all(StopReason::Aborted) {
                    sink.emit_closure(m).await;
                }
                LlmOutcome::new(StopReason::Aborted)
            }
        }
    }

    fn session_tokens(&self) -> TokenCounts {
        self.shared.lock().expect("scripted model lock").session
    }
}

#[cfg(test)]
mod tests;
