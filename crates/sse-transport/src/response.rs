//! SSE over axum (feature `axum`): the `Last-Event-ID` header and a `text/event-stream`
//! response around an [`SseStream`].

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use crate::channel::Channel;
use crate::event::ServerEvent;
use crate::sse::{open_stream, SseConfig};

/// The `Last-Event-ID` header, if present. A present but non-UTF-8 value is returned lossily, so
/// it still counts as present (and misses), as `!== undefined` does in the reference.
pub fn last_event_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// Wraps an [`SseStream`](crate::SseStream) (or a stream around one, e.g. holding a permit while it lasts) in a
/// `text/event-stream` response with `Cache-Control: no-cache` and `X-Accel-Buffering: no`.
pub fn into_response<S>(stream: S) -> Response
where
    S: futures_core::Stream<Item = Result<bytes::Bytes, std::convert::Infallible>> + Send + 'static,
{
    let mut res = Response::new(Body::from_stream(stream));
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

/// A complete SSE response for a channel: [`open_stream`] + [`into_response`].
///
/// ```no_run
/// use std::sync::Arc;
/// use axum::{extract::State, http::HeaderMap, routing::get, Router};
/// use penguin_sse_transport::{sse_response, last_event_id, Channel, ChannelConfig, ServerEvent, SseConfig};
///
/// async fn stream(State(ch): State<Arc<Channel>>, headers: HeaderMap) -> axum::response::Response {
///     sse_response(&ch, last_event_id(&headers).as_deref(), vec![ServerEvent::Hello], &SseConfig::default())
/// }
/// let app: Router = Router::new().route("/stream", get(stream)).with_state(Channel::new(ChannelConfig::default()));
/// ```
pub fn sse_response(
    channel: &Arc<Channel>,
    last_event_id: Option<&str>,
    initial: Vec<ServerEvent>,
    config: &SseConfig,
) -> Response {
    into_response(open_stream(channel, last_event_id, || initial, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_id_header_presence_is_what_counts() {
        let mut h = HeaderMap::new();
        assert_eq!(last_event_id(&h), None);
        h.insert("Last-Event-ID", HeaderValue::from_static(""));
        assert_eq!(last_event_id(&h).as_deref(), Some(""));
    }
}
