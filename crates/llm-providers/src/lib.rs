#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;

/// The attribute [`Llm`] and [`MessageSink`] are declared with, re-exported so an implementer
/// needs no dependency of its own: write `#[penguin_llm_providers::async_trait]` (or `use` it)
/// on the `impl` block.
pub use async_trait::async_trait;
use penguin_omni_protocol::{OmniMessage, StopReason, TokenCounts};
pub use tokio_util::sync::CancellationToken;

#[cfg(feature = "anthropic-messages")]
pub mod anthropic_messages;
// The request shape the OpenAI chat and Ollama adapters share.
#[cfg(any(feature = "openai-chat", feature = "ollama"))]
mod chat;
#[cfg(feature = "wire")]
mod error;
pub mod failure;
#[cfg(feature = "gemini")]
pub mod gemini;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "wire")]
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
#[cfg(feature = "wire")]
pub mod sse;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(feature = "wire")]
pub mod translate;
#[cfg(feature = "wire")]
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
#[cfg(feature = "wire")]
pub use translate::{
    strip_suffix, usage_to_token_counts, ContentItem, EventTranslator, ToolCallIdAllocator,
    UniEvent, Usage,
};
#[cfg(feature = "wire")]
pub use wire::{
    ModelConfig, StreamDecoder, WireError, WireProtocol, WireRequest, DEFAULT_MAX_MESSAGE_BYTES,
};

/// Where a producer (a model request, a tool) puts the messages it streams.
///
/// `emit` may wait: the engine's sink holds a model stream while a tool call awaits approval,
/// which is how approvals stay one at a time without buffering the model.
///
/// An `#[async_trait]` trait: the signatures rustdoc shows (`Pin<Box<dyn Future…>>`) are what
/// the attribute expands `async fn` to. Implement it with the same attribute (re-exported here
/// as [`async_trait`](macro@async_trait)); without it the compiler answers E0195 ("lifetime
/// parameters … do not match the trait declaration").
///
/// ```
/// use penguin_llm_providers::{async_trait, MessageSink};
/// use penguin_omni_protocol::OmniMessage;
///
/// struct Printer;
///
/// #[async_trait]
/// impl MessageSink for Printer {
///     async fn emit(&mut self, msg: OmniMessage) {
///         println!("{}", msg.to_json());
///     }
/// }
/// ```
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
///
/// The model keeps its own conversation: each request carries only the messages new since
/// the last committed turn. So the model, not the engine, must be told what a resumed session
/// already said ([`Llm::set_history`]) and which tools it may call (an HTTP model's
/// `ModelConfig::tools`, usually the environment's `tools()`: the engine never passes them).
///
/// An `#[async_trait]` trait: the signatures rustdoc shows (`Pin<Box<dyn Future…>>`) are what
/// the attribute expands `async fn` to. Implement it with the same attribute (re-exported here
/// as [`async_trait`](macro@async_trait)); without it the compiler answers E0195.
///
/// ```
/// use penguin_llm_providers::{async_trait, Llm, LlmOutcome, LlmRequest, MessageSink};
/// use penguin_omni_protocol::{build, StopReason};
///
/// /// Answers every request with the same text.
/// #[derive(Debug)]
/// struct Parrot;
///
/// #[async_trait]
/// impl Llm for Parrot {
///     async fn stream_generate(
///         &mut self,
///         _request: LlmRequest,
///         sink: &mut dyn MessageSink,
///     ) -> LlmOutcome {
///         sink.emit(build::assistant_text("hello", StopReason::Completed)).await;
///         LlmOutcome::completed()
///     }
/// }
/// ```
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

    /// Replaces the conversation the model continues: the committed history of a resumed
    /// session (`penguin_trace_store::Resumed::history`), given once, before the first
    /// request. A model that keeps no history of its own (a scripted one) ignores it, which
    /// is the default. The HTTP models translate it to their wire format and register its
    /// tool call ids, so new ids never collide with old ones.
    fn set_history(&mut self, _history: &[OmniMessage]) {}
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

    fn set_history(&mut self, history: &[OmniMessage]) {
        (**self).set_history(history)
    }
}
