//! Where a session runs when the server is one node of a cluster: the seam between the
//! single-node server and the cluster layer (`cluster/`, feature `cluster`). Without a
//! cluster nothing here is consulted and every session is this process's.

use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use penguin_sse_transport::{ServerEvent, Subscription};

use crate::api::SessionList;
use crate::error::ApiError;
use crate::host::HostedSession;
use crate::list::ListQuery;
use crate::sessions::Sessions;

/// Where a session runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum Place {
    /// Here: loaded, or free for this node to take.
    Here,
    /// On another live node, which answers its requests.
    At(String),
}

/// Why a request could not be handed to the owner.
#[derive(Debug)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum ForwardError {
    /// The owner does not answer (killed, paused, cut off): wait for its lease to lapse.
    Unreachable(String),
    /// The cluster itself failed (answered as it says).
    Failed(ApiError),
}

/// What the server asks of the cluster layer. One implementation (`cluster::Node`); a trait
/// so the server's code names no NATS type and builds without the feature.
#[async_trait::async_trait]
pub(crate) trait Placement: Send + Sync {
    /// Lets the layer reach the sessions (standing down a session it lost).
    fn bind(&self, sessions: &Arc<Sessions>);

    /// `Ok` while the cluster can take work (503 `cluster_unavailable` with the reason).
    fn ready(&self) -> Result<(), ApiError>;

    /// Where `id` runs now.
    async fn place(&self, id: &str) -> Result<Place, ApiError>;

    /// Waits until nobody holds `id` (its owner stopped answering), so this node may take it.
    async fn await_lapse(&self, id: &str) -> Result<(), ApiError>;

    /// Makes this node the owner of `id` before it is loaded from its trace: takes the lease
    /// and writes the session's replicated records as its trace files. A session nobody has
    /// records of is `session_not_found`.
    async fn claim(&self, sessions: &Arc<Sessions>, id: &str) -> Result<(), ApiError>;

    /// Right after a claimed session was built: its trace records go to the cluster too.
    /// Runs off the async workers (it may wait for a flush).
    fn attach(&self, session: &dyn HostedSession);

    /// A session this node just made (created, forked): takes its lease and replicates what
    /// its trace holds so far.
    async fn adopt(&self, sessions: &Arc<Sessions>, id: &str) -> Result<(), ApiError>;

    /// The session left memory (its writer is closed): its lease is released.
    fn unloaded(&self, id: &str);

    /// The server is stopping: the streams this node serves from the cluster end now.
    fn shutdown(&self);

    /// The server stopped: `loaded`'s traces are flushed to the cluster, their channels
    /// reclaimed once their last events are stored, their leases released, and this node
    /// leaves the registry.
    async fn leave(&self, loaded: &[Arc<crate::entry::Entry>]);

    /// The session was deleted: its records, events, index entry and lease go.
    async fn deleted(&self, id: &str) -> Result<(), ApiError>;

    /// The session's state, title or mode changed: the cluster's index learns it.
    fn changed(&self, id: &str);

    /// `GET /api/sessions` over every session of the cluster.
    async fn list(&self, sessions: &Arc<Sessions>, q: ListQuery) -> Result<SessionList, ApiError>;

    /// Runs `req` on `node` and returns its answer.
    async fn forward(&self, node: &str, req: Request) -> Result<Response, ForwardError>;

    /// The id of the last event of `id` the cluster stored.
    async fn last_event(&self, id: &str) -> Result<u64, ApiError>;

    /// A session's events from the cluster's replicated stream, as a subscription of the
    /// server's own kind: the events after `last_event_id` up to `upto` (or
    /// `resync_required`), then `snapshot` (taken after `upto` was read), then every event
    /// as the owner publishes it.
    async fn subscribe(
        &self,
        id: &str,
        last_event_id: Option<&str>,
        upto: u64,
        snapshot: Vec<ServerEvent>,
    ) -> Result<Subscription, ApiError>;

    /// Answers the requests other nodes forward to this one by running them through `router`.
    fn serve_forwarded(&self, router: axum::Router);
}

/// The header a forwarded request carries on the owner: such a request is never forwarded
/// again (two nodes disagreeing about an owner cannot bounce it between them).
pub(crate) const FORWARDED: &str = "x-penguin-forwarded";

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
    if req.headers().contains_key(FORWARDED) {
        return next.run(req).await;
    }
    let node = match cluster.place(&id).await {
        Ok(Place::Here) => return next.run(req).await,
        Ok(Place::At(node)) => node,
        Err(e) => return e.into_response(),
    };
    // Kept, so the request can still be answered here if the owner turns out to be gone.
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, app.body.max_bytes).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the request body could not be read within {} bytes: {e}",
                    app.body.max_bytes
                ),
            )
            .into_response()
        }
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
    // Read before the snapshot is taken, so the snapshot is never older than the events
    // replayed before it.
    let upto = cluster.last_event(id).await?;
    let snapshot = match cluster.place(id).await? {
        Place::Here => app.sessions.get(id).await?.snapshot_events(),
        Place::At(node) => match remote_snapshot(app, cluster.as_ref(), &node, id).await {
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

/// `GET /api/sessions/{id}/state` on the owner.
async fn remote_snapshot(
    app: &crate::AppState,
    cluster: &dyn Placement,
    node: &str,
    id: &str,
) -> Result<Vec<ServerEvent>, ForwardError> {
    let mut req = Request::new(axum::body::Body::empty());
    *req.uri_mut() = format!("/api/sessions/{id}/state")
        .parse()
        .map_err(|e| ForwardError::Failed(ApiError::internal(format!("{e}"))))?;
    let bearer = format!("Bearer {}", app.token);
    req.headers_mut().insert(
        axum::http::header::AUTHORIZATION,
        bearer.parse().map_err(|_| {
            ForwardError::Failed(ApiError::internal("the token is no header value"))
        })?,
    );
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
