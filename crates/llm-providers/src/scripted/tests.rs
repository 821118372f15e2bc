use super::*;
use serde_json::json;

fn text_steps() -> Value {
    json!([
        {"delay_ms": 5, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "start", "text": "", "stop_reason": "completed"}}},
        {"delay_ms": 100, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "Hel", "stop_reason": "completed"}}},
        {"delay_ms": 100, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "lo", "stop_reason": "completed"}}}
    ])
}

fn types(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter()
        .map(|m| {
            let p = m.model().unwrap();
            format!("{}:{}", p.type_name(), p.stop_reason().unwrap())
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn closes_open_segments_with_the_outcome_status() {
    let mut model = ScriptedModel::from_json(
        &json!([{"stream": text_steps(), "outcome": {"status": "timeout"}}]),
    )
    .unwrap();
    let mut out = Vec::new();
    let req = LlmRequest {
        new_messages: vec![build::user_text("hi")],
        cancel: Default::default(),
        thinking_level: None,
    };
    let outcome = model.stream_generate(req, &mut out).await;
    assert_eq!(outcome.status, StopReason::Timeout);
    assert_eq!(
        types(&out)[3..],
        [
            "partial_text:timeout".to_string(),
            "text:timeout".to_string()
        ]
    );
    assert_eq!(out[4].model().unwrap().content(), Some("Hello"));
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn abort_while_waiting_closes_with_aborted() {
    let mut model = ScriptedModel::from_json(&json!([{"stream": text_steps()}])).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        c.cancel();
    });
    let mut out = Vec::new();
    let req = LlmRequest {
        new_messages: vec![],
        cancel,
        thinking_level: None,
    };
    let outcome = model.stream_generate(req, &mut out).await;
    assert_eq!(outcome, LlmOutcome::new(StopReason::Aborted));
    assert_eq!(
        types(&out),
        [
            "partial_text:completed",
            "partial_text:completed",
            "partial_text:aborted",
            "text:aborted"
        ]
    );
    assert_eq!(out[3].model().unwrap().content(), Some("Hel"));
}

fn cut_after_stop() -> Value {
    json!([
        {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "start", "text": "", "stop_reason": "completed"}}},
        {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "Hi", "stop_reason": "completed"}}},
        {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "stop", "text": "", "stop_reason": "completed"}}},
        {"delay_ms": 100, "message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "Hi", "stop_reason": "completed"}}}
    ])
}

