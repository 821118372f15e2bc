//! Per-session channels (§5.1): numbering, the replay buffer, fan-out to bounded subscriber
//! queues, and the hub that creates and reclaims channels.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use penguin_omni_protocol::{Frame, OmniMessage};
use tokio::sync::mpsc;

use crate::event::{split_id, Epoch, EventData, EventId, ServerEvent, SseEvent, SERVER_EVENT};
use crate::live_tail::LiveTailTracker;

/// Limits of a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Replay buffer: most events kept (reference: 10,000).
    pub max_events: usize,
    /// Replay buffer: most bytes of `data` kept (reference: 8 MiB).
    ///
    /// Counted in UTF-8 bytes of the data string, because that is both what the buffer costs in
    /// memory and what a replay puts on the wire. The reference counts UTF-16 code units, so for
    /// non-ASCII text this buffer holds somewhat less than the reference's would.
    pub max_bytes: usize,
    /// Live events a subscriber may have queued before it is disconnected.
    pub subscriber_queue: usize,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            max_events: 10_000,
            max_bytes: 8 * 1024 * 1024,
            subscriber_queue: 1024,
        }
    }
}

/// Identifies one subscriber of one channel, for unicast with [`Channel::send_to`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubscriberId(u64);

/// What a [`Channel::connect`] did about `Last-Event-ID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// No `Last-Event-ID`: a fresh connection, nothing replayed.
    Fresh,
    /// The id hit: this many buffered events were queued for replay (possibly 0).
    Replayed(usize),
    /// The id missed: `resync_required` was queued instead.
    ResyncRequired,
}

/// `live` of the `/messages` response: a cursor and the fragments open at that cursor.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveSnapshot {
    /// The channel's last event id when the fragments were taken.
    pub cursor: EventId,
    /// One synthetic `partial_* start` per open fragment.
    pub fragments: Vec<OmniMessage>,
}

struct Slot {
    id: u64,
    tx: mpsc::Sender<SseEvent>,
    lagged: Arc<AtomicBool>,
}

struct State {
    next_seq: u64,
    buffer: VecDeque<SseEvent>,
    buffer_bytes: usize,
    last_evicted_seq: u64,
    subscribers: Vec<Slot>,
    next_subscriber: u64,
    last_activity: Instant,
    live_tail: LiveTailTracker,
    closed: bool,
}

impl State {
    fn number(&mut self, epoch: Epoch) -> EventId {
        let id = EventId {
            epoch,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        id
    }
}

/// One session's (or user's) event channel.
///
/// Every event gets the next id `<epoch>-<seq>`; broadcast events go to the replay buffer and to
/// every subscriber's bounded queue; unicast events ([`send_to`](Self::send_to)) consume a seq
/// but go to one subscriber only.
///
/// All numbering, buffering and fan-out happen under one mutex, so every subscriber sees events
/// in seq order and a subscriber registered by [`connect`](Self::connect) sees exactly the events
/// after its replay. Publishing never waits: a subscriber whose queue is full is disconnected
/// instead (its stream ends; it recovers by reconnecting with `Last-Event-ID`).
pub struct Channel {
    epoch: Epoch,
    config: ChannelConfig,
    state: Mutex<State>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("Channel")
            .field("epoch", &self.epoch)
            .field("next_seq", &st.next_seq)
            .field("buffered", &st.buffer.len())
            .field("subscribers", &st.subscribers.len())
            .finish()
    }
}

impl Channel {
    /// A channel with a random epoch.
    pub fn new(config: ChannelConfig) -> Arc<Channel> {
        Channel::with_epoch(Epoch::random(), config)
    }

