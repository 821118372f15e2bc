//! `McpEnvironment` against real MCP servers: the official `server-everything` over stdio,
//! Streamable HTTP and legacy SSE, `server-filesystem` over stdio, and the failure fixture
//! (`tests/mcp/fixture-server.mjs`). The servers are installed by
//! `scripts/install-mcp-servers.sh`; `cargo xtask ci` runs it and sets `PENGUIN_MCP_SERVERS`.
//! Without it these tests say so and do nothing, except the last two, which need only `python3`
//! (a scripted server for what no real server does on purpose).

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]
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

/// A stdio MCP server in a few lines of Python, for what no real server does on purpose: it
/// lists the tools named in its first argument (a JSON array of names; `pad-N` gets a
/// description of `N` bytes) and answers a call of `size-N` with a result whose JSON-RPC line
/// is exactly `N` bytes, its newline included; every other call with `ok`.
const SCRIPTED_SERVER: &str = r#"
import json, sys
names = json.loads(sys.argv[1])
out = sys.stdout.buffer
def send(msg):
    out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
    out.flush()
for line in sys.stdin.buffer:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, id = msg.get("method"), msg["id"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "scripted", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"},
             "description": "x" * int(n[4:]) if n.startswith("pad-") else n}
            for n in names]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name.startswith("size-"):
            size = int(name[5:])
            head = {"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": ""}]}}
            empty = len(json.dumps(head, separators=(",", ":"))) + 1
            head["result"]["content"][0]["text"] = "x" * (size - empty)
            line = json.dumps(head, separators=(",", ":")).encode() + b"\n"
            assert len(line) == size
            out.write(line)
            out.flush()
        elif name == "probe":
            # What this server can reach: a file to read, a file to write, its environment.
            args = msg["params"].get("arguments") or {}
            found = []
            try:
                found.append("read " + open(args["read"]).read())
            except OSError as e:
                found.append("read refused %d" % e.errno)
            try:
                open(args["write"], "w").write("x")
                found.append("write ok")
            except OSError as e:
                found.append("write refused %d" % e.errno)
            import os
            found.append("env " + " ".join(sorted(os.environ)))
            send({"jsonrpc": "2.0", "id": id,
                  "result": {"content": [{"type": "text", "text": "\n".join(found)}]}})
        else:
            send({"jsonrpc": "2.0", "id": id,
                  "result": {"content": [{"type": "text", "text": "ok"}]}})
    else:
        send({"jsonrpc": "2.0", "id": id, "result": {}})
"#;

/// A stdio entry running [`SCRIPTED_SERVER`] with these tool names; `None` (said on stderr)
/// without `python3`.
fn scripted(dir: &Path, name: &str, tools: &[&str]) -> Option<McpServerConfig> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        assert!(
            std::env::var_os("CI").is_none(),
            "no python3 for the scripted MCP server"
        );
        eprintln!("skipped: no python3 for the scripted MCP server");
        return None;
    }
    let script = dir.join("scripted-server.py");
    std::fs::write(&script, SCRIPTED_SERVER).unwrap();
    let tools = serde_json::to_string(tools).unwrap();
    Some(stdio(
        name,
        "python3",
        &[script.to_str().unwrap(), tools.as_str()],
    ))
}

