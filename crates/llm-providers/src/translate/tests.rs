#[test]
fn a_fragment_after_its_call_was_emitted_opens_no_phantom_call() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = Vec::new();
    out.extend(t.translate(UniEvent::item(ContentItem::PartialToolCall {
        tool_call_id: Some("c1".into()),
        name: Some("f".into()),
        arguments: "{}".into(),
        fidelity: None,
    })));
    out.extend(t.translate(UniEvent::item(ContentItem::ToolCall {
        tool_call_id: "c1".into(),
        name: "f".into(),
        arguments: serde_json::json!({}),
        fidelity: None,
    })));
    out.extend(t.translate(UniEvent::item(ContentItem::PartialToolCall {
        tool_call_id: Some("c1".into()),
        name: None,
        arguments: "x".into(),
        fidelity: None,
    })));
    out.extend(t.finish());
    let calls: Vec<&OmniMessage> = out
        .iter()
        .filter(|m| m.payload_type() == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{out:?}");
    assert!(out.iter().all(|m| m.tool_call_id() != Some("c1#2")));
}

use super::*;
use crate::testkit::{check_discipline, describe_all, without_timestamps};
use serde_json::json;

fn fid(v: Value) -> Option<Fidelity> {
    match v {
        Value::Object(m) => Some(m),
        _ => panic!("fidelity must be an object"),
    }
}

fn text(t: &str) -> ContentItem {
    ContentItem::Text {
        text: t.into(),
        fidelity: None,
    }
}

fn text_f(t: &str, f: Value) -> ContentItem {
    ContentItem::Text {
        text: t.into(),
        fidelity: fid(f),
    }
}

fn think(t: &str) -> ContentItem {
    ContentItem::Thinking {
        thinking: t.into(),
        fidelity: None,
    }
}

fn think_f(t: &str, f: Value) -> ContentItem {
    ContentItem::Thinking {
        thinking: t.into(),
        fidelity: fid(f),
    }
}

fn ptc(id: Option<&str>, name: Option<&str>, args: &str) -> ContentItem {
    ContentItem::PartialToolCall {
        tool_call_id: id.map(Into::into),
        name: name.map(Into::into),
        arguments: args.into(),
        fidelity: None,
    }
}

fn tc(id: &str, name: &str, args: Value) -> ContentItem {
    ContentItem::ToolCall {
        tool_call_id: id.into(),
        name: name.into(),
        arguments: args,
        fidelity: None,
    }
}

/// Runs items (one event each), then `finish()`, checking the discipline.
fn run(items: Vec<ContentItem>, finish_reason: Option<&str>) -> Vec<String> {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = Vec::new();
    for item in items {
        out.extend(t.translate(UniEvent::item(item)));
    }
    out.extend(t.translate(UniEvent {
        finish_reason: finish_reason.map(Into::into),
        ..UniEvent::default()
    }));
    out.extend(t.finish());
    check_discipline(&out).unwrap();
    describe_all(&out)
}

#[test]
fn text_streams_as_one_segment_with_exact_json() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = t.translate(UniEvent::item(text("Hel")));
    out.extend(t.translate(UniEvent::item(text("lo"))));
    out.extend(t.finish());
    assert_eq!(
        without_timestamps(&out),
        [
            r#"{"type":"model_msg","payload":{"type":"partial_text","role":"assistant","event_type":"start","text":"","stop_reason":"completed"}}"#,
            r#"{"type":"model_msg","payload":{"type":"partial_text","role":"assistant","event_type":"delta","text":"Hel","stop_reason":"completed"}}"#,
            r#"{"type":"model_msg","payload":{"type":"partial_text","role":"assistant","event_type":"delta","text":"lo","stop_reason":"completed"}}"#,
            r#"{"type":"model_msg","payload":{"type":"partial_text","role":"assistant","event_type":"stop","text":"","stop_reason":"completed"}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"assistant","text":"Hello","stop_reason":"completed"}}"#,
        ]
    );
}

