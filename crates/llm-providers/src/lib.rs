//! The LLM side of penguin.
//!
//! - [`Llm`]: what the engine drives. A request takes only the new messages (the model keeps
//!   its own history), streams OmniMessages into a [`MessageSink`], and ends with an
//!   [`LlmOutcome`]. It never panics or returns an error across the boundary: every failure is
//!   an outcome.
//! - [`scripted::ScriptedModel`]: plays a scenario file's `llm` script.
//! - Real providers, split in three layers:
//!   1. a **wire decoder** ([`wire::StreamDecoder`]): response bytes in, arbitrarily chunked,
//!      provider-neutral [`translate::UniEvent`]s out. Pure.
//!   2. the **translator** ([`translate::EventTranslator`]): UniEvents in, OmniMessages out,
//!      with the reference's segmentation, flush order and stop reasons (§6.2–§6.4). Pure and
//!      shared by every provider.
//!   3. the **HTTP shell** ([`http::HttpModel`], feature `http`): sends the request a
//!      [`wire::WireProtocol`] builds, enforces the idle timeout and the user's interrupt,
//!      classifies failures (§6.5), closes open segments on any non-completed outcome, yields
//!      `token_usage` last, and commits the turn to the protocol's history only on completion.
//!
//! Features: `openai-chat` (default), `openai-responses`, `anthropic-messages`, `gemini`, `http`
//! (default), `rustls` (default; TLS for `https` base URLs).
//!
//! This crate depends only on `omni-protocol`, so adapters can be written and tested without
//! the engine.
//!
//! # How to add an adapter
//!
//! An adapter is a protocol type and a decoder type, both pure; no HTTP code is needed.
//! [`openai_chat`] is the worked example.
//!
//! 1. **Module and feature.** Add `src/<protocol>.rs` behind a cargo feature of the same name
//!    (`[features] my-proto = []`), and a `#[cfg(feature = "my-proto")] pub mod` line here.
//! 2. **Decoder.** For an SSE-framed protocol, implement [`sse::SseEventHandler`] and make
//!    `sse::SseStreamDecoder<YourHandler>` the [`wire::StreamDecoder`]: it already handles any
//!    chunk split, split UTF-8 and `\r\n`, and a body with no events. The handler parses each
//!    event's JSON into a [`translate::UniEvent`]:
//!    - text and reasoning as [`translate::ContentItem::Text`] / `Thinking`, putting wire data
//!      that must be replayed (signatures, encrypted reasoning, `phase`, which field the
//!      reasoning came in) into `fidelity`. The translator decides segment boundaries from
//!      fidelity (a `signature` or a changed `phase` starts a new segment; a changed thinking
//!      fidelity closes the block), so set it the way §6.2 describes and nothing more;
//!    - tool call argument fragments as `PartialToolCall` (the id may come only on the first
//!      fragment), then a `ToolCall` with the parsed arguments as soon as the call is complete:
//!      the complete message is what lets approval start while the model still streams. A
//!      provider without call ids passes the function name as the id; the shared
//!      [`translate::ToolCallIdAllocator`] makes it session-unique;
//!    - usage as a cumulative [`translate::Usage`] snapshot, split into cached / uncached
//!      prompt and thinking / response tokens (check whether the provider's prompt count
//!      includes the cached tokens, and its output count the reasoning ones);
//!    - the finish reason normalized to `stop`, `tool_call`, `length`, `content_filter`
//!      (anything not `stop`/`tool_call` fails the last segment, but the request completes).
//!
//!    Errors are [`wire::WireError`]: `Malformed` for bad bytes and for a body that ends before
//!    the protocol's terminal event (the handler's `missing_end` says what was missing),
//!    `Provider` for an error event inside a 200 stream, classified with
//!    [`wire::classify_error`]. The events decoded before an error are already in `out` when
//!    it is returned, so output never depends on chunking. Size limits need nothing from an
//!    adapter: the translator caps every message at `max_message_bytes`, and
//!    `SseStreamDecoder` bounds one event (`StreamDecoder::limit_event_bytes`); a decoder
//!    that buffers on its own (a tool call's arguments until its end) only ever holds what
//!    one chunk adds past a cap, because the shell stops reading at the first refusal.
//! 3. **Protocol.** Implement [`wire::WireProtocol`]: `build_request` returns the path,
//!    authentication headers and JSON body (system prompt, committed history, the new messages,
//!    tools only when non-empty, max tokens only when > 0, the thinking level mapped to the
//!    provider's knob); `commit` appends a completed turn (input, then the complete reply
//!    messages, fidelity replayed verbatim, tool call ids through [`translate::strip_suffix`]);
//!    `set_history` rebuilds the history on resume.
//! 4. **Fixtures.** Put recorded (or documentation-faithful) response bodies under
//!    `tests/fixtures/<protocol>/`, and write a test per fixture that runs it through
//!    [`testing::replay`] and compares [`testing::without_timestamps`] with the expected
//!    stream written out with `penguin_omni_protocol::build`. Check
//!    [`testing::check_discipline`] on every output, and add a proptest that any split of each
//!    fixture gives the same messages. `tests/common`'s `Fixtures` does the replay and the
//!    discipline check; `tests/openai_chat_fixtures.rs` has all three, so copy it.
//!    Cover a cut-off stream (malformed), an error event, and a length finish.
//! 5. **Use it.** `HttpModel::new(config, MyProtocol::new(), session_ids)` is a working
//!    [`Llm`]; the HTTP faults (`tests/http_faults.rs`) are protocol-independent and need no
//!    repetition.

