//! The legacy HTTP+SSE transport (MCP 2024-11-05), which the SDK no longer ships: a `GET`
//! opens an event stream whose first `endpoint` event names the URL to `POST` messages to;
//! the server's messages arrive as `message` events on that stream.
//!
//! It is handed to the SDK as a (sink, stream) pair: a task reads the event stream into the
//! stream side, another posts what the SDK sends. Dropping the transport ends both.

use std::collections::BTreeMap;

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use penguin_sse_transport::SseDecoder;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use tokio::sync::oneshot;

use super::MAX_MESSAGE_BYTES;

/// The SDK-facing halves of one connection.
pub(crate) type SsePair = (
    mpsc::Sender<ClientJsonRpcMessage>,
    mpsc::Receiver<ServerJsonRpcMessage>,
);

fn header_map(headers: &BTreeMap<String, String>) -> reqwest::header::HeaderMap {
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        // Validated when the config was resolved.
        if let (Ok(k), Ok(v)) = (
            reqwest::header::HeaderName::try_from(k.as_str()),
            reqwest::header::HeaderValue::try_from(v.as_str()),
        ) {
            map.insert(k, v);
        }
    }
    map
}

/// Opens the event stream and waits for the `endpoint` event; then the pair is live. The
/// caller bounds the wait (the connect timeout).
pub(crate) async fn connect(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<SsePair, String> {
    let client = reqwest::Client::builder()
        .default_headers(header_map(headers))
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    let base = reqwest::Url::parse(url).map_err(|e| format!("url: {e}"))?;
    let response = client
        .get(base.clone())
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {url}: HTTP {}", response.status()));
    }
    let (to_sdk, from_server) = mpsc::channel::<ServerJsonRpcMessage>(32);
    let (to_server, mut from_sdk) = mpsc::channel::<ClientJsonRpcMessage>(32);
    let (endpoint_tx, endpoint_rx) = oneshot::channel::<reqwest::Url>();
    let mut body = response.bytes_stream();
    // Aborted if this connect is dropped (cancelled or timed out) before it is handed over.
    let reader = AbortOnDrop(tokio::spawn(async move {
        // penguin's one SSE parser, bounded as a stdio line is.
        let mut parser = SseDecoder::new().with_max_event_bytes(MAX_MESSAGE_BYTES);
        let mut endpoint_tx = Some(endpoint_tx);
        let mut to_sdk = to_sdk;
        while let Some(Ok(chunk)) = body.next().await {
            let events = match parser.feed(&chunk) {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!("[mcp] sse: {e}; the event stream is closed");
                    return;
                }
            };
            for ev in events {
                match ev.event.as_deref() {
                    Some("endpoint") => {
                        if let (Some(tx), Ok(post)) = (endpoint_tx.take(), base.join(&ev.data)) {
                            let _ = tx.send(post);
                        }
                    }
                    None | Some("message") => {
                        match serde_json::from_str::<ServerJsonRpcMessage>(&ev.data) {
                            Ok(msg) => {
                                if to_sdk.send(msg).await.is_err() {
                                    return;
                                }
                            }
                            Err(e) => tracing::warn!("[mcp] sse: unreadable message dropped: {e}"),
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        // The stream ended: the SDK sees its receiving side close.
    }));
    let post_url = endpoint_rx
        .await
        .map_err(|_| "the event stream ended before its endpoint event".to_owned())?;
    tokio::spawn(async move {
        // Ends when the SDK drops its sender; the reader ends with the GET (or its abort).
        let _reader = reader;
        while let Some(msg) = from_sdk.next().await {
            let body = match serde_json::to_vec(&msg) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!("[mcp] sse: unsendable message dropped: {e}");
                    continue;
                }
            };
            let sent = client
                .post(post_url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!("[mcp] sse: POST {post_url}: HTTP {}", r.status());
                    return;
                }
                Err(e) => {
                    tracing::warn!("[mcp] sse: POST {post_url}: {e}");
                    return;
                }
            }
        }
    });
    Ok((to_server, from_server))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
