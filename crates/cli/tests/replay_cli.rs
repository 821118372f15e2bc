//! `penguin replay`: a real session (the stub model, the real tools, an allowed command, a
//! denied one, two tasks) replays to the same Trace; a record the engine would now write
//! differently is named; a crash mid-stream is told, not guessed at.

use std::path::Path;

#[path = "support/penguin.rs"]
mod run;
use run::{penguin, said};

#[path = "support/stub_model.rs"]
mod stub_model;

fn trace_file(home: &Path) -> std::path::PathBuf {
    let traces = home.join("default/agents/penguin/traces");
    let day = std::fs::read_dir(&traces)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_dir(day)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

#[test]
fn a_real_session_replays_to_the_same_trace_and_a_changed_record_is_named() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let call = |cmd: &str| {
        stub_model::tool_call(
            "exec_command",
            &serde_json::json!({ "cmd": cmd }).to_string(),
        )
    };
    let (url, _) = stub_model::serve_script(vec![
        stub_model::with_usage(call("echo made > a.txt && cat a.txt")),
        stub_model::with_usage(stub_model::text("Made it.")),
        stub_model::with_usage(call("rm a.txt")),
        stub_model::with_usage(stub_model::text("It was not removed.")),
    ]);
    std::fs::write(
        home.path().join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n"),
    )
    .unwrap();
    let run = penguin(
        home.path(),
        ws.path(),
        &["run", "--yes", "--sandbox", "off", "make a"],
    );
    assert!(run.status.success(), "{}", said(&run));
    let resume = penguin(
        home.path(),
        ws.path(),
        &[
            "resume",
            "--last",
            "--approve",
            "deny-all",
            "--sandbox",
            "off",
            "remove it",
        ],
    );
    assert!(resume.status.success(), "{}", said(&resume));

    let scenario = home.path().join("kept.json");
    let out = penguin(
        home.path(),
        ws.path(),
        &[
            "replay",
            "--last",
            "--check",
            "--out",
            scenario.to_str().unwrap(),
        ],
    );
    let told = said(&out);
    assert!(out.status.success(), "{told}");
    assert!(told.contains("the same as the original"), "{told}");
    // The kept scenario runs as any scenario does.
    let kept = penguin(
        home.path(),
        ws.path(),
        &["scenario", "run", scenario.to_str().unwrap()],
    );
    assert!(kept.status.success(), "{}", said(&kept));
    assert!(String::from_utf8_lossy(&kept.stdout).contains("It was not removed."));

    // The trace says the engine once answered the denied call otherwise: today's engine does
    // not, and the replay names that record.
    let file = trace_file(home.path());
    let original = std::fs::read_to_string(&file).unwrap();
    assert!(original.contains("Tool call denied by user."));
    std::fs::write(
        &file,
        original.replace("Tool call denied by user.", "Denied, long ago."),
    )
    .unwrap();
    let out = penguin(home.path(), ws.path(), &["replay", "--last", "--check"]);
    let told = said(&out);
    assert!(!out.status.success(), "{told}");
    let record = told
        .split("record ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_default()
        .to_owned();
    assert!(
        told.contains("differs") && told.contains("Denied, long ago."),
        "{told}"
    );
    assert!(told.contains("Tool call denied by user."), "{told}");
    assert!(record.parse::<usize>().is_ok_and(|n| n > 1), "{told}");

    // A crash mid-stream: a request that never ended.
    std::fs::write(&file, format!("{original}{{\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"request_begin\"}}}}\n")).unwrap();
    let out = penguin(home.path(), ws.path(), &["replay", "--last", "--check"]);
    let told = said(&out);
    assert!(!out.status.success(), "{told}");
    assert!(told.contains("cannot be replayed exactly"), "{told}");
}
