//! Builders (protocol [§1.4](crate::spec#s1.4)–[§1.6](crate::spec#s1.6), *Complete model messages*
//! to *Events*). Each stamps the message when it is built and applies the reference
//! implementation's defaults: every built text, partial and tool message carries `stop_reason`, and
//! fidelity is attached only when it has at least one key.

use crate::message::*;
use crate::Timestamp;

fn model(p: ModelPayload) -> OmniMessage {
    OmniMessage::new(Body::Model(p))
}

fn event(p: EventPayload) -> OmniMessage {
    OmniMessage::new(Body::Event(p))
}

fn nonempty(f: Option<Fidelity>) -> Option<Box<Fidelity>> {
    f.filter(|f| !f.is_empty()).map(Box::new)
}

/// A user text; `sender` is kept only when it is not `User`.
pub fn user_text(text: impl Into<String>) -> OmniMessage {
    user_text_from(text, TextSender::User)
}

/// A user text written by someone other than the user (parent agent, harness, server).
pub fn user_text_from(text: impl Into<String>, sender: TextSender) -> OmniMessage {
    model(ModelPayload::Text(Text {
        role: Role::User,
        text: text.into(),
        stop_reason: Some(StopReason::Completed),
        fidelity: None,
        sender: (sender != TextSender::User).then_some(sender),
    }))
}

/// An assistant text.
pub fn assistant_text(text: impl Into<String>, stop_reason: StopReason) -> OmniMessage {
    assistant_text_with(text, stop_reason, None)
}

/// An assistant text with provider fidelity.
pub fn assistant_text_with(
    text: impl Into<String>,
    stop_reason: StopReason,
    fidelity: Option<Fidelity>,
) -> OmniMessage {
    model(ModelPayload::Text(Text {
        role: Role::Assistant,
        text: text.into(),
        stop_reason: Some(stop_reason),
        fidelity: nonempty(fidelity),
        sender: None,
    }))
}

/// A complete thinking segment.
pub fn thinking(
    text: impl Into<String>,
    stop_reason: StopReason,
    fidelity: Option<Fidelity>,
) -> OmniMessage {
    model(ModelPayload::Thinking(Thinking {
        role: Role::Assistant,
        thinking: text.into(),
        stop_reason: Some(stop_reason),
        fidelity: nonempty(fidelity),
    }))
}

/// An image given by URL or data URL.
pub fn image_url(url: impl Into<String>) -> OmniMessage {
    model(ModelPayload::ImageUrl(ImageUrl {
        role: Role::User,
        image_url: url.into(),
        stop_reason: Some(StopReason::Completed),
    }))
}

/// A complete tool call (`arguments` is the JSON string).
pub fn tool_call(
    name: impl Into<String>,
    arguments: impl Into<String>,
    tool_call_id: impl Into<String>,
    stop_reason: StopReason,
    fidelity: Option<Fidelity>,
) -> OmniMessage {
    model(ModelPayload::ToolCall(ToolCall {
        role: Role::Assistant,
        name: name.into(),
        arguments: arguments.into(),
        tool_call_id: tool_call_id.into(),
        stop_reason: Some(stop_reason),
        fidelity: nonempty(fidelity),
    }))
}

/// A complete tool output.
pub fn tool_call_output(
    output: impl Into<String>,
    tool_call_id: impl Into<String>,
    stop_reason: StopReason,
) -> OmniMessage {
    tool_call_output_with_images(output, tool_call_id, stop_reason, Vec::new())
}

/// A complete tool output with images (kept only when non-empty).
pub fn tool_call_output_with_images(
    output: impl Into<String>,
    tool_call_id: impl Into<String>,
    stop_reason: StopReason,
    images: Vec<String>,
) -> OmniMessage {
    model(ModelPayload::ToolCallOutput(ToolCallOutput {
        role: Role::User,
        output: output.into(),
        images: (!images.is_empty()).then_some(images),
        tool_call_id: tool_call_id.into(),
        stop_reason: Some(stop_reason),
    }))
}

