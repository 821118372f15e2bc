//! Session ownership: an entry per session in the [`LEASE_BUCKET`](crate::LEASE_BUCKET) KV
//! bucket, taken with create / compare-and-set on the entry's revision.
//!
//! The value names the holding node and the incarnation of the node's own lease it was taken
//! under (`node_lease.rs`); it changes only when the session changes hands. The session is
//! held while that node lease lives: one heartbeat per node renews every session it holds. A
//! contender takes a session only once the holder's node lease lapsed (or the session was
//! released), by compare-and-set, so of two contenders exactly one wins. The holder keeps its
//! deadline on the monotonic clock, counted from the moment it *sent* its node's last
//! successful heartbeat and shortened by a margin, so it always believes its leases lapsed
//! before any contender can: a holder that was paused (SIGSTOP, a long GC, a partition) finds
//! on waking that its deadline passed and stands down ([`Lease::check`] fails with
//! [`ClusterError::Fenced`]) before writing anything.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::error::check_session;
use crate::node_lease::{self, Incarnation, NodeLease};
use crate::{now_ms, ClusterError};

#[derive(Debug, Serialize, Deserialize)]
struct LeaseValue {
    node: String,
    /// Wall-clock milliseconds at which the lease lapses unless renewed: when the session was
    /// taken plus a lease, for a reader; with an incarnation, the node's lease decides.
    expires_ms: u64,
    /// The incarnation of the node's lease the session was taken under; absent in an entry
    /// renewed on its own (as every lease once was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    incarnation: Option<u64>,
}

/// Who holds a session's lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The node.
    pub node: String,
    /// Wall-clock milliseconds at which its lease lapses unless renewed.
    pub expires_ms: u64,
    /// The entry's revision.
    pub revision: u64,
}

impl Holder {
    /// Whether the lease is still live at wall-clock `now_ms`.
    pub fn live_at(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }
}

/// Takes and inspects session leases as one node.
#[derive(Clone, Debug)]
pub struct Leases {
    kv: kv::Store,
    node: String,
    ttl: Duration,
    node_lease: Arc<NodeLease>,
}

impl Leases {
    pub(crate) fn new(
        kv: kv::Store,
        node: String,
        ttl: Duration,
        node_lease: Arc<NodeLease>,
    ) -> Leases {
        Leases {
            kv,
            node,
            ttl,
            node_lease,
        }
    }

    /// The lease's length.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Who holds `session`'s lease now, `None` when nobody does (never taken, released, or
    /// lapsed).
    pub async fn holder(&self, session: &str) -> Result<Option<Holder>, ClusterError> {
        let holder = self.entry(session).await?;
        Ok(holder.filter(|h| h.live_at(now_ms())))
    }

    async fn entry(&self, session: &str) -> Result<Option<Holder>, ClusterError> {
        check_session(session)?;
        let entry = self
            .kv
            .entry(session)
            .await
            .map_err(|e| ClusterError::unavailable("reading a lease", e))?;
        let Some(entry) = entry else {
            return Ok(None);
        };
        if entry.operation != Operation::Put {
            return Ok(Some(Holder {
                node: String::new(),
                expires_ms: 0,
                revision: entry.revision,
            }));
        }
        let value: LeaseValue =
            serde_json::from_slice(&entry.value).map_err(|e| ClusterError::Malformed {
                what: format!("lease of {session}"),
                reason: e.to_string(),
            })?;
        let expires_ms = match value.incarnation {
            None => value.expires_ms,
            Some(incarnation) => node_lease::expiry(&self.kv, &value.node, incarnation).await?,
        };
        Ok(Some(Holder {
            node: value.node,
            expires_ms,
            revision: entry.revision,
        }))
    }

    fn value(&self, incarnation: u64) -> bytes::Bytes {
        let value = LeaseValue {
            node: self.node.clone(),
            expires_ms: now_ms() + self.ttl.as_millis() as u64,
            incarnation: Some(incarnation),
        };
        serde_json::to_vec(&value)
            .expect("a lease value serializes")
            .into()
    }

    /// Takes `session`'s lease: creates it when nobody ever held it, or replaces a lapsed (or
    /// released) one by compare-and-set on its revision. A live lease of another node is
    /// [`ClusterError::Held`]; so is losing the race to a contender. A live lease of this
    /// node's own name is taken over (the node restarted: names are unique in a cluster).
    pub async fn acquire(&self, session: &str) -> Result<Lease, ClusterError> {
        check_session(session)?;
        let inc = self.node_lease.incarnation().await?;
        let current = self.entry(session).await?;
        let result = match &current {
            None => self
                .kv
                .create(session, self.value(inc.id))
                .await
                .map_err(|e| {
                    if e.kind() == kv::CreateErrorKind::AlreadyExists {
                        None
                    } else {
                        Some(ClusterError::unavailable("taking a lease", e))
                    }
                }),
            Some(h) if h.live_at(now_ms()) && h.node != self.node => {
                return Err(ClusterError::Held {
                    session: session.to_owned(),
                    owner: h.node.clone(),
                })
            }
            Some(h) => self
                .kv
                .update(session, self.value(inc.id), h.revision)
                .await
                .map_err(|e| {
                    if e.kind() == kv::UpdateErrorKind::WrongLastRevision {
                        None
                    } else {
                        Some(ClusterError::unavailable("taking a lease", e))
                    }
                }),
        };
        match result {
            Ok(revision) => Ok(Lease {
                kv: self.kv.clone(),
                session: session.to_owned(),
                node: self.node.clone(),
                ttl: self.ttl,
                node_lease: self.node_lease.clone(),
                inc,
                state: Arc::new(Mutex::new(State {
                    revision,
                    fenced: None,
                })),
                stood_down: Arc::new(Notify::new()),
            }),
            Err(Some(e)) => Err(e),
            // Lost the race: whoever won holds it.
            Err(None) => {
                let owner = self
                    .entry(session)
                    .await?
                    .map(|h| h.node)
                    .unwrap_or_default();
                Err(ClusterError::Held {
                    session: session.to_owned(),
                    owner,
                })
            }
        }
    }
}