#[tokio::test(start_paused = true)]
async fn a_stopped_segment_is_not_closed_again_on_abort() {
    let mut model = ScriptedModel::from_json(&json!([{ "stream": cut_after_stop() }])).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.cancel();
    });
    let mut out = Vec::new();
    let req = LlmRequest {
        new_messages: vec![],
        cancel,
        thinking_level: None,
    };
    assert_eq!(
        model.stream_generate(req, &mut out).await.status,
        StopReason::Aborted
    );
    assert_eq!(
        types(&out),
        [
            "partial_text:completed",
            "partial_text:completed",
            "partial_text:completed"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stopped_segment_is_not_closed_again_when_the_script_ends() {
    let mut steps = cut_after_stop();
    steps.as_array_mut().unwrap().pop();
    let mut model = ScriptedModel::from_json(&json!([{ "stream": steps }])).unwrap();
    let mut out = Vec::new();
    let req = LlmRequest {
        new_messages: vec![],
        cancel: Default::default(),
        thinking_level: None,
    };
    assert_eq!(
        model.stream_generate(req, &mut out).await.status,
        StopReason::Completed
    );
    assert_eq!(out.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_during_the_last_step_ends_the_request_as_aborted() {
    // The sink holds the last message as the engine does while a call awaits approval; the
    // interrupt fires meanwhile.
    struct Holding(Vec<OmniMessage>, tokio_util::sync::CancellationToken);
    #[async_trait]
    impl MessageSink for Holding {
        async fn emit(&mut self, msg: OmniMessage) {
            self.0.push(msg);
            if self.0.len() == 2 {
                self.1.cancel();
            }
        }
    }
    let mut steps = text_steps();
    steps.as_array_mut().unwrap().truncate(2);
    let mut model = ScriptedModel::from_json(&json!([{ "stream": steps }])).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut sink = Holding(Vec::new(), cancel.clone());
    let req = LlmRequest {
        new_messages: vec![],
        cancel,
        thinking_level: None,
    };
    assert_eq!(
        model.stream_generate(req, &mut sink).await.status,
        StopReason::Aborted
    );
    assert_eq!(
        types(&sink.0),
        [
            "partial_text:completed",
            "partial_text:completed",
            "partial_text:aborted",
            "text:aborted"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn closing_copies_the_start_fragment() {
    let steps = json!([
        {"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "partial_tool_call", "role": "assistant", "event_type": "start", "name": "read", "arguments": "{\"a", "tool_call_id": "c1"}}},
        {"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "start", "text": "x"}}},
        {"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "partial_tool_call", "role": "assistant", "event_type": "delta", "name": "", "arguments": "\":1}", "tool_call_id": "c1"}}}
    ]);
    let mut model =
        ScriptedModel::from_json(&json!([{ "stream": steps, "outcome": {"status": "malformed"} }]))
            .unwrap();
    let mut out = Vec::new();
    let req = LlmRequest {
        new_messages: vec![],
        cancel: Default::default(),
        thinking_level: None,
    };
    model.stream_generate(req, &mut out).await;
    let closes: Vec<Value> = out[3..]
        .iter()
        .map(|m| serde_json::to_value(m).unwrap()["payload"].clone())
        .collect();
    assert_eq!(
        closes,
        [
            json!({"type": "partial_tool_call", "role": "assistant", "event_type": "stop", "name": "", "arguments": "", "tool_call_id": "c1", "stop_reason": "malformed"}),
            json!({"type": "tool_call", "role": "assistant", "name": "read", "arguments": "{\"a\":1}", "tool_call_id": "c1", "stop_reason": "malformed"}),
            json!({"type": "partial_text", "role": "assistant", "event_type": "stop", "text": "", "stop_reason": "malformed"}),
            json!({"type": "text", "role": "assistant", "text": "x", "stop_reason": "malformed"}),
        ]
    );
}

#[tokio::test]
async fn unscripted_request_fails() {
    let mut model = ScriptedModel::new(vec![]);
    let req = LlmRequest {
        new_messages: vec![],
        cancel: Default::default(),
        thinking_level: None,
    };
    let outcome = model.stream_generate(req, &mut Vec::new()).await;
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            StopReason::Failed,
            "scenario has no script for this request"
        )
    );
}

#[test]
fn bad_scripts_name_the_field() {
    let err = ScriptedModel::from_json(&json!([{"stream": [{"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "partial_text", "role": "assistant"}}}]}])).unwrap_err();
    assert_eq!(err.path, "llm[0].stream[0].message.payload.event_type");
    let err = ScriptedModel::from_json(&json!([{"outcome": {"status": "exploded"}}])).unwrap_err();
    assert_eq!(err.path, "llm[0].outcome.status");
    let err = ScriptedModel::from_json(
        &json!([{"stream": [], "outcome": {"status": "failed", "retry": true}}]),
    )
    .unwrap_err();
    assert_eq!(err.path, "llm[0].outcome.retry");
    let err =
        ScriptedModel::from_json(&json!([{"stream": [{"delay": 5, "message": {}}]}])).unwrap_err();
    assert_eq!(err.path, "llm[0].stream[0].delay");
}

#[test]
fn unknown_payload_keys_are_rejected_not_dropped() {
    let step = |payload: Value| json!([{"stream": [{"delay_ms": 0, "message": {"type": "model_msg", "payload": payload}}]}]);
    let err = ScriptedModel::from_json(&step(
        json!({"type": "text", "role": "assistant", "text": "hi", "colour": "red"}),
    ))
    .unwrap_err();
    assert_eq!(err.path, "llm[0].stream[0].message.payload.colour");
    let err = ScriptedModel::from_json(&json!([{"stream": [{"message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "hi"}, "extra": 1}}]}])).unwrap_err();
    assert_eq!(err.path, "llm[0].stream[0].message.extra");
    let usage = json!({"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1, "input": 0}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}});
    let err = ScriptedModel::from_json(
        &json!([{"stream": [{"message": {"type": "event_msg", "payload": usage}}]}]),
    )
    .unwrap_err();
    assert_eq!(err.path, "llm[0].stream[0].message.payload.session.input");
    // Fidelity is opaque provider data: anything inside it is carried, so it is accepted.
    ScriptedModel::from_json(&step(json!({"type": "text", "role": "assistant", "text": "hi", "fidelity": {"anything": [1, {"x": null}]}}))).unwrap();
}

/// Requests and tool scripts read in one pass (messages included) read exactly as their JSON
/// trees do: the same steps, outcome and errors, whether the one pass takes them or leaves them
/// to the step-by-step way.
#[test]
fn scripts_read_in_one_pass_as_their_trees_read() {
    let epoch = |steps: Vec<Step>| -> Vec<Step> {
        // A message without a timestamp is stamped when read: compare without stamps.
        steps
            .into_iter()
            .map(|s| Step {
                message: build::restamped(s.message, Timestamp::from_unix_millis(0)),
                ..s
            })
            .collect()
    };
    let text = r#"{"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "hi", "stop_reason": "completed"}}"#;
    let delta = r#"{"timestamp": "2026-01-02T03:04:05.678Z", "type": "model_msg", "payload": {"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "a \"q\" \u00e9"}}"#;
    let call = r#"{"type": "model_msg", "payload": {"type": "tool_call", "role": "assistant", "name": "sh", "arguments": "{\"cmd\": \"ls\"}", "tool_call_id": "c1", "stop_reason": "completed"}}"#;
    let usage = r#"{"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}}}"#;
    let requests = [
        format!(
            r#"{{"stream": [{{"delay_ms": 5, "message": {delta}}}, {{"message": {text}}}, {{"delay_ms": 0, "message": {call}}}]}}"#
        ),
        format!(
            r#"{{"stream": [{{"message": {text}}}], "outcome": {{"status": "failed", "error_message": "boom"}}}}"#
        ),
        format!(r#"{{"stream": [{{"message": {text}}}], "outcome": {{"status": "exploded"}}}}"#),
        format!(
            r#"{{"stream": [{{"message": {usage}}}, {{"message": {text}}}, {{"message": {}}}]}}"#,
            usage.replace(
                "\"type\": \"event_msg\"",
                "\"timestamp\": \"2026-01-02T03:04:05.678Z\", \"type\": \"event_msg\""
            )
        ),
        format!(
            r#"{{"stream": [{{"message": {}}}]}}"#,
            text.replace(r#""completed""#, "null")
        ),
        format!(
            r#"{{"stream": [{{"message": {}}}]}}"#,
            text.replace(r#""hi""#, r#""null and void""#)
        ),
        format!(
            r#"{{"stream": [{{"message": {}}}]}}"#,
            text.replace(r#""role""#, r#""colour": "red", "role""#)
        ),
        format!(
            r#"{{"stream": [{{"message": {}}}]}}"#,
            text.replace(r#""text": "hi""#, r#""t\u0065xt": "hi""#)
        ),
        format!(r#"{{"stream": [{{"delay": 5, "message": {text}}}]}}"#),
        format!(r#"{{"stream": [{{"message": {text}}}], "extra": 1}}"#),
        r#"{"outcome": {"status": "completed"}}"#.to_owned(),
        r#"{"stream": [{"message": [1]}]}"#.to_owned(),
        format!(
            r#"{{"stream": [{{"message": {}}}]}}"#,
            usage.replace(r#""total": 1}}"#, r#""total": 1, "input": 0}}"#)
        ),
        format!(
            r#"{{"stream": [{{"message": {}}}]}}"#,
            usage.replace(
                r#""type": "event_msg", "payload": {"type": "token_usage""#,
                r#""type": "event_msg", "payload": {"type": "warp_drive""#
            )
        ),
        r#"{"stream": [{"message": {"payload": {"type": "request_begin"}, "type": "event_msg"}}]}"#
            .to_owned(),
    ];
    // The first four are read in one pass (the third's outcome then fails as its tree's does);
    // the others are left to the step-by-step way.
    let one_pass = |r: &String| exact_in_place::<InPlaceScript<'_>>(r).is_some();
    assert!(requests[..4].iter().all(one_pass));
    assert!(!requests[4..].iter().any(one_pass));
    for (i, r) in requests.iter().enumerate() {
        let path = format!("llm[{i}]");
        let tree: Value = serde_json::from_str(r).unwrap_or_else(|e| panic!("{r}: {e}"));
        let fixed = |read: Result<ScriptedRequest, ScriptError>| {
            read.map(|req| (epoch(req.stream), req.outcome))
        };
        assert_eq!(
            fixed(parse_request_json(r, &path)),
            fixed(parse_request(&tree, &path)),
            "{r}"
        );
        // The same stream as a tool's script (which has no outcome).
        let Some(stream) = tree.get("stream") else {
            continue;
        };
        let script = serde_json::json!({ "stream": stream }).to_string();
        let one_pass = parse_tool_stream_json(&script, "c1").map(|read| read.map(epoch));
        let by_tree = parse_steps(stream, "tools.c1.stream").map(epoch);
        assert_eq!(
            one_pass.unwrap_or_else(|| by_tree.clone()),
            by_tree,
            "{script}"
        );
    }
}
