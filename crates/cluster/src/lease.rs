//! Session ownership: a lease per session in the [`LEASE_BUCKET`](crate::LEASE_BUCKET) KV
//! bucket, taken with create / compare-and-set on the entry's revision.
//!
//! The value names the holder and when the lease lapses (wall clock, milliseconds). The holder
//! renews it (a compare-and-set on its own last revision) well inside the lease; a contender
//! takes it only once that time has passed, again by compare-and-set, so of two contenders
//! exactly one wins. The holder keeps its own deadline on the monotonic clock, counted from
//! the moment it *sent* its last successful renewal and shortened by a margin, so it always
//! believes its lease lapsed before any contender can: a holder that was paused (SIGSTOP, a
//! long GC, a partition) finds on waking that its deadline passed and stands down
//! ([`Lease::check`] fails with [`ClusterError::Fenced`]) before writing anything.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv::{self, Operation};
use serde::{Deserialize, Serialize};

use crate::error::check_session;
use crate::{now_ms, ClusterError};

#[derive(Debug, Serialize, Deserialize)]
struct LeaseValue {
    node: String,
    /// Wall-clock milliseconds at which the lease lapses unless renewed.
    expires_ms: u64,
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
}

impl Leases {
    pub(crate) fn new(kv: kv::Store, node: String, ttl: Duration) -> Leases {
        Leases { kv, node, ttl }
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
        Ok(Some(Holder {
            node: value.node,
            expires_ms: value.expires_ms,
            revision: entry.revision,
        }))
    }

    fn value(&self) -> bytes::Bytes {
        let value = LeaseValue {
            node: self.node.clone(),
            expires_ms: now_ms() + self.ttl.as_millis() as u64,
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
        let current = self.entry(session).await?;
        let sent = Instant::now();
        let result = match &current {
            None => self.kv.create(session, self.value()).await.map_err(|e| {
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
                .update(session, self.value(), h.revision)
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
                state: Arc::new(Mutex::new(State {
                    revision,
                    renewed: sent,
                    fenced: None,
                })),
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
    revision: u64,
    /// When the last successful renewal (or the take) was sent.
    renewed: Instant,
    fenced: Option<String>,
}

/// A held lease. Clones share it. Renew it ([`Lease::renew`], or [`Lease::keep_alive`]) well
/// inside its length, and [`check`](Lease::check) it before every write.
#[derive(Clone, Debug)]
pub struct Lease {
    kv: kv::Store,
    session: String,
    node: String,
    ttl: Duration,
    state: Arc<Mutex<State>>,
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

    /// The entry's revision of the last take or renewal: the fencing token.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long before a contender could take it this node counts its lease lapsed: a fifth
    /// of the lease, for clock skew between nodes and the renewal's own travel.
    fn margin(&self) -> Duration {
        self.ttl / 5
    }

    /// Stops this node writing under the lease from now on, whatever its state in NATS: every
    /// later [`check`](Lease::check) fails with `reason` (the first reason given stays).
    /// Returns that error.
    pub fn fence(&self, reason: String) -> ClusterError {
        let mut state = self.lock();
        let reason = state.fenced.get_or_insert(reason).clone();
        ClusterError::Fenced {
            session: self.session.clone(),
            reason,
        }
    }

    /// Whether this node may still write for the session, without asking NATS: not fenced,
    /// and its last successful renewal was sent less than the lease (minus a margin) ago.
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
        let age = state.renewed.elapsed();
        drop(state);
        if age + self.margin() >= self.ttl {
            return Err(self.fence(format!(
                "the lease was last renewed {} ms ago and lapses after {} ms",
                age.as_millis(),
                self.ttl.as_millis()
            )));
        }
        Ok(())
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

    /// Renews the lease by compare-and-set on its revision. A lease that lapsed locally
    /// ([`check`](Lease::check)) or whose revision moved on is [`ClusterError::Fenced`]; NATS
    /// not answering is [`ClusterError::Unavailable`] (the lease then lapses unless a later
    /// renewal gets through in time).
    pub async fn renew(&self) -> Result<(), ClusterError> {
        self.check()?;
        let revision = self.revision();
        let sent = Instant::now();
        let value = LeaseValue {
            node: self.node.clone(),
            expires_ms: now_ms() + self.ttl.as_millis() as u64,
        };
        let value = serde_json::to_vec(&value).expect("a lease value serializes");
        match self.kv.update(&self.session, value.into(), revision).await {
            Ok(next) => {
                let mut state = self.lock();
                if state.fenced.is_none() {
                    state.revision = next;
                    state.renewed = sent;
                }
                drop(state);
                self.check()
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Err(self.fence(
                format!("another node took the lease (it is past revision {revision})"),
            )),
            Err(e) => Err(ClusterError::unavailable("renewing a lease", e)),
        }
    }

    /// Renews the lease every third of its length until it is fenced or `self` is released;
    /// the task ends with the error that ended it.
    pub fn keep_alive(&self) -> tokio::task::JoinHandle<ClusterError> {
        let lease = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease.ttl / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match lease.renew().await {
                    Ok(()) => {}
                    Err(e @ ClusterError::Fenced { .. }) => return e,
                    Err(e) => tracing::warn!(session = %lease.session, "lease renewal: {e}"),
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
