//! Ollama `/api/chat` fixtures (hand-made from the documented NDJSON format, see
//! `tests/fixtures/ollama/README.md`): every body through the test kit, then each replay
//! compared with its exact expected stream.

#![cfg(all(feature = "testkit", feature = "ollama"))]

use std::sync::OnceLock;

use penguin_llm_providers::testkit::{self, Replay, Replays};
use penguin_llm_providers::{LlmOutcome, Ollama, ToolCallIdAllocator};
use penguin_omni_protocol::StopReason::{Completed, Failed, Malformed};

mod common;
use common::*;

/// Every fixture, replayed once through the kit's checks (discipline, split invariance,
/// clean truncation).
fn replays() -> &'static Replays {
    static REPLAYS: OnceLock<Replays> = OnceLock::new();
    REPLAYS.get_or_init(|| testkit::replay_fixtures::<Ollama>(fixture_dir("ollama")))
}

fn replay(name: &str) -> &'static Replay {
    &replays()[name]
}

#[test]
fn the_kit_saw_every_fixture() {
    assert_eq!(
        replays().keys().collect::<Vec<_>>(),
        [
            "cut_off.ndjson",
            "error_mid_stream.ndjson",
            "length.ndjson",
            "text_only.ndjson",
            "thinking_text.ndjson",
            "thinking_tool_calls.ndjson",
        ]
    );
}

#[test]
fn text_only() {
    let r = replay("text_only.ndjson");
    assert_eq!(r.outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &r.lines(),
        &expect(vec![
            text_segment(
                &["Hello", "!", " How", " are", " you", " today", "?", " 👋"],
                Completed,
            ),
            // prompt_eval_count 26, eval_count 8; Ollama reports no cached tokens.
            usage(Tokens {
                uncached_prompt: 26,
                output: 8,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn thinking_then_text() {
    let r = replay("thinking_text.ndjson");
    assert_eq!(r.outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &r.lines(),
        &expect(vec![
            thinking_segment(
                &[
                    "Okay", ",", " the", " user", " asks", " for", " 17", " ×", " 23", ".", " 17",
                    " ×", " 20", " =", " 340", ",", " plus", " 51", ".",
                ],
                Completed,
                None,
            ),
            text_segment(
                &["17", " ×", " 23", " =", " **", "391", "**", "."],
                Completed,
            ),
            usage(Tokens {
                uncached_prompt: 18,
                output: 31,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn thinking_then_two_whole_calls_without_ids_get_unique_ids() {
    let r = replay("thinking_tool_calls.ndjson");
    assert_eq!(r.outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &r.lines(),
        &expect(vec![
            thinking_segment(
                &[
                    "The", " user", " wants", " New", " York", " and", " London", ".",
                ],
                Completed,
                None,
            ),
            // Each call arrives whole: no fragments, the complete message at once.
            whole_tool_call(
                "get_temperature",
                r#"{"city":"New York"}"#,
                "get_temperature",
                Completed,
                None,
            ),
            whole_tool_call(
                "get_temperature",
                r#"{"city":"London"}"#,
                "get_temperature#2",
                Completed,
                None,
            ),
            usage(Tokens {
                uncached_prompt: 122,
                output: 33,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn the_allocator_is_session_wide() {
    let fixtures = fixtures(
        "ollama",
        penguin_llm_providers::ollama::OllamaDecoder::default,
    );
    let body = fixtures.body("thinking_tool_calls.ndjson");
    let ids = ToolCallIdAllocator::new();
    fixtures.run_chunks_with("first", &[&body], ids.clone());
    let (got, _) = fixtures.run_chunks_with("second", &[&body], ids);
    for id in ["get_temperature#3", "get_temperature#4"] {
        assert!(
            got.iter()
                .any(|l| l.contains(&format!(r#""tool_call_id":"{id}""#))),
            "{got:#?}"
        );
    }
}

#[test]
fn a_length_finish_fails_the_segment_but_the_request_completes() {
    let r = replay("length.ndjson");
    assert_eq!(r.outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &r.lines(),
        &expect(vec![
            text_segment(&["Once", " upon", " a", " time"], Failed),
            usage(Tokens {
                uncached_prompt: 12,
                output: 4,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn an_error_mid_stream_is_classified_and_closes_the_text() {
    let r = replay("error_mid_stream.ndjson");
    assert_eq!(
        r.outcome,
        LlmOutcome::with_message(Failed, "an error was encountered while running the model")
    );
    testkit::assert_lines(
        &r.lines(),
        &expect(vec![text_segment(&[" Yes", "."], Failed)]),
    );
}

#[test]
fn a_stream_without_its_final_object_is_malformed() {
    let r = replay("cut_off.ndjson");
    assert_eq!(
        r.outcome,
        LlmOutcome::with_message(
            Malformed,
            "Last event must carry \"done\": true: the stream ended after 3 line(s) without it"
        )
    );
    testkit::assert_lines(
        &r.lines(),
        &expect(vec![text_segment(&["The", " sky", " is"], Malformed)]),
    );
}

#[test]
fn cutting_a_complete_body_before_done_is_malformed() {
    let fixtures = fixtures(
        "ollama",
        penguin_llm_providers::ollama::OllamaDecoder::default,
    );
    for name in [
        "text_only.ndjson",
        "thinking_text.ndjson",
        "thinking_tool_calls.ndjson",
        "length.ndjson",
    ] {
        let cut = fixtures.cut_before(name, "\"done\":true");
        assert_eq!(cut.outcome.status, Malformed, "{name}");
    }
}
