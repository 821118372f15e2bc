//! Per-session channels (protocol [§5.1](penguin_omni_protocol::spec#s5.1) *Channels and event
//! ids*): numbering, the replay buffer, and subscribers that read it through cursors.
//!
//! Broadcast events are stored once, in the replay buffer; each subscriber keeps only a cursor
//! into it (and a short queue of events sent to it alone). So a subscriber that is behind but
//! still reading loses nothing while what it has not read is still buffered, a burst costs no
//! copy per subscriber, and only one that falls out of the buffer is told `resync_required`.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_core::Stream;
use penguin_omni_protocol::{Frame, OmniMessage};

use crate::event::{split_id, Epoch, EventData, EventId, ServerEvent, SseEvent, SERVER_EVENT};
use crate::live_tail::LiveTailTracker;

/// Limits of a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Replay buffer: most events kept (10,000 by default, as the reference implementation).
    pub max_events: usize,
    /// Replay buffer: most bytes of `data` kept (8 MiB by default, as the reference
    /// implementation).
    ///
    /// Counted in UTF-8 bytes of the data string, because that is both what the buffer costs in
    /// memory and what a replay puts on the wire. The reference counts UTF-16 code units, so for
    /// non-ASCII text this buffer holds somewhat less than the reference's would.
    pub max_bytes: usize,
    /// Events sent to one subscriber alone ([`Channel::send_to`]) it may have unread before it
    /// is disconnected. Broadcast events are not queued per subscriber: each reads them from
    /// the replay buffer, and one that falls out of it gets `resync_required` instead.
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

// One subscriber's place in the channel.
struct Reader {
    // The seq of the next broadcast event it has not read.
    cursor: u64,
    // Unicast events for it alone, in seq order.
    unicast: VecDeque<SseEvent>,
    // Set while it waits for events; taken (and woken) by the next publish.
    waker: Option<Waker>,
}

struct State {
    next_seq: u64,
    buffer: VecDeque<SseEvent>,
    buffer_bytes: usize,
    // The replay floor: ids below this one miss (protocol §5.1).
    last_evicted_seq: u64,
    // The newest seq taken out of `buffer`. Usually the replay floor, except that an event too
    // large for the buffer on its own is past the floor at once but kept until the next publish,
    // so subscribers still receive it live, as the reference's do.
    last_dropped_seq: u64,
    readers: HashMap<u64, Reader>,
    // Readers with a waker set, so a publish wakes only those, not every subscriber.
    waiting: Vec<u64>,
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

    fn take_wakers(&mut self) -> Vec<Waker> {
        let waiting = std::mem::take(&mut self.waiting);
        waiting
            .into_iter()
            .filter_map(|id| self.readers.get_mut(&id)?.waker.take())
            .collect()
    }
}

// Most events a subscriber takes out of the channel per lock: enough that a reader catching up
// on a burst rarely locks, few enough that one reader never holds the lock for long.
const READ_BATCH: usize = 64;

/// One session's (or user's) event channel.
///
/// Every event gets the next id `<epoch>-<seq>`; broadcast events go to the replay buffer, which
/// every subscriber reads at its own pace; unicast events ([`send_to`](Self::send_to)) consume a
/// seq but go to one subscriber only.
///
/// All numbering and buffering happen under one mutex, so every subscriber sees events in seq
/// order and a subscriber registered by [`connect`](Self::connect) sees exactly the events after
/// its replay. Publishing never waits for a subscriber: one whose unread events were evicted
/// from the buffer gets a unicast `resync_required` and continues from the newest event.
pub struct Channel {
    epoch: Epoch,
    config: ChannelConfig,
    state: Mutex<State>,
    observer: std::sync::OnceLock<Observer>,
    // A mirror's ids are its source's: unicast events take the id of the broadcast before them.
    mirror: bool,
}

