//! Who gets in and what a client can hold: the query token only on the two stream routes, the
//! Host check, workspaces under the operator's root, caps on pending inputs, and slow clients
//! dropped by the connection limits.
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use penguin_server::ConnectionLimits;
use serde_json::{json, Value};
use support::script::partial_text;
use support::{FakeFactory, Reply, TestDir, TestServer, TOKEN, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// A server whose API-created sessions must lie under `root/` (the directory `root/project`
/// is there), that also answers to `penguin.lan`. The server must work within a small
/// descriptor budget: every test of this file runs under a soft limit of 256 open files.
async fn start(limits: ConnectionLimits, body_timeout: Duration) -> TestServer {
    support::low_open_file_limit(256);
    let dir = TestDir::new();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("project")).unwrap();
    let factory = FakeFactory::new(scenario(), root.join("project"));
    support::serve(dir, Arc::new(factory), |opts| {
        opts.workspace_root = Some(root);
        opts.allowed_hosts = vec!["penguin.lan".into()];
        opts.body_timeout = body_timeout;
        opts.limits = limits;
    })
    .await
}

async fn start_default() -> TestServer {
    start(ConnectionLimits::default(), Duration::from_secs(30)).await
}

fn root(srv: &TestServer) -> std::path::PathBuf {
    srv.dir.path().join("root")
}

