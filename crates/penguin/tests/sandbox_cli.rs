//! The sandbox through the `penguin` command: `[sandbox]` and `--sandbox` reach the tools, the
//! session line shows the effective sandbox, and a model's command is confined by the kernel.
//!
//! The model is a stub OpenAI-compatible server on loopback that asks for one `exec_command`
//! and then answers with text.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use penguin::tools::sandbox::Landlock;

fn landlock(test: &str) -> bool {
    match Landlock::probe() {
        Landlock::Abi(n) if n >= 2 => true,
        other => {
            eprintln!("SKIPPED {test}: needs Landlock ABI 2, and {other}");
            false
        }
    }
}

/// Serves chat completions: a tool call running `cmd` first, then (once the request carries
/// the tool's output) a text. Returns its base URL.
fn stub_model(cmd: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let body = read_request(&mut conn);
            let args = serde_json::json!({ "cmd": cmd }).to_string();
            let chunks = if body.contains(r#""role":"tool""#) {
                vec![
                    serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "done"}, "finish_reason": null}]}),
                    serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                ]
            } else {
                vec![
                    serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "exec_command", "arguments": args}}]}, "finish_reason": null}]}),
                    serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                ]
            };
            let mut out = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            );
            for c in chunks {
                out.push_str(&format!("data: {c}\n\n"));
            }
            out.push_str("data: [DONE]\n\n");
            let _ = conn.write_all(out.as_bytes());
        }
    });
    url
}

fn read_request(conn: &mut std::net::TcpStream) -> String {
    let mut reader = BufReader::new(conn);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    String::from_utf8_lossy(&body).into_owned()
}

/// A penguin home configured for the stub, a workspace, a temp dir and a directory outside
/// them all.
struct Setup {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    tmp: PathBuf,
    outside: PathBuf,
}

fn setup(cmd_for: impl FnOnce(&Path) -> String, sandbox_section: &str) -> Setup {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws, tmp, outside) = (
        root.join("home"),
        root.join("ws"),
        root.join("tmp"),
        root.join("outside"),
    );
    for d in [&home, &ws, &tmp, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    let url = stub_model(cmd_for(&outside));
    std::fs::write(
        home.join("config.toml"),
        format!(
            "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n{sandbox_section}"
        ),
    )
    .unwrap();
    Setup {
        _base: base,
        home,
        ws,
        tmp,
        outside,
    }
}

fn penguin(s: &Setup, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        // The system temp directory holds the scratch dirs: the sandbox's temp is its own.
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .arg("run")
        .arg("--yes")
        .arg("--workspace")
        .arg(&s.ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_models_command_is_confined_and_the_session_line_says_how() {
    if !landlock("cli") {
        return;
    }
    let s = setup(
        |outside| {
            format!(
                "echo in > inside.txt; echo x > {}/escape.txt",
                outside.display()
            )
        },
        "",
    );
    let out = penguin(&s, &["--jsonl", "write outside"]);
    let stream = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stream}");
    assert!(s.ws.join("inside.txt").exists(), "{stream}");
    assert!(!s.outside.join("escape.txt").exists(), "{stream}");
    assert!(stream.contains("Permission denied"), "{stream}");
    assert!(stream.contains("[sandbox: "), "{stream}");
    assert!(stream.contains("mode workspace-write"), "{stream}");

    // Rendered: the session line names the effective sandbox.
    let out = penguin(&s, &["--sandbox", "read-only", "again"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("· sandbox: read-only (Landlock ABI "), "{err}");

    // --sandbox off: today's behaviour.
    let out = penguin(&s, &["--sandbox", "off", "--jsonl", "once more"]);
    assert!(out.status.success());
    assert!(s.outside.join("escape.txt").exists());
}

#[test]
fn the_config_section_is_used_and_errors_name_the_field() {
    if !landlock("cli config") {
        return;
    }
    let s = setup(
        |_| "echo x > kept.txt".to_owned(),
        "[sandbox]\nmode = \"read-only\"\nnetwork = false\n",
    );
    let out = penguin(&s, &["hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sandbox: read-only, network off (Landlock ABI "),
        "{err}"
    );
    assert!(!s.ws.join("kept.txt").exists(), "read-only: {err}");

    std::fs::write(s.home.join("config.toml"), "[sandbox]\nmode = \"jail\"\n").unwrap();
    let out = penguin(&s, &["hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("sandbox.mode: unknown sandbox mode \"jail\""),
        "{err}"
    );
}
