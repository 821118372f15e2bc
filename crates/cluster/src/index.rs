//! Which nodes are live ([`Registry`]) and every session of the cluster ([`SessionIndex`]).

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::error::check_session;
use crate::{now_ms, valid_name, ClusterError};

/// A node as the registry knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its name.
    pub node: String,
    /// Where its HTTP API listens (`http://host:port`).
    pub http: String,
    /// Wall-clock milliseconds of its last heartbeat.
    pub heartbeat_ms: u64,
}

/// The node registry: one entry per node in the [`NODE_BUCKET`](crate::NODE_BUCKET),
/// refreshed by the node's heartbeat; a node whose heartbeat is older than the lease is not
/// live.
#[derive(Clone, Debug)]
pub struct Registry {
    kv: kv::Store,
    ttl: Duration,
}

impl Registry {
    pub(crate) fn new(kv: kv::Store, ttl: Duration) -> Registry {
        Registry { kv, ttl }
    }

    /// Records `node` as live at `http` now.
    pub async fn announce(&self, node: &str, http: &str) -> Result<(), ClusterError> {
        if !valid_name(node) {
            return Err(ClusterError::InvalidName {
                what: "node",
                name: node.to_owned(),
            });
        }
        let info = NodeInfo {
            node: node.to_owned(),
            http: http.to_owned(),
            heartbeat_ms: now_ms(),
        };
        let value = serde_json::to_vec(&info).expect("node info serializes");
        self.kv
            .put(node, value.into())
            .await
            .map_err(|e| ClusterError::unavailable("announcing a node", e))?;
        Ok(())
    }

    /// Announces `node` now and every third of the lease until the task is aborted.
    pub fn heartbeat(&self, node: &str, http: &str) -> tokio::task::JoinHandle<()> {
        let (registry, node, http) = (self.clone(), node.to_owned(), http.to_owned());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(registry.ttl / 3);
            loop {
                tick.tick().await;
                if let Err(e) = registry.announce(&node, &http).await {
                    tracing::warn!(%node, "node heartbeat: {e}");
                }
            }
        })
    }

    /// Removes `node` (it is leaving).
    pub async fn leave(&self, node: &str) -> Result<(), ClusterError> {
        self.kv
            .delete(node)
            .await
            .map_err(|e| ClusterError::unavailable("removing a node", e))
    }

    /// One node, live or not.
    pub async fn node(&self, node: &str) -> Result<Option<NodeInfo>, ClusterError> {
        get_json(&self.kv, node, "node").await
    }

    /// The live nodes, by name.
    pub async fn live(&self) -> Result<Vec<NodeInfo>, ClusterError> {
        let now = now_ms();
        let ttl = self.ttl.as_millis() as u64;
        let mut nodes: Vec<NodeInfo> = all_json(&self.kv, "node").await?;
        nodes.retain(|n| n.heartbeat_ms + ttl > now);
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(nodes)
    }
}

/// A session in the cluster-wide index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session id.
    pub session: String,
    /// The node that last held it (the lease says whether it still does).
    pub owner: Option<String>,
    /// What the owner last published of it (the server's session info), as JSON.
    pub meta: serde_json::Value,
    /// Wall-clock milliseconds of that publication.
    pub updated_ms: u64,
}

/// The cluster-wide session index: session id → [`SessionRecord`] in the
/// [`SESSION_BUCKET`](crate::SESSION_BUCKET), so any node lists every session.
#[derive(Clone, Debug)]
pub struct SessionIndex {
    kv: kv::Store,
}

impl SessionIndex {
    pub(crate) fn new(kv: kv::Store) -> SessionIndex {
        SessionIndex { kv }
    }

    /// Records `session` as owned by `owner` with `meta`.
    pub async fn put(
        &self,
        session: &str,
        owner: Option<&str>,
        meta: serde_json::Value,
    ) -> Result<SessionRecord, ClusterError> {
        check_session(session)?;
        let record = SessionRecord {
            session: session.to_owned(),
            owner: owner.map(str::to_owned),
            meta,
            updated_ms: now_ms(),
        };
        let value = serde_json::to_vec(&record).expect("a session record serializes");
        self.kv
            .put(session, value.into())
            .await
            .map_err(|e| ClusterError::unavailable("indexing a session", e))?;
        Ok(record)
    }

    /// One session's record.
    pub async fn get(&self, session: &str) -> Result<Option<SessionRecord>, ClusterError> {
        check_session(session)?;
        get_json(&self.kv, session, "session record").await
    }

    /// Removes `session` from the index.
    pub async fn remove(&self, session: &str) -> Result<(), ClusterError> {
        check_session(session)?;
        self.kv
            .delete(session)
            .await
            .map_err(|e| ClusterError::unavailable("removing a session", e))
    }

    /// Every session of the cluster, by id.
    pub async fn list(&self) -> Result<Vec<SessionRecord>, ClusterError> {
        let mut all: Vec<SessionRecord> = all_json(&self.kv, "session record").await?;
        all.sort_by(|a, b| a.session.cmp(&b.session));
        Ok(all)
    }
}

/// One change of the [`SessionIndex`]: a session's record as it is now, or `None` when the
/// session was removed.
pub type IndexChange = (String, Option<SessionRecord>);

impl SessionIndex {
    /// Every session's current record, then every change as it happens: what a node keeps
    /// its listing from, so a listing asks NATS nothing. Ends when the connection to the
    /// bucket ends (follow it again then).
    pub async fn watch(
        &self,
    ) -> Result<futures::stream::BoxStream<'static, Result<IndexChange, ClusterError>>, ClusterError>
    {
        use futures::StreamExt;
        let watch = self
            .kv
            .watch_with_history(">")
            .await
            .map_err(|e| ClusterError::unavailable("watching the session index", e))?;
        Ok(watch
            .map(|entry| {
                let entry = entry
                    .map_err(|e| ClusterError::unavailable("watching the session index", e))?;
                if entry.operation != Operation::Put {
                    return Ok((entry.key, None));
                }
                let record = serde_json::from_slice(&entry.value).map_err(|err| {
                    ClusterError::Malformed {
                        what: format!("session record {}", entry.key),
                        reason: err.to_string(),
                    }
                })?;
                Ok((entry.key, Some(record)))
            })
            .boxed())
    }
}

async fn get_json<T: for<'de> Deserialize<'de>>(
    kv: &kv::Store,
    key: &str,
    what: &str,
) -> Result<Option<T>, ClusterError> {
    let entry = kv
        .entry(key)
        .await
        .map_err(|e| ClusterError::unavailable(&format!("reading a {what}"), e))?;
    match entry {
        Some(e) if e.operation == Operation::Put => serde_json::from_slice(&e.value)
            .map(Some)
            .map_err(|err| ClusterError::Malformed {
                what: format!("{what} {key}"),
                reason: err.to_string(),
            }),
        _ => Ok(None),
    }
}

async fn all_json<T: for<'de> Deserialize<'de>>(
    kv: &kv::Store,
    what: &str,
) -> Result<Vec<T>, ClusterError> {
    let keys: Vec<String> = match kv.keys().await {
        Ok(keys) => keys
            .try_collect()
            .await
            .map_err(|e| ClusterError::unavailable(&format!("listing {what}s"), e))?,
        Err(e) => return Err(ClusterError::unavailable(&format!("listing {what}s"), e)),
    };
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        if let Some(v) = get_json(kv, &key, what).await? {
            out.push(v);
        }
    }
    Ok(out)
}
