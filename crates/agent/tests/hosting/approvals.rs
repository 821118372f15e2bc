//! Approvals and rewinds of a served session with the real built-in tools: the default mode
//! (a session created without one) runs reads unasked and asks before an edit, and the request
//! carries the diff the edit would make, computed without writing; `POST …/rewind` shows what
//! putting the files back would change, then does it and forks the conversation.

use std::sync::Arc;

use penguin_server::testing::{serve, TestDir};
use serde_json::json;

use crate::background::{named_call_turn, text_turn, RealTools};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_read_runs_and_an_edit_is_asked_with_its_diff() {
    let llm = json!([
        named_call_turn("read_file", "c_read", json!({"path": "notes.txt"})),
        named_call_turn(
            "edit_file",
            "c_edit",
            json!({"path": "notes.txt", "old_string": "two", "new_string": "2"})
        ),
        text_turn("Fixed."),
    ]);
    let dir = TestDir::new();
    let ws = dir.workspace();
    std::fs::write(ws.join("notes.txt"), "one\ntwo\n").unwrap();
    let srv = serve(dir, Arc::new(RealTools { llm }), |_| {}).await;
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string()}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["session"]["approvalMode"], "read-only");
    let id = created.body["session"]["id"].as_str().unwrap().to_owned();
    srv.task(&id, "fix it").await;

    // The stream offers the pending request first: the edit, with its diff.
    let mut events = srv.stream(&id, None).await;
    let request = events
        .until(|e| e.is_server() && e.kind() == "approval_request")
        .await
        .pop()
        .unwrap()
        .json();
    assert_eq!(
        request["toolCall"]["payload"]["tool_call_id"], "c_edit",
        "the read was not asked: {request}"
    );
    let preview = request["preview"].as_str().unwrap_or_default();
    assert!(preview.contains("-two\n+2"), "{request}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "one\ntwo\n"
    );

    assert_eq!(srv.decide(&id, "c_edit", "allow").await.status, 204);
    srv.until_idle(&id).await;
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "one\n2\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_over_the_api_shows_then_restores_the_files_and_forks() {
    let exec = |id: &str, cmd: &str| named_call_turn("exec_command", id, json!({ "cmd": cmd }));
    let llm = json!([
        exec("c1", "echo one > a.txt"),
        text_turn("Wrote one."),
        exec("c2", "echo two > a.txt && echo new > b.txt"),
        text_turn("Wrote two."),
    ]);
    let dir = TestDir::new();
    let ws = dir.workspace();
    let srv = serve(dir, Arc::new(RealTools { llm }), |_| {}).await;
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string(), "approvalMode": "allow-all"}),
        )
        .await;
    let id = created.body["session"]["id"].as_str().unwrap().to_owned();
    for prompt in ["write one", "write two"] {
        assert_eq!(srv.task(&id, prompt).await.status, 202);
        srv.until_idle(&id).await;
    }
    let rewind = format!("/api/sessions/{id}/rewind");
    let plan = srv.post(&rewind, json!({"to": 2})).await;
    assert_eq!(plan.status, 200, "{}", plan.body);
    assert_eq!(
        plan.body["files"]["restore"],
        json!(["a.txt"]),
        "{}",
        plan.body
    );
    assert_eq!(
        plan.body["files"]["remove"],
        json!(["b.txt"]),
        "{}",
        plan.body
    );
    assert!(plan.body.get("session").is_none(), "nothing done yet");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "two\n");

    let done = srv.post(&rewind, json!({"to": 2, "apply": true})).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "one\n");
    assert!(!ws.join("b.txt").exists());
    let fork = done.body["session"]["id"].as_str().unwrap().to_owned();
    let texts: Vec<String> = srv
        .messages(&fork)
        .await
        .iter()
        .filter_map(|m| m["payload"]["text"].as_str().map(str::to_owned))
        .collect();
    assert!(texts.contains(&"write one".to_owned()), "{texts:?}");
    assert!(!texts.contains(&"write two".to_owned()), "{texts:?}");

    let bad = srv.post(&rewind, json!({"to": 0})).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let far = srv.post(&rewind, json!({"to": 9})).await;
    assert_eq!(far.status, 409, "{}", far.body);
}