/// Sees every broadcast event as it is numbered (see [`Channel::observe`]).
pub type Observer = Box<dyn Fn(&SseEvent) + Send + Sync>;

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("Channel")
            .field("epoch", &self.epoch)
            .field("next_seq", &st.next_seq)
            .field("buffered", &st.buffer.len())
            .field("subscribers", &st.readers.len())
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
        Channel::continuing(epoch, 0, config)
    }

    /// A channel that goes on numbering after `last_seq` of `epoch`: the successor of a
    /// channel whose events live on elsewhere (a cluster's replicated stream), so ids never
    /// repeat. Its buffer starts empty; a replay after `last_seq` is a hit with no events.
    pub fn continuing(epoch: Epoch, last_seq: u64, config: ChannelConfig) -> Arc<Channel> {
        Channel::build(epoch, last_seq, config, false)
    }

    /// A channel that re-publishes another's events after `last_seq` under their own ids (a
    /// cluster node serving a session whose events come from the replicated stream): every
    /// broadcast must be the source's next event, and unicast events (`resync_required`, the
    /// initial snapshot) consume no id, they carry the id of the broadcast before them, so a
    /// client's `Last-Event-ID` always names a source event.
    pub fn mirror(epoch: Epoch, last_seq: u64, config: ChannelConfig) -> Arc<Channel> {
        Channel::build(epoch, last_seq, config, true)
    }

    fn build(epoch: Epoch, last_seq: u64, config: ChannelConfig, mirror: bool) -> Arc<Channel> {
        Arc::new(Channel {
            epoch,
            config,
            mirror,
            observer: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                next_seq: last_seq + 1,
                buffer: VecDeque::new(),
                buffer_bytes: 0,
                last_evicted_seq: last_seq,
                last_dropped_seq: 0,
                readers: HashMap::new(),
                waiting: Vec::new(),
                next_subscriber: 0,
                last_activity: Instant::now(),
                live_tail: LiveTailTracker::new(),
                closed: false,
            }),
        })
    }

    /// Calls `observer` with every broadcast event, under the channel's lock as it is
    /// numbered, so it sees them in id order (a cluster node copies them to its replicated
    /// stream this way). It must be quick and must not call back into this channel. One
    /// observer per channel: returns `false` when one is set already.
    pub fn observe(&self, observer: Observer) -> bool {
        self.observer.set(observer).is_ok()
    }

    fn number_unicast(&self, st: &mut State) -> EventId {
        if self.mirror {
            EventId {
                epoch: self.epoch,
                seq: st.next_seq - 1,
            }
        } else {
            st.number(self.epoch)
        }
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
        self.lock().readers.len()
    }

    /// Events currently held for replay.
    pub fn buffered(&self) -> usize {
        let st = self.lock();
        let floor = st.last_evicted_seq;
        st.buffer.len() - st.buffer.partition_point(|ev| ev.id.seq <= floor)
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
        self.publish_locked(st, EventData::from(frame), None)
    }

    /// Broadcasts a server event (`event: server_event`).
    pub fn publish_server_event(&self, event: &ServerEvent) -> EventId {
        let data = EventData::from(event);
        self.publish_locked(self.lock(), data, Some(SERVER_EVENT))
    }

    /// Broadcasts already-serialized data. Prefer [`publish_message`](Self::publish_message) for
    /// OmniMessages: this does not feed the live-tail tracker.
    pub fn publish(&self, data: impl Into<EventData>, event: Option<&'static str>) -> EventId {
        let data = data.into();
        self.publish_locked(self.lock(), data, event)
    }

    fn publish_locked(
        &self,
        mut st: MutexGuard<'_, State>,
        data: EventData,
        event: Option<&'static str>,
    ) -> EventId {
        let id = st.number(self.epoch);
        self.push_locked(st, SseEvent::new(id, event, data));
        id
    }

    // Buffers an event numbered already and wakes its readers.
    fn push_locked(&self, mut st: MutexGuard<'_, State>, ev: SseEvent) {
        let id = ev.id;
        st.last_activity = Instant::now();
        if let Some(observer) = self.observer.get() {
            observer(&ev);
        }
        st.buffer_bytes += ev.data.as_str().len();
        st.buffer.push_back(ev);
        while st.buffer.len() > self.config.max_events || st.buffer_bytes > self.config.max_bytes {
            if st.buffer.len() == 1 {
                st.last_evicted_seq = id.seq;
                break;
            }
            let Some(old) = st.buffer.pop_front() else {
                break;
            };
            st.buffer_bytes -= old.data.as_str().len();
            st.last_evicted_seq = old.id.seq;
            st.last_dropped_seq = old.id.seq;
        }
        let wakers = st.take_wakers();
        // Woken after the lock is released, so the readers do not wake into a held lock.
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Unicast: numbers an event and queues it for one subscriber only (not buffered).
    ///
    /// Returns `None` when that subscriber is gone, or was just disconnected because it had
    /// [`ChannelConfig::subscriber_queue`] unicast events unread; the seq is consumed either
    /// way, as in the reference.
    pub fn send_to(
        &self,
        subscriber: SubscriberId,
        data: impl Into<EventData>,
        event: Option<&'static str>,
    ) -> Option<EventId> {
        let data = data.into();
        let mut st = self.lock();
        let id = self.number_unicast(&mut st);
        let limit = self.config.subscriber_queue.max(1);
        let reader = st.readers.get_mut(&subscriber.0)?;
        if reader.unicast.len() >= limit {
            let gone = st.readers.remove(&subscriber.0);
            drop(st);
            if let Some(w) = gone.and_then(|r| r.waker) {
                w.wake();
            }
            return None;
        }
        reader.unicast.push_back(SseEvent::new(id, event, data));
        let waker = reader.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        Some(id)
    }

    /// The buffered events after `last_event_id`, or `None` on a miss (the caller then sends
    /// `resync_required`).
    ///
    /// A miss is: no `-` or one at index 0, a different epoch, a seq that is not a non-negative
    /// integer, or a seq outside `last_evicted_seq..next_seq` (the id equal to the last evicted
    /// seq is a hit: everything after it is still buffered).
    pub fn replay_after(&self, last_event_id: &str) -> Option<Vec<SseEvent>> {
        let st = self.lock();
        let after = replay_point(self.epoch, &st, last_event_id)?;
        let start = st.buffer.partition_point(|ev| ev.id.seq <= after);
        Some(st.buffer.range(start..).cloned().collect())
    }

    /// A live subscription with no replay and no initial events.
    pub fn subscribe(self: &Arc<Self>) -> Subscription {
        self.connect(None, Vec::new)
    }

    /// The setup of a stream connection ([§5.2](penguin_omni_protocol::spec#s5.2) *SSE and
    /// connection setup*), atomically:
    /// 1. subscribe;
    /// 2. if `last_event_id` is `Some`, replay the buffered events after it, or queue a unicast
    ///    `resync_required` on a miss;
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
        let mut st = self.lock();
        let id = st.next_subscriber;
        st.next_subscriber += 1;
        st.last_activity = Instant::now();
        let mut unicast = VecDeque::new();
        let (cursor, replay) = match last_event_id {
            None => (st.next_seq, ReplayOutcome::Fresh),
            Some(last) => match replay_point(self.epoch, &st, last) {
                Some(after) => {
                    let n = st.buffer.len() - st.buffer.partition_point(|ev| ev.id.seq <= after);
                    (after + 1, ReplayOutcome::Replayed(n))
                }
                None => {
                    unicast.push_back(SseEvent::new(
                        self.number_unicast(&mut st),
                        Some(SERVER_EVENT),
                        EventData::from(&ServerEvent::ResyncRequired),
                    ));
                    (st.next_seq, ReplayOutcome::ResyncRequired)
                }
            },
        };
        for ev in initial() {
            unicast.push_back(SseEvent::new(
                self.number_unicast(&mut st),
                Some(SERVER_EVENT),
                EventData::from(&ev),
            ));
        }
        // A reclaimed channel takes no readers: the stream yields what was queued above and
        // ends, so the client reconnects to the channel's successor.
        let mut local = VecDeque::new();
        if st.closed {
            local = unicast;
        } else {
            st.readers.insert(
                id,
                Reader {
                    cursor,
                    unicast,
                    waker: None,
                },
            );
        }
        drop(st);
        Subscription {
            id: SubscriberId(id),
            channel: self.clone(),
            local,
            replay,
            ended: false,
        }
    }

    /// [`connect`](Self::connect) for a mirror that may not hold what a subscriber needs,
    /// because it started after its source or lags it (a cluster node's shared view of a
    /// session's replicated events). `initial` describes the source as of its event `at`
    /// (`None`: this channel's newest), so it comes after the events up to `at` and before
    /// the ones after it; events up to `at` that reach the channel later are not sent.
    ///
    /// `None`, and `initial` is not run, when the subscriber must be served from the source
    /// instead: the channel is closed, it no longer holds the first event the subscriber needs,
    /// or `last_event_id` names an event before `at` while the channel has not reached `at`
    /// yet (the replay could not come before `initial`). An id of another epoch, or after
    /// `at`, is a miss, as in `connect`: `resync_required` first.
    pub fn connect_mirror(
        self: &Arc<Self>,
        last_event_id: Option<&str>,
        at: Option<u64>,
        initial: impl FnOnce() -> Vec<ServerEvent>,
    ) -> Option<Subscription> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        let head = st.next_seq - 1;
        let at = at.unwrap_or(head);
        let epoch = self.epoch.to_string();
        let hit =
            last_event_id.map(|last| split_id(last).filter(|(e, seq)| *e == epoch && *seq <= at));
        let (after, replay) = match hit {
            None => (at, ReplayOutcome::Fresh),
            Some(Some((_, seq))) => {
                if seq < at && at > head {
                    return None;
                }
                let n = st
                    .buffer
                    .iter()
                    .filter(|ev| (seq + 1..=at).contains(&ev.id.seq));
                (seq, ReplayOutcome::Replayed(n.count()))
            }
            Some(None) => (at, ReplayOutcome::ResyncRequired),
        };
        if after < st.last_evicted_seq {
            return None;
        }
        let id = st.next_subscriber;
        st.next_subscriber += 1;
        st.last_activity = Instant::now();
        // Numbered as the source's event `at`, so they sort after the events up to it.
        let unicast_id = EventId {
            epoch: self.epoch,
            seq: at,
        };
        let mut unicast = VecDeque::new();
        if replay == ReplayOutcome::ResyncRequired {
            unicast.push_back(SseEvent::new(
                unicast_id,
                Some(SERVER_EVENT),
                EventData::from(&ServerEvent::ResyncRequired),
            ));
        }
        for ev in initial() {
            unicast.push_back(SseEvent::new(
                unicast_id,
                Some(SERVER_EVENT),
                EventData::from(&ev),
            ));
        }
        st.readers.insert(
            id,
            Reader {
                cursor: after + 1,
                unicast,
                waker: None,
            },
        );
        drop(st);
        Some(Subscription {
            id: SubscriberId(id),
            channel: self.clone(),
            local: VecDeque::new(),
            replay,
            ended: false,
        })
    }

    /// Closes the channel if nobody reads it, atomically with
    /// [`connect_mirror`](Self::connect_mirror): whoever feeds a shared mirror stops only when
    /// no subscriber can be left waiting on it.
    pub fn close_if_unwatched(&self) -> bool {
        let mut st = self.lock();
        if st.readers.is_empty() {
            st.closed = true;
        }
        st.closed
    }

    /// Re-broadcasts `ev`, an event of the source this mirror follows, under its own id and
    /// with its wire form already encoded. Returns false, broadcasting nothing, when it is not
    /// the source's next event.
    pub fn relay(&self, ev: &SseEvent) -> bool {
        let mut st = self.lock();
        if ev.id.epoch != self.epoch || ev.id.seq != st.next_seq {
            return false;
        }
        st.next_seq += 1;
        self.push_locked(st, ev.clone());
        true
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
        st.waiting.clear();
        let wakers: Vec<Waker> = st.readers.drain().filter_map(|(_, r)| r.waker).collect();
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
    }

    // Moves the reader's next events into `out`, in seq order; registers `waker` when there are
    // none. False when the reader is gone (disconnected or the channel closed).
    fn read(&self, id: SubscriberId, out: &mut VecDeque<SseEvent>, waker: Option<&Waker>) -> bool {
        let mut st = self.lock();
        let st = &mut *st;
        let Some(reader) = st.readers.get_mut(&id.0) else {
            return false;
        };
        if reader.cursor <= st.last_dropped_seq {
            // Unread broadcast events were evicted: what was sent to it alone still goes out
            // first (lower seqs), then `resync_required`, then it reads on from the newest.
            out.extend(reader.unicast.drain(..));
            let seq = st.next_seq;
            st.next_seq += 1;
            out.push_back(SseEvent::new(
                EventId {
                    epoch: self.epoch,
                    seq,
                },
                Some(SERVER_EVENT),
                EventData::from(&ServerEvent::ResyncRequired),
            ));
            reader.cursor = st.next_seq;
            return true;
        }
        let mut next = st.buffer.partition_point(|ev| ev.id.seq < reader.cursor);
        while out.len() < READ_BATCH {
            let broadcast = st.buffer.get(next);
            let take_unicast = match (reader.unicast.front(), broadcast) {
                (Some(u), Some(b)) => u.id.seq < b.id.seq,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_unicast {
                out.extend(reader.unicast.pop_front());
            } else if let Some(b) = broadcast {
                reader.cursor = b.id.seq + 1;
                out.push_back(b.clone());
                next += 1;
            }
        }
        if out.is_empty() {
            if let Some(w) = waker {
                if reader.waker.replace(w.clone()).is_none() {
                    st.waiting.push(id.0);
                }
            }
        }
        true
    }

    fn unsubscribe(&self, id: SubscriberId) {
        let mut st = self.lock();
        st.readers.remove(&id.0);
        st.last_activity = Instant::now();
    }
}