    /// A channel with a given epoch.
    pub fn with_epoch(epoch: Epoch, config: ChannelConfig) -> Arc<Channel> {
        Arc::new(Channel {
            epoch,
            config,
            state: Mutex::new(State {
                next_seq: 1,
                buffer: VecDeque::new(),
                buffer_bytes: 0,
                last_evicted_seq: 0,
                subscribers: Vec::new(),
                next_subscriber: 0,
                last_activity: Instant::now(),
                live_tail: LiveTailTracker::new(),
                closed: false,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under this lock can leave the state half-updated in a way later calls would
        // trip over, so a panic elsewhere must not take the channel down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch, fixed for the channel's life.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The limits.
    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    /// The id of the last numbered event; `<epoch>-0` before any.
    pub fn last_event_id(&self) -> EventId {
        EventId {
            epoch: self.epoch,
            seq: self.lock().next_seq - 1,
        }
    }

    /// Live subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// Events currently held for replay.
    pub fn buffered(&self) -> usize {
        self.lock().buffer.len()
    }

    /// How long since the last publish, subscribe or unsubscribe.
    pub fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.lock().last_activity)
    }

    /// Broadcasts an OmniMessage and feeds it to the channel's live-tail tracker, both under the
    /// same lock, so [`live_snapshot`](Self::live_snapshot) always pairs a cursor with exactly
    /// the fragments it covers.
    pub fn publish_message(&self, frame: &Frame) -> EventId {
        let mut st = self.lock();
        st.live_tail.observe(frame.message());
        self.publish_locked(&mut st, EventData::from(frame), None)
    }

    /// Broadcasts a server event (`event: server_event`).
    pub fn publish_server_event(&self, event: &ServerEvent) -> EventId {
        let data = EventData::from(event);
        let mut st = self.lock();
        self.publish_locked(&mut st, data, Some(SERVER_EVENT))
    }

    /// Broadcasts already-serialized data. Prefer [`publish_message`](Self::publish_message) for
    /// OmniMessages: this does not feed the live-tail tracker.
    pub fn publish(&self, data: impl Into<EventData>, event: Option<&'static str>) -> EventId {
        let data = data.into();
        let mut st = self.lock();
        self.publish_locked(&mut st, data, event)
    }

    fn publish_locked(
        &self,
        st: &mut State,
        data: EventData,
        event: Option<&'static str>,
    ) -> EventId {
        let id = st.number(self.epoch);
        st.last_activity = Instant::now();
        let ev = SseEvent::new(id, event, data);
        st.buffer_bytes += ev.data.as_str().len();
        st.buffer.push_back(ev.clone());
        while st.buffer.len() > self.config.max_events || st.buffer_bytes > self.config.max_bytes {
            let Some(old) = st.buffer.pop_front() else {
                break;
            };
            st.buffer_bytes -= old.data.as_str().len();
            st.last_evicted_seq = old.id.seq;
        }
        st.subscribers.retain(|s| deliver(s, &ev));
        id
    }

    /// Unicast: numbers an event and queues it for one subscriber only (not buffered).
    ///
    /// Returns `None` when that subscriber is gone (or was just disconnected because its queue
    /// was full); the seq is consumed either way, as in the reference.
    pub fn send_to(
        &self,
        subscriber: SubscriberId,
        data: impl Into<EventData>,
        event: Option<&'static str>,
    ) -> Option<EventId> {
        let data = data.into();
        let mut st = self.lock();
        let id = st.number(self.epoch);
        let pos = st.subscribers.iter().position(|s| s.id == subscriber.0)?;
        let ev = SseEvent::new(id, event, data);
        if deliver(&st.subscribers[pos], &ev) {
            Some(id)
        } else {
            st.subscribers.swap_remove(pos);
            None
        }
    }

    /// The buffered events after `last_event_id`, or `None` on a miss (the caller then sends
    /// `resync_required`).
    ///
    /// A miss is: no `-` or one at index 0, a different epoch, a seq that is not a non-negative
    /// integer, or a seq outside `last_evicted_seq..next_seq` (the id equal to the last evicted
    /// seq is a hit: everything after it is still buffered).
    pub fn replay_after(&self, last_event_id: &str) -> Option<Vec<SseEvent>> {
        replay_locked(self.epoch, &self.lock(), last_event_id)
    }

    /// A live subscription with no replay and no initial events.
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        self.connect(None, Vec::new)
    }

    /// The setup of a stream connection (§5.2), atomically:
    /// 1. subscribe;
    /// 2. if `last_event_id` is `Some`, queue the replay, or a unicast `resync_required` on a miss;
    /// 3. call `initial` and queue each event it returns as a unicast `server_event`;
    ///
    /// so the subscription yields replay (or resync), then the initial events, then live events,
    /// with no event lost or repeated in between.
    ///
    /// `initial` runs under the channel lock. That is deliberate: a snapshot built there (the
    /// `task_state`) cannot be overtaken by a state change published concurrently. It must not
    /// call back into this channel.
    pub fn connect(
        self: &Arc<Self>,
        last_event_id: Option<&str>,
        initial: impl FnOnce() -> Vec<ServerEvent>,
    ) -> Subscription {
        let lagged = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(self.config.subscriber_queue.max(1));
        let mut st = self.lock();
        let id = st.next_subscriber;
        st.next_subscriber += 1;
        st.last_activity = Instant::now();
        if st.closed {
            // A reclaimed channel: end at once so the client reconnects to its successor.
            lagged.store(true, Ordering::Release);
        } else {
            st.subscribers.push(Slot {
                id,
                tx,
                lagged: lagged.clone(),
            });
        }
        let mut pending = VecDeque::new();
        let replay = match last_event_id {
            None => ReplayOutcome::Fresh,
            Some(last) => match replay_locked(self.epoch, &st, last) {
                Some(events) => {
                    let n = events.len();
                    pending.extend(events);
                    ReplayOutcome::Replayed(n)
                }
                None => {
                    pending.push_back(SseEvent::new(
                        st.number(self.epoch),
                        Some(SERVER_EVENT),
                        EventData::from(&ServerEvent::ResyncRequired),
                    ));
                    ReplayOutcome::ResyncRequired
                }
            },
        };
        for ev in initial() {
            pending.push_back(SseEvent::new(
                st.number(self.epoch),
                Some(SERVER_EVENT),
                EventData::from(&ev),
            ));
        }
        drop(st);
        Subscription {
            id: SubscriberId(id),
            channel: self.clone(),
            pending,
            rx,
            lagged,
            replay,
        }
    }

    /// The `live` part of a `/messages` answer: the last event id and the fragments open at it,
    /// taken under one lock.
    pub fn live_snapshot(&self) -> LiveSnapshot {
        let st = self.lock();
        LiveSnapshot {
            cursor: EventId {
                epoch: self.epoch,
                seq: st.next_seq - 1,
            },
            fragments: st.live_tail.fragments(),
        }
    }

    /// Forgets the in-flight fragments (the run ended).
    pub fn clear_live_tail(&self) {
        self.lock().live_tail.clear();
    }

    /// Disconnects every subscriber and refuses new ones (their streams end at once). Used when
    /// the channel is reclaimed, so clients reconnect to the successor and get `resync_required`.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        for s in st.subscribers.drain(..) {
            s.lagged.store(true, Ordering::Release);
        }
    }

