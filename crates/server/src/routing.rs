//! Which node answers a request, in a cluster: the middleware that hands a session's
//! requests to the node that owns it, and the streams every node serves from the cluster's
//! events (see `placement.rs` for the seam, `cluster/` for the node). Without a cluster both
//! are the single server's own paths.

use axum::extract::Request;
use axum::response::Response;
use penguin_sse_transport::{ServerEvent, Subscription};

use crate::error::ApiError;
use crate::placement::{ForwardError, ForwardedBy, Place, Placement};

/// The session a request is about, when another node may be the one to answer it: every
/// route under `/api/sessions/{id}` but the two streams (served here from the cluster's
/// events, see [`subscribe`]).
fn forwardable(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/api/sessions/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if !crate::sessions::valid_session_id(id) || matches!(tail, "stream" | "socket") {
        return None;
    }
    Some(id)
}

/// Middleware: in a cluster, a request for a session another node owns is answered by that
/// node; one whose owner stopped answering waits for its lease to lapse and is answered
/// here, by the node taking the session over.
pub(crate) async fn route(
    axum::extract::State(app): axum::extract::State<crate::AppState>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::response::IntoResponse;
    let Some(cluster) = app.sessions.cfg.cluster.clone() else {
        return next.run(req).await;
    };
    let Some(id) = forwardable(req.uri().path()).map(str::to_owned) else {
        return next.run(req).await;
    };
    if let Some(ForwardedBy(by)) = req.extensions().get::<ForwardedBy>() {
        tracing::debug!(
            "[cluster] {} {} forwarded by node {by}",
            req.method(),
            req.uri().path()
        );
        return next.run(req).await;
    }
    let node = match cluster.place(&id).await {
        Ok(Place::Here) => return next.run(req).await,
        Ok(Place::At(node)) => node,
        Err(e) => return e.into_response(),
    };
    // Kept, so the request can still be answered here if the owner turns out to be gone.
    let (parts, body) = req.into_parts();
    let body = match crate::error::read_bytes(&parts.headers, body, &app.body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let mut copy = Request::new(axum::body::Body::from(body.clone()));
    *copy.method_mut() = parts.method.clone();
    *copy.uri_mut() = parts.uri.clone();
    *copy.headers_mut() = parts.headers.clone();
    match cluster.forward(&node, copy).await {
        Ok(response) => response,
        Err(ForwardError::Failed(e)) => e.into_response(),
        Err(ForwardError::Unreachable(why)) => {
            tracing::warn!("[cluster] session {id}: {why}; taking it over once its lease lapses");
            if let Err(e) = cluster.await_lapse(&id).await {
                return e.into_response();
            }
            next.run(Request::from_parts(parts, axum::body::Body::from(body)))
                .await
        }
    }
}

/// A stream's subscription to session `id`: its channel here, or, in a cluster, the
/// cluster's replicated events with the snapshot from wherever the session runs.
pub(crate) async fn subscribe(
    app: &crate::AppState,
    id: &str,
    last_event_id: Option<&str>,
) -> Result<Subscription, ApiError> {
    let Some(cluster) = app.sessions.cfg.cluster.clone() else {
        let e = app.sessions.get(id).await?;
        let channel = app.sessions.cfg.hub.get(&e.id);
        return Ok(channel.connect(last_event_id, || e.snapshot_events()));
    };
    if !crate::sessions::valid_session_id(id) {
        // The same answer as everywhere else.
        app.sessions.get(id).await?;
    }
    if let Some(channel) = cluster.stream_here(id) {
        // Taken under the stream's lock, so it describes the session at least as far as the
        // events before it, and the stored events after it come after it.
        let e = app.sessions.get(id).await?;
        if let Some(sub) = channel.connect_mirror(last_event_id, None, || e.snapshot_events()) {
            return Ok(sub);
        }
    }
    // Read before the snapshot is taken, so the snapshot is never older than the events
    // replayed before it.
    let upto = cluster.last_event(id).await?;
    let snapshot = match cluster.place(id).await? {
        Place::Here => app.sessions.get(id).await?.snapshot_events(),
        Place::At(node) => match remote_snapshot(cluster.as_ref(), &node, id).await {
            Err(ForwardError::Unreachable(why)) => {
                tracing::warn!(
                    "[cluster] session {id}: {why}; taking it over once its lease lapses"
                );
                cluster.await_lapse(id).await?;
                app.sessions.get(id).await?.snapshot_events()
            }
            Err(ForwardError::Failed(e)) => return Err(e),
            Ok(events) => events,
        },
    };
    cluster.subscribe(id, last_event_id, upto, snapshot).await
}

/// `GET /api/sessions/{id}/state` on the owner (as every forwarded request, without the
/// token: the owner trusts this node's signature).
async fn remote_snapshot(
    cluster: &dyn Placement,
    node: &str,
    id: &str,
) -> Result<Vec<ServerEvent>, ForwardError> {
    let mut req = Request::new(axum::body::Body::empty());
    *req.uri_mut() = format!("/api/sessions/{id}/state")
        .parse()
        .map_err(|e| ForwardError::Failed(ApiError::internal(format!("{e}"))))?;
    req.headers_mut().insert(
        axum::http::header::HOST,
        axum::http::HeaderValue::from_static("localhost"),
    );
    let response = cluster.forward(node, req).await?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(|e| ForwardError::Failed(ApiError::internal(e.to_string())))?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .and_then(|m| m.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        return Err(ForwardError::Failed(ApiError::new(
            status,
            "owner_refused",
            message,
        )));
    }
    serde_json::from_slice(&body).map_err(|e| {
        ForwardError::Failed(ApiError::internal(format!(
            "the owner's snapshot of {id} is unreadable: {e}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::forwardable;

    #[test]
    fn every_session_route_but_the_streams_is_forwardable() {
        assert_eq!(forwardable("/api/sessions/s-1"), Some("s-1"));
        assert_eq!(forwardable("/api/sessions/s-1/tasks"), Some("s-1"));
        assert_eq!(forwardable("/api/sessions/s-1/approvals/c1"), Some("s-1"));
        assert_eq!(forwardable("/api/sessions/s-1/stream"), None);
        assert_eq!(forwardable("/api/sessions/s-1/socket"), None);
        assert_eq!(forwardable("/api/sessions"), None);
        assert_eq!(forwardable("/api/sessions/"), None);
        assert_eq!(forwardable("/api/sessions/../x"), None);
        assert_eq!(forwardable("/api/events"), None);
    }
}
