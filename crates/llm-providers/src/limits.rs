//! What one request may hold: output-token clamping (protocol
//! [§6.6](penguin_omni_protocol::spec#s6.6) *Request configuration*: never ask for more output than
//! the context window has room for after the input), and the size limits on what a response may
//! stream (one message, a whole response, one event).

use penguin_omni_protocol::{ModelPayload, OmniMessage, ToolDefinition};

/// The reference's token estimate: ASCII characters count a quarter token each (rounded up),
/// other characters one each, and an image 1600.
pub fn approx_text_tokens(text: &str) -> u64 {
    let (ascii, other) = text.chars().fold((0u64, 0u64), |(a, o), c| {
        if c.is_ascii() {
            (a + 1, o)
        } else {
            (a, o + 1)
        }
    });
    ascii.div_ceil(4) + other
}

/// The estimate for a list of messages.
pub fn approx_tokens(messages: &[OmniMessage]) -> u64 {
    messages
        .iter()
        .map(|m| match m.model() {
            Some(ModelPayload::ImageUrl(_) | ModelPayload::InlineData(_)) => 1600,
            Some(ModelPayload::ToolCallOutput(o)) => {
                approx_text_tokens(&o.output)
                    + 1600 * o.images.as_ref().map_or(0, |i| i.len() as u64)
            }
            Some(p) => p.content().map_or(0, approx_text_tokens),
            None => 0,
        })
        .sum()
}

/// The fixed part of every request: the system prompt and the tool schemas.
pub fn base_input_tokens(system_prompt: &str, tools: &[ToolDefinition]) -> u64 {
    approx_text_tokens(system_prompt)
        + tools
            .iter()
            .map(|t| approx_text_tokens(&serde_json::to_string(t).unwrap_or_default()))
            .sum::<u64>()
}

/// `effectiveMaxOutputTokens(configured, window, estimate)`:
/// `min(configured, max(window - estimate - 1024, 512))`; 0 (the provider's default) stays 0,
/// and without a usable window the configured value is used unchanged.
///
/// ```
/// use penguin_llm_providers::limits::effective_max_output_tokens;
/// assert_eq!(effective_max_output_tokens(8192, Some(32_768), 10_000), 8192);
/// assert_eq!(effective_max_output_tokens(8192, Some(32_768), 28_000), 3744);
/// assert_eq!(effective_max_output_tokens(8192, Some(32_768), 40_000), 512);
/// assert_eq!(effective_max_output_tokens(8192, None, 40_000), 8192);
/// assert_eq!(effective_max_output_tokens(0, Some(32_768), 1_000), 0);
/// ```
pub fn effective_max_output_tokens(configured: u64, window: Option<u64>, estimate: u64) -> u64 {
    match window {
        _ if configured == 0 => 0,
        Some(w) if w > 0 => {
            configured.min(w.saturating_sub(estimate).saturating_sub(1024).max(512))
        }
        _ => configured,
    }
}

/// Default cap on one streamed message
/// ([`ModelConfig::max_message_bytes`](crate::wire::ModelConfig::max_message_bytes)): 8 MiB.
///
/// Roughly two million tokens of text, far more than any model writes into one message, and
/// an eighth of the Trace's per-record limit (64 MiB), so even a message whose every byte
/// needs a six-byte JSON escape still fits in one Trace line.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// The largest [`ModelConfig::max_message_bytes`](crate::wire::ModelConfig::max_message_bytes) a
/// configuration may ask for: 32 MiB, half the Trace's per-record limit, so an ordinary message at
/// the cap is still recordable.
pub const MAX_MESSAGE_BYTES_CEILING: usize = 32 * 1024 * 1024;

/// How many capped messages' worth of content one response may hold in all: with
/// [`DEFAULT_MAX_MESSAGE_BYTES`], 32 MiB. A model that alternates short segments (text,
/// thinking, text, …) could otherwise still stream without end.
pub const RESPONSE_MESSAGES: usize = 4;

/// The largest single SSE event a response may carry for a given
/// [`ModelConfig::max_message_bytes`](crate::wire::ModelConfig::max_message_bytes): `4 ×
/// max_message_bytes + 1 MiB` (33 MiB by default).
///
/// Some events legitimately repeat a whole response (the Responses API's `response.completed`
/// and `output_item.done` carry every item's full text again, Gemini sends a call's arguments
/// in one event), so the bound is the whole response's content plus room for the envelope;
/// without it, one line that never ends would be buffered whole before any message cap could
/// see it.
pub fn max_event_bytes(max_message_bytes: usize) -> usize {
    max_message_bytes
        .saturating_mul(RESPONSE_MESSAGES)
        .saturating_add(1024 * 1024)
}

/// `n` bytes for an error message: `8 MiB`, `64 KiB`, or `1000 bytes`.
pub(crate) fn human_bytes(n: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::build;

    #[test]
    fn estimates_follow_the_reference_heuristic() {
        assert_eq!(approx_text_tokens("abcd"), 1);
        assert_eq!(approx_text_tokens("abcde"), 2);
        assert_eq!(approx_text_tokens("héé"), 3);
        let msgs = [
            build::user_text("abcdefgh"),
            build::image_url("https://x/y.png"),
        ];
        assert_eq!(approx_tokens(&msgs), 2 + 1600);
    }
}
