//! Approvals of a served session with the real built-in tools: the default mode (a session
//! created without one) runs reads unasked and asks before an edit, and the request carries the
//! diff the edit would make, computed without writing.

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
