//! The test kit's fault suite ([`FaultSuite`]) against every adapter inside the real
//! `HttpModel`: dropped connections, HTTP errors, stalls, cut streams, error events,
//! interrupts, a runaway message, a line that never ends (the SSE event bound, the NDJSON line
//! bound), a huge error body. Each adapter only says how its wire opens a text block, adds
//! text, finishes, and reports an error ([`WireScript`]).

#![cfg(all(feature = "testkit", feature = "http"))]

use penguin_llm_providers::testkit::faults::{FaultSuite, WireScript};
use serde_json::{json, Value};

/// One SSE event, with its `event:` name when given.
#[cfg(any(
    feature = "openai-chat",
    feature = "anthropic-messages",
    feature = "gemini",
    feature = "openai-responses"
))]
fn sse(name: Option<&str>, data: Value) -> Vec<u8> {
    let head = name.map(|n| format!("event: {n}\n")).unwrap_or_default();
    format!("{head}data: {data}\n\n").into_bytes()
}

#[cfg(feature = "openai-chat")]
mod openai_chat {
    use super::*;
    use penguin_llm_providers::OpenAiChat;

    #[derive(Debug)]
    struct Chat;

    impl WireScript for Chat {
        fn text_delta(&self, text: &str) -> Vec<u8> {
            sse(
                None,
                json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
            )
        }
        fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8> {
            let mut bytes = sse(
                None,
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens}}),
            );
            bytes.extend_from_slice(b"data: [DONE]\n\n");
            bytes
        }
        fn unterminated(&self) -> Vec<u8> {
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec()
        }
        fn error_event(&self, message: &str) -> Option<Vec<u8>> {
            Some(sse(
                None,
                json!({"error": {"message": message, "type": null, "code": null}}),
            ))
        }
    }

    #[tokio::test]
    async fn the_fault_suite() {
        FaultSuite::new(OpenAiChat::new, Chat).run_all().await;
    }
}

#[cfg(feature = "anthropic-messages")]
mod anthropic_messages {
    use super::*;
    use penguin_llm_providers::AnthropicMessages;

    #[derive(Debug)]
    struct Messages;

    impl WireScript for Messages {
        fn text_start(&self) -> Vec<u8> {
            let mut bytes = sse(
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 0, "output_tokens": 1}}}),
            );
            bytes.extend(sse(
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
            bytes
        }
        fn text_delta(&self, text: &str) -> Vec<u8> {
            sse(
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            )
        }
        fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8> {
            let mut bytes = sse(
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            );
            bytes.extend(sse(
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens}}),
            ));
            bytes.extend(sse(Some("message_stop"), json!({"type": "message_stop"})));
            bytes
        }
        fn unterminated(&self) -> Vec<u8> {
            let mut bytes = self.text_start();
            bytes.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"");
            bytes
        }
        fn error_event(&self, message: &str) -> Option<Vec<u8>> {
            Some(sse(
                Some("error"),
                json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            ))
        }
    }

    #[tokio::test]
    async fn the_fault_suite() {
        FaultSuite::new(AnthropicMessages::new, Messages)
            .run_all()
            .await;
    }
}

#[cfg(feature = "gemini")]
mod gemini {
    use super::*;
    use penguin_llm_providers::Gemini;

    #[derive(Debug)]
    struct Stream;

    impl WireScript for Stream {
        fn text_delta(&self, text: &str) -> Vec<u8> {
            sse(
                None,
                json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}]}),
            )
        }
        fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8> {
            sse(
                None,
                json!({"candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output_tokens,
                        "totalTokenCount": prompt_tokens + output_tokens}}),
            )
        }
        fn unterminated(&self) -> Vec<u8> {
            b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"".to_vec()
        }
        fn error_event(&self, message: &str) -> Option<Vec<u8>> {
            Some(sse(
                None,
                json!({"error": {"code": 503, "message": message, "status": "UNAVAILABLE"}}),
            ))
        }
    }

    #[tokio::test]
    async fn the_fault_suite() {
        FaultSuite::new(Gemini::new, Stream).run_all().await;
    }
}

#[cfg(feature = "openai-responses")]
mod openai_responses {
    use super::*;
    use penguin_llm_providers::OpenAiResponses;

    #[derive(Debug)]
    struct Responses;

    impl WireScript for Responses {
        fn text_start(&self) -> Vec<u8> {
            sse(
                Some("response.output_item.added"),
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
            )
        }
        fn text_delta(&self, text: &str) -> Vec<u8> {
            sse(
                Some("response.output_text.delta"),
                json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text}),
            )
        }
        fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8> {
            sse(
                Some("response.completed"),
                json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [],
                    "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens,
                        "total_tokens": prompt_tokens + output_tokens}}}),
            )
        }
        fn unterminated(&self) -> Vec<u8> {
            let mut bytes = self.text_start();
            bytes.extend_from_slice(b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"");
            bytes
        }
        fn error_event(&self, message: &str) -> Option<Vec<u8>> {
            Some(sse(
                Some("error"),
                json!({"type": "error", "code": null, "message": message, "param": null}),
            ))
        }
    }

    #[tokio::test]
    async fn the_fault_suite() {
        FaultSuite::new(OpenAiResponses::new, Responses)
            .run_all()
            .await;
    }
}

#[cfg(feature = "ollama")]
mod ollama {
    use super::*;
    use penguin_llm_providers::Ollama;

    #[derive(Debug)]
    struct Chat;

    /// One NDJSON line.
    fn line(object: Value) -> Vec<u8> {
        format!("{object}\n").into_bytes()
    }

    impl WireScript for Chat {
        fn content_type(&self) -> &'static str {
            "application/x-ndjson"
        }
        fn text_delta(&self, text: &str) -> Vec<u8> {
            line(
                json!({"model": "test-model", "created_at": "2025-10-26T17:15:24.097767Z",
                "message": {"role": "assistant", "content": text}, "done": false}),
            )
        }
        fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8> {
            line(
                json!({"model": "test-model", "created_at": "2025-10-26T17:15:24.166576Z",
                "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
                "total_duration": 174560334, "prompt_eval_count": prompt_tokens, "eval_count": output_tokens}),
            )
        }
        fn unterminated(&self) -> Vec<u8> {
            b"{\"model\":\"test-model\",\"message\":{\"role\":\"assistant\",\"content\":\"".to_vec()
        }
        fn error_event(&self, message: &str) -> Option<Vec<u8>> {
            Some(line(json!({"error": message})))
        }
    }

    #[tokio::test]
    async fn the_fault_suite() {
        FaultSuite::new(Ollama::new, Chat).run_all().await;
    }
}
