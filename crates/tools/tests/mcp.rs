//! `McpEnvironment` against real MCP servers: the official `server-everything` over stdio,
//! Streamable HTTP and legacy SSE, `server-filesystem` over stdio, and the failure fixture
//! (`tests/mcp/fixture-server.mjs`). The servers are installed by
//! `scripts/install-mcp-servers.sh`; `cargo xtask ci` runs it and sets `PENGUIN_MCP_SERVERS`.
//! Without it these tests say so and do nothing.
#![cfg(feature = "mcp")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use penguin_engine::{CancellationToken, Environment, Permission, ToolCallRequest};
use penguin_omni_protocol::{
    build, McpConnectStatus, ModelPayload, OmniMessage, StopReason, StreamEventType,
};
use penguin_tools::mcp::{McpEnvironment, McpServerConfig};
use penguin_tools::{BuiltinTools, Sandbox, ToolsConfig};
use serde_json::json;

#[path = "../../../tests/mcp/support.rs"]
mod support;
use support::{bin, everything_http, fixture, servers_dir};

/// The connect budget of the servers that are meant to connect: the npm servers load slowly
/// on a busy machine, well past the 10 s default. Tests of a short budget set their own.
const CONNECT_TIMEOUT_MS: Option<u64> = Some(60_000);

fn stdio(name: &str, command: &str, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        command: Some(command.into()),
        args: args.iter().map(|s| s.to_string()).collect(),
        connect_timeout_ms: CONNECT_TIMEOUT_MS,
        ..McpServerConfig::default()
    }
}

fn env(ws: &Path, servers: &[McpServerConfig]) -> McpEnvironment {
    let builtin = BuiltinTools::new(ws, ToolsConfig::default()).unwrap();
    McpEnvironment::new(
        Arc::new(builtin),
        servers,
        ws,
        Sandbox::off(),
        ToolsConfig::default(),
    )
}

/// Runs one call; checks start → delta* → stop → one complete; returns output and stop.
async fn call(env: &McpEnvironment, name: &str, args: serde_json::Value) -> (String, StopReason) {
    call_with(env, name, args, CancellationToken::new()).await
}

