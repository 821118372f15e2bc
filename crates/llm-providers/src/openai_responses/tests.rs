use super::*;
use crate::wire::StreamDecoder;
use penguin_omni_protocol::{build, ToolDefinition};

fn fid(v: Value) -> Option<Fidelity> {
    v.as_object().cloned()
}

#[test]
fn request_replays_reasoning_items_verbatim_and_pairs_calls() {
    let mut proto = OpenAiResponses::new();
    let mut config = ModelConfig::new("http://x/v1", "gpt-5");
    config.system_prompt = "be brief".into();
    config.api_key = Some("sk-test".into());
    config.max_output_tokens = 512;
    config.tools = vec![ToolDefinition {
        name: "read".into(),
        description: "Reads a file".into(),
        parameters: Some(json!({"type": "object", "properties": {"path": {"type": "string"}}})),
    }];
    let reasoning = json!({"id": "rs_1", "type": "reasoning", "encrypted_content": "enc", "summary": [{"type": "summary_text", "text": "plan"}]});
    proto.commit(
        &[build::user_text("read a")],
        &[
            build::thinking(
                "plan",
                StopReason::Completed,
                fid(json!({REASONING_ITEM: reasoning})),
            ),
            build::assistant_text_with(
                "Reading.",
                StopReason::Completed,
                fid(json!({"phase": "commentary"})),
            ),
            build::tool_call(
                "read",
                r#"{"path":"a"}"#,
                "call_1#2",
                StopReason::Completed,
                fid(json!({"item_id": "fc_1"})),
            ),
        ],
    );
    let req = proto.build_request(
        &config,
        &[build::tool_call_output(
            "contents",
            "call_1#2",
            StopReason::Completed,
        )],
        Some(ThinkingLevel::Max),
    );
    assert_eq!(req.path, "/responses");
    assert_eq!(
        req.headers,
        [("authorization".to_owned(), "Bearer sk-test".to_owned())]
    );
    assert_eq!(
        req.body,
        json!({
            "model": "gpt-5",
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "read a"}]},
                reasoning,
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}], "phase": "commentary"},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read", "arguments": "{\"path\":\"a\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "contents"}
            ],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "tools": [{"type": "function", "name": "read", "description": "Reads a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
            "max_output_tokens": 512,
            "reasoning": {"effort": "xhigh"}
        })
    );
}

#[test]
fn minimal_request_and_user_images() {
    let proto = OpenAiResponses::new();
    let req = proto.build_request(
        &ModelConfig::new("http://x/v1", "m"),
        &[
            build::user_text("look"),
            build::image_url("https://example.com/a.png"),
        ],
        None,
    );
    assert!(req.headers.is_empty());
    assert_eq!(
        req.body,
        json!({
            "model": "m",
            "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://example.com/a.png"}
            ]}],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"]
        })
    );
}

#[test]
fn thinking_without_a_recorded_item_goes_back_as_a_summary() {
    let items = to_input_items(&[
        build::thinking("why", StopReason::Completed, None),
        build::thinking("", StopReason::Completed, None),
        build::tool_call("f", "", "call_9", StopReason::Completed, None),
    ]);
    assert_eq!(
        items,
        vec![
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}]}),
            json!({"type": "function_call", "call_id": "call_9", "name": "f", "arguments": "{}"}),
        ]
    );
}

#[test]
fn usage_splits_cached_and_reasoning_tokens() {
    assert_eq!(
        parse_usage(&json!({
            "input_tokens": 100, "input_tokens_details": {"cached_tokens": 30},
            "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 20}
        })),
        Usage {
            cached_tokens: 30,
            prompt_tokens: 70,
            thoughts_tokens: 20,
            response_tokens: 30
        }
    );
}

#[test]
fn bad_function_call_arguments_are_malformed() {
    let mut d = OpenAiResponsesDecoder::default();
    let mut out = Vec::new();
    let body = "data: {\"type\":\"response.output_item.done\",\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"f\",\"arguments\":\"{oops\"}}\n\n";
    let Err(WireError::Malformed(msg)) = d.feed(body.as_bytes(), &mut out) else {
        panic!("expected malformed")
    };
    assert!(
        msg.starts_with("arguments of function_call f (call_1) are not valid JSON"),
        "{msg}"
    );
    let mut d = OpenAiResponsesDecoder::default();
    assert_eq!(
        d.finish(&mut out),
        Err(WireError::Malformed(
            "Streaming response yielded no events".into()
        ))
    );
}
