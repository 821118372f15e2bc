//! Where a session runs when the server is one node of a cluster: the seam between the
//! single-node server and the cluster layer (`cluster/`, feature `cluster`). Without a
//! cluster nothing here is consulted and every session is this process's. The routes'
//! side of it (forwarding middleware, streams) is `routing.rs`.

use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use penguin_sse_transport::{ServerEvent, Subscription};

use crate::api::SessionInfo;
use crate::error::ApiError;
use crate::host::HostedSession;

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
    /// `Ok` while the cluster can take work (503 `cluster_unavailable` with the reason).
    fn ready(&self) -> Result<(), ApiError>;

    /// Where `id` runs now.
    async fn place(&self, id: &str) -> Result<Place, ApiError>;

    /// Waits until nobody holds `id` (its owner stopped answering), so this node may take it.
    async fn await_lapse(&self, id: &str) -> Result<(), ApiError>;

    /// Makes this node the owner of `id` before it is loaded from its trace: takes the lease
    /// and writes the session's replicated records as its trace files. A session nobody has
    /// records of is `session_not_found`.
    async fn claim(&self, id: &str) -> Result<(), ApiError>;

    /// Right after a claimed session was built: its trace records go to the cluster too.
    /// Runs off the async workers (it may wait for a flush).
    fn attach(&self, session: &dyn HostedSession);

    /// A session this node just made (created, forked): takes its lease and replicates what
    /// its trace holds so far.
    async fn adopt(&self, id: &str) -> Result<(), ApiError>;

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

    /// Every session of the cluster as `GET /api/sessions` lists it (this node's loaded ones as
    /// they are now, the others as their owners last indexed them).
    fn sessions(&self) -> Vec<SessionInfo>;

    /// Runs `req` on `node` and returns its answer.
    async fn forward(&self, node: &str, req: Request) -> Result<Response, ForwardError>;

    /// The stream of `id` as this node, its owner, stored its events, while it is: a stream
    /// of it here reads this (with the session's snapshot taken as it connects), and needs
    /// nothing from the cluster.
    fn stream_here(&self, id: &str) -> Option<Arc<penguin_sse_transport::Channel>>;

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

    /// Every request of every session of the cluster (deleted ones aside), from the
    /// replicated traces: `GET /api/usage` is the same on every node, whichever node ran
    /// a session and whether it still lives.
    async fn usage(&self) -> Result<Vec<crate::usage::RequestUsage>, ApiError>;
}

/// What a request another node forwarded carries on the owner, as a request extension (which
/// nothing arriving over HTTP can set): the node that sent it, whose signature under the
/// cluster secret verified. The sending node checked the user's token, so the owner runs it
/// as authenticated (no token travels between nodes); and it is never forwarded again (two
/// nodes disagreeing about an owner cannot bounce it between them).
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) struct ForwardedBy(pub(crate) String);