#[derive(Debug)]
struct State {
    /// The session entry's revision when taken.
    revision: u64,
    fenced: Option<String>,
}

/// A held lease. Clones share it. Keep it alive ([`Lease::keep_alive`], or
/// [`Lease::renew`] well inside its length: either renews the node's lease, which keeps every
/// session of the node), and [`check`](Lease::check) it before every write.
#[derive(Clone, Debug)]
pub struct Lease {
    kv: kv::Store,
    session: String,
    node: String,
    ttl: Duration,
    node_lease: Arc<NodeLease>,
    /// The node lease's incarnation it was taken under: it lives as long as that.
    inc: Arc<Incarnation>,
    state: Arc<Mutex<State>>,
    /// Woken when this session's lease is fenced on its own (stood down, released).
    stood_down: Arc<Notify>,
}

impl Lease {
    /// The session.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The holding node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The session entry's revision when it was taken: the fencing token.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops this node writing under the lease from now on, whatever its state in NATS: every
    /// later [`check`](Lease::check) fails with `reason` (the first reason given stays).
    /// Returns that error.
    pub fn fence(&self, reason: String) -> ClusterError {
        let mut state = self.lock();
        let reason = state.fenced.get_or_insert(reason).clone();
        drop(state);
        self.stood_down.notify_waiters();
        ClusterError::Fenced {
            session: self.session.clone(),
            reason,
        }
    }

    /// Whether this node may still write for the session, without asking NATS: not fenced,
    /// and its node's last successful heartbeat was sent less than the lease (minus a margin
    /// of a fifth, for clock skew between nodes and the heartbeat's own travel) ago.
    /// Once it fails it fails for good: the node stands down and takes the lease again if it
    /// wants the session back.
    pub fn check(&self) -> Result<(), ClusterError> {
        let state = self.lock();
        if let Some(reason) = &state.fenced {
            return Err(ClusterError::Fenced {
                session: self.session.clone(),
                reason: reason.clone(),
            });
        }
        drop(state);
        self.inc
            .check(self.ttl)
            .map_err(|reason| self.fence(reason))
    }

    /// [`check`](Lease::check), then asks NATS that the entry is still at this lease's
    /// revision.
    pub async fn verify(&self) -> Result<(), ClusterError> {
        self.check()?;
        let entry = self
            .kv
            .entry(&self.session)
            .await
            .map_err(|e| ClusterError::unavailable("reading a lease", e))?;
        let revision = self.revision();
        match entry {
            Some(e) if e.revision == revision && e.operation == Operation::Put => Ok(()),
            Some(e) => Err(self.fence(format!(
                "the lease is at revision {} (ours: {revision})",
                e.revision
            ))),
            None => Err(self.fence("the lease is gone".into())),
        }
    }

    /// Renews the node's lease (one compare-and-set for every session of the node). A lease
    /// that lapsed locally ([`check`](Lease::check)), or a node lease another process took
    /// or started again, is [`ClusterError::Fenced`]; NATS not answering is
    /// [`ClusterError::Unavailable`] (the lease then lapses unless a later renewal gets
    /// through in time).
    pub async fn renew(&self) -> Result<(), ClusterError> {
        self.check()?;
        match self.node_lease.renew(&self.inc).await {
            Ok(()) => self.check(),
            Err(ClusterError::Fenced { reason, .. }) => Err(self.fence(reason)),
            Err(e) => Err(e),
        }
    }

    /// Keeps the lease alive until it is fenced or released; the task ends with the error
    /// that ended it. The node's one heartbeat (every third of the lease) does the renewing
    /// while any keep-alive of the node runs; this task only watches, without a word to NATS.
    pub fn keep_alive(&self) -> tokio::task::JoinHandle<ClusterError> {
        let lease = self.clone();
        let interest = self.node_lease.keep();
        tokio::spawn(async move {
            let _interest = interest;
            loop {
                let stood_down = lease.stood_down.notified();
                let node_fenced = lease.inc.fenced.notified();
                tokio::pin!(stood_down, node_fenced);
                stood_down.as_mut().enable();
                node_fenced.as_mut().enable();
                if let Err(e) = lease.check() {
                    return e;
                }
                let deadline = lease.inc.deadline(lease.ttl);
                tokio::select! {
                    _ = stood_down => {}
                    _ = node_fenced => {}
                    _ = tokio::time::sleep_until(deadline.into()) => {}
                }
            }
        })
    }

    /// Gives the lease up (deletes the entry if it is still ours), so another node may take
    /// the session at once.
    pub async fn release(&self) -> Result<(), ClusterError> {
        let revision = self.revision();
        let _ = self.fence("released".into());
        match self
            .kv
            .delete_expect_revision(&self.session, Some(revision))
            .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(()),
            Err(e) => Err(ClusterError::unavailable("releasing a lease", e)),
        }
    }
}