/// Where a test's warnings go.
fn collect_warnings(env: McpEnvironment) -> (McpEnvironment, Arc<std::sync::Mutex<Vec<String>>>) {
    let warnings = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = warnings.clone();
    let env = env.with_warnings(Arc::new(move |w: &str| {
        sink.lock().unwrap().push(w.to_owned())
    }));
    (env, warnings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_a_model_api_would_refuse_are_left_out_with_a_warning() {
    let ws = tempfile::tempdir().unwrap();
    let long = "x".repeat(64 - "mcp__ev__".len() + 1);
    let fits = "y".repeat(64 - "mcp__ev__".len());
    let Some(ev) = scripted(
        ws.path(),
        "ev",
        &[
            "",
            "ok",
            "ok",
            "has space",
            "dot.ted",
            "é",
            &long,
            &fits,
            "fine-1",
            "x__y",
        ],
    ) else {
        return;
    };
    // `ev` + `x__y` and `ev__x` + `y` are both `mcp__ev__x__y`: the first in config order wins.
    let Some(clash) = scripted(ws.path(), "ev__x", &["y", "z"]) else {
        return;
    };
    let (env, warnings) = collect_warnings(env(ws.path(), &[ev, clash]));
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    assert_eq!(
        results.iter().map(|r| r.status).collect::<Vec<_>>(),
        [McpConnectStatus::Completed, McpConnectStatus::Completed],
        "{results:?}"
    );
    let names: Vec<String> = env
        .tools()
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with("mcp__"))
        .collect();
    let fits_name = format!("mcp__ev__{fits}");
    assert_eq!(
        names,
        [
            "mcp__ev__ok",
            fits_name.as_str(),
            "mcp__ev__fine-1",
            "mcp__ev__x__y",
            "mcp__ev__x__z"
        ]
    );
    assert_eq!(
        results.iter().map(|r| r.tools.clone()).collect::<Vec<_>>(),
        [Some(json!(4)), Some(json!(1))]
    );
    let warnings = warnings.lock().unwrap().clone();
    let expected = [
        ("\"ev\"", "\"\""),
        ("\"ev\"", "\"ok\" twice"),
        ("\"ev\"", "\"has space\""),
        ("\"ev\"", "\"dot.ted\""),
        ("\"ev\"", "\"é\""),
        ("\"ev\"", long.as_str()),
        ("\"ev__x\"", "\"y\""),
    ];
    assert_eq!(warnings.len(), expected.len(), "{warnings:#?}");
    for (warning, (server, tool)) in warnings.iter().zip(expected) {
        assert!(
            warning.contains(&format!("MCP server {server}")) && warning.contains(tool),
            "{warning:?} should name server {server} and tool {tool}"
        );
    }
    assert!(warnings[6].contains("\"ev\""), "{:?}", warnings[6]);
    // A call by the name an empty tool would have had is an unknown tool, not a call.
    let (out, stop) = call(&env, "mcp__ev__", json!({})).await;
    assert_eq!(
        (out.as_str(), stop),
        ("Unknown tool: mcp__ev__", StopReason::Failed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_16_mib_fails_the_call_at_once() {
    const MIB16: usize = 16 * 1024 * 1024;
    let ws = tempfile::tempdir().unwrap();
    let at_limit = format!("size-{MIB16}");
    let over = format!("size-{}", MIB16 + 1);
    let Some(mut big) = scripted(ws.path(), "big", &[&at_limit, &over, "ok"]) else {
        return;
    };
    // Far longer than the test may take: only the limit can end the call in time.
    big.timeout_ms = Some(60_000);
    // A tool list over the limit fails the connect as soon, well within its budget.
    let Some(huge) = scripted(ws.path(), "huge", &[&format!("pad-{}", MIB16 + 1)]) else {
        return;
    };
    let (env, warnings) = collect_warnings(env(ws.path(), &[big, huge]));
    let started = Instant::now();
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "the connect took {took:?}");
    assert_eq!(
        results.iter().map(|r| r.status).collect::<Vec<_>>(),
        [McpConnectStatus::Completed, McpConnectStatus::Failed],
        "{results:?}"
    );
    let error = results[1].error.as_deref().unwrap();
    assert!(error.contains("16 MiB"), "{error}");
    // Exactly 16 MiB, newline included, is still a message.
    let (out, stop) = call(&env, &format!("mcp__big__{at_limit}"), json!({})).await;
    assert_eq!(
        stop,
        StopReason::Completed,
        "{}",
        &out[..out.len().min(300)]
    );
    assert!(out.starts_with("xxxx"));
    let warned_before = warnings.lock().unwrap().len();
    let started = Instant::now();
    let (out, stop) = call(&env, &format!("mcp__big__{over}"), json!({})).await;
    let took = started.elapsed();
    assert_eq!(stop, StopReason::Failed, "{out}");
    assert!(took < Duration::from_secs(10), "the failure took {took:?}");
    assert!(
        out.contains("MCP server \"big\"") && out.contains("16 MiB"),
        "{out}"
    );
    // The connection is closed; the next call starts the server again and works.
    let (out, stop) = call(&env, "mcp__big__ok", json!({})).await;
    assert_eq!((out.as_str(), stop), ("ok", StopReason::Completed));
    let warnings = warnings.lock().unwrap();
    assert!(
        warnings[warned_before..]
            .iter()
            .any(|w| w.contains("\"big\" is gone; the server sent a message over 16 MiB")),
        "{warnings:#?}"
    );
}

/// A stdio server with `sandbox = true` runs in the session's sandbox, namespaces included:
/// penguin's data root is hidden from it and writes outside the workspace fail; confined or
/// not, it never inherits penguin's secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_is_confined_and_no_server_gets_penguins_secrets() {
    std::env::set_var("OPENAI_API_KEY", "sk-mcp-test");
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (ws, outside, tmp) = (root.join("ws"), root.join("outside"), root.join("tmp"));
    let data = ws.join(".penguin-data");
    for d in [&ws, &outside, &data, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(data.join("server-token"), "tok-mcp-secret").unwrap();
    let Some(mut confined) = scripted(&root, "sb", &["probe"]) else {
        return;
    };
    confined.sandbox = true;
    let Some(free) = scripted(&root, "free", &["probe"]) else {
        return;
    };
    let sandbox = Sandbox::resolve(&penguin_tools::SandboxRequest {
        mode: Some(penguin_tools::SandboxMode::WorkspaceWrite),
        strict: true,
        // Not the system temp directory, which holds `outside`.
        temp_dir: Some(tmp),
        protected: vec![data.clone()],
        ..Default::default()
    })
    .expect("this machine enforces the sandbox (scripts/install-sandbox.sh)");
    let builtin = BuiltinTools::new(&ws, ToolsConfig::default()).unwrap();
    let env = McpEnvironment::new(
        Arc::new(builtin),
        &[confined, free],
        &ws,
        sandbox,
        ToolsConfig::default(),
    );
    let results = env.connect(&CancellationToken::new()).await.unwrap();
    assert_eq!(
        results.iter().map(|r| r.status).collect::<Vec<_>>(),
        [McpConnectStatus::Completed, McpConnectStatus::Completed],
        "{results:?}"
    );
    let args = |name: &str| json!({"read": data.join("server-token"), "write": outside.join(name)});
    let (o, _) = call(&env, "mcp__sb__probe", args("sb.txt")).await;
    assert!(o.contains("read refused"), "{o}");
    assert!(o.contains("write refused"), "{o}");
    assert!(!outside.join("sb.txt").exists());
    assert!(!o.contains("OPENAI_API_KEY") && o.contains("PATH"), "{o}");
    let (o, _) = call(&env, "mcp__free__probe", args("free.txt")).await;
    assert!(
        o.contains("read tok-mcp-secret") && o.contains("write ok"),
        "{o}"
    );
    assert!(!o.contains("OPENAI_API_KEY") && o.contains("PATH"), "{o}");
}
