//! The LLM side of penguin.
//!
//! - [`Llm`]: what the engine drives. A request takes only the new messages (the model keeps
//!   its own history), streams OmniMessages into a [`MessageSink`], and ends with an
//!   [`LlmOutcome`]. It never panics or returns an error across the boundary: every failure is
//!   an outcome.
//! - [`scripted::ScriptedModel`]: plays a scenario file's `llm` script.
//!
//! This crate depends only on `omni-protocol`, so adapters can be written and tested without
//! the engine.

use std::fmt;

use async_trait::async_trait;
use penguin_omni_protocol::{OmniMessage, StopReason, TokenCounts};
pub use tokio_util::sync::CancellationToken;

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "openai-chat")]
pub mod openai_chat;
pub mod scripted;
pub mod sse;
pub mod testing;
pub mod translate;
pub mod wire;

#[cfg(feature = "http")]
pub use http::HttpModel;
#[cfg(feature = "openai-chat")]
pub use openai_chat::OpenAiChat;
pub use translate::{
    strip_suffix, usage_to_token_counts, ContentItem, EventTranslator, ToolCallIdAllocator,
    UniEvent, Usage,
};
pub use wire::{ModelConfig, StreamDecoder, WireError, WireProtocol, WireRequest};

/// Where a producer (a model request, a tool) puts the messages it streams.
///
/// `emit` may wait: the engine's sink holds a model stream while a tool call awaits approval,
/// which is how approvals stay one at a time without buffering the model.
#[async_trait]
pub trait MessageSink: Send {
    /// Hands over one message.
    async fn emit(&mut self, msg: OmniMessage);
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