#[test]
fn thinking_then_text_flushes_thinking_first() {
    assert_eq!(
        run(vec![think("hmm"), text("hi")], Some("stop")),
        [
            "partial_thinking/start",
            "partial_thinking/delta \"hmm\"",
            "partial_thinking/stop completed",
            "thinking \"hmm\" completed",
            "partial_text/start",
            "partial_text/delta \"hi\"",
            "partial_text/stop completed",
            "text \"hi\" completed",
        ]
    );
}

#[test]
fn text_then_thinking_flushes_text() {
    assert_eq!(
        run(vec![text("a"), think("b"), text("c")], None),
        [
            "partial_text/start",
            "partial_text/delta \"a\"",
            "partial_text/stop completed",
            "text \"a\" completed",
            "partial_thinking/start",
            "partial_thinking/delta \"b\"",
            "partial_thinking/stop completed",
            "thinking \"b\" completed",
            "partial_text/start",
            "partial_text/delta \"c\"",
            "partial_text/stop completed",
            "text \"c\" completed",
        ]
    );
}

#[test]
fn length_finish_fails_the_last_segment() {
    assert_eq!(
        run(vec![text("cut")], Some("length")),
        [
            "partial_text/start",
            "partial_text/delta \"cut\"",
            "partial_text/stop failed",
            "text \"cut\" failed",
        ]
    );
    for reason in [None, Some("stop"), Some("tool_call")] {
        assert_eq!(finish_reason_to_stop_reason(reason), StopReason::Completed);
    }
    assert_eq!(
        finish_reason_to_stop_reason(Some("content_filter")),
        StopReason::Failed
    );
}

#[test]
fn same_reasoning_field_keeps_one_thinking_block() {
    let f = json!({"reasoning_field": "reasoning_content"});
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = t.translate(UniEvent::item(think_f("a", f.clone())));
    out.extend(t.translate(UniEvent::item(think_f("b", f.clone()))));
    out.extend(t.finish());
    check_discipline(&out).unwrap();
    let last = without_timestamps(&out).pop().unwrap();
    assert_eq!(
        last,
        r#"{"type":"model_msg","payload":{"type":"thinking","role":"assistant","thinking":"ab","stop_reason":"completed","fidelity":{"reasoning_field":"reasoning_content"}}}"#
    );
    assert_eq!(out.len(), 5);
}

