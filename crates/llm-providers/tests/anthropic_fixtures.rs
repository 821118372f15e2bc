//! Anthropic Messages fixtures, written from the documented streaming format: exact
//! OmniMessage streams, outcomes, and split invariance.

#![cfg(all(feature = "testkit", feature = "anthropic-messages"))]

use penguin_llm_providers::anthropic_messages::AnthropicDecoder;
use penguin_llm_providers::{testkit, AnthropicMessages, LlmOutcome};
use penguin_omni_protocol::StopReason::{self, Completed, Failed, Timeout};
use serde_json::json;

mod common;
use common::*;

const FIXTURES: [&str; 4] = [
    "text_only.sse",
    "thinking_tool_use.sse",
    "max_tokens.sse",
    "overloaded_error.sse",
];

fn messages() -> Fixtures<AnthropicDecoder> {
    fixtures("anthropic_messages", AnthropicDecoder::default)
}

#[test]
fn every_fixture_passes_the_kit() {
    let replays = testkit::replay_fixtures::<AnthropicMessages>(fixture_dir("anthropic_messages"));
    let mut names: Vec<&str> = FIXTURES.to_vec();
    names.push("llamacpp_smollm2_text.sse");
    names.sort_unstable();
    assert_eq!(
        replays.keys().map(String::as_str).collect::<Vec<_>>(),
        names
    );
}

#[test]
fn text_only() {
    let (got, outcome) = messages().run("text_only.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            text_segment(&["Hello", "!", " How can I", " help?"], Completed),
            usage(Tokens {
                uncached_prompt: 25,
                output: 15,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn signed_thinking_text_and_tool_use() {
    let (got, outcome) = messages().run("thinking_tool_use.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    let id = "toolu_01T1x1fJ34qAmk2tNTrN7Up6";
    testkit::assert_lines(
        &got,
        &expect(vec![
            // The signature item closes the block and lands in its fidelity.
            thinking_segment(
                &[
                    "The user wants",
                    " the weather in Paris.",
                    " I'll call get_weather.",
                ],
                Completed,
                fidelity(
                    json!({"signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}),
                ),
            ),
            text_segment(&["Let me check the weather."], Completed),
            // The empty first input_json_delta yields no delta fragment.
            tool_start(
                "get_weather",
                id,
                &[
                    "{\"location\":",
                    " \"Paris, Fr",
                    "ance\", \"unit\": \"c",
                    "elsius\"}",
                ],
            ),
            tool_end(
                "get_weather",
                r#"{"location":"Paris, France","unit":"celsius"}"#,
                id,
                Completed,
            ),
            // 2048 cache reads; 472 input + 1200 cache writes uncached; 89 output.
            usage(Tokens {
                cache_read: 2048,
                uncached_prompt: 1672,
                output: 89,
            }),
        ]),
    );
}

#[test]
fn max_tokens_fails_the_segment_but_completes() {
    let (got, outcome) = messages().run("max_tokens.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            text_segment(&["Once upon", " a time"], Failed),
            usage(Tokens {
                uncached_prompt: 25,
                output: 4,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn overloaded_error_event_is_a_timeout_that_closes_the_text() {
    let (got, outcome) = messages().run("overloaded_error.sse");
    assert_eq!(outcome, LlmOutcome::with_message(Timeout, "Overloaded"));
    testkit::assert_lines(&got, &expect(vec![text_segment(&["Partial"], Timeout)]));
}

#[test]
fn cut_before_message_stop_is_malformed() {
    let cut = messages().cut_before("thinking_tool_use.sse", "event: message_delta");
    assert_eq!(cut.outcome.status, StopReason::Malformed);
    assert_eq!(
        cut.outcome.error_message.as_deref(),
        Some("Last event must carry the end of the message: the stream ended after 17 event(s) without message_stop")
    );
}
