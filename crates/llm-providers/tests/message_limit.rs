//! `max_message_bytes` holds for every adapter and every kind of growing content: each
//! protocol's own events for text, thinking and tool call arguments, streamed past a small cap,
//! end the response with the permanent `failed` refusal naming the limit, and every segment
//! closes holding only what was streamed, never more than the cap. The cap lives in the shared
//! translator, so this checks that each decoder's items reach it fragment by fragment and that
//! a call sent whole (Gemini) is measured too. The HTTP side (reading stops, the SSE event
//! bound) is in `http_faults.rs`.

#![cfg(any(
    feature = "openai-chat",
    feature = "anthropic-messages",
    feature = "gemini",
    feature = "openai-responses"
))]

use penguin_llm_providers::testing::{check_discipline, describe_all, replay_limited};
use penguin_llm_providers::wire::StreamDecoder;
use penguin_llm_providers::{LlmOutcome, ToolCallIdAllocator};
use serde_json::{json, Value};

/// The cap of these tests.
const CAP: usize = 1024;

/// One fragment's text: 100 bytes, so the 11th crosses the cap.
fn piece() -> String {
    "z".repeat(100)
}

/// `events` as SSE, each event its own chunk (with its `event:` name when given).
fn sse(events: &[(Option<&str>, Value)]) -> Vec<Vec<u8>> {
    events
        .iter()
        .map(|(name, data)| {
            let head = name.map(|n| format!("event: {n}\n")).unwrap_or_default();
            format!("{head}data: {data}\n\n").into_bytes()
        })
        .collect()
}

/// Replays `chunks` under [`CAP`] and checks the refusal: its text names `what`, nothing past
/// the cap was streamed, and the closing complete message (of `complete` type) holds exactly
/// the streamed fragments.
fn assert_refused<D: StreamDecoder>(decoder: D, chunks: Vec<Vec<u8>>, what: &str, complete: &str) {
    let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let (msgs, outcome) = replay_limited(decoder, &refs, ToolCallIdAllocator::new(), CAP);
    check_discipline(&msgs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        outcome,
        LlmOutcome::permanent_failure(format!(
            "model output too large: {what} passed max_message_bytes (1 KiB); the rest of the response was not read"
        )),
    );
    let got = describe_all(&msgs);
    let streamed: usize = got
        .iter()
        .filter(|m| m.contains("/delta \"z"))
        .map(|m| m.matches('z').count())
        .sum();
    assert!(
        streamed <= CAP && streamed > CAP - 100,
        "{what}: {streamed} bytes streamed"
    );
    let last = got.last().unwrap();
    assert!(
        last.starts_with(&format!("{complete} ")) && last.ends_with(" failed"),
        "{what}: {last:.120}"
    );
    assert!(!got.iter().any(|m| m.starts_with("token_usage")));
}

#[cfg(feature = "openai-chat")]
mod openai_chat {
    use super::*;
    use penguin_llm_providers::openai_chat::OpenAiChatDecoder;

    fn delta(d: Value) -> (Option<&'static str>, Value) {
        (
            None,
            json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]}),
        )
    }

    fn body(first: Option<Value>, each: Value) -> Vec<Vec<u8>> {
        let mut events: Vec<_> = first.into_iter().map(delta).collect();
        events.extend((0..20).map(|_| delta(each.clone())));
        events.push((
            None,
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ));
        sse(&events)
    }

    #[test]
    fn text_thinking_and_arguments_are_capped() {
        let p = piece();
        assert_refused(
            OpenAiChatDecoder::default(),
            body(None, json!({"content": p})),
            "a text message",
            "text",
        );
        assert_refused(
            OpenAiChatDecoder::default(),
            body(None, json!({"reasoning_content": p})),
            "a thinking message",
            "thinking",
        );
        let call = |args: &str, first: bool| {
            let mut c = json!({"index": 0, "type": "function", "function": {"arguments": args}});
            if first {
                c["id"] = json!("call_1");
                c["function"]["name"] = json!("write");
            }
            json!({"tool_calls": [c]})
        };
        assert_refused(
            OpenAiChatDecoder::default(),
            body(Some(call("", true)), call(&p, false)),
            "the arguments of tool call call_1 (write)",
            "tool_call",
        );
    }
}

#[cfg(feature = "anthropic-messages")]
mod anthropic_messages {
    use super::*;
    use penguin_llm_providers::anthropic_messages::AnthropicDecoder;