#[test]
fn claude_signature_closes_the_thinking_block() {
    // Deltas carry no fidelity; the block ends with an empty-text {signature} item, so the
    // next thinking content starts a new block.
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = Vec::new();
    for item in [
        think("one"),
        think_f("", json!({"signature": "sig1"})),
        think("two"),
        think_f("", json!({"signature": "sig2"})),
    ] {
        out.extend(t.translate(UniEvent::item(item)));
    }
    out.extend(t.finish());
    check_discipline(&out).unwrap();
    let completes: Vec<_> = without_timestamps(&out)
        .into_iter()
        .filter(|j| j.contains(r#""type":"thinking""#))
        .collect();
    assert_eq!(
        completes,
        [
            r#"{"type":"model_msg","payload":{"type":"thinking","role":"assistant","thinking":"one","stop_reason":"completed","fidelity":{"signature":"sig1"}}}"#,
            r#"{"type":"model_msg","payload":{"type":"thinking","role":"assistant","thinking":"two","stop_reason":"completed","fidelity":{"signature":"sig2"}}}"#,
        ]
    );
}

#[test]
fn encrypted_reasoning_with_no_text_still_yields_a_complete_thinking() {
    assert_eq!(
        run(vec![think_f("", json!({"encrypted_content": "xyz"}))], None),
        ["thinking \"\" completed"]
    );
}

#[test]
fn text_signature_forces_a_new_segment() {
    assert_eq!(
        run(
            vec![text("a"), text_f("", json!({"signature": "s"})), text("b"),],
            None
        ),
        [
            "partial_text/start",
            "partial_text/delta \"a\"",
            "partial_text/stop completed",
            "text \"a\" completed",
            "partial_text/start",
            "partial_text/delta \"b\"",
            "partial_text/stop completed",
            "text \"b\" completed",
        ]
    );
}

#[test]
fn phase_change_forces_a_new_segment_and_a_phase_marker_alone_opens_one() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = Vec::new();
    for item in [
        text_f("", json!({"phase": "commentary"})),
        text("note"),
        text_f("", json!({"phase": "commentary"})),
        text("more"),
        text_f("", json!({"phase": "final_answer"})),
    ] {
        out.extend(t.translate(UniEvent::item(item)));
    }
    out.extend(t.finish());
    check_discipline(&out).unwrap();
    let completes: Vec<_> = without_timestamps(&out)
        .into_iter()
        .filter(|j| j.contains(r#""type":"text""#))
        .collect();
    // Same phase: one segment; the final_answer marker opens a segment with no text.
    assert_eq!(
        completes,
        [
            r#"{"type":"model_msg","payload":{"type":"text","role":"assistant","text":"notemore","stop_reason":"completed","fidelity":{"phase":"commentary"}}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"assistant","text":"","stop_reason":"completed","fidelity":{"phase":"final_answer"}}}"#,
        ]
    );
}

#[test]
fn streamed_tool_call_completes_with_the_complete_item() {
    assert_eq!(
        run(
            vec![
                text("Let me look."),
                ptc(Some("call_1"), Some("read"), ""),
                ptc(None, None, "{\"path\":"),
                ptc(None, None, " \"a\"}"),
                tc("call_1", "read", json!({"path": "a"})),
            ],
            Some("tool_call")
        ),
        [
            "partial_text/start",
            "partial_text/delta \"Let me look.\"",
            "partial_text/stop completed",
            "text \"Let me look.\" completed",
            "partial_tool_call/start read(call_1)",
            "partial_tool_call/delta \"{\\\"path\\\":\"",
            "partial_tool_call/delta \" \\\"a\\\"}\"",
            "partial_tool_call/stop completed",
            "tool_call read(call_1) {\"path\":\"a\"} completed",
        ]
    );
}

#[test]
fn partial_tool_call_without_any_id_is_skipped() {
    assert_eq!(
        run(vec![ptc(None, Some("x"), "{}")], None),
        Vec::<String>::new()
    );
}

#[test]
fn tool_call_without_id_is_skipped() {
    assert_eq!(
        run(vec![tc("", "x", json!({}))], None),
        Vec::<String>::new()
    );
}

#[test]
fn complete_tool_call_without_partials_emits_only_the_complete_message() {
    assert_eq!(
        run(vec![tc("fn", "lookup", Value::Null)], None),
        ["tool_call lookup(fn) {} completed"]
    );
}

#[test]
fn repeated_provider_id_is_a_new_call_with_a_suffix() {
    assert_eq!(
        run(
            vec![
                tc("search", "search", json!({"q": 1})),
                tc("search", "search", json!({"q": 2})),
            ],
            None
        ),
        [
            "tool_call search(search) {\"q\":1} completed",
            "tool_call search(search#2) {\"q\":2} completed",
        ]
    );
}

#[test]
fn unfinished_tool_calls_are_emitted_at_finish_in_first_seen_order() {
    assert_eq!(
        run(
            vec![
                ptc(Some("a"), Some("f"), "{\"x\":"),
                ptc(Some("b"), Some("g"), "{}"),
                ptc(Some("a"), None, "1}"),
            ],
            Some("tool_call")
        ),
        [
            "partial_tool_call/start f(a)",
            "partial_tool_call/delta \"{\\\"x\\\":\"",
            "partial_tool_call/start g(b)",
            "partial_tool_call/delta \"{}\"",
            "partial_tool_call/delta \"1}\"",
            "partial_tool_call/stop completed",
            "tool_call f(a) {\"x\":1} completed",
            "partial_tool_call/stop completed",
            "tool_call g(b) {} completed",
        ]
    );
}

#[test]
fn thinking_after_a_tool_call_opens_a_new_segment() {
    assert_eq!(
        run(
            vec![think("first"), tc("c1", "f", json!({})), think("second"),],
            None
        ),
        [
            "partial_thinking/start",
            "partial_thinking/delta \"first\"",
            "partial_thinking/stop completed",
            "thinking \"first\" completed",
            "tool_call f(c1) {} completed",
            "partial_thinking/start",
            "partial_thinking/delta \"second\"",
            "partial_thinking/stop completed",
            "thinking \"second\" completed",
        ]
    );
}

#[test]
fn interrupted_closes_everything_with_the_reason() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let mut out = Vec::new();
    for item in [text("par"), ptc(Some("c"), Some("f"), "{\"a\"")] {
        out.extend(t.translate(UniEvent::item(item)));
    }
    out.extend(t.translate(UniEvent::item(think("late"))));
    out.extend(t.finish_interrupted(StopReason::Timeout));
    check_discipline(&out).unwrap();
    assert_eq!(
        describe_all(&out),
        [
            "partial_text/start",
            "partial_text/delta \"par\"",
            "partial_text/stop completed",
            "text \"par\" completed",
            "partial_tool_call/start f(c)",
            "partial_tool_call/delta \"{\\\"a\\\"\"",
            "partial_thinking/start",
            "partial_thinking/delta \"late\"",
            "partial_thinking/stop timeout",
            "thinking \"late\" timeout",
            "partial_tool_call/stop timeout",
            "tool_call f(c) {\"a\" timeout",
        ]
    );
}

#[test]
fn usage_snapshots_replace_rather_than_add() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    for n in [5, 9] {
        t.translate(UniEvent {
            usage: Some(Usage {
                cached_tokens: 1,
                prompt_tokens: 10,
                thoughts_tokens: 2,
                response_tokens: n,
            }),
            ..UniEvent::default()
        });
    }
    assert_eq!(t.request_tokens(), TokenCounts::new(1, 10, 11));
    assert_eq!(t.request_tokens().total, 22);
}

#[test]
fn finish_reason_is_remembered_across_events() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    t.translate(UniEvent {
        finish_reason: Some("length".into()),
        ..UniEvent::default()
    });
    t.translate(UniEvent::item(text("x")));
    assert_eq!(t.finish_reason(), Some("length"));
}

