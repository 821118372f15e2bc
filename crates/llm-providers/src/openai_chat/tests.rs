use super::*;
use crate::wire::StreamDecoder;
use penguin_omni_protocol::{build, ToolDefinition};

fn decode(body: &str) -> (Vec<UniEvent>, Result<(), WireError>) {
    let mut d = OpenAiChatDecoder::default();
    let mut out = Vec::new();
    let r = d
        .feed(body.as_bytes(), &mut out)
        .and_then(|()| d.finish(&mut out));
    (out, r)
}

#[test]
fn usage_splits_cached_and_reasoning_tokens() {
    let u = parse_usage(&json!({
        "prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 20}
    }));
    assert_eq!(
        u,
        Usage {
            cached_tokens: 30,
            prompt_tokens: 70,
            thoughts_tokens: 20,
            response_tokens: 30
        }
    );
}

#[test]
fn done_without_finish_reason_is_malformed() {
    let (_, r) = decode(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n",
    );
    assert_eq!(
        r,
        Err(WireError::Malformed(
            "Last event must carry a finish_reason: the stream ended after 1 chunk(s) with [DONE] but without one".into()
        ))
    );
    assert_eq!(
        decode("").1,
        Err(WireError::Malformed(
            "Streaming response yielded no events".into()
        ))
    );
}

#[test]
fn bad_tool_arguments_are_malformed_and_name_the_call() {
    let (_, r) = decode(concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_9\",\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
    ));
    let Err(WireError::Malformed(msg)) = r else {
        panic!("expected malformed, got {r:?}")
    };
    assert!(
        msg.starts_with("arguments of tool call f (call_9) are not valid JSON"),
        "{msg}"
    );
}

/// A `data:` line holding one choice-0 delta.
fn delta_line(delta: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta}]})
    )
}

fn call_fragment(index: Option<u64>, name: Option<&str>, arguments: &str) -> Value {
    let mut call = json!({"function": {"arguments": arguments}});
    if let Some(i) = index {
        call["index"] = json!(i);
        call["id"] = json!(format!("call_{i}"));
    }
    if let Some(n) = name {
        call["function"]["name"] = json!(n);
    }
    json!({"tool_calls": [call]})
}

/// The content items of every event, in order, as `(kind, tool call id or "")`.
fn tool_items(events: &[UniEvent]) -> Vec<(&'static str, String)> {
    events
        .iter()
        .flat_map(|e| &e.content_items)
        .map(|item| match item {
            ContentItem::PartialToolCall { tool_call_id, .. } => {
                ("partial", tool_call_id.clone().unwrap_or_default())
            }
            ContentItem::ToolCall { tool_call_id, .. } => ("complete", tool_call_id.clone()),
            ContentItem::Text { .. } => ("text", String::new()),
            ContentItem::Thinking { .. } => ("thinking", String::new()),
        })
        .collect()
}

const FINISH: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n";

#[test]
fn a_call_completes_when_the_next_index_begins() {
    let body = [
        delta_line(call_fragment(Some(0), Some("a"), "{\"x\":")),
        delta_line(call_fragment(Some(0), None, "1}")),
        delta_line(call_fragment(Some(1), Some("b"), "{}")),
        FINISH.to_owned(),
    ]
    .concat();
    let (events, r) = decode(&body);
    assert_eq!(r, Ok(()));
    let p = |id: &str| ("partial", id.to_owned());
    let c = |id: &str| ("complete", id.to_owned());
    assert_eq!(
        tool_items(&events),
        [
            p("call_0"),
            p("call_0"),
            c("call_0"),
            p("call_1"),
            c("call_1")
        ]
    );
}

#[test]
fn text_after_a_call_completes_it_first() {
    let body = [
        delta_line(call_fragment(Some(0), Some("a"), "{}")),
        delta_line(json!({"content": "done"})),
        FINISH.to_owned(),
    ]
    .concat();
    let (events, r) = decode(&body);
    assert_eq!(r, Ok(()));
    assert_eq!(
        tool_items(&events),
        [
            ("partial", "call_0".to_owned()),
            ("complete", "call_0".to_owned()),
            ("text", String::new())
        ]
    );
}

#[test]
fn calls_without_an_index_are_one_per_fragment() {
    let body = [
        delta_line(call_fragment(None, Some("a"), "{}")),
        delta_line(call_fragment(None, Some("b"), "{}")),
        FINISH.to_owned(),
    ]
    .concat();
    let (events, r) = decode(&body);
    assert_eq!(r, Ok(()));
    let ids: Vec<_> = tool_items(&events)
        .into_iter()
        .filter(|(kind, _)| *kind == "complete")
        .map(|(_, id)| id)
        .collect();
    assert_eq!(ids, ["call_0", "call_1"]);
}

