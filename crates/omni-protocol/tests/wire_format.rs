//! The exact serialized bytes of every message kind (insta snapshots), and parse errors that
//! name the offending field.

use penguin_omni_protocol::build::{self, RetryDetail};
use penguin_omni_protocol::StreamEventType::{Delta, Start, Stop};
use penguin_omni_protocol::*;
use serde_json::json;

/// Builders stamp `now`; snapshots need a fixed instant.
fn at(mut msg: OmniMessage) -> OmniMessage {
    msg.timestamp = Timestamp::from_unix_millis(1_784_344_222_531);
    msg
}

fn fidelity() -> Fidelity {
    let Some(map) = json!({"signature": "sig==", "phase": "final"})
        .as_object()
        .cloned()
    else {
        unreachable!("a JSON object literal")
    };
    map
}

fn snap(name: &str, msg: OmniMessage) {
    let json = at(msg).to_json();
    // Whatever is snapshotted must also read back to itself.
    assert_eq!(
        OmniMessage::from_json(&json).expect("parses").to_json(),
        json
    );
    insta::assert_snapshot!(name, json);
}

#[test]
fn session_meta() {
    snap(
        "session_meta",
        build::session_meta(SessionMeta {
            session_id: "session-2026-07-18-05-10-22-0a1b2c3d".into(),
            provider: "openai".into(),
            model_id: "gpt-x".into(),
            model_context_window: ContextWindow::Other("unknown".into()),
            system_prompt: "You are penguin.".into(),
            agent_state: "/home/u/.penguin/agents/main/agent_state".into(),
            workspace: "/home/u/project".into(),
            source: Some("subagent".into()),
            forked_from: None,
        })
        .with_origin("session-child"),
    );
}

#[test]
fn complete_model_messages() {
    snap("text_user", build::user_text("Read a.txt"));
    snap(
        "text_user_sender",
        build::user_text_from(
            "[background_task_done]\nid: 1\n[/background_task_done]",
            TextSender::Harness,
        ),
    );
    snap(
        "text_assistant_fidelity",
        build::assistant_text_with("Done.", StopReason::Completed, Some(fidelity())),
    );
    snap(
        "image_url",
        build::image_url("https://example.invalid/cat.png"),
    );
    snap(
        "inline_data",
        OmniMessage::new(Body::Model(ModelPayload::InlineData(InlineData {
            role: Role::User,
            data: "aGVsbG8=".into(),
            mime_type: "text/plain".into(),
            stop_reason: Some(StopReason::Completed),
            fidelity: None,
        }))),
    );
    snap(
        "thinking",
        build::thinking("Need two files.", StopReason::Completed, Some(fidelity())),
    );
    snap(
        "inline_thinking",
        OmniMessage::new(Body::Model(ModelPayload::InlineThinking(InlineData {
            role: Role::Assistant,
            data: "ZW5jcnlwdGVk".into(),
            mime_type: "application/octet-stream".into(),
            stop_reason: Some(StopReason::Completed),
            fidelity: Some(Box::new(fidelity())),
        }))),
    );
    snap(
        "tool_call",
        build::tool_call(
            "read_file",
            r#"{"path":"a.txt"}"#,
            "call_a",
            StopReason::Completed,
            None,
        ),
    );
    snap(
        "tool_call_output_images",
        build::tool_call_output_with_images(
            "a picture",
            "call_a",
            StopReason::Completed,
            vec!["data:image/png;base64,iVBORw0KGgo=".into()],
        ),
    );
    snap(
        "tool_call_output_denied",
        build::tool_call_output("Tool call denied by user.", "call_b", StopReason::Aborted),
    );
}

#[test]
fn partial_messages() {
    snap(
        "partial_text_start",
        build::partial_text(Start, "", StopReason::Completed),
    );
    snap(
        "partial_thinking_delta",
        build::partial_thinking(Delta, "Need", StopReason::Completed),
    );
    snap(
        "partial_tool_call_start",
        build::partial_tool_call(Start, "read_file", "", "call_a", StopReason::Completed),
    );
    snap(
        "partial_tool_call_output_stop",
        build::partial_tool_call_output(Stop, "", "call_a", StopReason::Aborted),
    );
}

