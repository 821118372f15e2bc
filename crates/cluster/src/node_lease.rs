//! The node's own lease: one entry per node in the [`LEASE_BUCKET`](crate::LEASE_BUCKET)
//! (`node.<name>`: session ids hold no dot, so the keys never meet), renewed by one heartbeat
//! for every session the node holds. A session's entry names the node and the *incarnation*
//! of its node lease it was taken under, and changes only when the session changes hands; the
//! session is held while that incarnation's node lease is live. So an idle node sends one
//! renewal per period whatever number of sessions it holds.
//!
//! The fencing rules are those of a session lease, moved to the node: the node keeps its
//! deadline on the monotonic clock, counted from when it *sent* its last successful heartbeat,
//! minus a margin of a fifth of the lease, so it counts every one of its sessions lapsed before
//! a contender can (contenders wait for the node entry's `expires_ms`, stamped after the send).
//! A node whose deadline passed (it was paused past the lease) never writes under that
//! incarnation again: its next take starts a new incarnation, which leaves the sessions of the
//! old one lapsed for everybody. A heartbeat refused because the entry moved on (another
//! process took the node's name) fences the incarnation at once.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv::{self, Operation};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::{now_ms, ClusterError};

#[derive(Debug, Serialize, Deserialize)]
struct NodeValue {
    node: String,
    /// Which start of the node this is: a session taken under another is not its.
    incarnation: u64,
    /// Wall-clock milliseconds at which the node's sessions lapse unless it renews.
    expires_ms: u64,
}

pub(crate) fn key(node: &str) -> String {
    format!("node.{node}")
}

/// When `node`'s incarnation `incarnation` lapses (wall clock, ms): 0 when the node lease is
/// gone or belongs to another incarnation.
pub(crate) async fn expiry(
    kv: &kv::Store,
    node: &str,
    incarnation: u64,
) -> Result<u64, ClusterError> {
    let entry = kv
        .entry(key(node))
        .await
        .map_err(|e| ClusterError::unavailable("reading a node's lease", e))?;
    let Some(entry) = entry.filter(|e| e.operation == Operation::Put) else {
        return Ok(0);
    };
    let value: NodeValue =
        serde_json::from_slice(&entry.value).map_err(|e| ClusterError::Malformed {
            what: format!("lease of node {node}"),
            reason: e.to_string(),
        })?;
    Ok(if value.incarnation == incarnation {
        value.expires_ms
    } else {
        0
    })
}

/// One incarnation of this node's lease, shared by the sessions taken under it.
#[derive(Debug)]
pub(crate) struct Incarnation {
    pub(crate) id: u64,
    state: Mutex<State>,
    /// Woken when the incarnation is fenced.
    pub(crate) fenced: Notify,
}

#[derive(Debug)]
struct State {
    revision: u64,
    /// When the last successful heartbeat (or the start) was sent.
    renewed: Instant,
    fenced: Option<String>,
}

impl Incarnation {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The moment this node counts the incarnation lapsed, unless it renews before.
    pub(crate) fn deadline(&self, ttl: Duration) -> Instant {
        self.lock().renewed + ttl - ttl / 5
    }

    /// `Ok` while the incarnation may write: not fenced and within its deadline. Once it
    /// fails it fails for good.
    pub(crate) fn check(&self, ttl: Duration) -> Result<(), String> {
        let state = self.lock();
        if let Some(reason) = &state.fenced {
            return Err(reason.clone());
        }
        let age = state.renewed.elapsed();
        drop(state);
        if age + ttl / 5 >= ttl {
            return Err(self.fence(format!(
                "the node's lease was last renewed {} ms ago and lapses after {} ms",
                age.as_millis(),
                ttl.as_millis()
            )));
        }
        Ok(())
    }

    fn fence(&self, reason: String) -> String {
        let reason = self.lock().fenced.get_or_insert(reason).clone();
        self.fenced.notify_waiters();
        reason
    }

    fn age(&self) -> Duration {
        self.lock().renewed.elapsed()
    }
}

/// Held by every running keep-alive: the heartbeat goes on while one is held.
#[derive(Debug)]
pub(crate) struct Interest;

/// This node's lease in the cluster (one per connection, shared by its clones).
#[derive(Debug)]
pub(crate) struct NodeLease {
    kv: kv::Store,
    node: String,
    ttl: Duration,
    /// The current incarnation. Every write of the node's entry happens under this lock: two
    /// heartbeats at once would refuse each other.
    current: tokio::sync::Mutex<Option<Arc<Incarnation>>>,
    interest: Mutex<Weak<Interest>>,
}

impl NodeLease {
    pub(crate) fn new(kv: kv::Store, node: String, ttl: Duration) -> NodeLease {
        NodeLease {
            kv,
            node,
            ttl,
            current: tokio::sync::Mutex::new(None),
            interest: Mutex::new(Weak::new()),
        }
    }