    fn unsubscribe(&self, id: SubscriberId) {
        let mut st = self.lock();
        st.subscribers.retain(|s| s.id != id.0);
        st.last_activity = Instant::now();
    }
}

/// Queues `ev` for one subscriber; false means drop the subscriber.
fn deliver(slot: &Slot, ev: &SseEvent) -> bool {
    match slot.tx.try_send(ev.clone()) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Full(_)) => {
            // Flag before the sender is dropped (by the caller removing the slot), so the
            // woken stream already sees why it ended.
            slot.lagged.store(true, Ordering::Release);
            false
        }
        Err(mpsc::error::TrySendError::Closed(_)) => false,
    }
}

fn replay_locked(epoch: Epoch, st: &State, last_event_id: &str) -> Option<Vec<SseEvent>> {
    let (e, seq) = split_id(last_event_id)?;
    if e != epoch.to_string() {
        return None;
    }
    if seq < st.last_evicted_seq || seq >= st.next_seq {
        return None;
    }
    // The buffer is sorted by seq: skip to the first one after `seq`.
    let start = st.buffer.partition_point(|ev| ev.id.seq <= seq);
    Some(st.buffer.range(start..).cloned().collect())
}

/// A subscriber's side of a channel: a stream of its replay, initial and live events.
///
/// The stream ends when the subscriber fell behind (see [`lagged`](Self::lagged)) or the
/// channel was closed. Dropping it unsubscribes.
pub struct Subscription {
    id: SubscriberId,
    channel: Arc<Channel>,
    pending: VecDeque<SseEvent>,
    rx: mpsc::Receiver<SseEvent>,
    lagged: Arc<AtomicBool>,
    replay: ReplayOutcome,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("pending", &self.pending.len())
            .field("replay", &self.replay)
            .field("lagged", &self.lagged())
            .finish()
    }
}

