//! A session's stream on any node, from the replicated events: the SSE and WebSocket routes
//! serve a mirror channel ([`Channel::mirror`]) exactly as they serve a local channel
//! (replay, the snapshot after it, heartbeats, limits) with the ids the owner gave.
//!
//! A client only ever sees events the cluster stored, so an id it names after moving to
//! another node (or after the owner died) is one every node knows. Each node keeps one such
//! mirror per session, shared by every stream of it there ([`Shared`]): on the owner, fed by
//! the event publisher with each event once JetStream acknowledged it (no JetStream request
//! per stream at all); elsewhere, or once the session left the owner, by one JetStream
//! consumer ([`follow_on`]). A stream the shared mirror cannot serve in order (it needs events
//! from before the mirror started) gets a mirror and a consumer of its own, which then
//! becomes the shared one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use penguin_cluster::{ClusterEvent, EventFeed, EventLog, FeedItem};
use penguin_sse_transport::{
    Channel, ChannelConfig, EventData, EventId, ServerEvent, SseEvent, Subscription, SERVER_EVENT,
};

use super::{api_error, epoch_of};
use crate::error::ApiError;
use crate::sync::lock;

/// Each session's shared mirror on this node.
#[derive(Default)]
pub(super) struct Shared(Mutex<HashMap<String, Weak<Channel>>>);

impl Shared {
    fn get(&self, id: &str) -> Option<Arc<Channel>> {
        lock(&self.0).get(id).and_then(Weak::upgrade)
    }

    pub(super) fn set(&self, id: &str, channel: &Arc<Channel>) {
        let mut map = lock(&self.0);
        // Mirrors nobody reads any more are gone already: their entries go too.
        map.retain(|_, c| c.strong_count() > 0);
        map.insert(id.to_owned(), Arc::downgrade(channel));
    }
}

/// Puts a stored event into a mirror under its own id. One it has already is skipped: as a
/// session leaves its owner, the owner's publisher may still relay an event its successor's
/// consumer then delivers too. A gap closes the mirror (its readers reconnect, and are served
/// in order); false then.
fn publish(channel: &Channel, e: &ClusterEvent) -> bool {
    let data = EventData::Text(Arc::from(String::from_utf8_lossy(&e.data).as_ref()));
    let name = e.event.as_deref().map(|_| SERVER_EVENT);
    let id = EventId {
        epoch: channel.epoch(),
        seq: e.seq,
    };
    if channel.relay(&SseEvent::new(id, name, data)) || e.seq <= channel.last_event_id().seq {
        return true;
    }
    tracing::warn!(
        "[cluster] event {} of a stream came after {}: its readers reconnect",
        e.seq,
        channel.last_event_id().seq
    );
    channel.close();
    false
}

/// The subscription of a client that saw `last_event_id` (none: a fresh one): the events
/// after it up to `upto` (the session's last event when `snapshot` was taken), then
/// `snapshot`, then the events as they are published.
#[allow(clippy::too_many_arguments)]
pub(super) async fn subscribe(
    events: &EventLog,
    config: &ChannelConfig,
    shared: &Shared,
    id: &str,
    last_event_id: Option<&str>,
    upto: u64,
    snapshot: Vec<ServerEvent>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<Subscription, ApiError> {
    if let Some(channel) = shared.get(id) {
        let initial = snapshot.clone();
        if let Some(sub) = channel.connect_mirror(last_event_id, Some(upto), || initial) {
            return Ok(sub);
        }
    }
    let epoch = epoch_of(id);
    // The id the client names, when it is one of this session's that the stream can reach.
    let after = match last_event_id {
        None => None,
        Some(text) => match EventId::parse(text) {
            Some(e) if e.epoch == epoch && e.seq <= upto => Some(Some(e.seq)),
            _ => Some(None),
        },
    };
    let (channel, feed, replay_from) = match after {
        // Fresh: from the snapshot's point on.
        None => {
            let feed = events.follow(id, Some(upto)).await.map_err(api_error)?;
            (Channel::mirror(epoch, upto, config.clone()), feed, None)
        }
        Some(Some(seq)) => {
            let mut feed = events.follow(id, Some(seq)).await.map_err(api_error)?;
            let channel = Channel::mirror(epoch, seq, config.clone());
            let mut reached = seq;
            let mut resync = false;
            while reached < upto {
                match feed.next().await {
                    Some(Ok(FeedItem::Event(e))) => {
                        reached = e.seq;
                        if !publish(&channel, &e) {
                            break;
                        }
                    }
                    Some(Ok(FeedItem::Resync)) => {
                        resync = true;
                        break;
                    }
                    Some(Err(e)) => return Err(api_error(e)),
                    None => break,
                }
            }
            if resync {
                let feed = events.follow(id, Some(upto)).await.map_err(api_error)?;
                (
                    Channel::mirror(epoch, upto, config.clone()),
                    feed,
                    Some(None),
                )
            } else {
                (channel, feed, Some(Some(seq)))
            }
        }
        // An id of another session, epoch or future: resync.
        Some(None) => {
            let feed = events.follow(id, Some(upto)).await.map_err(api_error)?;
            (
                Channel::mirror(epoch, upto, config.clone()),
                feed,
                Some(None),
            )
        }
    };
    let replay = replay_from.map(|seq| match seq {
        Some(seq) => EventId { epoch, seq }.to_string(),
        // Names nothing the channel has: a miss, so `resync_required` comes first.
        None => "resync".to_owned(),
    });
    let sub = channel.connect(replay.as_deref(), move || snapshot);
    shared.set(id, &channel);
    tokio::spawn(pump(Arc::downgrade(&channel), feed, stopping));
    Ok(sub)
}

/// Keeps `channel` (a session's mirror the owner fed until the session left it) fed from the
/// replicated events, after the last one it has, while anybody reads it.
pub(super) async fn follow_on(
    events: EventLog,
    id: String,
    channel: Arc<Channel>,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    if *stopping.borrow() {
        channel.close();
        return;
    }
    if channel.close_if_unwatched() {
        return;
    }
    match events.follow(&id, Some(channel.last_event_id().seq)).await {
        Ok(feed) => {
            let weak = Arc::downgrade(&channel);
            drop(channel);
            pump(weak, feed, stopping).await;
        }
        Err(e) => {
            // Its readers reconnect, and are served from the cluster as it is then.
            tracing::warn!("[cluster] following {id}'s events after it left this node: {e}");
            channel.close();
        }
    }
}

/// Feeds the channel until nobody listens any more, or the feed ends or the server stops
/// (then the channel closes and the client reconnects).
async fn pump(
    channel: Weak<Channel>,
    mut feed: EventFeed,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let mut check = tokio::time::interval(Duration::from_secs(5));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            item = feed.next() => {
                let Some(channel) = channel.upgrade() else { return };
                match item {
                    Some(Ok(FeedItem::Event(e))) => {
                        if !publish(&channel, &e) {
                            return;
                        }
                    }
                    Some(Ok(FeedItem::Resync)) | Some(Err(_)) | None => {
                        channel.close();
                        return;
                    }
                }
            }
            _ = check.tick() => {
                if channel.upgrade().is_none_or(|c| c.close_if_unwatched()) {
                    return;
                }
            }
            _ = stopping.wait_for(|s| *s) => {
                if let Some(channel) = channel.upgrade() {
                    channel.close();
                }
                return;
            }
        }
    }
}