/// A `partial_text` fragment.
///
/// # Fragment shapes (all four `partial_*` builders)
///
/// A streamed segment is `start → delta* → stop`, then the complete message holding what the
/// fragments carried, and the [`StreamValidator`](crate::validator::StreamValidator) checks
/// exactly that:
///
/// - **start** carries `""` as its content (the reference never puts text on a start; a start
///   with content counts towards the concatenation all the same);
/// - each **delta** carries one piece of the content;
/// - **stop** carries `""` again;
/// - the **complete** message ([`assistant_text`], [`thinking`], [`tool_call`],
///   [`tool_call_output`]) carries the concatenation of every fragment, and its
///   `stop_reason` is the request's outcome (`completed`).
///
/// Every fragment's `stop_reason` is `completed` too while the segment streams normally;
/// a segment closed by an interrupt gets `aborted` on its stop and its complete. A tool
/// call's segment also needs its `tool_call_id` on every fragment (that is how segments are
/// keyed) and its `name` on the start only (see [`partial_tool_call`]).
///
/// ```
/// use penguin_omni_protocol::validator::StreamValidator;
/// use penguin_omni_protocol::{build, StopReason, StreamEventType, TokenCounts};
///
/// let done = StopReason::Completed;
/// let usage = TokenCounts::new(0, 10, 2);
/// let stream = [
///     build::request_begin(),
///     build::partial_text(StreamEventType::Start, "", done),
///     build::partial_text(StreamEventType::Delta, "Hel", done),
///     build::partial_text(StreamEventType::Delta, "lo", done),
///     build::partial_text(StreamEventType::Stop, "", done),
///     build::assistant_text("Hello", done),
///     build::token_usage(usage, usage),
///     build::request_end(done, Default::default()),
/// ];
/// assert_eq!(StreamValidator::validate(&stream), []);
/// ```
pub fn partial_text(
    event_type: StreamEventType,
    text: impl Into<String>,
    stop_reason: StopReason,
) -> OmniMessage {
    model(ModelPayload::PartialText(PartialText {
        role: Role::Assistant,
        event_type,
        text: text.into(),
        stop_reason: Some(stop_reason),
    }))
}

/// A `partial_thinking` fragment: shaped like [`partial_text`]'s (`""` on start and stop), its
/// complete message is [`thinking`].
pub fn partial_thinking(
    event_type: StreamEventType,
    text: impl Into<String>,
    stop_reason: StopReason,
) -> OmniMessage {
    model(ModelPayload::PartialThinking(PartialThinking {
        role: Role::Assistant,
        event_type,
        thinking: text.into(),
        stop_reason: Some(stop_reason),
    }))
}

/// A `partial_tool_call` fragment: `name` is the tool's on the start and `""` on every delta
/// and on the stop; `arguments` is `""` on start and stop and a piece of the JSON arguments on
/// each delta; `tool_call_id` is the call's on every fragment. The complete [`tool_call`]
/// follows the stop with the name and the whole arguments (its arguments may differ in bytes
/// from the concatenation when both parse as the same JSON value).
///
/// ```
/// use penguin_omni_protocol::build;
/// use penguin_omni_protocol::StreamEventType::{Delta, Start, Stop};
/// use penguin_omni_protocol::StopReason::Completed;
///
/// let segment = [
///     build::partial_tool_call(Start, "read_file", "", "call_1", Completed),
///     build::partial_tool_call(Delta, "", r#"{"path":"#, "call_1", Completed),
///     build::partial_tool_call(Delta, "", r#""a"}"#, "call_1", Completed),
///     build::partial_tool_call(Stop, "", "", "call_1", Completed),
///     build::tool_call("read_file", r#"{"path":"a"}"#, "call_1", Completed, None),
/// ];
/// # let _ = segment;
/// ```
pub fn partial_tool_call(
    event_type: StreamEventType,
    name: impl Into<String>,
    arguments: impl Into<String>,
    tool_call_id: impl Into<String>,
    stop_reason: StopReason,
) -> OmniMessage {
    model(ModelPayload::PartialToolCall(PartialToolCall {
        role: Role::Assistant,
        event_type,
        name: name.into(),
        arguments: arguments.into(),
        tool_call_id: tool_call_id.into(),
        stop_reason: Some(stop_reason),
    }))
}

/// A `partial_tool_call_output` fragment, a tool's streamed output: `""` on start and stop, a
/// piece of the output on each delta, the call's `tool_call_id` on every fragment; the complete
/// [`tool_call_output`] follows the stop.
pub fn partial_tool_call_output(
    event_type: StreamEventType,
    output: impl Into<String>,
    tool_call_id: impl Into<String>,
    stop_reason: StopReason,
) -> OmniMessage {
    model(ModelPayload::PartialToolCallOutput(PartialToolCallOutput {
        role: Role::User,
        event_type,
        output: output.into(),
        images: None,
        tool_call_id: tool_call_id.into(),
        stop_reason: Some(stop_reason),
    }))
}

