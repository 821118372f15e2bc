//! `penguin watch`: follow a session served by `penguin serve`, the way the bundled web client does
//! (protocol [§5.9](penguin_omni_protocol::spec#s5.9) *The client pattern*): open the stream first,
//! fetch the history, fold both through [`ClientReducer`] (reorder around the live cursor, dedup by
//! exact JSON), then render what arrives.

use futures::StreamExt;
use penguin_omni_protocol::OmniMessage;
use penguin_server::api::SessionList;
use penguin_sse_transport::decode::{DecodeError, SseDecoder};
use penguin_sse_transport::{ClientReducer, ClientState, History, SessionStatus};

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

/// Why following a served session failed. Each variant names the URL it was reading.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// No HTTP client could be made (TLS could not be set up).
    #[error("cannot make an HTTP client: {0}")]
    Client(reqwest::Error),
    /// The request could not be sent, or its body not read.
    #[error("GET {url}: {source}")]
    Request {
        /// The URL.
        url: String,
        /// The transport's error.
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("GET {url}: {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: reqwest::StatusCode,
        /// The body of the answer (the server's JSON error, usually).
        body: String,
    },
    /// The body is not the JSON it should be.
    #[error("GET {url}: not {what}: {source}")]
    Body {
        /// The URL.
        url: String,
        /// What the body should have been (`a session list`, `a history`).
        what: &'static str,
        /// Why it is not.
        source: serde_json::Error,
    },
    /// No served session, or more than one, matches the id asked for.
    #[error(transparent)]
    Lookup(#[from] crate::agent::SessionLookupError),
    /// The event stream could not be read to its end.
    #[error("the stream broke: {0}")]
    Stream(#[source] reqwest::Error),
    /// The event stream is not well-formed SSE.
    #[error("the stream broke: {0}")]
    Events(#[source] DecodeError),
}

/// The served session `query` names, matched as `penguin resume` matches (the full id, a unique
/// prefix or a unique suffix) against the server's list.
pub async fn resolve_session_id(
    base: &str,
    token: &str,
    query: &str,
) -> Result<String, WatchError> {
    let url = format!("{}/api/sessions", base.trim_end_matches('/'));
    let list: SessionList = get_json(&client()?, &url, token, "a session list").await?;
    let mut ids: Vec<String> = list.sessions.into_iter().map(|s| s.id).collect();
    ids.sort();
    ids.dedup();
    Ok(crate::agent::match_session_id(&ids, query)?)
}

/// The client every watch request goes through (TLS set up the way the model clients are).
fn client() -> Result<reqwest::Client, WatchError> {
    penguin_llm_providers::http::client_builder()
        .build()
        .map_err(WatchError::Client)
}

async fn history(client: &reqwest::Client, t: &Target) -> Result<History, WatchError> {
    let url = format!(
        "{}/api/sessions/{}/messages",
        t.base.trim_end_matches('/'),
        t.session_id
    );
    get_json(client, &url, &t.token, "a history").await
}

/// One authorized `GET` of a JSON body; errors name the URL and, for a bad body, what it
/// should have been.
async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    what: &'static str,
) -> Result<T, WatchError> {
    let request = |source| WatchError::Request {
        url: url.to_owned(),
        source,
    };
    let res = client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .map_err(request)?;
    let status = res.status();
    let body = res.text().await.map_err(request)?;
    if !status.is_success() {
        return Err(WatchError::Status {
            url: url.to_owned(),
            status,
            body,
        });
    }
    serde_json::from_str(&body).map_err(|source| WatchError::Body {
        url: url.to_owned(),
        what,
        source,
    })
}

/// Follows the session, calling `show` for each complete message in render order (history
/// first). Returns the final client state when the session is idle (or, with `follow`, when the
/// server ends the stream).
pub async fn watch(
    t: &Target,
    follow: bool,
    mut show: impl FnMut(&OmniMessage),
) -> Result<ClientState, WatchError> {
    let client = client()?;
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
        .map_err(|source| WatchError::Request {
            url: url.clone(),
            source,
        })?;
    if !res.status().is_success() {
        return Err(WatchError::Status {
            status: res.status(),
            body: res.text().await.unwrap_or_default(),
            url,
        });
    }
    let mut body = res.bytes_stream();
    let mut reducer = ClientReducer::new();
    let mut parser = SseDecoder::new();
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
                let events = parser.feed(&chunk).map_err(WatchError::Events)?;
                for ev in events {
                    reducer.on_event(ev.id.as_deref(), ev.event.as_deref(), &ev.data);
                }
            }
            Some(Err(e)) => return Err(WatchError::Stream(e)),
            None => return Ok(reducer.state()),
        }
    }
}
