//! `POST /api/sessions/{id}/fork`: a new session with the trace up to a task's end.
#![cfg(feature = "testing")]

mod support;

use serde_json::{json, Value};
use support::script::text_turn;
use support::serve_script;

fn texts(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .filter(|m| m["payload"]["type"] == "text")
        .map(|m| m["payload"]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_forks_at_its_end_or_after_a_chosen_task() {
    let srv =
        serve_script(json!({"llm": [text_turn("One."), text_turn("Two.")], "tools": {}})).await;
    let id = srv.create("read-only").await;
    for prompt in ["first", "second"] {
        assert_eq!(srv.task(&id, prompt).await.status, 202);
        srv.until_idle(&id).await;
    }
    let fork = format!("/api/sessions/{id}/fork");
    let whole = srv.post(&fork, json!({})).await;
    assert_eq!(whole.status, 201, "{}", whole.body);
    let child = whole.body["session"]["id"].as_str().unwrap().to_owned();
    assert_ne!(child, id);
    assert_eq!(whole.body["session"]["title"], "first (fork)");
    assert_eq!(whole.body["session"]["approvalMode"], "read-only");
    assert_eq!(
        texts(&srv.messages(&child).await),
        ["first", "One.", "second", "Two."]
    );

    // After the first task: the position of its final reply.
    let msgs = srv.messages(&id).await;
    let one = msgs
        .iter()
        .find(|m| m["payload"]["text"] == "One.")
        .unwrap()["tracePosition"]
        .clone();
    let early = srv.post(&fork, json!({"position": one})).await;
    assert_eq!(early.status, 201, "{}", early.body);
    let early = early.body["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(texts(&srv.messages(&early).await), ["first", "One."]);

    let first_prompt = msgs
        .iter()
        .find(|m| m["payload"]["text"] == "first")
        .unwrap()["tracePosition"]
        .clone();
    for (body, code) in [
        (json!({"position": first_prompt}), "invalid_fork_position"),
        (json!({"position": {"fileIndex": "x"}}), "invalid_field"),
    ] {
        let r = srv.post(&fork, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.body["error"]["code"], code, "{}", r.body);
    }
    let listed = srv.get("/api/sessions").await.body["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(listed, 3);
}
