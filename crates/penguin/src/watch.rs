//! `penguin watch`: follow a session served by `penguin serve`, the way the bundled web client
//! does (§5.9): open the stream first, fetch the history, fold both through
//! [`ClientReducer`] (reorder around the live cursor,
//! dedup by exact JSON), then render what arrives.

use futures::StreamExt;
use penguin_omni_protocol::OmniMessage;
use penguin_sse_transport::{ClientReducer, ClientState, History, SessionStatus};

/// One SSE event as the wire carries it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WireEvent {
    /// `id:`
    pub id: Option<String>,
    /// `event:`
    pub event: Option<String>,
    /// `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental `text/event-stream` parser (any chunking; `\n` or `\r\n` line ends).
#[derive(Debug, Default)]
pub struct EventParser {
    line: Vec<u8>,
    current: WireEvent,
    has_data: bool,
}

impl EventParser {
    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<WireEvent> {
        let mut out = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
            if line.is_empty() {
                if self.has_data {
                    out.push(std::mem::take(&mut self.current));
                }
                self.current = WireEvent::default();
                self.has_data = false;
                continue;
            }
            if line.starts_with(':') {
                continue; // a heartbeat comment
            }
            let (field, value) = line.split_once(':').map_or((line.as_str(), ""), |(f, v)| {
                (f, v.strip_prefix(' ').unwrap_or(v))
            });
            match field {
                "id" => self.current.id = Some(value.to_owned()),
                "event" => self.current.event = Some(value.to_owned()),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        out
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct Target {
    /// Server base URL, e.g. `http://127.0.0.1:7364`.
    pub base: String,
    /// The bearer token.
    pub token: String,
    /// The session to watch.
    pub session_id: String,
}

async fn history(client: &reqwest::Client, t: &Target) -> Result<History, String> {
    let url = format!(
        "{}/api/sessions/{}/messages",
        t.base.trim_end_matches('/'),
        t.session_id
    );
    let res = client
        .get(&url)
        .bearer_auth(&t.token)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = res.status();
    let body = res.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("GET {url}: {status}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("GET {url}: not a history: {e}"))
}

/// Follows the session, calling `show` for each complete message in render order (history
/// first). Returns the final client state when the session is idle (or, with `follow`, when the
/// server ends the stream).
pub async fn watch(
    t: &Target,
    follow: bool,
    mut show: impl FnMut(&OmniMessage),
) -> Result<ClientState, String> {
    let client = reqwest::Client::new();
    let url = format!(
        "{}/api/sessions/{}/stream",
        t.base.trim_end_matches('/'),
        t.session_id
    );
    // Connect first: everything from here on is either in the history or in this stream.
    let res = client
        .get(&url)
        .bearer_auth(&t.token)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if !res.status().is_success() {
        let status = res.status();
        return Err(format!(
            "GET {url}: {status}: {}",
            res.text().await.unwrap_or_default()
        ));
    }
    let mut body = res.bytes_stream();
    let mut reducer = ClientReducer::new();
    let mut parser = EventParser::default();
    let mut shown = 0;
    reducer.on_history(history(&client, t).await?);
    loop {
        let state = reducer.state();
        for m in &state.messages[shown.min(state.messages.len())..] {
            show(m);
        }
        shown = state.messages.len();
        if state.needs_history {
            reducer.on_history(history(&client, t).await?);
            continue;
        }
        let idle = state
            .task_state
            .as_ref()
            .is_some_and(|s| s.state == SessionStatus::Idle);
        if idle && !follow && reducer.is_live() {
            return Ok(state);
        }
        match body.next().await {
            Some(Ok(chunk)) => {
                for ev in parser.feed(&chunk) {
                    reducer.on_event(ev.id.as_deref(), ev.event.as_deref(), &ev.data);
                }
            }
            Some(Err(e)) => return Err(format!("the stream broke: {e}")),
            None => return Ok(reducer.state()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_across_any_split() {
        let wire = b"event: server_event\r\ndata: {\"type\":\"task_state\"}\r\nid: ab-1\r\n\r\n: ping\n\ndata: {\"x\":1}\nid: ab-2\n\n";
        for split in 0..wire.len() {
            let mut p = EventParser::default();
            let mut evs = p.feed(&wire[..split]);
            evs.extend(p.feed(&wire[split..]));
            assert_eq!(evs.len(), 2, "split at {split}");
            assert_eq!(
                evs[0],
                WireEvent {
                    id: Some("ab-1".into()),
                    event: Some("server_event".into()),
                    data: "{\"type\":\"task_state\"}".into()
                }
            );
            assert_eq!(
                evs[1],
                WireEvent {
                    id: Some("ab-2".into()),
                    event: None,
                    data: "{\"x\":1}".into()
                }
            );
        }
    }
}
