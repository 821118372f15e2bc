//! A session's Trace over the API: `GET …/trace` hands it out as one JSON-lines attachment,
//! and `POST /api/sessions/import` on another server makes it a session there, checked first.
#![cfg(feature = "testing")]

mod support;

use serde_json::json;
use support::script::text_turn;
use support::TOKEN;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_downloaded_from_one_server_imports_into_another() {
    let script = || json!({"llm": [text_turn("Hello.")], "runs": []});
    let one = support::serve_script(script()).await;
    let id = one.create("allow-all").await;
    assert_eq!(one.task(&id, "hi").await.status, 202);
    one.until_idle(&id).await;
    let res = reqwest::Client::new()
        .get(one.url(&format!("/api/sessions/{id}/trace")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/x-ndjson");
    assert!(res.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment"));
    let text = res.text().await.unwrap();
    assert!(
        text.lines().next().unwrap().contains("session_meta"),
        "{text}"
    );
    assert!(text.contains("Hello."), "{text}");

    let two = support::serve_script(script()).await;
    let import = |body: String| {
        two.send(
            reqwest::Client::new()
                .post(two.url("/api/sessions/import"))
                .bearer_auth(TOKEN)
                .header("content-type", "application/x-ndjson")
                .body(body),
        )
    };
    let r = import(text.clone()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["session"]["id"], id.as_str());
    let listed = two.get("/api/sessions").await;
    assert!(listed.body.to_string().contains(&id), "{}", listed.body);
    assert_eq!(import(text).await.status, 409);
    let r = import("{not a trace}\n".into()).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "invalid_trace");
}