// The seq after which a replay from `last_event_id` starts, or `None` on a miss.
fn replay_point(epoch: Epoch, st: &State, last_event_id: &str) -> Option<u64> {
    let (e, seq) = split_id(last_event_id)?;
    if e != epoch.to_string() {
        return None;
    }
    if seq < st.last_evicted_seq || seq >= st.next_seq {
        return None;
    }
    Some(seq)
}

/// A subscriber's side of a channel: a stream of its replay, initial and live events.
///
/// The stream ends when the channel was closed, or disconnected this subscriber for leaving too
/// many unicast events unread (see [`lagged`](Self::lagged)). Dropping it unsubscribes.
pub struct Subscription {
    id: SubscriberId,
    channel: Arc<Channel>,
    // Events taken out of the channel and not yet yielded.
    local: VecDeque<SseEvent>,
    replay: ReplayOutcome,
    ended: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("local", &self.local.len())
            .field("replay", &self.replay)
            .field("ended", &self.ended)
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

    /// True once the channel ended this subscription (closed, or too many unicast events
    /// unread). Known after the stream has been read to its end.
    pub fn lagged(&self) -> bool {
        self.ended
    }

    fn poll_event(&mut self, waker: Option<&Waker>) -> Poll<Option<SseEvent>> {
        if let Some(ev) = self.local.pop_front() {
            return Poll::Ready(Some(ev));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        if !self.channel.read(self.id, &mut self.local, waker) {
            self.ended = true;
            return Poll::Ready(None);
        }
        match self.local.pop_front() {
            Some(ev) => Poll::Ready(Some(ev)),
            None => Poll::Pending,
        }
    }

    /// The next event without waiting, if one is ready.
    pub fn try_next(&mut self) -> Option<SseEvent> {
        match self.poll_event(None) {
            Poll::Ready(ev) => ev,
            Poll::Pending => None,
        }
    }

    /// The next event; `None` once the subscription has ended.
    pub async fn recv(&mut self) -> Option<SseEvent> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Subscription {
    type Item = SseEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SseEvent>> {
        self.poll_event(Some(cx.waker()))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.channel.unsubscribe(self.id);
    }
}

#[cfg(test)]
mod tests;
