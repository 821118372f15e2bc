//! Bodies recorded from a real llama.cpp server (SmolLM2-135M-Instruct through `xllamacpp`,
//! greedy sampling) by `tests/real_server.rs` with `PENGUIN_RECORD_FIXTURES=1`, so the exact
//! bytes a real server sends are checked on every `cargo test`, server or not.
//!
//! Every recording answers "What color is the sky?" under a 24-token limit, so each is also a
//! real `length` cut-off: the text segment fails, the request completes. The `/v1/responses`
//! recording is replayed with the other Responses fixtures in `tests/openai_responses_fixtures.rs`.

use penguin_llm_providers::wire::StreamDecoder;
use penguin_llm_providers::LlmOutcome;
use proptest::prelude::*;

mod common;
use common::*;

use penguin_omni_protocol::StopReason::Failed;

/// The one recording in each protocol's fixture directory.
const RECORDING: &str = "llamacpp_smollm2_text.sse";

/// The recording in one chunk must give `expected`, and complete.
fn check_whole<D: StreamDecoder>(fixtures: &Fixtures<D>, expected: &[String]) {
    let (got, outcome) = fixtures.run(RECORDING);
    assert_eq!(outcome, LlmOutcome::completed());
    assert_eq!(got, expected);
}

/// Any split of the recording must give `expected`, and complete.
fn check_split<D: StreamDecoder>(
    fixtures: &Fixtures<D>,
    expected: &[String],
    cuts: &[proptest::sample::Index],
) -> Result<(), TestCaseError> {
    let (got, outcome) = fixtures.run_split(RECORDING, cuts);
    prop_assert_eq!(outcome, LlmOutcome::completed());
    prop_assert_eq!(got, expected);
    Ok(())
}

#[cfg(feature = "openai-chat")]
mod openai_chat {
    use super::*;
    use penguin_llm_providers::openai_chat::OpenAiChatDecoder;

    pub fn expected() -> Vec<String> {
        expect(vec![
            text_segment(&SKY, Failed),
            // prompt_tokens 29 of which 28 cached; 24 completion tokens.
            usage(28, 1, 24),
        ])
    }

    const CHAT: Fixtures<OpenAiChatDecoder> =
        Fixtures::new("openai_chat", OpenAiChatDecoder::default);

    #[test]
    fn llamacpp_text_cut_off_by_length() {
        check_whole(&CHAT, &expected());
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_messages(
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..24),
        ) {
            check_split(&CHAT, &expected(), &cuts)?;
        }
    }
}

#[cfg(feature = "anthropic-messages")]
mod anthropic_messages {
    use super::*;
    use penguin_llm_providers::anthropic_messages::AnthropicDecoder;

    pub fn expected() -> Vec<String> {
        expect(vec![
            text_segment(&SKY, Failed),
            // llama.cpp reports Anthropic-style: input_tokens 12 uncached beside
            // cache_read_input_tokens 17; output_tokens 24 from message_delta.
            usage(17, 12, 24),
        ])
    }

    const MESSAGES: Fixtures<AnthropicDecoder> =
        Fixtures::new("anthropic_messages", AnthropicDecoder::default);

    #[test]
    fn llamacpp_text_cut_off_by_max_tokens() {
        check_whole(&MESSAGES, &expected());
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_messages(
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..24),
        ) {
            check_split(&MESSAGES, &expected(), &cuts)?;
        }
    }
}
