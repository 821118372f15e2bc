//! `penguin run` with real MCP servers: a scripted model (`--real-tools`) whose `mcp__…` calls
//! go to `server-everything` (stdio and Streamable HTTP), `server-filesystem` (stdio) and the
//! failure fixture, every stream checked by the StreamValidator and every trace read back.
//! The servers come from `scripts/install-mcp-servers.sh`; `cargo xtask ci` runs it and sets
//! `PENGUIN_MCP_SERVERS`. Without it these tests say so and do nothing.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use penguin::omni_protocol::validator::validate_jsonl;
use penguin::omni_protocol::{EventPayload, McpConnectStatus, ModelPayload, OmniMessage};
use serde_json::{json, Value};

#[path = "../../../tests/mcp/support.rs"]
mod support;
use support::{bin, everything_http, fixture, servers_dir};

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"message": {"type": "model_msg", "payload": {"type": "tool_call", "role": "assistant", "name": name, "arguments": args.to_string(), "tool_call_id": id, "stop_reason": "completed"}}})
}

fn usage() -> Value {
    json!({"message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}}}})
}

fn text(t: &str) -> Value {
    json!({"message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": t, "stop_reason": "completed"}}})
}

/// A scenario whose model makes `turns` of calls, then says "done".
fn scenario(dir: &Path, turns: Vec<Vec<Value>>) -> PathBuf {
    let mut llm: Vec<Value> = turns
        .into_iter()
        .map(|calls| {
            let mut stream = calls;
            stream.push(usage());
            json!({"stream": stream})
        })
        .collect();
    llm.push(json!({"stream": [text("done"), usage()]}));
    let path = dir.join("scenario.json");
    let sc = json!({"description": "mcp", "llm": llm, "tools": {}, "runs": []});
    std::fs::write(&path, sc.to_string()).unwrap();
    path
}

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Env {
    fn new(config: &str) -> Env {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        Env {
            home,
            ws: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_penguin"));
        cmd.env("PENGUIN_HOME", self.home.path())
            .env_remove("PENGUIN_MODEL")
            .env_remove("PENGUIN_PROVIDER")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `penguin run --jsonl --yes --provider scripted --real-tools` of `scenario`.
    fn run(&self, scenario: &Path, extra: &[&str]) -> Output {
        let ws = self.ws.path().to_str().unwrap().to_owned();
        let sc = scenario.to_str().unwrap().to_owned();
        let mut args = vec![
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
            &sc,
            "--real-tools",
            "--workspace",
            &ws,
        ];
        args.extend_from_slice(extra);
        args.push("use the servers");
        let mut child = self.cmd(&args).spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"").unwrap();
        child.wait_with_output().unwrap()
    }

    fn trace(&self) -> Vec<OmniMessage> {
        let mut stack = vec![self.home.path().to_path_buf()];
        let mut files = Vec::new();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "jsonl") {
                    files.push(p);
                }
            }
        }
        assert_eq!(files.len(), 1, "{files:?}");
        std::fs::read_to_string(&files[0])
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn parse(stdout: &[u8]) -> Vec<OmniMessage> {
    let report = validate_jsonl(stdout);
    assert!(report.is_ok(), "{report:?}");
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn types(msgs: &[OmniMessage]) -> Vec<&str> {
    msgs.iter().map(OmniMessage::payload_type).collect()
}

/// The complete output of each call id: (output, stop reason).
fn outputs(msgs: &[OmniMessage]) -> std::collections::BTreeMap<String, (String, String)> {
    msgs.iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::ToolCallOutput(o)) => Some((
                o.tool_call_id.clone(),
                (
                    o.output.clone(),
                    serde_json::to_value(o.stop_reason)
                        .unwrap()
                        .as_str()
                        .unwrap_or("completed")
                        .to_owned(),
                ),
            )),
            _ => None,
        })
        .collect()
}