use std::fmt;

use async_trait::async_trait;
use penguin_omni_protocol::{OmniMessage, StopReason, TokenCounts};
pub use tokio_util::sync::CancellationToken;

#[cfg(feature = "anthropic-messages")]
pub mod anthropic_messages;
#[cfg(feature = "gemini")]
pub mod gemini;
#[cfg(feature = "http")]
pub mod http;
pub mod limits;
#[cfg(feature = "ndjson")]
pub mod ndjson;
#[cfg(feature = "ollama")]
pub mod ollama;
#[cfg(feature = "openai-chat")]
pub mod openai_chat;
#[cfg(feature = "openai-responses")]
pub mod openai_responses;
pub mod scripted;
pub mod sse;
pub mod testing;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod translate;
pub mod wire;

#[cfg(feature = "anthropic-messages")]
pub use anthropic_messages::AnthropicMessages;
#[cfg(feature = "gemini")]
pub use gemini::Gemini;
#[cfg(feature = "http")]
pub use http::HttpModel;
#[cfg(feature = "ollama")]
pub use ollama::Ollama;
#[cfg(feature = "openai-chat")]
pub use openai_chat::OpenAiChat;
#[cfg(feature = "openai-responses")]
pub use openai_responses::OpenAiResponses;
pub use translate::{
    strip_suffix, usage_to_token_counts, ContentItem, EventTranslator, ToolCallIdAllocator,
    UniEvent, Usage,
};
pub use wire::{
    ModelConfig, StreamDecoder, WireError, WireProtocol, WireRequest, DEFAULT_MAX_MESSAGE_BYTES,
};

/// Where a producer (a model request, a tool) puts the messages it streams.
///
/// `emit` may wait: the engine's sink holds a model stream while a tool call awaits approval,
/// which is how approvals stay one at a time without buffering the model.
#[async_trait]
pub trait MessageSink: Send {
    /// Hands over one message.
    async fn emit(&mut self, msg: OmniMessage);

    /// Hands over a message the producer adds to close a segment its stream left open (the
    /// stop fragment, then the complete message), rather than one it streamed. An engine
    /// replaying a script on a paused clock schedules it a step later than a streamed
    /// message, as the reference does; otherwise it is [`MessageSink::emit`].
    async fn emit_closure(&mut self, msg: OmniMessage) {
        self.emit(msg).await;
    }
}