#[test]
fn a_fragment_for_a_completed_call_is_malformed() {
    let body = [
        delta_line(call_fragment(Some(0), Some("a"), "{")),
        delta_line(call_fragment(Some(1), Some("b"), "{}")),
        delta_line(call_fragment(Some(0), None, "}")),
    ]
    .concat();
    let (events, r) = decode(&body);
    let Err(WireError::Malformed(msg)) = r else {
        panic!("expected malformed, got {r:?}")
    };
    // Index 0 was completed (and its `{` failed to parse) when index 1 began.
    assert!(
        msg.starts_with("arguments of tool call a (call_0) are not valid JSON"),
        "{msg}"
    );
    assert_eq!(tool_items(&events), [("partial", "call_0".to_owned())]);

    let body = [
        delta_line(call_fragment(Some(0), Some("a"), "{}")),
        delta_line(call_fragment(Some(1), Some("b"), "{}")),
        delta_line(call_fragment(Some(0), None, "")),
    ]
    .concat();
    assert_eq!(
        decode(&body).1,
        Err(WireError::Malformed(
            "tool call at index 0 continues after it was completed".into()
        ))
    );
}

#[test]
fn fragment_without_a_name_for_a_new_index_is_malformed() {
    let (_, r) = decode("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n");
    assert_eq!(
        r,
        Err(WireError::Malformed(
            "tool call at index 3 starts without a function name".into()
        ))
    );
}

#[test]
fn in_stream_errors_are_classified() {
    let (_, r) = decode("data: {\"error\":{\"code\":500,\"message\":\"slot unavailable\",\"type\":\"server_error\"}}\n\n");
    assert_eq!(
        r,
        Err(WireError::Provider {
            status: StopReason::Timeout,
            message: "slot unavailable".into()
        })
    );
    let (_, r) = decode("data: {\"error\":{\"message\":\"context length exceeded\",\"type\":\"invalid_request_error\"}}\n\n");
    assert_eq!(
        r,
        Err(WireError::Provider {
            status: StopReason::Failed,
            message: "context length exceeded".into()
        })
    );
}

#[test]
fn request_body_has_history_tools_limits_and_effort() {
    let mut chat = OpenAiChat::new();
    let mut config = ModelConfig::new("http://x/v1", "m1");
    config.system_prompt = "be brief".into();
    config.api_key = Some("sk-test".into());
    config.max_output_tokens = 256;
    config.tools = vec![ToolDefinition {
        name: "read".into(),
        description: "Reads a file".into(),
        parameters: Some(json!({"type": "object", "properties": {"path": {"type": "string"}}})),
    }];
    let mut think_fid = Fidelity::new();
    think_fid.insert("reasoning_field".into(), json!("reasoning"));
    chat.commit(
        &[build::user_text("read a")],
        &[
            build::thinking("plan", StopReason::Completed, Some(think_fid)),
            build::tool_call(
                "read",
                r#"{"path":"a"}"#,
                "call_1#2",
                StopReason::Completed,
                None,
            ),
        ],
    );
    let req = chat.build_request(
        &config,
        &[build::tool_call_output(
            "contents",
            "call_1#2",
            StopReason::Completed,
        )],
        Some(ThinkingLevel::High),
    );
    assert_eq!(req.path, "/chat/completions");
    assert_eq!(
        req.headers,
        [("authorization".to_owned(), "Bearer sk-test".to_owned())]
    );
    assert_eq!(
        req.body,
        json!({
            "model": "m1",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "read a"},
                {"role": "assistant", "content": null, "reasoning": "plan", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "contents"}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "read", "description": "Reads a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
            "max_tokens": 256,
            "reasoning_effort": "high"
        })
    );
}

#[test]
fn minimal_request_omits_optional_fields_and_builds_user_parts() {
    let chat = OpenAiChat::new();
    let config = ModelConfig::new("http://x/v1", "m");
    let req = chat.build_request(
        &config,
        &[
            build::user_text("look"),
            build::image_url("data:image/png;base64,AAAA"),
        ],
        None,
    );
    assert!(req.headers.is_empty());
    assert_eq!(
        req.body,
        json!({
            "model": "m",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            ]}],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[test]
fn replayed_arguments_are_normalized_to_objects() {
    assert_eq!(normalized_arguments(""), "{}");
    assert_eq!(normalized_arguments("[1]"), "{}");
    assert_eq!(normalized_arguments("{\"a\": 1}"), "{\"a\":1}");
}

#[test]
fn effort_levels_map_to_reasoning_effort() {
    assert_eq!(reasoning_effort(ThinkingLevel::None), "none");
    assert_eq!(reasoning_effort(ThinkingLevel::Medium), "medium");
    assert_eq!(reasoning_effort(ThinkingLevel::Max), "xhigh");
}