fn connect_end(msgs: &[OmniMessage]) -> (McpConnectStatus, Vec<(String, McpConnectStatus)>) {
    msgs.iter()
        .find_map(|m| match m.event() {
            Some(EventPayload::McpConnectEnd { status, results }) => Some((
                *status,
                results
                    .iter()
                    .map(|r| (r.server.clone(), r.status))
                    .collect(),
            )),
            _ => None,
        })
        .expect("an mcp_connect_end")
}

/// No process whose command line holds `marker` is left, within a bounded moment: a killed
/// server's exit is the kernel's to finish.
fn none_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = Command::new("pgrep").args(["-f", marker]).output().unwrap();
        if out.stdout.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes left behind: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn real_servers_over_stdio_and_http_through_penguin_run() {
    let Some(dir) = servers_dir() else { return };
    let (_http, port) = everything_http(&dir, "streamableHttp");
    // The npm servers load slowly on a busy machine, three at once: each gets 60 s, not the
    // 10 s default. `--mcp` cannot set a budget, so it adds the light fixture.
    let env = Env::new(&format!(
        r#"
[[mcp_servers]]
name = "fs"
command = "{fs}"
args = ["."]
connect_timeout_ms = 60000

[[mcp_servers]]
name = "web"
url = "http://127.0.0.1:{port}/mcp"
headers = {{ X-Penguin = "test" }}
connect_timeout_ms = 60000

[[mcp_servers]]
name = "ev"
command = "{ev}"
args = ["stdio"]
connect_timeout_ms = 60000
"#,
        fs = bin(&dir, "mcp-server-filesystem"),
        ev = bin(&dir, "mcp-server-everything"),
    ));
    std::fs::write(
        env.ws.path().join("hello.txt"),
        "hello from the workspace\n",
    )
    .unwrap();
    let ws = std::fs::canonicalize(env.ws.path()).unwrap();
    let sc = scenario(
        env.home.path(),
        vec![vec![
            call("c1", "mcp__ev__echo", json!({"message": "via stdio"})),
            call(
                "c2",
                "mcp__fs__read_text_file",
                json!({"path": ws.join("hello.txt")}),
            ),
            call("c3", "mcp__web__get-sum", json!({"a": 20, "b": 22})),
            call(
                "c4",
                "mcp__fs__read_text_file",
                json!({"path": ws.join("missing.txt")}),
            ),
            call("c5", "mcp__web__get-tiny-image", json!({})),
            call("c6", "mcp__fx__pid", json!({})),
        ]],
    );
    // The workspace in its command line marks the fixture for `none_left`.
    let fx = format!("fx=node {} tools {}", fixture(), ws.display());
    let out = env.run(&sc, &["--mcp", &fx]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let msgs = parse(&out.stdout);
    assert_eq!(
        &types(&msgs)[..4],
        [
            "mcp_connect_begin",
            "mcp_connect_end",
            "tool_list_ready",
            "request_begin"
        ]
    );
    let Some(EventPayload::McpConnectBegin { servers }) = msgs[0].event() else {
        unreachable!()
    };
    assert_eq!(servers, &["fs", "web", "ev", "fx"]);
    let (status, results) = connect_end(&msgs);
    assert_eq!(status, McpConnectStatus::Completed, "{results:?}");
    let Some(EventPayload::ToolListReady { tools }) = msgs[2].event() else {
        unreachable!()
    };
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for want in [
        "exec_command",
        "mcp__ev__echo",
        "mcp__fs__read_text_file",
        "mcp__web__get-sum",
        "mcp__fx__pid",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let o = outputs(&msgs);
    assert_eq!(
        o["c1"],
        ("Echo: via stdio".to_owned(), "completed".to_owned())
    );
    assert_eq!(
        o["c2"],
        (
            "hello from the workspace\n".to_owned(),
            "completed".to_owned()
        )
    );
    assert!(o["c3"].0.contains("42"), "{:?}", o["c3"]);
    assert_eq!(o["c4"].1, "failed", "{:?}", o["c4"]);
    assert!(!o["c4"].0.is_empty());
    assert_eq!(o["c5"].1, "completed", "{:?}", o["c5"]);
    assert_eq!(o["c6"].1, "completed", "{:?}", o["c6"]);
    let image = msgs.iter().find_map(|m| match m.model() {
        Some(ModelPayload::ToolCallOutput(o)) if o.tool_call_id == "c5" => Some(o.clone()),
        _ => None,
    });
    assert!(
        serde_json::to_string(&image)
            .unwrap()
            .contains("data:image/png;base64,"),
        "the image rides along"
    );

    let trace = env.trace();
    let head: Vec<&str> = types(&trace)[..6].to_vec();
    assert_eq!(
        head,
        [
            "session_meta",
            "text",
            "mcp_connect_begin",
            "mcp_connect_end",
            "tool_list_ready",
            "request_begin"
        ]
    );
    // The traced connect records are the streamed ones.
    assert_eq!(trace[2], msgs[0]);
    assert_eq!(trace[3], msgs[1]);
    assert_eq!(trace[4], msgs[2]);
    none_left(&ws.display().to_string());
}

#[test]
fn failing_servers_are_failed_results_and_the_session_goes_on() {
    let Some(_dir) = servers_dir() else { return };
    let marker = format!("penguin-mcp-test-{}", std::process::id());
    let env = Env::new(&format!(
        r#"
[[mcp_servers]]
name = "silent"
command = "node"
args = ["{fx}", "silent", "{marker}"]
connect_timeout_ms = 500

[[mcp_servers]]
name = "fx"
command = "node"
args = ["{fx}", "tools", "{marker}"]
connect_timeout_ms = 60000
"#,
        fx = fixture()
    ));
    let sc = scenario(
        env.home.path(),
        vec![
            vec![call("c1", "mcp__fx__crash", json!({}))],
            vec![
                call("c2", "mcp__fx__fail", json!({})),
                call("c3", "mcp__fx__pid", json!({})),
                call("c4", "mcp__silent__anything", json!({})),
            ],
        ],
    );
    let out = env.run(&sc, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("MCP server \"silent\" unavailable"),
        "{stderr}"
    );
    let msgs = parse(&out.stdout);
    let (status, results) = connect_end(&msgs);
    assert_eq!(status, McpConnectStatus::Failed);
    assert_eq!(
        results,
        [
            ("silent".to_owned(), McpConnectStatus::Failed),
            ("fx".to_owned(), McpConnectStatus::Completed)
        ]
    );
    let o = outputs(&msgs);
    assert_eq!(o["c1"].1, "failed");
    assert!(o["c1"].0.contains("MCP server \"fx\""), "{:?}", o["c1"]);
    assert_eq!(
        o["c2"],
        (
            "the fixture refused: bad input".to_owned(),
            "failed".to_owned()
        )
    );
    assert_eq!(o["c3"].1, "completed", "the crashed server was restarted");
    assert_eq!(
        o["c4"],
        (
            "Unknown tool: mcp__silent__anything".to_owned(),
            "failed".to_owned()
        )
    );
    assert_eq!(types(&msgs).last(), Some(&"request_end"));
    none_left(&marker);
}

#[test]
fn an_interrupt_during_the_connect_ends_the_run_and_is_traced() {
    let Some(_dir) = servers_dir() else { return };
    let marker = format!("penguin-mcp-abort-{}", std::process::id());
    let env = Env::new(&format!(
        r#"
[[mcp_servers]]
name = "silent"
command = "node"
args = ["{fx}", "silent", "{marker}"]
connect_timeout_ms = 60000
"#,
        fx = fixture()
    ));
    let sc = scenario(env.home.path(), vec![]);
    let ws = env.ws.path().to_str().unwrap().to_owned();
    let mut child = env
        .cmd(&[
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
            sc.to_str().unwrap(),
            "--real-tools",
            "--workspace",
            &ws,
            "interrupt me",
        ])
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("mcp_connect_begin"), "{line}");
    lines.push(std::mem::take(&mut line));
    // The connect is in flight (the server never answers): Ctrl-C.
    let started = Instant::now();
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    while stdout.read_line(&mut line).unwrap() > 0 {
        lines.push(std::mem::take(&mut line));
    }
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!status.success(), "an interrupted task does not succeed");
    let msgs = parse(lines.concat().as_bytes());
    assert_eq!(
        types(&msgs),
        ["mcp_connect_begin", "mcp_connect_end", "abort"]
    );
    assert_eq!(connect_end(&msgs), (McpConnectStatus::Aborted, Vec::new()));
    let trace = env.trace();
    assert_eq!(
        types(&trace),
        [
            "session_meta",
            "text",
            "mcp_connect_begin",
            "mcp_connect_end",
            "abort"
        ]
    );
    none_left(&marker);
}