    fn body(block: Value, delta: Value) -> Vec<Vec<u8>> {
        let mut events = vec![
            (
                Some("message_start"),
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 1}}}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": block}),
            ),
        ];
        events.extend((0..20).map(|_| {
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            )
        }));
        events.push((Some("message_stop"), json!({"type": "message_stop"})));
        sse(&events)
    }

    #[test]
    fn text_thinking_and_arguments_are_capped() {
        let p = piece();
        assert_refused(
            AnthropicDecoder::default(),
            body(
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": p}),
            ),
            "a text message",
            "text",
        );
        assert_refused(
            AnthropicDecoder::default(),
            body(
                json!({"type": "thinking", "thinking": ""}),
                json!({"type": "thinking_delta", "thinking": p}),
            ),
            "a thinking message",
            "thinking",
        );
        assert_refused(
            AnthropicDecoder::default(),
            body(
                json!({"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}}),
                json!({"type": "input_json_delta", "partial_json": p}),
            ),
            "the arguments of tool call toolu_1 (write)",
            "tool_call",
        );
    }
}

#[cfg(feature = "gemini")]
mod gemini {
    use super::*;
    use penguin_llm_providers::gemini::GeminiDecoder;

    fn chunk(part: Value) -> (Option<&'static str>, Value) {
        (
            None,
            json!({"candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}]}),
        )
    }

    fn body(part: Value) -> Vec<Vec<u8>> {
        let mut events: Vec<_> = (0..20).map(|_| chunk(part.clone())).collect();
        events.push((
            None,
            json!({"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "index": 0, "finishReason": "STOP"}]}),
        ));
        sse(&events)
    }

    #[test]
    fn text_thinking_and_whole_calls_are_capped() {
        let p = piece();
        assert_refused(
            GeminiDecoder::default(),
            body(json!({"text": p})),
            "a text message",
            "text",
        );
        assert_refused(
            GeminiDecoder::default(),
            body(json!({"text": p, "thought": true})),
            "a thinking message",
            "thinking",
        );
        // Gemini sends a call whole: it is measured as one piece and closed undispatched.
        let chunks = sse(&[chunk(
            json!({"functionCall": {"name": "write", "args": {"content": "z".repeat(2 * CAP)}}}),
        )]);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let (msgs, outcome) = replay_limited(
            GeminiDecoder::default(),
            &refs,
            ToolCallIdAllocator::new(),
            CAP,
        );
        check_discipline(&msgs).unwrap();
        assert_eq!(
            outcome,
            LlmOutcome::permanent_failure(
                "model output too large: the arguments of tool call write (write) passed max_message_bytes (1 KiB); the rest of the response was not read"
            )
        );
        assert_eq!(describe_all(&msgs), ["tool_call write(write)  failed"]);
    }
}

#[cfg(feature = "openai-responses")]
mod openai_responses {
    use super::*;
    use penguin_llm_providers::openai_responses::OpenAiResponsesDecoder;

    fn body(item: Value, kind: &str) -> Vec<Vec<u8>> {
        let mut events = vec![(
            Some("response.output_item.added"),
            json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        )];
        events.extend((0..20).map(|_| {
            (
                None,
                json!({"type": kind, "item_id": "it_1", "output_index": 0, "delta": piece()}),
            )
        }));
        events.push((
            None,
            json!({"type": "response.completed", "response": {"output": []}}),
        ));
        sse(&events)
    }

    #[test]
    fn text_thinking_and_arguments_are_capped() {
        assert_refused(
            OpenAiResponsesDecoder::default(),
            body(
                json!({"id": "it_1", "type": "message"}),
                "response.output_text.delta",
            ),
            "a text message",
            "text",
        );
        assert_refused(
            OpenAiResponsesDecoder::default(),
            body(
                json!({"id": "it_1", "type": "reasoning"}),
                "response.reasoning_summary_text.delta",
            ),
            "a thinking message",
            "thinking",
        );
        assert_refused(
            OpenAiResponsesDecoder::default(),
            body(
                json!({"id": "it_1", "type": "function_call", "call_id": "call_9", "name": "write", "arguments": ""}),
                "response.function_call_arguments.delta",
            ),
            "the arguments of tool call call_9 (write)",
            "tool_call",
        );
    }
}
