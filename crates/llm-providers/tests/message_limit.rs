//! `max_message_bytes` holds for every adapter and every kind of growing content: each
//! protocol's own events for text, thinking and tool call arguments, streamed past a small cap,
//! end the response with the permanent `failed` refusal naming the limit, and every segment
//! closes holding only what was streamed, never more than the cap. The cap lives in the shared
//! translator, so this checks that each decoder's items reach it fragment by fragment and that
//! a call sent whole (Gemini, Ollama) is measured too. The HTTP side (reading stops, the SSE
//! event and NDJSON line bounds) is in `fault_suite.rs` and `http_faults.rs`.

#![cfg(all(
    feature = "testkit",
    any(
        feature = "openai-chat",
        feature = "anthropic-messages",
        feature = "gemini",
        feature = "openai-responses",
        feature = "ollama"
    )
))]

use penguin_llm_providers::testkit;
use penguin_llm_providers::wire::StreamDecoder;
use serde_json::{json, Value};

/// The cap of these tests.
const CAP: usize = 1024;

/// One fragment's text: 100 bytes, so the 11th crosses the cap.
fn piece() -> String {
    "z".repeat(100)
}

/// `events` as SSE, each event its own chunk (with its `event:` name when given).
#[cfg(any(
    feature = "openai-chat",
    feature = "anthropic-messages",
    feature = "gemini",
    feature = "openai-responses"
))]
fn sse(events: &[(Option<&str>, Value)]) -> Vec<Vec<u8>> {
    events
        .iter()
        .map(|(name, data)| {
            let head = name.map(|n| format!("event: {n}\n")).unwrap_or_default();
            format!("{head}data: {data}\n\n").into_bytes()
        })
        .collect()
}

/// Replays `chunks` under [`CAP`] and checks the refusal with the kit
/// ([`testkit::assert_message_cap`]: the text names `what`, nothing past the cap was streamed,
/// the closing complete message is of `complete` type), and that the refusal came at the
/// fragment crossing the cap, not earlier.
fn assert_refused<D: StreamDecoder>(decoder: D, chunks: Vec<Vec<u8>>, what: &str, complete: &str) {
    let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let replay = testkit::assert_message_cap(decoder, &refs, CAP, what, complete);
    let streamed = replay.streamed_bytes();
    assert!(
        streamed <= CAP && streamed > CAP - 100,
        "{what}: {streamed} bytes streamed"
    );
}

/// A tool call sent whole, its arguments past the cap: measured as one piece, refused, and
/// closed undispatched with nothing streamed.
#[cfg(any(feature = "gemini", feature = "ollama"))]
fn assert_whole_call_refused<D: StreamDecoder>(decoder: D, chunks: Vec<Vec<u8>>, id: &str) {
    let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let replay = testkit::assert_message_cap(
        decoder,
        &refs,
        CAP,
        &format!("the arguments of tool call {id} (write)"),
        "tool_call",
    );
    assert_eq!(
        replay.described(),
        [format!("tool_call write({id})  failed")]
    );
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
        assert_whole_call_refused(
            GeminiDecoder::default(),
            sse(&[chunk(
                json!({"functionCall": {"name": "write", "args": {"content": "z".repeat(2 * CAP)}}}),
            )]),
            "write",
        );
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

#[cfg(feature = "ollama")]
mod ollama {
    use super::*;
    use penguin_llm_providers::ollama::OllamaDecoder;

    /// `objects` as NDJSON, each line its own chunk.
    fn ndjson(objects: &[Value]) -> Vec<Vec<u8>> {
        objects
            .iter()
            .map(|o| format!("{o}\n").into_bytes())
            .collect()
    }

    fn body(message: Value) -> Vec<Vec<u8>> {
        let mut objects: Vec<Value> = (0..20)
            .map(|_| json!({"model": "qwen3", "message": message, "done": false}))
            .collect();
        objects.push(json!({"model": "qwen3", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop"}));
        ndjson(&objects)
    }

    #[test]
    fn text_thinking_and_whole_calls_are_capped() {
        let p = piece();
        assert_refused(
            OllamaDecoder::default(),
            body(json!({"role": "assistant", "content": p})),
            "a text message",
            "text",
        );
        assert_refused(
            OllamaDecoder::default(),
            body(json!({"role": "assistant", "content": "", "thinking": p})),
            "a thinking message",
            "thinking",
        );
        // Ollama sends a call whole, its arguments an object.
        assert_whole_call_refused(
            OllamaDecoder::default(),
            ndjson(&[
                json!({"model": "qwen3", "message": {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "write", "arguments": {"content": "z".repeat(2 * CAP)}}}
            ]}, "done": false}),
            ]),
            "write",
        );
    }
}
