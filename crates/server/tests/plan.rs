//! The model's latest plan (`update_plan`) is part of a session's state, and survives a
//! restart of the server.
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;

use serde_json::{json, Value};
use support::script::{call_turn, step, text_turn, tool_output};
use support::{FakeFactory, TestDir};

fn plan(steps: &[(&str, &str)]) -> Value {
    json!({"explanation": "Fix it.", "plan": steps.iter().map(|(s, st)| json!({"step": s, "status": st})).collect::<Vec<_>>()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_plan_is_the_sessions_and_survives_a_restart() {
    let first = plan(&[("Read", "in_progress"), ("Fix", "pending")]);
    let second = plan(&[("Read", "completed"), ("Fix", "in_progress")]);
    let script = json!({
        "llm": [
            call_turn("update_plan", "p1", first.clone()),
            call_turn("update_plan", "p2", second.clone()),
            call_turn("update_plan", "p3", json!({"plan": "not a list"})),
            text_turn("Planned."),
        ],
        "tools": {
            "p1": {"stream": [step(0, tool_output("p1", "Plan updated"))]},
            "p2": {"stream": [step(0, tool_output("p2", "Plan updated"))]},
            "p3": {"stream": [step(0, json!({"type": "model_msg", "payload": {"type": "tool_call_output", "role": "user", "output": "plan: expected a list", "tool_call_id": "p3", "stop_reason": "failed"}}))]}
        }
    });
    let dir = TestDir::new();
    let factory = Arc::new(FakeFactory::new(script, dir.workspace()));
    let srv = support::serve(dir, factory, |_| {}).await;
    let id = srv.create("allow-all").await;
    assert_eq!(srv.session(&id).await.get("plan"), None);
    assert_eq!(srv.task(&id, "fix it").await.status, 202);
    srv.until_idle(&id).await;
    // The refused third update left the second in force.
    assert_eq!(srv.session(&id).await["plan"], second);
    let data = srv.data_root.clone();
    let _kept = srv.stop();

    let dir = TestDir::new();
    let factory = Arc::new(FakeFactory::new(json!({}), dir.workspace()));
    let again = support::serve(dir, factory, |o| o.data_root = data).await;
    assert_eq!(
        again.session(&id).await["plan"],
        second,
        "rebuilt from the trace"
    );
}