    /// The incarnation to take a session under: the current one, renewed first when its
    /// last heartbeat is a third of the lease old (so a session taken now has most of a
    /// lease ahead of it), or a new one when there is none or it lapsed.
    pub(crate) async fn incarnation(&self) -> Result<Arc<Incarnation>, ClusterError> {
        let mut current = self.current.lock().await;
        if let Some(inc) = current.clone() {
            if inc.check(self.ttl).is_ok() {
                if inc.age() < self.ttl / 3 {
                    return Ok(inc);
                }
                match self.heartbeat(&inc).await {
                    Ok(()) => return Ok(inc),
                    Err(ClusterError::Fenced { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let inc = self.start().await?;
        *current = Some(inc.clone());
        Ok(inc)
    }

    /// A new incarnation: the node's entry written over, whatever it held (node names are
    /// unique in a cluster: an entry of this name is an earlier start of this node).
    async fn start(&self) -> Result<Arc<Incarnation>, ClusterError> {
        let id: u64 = rand::random();
        let key = key(&self.node);
        let sent = Instant::now();
        let revision = match self
            .kv
            .entry(&key)
            .await
            .map_err(|e| ClusterError::unavailable("reading the node's lease", e))?
        {
            None => self
                .kv
                .create(&key, self.value(id))
                .await
                .map_err(|e| ClusterError::unavailable("taking the node's lease", e))?,
            Some(e) => self
                .kv
                .update(&key, self.value(id), e.revision)
                .await
                .map_err(|e| ClusterError::unavailable("taking the node's lease", e))?,
        };
        Ok(Arc::new(Incarnation {
            id,
            state: Mutex::new(State {
                revision,
                renewed: sent,
                fenced: None,
            }),
            fenced: Notify::new(),
        }))
    }

    fn value(&self, incarnation: u64) -> bytes::Bytes {
        let value = NodeValue {
            node: self.node.clone(),
            incarnation,
            expires_ms: now_ms() + self.ttl.as_millis() as u64,
        };
        serde_json::to_vec(&value)
            .expect("a node lease serializes")
            .into()
    }

    /// Renews `inc` when it is still the current incarnation.
    pub(crate) async fn renew(&self, inc: &Arc<Incarnation>) -> Result<(), ClusterError> {
        let current = self.current.lock().await;
        if !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, inc)) {
            drop(current);
            let reason = inc.fence("the node's lease was started again".into());
            return Err(self.fenced(reason));
        }
        let result = self.heartbeat(inc).await;
        drop(current);
        result
    }

    /// One heartbeat of `inc`, by compare-and-set on its revision (under `current`'s lock).
    async fn heartbeat(&self, inc: &Incarnation) -> Result<(), ClusterError> {
        inc.check(self.ttl).map_err(|r| self.fenced(r))?;
        let revision = inc.lock().revision;
        let sent = Instant::now();
        match self
            .kv
            .update(key(&self.node), self.value(inc.id), revision)
            .await
        {
            Ok(next) => {
                let mut state = inc.lock();
                if state.fenced.is_none() {
                    state.revision = next;
                    state.renewed = sent;
                }
                drop(state);
                inc.check(self.ttl).map_err(|r| self.fenced(r))
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                let reason = inc.fence(format!(
                    "another process took node {}'s lease (it is past revision {revision})",
                    self.node
                ));
                Err(self.fenced(reason))
            }
            Err(e) => Err(ClusterError::unavailable("renewing the node's lease", e)),
        }
    }

    fn fenced(&self, reason: String) -> ClusterError {
        ClusterError::Fenced {
            session: format!("(every session of node {})", self.node),
            reason,
        }
    }

    /// An interest in the heartbeat: while one is held, the node renews its lease every
    /// third of it (one task per node, started by the first).
    pub(crate) fn keep(self: &Arc<Self>) -> Arc<Interest> {
        let mut interest = self.interest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = interest.upgrade() {
            return held;
        }
        let held = Arc::new(Interest);
        *interest = Arc::downgrade(&held);
        tokio::spawn(heartbeats(self.clone(), Arc::downgrade(&held)));
        held
    }
}

/// The node's heartbeat, while anyone holds `interest`. An incarnation that lapsed is left
/// alone (the next take starts a new one, which the next tick renews).
async fn heartbeats(node: Arc<NodeLease>, interest: Weak<Interest>) {
    let mut tick = tokio::time::interval(node.ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if interest.upgrade().is_none() {
            return;
        }
        let current = node.current.lock().await.clone();
        let Some(inc) = current.filter(|inc| inc.check(node.ttl).is_ok()) else {
            continue;
        };
        match node.renew(&inc).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(node = %node.node, "node lease renewal: {e}"),
        }
    }
}
