//! The event streams over WebSocket (`…/socket`): the same events as SSE, in JSON frames, with
//! replay from `?lastEventId=` and the token in the query.
#![cfg(feature = "testing")]

mod support;

use futures::StreamExt;
use serde_json::{json, Value};
use support::{serve_script, TestServer, TOKEN, WAIT};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(srv: &TestServer, path: &str, last: Option<&str>) -> Socket {
    let mut url = format!("ws://{}{path}?access_token={TOKEN}", srv.addr);
    if let Some(l) = last {
        url.push_str(&format!("&lastEventId={l}"));
    }
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// The next events: one frame's array.
async fn frame(ws: &mut Socket) -> Vec<Value> {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .unwrap();
        if let Message::Text(t) = msg {
            return serde_json::from_str::<Value>(&t)
                .unwrap()
                .as_array()
                .unwrap()
                .clone();
        }
    }
}

fn kind(ev: &Value) -> &str {
    ev["data"]["type"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_channel_replays_from_the_last_event_id_over_a_socket() {
    let srv = serve_script(json!({"llm": [], "tools": {}, "runs": []})).await;
    let mut ws = open(&srv, "/api/events/socket", None).await;
    let hello = frame(&mut ws).await;
    assert_eq!(kind(&hello[0]), "hello");
    assert_eq!(hello[0]["event"], "server_event");
    let first = srv.create("allow-all").await;
    let created = frame(&mut ws).await;
    assert_eq!(kind(&created[0]), "session_created");
    assert_eq!(created[0]["data"]["sessionId"], first.as_str());
    let seen = created[0]["id"].as_str().unwrap().to_owned();
    drop(ws);

    // Created while no one listened: replayed, then the initial hello, then live.
    let second = srv.create("allow-all").await;
    let mut ws = open(&srv, "/api/events/socket", Some(&seen)).await;
    let mut events = Vec::new();
    while events.len() < 2 {
        events.extend(frame(&mut ws).await);
    }
    assert_eq!(kind(&events[0]), "session_created");
    assert_eq!(events[0]["data"]["sessionId"], second.as_str());
    assert_eq!(kind(&events[1]), "hello");
    let third = srv.create("allow-all").await;
    let live = frame(&mut ws).await;
    assert_eq!(live[0]["data"]["sessionId"], third.as_str());

    // A session's socket starts with its task_state, as its SSE stream does.
    let mut s = open(&srv, &format!("/api/sessions/{third}/socket"), None).await;
    let initial = frame(&mut s).await;
    assert_eq!(kind(&initial[0]), "task_state");
}
