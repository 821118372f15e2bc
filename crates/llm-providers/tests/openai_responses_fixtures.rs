//! Responses API fixtures: bodies written from OpenAI's streaming-events reference (event
//! names, field names and item shapes as documented, ids shortened), plus one recorded from
//! llama.cpp's `/v1/responses`. Each expected stream is written out with the protocol's
//! builders and compared as JSON without timestamps.

#![cfg(all(feature = "testkit", feature = "openai-responses"))]

use penguin_llm_providers::openai_responses::{OpenAiResponsesDecoder, REASONING_ITEM};
use penguin_llm_providers::{testkit, LlmOutcome, OpenAiResponses};
use penguin_omni_protocol::{build, OmniMessage, StopReason, StreamEventType};
use serde_json::json;

use StopReason::{Completed, Failed, Malformed, Timeout};
use StreamEventType::{Delta, Start, Stop};

mod common;
use common::*;

const FIXTURES: [&str; 7] = [
    "reasoning_summary_text.sse",
    "encrypted_reasoning_function_call.sse",
    "incomplete_max_output_tokens.sse",
    "failed_server_error.sse",
    "error_rate_limit.sse",
    "cut_off.sse",
    "llamacpp_smollm2_text.sse",
];

fn responses() -> Fixtures<OpenAiResponsesDecoder> {
    fixtures("openai_responses", OpenAiResponsesDecoder::default)
}

#[test]
fn every_fixture_passes_the_kit() {
    let replays = testkit::replay_fixtures::<OpenAiResponses>(fixture_dir("openai_responses"));
    let mut names: Vec<&str> = FIXTURES.to_vec();
    names.sort_unstable();
    assert_eq!(
        replays.keys().map(String::as_str).collect::<Vec<_>>(),
        names
    );
}

/// A text segment whose complete message carries `phase` fidelity.
fn phased_text(deltas: &[&str], phase: &str) -> Vec<OmniMessage> {
    let mut v = vec![build::partial_text(Start, "", Completed)];
    v.extend(
        deltas
            .iter()
            .map(|d| build::partial_text(Delta, *d, Completed)),
    );
    v.push(build::partial_text(Stop, "", Completed));
    v.push(build::assistant_text_with(
        deltas.concat(),
        Completed,
        fidelity(json!({"phase": phase})),
    ));
    v
}

#[test]
fn reasoning_summary_then_phased_text() {
    let (got, outcome) = responses().run("reasoning_summary_text.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    // The reasoning item comes back whole, encrypted content included, for the next request.
    let item = json!({"id": "rs_68af01", "type": "reasoning", "encrypted_content": "gAAAAABoqENC-enc",
        "summary": [{"type": "summary_text", "text": "**Planning** the answer."}]});
    testkit::assert_lines(
        &got,
        &expect(vec![
            thinking_segment(
                &["**Planning**", " the answer."],
                Completed,
                fidelity(json!({REASONING_ITEM: item})),
            ),
            phased_text(&["Paris", " is the", " capital."], "final_answer"),
            // input 120 of which 64 cached; output 80 of which 48 reasoning.
            usage(Tokens {
                cache_read: 64,
                uncached_prompt: 56,
                output: 80,
            }),
        ]),
    );
}

#[test]
fn encrypted_reasoning_without_text_is_kept_then_a_function_call() {
    let (got, outcome) = responses().run("encrypted_reasoning_function_call.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    let id = "call_Xy12";
    let reasoning = json!({"id": "rs_77", "type": "reasoning", "encrypted_content": "gAAAAABenc2", "summary": []});
    testkit::assert_lines(
        &got,
        &expect(vec![
            // No visible reasoning: no fragments, but the complete message keeps the item.
            vec![build::thinking(
                "",
                Completed,
                fidelity(json!({REASONING_ITEM: reasoning})),
            )],
            tool_start(
                "get_weather",
                id,
                &["{\"location\":", "\"Paris,", " France\"}"],
            ),
            vec![
                build::partial_tool_call(Stop, "", "", id, Completed),
                build::tool_call(
                    "get_weather",
                    r#"{"location":"Paris, France"}"#,
                    id,
                    Completed,
                    fidelity(json!({"item_id": "fc_78"})),
                ),
            ],
            usage(Tokens {
                uncached_prompt: 300,
                output: 90,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn incomplete_for_max_output_tokens_fails_the_segment_but_completes() {
    let (got, outcome) = responses().run("incomplete_max_output_tokens.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            text_segment(&["Once upon", " a time"], Failed),
            usage(Tokens {
                uncached_prompt: 10,
                output: 4,
                ..Tokens::default()
            }),
        ]),
    );
}

#[test]
fn response_failed_is_classified_and_closes_the_segment() {
    let (got, outcome) = responses().run("failed_server_error.sse");
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            Timeout,
            "The server had an error while processing your request."
        )
    );
    testkit::assert_lines(&got, &expect(vec![text_segment(&["Hel"], Timeout)]));
}

#[test]
fn error_event_is_a_provider_error() {
    let (got, outcome) = responses().run("error_rate_limit.sse");
    assert_eq!(
        outcome,
        LlmOutcome::with_message(Timeout, "Rate limit reached for gpt-5")
    );
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn cut_off_stream_is_malformed() {
    let (got, outcome) = responses().run("cut_off.sse");
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            Malformed,
            "Last event must carry the response's end: the stream ended after 3 event(s) without response.completed"
        )
    );
    testkit::assert_lines(&got, &expect(vec![text_segment(&["Partial"], Malformed)]));
}

#[test]
fn llamacpp_recorded_text() {
    let (got, outcome) = responses().run("llamacpp_smollm2_text.sse");
    assert_eq!(outcome, LlmOutcome::completed());
    testkit::assert_lines(
        &got,
        &expect(vec![
            // llama.cpp ends a max_output_tokens cut-off with response.completed, so unlike
            // OpenAI (response.incomplete) the segment completes.
            text_segment(&SKY, Completed),
            // input 29 of which 28 cached.
            usage(Tokens {
                cache_read: 28,
                uncached_prompt: 1,
                output: 24,
            }),
        ]),
    );
}