/// `approval_decision`.
pub fn approval_decision(
    decision: ApprovalDecision,
    tool_call_id: impl Into<String>,
) -> OmniMessage {
    event(EventPayload::ApprovalDecision {
        decision,
        tool_call_id: tool_call_id.into(),
        decided_by: None,
        reason: None,
        updated_arguments: None,
    })
}

/// `approval_decision` naming who decided and why (a hook), and the arguments the call runs
/// with when they were rewritten ([§2.5](crate::spec#s2.5)).
pub fn approval_decision_by(
    decision: ApprovalDecision,
    tool_call_id: impl Into<String>,
    decided_by: Option<String>,
    reason: Option<String>,
    updated_arguments: Option<String>,
) -> OmniMessage {
    event(EventPayload::ApprovalDecision {
        decision,
        tool_call_id: tool_call_id.into(),
        decided_by,
        reason,
        updated_arguments,
    })
}

/// `abort`; the reference's builder default is `null`.
pub fn abort(reason: Option<String>) -> OmniMessage {
    event(EventPayload::Abort { reason })
}

/// `request_begin`.
pub fn request_begin() -> OmniMessage {
    event(EventPayload::RequestBegin)
}

/// Retry details shared by request_end and compaction_end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetryDetail {
    /// Failure detail.
    pub error_message: Option<String>,
    /// 1-based attempt ordinal.
    pub attempt: Option<u32>,
    /// Planned backoff (request_end only).
    pub retry_in_ms: Option<u64>,
}

/// `request_end`.
pub fn request_end(status: StopReason, detail: RetryDetail) -> OmniMessage {
    event(EventPayload::RequestEnd {
        status,
        error_message: detail.error_message,
        attempt: detail.attempt,
        retry_in_ms: detail.retry_in_ms,
    })
}

/// `token_usage`.
pub fn token_usage(session: TokenCounts, request: TokenCounts) -> OmniMessage {
    event(EventPayload::TokenUsage { session, request })
}

/// `compaction_begin`.
pub fn compaction_begin(
    reason: CompactionReason,
    mode: CompactionMode,
    context: u64,
    turns: u64,
) -> OmniMessage {
    event(EventPayload::CompactionBegin {
        reason,
        mode,
        context,
        turns,
    })
}

/// `compaction_end` (never carries retry_in_ms).
pub fn compaction_end(
    reason: CompactionReason,
    mode: CompactionMode,
    status: StopReason,
    detail: RetryDetail,
) -> OmniMessage {
    event(EventPayload::CompactionEnd {
        reason,
        mode,
        status,
        attempt: detail.attempt,
        error_message: detail.error_message,
    })
}

/// `goal_finished`: the last message of a goal-mode run (streamed and written to the Trace).
pub fn goal_finished(outcome: GoalOutcomeStatus, rounds: u64, tokens_used: u64) -> OmniMessage {
    event(EventPayload::GoalFinished {
        outcome,
        rounds,
        tokens_used,
    })
}

/// `subagent` pointer (Trace only).
pub fn subagent(session_id: impl Into<String>) -> OmniMessage {
    event(EventPayload::Subagent {
        session_id: session_id.into(),
    })
}

/// `tool_list_ready`.
pub fn tool_list_ready(tools: Vec<ToolDefinition>) -> OmniMessage {
    event(EventPayload::ToolListReady { tools })
}

/// `session_meta`.
pub fn session_meta(meta: SessionMeta) -> OmniMessage {
    OmniMessage::new(Body::SessionMeta(Box::new(meta)))
}

/// Restamps a message: used by producers that replay prepared messages (scripts).
pub fn restamped(mut msg: OmniMessage, at: Timestamp) -> OmniMessage {
    msg.timestamp = at;
    msg
}

/// `mcp_connect_begin`: `servers` in config order.
pub fn mcp_connect_begin(servers: Vec<String>) -> OmniMessage {
    event(EventPayload::McpConnectBegin { servers })
}

/// `mcp_connect_end`: `failed` when any server's result is not `completed`
/// ([§1.6](crate::spec#s1.6) *Events*), `aborted` with no results when the connect was interrupted.
pub fn mcp_connect_end(results: Vec<McpConnectResult>, aborted: bool) -> OmniMessage {
    let status = if aborted {
        McpConnectStatus::Aborted
    } else if results
        .iter()
        .all(|r| r.status == McpConnectStatus::Completed)
    {
        McpConnectStatus::Completed
    } else {
        McpConnectStatus::Failed
    };
    event(EventPayload::McpConnectEnd {
        status,
        results: if aborted { Vec::new() } else { results },
    })
}
