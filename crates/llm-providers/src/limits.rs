//! Output-token clamping (§6.6): never ask for more output than the context window has room
//! for after the input.

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