#[test]
fn mcp_list_shows_each_server_with_its_status_and_tools() {
    let Some(dir) = servers_dir() else { return };
    let env = Env::new(&format!(
        r#"
[[mcp_servers]]
name = "ev"
command = "{ev}"
args = ["stdio"]
connect_timeout_ms = 60000

[[mcp_servers]]
name = "gone"
command = "/nonexistent/server"
"#,
        ev = bin(&dir, "mcp-server-everything")
    ));
    let ws = env.ws.path().to_str().unwrap().to_owned();
    let out = env
        .cmd(&["mcp", "list", "--workspace", &ws])
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a failed server fails the listing");
    assert!(
        stdout.lines().all(|l| l.chars().count() <= 80),
        "lines fit the terminal: {stdout}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("ev ") && lines[0].contains("stdio connected"),
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("r   mcp__ev__echo")),
        "{stdout}"
    );
    let gone = lines.iter().position(|l| l.starts_with("gone ")).unwrap();
    assert!(lines[gone].contains("failed"), "{stdout}");
    assert!(
        lines[gone + 1].starts_with("    ") && lines[gone + 1].contains("cannot start"),
        "the error wrapped under its server: {stdout}"
    );

    // The system prompt a session would get lists the MCP tools too.
    let out = env
        .cmd(&["run", "--print-system-prompt", "--workspace", &ws])
        .output()
        .unwrap();
    let prompt = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{prompt}");
    assert!(prompt.contains("mcp__ev__echo"), "{prompt}");

    let out = env
        .cmd(&["mcp", "list", "--workspace", &ws, "--json"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["server"], "ev");
    assert_eq!(listed[0]["status"], "completed");
    assert!(listed[0]["tool_list"].as_array().unwrap().len() >= 10);
    assert_eq!(listed[1]["status"], "failed");
}

