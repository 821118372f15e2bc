//! `POST /api/explain`: a failed request in the CLI's words, for the web app.
#![cfg(feature = "testing")]

mod support;

use serde_json::json;
use support::serve_script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_is_explained_as_the_cli_explains_it() {
    let srv = serve_script(json!({"llm": [], "tools": {}, "runs": []})).await;
    let refused = "error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)";
    let r = srv
        .post(
            "/api/explain",
            json!({"status": "timeout", "errorMessage": refused, "attempt": 6}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["kind"], "connection_refused");
    assert_eq!(
        r.body["cause"],
        "connection refused (http://127.0.0.1:9/v1/chat/completions)"
    );
    assert!(r.body["hint"]
        .as_str()
        .unwrap()
        .contains("is the server running?"));
    assert_eq!(
        r.body["ended"],
        "failed after 6 attempts: connection refused (http://127.0.0.1:9/v1/chat/completions)"
    );
    let r = srv
        .post(
            "/api/explain",
            json!({"status": "failed", "errorMessage": "404 File Not Found"}),
        )
        .await;
    assert_eq!(r.body["kind"], "not_found");
    assert_eq!(r.body["ended"], serde_json::Value::Null);
    for (body, field) in [
        (json!({}), "status"),
        (json!({"status": "exploded"}), "status"),
        (json!({"status": "failed", "attempt": -1}), "attempt"),
    ] {
        let r = srv.post("/api/explain", body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        assert!(
            r.body["error"]["message"].as_str().unwrap().contains(field),
            "{}",
            r.body
        );
    }
}
