//! `goal` on `POST …/tasks`: the checks of the field, and the session's goal state over the
//! API (the fake sessions' stand-in goal: one round, then complete; goal mode itself is tested
//! with the facade's sessions in crates/agent/tests/hosting/goal.rs).
#![cfg(feature = "testing")]

mod support;

use serde_json::json;
use support::script::text_turn;
use support::serve_script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_request_is_checked_and_its_state_is_the_sessions() {
    let srv = serve_script(json!({"llm": [text_turn("Counted.")], "tools": {}, "runs": []})).await;
    let id = srv.create("allow-all").await;
    let tasks = format!("/api/sessions/{id}/tasks");
    let input = json!([{"type": "text", "text": "Count the penguins"}]);
    for (goal, why) in [
        (json!({"budget": -5}), "goal.budget"),
        (json!({"budget": 10, "rounds": 2}), "only budget"),
        (json!("yes"), "goal"),
    ] {
        let r = srv
            .post(&tasks, json!({"input": input, "goal": goal}))
            .await;
        assert_eq!(r.status, 400, "{goal}");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{goal}: {msg}");
    }
    let r = srv
        .post(
            &tasks,
            json!({"input": input, "goal": true, "queueIfBusy": true}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cannot be queued"));
    assert_eq!(
        srv.get(&format!("/api/sessions/{id}/goal")).await.body,
        json!({"goal": null})
    );
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    let r = srv
        .post(&tasks, json!({"input": input, "goal": {"budget": 5000}}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let run = s.until(|e| e.is_state("idle")).await;
    let states: Vec<String> = run
        .iter()
        .filter(|e| e.kind() == "goal_state")
        .map(|e| e.json()["goal"]["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["active", "complete"]);
    let goal = srv.get(&format!("/api/sessions/{id}/goal")).await.body["goal"].clone();
    assert_eq!(goal["status"], "complete");
    assert_eq!(goal["budget"], 5000);
    assert_eq!(goal["objective"], "Count the penguins");
}