/// A session whose task runs (for a minute).
async fn running_session(srv: &TestServer) -> String {
    let r = srv.create_with(json!({})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(srv.task(&id, "go").await.status, 202);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_token_opens_only_the_stream_routes() {
    let srv = start_default().await;
    let id = running_session(&srv).await;
    let s = format!("/api/sessions/{id}");
    let routes: Vec<(reqwest::Method, String)> = vec![
        (reqwest::Method::POST, "/api/sessions".into()),
        (reqwest::Method::GET, "/api/sessions".into()),
        (reqwest::Method::GET, s.clone()),
        (reqwest::Method::PATCH, s.clone()),
        (reqwest::Method::DELETE, s.clone()),
        (reqwest::Method::GET, format!("{s}/messages")),
        (reqwest::Method::POST, format!("{s}/tasks")),
        (reqwest::Method::POST, format!("{s}/steer")),
        (reqwest::Method::DELETE, format!("{s}/steer/x")),
        (reqwest::Method::DELETE, format!("{s}/follow-ups/x")),
        (reqwest::Method::POST, format!("{s}/approvals/call_1")),
        (reqwest::Method::POST, format!("{s}/approvals/stream")),
        (reqwest::Method::POST, format!("{s}/abort")),
        (reqwest::Method::POST, format!("{s}/retry-now")),
        (reqwest::Method::POST, format!("{s}/compact")),
        (reqwest::Method::POST, format!("{s}/stream")),
        (reqwest::Method::POST, "/api/events".into()),
        (reqwest::Method::POST, format!("{s}/socket")),
        (reqwest::Method::POST, "/api/events/socket".into()),
        (reqwest::Method::GET, "/api/models".into()),
    ];
    for (method, path) in routes {
        let Reply { status, body } = srv
            .send(
                srv.http
                    .request(
                        method.clone(),
                        format!("{}{path}?access_token={TOKEN}", srv.base),
                    )
                    .json(&json!({})),
            )
            .await;
        assert_eq!(status, 401, "{method} {path}: {body}");
    }
    for path in [format!("{s}/stream"), "/api/events".into()] {
        let r = tokio::time::timeout(
            WAIT,
            srv.http
                .get(format!("{}{path}?access_token={TOKEN}", srv.base))
                .send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(r.status(), 200, "GET {path}");
    }
    // The socket routes take the query token too; a request that is no WebSocket upgrade is
    // told so.
    for path in [format!("{s}/socket"), "/api/events/socket".into()] {
        let Reply { status, body } = srv
            .send(
                srv.http
                    .get(format!("{}{path}?access_token={TOKEN}", srv.base)),
            )
            .await;
        assert_eq!(status, 426, "GET {path}: {body}");
        assert_eq!(body["error"]["code"], "websocket_required");
        let Reply { status, .. } = srv
            .send(srv.http.get(format!(
                "{}{path}?access_token=wrong-token-000000",
                srv.base
            )))
            .await;
        assert_eq!(status, 401, "GET {path} with a wrong token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_loopback_ip_and_allowed_host_names_are_answered() {
    let srv = start_default().await;
    let get = |host: &'static str| {
        srv.http
            .get(format!("{}/api/sessions", srv.base))
            .bearer_auth(TOKEN)
            .header("Host", host)
    };
    let Reply { status, body } = srv.send(get("rebind.attacker.example")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--allowed-host"));
    for ok in ["localhost:7364", "127.0.0.1", "penguin.lan:7364"] {
        assert_eq!(srv.send(get(ok)).await.status, 200, "{ok}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspaces_must_lie_under_the_operators_root() {
    let srv = start_default().await;
    for outside in ["/", "/etc", "/root", "../", "project/../.."] {
        let Reply { status, body } = srv.create_with(json!({"workspace": outside})).await;
        assert_eq!(status, 400, "{outside}: {body}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("workspace root"), "{msg}");
    }
    let link = root(&srv).join("escape");
    std::os::unix::fs::symlink("/etc", &link).unwrap();
    assert_eq!(
        srv.create_with(json!({"workspace": "escape"})).await.status,
        400
    );
    let Reply { status, body } = srv.create_with(json!({"workspace": "project"})).await;
    assert_eq!(status, 201, "{body}");
    let inside = root(&srv).join("project").canonicalize().unwrap();
    assert_eq!(body["session"]["workspace"], inside.display().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_steering_and_follow_ups_are_capped_by_count_and_bytes() {
    let srv = start_default().await;
    let id = running_session(&srv).await;
    let steer = |text: String| {
        srv.http
            .post(format!("{}/api/sessions/{id}/steer", srv.base))
            .bearer_auth(TOKEN)
            .json(&json!({"text": text}))
    };
    for i in 0..32 {
        assert_eq!(
            srv.send(steer(format!("steer {i}"))).await.status,
            202,
            "steer {i}"
        );
    }
    let Reply { status, body } = srv.send(steer("one too many".into())).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_pending");

    let id2 = running_session(&srv).await;
    let follow = |text: String| {
        srv.http
            .post(format!("{}/api/sessions/{id2}/tasks", srv.base))
            .bearer_auth(TOKEN)
            .json(&json!({"input": [{"type": "text", "text": text}], "queueIfBusy": true}))
    };
    let big = "x".repeat(400 * 1024);
    assert_eq!(srv.send(follow(big.clone())).await.status, 202);
    assert_eq!(srv.send(follow(big.clone())).await.status, 202);
    let Reply { status, body } = srv.send(follow(big)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "pending_too_large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_dropped_and_others_served() {
    let limits = ConnectionLimits {
        max_connections: Some(8),
        max_streams: None,
        header_timeout: Duration::from_millis(300),
    };
    let srv = start(limits, Duration::from_millis(300)).await;
    // More half-sent requests than there are connection slots.
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        c.write_all(b"GET /api/sessions HTTP/1.1\r\n")
            .await
            .unwrap();
        slow.push(c);
    }
    let status = srv
        .send(
            srv.http
                .get(format!("{}/api/sessions", srv.base))
                .bearer_auth(TOKEN),
        )
        .await
        .status;
    assert_eq!(status, 200, "an authorised client is served");
    for mut c in slow {
        let mut buf = [0u8; 512];
        // The server answers (408) or just closes: either way the connection ends.
        let ended = tokio::time::timeout(WAIT, async {
            loop {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "a slow client was dropped");
    }
    // A body that never arrives in full is answered 408, naming the timeout.
    let mut c = TcpStream::connect(srv.addr).await.unwrap();
    let req = format!(
        "POST /api/sessions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"a\":"
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, c.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
}

/// Streams have a budget of their own below the connections: one asked for beyond it is
/// refused at once with a reason, API requests are still served, and a closed stream's slot
/// is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_at_their_cap_are_refused_at_once_and_the_api_is_still_served() {
    let limits = ConnectionLimits {
        max_connections: Some(6),
        max_streams: Some(3),
        ..ConnectionLimits::default()
    };
    let srv = start(limits, Duration::from_secs(30)).await;
    let id = srv.create("allow-all").await;
    let mut open = vec![
        srv.sse("/api/events", None).await,
        srv.stream(&id, None).await,
        srv.stream(&id, None).await,
    ];
    for path in [
        "/api/events".to_owned(),
        format!("/api/sessions/{id}/stream"),
    ] {
        let Reply { status, body } = srv.get(&path).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["error"]["code"], "too_many_streams");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_streams"));
    }
    // API requests, on connections of their own.
    for _ in 0..10 {
        assert_eq!(srv.get("/api/sessions").await.status, 200);
    }
    assert_eq!(srv.task(&id, "go").await.status, 202);
    open.pop();
    // The slot comes back when the server notices the closed connection.
    let reopened = tokio::time::timeout(WAIT, async {
        loop {
            let r = srv
                .http
                .get(srv.url(&format!("/api/sessions/{id}/stream")))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(reopened.is_ok(), "a closed stream's slot is free again");
}