async fn call_with(
    env: &McpEnvironment,
    name: &str,
    args: serde_json::Value,
    cancel: CancellationToken,
) -> (String, StopReason) {
    let request = ToolCallRequest {
        call: build::tool_call(name, args.to_string(), "c1", StopReason::Completed, None),
        cancel,
        approver: None,
        thinking_level: None,
    };
    let mut sink: Vec<OmniMessage> = Vec::new();
    env.execute(request, &mut sink).await;
    let completes: Vec<_> = sink
        .iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::ToolCallOutput(o)) => Some(o.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(completes.len(), 1, "{sink:#?}");
    let streamed: String = sink
        .iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::PartialToolCallOutput(p))
                if p.event_type == StreamEventType::Delta =>
            {
                Some(p.output.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(streamed, completes[0].output);
    (
        completes[0].output.clone(),
        completes[0].stop_reason.unwrap_or(StopReason::Completed),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_stdio_lists_calls_and_maps_results() {
    let Some(dir) = servers_dir() else { return };
    let ws = tempfile::tempdir().unwrap();
    let env = env(
        ws.path(),
        &[stdio("ev", &bin(&dir, "mcp-server-everything"), &["stdio"])],
    );
    assert_eq!(env.connect_servers(), ["ev"]);
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(
        results[0].status,
        McpConnectStatus::Completed,
        "{results:?}"
    );
    assert_eq!(results[0].transport, "stdio");
    let names: Vec<String> = env.tools().into_iter().map(|t| t.name).collect();
    assert!(names.contains(&"exec_command".to_owned()));
    assert!(names.contains(&"mcp__ev__echo".to_owned()), "{names:?}");
    let echo = env
        .tools()
        .into_iter()
        .find(|t| t.name == "mcp__ev__echo")
        .unwrap();
    assert_eq!(
        echo.parameters.unwrap()["properties"]["message"]["type"],
        "string"
    );
    assert_eq!(env.permission("mcp__ev__echo"), Permission::Read);
    assert_eq!(
        env.permission("mcp__ev__gzip-file-as-resource"),
        Permission::ReadWrite
    );
    let (out, stop) = call(&env, "mcp__ev__echo", json!({"message": "hi penguin"})).await;
    assert_eq!(
        (out.as_str(), stop),
        ("Echo: hi penguin", StopReason::Completed)
    );
    let (out, _) = call(&env, "mcp__ev__get-sum", json!({"a": 2, "b": 40})).await;
    assert!(out.contains("42"), "{out}");
    let (out, stop) = call(&env, "mcp__ev__get-resource-links", json!({"count": 2})).await;
    assert_eq!(stop, StopReason::Completed);
    assert!(out.contains("[resource: "), "{out}");
    // A schema violation is the server's error result: failed, with its message.
    let (out, stop) = call(&env, "mcp__ev__get-sum", json!({"a": "two"})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(!out.is_empty());
    // Connecting again returns the same results without reconnecting.
    assert_eq!(
        env.connect(&CancellationToken::new()).await.unwrap(),
        results
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_over_streamable_http_and_legacy_sse() {
    let Some(dir) = servers_dir() else { return };
    let (_http, http_port) = everything_http(&dir, "streamableHttp");
    let (_sse, sse_port) = everything_http(&dir, "sse");
    let ws = tempfile::tempdir().unwrap();
    let servers = [
        McpServerConfig {
            name: "web".into(),
            url: Some(format!("http://127.0.0.1:{http_port}/mcp")),
            headers: [("X-Penguin".to_owned(), "1".to_owned())].into(),
            connect_timeout_ms: CONNECT_TIMEOUT_MS,
            ..McpServerConfig::default()
        },
        McpServerConfig {
            name: "old".into(),
            transport: Some("sse".into()),
            url: Some(format!("http://127.0.0.1:{sse_port}/sse")),
            connect_timeout_ms: CONNECT_TIMEOUT_MS,
            ..McpServerConfig::default()
        },
    ];
    let env = env(ws.path(), &servers);
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    let kinds: Vec<_> = results
        .iter()
        .map(|r| (r.transport.as_str(), r.status))
        .collect();
    assert_eq!(
        kinds,
        [
            ("http", McpConnectStatus::Completed),
            ("sse", McpConnectStatus::Completed)
        ],
        "{results:?}"
    );
    let (out, _) = call(&env, "mcp__web__echo", json!({"message": "over http"})).await;
    assert_eq!(out, "Echo: over http");
    let (out, _) = call(&env, "mcp__old__echo", json!({"message": "over sse"})).await;
    assert_eq!(out, "Echo: over sse");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_reads_and_reports_errors() {
    let Some(dir) = servers_dir() else { return };
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hello from the workspace\n").unwrap();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let env = env(
        ws.path(),
        &[stdio(
            "fs",
            &bin(&dir, "mcp-server-filesystem"),
            &[root.to_str().unwrap()],
        )],
    );
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    assert_eq!(
        results[0].status,
        McpConnectStatus::Completed,
        "{results:?}"
    );
    let path = root.join("hello.txt");
    let (out, stop) = call(
        &env,
        "mcp__fs__read_text_file",
        json!({"path": path.to_str().unwrap()}),
    )
    .await;
    assert_eq!(
        (out.as_str(), stop),
        ("hello from the workspace\n", StopReason::Completed)
    );
    assert_eq!(env.permission("mcp__fs__read_text_file"), Permission::Read);
    assert_eq!(env.permission("mcp__fs__write_file"), Permission::ReadWrite);
    let (out, stop) = call(
        &env,
        "mcp__fs__read_text_file",
        json!({"path": root.join("missing.txt").to_str().unwrap()}),
    )
    .await;
    assert_eq!(stop, StopReason::Failed);
    assert!(
        out.contains("missing.txt") || out.contains("ENOENT"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_results_not_errors() {
    let Some(_dir) = servers_dir() else { return };
    let ws = tempfile::tempdir().unwrap();
    let mut silent = stdio("silent", "node", &[&fixture(), "silent"]);
    silent.connect_timeout_ms = Some(300);
    let servers = [
        silent,
        stdio("fx", "node", &[&fixture(), "tools"]),
        stdio("missing", "/nonexistent/mcp-server", &[]),
        McpServerConfig {
            name: "bad name".into(),
            command: Some("x".into()),
            ..McpServerConfig::default()
        },
    ];
    let env = env(ws.path(), &servers);
    assert_eq!(env.config_warnings().len(), 1);
    let started = Instant::now();
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    // The silent server costs its 300 ms budget, not forever.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let statuses: Vec<_> = results
        .iter()
        .map(|r| (r.server.as_str(), r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("silent", McpConnectStatus::Failed),
            ("fx", McpConnectStatus::Completed),
            ("missing", McpConnectStatus::Failed)
        ]
    );
    assert!(
        results[0].error.as_deref().unwrap().contains("300 ms"),
        "{results:?}"
    );
    assert!(results[2]
        .error
        .as_deref()
        .unwrap()
        .contains("cannot start"));

    let (out, stop) = call(&env, "mcp__fx__fail", json!({})).await;
    assert_eq!(
        (out.as_str(), stop),
        ("the fixture refused: bad input", StopReason::Failed)
    );

    let (pid_before, _) = call(&env, "mcp__fx__pid", json!({})).await;
    let (out, stop) = call(&env, "mcp__fx__crash", json!({})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(out.contains("MCP server \"fx\""), "{out}");
    // The next call restarts it: a new process answers.
    let (pid_after, stop) = call(&env, "mcp__fx__pid", json!({})).await;
    assert_eq!(stop, StopReason::Completed);
    assert_ne!(pid_before, pid_after);

    // An interrupt mid-call closes the call out as aborted.
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let (out, stop) = call_with(&env, "mcp__fx__slow", json!({"ms": 30000}), cancel).await;
    assert_eq!(stop, StopReason::Aborted, "{out}");

    let (out, stop) = call(&env, "mcp__fx__nope", json!({})).await;
    assert_eq!(
        (out.as_str(), stop),
        ("Unknown tool: mcp__fx__nope", StopReason::Failed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_connect_keeps_nothing_and_the_next_one_connects() {
    let Some(_dir) = servers_dir() else { return };
    let ws = tempfile::tempdir().unwrap();
    let mut silent = stdio("silent", "node", &[&fixture(), "silent"]);
    // Long enough that only the cancel can end the first connect in time, however slow the
    // machine; the second connect waits it out.
    silent.connect_timeout_ms = Some(5000);
    let env = env(
        ws.path(),
        &[silent, stdio("fx", "node", &[&fixture(), "tools"])],
    );
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    assert_eq!(env.connect(&cancel).await, None);
    assert!(started.elapsed() < Duration::from_millis(4500));
    assert!(!env.tools().iter().any(|t| t.name.starts_with("mcp__")));
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    let statuses: Vec<_> = results.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [McpConnectStatus::Failed, McpConnectStatus::Completed]
    );
    let (out, stop) = call(&env, "mcp__fx__slow", json!({"ms": 1})).await;
    assert_eq!((out.as_str(), stop), ("slept 1 ms", StopReason::Completed));
}
