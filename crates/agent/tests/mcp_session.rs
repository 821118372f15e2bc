//! The connect phase of a session whose tools must be connected first (MCP), with a stand-in
//! environment so the timing is exact: where the pair and `tool_list_ready` go on the stream
//! and in the Trace, an interrupt during the connect, and the next run connecting again.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_agent::session::{Session, SessionSpec};
use penguin_engine::{
    CancellationToken, Environment, MessageSink, Permission, RunOptions, ToolCallRequest,
};
use penguin_llm_providers::scripted::ScriptedModel;
use penguin_omni_protocol::validator::StreamValidator;
use penguin_omni_protocol::{
    build, EventPayload, McpConnectResult, McpConnectStatus, ModelPayload, OmniMessage, StopReason,
    ToolDefinition,
};
use penguin_trace_store::{read_trace, ReadMode, TraceLocation};
use serde_json::json;

/// Connects "files": the first attempt only ends when cancelled, later ones succeed at once.
#[derive(Default)]
struct Gate {
    attempts: AtomicUsize,
    connected: std::sync::Mutex<bool>,
}

#[async_trait]
impl Environment for Gate {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let id = request.tool_call().tool_call_id.clone();
        sink.emit(build::tool_call_output("pong", id, StopReason::Completed))
            .await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = vec![ToolDefinition {
            name: "read_file".into(),
            description: "built in".into(),
            parameters: None,
        }];
        if *self.connected.lock().unwrap() {
            tools.push(ToolDefinition {
                name: "mcp__files__ping".into(),
                description: "from the server".into(),
                parameters: Some(json!({"type": "object"})),
            });
        }
        tools
    }

    fn permission(&self, _name: &str) -> Permission {
        Permission::Read
    }

    fn connect_servers(&self) -> Vec<String> {
        vec!["files".into()]
    }

    async fn connect(&self, cancel: &CancellationToken) -> Option<Vec<McpConnectResult>> {
        if self.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
            cancel.cancelled().await;
            return None;
        }
        *self.connected.lock().unwrap() = true;
        Some(vec![McpConnectResult {
            server: "files".into(),
            transport: "stdio".into(),
            status: McpConnectStatus::Completed,
            duration_ms: 3,
            tools: Some(json!(1)),
            error: None,
        }])
    }
}

fn event_type(m: &OmniMessage) -> &'static str {
    m.payload_type()
}

#[tokio::test]
async fn the_connect_pair_leads_the_first_run_and_follows_its_input_in_the_trace() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let model = ScriptedModel::from_json(&json!([
        {"stream": [
            {"message": {"type": "model_msg", "payload": {"type": "tool_call", "role": "assistant", "name": "mcp__files__ping", "arguments": "{}", "tool_call_id": "c1", "stop_reason": "completed"}}},
            {"message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}}}}
        ]},
        {"stream": [
            {"message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "done", "stop_reason": "completed"}}},
            {"message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 20}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}}}}
        ]},
        {"stream": [
            {"message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "again", "stop_reason": "completed"}}},
            {"message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 30}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}}}}
        ]}
    ]))
    .unwrap();
    let spec = SessionSpec::new(
        TraceLocation::new(home.path().to_path_buf(), "default", "penguin"),
        ws.path().to_path_buf(),
    )
    .with_model("scripted", "scenario")
    .with_system_prompt("test");
    let env = Arc::new(Gate::default());
    let mut session = Session::create(spec, Box::new(model.clone()), env.clone()).unwrap();
    let mut stream_all: Vec<OmniMessage> = Vec::new();

    // Run 1: interrupted once the connect has begun.
    let cancel = CancellationToken::new();
    let first = build::user_text("first");
    let options = RunOptions::new(Arc::new(penguin_engine::AllowAll)).with_cancel(cancel.clone());
    let mut run = session.run(vec![first.clone()], options).unwrap();
    let begin = run.next().await.unwrap();
    assert_eq!(event_type(begin.message()), "mcp_connect_begin");
    // Nothing else may start while the connect is in flight.
    assert!(session
        .run(
            vec![build::user_text("x")],
            RunOptions::new(Arc::new(penguin_engine::DenyAll))
        )
        .is_err());
    cancel.cancel();
    let rest: Vec<OmniMessage> = run.map(|f| f.message().clone()).collect().await;
    assert_eq!(
        rest.iter().map(event_type).collect::<Vec<_>>(),
        ["mcp_connect_end", "abort"]
    );
    assert!(matches!(
        rest[0].event(),
        Some(EventPayload::McpConnectEnd { status: McpConnectStatus::Aborted, results }) if results.is_empty()
    ));
    assert!(
        matches!(rest[1].event(), Some(EventPayload::Abort { reason: Some(r) }) if r == "user")
    );
    stream_all.push(begin.message().clone());
    stream_all.extend(rest);

    // Run 2: connects again; the first input is delivered with the second.
    let second = build::user_text("second");
    let options = RunOptions::new(Arc::new(penguin_engine::AllowAll));
    let frames: Vec<OmniMessage> = session
        .run(vec![second.clone()], options)
        .unwrap()
        .map(|f| f.message().clone())
        .collect()
        .await;
    let types: Vec<_> = frames.iter().map(event_type).collect();
    assert_eq!(
        &types[..4],
        [
            "mcp_connect_begin",
            "mcp_connect_end",
            "tool_list_ready",
            "request_begin"
        ]
    );
    let Some(EventPayload::ToolListReady { tools }) = frames[2].event() else {
        unreachable!()
    };
    assert!(tools.iter().any(|t| t.name == "mcp__files__ping"));
    assert_eq!(types.last(), Some(&"request_end"));
    stream_all.extend(frames.iter().cloned());
    assert_eq!(
        StreamValidator::validate(&stream_all),
        Vec::new(),
        "{stream_all:#?}"
    );
    let requests = model.requests();
    let texts: Vec<String> = requests[0]
        .iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::Text(t)) => Some(t.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["first", "second"]);

    // A later run has no connect phase.
    let later: Vec<OmniMessage> = session
        .run(
            vec![build::user_text("third")],
            RunOptions::new(Arc::new(penguin_engine::DenyAll)),
        )
        .unwrap()
        .map(|f| f.message().clone())
        .collect()
        .await;
    assert_eq!(later.first().map(event_type), Some("request_begin"));
    assert!(!later.iter().any(|m| event_type(m).starts_with("mcp_")));
    assert!(!later.iter().any(|m| event_type(m) == "tool_list_ready"));

    session.writer().flush().unwrap();
    let trace = read_trace(&session.writer().current_path(), ReadMode::Strict)
        .unwrap()
        .messages;
    let shown: Vec<String> = trace
        .iter()
        .map(|m| match m.model() {
            Some(ModelPayload::Text(t)) => format!("text:{}", t.text),
            _ => event_type(m).to_owned(),
        })
        .collect();
    assert_eq!(
        &shown[..11],
        [
            "session_meta",
            "text:first",
            "mcp_connect_begin",
            "mcp_connect_end",
            "abort",
            "text:second",
            "mcp_connect_begin",
            "mcp_connect_end",
            "tool_list_ready",
            "request_begin",
            "tool_call",
        ],
        "{shown:#?}"
    );
    assert_eq!(
        shown.iter().filter(|s| *s == "text:first").count(),
        1,
        "the carried input is written once"
    );
    let Some(EventPayload::ToolListReady { tools }) = trace[8].event() else {
        unreachable!()
    };
    assert!(tools.iter().any(|t| t.name == "mcp__files__ping"));
}
