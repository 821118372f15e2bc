//! `goal` on `POST …/tasks` with a factory whose sessions have no goal mode, and the checks of
//! the field itself (goal mode itself is tested with the facade's sessions).

mod support;

use serde_json::json;
use support::serve_script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_is_refused_by_name_where_sessions_have_no_goal_mode() {
    let srv = serve_script(json!({"llm": [], "tools": {}, "runs": []})).await;
    let id = srv.create("allow-all").await;
    let tasks = format!("/api/sessions/{id}/tasks");
    let input = json!([{"type": "text", "text": "Count the penguins"}]);
    let r = srv
        .post(&tasks, json!({"input": input, "goal": true}))
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "goal_unsupported");
    let s = srv.get(&format!("/api/sessions/{id}")).await.body;
    assert_eq!(
        s["session"]["state"], "idle",
        "a refused goal leaves the session idle"
    );
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
}