impl Subscription {
    /// This subscriber's id, for [`Channel::send_to`].
    pub fn id(&self) -> SubscriberId {
        self.id
    }

    /// The channel subscribed to.
    pub fn channel(&self) -> &Arc<Channel> {
        &self.channel
    }

    /// What happened to `Last-Event-ID`.
    pub fn replay(&self) -> ReplayOutcome {
        self.replay
    }

    /// True once the channel disconnected this subscriber (queue overflow or channel closed).
    pub fn lagged(&self) -> bool {
        self.lagged.load(Ordering::Acquire)
    }

    /// The next event without waiting, if one is ready.
    pub fn try_next(&mut self) -> Option<SseEvent> {
        if let Some(ev) = self.pending.pop_front() {
            return Some(ev);
        }
        if self.lagged() {
            return None;
        }
        self.rx.try_recv().ok()
    }

    /// The next event; `None` once the subscription has ended.
    pub async fn recv(&mut self) -> Option<SseEvent> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Subscription {
    type Item = SseEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SseEvent>> {
        if let Some(ev) = self.pending.pop_front() {
            return Poll::Ready(Some(ev));
        }
        // A disconnected subscriber ends at once instead of draining stale queued events: it
        // will reconnect from its last id and get them from the replay buffer anyway.
        if self.lagged() {
            return Poll::Ready(None);
        }
        self.rx.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.channel.unsubscribe(self.id);
    }
}

/// Channels by key (a session id, or `user:<userId>`), created lazily.
#[derive(Debug, Default)]
pub struct ChannelHub {
    config: ChannelConfig,
    channels: Mutex<HashMap<String, Arc<Channel>>>,
}

impl ChannelHub {
    /// A hub whose channels use `config`.
    pub fn new(config: ChannelConfig) -> ChannelHub {
        ChannelHub {
            config,
            channels: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Channel>>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The channel for `key`, created (with a new random epoch) if absent.
    ///
    /// Fetch it again for every publish rather than holding it: it may have been reclaimed.
    pub fn get(&self, key: &str) -> Arc<Channel> {
        self.lock()
            .entry(key.to_owned())
            .or_insert_with(|| Channel::new(self.config.clone()))
            .clone()
    }

    /// The channel for `key`, if it exists.
    pub fn existing(&self, key: &str) -> Option<Arc<Channel>> {
        self.lock().get(key).cloned()
    }

    /// Removes and closes the channel for `key`; the next [`get`](Self::get) creates a new one
    /// with a new epoch. Returns whether there was one.
    pub fn reclaim(&self, key: &str) -> bool {
        let removed = self.lock().remove(key);
        match removed {
            Some(ch) => {
                ch.close();
                true
            }
            None => false,
        }
    }

    /// Reclaims every channel that is inactive by `is_active`, has no subscribers, and has been
    /// idle for more than `idle_after`. Returns the reclaimed keys.
    pub fn sweep(
        &self,
        now: Instant,
        idle_after: Duration,
        is_active: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut map = self.lock();
        let doomed: Vec<String> = map
            .iter()
            .filter(|(k, ch)| {
                !is_active(k) && ch.subscriber_count() == 0 && ch.idle_for(now) > idle_after
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &doomed {
            if let Some(ch) = map.remove(k) {
                ch.close();
            }
        }
        doomed
    }

    /// Publishes to every existing channel whose key starts with `prefix`; returns how many.
    pub fn broadcast(&self, prefix: &str, event: &ServerEvent) -> usize {
        let data = EventData::from(event);
        let targets: Vec<Arc<Channel>> = self
            .lock()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, ch)| ch.clone())
            .collect();
        for ch in &targets {
            ch.publish(data.clone(), Some(SERVER_EVENT));
        }
        targets.len()
    }

    /// Keys of the existing channels.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