#[test]
fn usage_to_token_counts_treats_missing_as_zero() {
    assert_eq!(
        usage_to_token_counts(&Usage::default()),
        TokenCounts::default()
    );
    let c = usage_to_token_counts(&Usage {
        cached_tokens: 3,
        prompt_tokens: 4,
        thoughts_tokens: 5,
        response_tokens: 6,
    });
    assert_eq!(
        (c.cache_read, c.uncached_prompt, c.output, c.total),
        (3, 4, 11, 18)
    );
}

#[test]
fn allocator_suffixes_reused_ids_and_is_shared_by_clones() {
    let a = ToolCallIdAllocator::new();
    let b = a.clone();
    assert_eq!(a.allocate("call_1"), "call_1");
    assert_eq!(b.allocate("call_1"), "call_1#2");
    a.register("f#3");
    assert_eq!(a.allocate("f"), "f");
    assert_eq!(a.allocate("f"), "f#2");
    assert_eq!(b.allocate("f"), "f#4");
}

#[test]
fn allocator_is_shared_across_translators() {
    let ids = ToolCallIdAllocator::new();
    let mut first = EventTranslator::new(ids.clone());
    let mut second = EventTranslator::new(ids);
    let a = describe_all(&first.translate(UniEvent::item(tc("get", "get", json!({})))));
    let b = describe_all(&second.translate(UniEvent::item(tc("get", "get", json!({})))));
    assert_eq!(a, ["tool_call get(get) {} completed"]);
    assert_eq!(b, ["tool_call get(get#2) {} completed"]);
}

#[test]
fn strip_suffix_removes_only_a_numeric_suffix() {
    assert_eq!(strip_suffix("call_1"), "call_1");
    assert_eq!(strip_suffix("f#2"), "f");
    assert_eq!(strip_suffix("f#12"), "f");
    assert_eq!(strip_suffix("f#"), "f#");
    assert_eq!(strip_suffix("f#x"), "f#x");
    assert_eq!(strip_suffix("a#1#2"), "a#1");
}

/// Feeds `items` one event each to a translator capped at `max` bytes per message, then ends
/// it the way the HTTP shell does: interrupted with the refusal's status once refused.
fn capped(max: usize, items: Vec<ContentItem>) -> (Vec<String>, Option<WireError>) {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new()).with_max_message_bytes(max);
    let mut out = Vec::new();
    for item in items {
        out.extend(t.translate(UniEvent::item(item)));
    }
    let refused = t.too_large().cloned();
    match &refused {
        Some(e) => out.extend(t.finish_interrupted(e.clone().into_outcome().status)),
        None => out.extend(t.finish()),
    }
    check_discipline(&out).unwrap_or_else(|e| panic!("{e}: {:#?}", describe_all(&out)));
    (describe_all(&out), refused)
}