#[async_trait]
impl MessageSink for Vec<OmniMessage> {
    async fn emit(&mut self, msg: OmniMessage) {
        self.push(msg);
    }
}

/// The thinking effort a request asks for, mapped by each adapter to its provider's parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    /// No thinking.
    None,
    /// Low effort.
    Low,
    /// Medium effort.
    Medium,
    /// High effort.
    High,
    /// Extra-high effort.
    Xhigh,
    /// The provider's maximum.
    Max,
}

impl ThinkingLevel {
    /// The OpenAI effort name, shared by Chat Completions (`reasoning_effort`) and Responses
    /// (`reasoning.effort`). `max` has no OpenAI counterpart beyond `xhigh`, so it maps there.
    pub fn openai_effort(self) -> &'static str {
        match self {
            ThinkingLevel::None => "none",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
            ThinkingLevel::Xhigh | ThinkingLevel::Max => "xhigh",
        }
    }
}

impl std::str::FromStr for ThinkingLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "none" => ThinkingLevel::None,
            "low" => ThinkingLevel::Low,
            "medium" => ThinkingLevel::Medium,
            "high" => ThinkingLevel::High,
            "xhigh" => ThinkingLevel::Xhigh,
            "max" => ThinkingLevel::Max,
            other => {
                return Err(format!(
                    "unknown thinking level {other:?} (none, low, medium, high, xhigh, max)"
                ))
            }
        })
    }
}

/// One model request.
#[derive(Debug)]
pub struct LlmRequest {
    /// Only the messages new since the last committed turn; all share one role.
    pub new_messages: Vec<OmniMessage>,
    /// The user's interrupt.
    pub cancel: CancellationToken,
    /// Requested thinking effort; `None` means the model's default.
    pub thinking_level: Option<ThinkingLevel>,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmOutcome {
    /// One of the six stop reasons.
    pub status: StopReason,
    /// The provider's error text, when there is one.
    pub error_message: Option<String>,
    /// A failure that retrying cannot fix: the engine ends the run at once.
    pub permanent: bool,
}

impl LlmOutcome {
    /// A completed request.
    pub fn completed() -> LlmOutcome {
        LlmOutcome::new(StopReason::Completed)
    }

    /// An outcome with no message.
    pub fn new(status: StopReason) -> LlmOutcome {
        LlmOutcome {
            status,
            error_message: None,
            permanent: false,
        }
    }

    /// An outcome with an error message.
    pub fn with_message(status: StopReason, message: impl Into<String>) -> LlmOutcome {
        LlmOutcome {
            status,
            error_message: Some(message.into()),
            permanent: false,
        }
    }

    /// A `failed` outcome that retrying cannot fix: the engine ends the run with `message`
    /// instead of climbing the reconnect ladder.
    pub fn permanent_failure(message: impl Into<String>) -> LlmOutcome {
        LlmOutcome {
            permanent: true,
            ..LlmOutcome::with_message(StopReason::Failed, message)
        }
    }
}

/// A language model as the engine sees it.
///
/// Contract: stream every segment as `start → delta* → stop` followed by its complete message;
/// on interruption close every open segment (stop fragment, then the complete message, both
/// with the outcome's stop reason); yield `token_usage` as the last message of a completed
/// request and only then. A turn enters the model's history only when its stream completed.
#[async_trait]
pub trait Llm: Send + fmt::Debug {
    /// Runs one request.
    async fn stream_generate(
        &mut self,
        request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome;

    /// Cumulative token counts of the session so far.
    fn session_tokens(&self) -> TokenCounts {
        TokenCounts::default()
    }
}

#[async_trait]
impl<L: Llm + ?Sized> Llm for Box<L> {
    async fn stream_generate(
        &mut self,
        request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        (**self).stream_generate(request, sink).await
    }

    fn session_tokens(&self) -> TokenCounts {
        (**self).session_tokens()
    }
}
