//! Bodies recorded from a real llama.cpp server (SmolLM2-135M-Instruct through `xllamacpp`,
//! greedy sampling) by `tests/real_server.rs` with `PENGUIN_RECORD_FIXTURES=1`, so the exact
//! bytes a real server sends are checked on every `cargo test`, server or not.
//!
//! Every recording answers "What color is the sky?" under a 24-token limit, so each is also a
//! real `length` cut-off: the text segment fails, the request completes. The `/v1/responses`
//! recording is replayed with the other Responses fixtures in `tests/openai_responses_fixtures.rs`.

// The packaged crate has no test kit unless asked (`--features testkit`).
#![cfg(feature = "testkit")]

use penguin_llm_providers::wire::StreamDecoder;
use penguin_llm_providers::LlmOutcome;

mod common;
use common::*;

use penguin_omni_protocol::StopReason::Failed;

/// The one recording in each protocol's fixture directory.
const RECORDING: &str = "llamacpp_smollm2_text.sse";

/// The recording must give `expected` and complete, whole and however it is split (the
/// kit's split invariance and clean truncation).
fn check<D: StreamDecoder>(fixtures: &Fixtures<D>, expected: &[String]) {
    let replay = fixtures.check(RECORDING);
    assert_eq!(replay.outcome, LlmOutcome::completed());
    replay.assert_lines(expected);
}

#[cfg(feature = "openai-chat")]
#[test]
fn openai_chat_text_cut_off_by_length() {
    use penguin_llm_providers::openai_chat::OpenAiChatDecoder;
    check(
        &fixtures("openai_chat", OpenAiChatDecoder::default),
        &expect(vec![
            text_segment(&SKY, Failed),
            // prompt_tokens 29 of which 28 cached; 24 completion tokens.
            usage(Tokens {
                cache_read: 28,
                uncached_prompt: 1,
                output: 24,
            }),
        ]),
    );
}

#[cfg(feature = "anthropic-messages")]
#[test]
fn anthropic_messages_text_cut_off_by_max_tokens() {
    use penguin_llm_providers::anthropic_messages::AnthropicDecoder;
    check(
        &fixtures("anthropic_messages", AnthropicDecoder::default),
        &expect(vec![
            text_segment(&SKY, Failed),
            // llama.cpp reports Anthropic-style: input_tokens 12 uncached beside
            // cache_read_input_tokens 17; output_tokens 24 from message_delta.
            usage(Tokens {
                cache_read: 17,
                uncached_prompt: 12,
                output: 24,
            }),
        ]),
    );
}
