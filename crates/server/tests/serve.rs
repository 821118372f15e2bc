//! The server as a library: `Server::bind` on an OS-chosen port reports the address and the
//! token's source, answers requests, and `Server::serve` stops when the caller's future
//! completes, ending running tasks and open streams.
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use penguin_server::{ServeOptions, Server, TokenSource};
use serde_json::{json, Value};
use support::script::partial_text;
use support::{FakeFactory, TestDir, TOKEN, WAIT};

/// One request whose model streams "hi" and then waits a minute: a task that stays running.
fn scenario() -> Value {
    json!({
        "description": "a long task",
        "llm": [{"stream": [
            {"delay_ms": 0, "message": partial_text("start", "")},
            {"delay_ms": 0, "message": partial_text("delta", "hi")},
            {"delay_ms": 60_000, "message": partial_text("stop", "")},
        ]}],
        "tools": {},
        "runs": []
    })
}

fn options(dir: &TestDir) -> ServeOptions {
    let factory = FakeFactory::new(scenario(), dir.workspace());
    let mut opts = ServeOptions::new(Arc::new(factory));
    opts.data_root = dir.data_root();
    opts.agent = "serve-test".into();
    opts.port = 0;
    opts.token = None;
    opts
}

#[tokio::test]
async fn bound_on_port_zero_it_answers_and_stops_when_the_future_completes() {
    let dir = TestDir::new();
    let mut opts = options(&dir);
    opts.token = Some(TOKEN.into());
    let server = Server::bind(opts).await.unwrap();
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0, "the port the OS chose");
    assert_eq!(server.url(), format!("http://{addr}"));
    assert_eq!(server.token(), TOKEN);
    // Given in the options, not by the environment (unless it holds this very token).
    if std::env::var("PENGUIN_TOKEN").map_or(true, |t| t.trim() != TOKEN) {
        assert_eq!(server.token_source(), &TokenSource::Options);
        assert_eq!(
            server.token_source().to_string(),
            "set by the program (ServeOptions::token)"
        );
    }
    assert!(server.sign_in_url().contains(&format!("{addr}/#token=")));

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    // A request answered, a session created, a task left running with its stream open.
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let denied = http
        .get(format!("{base}/api/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    let created: Value = http
        .post(format!("{base}/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"approvalMode": "always-ask"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["session"]["id"].as_str().unwrap().to_owned();
    let task = http
        .post(format!("{base}/api/sessions/{id}/tasks"))
        .bearer_auth(TOKEN)
        .json(&json!({"input": [{"type": "text", "text": "go"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(task.status(), 202);
    let stream = http
        .get(format!("{base}/api/sessions/{id}/stream"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut body = stream.bytes_stream();
    let first = tokio::time::timeout(WAIT, body.next()).await.unwrap();
    assert!(matches!(first, Some(Ok(_))), "the stream is live");

    // The future completes: the serve call returns, the open stream ends, the port is closed.
    stop.send(()).unwrap();
    // Well before the drain time: the idle keep-alive connections close at once.
    tokio::time::timeout(penguin_server::DRAIN / 2, served)
        .await
        .expect("serve returns once its future completed")
        .unwrap()
        .unwrap();
    let ended =
        tokio::time::timeout(WAIT, async { while let Some(Ok(_)) = body.next().await {} }).await;
    assert!(ended.is_ok(), "the open stream ended with the server");
    let after = http
        .get(format!("{base}/api/sessions"))
        .bearer_auth(TOKEN)
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(after.is_err(), "nothing listens any more: {after:?}");
}

#[tokio::test]
async fn the_token_source_is_the_file_it_was_generated_in_then_read_from() {
    let dir = TestDir::new();
    let token_file = dir.data_root().join(penguin_server::TOKEN_FILE);
    let first = Server::bind(options(&dir)).await.unwrap();
    assert_eq!(
        first.token_source(),
        &TokenSource::Generated(token_file.clone())
    );
    let generated = first.token().to_owned();
    drop(first);
    let second = Server::bind(options(&dir)).await.unwrap();
    assert_eq!(
        second.token_source(),
        &TokenSource::File(token_file.clone())
    );
    assert_eq!(second.token(), generated);
    assert_eq!(
        second.token_source().to_string(),
        format!("read from {}", token_file.display())
    );
}

#[tokio::test]
async fn a_taken_address_is_a_bind_error_naming_it() {
    let dir = TestDir::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut opts = options(&dir);
    opts.port = taken.local_addr().unwrap().port();
    let err = Server::bind(opts).await.unwrap_err();
    let addr = format!("127.0.0.1:{}", taken.local_addr().unwrap().port());
    assert!(
        matches!(&err, penguin_server::ServeError::Bind { addr: a, .. } if *a == addr),
        "{err}"
    );
}
