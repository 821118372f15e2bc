use super::*;
use crate::wire::StreamDecoder;
use penguin_omni_protocol::{build, StopReason, ToolDefinition};

fn decode(body: &str) -> (Vec<UniEvent>, Result<(), WireError>) {
    let mut d = OllamaDecoder::default();
    let mut out = Vec::new();
    let r = d
        .feed(body.as_bytes(), &mut out)
        .and_then(|()| d.finish(&mut out));
    (out, r)
}

fn config() -> ModelConfig {
    let mut config = ModelConfig::new(DEFAULT_BASE_URL, "qwen3");
    config.system_prompt = "Be brief.".into();
    config
}

#[test]
fn the_request_has_the_documented_fields() {
    let mut config = config();
    config.max_output_tokens = 512;
    config.context_window = Some(32_768);
    config.api_key = Some("k".into());
    config.tools = vec![ToolDefinition {
        name: "get_temperature".into(),
        description: "Get the current temperature for a city".into(),
        parameters: Some(
            json!({"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}),
        ),
    }];
    let req = Ollama::new().build_request(
        &config,
        &[build::user_text("What is the temperature in New York?")],
        Some(ThinkingLevel::High),
    );
    assert_eq!(req.path, "/api/chat");
    assert_eq!(
        req.headers,
        [("authorization".to_owned(), "Bearer k".to_owned())]
    );
    assert_eq!(
        req.body,
        json!({
            "model": "qwen3",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is the temperature in New York?"}
            ],
            "stream": true,
            "tools": [{"type": "function", "function": {
                "name": "get_temperature",
                "description": "Get the current temperature for a city",
                "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
            }}],
            "think": true,
            "options": {"num_predict": 512, "num_ctx": 32768}
        })
    );
}

#[test]
fn optional_fields_are_left_out_and_none_turns_thinking_off() {
    let req = Ollama::new().build_request(
        &ModelConfig::new(DEFAULT_BASE_URL, "llama3.2"),
        &[build::user_text("hi")],
        None,
    );
    assert_eq!(
        req.body,
        json!({"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}], "stream": true})
    );
    assert!(req.headers.is_empty());
    let req = Ollama::new().build_request(
        &ModelConfig::new(DEFAULT_BASE_URL, "qwen3"),
        &[build::user_text("hi")],
        Some(ThinkingLevel::None),
    );
    assert_eq!(req.body["think"], json!(false));
    for level in [
        ThinkingLevel::Low,
        ThinkingLevel::Medium,
        ThinkingLevel::Xhigh,
        ThinkingLevel::Max,
    ] {
        assert!(think(level), "{level:?}");
    }
}

#[test]
fn tool_results_are_tool_messages_naming_their_function() {
    let mut o = Ollama::new();
    o.commit(
        &[build::user_text("Temperature in New York and London?")],
        &[
            build::thinking("Two cities.", StopReason::Completed, None),
            build::tool_call(
                "get_temperature",
                r#"{"city":"New York"}"#,
                "get_temperature",
                StopReason::Completed,
                None,
            ),
            build::tool_call(
                "get_temperature",
                r#"{"city":"London"}"#,
                "get_temperature#2",
                StopReason::Completed,
                None,
            ),
            build::tool_call(
                "get_conditions",
                "not json",
                "call_x1",
                StopReason::Completed,
                None,
            ),
        ],
    );
    let req = o.build_request(
        &config(),
        &[
            build::tool_call_output("22°C", "get_temperature", StopReason::Completed),
            build::tool_call_output("15°C", "get_temperature#2", StopReason::Completed),
            build::tool_call_output("Rainy", "call_x1", StopReason::Completed),
        ],
        None,
    );
    assert_eq!(
        req.body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Temperature in New York and London?"},
            {"role": "assistant", "content": "", "thinking": "Two cities.", "tool_calls": [
                {"function": {"name": "get_temperature", "arguments": {"city": "New York"}}},
                {"function": {"name": "get_temperature", "arguments": {"city": "London"}}},
                {"function": {"name": "get_conditions", "arguments": {}}, "id": "call_x1"}
            ]},
            {"role": "tool", "tool_name": "get_temperature", "content": "22°C"},
            {"role": "tool", "tool_name": "get_temperature", "content": "15°C"},
            {"role": "tool", "tool_name": "get_conditions", "content": "Rainy", "tool_call_id": "call_x1"}
        ])
    );
}

#[test]
fn resumed_history_remembers_call_names_and_images_go_inline() {
    let mut o = Ollama::new();
    o.set_history(&[
        build::user_text("look"),
        build::tool_call("read_image", "{}", "call_7", StopReason::Completed, None),
    ]);
    let req = o.build_request(
        &config(),
        &[
            build::tool_call_output_with_images(
                "an image",
                "call_7",
                StopReason::Completed,
                vec!["data:image/png;base64,AAAA".into()],
            ),
            build::user_text("and this?"),
            build::image_url("data:image/jpeg;base64,BBBB"),
            build::image_url("https://example.invalid/x.png"),
        ],
        None,
    );
    let messages = req.body["messages"].as_array().unwrap();
    assert_eq!(
        messages[2..],
        [
            json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "read_image", "arguments": {}}, "id": "call_7"}]}),
            json!({"role": "tool", "tool_name": "read_image", "content": "an image", "tool_call_id": "call_7", "images": ["AAAA"]}),
            json!({"role": "user", "content": "and this?", "images": ["BBBB"]}),
        ]
    );
}

