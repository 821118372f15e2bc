//! Chat Completions fixtures: recorded-style SSE bodies in, exact OmniMessage streams out.
//!
//! Every fixture passes the test kit's generic checks (discipline, split invariance, clean
//! truncation); each expected stream is written out with the kit's builders and compared as
//! JSON without timestamps, so every key, value and message boundary is checked.

#![cfg(all(feature = "testkit", feature = "openai-chat"))]

use penguin_llm_providers::openai_chat::OpenAiChatDecoder;
use penguin_llm_providers::{testkit, LlmOutcome, OpenAiChat};
use penguin_omni_protocol::{Fidelity, StopReason};
use serde_json::json;

use StopReason::{Completed, Failed};

const FIXTURES: [&str; 5] = [
    "text_only.sse",
    "tool_calls_parallel.sse",
    "llamacpp_reasoning.sse",
    "llamacpp_tool_call.sse",
    "length_vllm_reasoning.sse",
];

mod common;
use common::*;

fn chat() -> Fixtures<OpenAiChatDecoder> {
    fixtures("openai_chat", OpenAiChatDecoder::default)
}

#[test]
fn every_fixture_passes_the_kit() {
    let replays = testkit::replay_fixtures::<OpenAiChat>(fixture_dir("openai_chat"));
    let mut names: Vec<&str> = FIXTURES.to_vec();
    names.push("llamacpp_smollm2_text.sse");
    names.sort_unstable();
    assert_eq!(
        replays.keys().map(String::as_str).collect::<Vec<_>>(),
        names
    );
}

fn reasoning_field(field: &str) -> Option<Fidelity> {
    fidelity(json!({"reasoning_field": field}))
}

#[test]
fn text_only_with_cached_prompt_tokens() {
    let (got, outcome) = chat().run("text_only.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            text_segment(
                &[
                    "Hello", "!", " How", " can", " I", " help", " you", " today", "? 👋",
                ],
                Completed,
            ),
            // prompt 1117 of which 1024 cached; 12 completion tokens.
            usage(Tokens {
                cache_read: 1024,
                uncached_prompt: 93,
                output: 12,
            }),
        ]),
    );
    assert_eq!(
        got[got.len() - 2],
        r#"{"type":"model_msg","payload":{"type":"text","role":"assistant","text":"Hello! How can I help you today? 👋","stop_reason":"completed"}}"#
    );
}

#[test]
fn two_parallel_tool_calls_keyed_by_index() {
    let (got, outcome) = chat().run("tool_calls_parallel.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    let (a, b) = (
        "call_DdmO9pD3xa9XTPNJ32zg2hcA",
        "call_ABTdPpG5ni9tY2lPn9TbVHgO",
    );
    testkit::assert_lines(
        &got,
        &expect(vec![
            tool_start(
                "get_weather",
                a,
                &["{\"lo", "cation", "\": \"Pa", "ris, F", "rance\"}"],
            ),
            // The first fragment of index 1 completes index 0, so its approval can start
            // while the second call streams; arguments are re-serialized compactly.
            tool_end(
                "get_weather",
                r#"{"location":"Paris, France"}"#,
                a,
                Completed,
            ),
            tool_start(
                "get_weather",
                b,
                &["{\"lo", "cation", "\": \"Bo", "gotá, ", "Colombia\"}"],
            ),
            // The last call is completed at finish_reason.
            tool_end(
                "get_weather",
                r#"{"location":"Bogotá, Colombia"}"#,
                b,
                Completed,
            ),
            usage(Tokens {
                uncached_prompt: 82,
                output: 51,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn llamacpp_reasoning_content_then_text() {
    let (got, outcome) = chat().run("llamacpp_reasoning.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            thinking_segment(
                &[
                    "Okay", ",", " the", " user", " asks", " for", " the", " capital", " of",
                    " France", ".",
                ],
                Completed,
                reasoning_field("reasoning_content"),
            ),
            text_segment(
                &[
                    "The", " capital", " of", " France", " is", " **", "Paris", "**.",
                ],
                Completed,
            ),
            usage(Tokens {
                uncached_prompt: 14,
                output: 27,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn llamacpp_tool_call_after_reasoning() {
    let (got, outcome) = chat().run("llamacpp_tool_call.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    let id = "Kp2xV9mQ4sT7wZ1bN6cR8dF3hJ5lY0aE";
    testkit::assert_lines(
        &got,
        &expect(vec![
            thinking_segment(
                &["I", " should", " list", " the", " files", "."],
                Completed,
                reasoning_field("reasoning_content"),
            ),
            tool_start("list_files", id, &["{\"path\":", "\".\"}"]),
            tool_end("list_files", r#"{"path":"."}"#, id, Completed),
            usage(Tokens {
                uncached_prompt: 388,
                output: 31,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn length_finish_fails_the_segment_but_the_request_completes() {
    let (got, outcome) = chat().run("length_vllm_reasoning.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            thinking_segment(
                &["Count", "ing", " slowly"],
                Completed,
                reasoning_field("reasoning"),
            ),
            text_segment(&["1, 2, 3", ", 4, 5", ", 6"], Failed),
            // 16 completion tokens of which 9 reasoning: output stays 16.
            usage(Tokens {
                uncached_prompt: 20,
                output: 16,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn truncating_any_fixture_before_its_finish_is_malformed_and_closes_everything() {
    for name in FIXTURES {
        let cut = chat().cut_before(name, "\"finish_reason\":\"");
        assert_eq!(cut.outcome.status, StopReason::Malformed, "{name}");
        assert!(
            cut.outcome
                .error_message
                .as_deref()
                .unwrap()
                .starts_with("Last event must carry a finish_reason"),
            "{name}: {:?}",
            cut.outcome
        );
    }
}
