//! `penguin run --goal` end to end: a scripted model whose real `exec_command` edits GOAL.yaml
//! in the session's scratchpad; the exit code says whether the goal completed.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

fn tool_call(id: &str, cmd: &str) -> Value {
    let args = json!({ "cmd": cmd }).to_string();
    json!({"stream": [
        {"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "tool_call", "role": "assistant", "name": "exec_command", "arguments": args, "tool_call_id": id, "stop_reason": "completed"}}},
        {"delay_ms": 0, "message": {"type": "event_msg", "payload": {"type": "token_usage",
            "session": {"cache_read": 0, "cache_write": 100, "output": 20, "total": 120},
            "request": {"cache_read": 0, "cache_write": 100, "output": 20, "total": 120}}}}
    ]})
}

fn text(t: &str) -> Value {
    json!({"stream": [
        {"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": t, "stop_reason": "completed"}}}
    ]})
}

fn goal_run(home: &Path, ws: &Path, llm: Vec<Value>, args: &[&str]) -> Output {
    let file = home.join("scenario.json");
    std::fs::write(
        &file,
        json!({"llm": llm, "runs": [{"input": []}]}).to_string(),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", home.join("data"))
        .args([
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--real-tools",
            "--scenario",
        ])
        .arg(&file)
        .arg("--workspace")
        .arg(ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("penguin runs")
}

fn goal_finished(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let finished: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["payload"]["type"] == "goal_finished")
        .collect();
    assert_eq!(finished.len(), 1, "one goal_finished: {stdout}");
    finished[0]["payload"].clone()
}

fn goal_files(ws: &Path) -> Vec<std::path::PathBuf> {
    let dir = ws.join(".penguin/scratchpad");
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().path().join("GOAL.yaml"))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_goal_the_model_marks_complete_exits_0() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = goal_run(
        home.path(),
        ws.path(),
        vec![
            tool_call(
                "c1",
                "sed -i 's/^status: active$/status: complete/' .penguin/scratchpad/*/GOAL.yaml",
            ),
            text("All tests pass."),
        ],
        &["--goal", "500k", "make all tests pass"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let finished = goal_finished(&out);
    assert_eq!(finished["outcome"], "complete");
    assert_eq!(finished["rounds"], 1);
    assert_eq!(finished["tokens_used"], 120);
    let files = goal_files(ws.path());
    assert_eq!(files.len(), 1);
    assert_eq!(
        std::fs::read_to_string(&files[0]).unwrap(),
        "objective: make all tests pass\nstatus: complete\n"
    );
    // The round's input was streamed before the round, with the objective after the block.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first_user = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["payload"]["role"] == "user")
        .unwrap();
    let round = first_user["payload"]["text"].as_str().unwrap();
    assert!(round.starts_with("[goal]\nround: 1\n"), "{round}");
    assert!(round.contains("Budget: 0 / 500000 tokens used (remaining: 500000)."));
    assert!(round.ends_with("[/goal]\n\nmake all tests pass"));
    // Listed by its objective, not by goal mode's words.
    let list = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", home.path().join("data"))
        .arg("sessions")
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.contains("make all tests pass"), "{list}");
    assert!(
        !list.contains("[goal]") && !list.contains("round: 1"),
        "{list}"
    );
}

#[test]
fn a_goal_whose_file_is_removed_is_blocked_and_exits_1() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = goal_run(
        home.path(),
        ws.path(),
        vec![
            tool_call("c1", "rm .penguin/scratchpad/*/GOAL.yaml"),
            text("I removed it."),
        ],
        &["--goal", "tidy up"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(goal_finished(&out)["outcome"], "blocked");
}

#[test]
fn a_goal_budget_that_does_not_parse_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = goal_run(home.path(), ws.path(), vec![], &["--goal", "lots", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Invalid token budget \"lots\""));
}
