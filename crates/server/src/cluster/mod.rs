//! The server as one node of a cluster on NATS JetStream (feature `cluster`): the
//! [`Placement`] the server consults when `ServeOptions::cluster` is set.
//!
//! What a node does for the sessions it owns: holds each one's lease (renewed while it lives,
//! standing the session down when it is lost), copies each trace record to the replicated
//! trace (a commit waits for the publish acknowledgement), copies each broadcast event to the
//! replicated event stream under the same id, and keeps the cluster's session index current.
//! For the sessions it does not own: forwards their requests to the owner (`forward.rs`),
//! serves their streams from the replicated events (`stream.rs`), and takes a session over
//! once nobody holds its lease (its trace files rebuilt from the replicated records).

mod forward;
mod index;
mod stream;
mod traces;

use index::{relay_user_events, watch_index, write_index, Listed};
use traces::{local_records, materialize, Mirror};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use penguin_cluster::{
    Cluster, ClusterError, EventLog, EventPublisher, Lease, Leases, SessionIndex, TraceLog,
};
use penguin_sse_transport::{Channel, ChannelConfig, Epoch, ServerEvent, SseEvent, Subscription};
use penguin_trace_store::TraceLocation;
use tokio::sync::mpsc;

use crate::api::SessionInfo;
use crate::entry::Entry;
use crate::error::ApiError;
use crate::host::HostedSession;
use crate::placement::{ForwardError, Place, Placement};
use crate::sessions::Sessions;
use crate::sync::lock;

/// The epoch of a session's event ids on every node: fixed by its id, so an id a client got
/// from one node names the same event on any other (the replicated stream keeps the events,
/// so ids never restart).
pub(crate) fn epoch_of(id: &str) -> Epoch {
    // FNV-1a: stable across builds and platforms, unlike the std hasher.
    let mut h: u32 = 0x811c_9dc5;
    for b in id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    Epoch::from_u32(h)
}

/// A cluster error as the API answers it: 503 with the reason while NATS is unreachable.
pub(crate) fn api_error(e: ClusterError) -> ApiError {
    match e {
        ClusterError::Held { owner, .. } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "session_moved",
            if owner.is_empty() {
                "another node took this session a moment ago; try again".to_owned()
            } else {
                format!("node {owner} runs this session now; try again")
            },
        ),
        e => ApiError::new(
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            "cluster_unavailable",
            e.to_string(),
        ),
    }
}

/// A session this node owns.
struct Held {
    lease: Lease,
    mirror: Arc<Mirror>,
    /// Its events as JetStream acknowledged them: the streams of it on this node read this.
    stream: Arc<Channel>,
    // Renews the lease; stands the session down when it is lost. Aborted with the hold.
    watch: tokio::task::JoinHandle<()>,
    // Publishes the session's events; ends once told to (`None`), every event before it
    // stored.
    events: Option<tokio::task::JoinHandle<()>>,
    done: mpsc::UnboundedSender<Option<SseEvent>>,
}

