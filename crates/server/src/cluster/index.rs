//! What every node knows of every session: the cluster's session index (written by the
//! owners, watched by every node for its listing) and the user channel's events, relayed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use penguin_cluster::{SessionIndex, SessionRecord};
use penguin_sse_transport::{EventData, SseEvent};
use serde::Deserialize;
use tokio::sync::mpsc;

use super::Node;
use crate::api::SessionInfo;
use crate::entry::Entry;
use crate::sessions::Sessions;
use crate::sync::lock;

const USER_SUBJECT: &str = "penguin.user";

thread_local! {
    // Set while an event another node sent is published here, so it is not sent back out.
    static RELAYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The user channel's events (`session_created`, `session_state`, `session_title`, …) of
/// every node reach every node's `/api/events`, so a page open on one node sees sessions
/// another node runs. Plain NATS publish/subscribe: the user channel has no cluster-wide ids
/// (each node numbers its own), and a client that misses some lists again.
pub(super) fn relay_user_events(client: async_nats::Client, node: &str, sessions: &Arc<Sessions>) {
    let channel = sessions.channel(crate::sessions::USER_CHANNEL);
    let (tx, mut out) = mpsc::unbounded_channel::<SseEvent>();
    channel.observe(Box::new(move |ev: &SseEvent| {
        if !RELAYING.get() {
            let _ = tx.send(ev.clone());
        }
    }));
    let (sender, me) = (client.clone(), node.to_owned());
    tokio::spawn(async move {
        while let Some(ev) = out.recv().await {
            let mut h = async_nats::HeaderMap::new();
            h.insert(penguin_cluster::NODE_HEADER, me.as_str());
            let data = Bytes::copy_from_slice(ev.data.as_str().as_bytes());
            if let Err(e) = sender.publish_with_headers(USER_SUBJECT, h, data).await {
                tracing::debug!("[cluster] user event not relayed: {e}");
            }
        }
    });
    let (sessions, me) = (Arc::downgrade(sessions), node.to_owned());
    tokio::spawn(async move {
        let mut incoming = match client.subscribe(USER_SUBJECT).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("[cluster] other nodes' session events will not reach here: {e}");
                return;
            }
        };
        while let Some(m) = incoming.next().await {
            let from = m
                .headers
                .as_ref()
                .and_then(|h| h.get(penguin_cluster::NODE_HEADER));
            if from.is_none_or(|f| f.as_str() == me) {
                continue;
            }
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            let data = EventData::Text(Arc::from(String::from_utf8_lossy(&m.payload).as_ref()));
            let channel = sessions.channel(crate::sessions::USER_CHANNEL);
            RELAYING.set(true);
            channel.publish(data, Some(penguin_sse_transport::SERVER_EVENT));
            RELAYING.set(false);
        }
    });
}

/// Writes the index entries of the sessions named, each as the session is when written (a
/// burst of changes to one session is one write). An entry NATS did not take is written again
/// a second later (as the session is then), so the listing heals after an outage instead of
/// keeping a stale row until the session's next change.
pub(super) async fn write_index(node: Weak<Node>, mut rx: mpsc::UnboundedReceiver<String>) {
    let mut batch = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    loop {
        if failed.is_empty() {
            if rx.recv_many(&mut batch, 256).await == 0 {
                return;
            }
        } else {
            match tokio::time::timeout(RETRY, rx.recv_many(&mut batch, 256)).await {
                Ok(0) => return,
                _ => batch.append(&mut failed),
            }
        }
        let Some(node) = node.upgrade() else { return };
        let Some(sessions) = node.sessions.get().and_then(Weak::upgrade) else {
            continue;
        };
        batch.sort_unstable();
        batch.dedup();
        let mut first_error = None;
        for id in batch.drain(..) {
            let Some(entry) = sessions.loaded_entry_quiet(&id) else {
                continue;
            };
            let meta = index_meta(&sessions, &entry);
            if let Err(e) = node.index.put(&id, Some(node.name()), meta).await {
                first_error.get_or_insert_with(|| format!("{id}: {e}"));
                failed.push(id);
            }
        }
        if let Some(e) = first_error {
            tracing::warn!(
                "[cluster] {} index entries not written, tried again in {RETRY:?} (first: {e})",
                failed.len()
            );
        }
    }
}

/// How long an index entry NATS did not take waits before it is written again.
const RETRY: Duration = Duration::from_secs(1);

/// The cluster's session index as the watch last saw it: each session's info, read once as
/// its entry arrives, so a listing copies rows instead of parsing every entry again.
#[derive(Default)]
pub(super) struct Listed {
    rows: Mutex<HashMap<String, SessionInfo>>,
    /// Sessions removed from the index (deleted): their usage no longer counts.
    gone: Mutex<HashSet<String>>,
}

impl Listed {
    /// `id`'s entry changed: its info as the owner wrote it, or nothing when it is unreadable.
    fn put(&self, id: String, record: &SessionRecord) {
        let info = record
            .meta
            .get("info")
            .map(SessionInfo::deserialize)
            .transpose();
        match info {
            Ok(Some(info)) => {
                lock(&self.rows).insert(id, info);
            }
            _ => {
                tracing::warn!("[cluster] session {id} has no readable info");
                lock(&self.rows).remove(&id);
            }
        }
    }

    /// `id` left the index.
    pub(super) fn remove(&self, id: &str) {
        lock(&self.rows).remove(id);
        lock(&self.gone).insert(id.to_owned());
    }

    /// Whether `id` was removed from the index.
    pub(super) fn is_gone(&self, id: &str) -> bool {
        lock(&self.gone).contains(id)
    }

    /// Every session listed, a session loaded here as it is now (the index has it as its
    /// owner last wrote it), and those loaded here the watch has not shown yet.
    pub(super) fn rows(&self, loaded: &[Arc<Entry>]) -> Vec<SessionInfo> {
        let here: HashSet<&str> = loaded.iter().map(|e| e.id.as_str()).collect();
        let mut rows: Vec<SessionInfo> = loaded.iter().map(|e| e.info()).collect();
        rows.extend(
            lock(&self.rows)
                .iter()
                .filter(|(id, _)| !here.contains(id.as_str()))
                .map(|(_, info)| info.clone()),
        );
        rows
    }
}

/// Keeps `listed` equal to the cluster's session index, following it again after a failure.
pub(super) async fn watch_index(index: SessionIndex, listed: Arc<Listed>) {
    loop {
        match index.watch().await {
            Ok(mut changes) => {
                while let Some(change) = changes.next().await {
                    match change {
                        Ok((id, Some(record))) => listed.put(id, &record),
                        Ok((id, None)) => listed.remove(&id),
                        Err(e) => {
                            tracing::warn!("[cluster] session index: {e}");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!("[cluster] watching the session index: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the index keeps of a session: its info as its owner last saw it, and its settings
/// (so a node taking it over keeps its title, mode, sandbox and MCP servers).
pub(super) fn index_meta(sessions: &Sessions, entry: &Entry) -> serde_json::Value {
    serde_json::json!({
        "info": entry.info(),
        "settings": sessions.settings.load(&entry.id),
    })
}