/// Only node and the fixture: the system prompt a session would get lists the MCP tools, and
/// a rendered run says what each server brought (`fx: N tools`).
#[test]
fn mcp_tools_are_in_the_printed_system_prompt_and_their_count_is_said() {
    if Command::new("node").arg("--version").output().is_err() {
        eprintln!("skipped: no node");
        return;
    }
    let env = Env::new("");
    let ws = env.ws.path().to_str().unwrap().to_owned();
    let fx = format!("fx=node {} tools {ws}", fixture());
    let out = env
        .cmd(&[
            "run",
            "--print-system-prompt",
            "--mcp",
            &fx,
            "--workspace",
            &ws,
        ])
        .output()
        .unwrap();
    let prompt = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{prompt}");
    assert!(prompt.contains("mcp__fx__"), "{prompt}");

    let sc = scenario(env.ws.path(), vec![vec![text("hi")]]);
    let out = env
        .cmd(&[
            "run",
            "--yes",
            "--provider",
            "scripted",
            "--real-tools",
            "--scenario",
            sc.to_str().unwrap(),
            "--mcp",
            &fx,
            "--workspace",
            &ws,
            "go",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("fx: "))
        .unwrap_or_else(|| panic!("no server line: {stdout}"));
    assert!(line.contains(" tools ("), "{line}");
}
