//! Gemini fixtures, written from the documented `streamGenerateContent?alt=sse` format.

#![cfg(all(feature = "testkit", feature = "gemini"))]

use penguin_llm_providers::gemini::GeminiDecoder;
use penguin_llm_providers::{testkit, Gemini, LlmOutcome, ToolCallIdAllocator};
use penguin_omni_protocol::{build, StopReason::Completed};
use serde_json::json;

mod common;
use common::*;

fn gemini() -> Fixtures<GeminiDecoder> {
    fixtures("gemini", GeminiDecoder::default)
}

const CALLS: &str = "thinking_function_calls.sse";

fn run_chunks(chunks: &[&[u8]], ids: ToolCallIdAllocator) -> (Vec<String>, LlmOutcome) {
    gemini().run_chunks_with("gemini", chunks, ids)
}

#[test]
fn every_fixture_passes_the_kit() {
    let replays = testkit::replay_fixtures::<Gemini>(fixture_dir("gemini"));
    assert_eq!(replays.keys().collect::<Vec<_>>(), [CALLS]);
}

#[test]
fn thinking_then_two_calls_without_ids_get_unique_ids() {
    let body = gemini().body(CALLS);
    let (got, outcome) = run_chunks(&[&body], ToolCallIdAllocator::new());
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            thinking_segment(
                &["**Checking the weather**\n\nThe user asks about two cities."],
                Completed,
                None,
            ),
            vec![
                build::tool_call(
                    "get_weather",
                    r#"{"city":"Paris"}"#,
                    "get_weather",
                    Completed,
                    fidelity(json!({"thoughtSignature": "CiQB0e2Kb1"})),
                ),
                build::tool_call(
                    "get_weather",
                    r#"{"city":"Rome"}"#,
                    "get_weather#2",
                    Completed,
                    None,
                ),
            ],
            // 120 prompt of which 100 cached; 45 thoughts + 30 response.
            usage(Tokens {
                cache_read: 100,
                uncached_prompt: 20,
                output: 75,
            }),
        ]),
    );
}

#[test]
fn the_allocator_is_session_wide() {
    let body = gemini().body(CALLS);
    let ids = ToolCallIdAllocator::new();
    run_chunks(&[&body], ids.clone());
    let (got, _) = run_chunks(&[&body], ids);
    assert!(
        got.iter()
            .any(|l| l.contains(r#""tool_call_id":"get_weather#3""#)),
        "{got:#?}"
    );
    assert!(
        got.iter()
            .any(|l| l.contains(r#""tool_call_id":"get_weather#4""#)),
        "{got:#?}"
    );
}

#[test]
fn cut_before_finish_is_malformed() {
    let body = gemini().body(CALLS);
    let text = String::from_utf8_lossy(&body).into_owned();
    // Cut at the start of the line holding the finishReason.
    let cut = text[..text.find("\"finishReason\"").unwrap()]
        .rfind("data: ")
        .unwrap();
    let (got, outcome) = run_chunks(&[&body[..cut]], ToolCallIdAllocator::new());
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            penguin_omni_protocol::StopReason::Malformed,
            "Last event must carry a finishReason: the stream ended after 3 chunk(s) without one"
        )
    );
    assert!(got.iter().all(|l| !l.contains("token_usage")));
}

#[test]
fn error_chunk_is_classified_by_its_code() {
    let body = b"data: {\"error\":{\"code\":429,\"message\":\"Resource has been exhausted (e.g. check quota).\",\"status\":\"RESOURCE_EXHAUSTED\"}}\r\n\r\n";
    let (_, outcome) = run_chunks(&[body], ToolCallIdAllocator::new());
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            penguin_omni_protocol::StopReason::Timeout,
            "Resource has been exhausted (e.g. check quota)."
        )
    );
}