#[test]
fn event_messages() {
    snap(
        "approval_decision",
        build::approval_decision(ApprovalDecision::Forbidden, "call_a"),
    );
    snap("abort_null_reason", build::abort(None));
    snap("abort", build::abort(Some("aborted by user".into())));
    snap("request_begin", build::request_begin());
    snap(
        "request_end_retry",
        build::request_end(
            StopReason::Timeout,
            RetryDetail {
                error_message: Some("idle timeout".into()),
                attempt: Some(1),
                retry_in_ms: Some(2000),
            },
        ),
    );
    snap(
        "request_end_completed",
        build::request_end(StopReason::Completed, RetryDetail::default()),
    );
    snap(
        "token_usage",
        build::token_usage(TokenCounts::new(10, 20, 5), TokenCounts::new(1, 2, 3)),
    );
    snap(
        "compaction_begin",
        build::compaction_begin(
            CompactionReason::Context,
            CompactionMode::Summarize,
            125_952,
            7,
        ),
    );
    snap(
        "compaction_end",
        build::compaction_end(
            CompactionReason::Manual,
            CompactionMode::Summarize,
            StopReason::Failed,
            RetryDetail {
                error_message: Some("the response contained no usable summary".into()),
                attempt: Some(2),
                retry_in_ms: Some(999),
            },
        ),
    );
    snap(
        "goal_finished",
        OmniMessage::new(Body::Event(EventPayload::GoalFinished {
            outcome: GoalOutcomeStatus::BudgetLimited,
            rounds: 3,
            tokens_used: 12_345,
        })),
    );
    snap("subagent", build::subagent("session-child"));
    snap(
        "tool_list_ready",
        build::tool_list_ready(vec![
            ToolDefinition {
                name: "read_file".into(),
                description: "Reads a file.".into(),
                parameters: Some(
                    json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                ),
            },
            ToolDefinition {
                name: "noop".into(),
                description: "Does nothing.".into(),
                parameters: None,
            },
        ]),
    );
    snap(
        "mcp_connect_begin",
        OmniMessage::new(Body::Event(EventPayload::McpConnectBegin {
            servers: vec!["files".into(), "web".into()],
        })),
    );
    snap(
        "mcp_connect_end",
        OmniMessage::new(Body::Event(EventPayload::McpConnectEnd {
            status: McpConnectStatus::Failed,
            results: vec![
                McpConnectResult {
                    server: "files".into(),
                    transport: "stdio".into(),
                    status: McpConnectStatus::Completed,
                    duration_ms: 42,
                    tools: Some(json!(["read_file"])),
                    error: None,
                },
                McpConnectResult {
                    server: "web".into(),
                    transport: "http".into(),
                    status: McpConnectStatus::Failed,
                    duration_ms: 10_000,
                    tools: None,
                    error: Some("connect timeout".into()),
                },
            ],
        })),
    );
    snap(
        "approval_decision_nested_origin",
        build::approval_decision(ApprovalDecision::Allow, "call_c")
            .with_origin("session-grandchild")
            .with_origin("session-child"),
    );
}

fn parse_error(json: &str) -> ParseError {
    match OmniMessage::from_json(json) {
        Ok(m) => panic!("{json} parsed as {m:?}"),
        Err(e) => e,
    }
}

