//! Why a response body could not be turned into events: the error every decoder and the
//! translator share.

use penguin_omni_protocol::StopReason;

use crate::LlmOutcome;

/// Why a response body could not be turned into events.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes are not what the protocol says (bad JSON, bad UTF-8, a stream that ended
    /// before its terminal event, unparsable tool arguments).
    #[error("{0}")]
    Malformed(String),
    /// The provider reported an error inside a successful (HTTP 200) stream.
    #[error("{message}")]
    Provider {
        /// The classified stop reason.
        status: StopReason,
        /// The provider's error text.
        message: String,
    },
    /// The response outgrew [`ModelConfig::max_message_bytes`](crate::wire::ModelConfig::max_message_bytes): one message's content, the
    /// response's content in all, or one SSE event. Reading stops at once, and the text names
    /// the limit.
    #[error("{0}")]
    TooLarge(String),
}

impl WireError {
    /// The request outcome this error gives: `malformed`, the provider error's class, or for
    /// [`WireError::TooLarge`] a **permanent** `failed`.
    ///
    /// An oversized message is refused like a malformed stream (segments closed, the reason
    /// in `error_message`), but it is not retried: the same request would most likely produce
    /// the same runaway output and cost as much again, so the engine ends the run at once, as
    /// it does for the reference's other permanent failures, and the user decides (raise
    /// `max_message_bytes`, or ask differently).
    pub fn into_outcome(self) -> LlmOutcome {
        match self {
            WireError::Malformed(m) => LlmOutcome::with_message(StopReason::Malformed, m),
            WireError::Provider { message, .. }
                if crate::failure::is_context_overflow_error(&message, &[]) =>
            {
                LlmOutcome::permanent_failure(message)
            }
            WireError::Provider { status, message } => LlmOutcome::with_message(status, message),
            WireError::TooLarge(m) => LlmOutcome::permanent_failure(m),
        }
    }
}
