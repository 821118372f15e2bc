//! The event streams over WebSocket, for browsers.
//!
//! A browser opens at most six HTTP/1.1 connections per origin, and every open `EventSource`
//! keeps one: a seventh tab's stream would wait forever. WebSockets are not counted against
//! that limit, so the web app reads the same events here: the same channel, replay, initial
//! events and stream budget as the SSE routes, each frame a JSON array of
//! `{"id", "event"?, "data"}` objects (`data` the event's JSON as SSE carries it). A
//! reconnecting client names the last id it saw as `?lastEventId=` (a `WebSocket` cannot send
//! `Last-Event-ID`), and the token as `?access_token=`.

use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use penguin_sse_transport::{ServerEvent, SseEvent, Subscription};
use tokio::sync::OwnedSemaphorePermit;

use crate::error::ApiError;
use crate::requests::query_pairs;
use crate::routes::{path_id, stream_permit};
use crate::sessions::USER_CHANNEL;
use crate::AppState;

// Events and bytes of data in one frame at most: a replay goes out in few frames, and a
// subscriber behind in a burst holds at most one small frame of its own.
const FRAME_EVENTS: usize = 256;
const FRAME_BYTES: usize = 32 * 1024;

/// `GET /api/sessions/{id}/socket`: the session's stream.
pub(crate) async fn session(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    uri: Uri,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = upgrade(ws)?;
    let id = path_id(p)?;
    let permit = stream_permit(&app)?;
    let sub = crate::routing::subscribe(&app, &id, last_event_id(&uri).as_deref()).await?;
    Ok(ws.on_upgrade(move |socket| pump(socket, sub, permit, app.sse.heartbeat)))
}

/// `GET /api/events/socket`: the user channel.
pub(crate) async fn events(
    State(app): State<AppState>,
    uri: Uri,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ws = upgrade(ws)?;
    let permit = stream_permit(&app)?;
    let channel = app.sessions.cfg.hub.get(USER_CHANNEL);
    let sub = channel.connect(last_event_id(&uri).as_deref(), || vec![ServerEvent::Hello]);
    Ok(ws.on_upgrade(move |socket| pump(socket, sub, permit, app.sse.heartbeat)))
}

fn upgrade(
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<WebSocketUpgrade, ApiError> {
    ws.map_err(|e| {
        ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            "websocket_required",
            format!("this route speaks WebSocket only ({e}); the same events come as SSE from the route without /socket"),
        )
    })
}

fn last_event_id(uri: &Uri) -> Option<String> {
    query_pairs(uri).find_map(|(k, v)| (k == "lastEventId").then_some(v))
}

/// One frame: `[{"id":…,"event":…,"data":…}, …]`. `data` is already one line of JSON.
fn frame(events: &[SseEvent]) -> String {
    let mut out = String::from("[");
    for (i, ev) in events.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(r#"{"id":""#);
        out.push_str(&ev.id.to_string());
        out.push('"');
        if let Some(name) = ev.event {
            out.push_str(r#","event":""#);
            out.push_str(name);
            out.push('"');
        }
        out.push_str(r#","data":"#);
        out.push_str(ev.data.as_str());
        out.push('}');
    }
    out.push(']');
    out
}

async fn pump(
    mut socket: WebSocket,
    mut sub: Subscription,
    _permit: OwnedSemaphorePermit,
    heartbeat: Duration,
) {
    let start = tokio::time::Instant::now() + heartbeat;
    let mut ping = tokio::time::interval_at(start, heartbeat);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            ev = sub.recv() => {
                let Some(ev) = ev else {
                    // The channel ended this subscriber (reclaimed, shut down): the client
                    // reconnects to the channel's successor.
                    let _ = socket.send(Message::Close(None)).await;
                    break;
                };
                let mut bytes = ev.data.as_str().len();
                let mut batch = vec![ev];
                while batch.len() < FRAME_EVENTS && bytes < FRAME_BYTES {
                    match sub.try_next() {
                        Some(more) => {
                            bytes += more.data.as_str().len();
                            batch.push(more);
                        }
                        None => break,
                    }
                }
                if socket.send(Message::Text(frame(&batch).into())).await.is_err() {
                    break;
                }
            }
            _ = ping.tick() => {
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
            msg = socket.recv() => match msg {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                // Nothing is read from the client; pongs and anything else are ignored.
                Some(Ok(_)) => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_sse_transport::{Epoch, EventData, EventId, SERVER_EVENT};

    #[test]
    fn a_frame_carries_ids_names_and_data_as_json() {
        let id = |seq| EventId {
            epoch: Epoch::from_u32(1),
            seq,
        };
        let events = [
            SseEvent::new(id(1), None, EventData::Text(r#"{"a":1}"#.into())),
            SseEvent::new(
                id(2),
                Some(SERVER_EVENT),
                EventData::Text(r#"{"type":"hello"}"#.into()),
            ),
        ];
        let f = frame(&events);
        assert_eq!(
            f,
            r#"[{"id":"00000001-1","data":{"a":1}},{"id":"00000001-2","event":"server_event","data":{"type":"hello"}}]"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&f).unwrap();
        assert_eq!(parsed[1]["data"]["type"], "hello");
    }

    #[test]
    fn the_last_event_id_is_read_from_the_query() {
        let uri: Uri = "/api/events/socket?access_token=t&lastEventId=0000abcd-7"
            .parse()
            .unwrap();
        assert_eq!(last_event_id(&uri).as_deref(), Some("0000abcd-7"));
        assert_eq!(last_event_id(&"/x?a=b".parse().unwrap()), None);
    }
}