#[test]
fn parse_errors_name_the_field() {
    const TS: &str = r#""timestamp":"2026-07-18T03:10:22.531Z""#;
    let cases = [
        (
            format!(r#"{{{TS},"type":"model_msg","payload":{{"type":"text","role":"user"}}}}"#),
            "payload.text",
        ),
        (
            format!(
                r#"{{{TS},"type":"model_msg","payload":{{"type":"tool_call_output","role":"user","output":"x"}}}}"#
            ),
            "payload.tool_call_id",
        ),
        (
            format!(r#"{{{TS},"type":"event_msg","payload":{{"type":"request_end"}}}}"#),
            "payload.status",
        ),
        (
            format!(r#"{{{TS},"type":"log_msg","payload":{{}}}}"#),
            "type",
        ),
        (
            format!(r#"{{{TS},"payload":{{"type":"request_begin"}}}}"#),
            "type",
        ),
        (
            format!(
                r#"{{{TS},"type":"event_msg","payload":{{"type":"request_begin"}},"origin":"child"}}"#
            ),
            "origin",
        ),
        (
            format!(
                r#"{{{TS},"type":"event_msg","payload":{{"type":"request_begin"}},"origin":["child",7]}}"#
            ),
            "origin[1]",
        ),
        (
            format!(r#"{{{TS},"type":"event_msg","payload":{{}}}}"#),
            "payload.type",
        ),
        (
            format!(r#"{{{TS},"type":"event_msg","payload":{{"type":"coffee_break"}}}}"#),
            "payload.type",
        ),
        (format!(r#"{{{TS},"type":"event_msg"}}"#), "payload"),
        (
            r#"{"type":"event_msg","payload":{"type":"request_begin"}}"#.to_owned(),
            "timestamp",
        ),
    ];
    for (json, field) in cases {
        let err = parse_error(&json);
        assert_eq!(err.path, field, "{json}: {err}");
        assert!(err.to_string().starts_with(&format!("{field}: ")), "{err}");
    }
    let unknown = parse_error(&format!(r#"{{{TS},"type":"log_msg","payload":{{}}}}"#));
    assert!(unknown.message.contains("\"log_msg\""), "{unknown}");
    let bad_enum = parse_error(&format!(
        r#"{{{TS},"type":"event_msg","payload":{{"type":"request_end","status":"exploded"}}}}"#
    ));
    assert!(bad_enum.message.contains("exploded"), "{bad_enum}");
    assert!(parse_error("[1]").to_string().contains("object"));
    assert!(parse_error("{").to_string().contains("invalid JSON"));
}

#[test]
fn parse_errors_name_nested_and_enum_fields() {
    const TS: &str = r#""timestamp":"2026-07-18T03:10:22.531Z""#;
    let cases = [
        (
            r#"{"type":"request_end","status":"exploded"}"#,
            "payload.status",
        ),
        (
            r#"{"type":"approval_decision","decision":"maybe","tool_call_id":"a"}"#,
            "payload.decision",
        ),
        (
            r#"{"type":"token_usage","session":{"cache_read":1,"cache_write":1,"output":1,"total":3},"request":{"cache_read":1}}"#,
            "payload.request.cache_write",
        ),
        (
            r#"{"type":"tool_list_ready","tools":[{"name":"a","description":"b"},{"name":"c"}]}"#,
            "payload.tools[1].description",
        ),
        (
            r#"{"type":"mcp_connect_end","status":"completed","results":[{"server":"s","status":"completed","duration_ms":1}]}"#,
            "payload.results[0].transport",
        ),
        (
            r#"{"type":"mcp_connect_end","status":"completed","results":[{"server":"s","transport":"stdio","status":"late","duration_ms":1}]}"#,
            "payload.results[0].status",
        ),
        (
            r#"{"type":"compaction_begin","reason":"context","mode":"summarize","context":"big","turns":1}"#,
            "payload.context",
        ),
        (
            r#"{"type":"goal_finished","outcome":"complete","rounds":true,"tokens_used":1}"#,
            "payload.rounds",
        ),
    ];
    for (payload, field) in cases {
        let json = format!(r#"{{{TS},"type":"event_msg","payload":{payload}}}"#);
        let err = parse_error(&json);
        assert_eq!(err.path, field, "{json}: {err}");
    }
    let model = [
        (
            r#"{"type":"text","role":"robot","text":"x"}"#,
            "payload.role",
        ),
        (r#"{"type":"text","role":"user","text":5}"#, "payload.text"),
        (
            r#"{"type":"tool_call_output","role":"user","output":"x","tool_call_id":"a","stop_reason":"meh"}"#,
            "payload.stop_reason",
        ),
        (
            r#"{"type":"partial_text","role":"assistant","event_type":"middle","text":""}"#,
            "payload.event_type",
        ),
    ];
    for (payload, field) in model {
        let json = format!(r#"{{{TS},"type":"model_msg","payload":{payload}}}"#);
        let err = parse_error(&json);
        assert_eq!(err.path, field, "{json}: {err}");
    }
}