impl Held {
    /// Gives the session back once its last events are stored: a lease released earlier
    /// would refuse them, and clients would never see how its last task ended.
    async fn give_back(mut self, id: &str) {
        // The session is idle and out of memory: every event it published is queued already.
        let _ = self.done.send(None);
        let wait = penguin_cluster::RETRY_FOR + Duration::from_secs(5);
        if let Some(events) = self.events.take() {
            if tokio::time::timeout(wait, events).await.is_err() {
                tracing::warn!("[cluster] {id}'s last events were not stored in time");
            }
        }
        if let Err(e) = self.lease.release().await {
            tracing::warn!("[cluster] releasing {id}'s lease: {e}");
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

/// A node of the cluster, as the server's [`Placement`].
pub(crate) struct Node {
    cluster: Cluster,
    leases: Leases,
    index: SessionIndex,
    events: EventLog,
    traces: TraceLog,
    channel: ChannelConfig,
    location: TraceLocation,
    held: Mutex<HashMap<String, Held>>,
    /// The cluster's session index as the watch last saw it.
    listed: Arc<Listed>,
    /// Sessions whose index entry is due, written in order by one task.
    updates: mpsc::UnboundedSender<String>,
    sessions: OnceLock<Weak<Sessions>>,
    forwarding: std::sync::atomic::AtomicBool,
    /// Sessions being given back (their last events on their way): taken again only after.
    returning: Arc<Mutex<HashMap<String, tokio::sync::watch::Receiver<bool>>>>,
    /// Set when the server stops: every stream served from the cluster ends.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Each session's mirror that this node's streams of it share.
    shared: stream::Shared,
    /// The cluster's usage as far as the replicated traces were read (their stream
    /// position), so each `GET /api/usage` reads only what was replicated since.
    usage: tokio::sync::Mutex<(u64, crate::usage::Ledger)>,
    me: Weak<Node>,
}

impl Node {
    /// Joins as `cluster`'s node: announces it (with `http`, its address) and keeps the
    /// session index watched. Must run inside the server's runtime.
    pub(crate) fn start(
        cluster: Cluster,
        channel: ChannelConfig,
        location: TraceLocation,
        http: String,
    ) -> Arc<Node> {
        let (updates, rx) = mpsc::unbounded_channel();
        let node = Arc::new_cyclic(|me| Node {
            leases: cluster.leases(),
            index: cluster.index(),
            events: cluster.events(),
            traces: cluster.traces(),
            channel,
            location,
            held: Mutex::new(HashMap::new()),
            listed: Arc::default(),
            updates,
            sessions: OnceLock::new(),
            forwarding: Default::default(),
            stopping: tokio::sync::watch::Sender::new(false),
            shared: Default::default(),
            returning: Arc::default(),
            usage: Default::default(),
            me: me.clone(),
            cluster,
        });
        node.cluster
            .registry()
            .heartbeat(node.cluster.node(), &http);
        tokio::spawn(write_index(node.me.clone(), rx));
        tokio::spawn(watch_index(node.index.clone(), node.listed.clone()));
        node
    }

    /// Lets the node reach the server's sessions (to take, stand down and list them), and
    /// starts relaying the user channel's events.
    pub(crate) fn bind(&self, sessions: &Arc<Sessions>) {
        if self.sessions.set(Arc::downgrade(sessions)).is_ok() {
            relay_user_events(self.cluster.client().clone(), self.name(), sessions);
        }
    }

    /// The server's sessions (gone only while the server itself is).
    fn sessions(&self) -> Result<Arc<Sessions>, ApiError> {
        self.sessions
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| ApiError::internal("the server is shutting down"))
    }

    fn name(&self) -> &str {
        self.cluster.node()
    }

    /// Whether this node owns `id` now. A session whose lease lapsed (the node was paused or
    /// cut off past it) stands down here and now, before anything is done for it.
    fn holds(&self, id: &str) -> bool {
        let lapsed = match lock(&self.held).get(id) {
            None => return false,
            Some(held) => match held.lease.check() {
                Ok(()) => return true,
                Err(e) => e.to_string(),
            },
        };
        if let Some(sessions) = self.sessions.get() {
            self.stand_down(sessions, id, &lapsed);
        }
        false
    }

    /// Takes `lease`'s session as this node's: its events continue the replicated stream's
    /// ids, its records go to the replicated trace, and the lease is kept alive.
    async fn hold(&self, sessions: &Arc<Sessions>, id: &str, lease: Lease) -> Result<(), ApiError> {
        let publisher = self
            .events
            .publisher(id, lease.clone())
            .await
            .map_err(api_error)?;
        let sink = self
            .traces
            .sink(id, lease.clone())
            .await
            .map_err(api_error)?;
        let channel = Channel::continuing(epoch_of(id), publisher.last_seq(), self.channel.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let done = tx.clone();
        channel.observe(Box::new(move |ev: &SseEvent| {
            let _ = tx.send(Some(ev.clone()));
        }));
        sessions.cfg.hub.install(id, channel);
        let stream = Channel::mirror(epoch_of(id), publisher.last_seq(), self.channel.clone());
        self.shared.set(id, &stream);
        let weak = Arc::downgrade(sessions);
        let events = tokio::spawn(publish_events(
            publisher,
            stream.clone(),
            rx,
            weak.clone(),
            self.me.clone(),
            id.to_owned(),
        ));
        let watch = {
            let (lease, me, id) = (lease.clone(), self.me.clone(), id.to_owned());
            tokio::spawn(async move {
                let lost = lease.keep_alive().await;
                let reason = match lost {
                    Ok(e) => e.to_string(),
                    Err(e) => format!("the lease keeper stopped: {e}"),
                };
                if let Some(me) = me.upgrade() {
                    me.stand_down(&weak, &id, &reason);
                }
            })
        };
        let mirror = Arc::new(Mirror {
            sink: Arc::new(sink),
            lease: lease.clone(),
            rt: tokio::runtime::Handle::current(),
        });
        let old = lock(&self.held).insert(
            id.to_owned(),
            Held {
                lease,
                mirror,
                stream,
                watch,
                events: Some(events),
                done,
            },
        );
        drop(old);
        Ok(())
    }

    /// Feeds a session's stream here from the replicated events once this node no longer
    /// publishes them (its streams go on, whoever runs the session next).
    fn follow_on(
        &self,
        id: &str,
        stream: Arc<Channel>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        stream::follow_on(
            self.events.clone(),
            id.to_owned(),
            stream,
            self.stopping.subscribe(),
        )
    }

    /// The lease of `id` is lost (or its events could not be stored): the session leaves this
    /// node at once, writing nothing more, and whoever holds the lease now runs it.
    fn stand_down(&self, sessions: &Weak<Sessions>, id: &str, reason: &str) {
        tracing::warn!("[cluster] session {id} stands down on this node: {reason}");
        let held = lock(&self.held).remove(id);
        if let Some(held) = held {
            // Nothing more is written under it (the interrupted run's last records included),
            // and it is given back if it is still ours, so a successor need not wait it out.
            held.lease.fence(format!("stood down: {reason}"));
            let follow = self.follow_on(id, held.stream.clone());
            tokio::spawn(async move {
                let _ = held.lease.release().await;
                follow.await;
            });
        }
        if let Some(sessions) = sessions.upgrade() {
            sessions.evict(id);
        }
    }
}

/// How long the event publisher waits, once an event arrived, for the events after it: a
/// task's events leave the engine a few at a time over a few milliseconds (between them, its
/// trace waits for its own acknowledgements), and on a fast NATS (a publish acknowledged in
/// 0.1 ms) they would otherwise go one message each. Every event reaches its streams this
/// much later.
const LINGER: Duration = Duration::from_millis(5);

/// Copies a session's broadcast events to the replicated stream, in order, each under the id
/// the session's channel gave it. An event that cannot be stored (the lease is lost, or NATS
/// stayed away past the retry window) stands the session down: no client may see an id the
/// stream does not hold.
async fn publish_events(
    mut publisher: EventPublisher,
    stream: Arc<Channel>,
    mut rx: mpsc::UnboundedReceiver<Option<SseEvent>>,
    sessions: Weak<Sessions>,
    node: Weak<Node>,
    id: String,
) {
    // What queued while the last publish was in flight goes out in the next (the deltas of one
    // answer in one message): a burst costs one round trip to NATS, not one per event.
    let mut queued = Vec::new();
    let mut batch = Vec::new();
    let mut sent = Vec::new();
    loop {
        if rx.recv_many(&mut queued, 1024).await == 0 {
            return;
        }
        if queued.last().is_some_and(Option::is_some) {
            tokio::time::sleep(LINGER).await;
            while queued.len() < 1024 {
                match rx.try_recv() {
                    Ok(ev) => queued.push(ev),
                    Err(_) => break,
                }
            }
        }
        // `None` is the end: the events before it still go out.
        let ended = queued.iter().any(Option::is_none);
        let mut last_id = None;
        batch.clear();
        sent.clear();
        for ev in queued.drain(..).map_while(|ev| ev) {
            last_id = Some(ev.id.seq);
            let data = Bytes::copy_from_slice(ev.data.as_str().as_bytes());
            batch.push((ev.event.map(str::to_owned), data));
            sent.push(ev);
        }
        if let Some(last_id) = last_id {
            let failed = match publisher.publish_all(&batch).await {
                Ok(seq) if seq == last_id => None,
                Ok(seq) => Some(format!("event {last_id} was stored as {seq}")),
                Err(e) => Some(e.to_string()),
            };
            if let Some(failed) = failed {
                if let Some(node) = node.upgrade() {
                    node.stand_down(&sessions, &id, &failed);
                }
                return;
            }
            // Stored: now this node's streams may show them.
            if !sent.iter().all(|ev| stream.relay(ev)) {
                tracing::error!(
                    "[cluster] {id}'s stream here lost its order; its readers reconnect"
                );
                stream.close();
            }
        }
        if ended {
            return;
        }
    }
}

#[async_trait::async_trait]
impl Placement for Node {
    fn ready(&self) -> Result<(), ApiError> {
        self.cluster.ensure_connected().map_err(api_error)
    }

    async fn place(&self, id: &str) -> Result<Place, ApiError> {
        // Even for a session held here: without NATS nothing it does could be stored.
        self.ready()?;
        if self.holds(id) {
            return Ok(Place::Here);
        }
        match self.leases.holder(id).await.map_err(api_error)? {
            Some(h) if h.node != self.name() => Ok(Place::At(h.node)),
            _ => Ok(Place::Here),
        }
    }

    async fn await_lapse(&self, id: &str) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + self.leases.ttl() * 2;
        loop {
            match self.leases.holder(id).await.map_err(api_error)? {
                Some(h) if h.node != self.name() => {}
                _ => return Ok(()),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(api_error(ClusterError::Unavailable {
                    reason: format!("the node holding session {id} does not answer"),
                }));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn claim(&self, id: &str) -> Result<(), ApiError> {
        if self.holds(id) {
            return Ok(());
        }
        let sessions = &self.sessions()?;
        // Unloaded a moment ago: its last events must be stored before it is taken again, or
        // the two publishers would race for the same ids.
        let returning = lock(&self.returning).get(id).cloned();
        if let Some(mut returned) = returning {
            // Bounded: past it, the conditional publishes still keep the ids from forking
            // (the slower publisher is refused and its session stands down).
            let waited =
                tokio::time::timeout(Duration::from_secs(10), returned.wait_for(|done| *done))
                    .await;
            if waited.is_err() {
                tracing::warn!("[cluster] {id}'s last events are still on their way");
            }
        }
        let lease = self.leases.acquire(id).await.map_err(api_error)?;
        let records = match self.traces.read_records(id).await {
            Ok(r) if !r.is_empty() => r,
            Ok(_) => {
                let _ = lease.release().await;
                return Err(ApiError::session_not_found(id));
            }
            Err(e) => {
                let _ = lease.release().await;
                return Err(api_error(e));
            }
        };
        let record = self.index.get(id).await.map_err(api_error)?;
        let settings = record
            .and_then(|r| r.meta.get("settings").cloned())
            .and_then(|s| serde_json::from_value(s).ok());
        let (location, owned, here) = (self.location.clone(), id.to_owned(), sessions.clone());
        tokio::task::spawn_blocking(move || materialize(&location, &here.index, &owned, &records))
            .await
            .map_err(|e| ApiError::internal(format!("rebuilding session {id} failed: {e}")))?
            .map_err(|e| {
                ApiError::internal(format!("cannot write session {id}'s trace here: {e}"))
            })?;
        if let Some(settings) = settings {
            sessions.settings.save(id, &settings);
        }
        self.hold(sessions, id, lease).await
    }

    fn attach(&self, session: &dyn HostedSession) {
        let Some(mirror) = lock(&self.held).get(session.id()).map(|h| h.mirror.clone()) else {
            return;
        };
        let writer = session.writer();
        // Loading may have written already (a dangling compaction is closed at once): those
        // records are the file's last ones, and go to the cluster first.
        if let Err(e) = writer.flush() {
            tracing::warn!(
                "[cluster] flushing {} before replicating: {e}",
                session.id()
            );
        }
        let written = writer.written() as usize;
        if written > 0 {
            let records = match self.sessions() {
                Ok(here) => local_records(&here.index, session.id()),
                Err(_) => Err(std::io::Error::other("the server is shutting down")),
            };
            match records {
                Ok(records) => {
                    for (file, line) in &records[records.len().saturating_sub(written)..] {
                        mirror.sink.record_in(*file, line.clone());
                    }
                }
                Err(e) => tracing::error!(
                    "[cluster] {}: records written while loading are not replicated: {e}",
                    session.id()
                ),
            }
        }
        writer.set_mirror(mirror);
    }

    async fn adopt(&self, id: &str) -> Result<(), ApiError> {
        let sessions = &self.sessions()?;
        let lease = self.leases.acquire(id).await.map_err(api_error)?;
        let (here, owned) = (sessions.clone(), id.to_owned());
        let records = tokio::task::spawn_blocking(move || local_records(&here.index, &owned))
            .await
            .map_err(|e| ApiError::internal(format!("reading session {id} failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("cannot read session {id}'s trace: {e}")))?;
        self.hold(sessions, id, lease).await?;
        let mirror = lock(&self.held).get(id).map(|h| h.mirror.clone());
        if let Some(mirror) = mirror {
            for (file, line) in records {
                mirror.sink.record_in(file, line);
            }
            mirror.sink.flush().await.map_err(api_error)?;
            // A created session is loaded already (a forked one is attached as it loads).
            if let Some(entry) = sessions.loaded_entry_quiet(id) {
                entry.session().writer().set_mirror(mirror);
            }
        }
        Ok(())
    }

    fn unloaded(&self, id: &str) {
        let Some(held) = lock(&self.held).remove(id) else {
            return;
        };
        let (done, returned) = tokio::sync::watch::channel(false);
        lock(&self.returning).insert(id.to_owned(), returned);
        let follow = self.follow_on(id, held.stream.clone());
        let (id, returning) = (id.to_owned(), self.returning.clone());
        tokio::spawn(async move {
            held.give_back(&id).await;
            lock(&returning).remove(&id);
            done.send_replace(true);
            follow.await;
        });
    }

    fn shutdown(&self) {
        self.stopping.send_replace(true);
    }

    async fn leave(&self, loaded: &[Arc<Entry>]) {
        for e in loaded {
            let writer = e.session().writer().clone();
            // Aborted runs end within moments; their last records go with the flush.
            let settled = tokio::time::timeout(Duration::from_secs(5), {
                let mut rx = e.status_tx.subscribe();
                async move {
                    let _ = rx
                        .wait_for(|s| *s == penguin_sse_transport::SessionStatus::Idle)
                        .await;
                }
            })
            .await;
            if settled.is_err() {
                tracing::warn!("[cluster] {} did not stop within 5 s", e.id);
            }
            if let Ok(Err(err)) = tokio::task::spawn_blocking(move || writer.flush()).await {
                tracing::warn!("[cluster] {}'s last records: {err}", e.id);
            }
            if let Some(sessions) = self.sessions.get().and_then(Weak::upgrade) {
                sessions.cfg.hub.reclaim(&e.id);
            }
            let held = lock(&self.held).remove(&e.id);
            if let Some(held) = held {
                let stream = held.stream.clone();
                held.give_back(&e.id).await;
                // Its readers go to whichever node runs it next.
                stream.close();
            }
        }
        if let Err(e) = self.cluster.registry().leave(self.name()).await {
            tracing::warn!("[cluster] leaving the registry: {e}");
        }
    }

    async fn deleted(&self, id: &str) -> Result<(), ApiError> {
        let held = lock(&self.held).remove(id);
        self.traces.purge(id).await.map_err(api_error)?;
        self.events.purge(id).await.map_err(api_error)?;
        self.index.remove(id).await.map_err(api_error)?;
        self.listed.remove(id);
        if let Some(held) = held {
            held.stream.close();
            let _ = held.lease.release().await;
        }
        Ok(())
    }

    fn changed(&self, id: &str) {
        if self.holds(id) {
            let _ = self.updates.send(id.to_owned());
        }
    }

    fn sessions(&self) -> Vec<SessionInfo> {
        let Ok(sessions) = Node::sessions(self) else {
            return Vec::new();
        };
        self.listed.rows(&sessions.loaded())
    }

    async fn forward(&self, node: &str, req: Request) -> Result<Response, ForwardError> {
        forward::send(&self.cluster, node, req).await
    }

    async fn usage(&self) -> Result<Vec<crate::usage::RequestUsage>, ApiError> {
        let mut usage = self.usage.lock().await;
        let (after, ledger) = &mut *usage;
        let read = self.traces.read_since(*after).await.map_err(api_error)?;
        for (session, record) in &read.records {
            ledger.line(session, &record.line);
        }
        *after = read.next;
        ledger
            .requests
            .retain(|r| !self.listed.is_gone(&r.session_id));
        Ok(ledger.requests.clone())
    }

    fn stream_here(&self, id: &str) -> Option<Arc<Channel>> {
        if !self.holds(id) {
            return None;
        }
        lock(&self.held).get(id).map(|h| h.stream.clone())
    }

    async fn last_event(&self, id: &str) -> Result<u64, ApiError> {
        self.events.last_seq(id).await.map_err(api_error)
    }

    async fn subscribe(
        &self,
        id: &str,
        last_event_id: Option<&str>,
        upto: u64,
        snapshot: Vec<ServerEvent>,
    ) -> Result<Subscription, ApiError> {
        let stopping = self.stopping.subscribe();
        stream::subscribe(
            &self.events,
            &self.channel,
            &self.shared,
            id,
            last_event_id,
            upto,
            snapshot,
            stopping,
        )
        .await
    }

    fn serve_forwarded(&self, router: axum::Router) {
        // One subscription per node: a second would answer every request twice.
        if !self
            .forwarding
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            forward::serve(self.cluster.clone(), router);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::epoch_of;

    #[test]
    fn a_sessions_epoch_is_the_same_on_every_node_and_build() {
        // Fixed values: a change here would break every client's Last-Event-ID across an
        // upgrade of part of a cluster.
        assert_eq!(epoch_of("s").to_string(), "f60c4582");
        assert_ne!(epoch_of("a"), epoch_of("b"));
    }
}
