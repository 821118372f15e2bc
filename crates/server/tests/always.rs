//! "Always" at an approval: the request says what `allow_always` would allow from then on,
//! and after it the calls that scope covers run unasked, while others are still asked.
#![cfg(feature = "testing")]

mod support;

use serde_json::json;
use support::script::{call_turn, step, text_turn, tool_output};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_always_lets_the_same_tool_through_and_still_asks_for_others() {
    let script = json!({
        "llm": [
            call_turn("bash", "call_1", json!({"command": "ls"})),
            call_turn("bash", "call_2", json!({"command": "pwd"})),
            call_turn("write_file", "call_3", json!({"path": "x", "content": "y"})),
            text_turn("Done."),
        ],
        "tools": {
            "call_1": {"stream": [step(0, tool_output("call_1", "a"))]},
            "call_2": {"stream": [step(0, tool_output("call_2", "b"))]},
            "call_3": {"stream": [step(0, tool_output("call_3", "c"))]},
        },
        "runs": []
    });
    let srv = support::serve_script(script).await;
    let id = srv.create("always-ask").await;
    let mut events = srv.stream(&id, None).await;
    assert_eq!(srv.task(&id, "go").await.status, 202);
    let first = events
        .until(|e| e.is_server() && e.kind() == "approval_request")
        .await
        .pop()
        .unwrap()
        .json();
    assert_eq!(first["toolCall"]["payload"]["tool_call_id"], "call_1");
    assert_eq!(first["always"], "every bash call");
    assert_eq!(srv.decide(&id, "call_1", "allow_always").await.status, 204);
    // call_2 (bash again) runs unasked; call_3 (another tool) is asked.
    let next = events
        .until(|e| e.is_server() && e.kind() == "approval_request")
        .await
        .pop()
        .unwrap()
        .json();
    assert_eq!(
        next["toolCall"]["payload"]["tool_call_id"], "call_3",
        "{next}"
    );
    assert_eq!(srv.decide(&id, "call_3", "deny").await.status, 204);
    srv.until_idle(&id).await;
    let decisions: Vec<(String, String)> = srv
        .messages(&id)
        .await
        .iter()
        .filter(|m| m["payload"]["type"] == "approval_decision")
        .map(|m| {
            (
                m["payload"]["tool_call_id"].as_str().unwrap().to_owned(),
                m["payload"]["decision"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            ("call_1".into(), "allow".into()),
            ("call_2".into(), "allow".into()),
            ("call_3".into(), "deny".into())
        ]
    );
    let wrong = srv
        .post(
            &format!("/api/sessions/{id}/approvals/call_9"),
            json!({"decision": "always"}),
        )
        .await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
}