fn refusal(e: Option<WireError>) -> String {
    match e {
        Some(WireError::TooLarge(m)) => m,
        other => panic!("expected a too-large refusal, got {other:?}"),
    }
}

#[test]
fn a_text_message_stops_at_its_cap_and_closes_with_what_was_streamed() {
    let (got, refused) = capped(10, vec![text("12345"), text("67890"), text("x"), text("y")]);
    assert_eq!(
        refusal(refused),
        "model output too large: a text message passed max_message_bytes (10 bytes); the rest of the response was not read"
    );
    assert_eq!(
        got,
        [
            "partial_text/start",
            "partial_text/delta \"12345\"",
            "partial_text/delta \"67890\"",
            "partial_text/stop failed",
            "text \"1234567890\" failed",
        ]
    );
    // Exactly at the cap is fine.
    let (_, refused) = capped(10, vec![text("12345"), text("67890")]);
    assert_eq!(refused, None);
}

#[test]
fn thinking_and_tool_arguments_are_capped_alike() {
    let (got, refused) = capped(8, vec![think("abcd"), think("efgh"), think("i")]);
    assert!(refusal(refused).contains("a thinking message passed max_message_bytes (8 bytes)"));
    assert_eq!(got[got.len() - 1], "thinking \"abcdefgh\" failed");

    let (got, refused) = capped(
        8,
        vec![
            ptc(Some("c1"), Some("write"), "{\"a\":"),
            ptc(None, None, "\"xyz\"}"),
        ],
    );
    assert!(
        refusal(refused).contains("the arguments of tool call c1 (write) passed"),
        "{got:?}"
    );
    assert_eq!(
        &got[got.len() - 2..],
        [
            "partial_tool_call/stop failed",
            "tool_call write(c1) {\"a\": failed"
        ]
    );

    // A call sent whole (Gemini, or a Responses item) is measured as it would be stored.
    let (got, refused) = capped(8, vec![tc("c2", "write", json!({"a": "xyz123"}))]);
    assert!(refusal(refused).contains("tool call c2 (write)"));
    assert_eq!(
        got,
        ["tool_call write(c2)  failed"],
        "closed, never dispatched"
    );
}

#[test]
fn nothing_is_translated_after_a_refusal() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new()).with_max_message_bytes(4);
    assert_eq!(t.translate(UniEvent::item(text("abcde"))), []);
    assert!(t.too_large().is_some());
    assert_eq!(
        t.translate(UniEvent {
            content_items: vec![think("a"), text("b"), tc("c", "f", json!({}))],
            ..UniEvent::default()
        }),
        []
    );
    assert_eq!(t.finish_interrupted(StopReason::Failed), []);
}

#[test]
fn the_response_in_all_is_capped_at_four_messages_worth() {
    // Alternating segments keep each message small; the response still may not grow forever.
    let items: Vec<ContentItem> = (0..9)
        .map(|i| {
            if i % 2 == 0 {
                text("12345")
            } else {
                think("12345")
            }
        })
        .collect();
    let (got, refused) = capped(10, items);
    assert_eq!(
        refusal(refused),
        "model output too large: the response's messages passed 40 bytes in all (4 × max_message_bytes); the rest of the response was not read"
    );
    assert_eq!(
        got.iter().filter(|m| m.contains("/delta")).count(),
        8,
        "{got:#?}"
    );
}

#[test]
fn the_default_cap_is_eight_mib() {
    let mut t = EventTranslator::new(ToolCallIdAllocator::new());
    let chunk = "x".repeat(1024 * 1024);
    for _ in 0..8 {
        t.translate(UniEvent::item(text(&chunk)));
    }
    assert!(t.too_large().is_none());
    t.translate(UniEvent::item(text("x")));
    assert!(refusal(t.too_large().cloned()).contains("(8 MiB)"));
}
