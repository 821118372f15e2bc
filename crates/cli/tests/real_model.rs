//! penguin's main job against a real model: `penguin run` and `penguin resume` through a local
//! llama.cpp server (SmolLM2-135M), over two wire protocols. Runs in `cargo xtask ci`'s e2e step,
//! which starts the server, sets `PENGUIN_MODEL_SERVER` and runs it with `--ignored`.

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
