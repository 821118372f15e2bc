//! penguin's main job against a real model: `penguin run` and `penguin resume` through a local
//! llama.cpp server (SmolLM2-135M), over two wire protocols; and the small-model profile against
//! the same server, whose slots hold 4,096 tokens each (llama.cpp's and Ollama's usual default).
//! Runs in `cargo xtask ci`'s e2e step, which starts the server, sets `PENGUIN_MODEL_SERVER`
//! and runs it with `--ignored`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use penguin::omni_protocol::validator::validate_jsonl;
use penguin::omni_protocol::{ModelPayload, OmniMessage};

/// The server's base URL. These tests are `#[ignore]`d: `cargo xtask e2e` (and so `ci`)
/// starts the server and runs them with `--ignored`, where a missing server is a failure.
fn server() -> String {
    let url = std::env::var("PENGUIN_MODEL_SERVER").unwrap_or_default();
    let url = url.trim().trim_end_matches('/');
    assert!(
        !url.is_empty(),
        "PENGUIN_MODEL_SERVER is not set: cargo xtask e2e starts the server and sets it"
    );
    url.to_owned()
}

fn penguin(home: &Path, args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", home)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("penguin starts");
    child.stdin.take().unwrap().write_all(b"").unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn traces(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(traces(&p));
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            out.push(p);
        }
    }
    out
}

fn assistant_text(stream: &str) -> String {
    stream
        .lines()
        .filter_map(|l| OmniMessage::from_json(l).ok())
        .filter_map(|m| match m.model() {
            Some(ModelPayload::Text(t)) if t.role == penguin::omni_protocol::Role::Assistant => {
                Some(t.text.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
#[ignore = "needs a real model server: cargo xtask e2e"]
fn run_and_resume_against_a_real_model_server() {
    let url = server();
    let chat_url = format!("{url}/v1");
    for (provider, base) in [
        ("openai-chat", chat_url.as_str()),
        ("anthropic-messages", url.as_str()),
    ] {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let ws_arg = ws.path().to_str().unwrap();
        let model = [
            "--provider",
            provider,
            "--base-url",
            base,
            "--model",
            "smollm2",
        ];
        let mut args = vec!["run", "--jsonl", "--yes", "--workspace", ws_arg];
        args.extend(model);
        args.push("Say hello in five words.");
        let (ok, stream, err) = penguin(home.path(), &args);
        assert!(ok, "{provider}: {err}");
        let report = validate_jsonl(stream.as_bytes());
        assert!(report.is_ok(), "{provider}: {report}");
        assert!(
            !assistant_text(&stream).trim().is_empty(),
            "{provider}: the model answered"
        );

        let files = traces(home.path());
        assert_eq!(files.len(), 1);
        let (ok, out, _) = penguin(home.path(), &["trace", "check", files[0].to_str().unwrap()]);
        assert!(ok, "{out}");

        // Resume: the model is picked again from the flags, the trace continues in place.
        let id = files[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches("_001.jsonl")
            .to_owned();
        let mut args = vec![
            "resume",
            id.as_str(),
            "And in three words?",
            "--jsonl",
            "--yes",
        ];
        args.extend(model);
        let (ok, stream, err) = penguin(home.path(), &args);
        assert!(ok, "{provider} resume: {err}");
        assert!(validate_jsonl(stream.as_bytes()).is_ok());
        assert!(!assistant_text(&stream).trim().is_empty());
        let trace = std::fs::read_to_string(&files[0]).unwrap();
        assert_eq!(
            trace
                .lines()
                .filter(|l| l.contains("\"type\":\"request_end\""))
                .count(),
            2,
            "{provider}: both runs in one file"
        );
    }
}

/// The trace's first record, `session_meta`, as JSON.
fn session_meta(trace: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(trace).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "session_meta", "{first}");
    first["payload"].clone()
}

#[test]
#[ignore = "needs a real model server: cargo xtask e2e"]
fn a_4096_token_window_gets_the_compact_profile_and_the_model_answers() {
    let url = server();
    // Nothing configured: penguin asks the server for its window (GET /props).
    for (provider, base) in [
        ("openai-chat", format!("{url}/v1")),
        ("anthropic-messages", url.clone()),
    ] {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let args = [
            "run",
            "--jsonl",
            "--yes",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--provider",
            provider,
            "--base-url",
            &base,
            "--model",
            "smollm2",
            "Say hello in five words.",
        ];
        let began = std::time::Instant::now();
        let (ok, stream, err) = penguin(home.path(), &args);
        assert!(ok, "{provider}: {err}");
        assert!(validate_jsonl(stream.as_bytes()).is_ok(), "{provider}");
        assert!(
            !assistant_text(&stream).trim().is_empty(),
            "{provider}: the model answered"
        );
        // One request, no retries.
        assert_eq!(
            stream.matches(r#""type":"request_begin""#).count(),
            1,
            "{provider}: {stream}"
        );
        assert!(
            began.elapsed() < std::time::Duration::from_secs(120),
            "{provider}"
        );
        let files = traces(home.path());
        let meta = session_meta(&files[0]);
        assert_eq!(meta["model_context_window"], 4096, "{provider}: {meta}");
        let prompt = meta["system_prompt"].as_str().unwrap();
        assert!(prompt.contains("\n\nWorkspace: "), "{provider}: {prompt}");
        assert!(!prompt.contains("# Tools"), "{provider}: {prompt}");
        let trace = std::fs::read_to_string(&files[0]).unwrap();
        let listed = trace
            .lines()
            .find(|l| l.contains(r#""type":"tool_list_ready""#))
            .expect("a tool list");
        let listed: serde_json::Value = serde_json::from_str(listed).unwrap();
        let names: Vec<&str> = listed["payload"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["exec_command", "read_file", "write_file", "edit_file"],
            "{provider}"
        );
    }
}

#[test]
#[ignore = "needs a real model server: cargo xtask e2e"]
fn a_prompt_that_cannot_fit_the_servers_window_fails_at_once_in_one_line() {
    let url = server();
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // Project instructions of about 5,000 tokens: more than a 4,096-token window holds.
    std::fs::write(
        ws.path().join("AGENTS.md"),
        "Answer every question as a limerick, then explain the rhyme. ".repeat(330),
    )
    .unwrap();
    let base = format!("{url}/v1");
    let args = [
        "run",
        "--yes",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--provider",
        "openai-chat",
        "--base-url",
        &base,
        "--model",
        "smollm2",
        "Say hello in five words.",
    ];
    let began = std::time::Instant::now();
    let (ok, stdout, err) = penguin(home.path(), &args);
    assert!(!ok, "{stdout}\n{err}");
    assert!(
        began.elapsed() < std::time::Duration::from_secs(10),
        "fails at once, not after the retry ladder: {:?}",
        began.elapsed()
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("penguin: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(
            "penguin: the prompt does not fit the model's context window: the window is 4096 tokens (from the server's /props) and the compact system prompt with 4 tool definitions takes ~"
        ),
        "{err}"
    );
    // No session was made, so no request was sent.
    assert!(traces(home.path()).is_empty());
}
