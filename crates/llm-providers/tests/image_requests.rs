//! Each adapter's image forms, held to request fixtures (`tests/fixtures/requests/`): the
//! images of a user's input and of a tool's output (`read_image`'s `data:` URL), built by
//! `testkit::requests::image_requests`. `PENGUIN_RECORD_FIXTURES=1` rewrites the fixtures.
//!
//! The forms, from each provider's documentation:
//! - OpenAI chat: `image_url` content parts; a `tool` message is text only, so a tool's images
//!   follow in a `user` message;
//! - OpenAI responses: `input_image` parts; `function_call_output` is text only, so a tool's
//!   images follow in a `user` message;
//! - Anthropic: `image` blocks with a `base64` (or `url`) source, inside the `tool_result`
//!   for a tool's images;
//! - Gemini: `inlineData` parts (`fileData` for a URL), after the `functionResponse` for a
//!   tool's images;
//! - Ollama: base64 `images` on the message (inline images only), on the `tool` message for
//!   a tool's.

// The packaged crate has no test kit unless asked (`--features testkit`).
#![cfg(feature = "testkit")]

use penguin_llm_providers::testkit::requests::{assert_request_fixture, image_requests};
use penguin_llm_providers::wire::{ModelConfig, WireProtocol};

#[allow(unused_imports)]
mod common;

fn check<P: WireProtocol>(name: &str, protocol: P) {
    let mut config = ModelConfig::new("http://127.0.0.1:9", "m");
    config.max_output_tokens = 1024;
    // The caching fields have their own fixtures (`prompt_cache.rs`).
    config.prompt_cache = false;
    let got = image_requests(protocol, &config);
    let path = common::fixture_dir("requests").join(format!("{name}_images.json"));
    assert_request_fixture(path, &got);
}

#[cfg(feature = "openai-chat")]
#[test]
fn openai_chat_sends_image_url_parts() {
    check(
        "openai_chat",
        penguin_llm_providers::openai_chat::OpenAiChat::new(),
    );
}

#[cfg(feature = "openai-responses")]
#[test]
fn openai_responses_sends_input_image_parts() {
    check(
        "openai_responses",
        penguin_llm_providers::openai_responses::OpenAiResponses::new(),
    );
}

#[cfg(feature = "anthropic-messages")]
#[test]
fn anthropic_sends_base64_image_blocks() {
    check(
        "anthropic_messages",
        penguin_llm_providers::anthropic_messages::AnthropicMessages::new(),
    );
}

#[cfg(feature = "gemini")]
#[test]
fn gemini_sends_inline_data_parts() {
    check("gemini", penguin_llm_providers::gemini::Gemini::new());
}

#[cfg(feature = "ollama")]
#[test]
fn ollama_sends_an_images_array() {
    check("ollama", penguin_llm_providers::ollama::Ollama::new());
}