#[test]
fn an_empty_reply_keeps_the_alternation() {
    let mut o = Ollama::new();
    o.commit(&[build::user_text("hi")], &[]);
    assert_eq!(
        o.history(),
        [
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": ""})
        ]
    );
}

#[test]
fn done_carries_the_finish_reason_and_the_usage() {
    let (events, r) = decode(concat!(
        "{\"model\":\"qwen3\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},\"done\":false}\n",
        "{\"model\":\"qwen3\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":12,\"eval_count\":7}\n",
    ));
    assert_eq!(r, Ok(()));
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].content_items,
        [ContentItem::ToolCall {
            tool_call_id: "f".into(),
            name: "f".into(),
            arguments: json!({"a": 1}),
            fidelity: None
        }]
    );
    assert_eq!(events[1].finish_reason.as_deref(), Some("tool_call"));
    assert_eq!(
        events[1].usage,
        Some(Usage {
            cached_tokens: 0,
            prompt_tokens: 12,
            thoughts_tokens: 0,
            response_tokens: 7
        })
    );
}

#[test]
fn arguments_sent_as_a_string_are_parsed_and_bad_ones_are_malformed() {
    let (events, r) = decode(concat!(
        "{\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},\"done\":false}\n",
        "{\"done\":true}\n",
    ));
    assert_eq!(r, Ok(()));
    assert_eq!(
        events[0].content_items,
        [ContentItem::ToolCall {
            tool_call_id: "call_1".into(),
            name: "f".into(),
            arguments: json!({"a": 1}),
            fidelity: None
        }]
    );
    assert_eq!(events[1].finish_reason.as_deref(), Some("tool_call"));
    let (_, r) = decode(
        "{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":[1]}}]},\"done\":false}\n",
    );
    assert_eq!(
        r,
        Err(WireError::Malformed(
            "arguments of tool call f are not a JSON object: [1]".into()
        ))
    );
    let (_, r) = decode(
        "{\"message\":{\"tool_calls\":[{\"function\":{\"arguments\":{}}}]},\"done\":false}\n",
    );
    assert!(
        matches!(&r, Err(WireError::Malformed(m)) if m.starts_with("tool call without a function name in line 1")),
        "{r:?}"
    );
}

#[test]
fn bad_json_names_the_line_and_the_events_before_it_are_kept() {
    let (events, r) = decode(concat!(
        "{\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},\"done\":false}\n",
        "{\"message\": oops}\n",
    ));
    assert_eq!(events.len(), 1);
    let Err(WireError::Malformed(m)) = r else {
        panic!("expected malformed, got {r:?}")
    };
    assert!(m.starts_with("Ollama chat line 2 is not valid JSON"), "{m}");
}

#[test]
fn an_error_line_is_a_provider_error_classified_by_its_text() {
    let (_, r) = decode("{\"error\":\"server overloaded, please retry shortly\"}\n");
    assert_eq!(
        r,
        Err(WireError::Provider {
            status: StopReason::Timeout,
            message: "server overloaded, please retry shortly".into()
        })
    );
    let (_, r) = decode("{\"error\":\"an error was encountered while running the model\"}\n");
    assert_eq!(
        r,
        Err(WireError::Provider {
            status: StopReason::Failed,
            message: "an error was encountered while running the model".into()
        })
    );
}

#[test]
fn an_empty_body_and_a_body_without_done_are_malformed() {
    assert_eq!(
        decode("\n\n").1,
        Err(WireError::Malformed(
            "Streaming response yielded no events".into()
        ))
    );
    assert_eq!(
        decode("{\"message\":{\"role\":\"assistant\",\"content\":\"x\"},\"done\":false}").1,
        Err(WireError::Malformed(
            "Last event must carry \"done\": true: the stream ended after 1 line(s) without it"
                .into()
        ))
    );
}

#[test]
fn lines_after_done_are_ignored_and_other_done_reasons_are_kept() {
    let (events, r) = decode(concat!(
        "{\"message\":{\"role\":\"assistant\",\"content\":\"x\"},\"done\":true,\"done_reason\":\"length\"}\r\n",
        "not even json\n",
    ));
    assert_eq!(r, Ok(()));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].finish_reason.as_deref(), Some("length"));
}
