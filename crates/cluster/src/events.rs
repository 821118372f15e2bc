//! A session's SSE events, replicated: the owner publishes each to
//! `penguin.events.<session>` in the [`EVENT_STREAM`](crate::EVENT_STREAM) with its
//! per-session sequence (the SSE event id) in a header; any node reads them back from a given
//! id, or learns that the retention window no longer reaches back that far.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_nats::jetstream::{self};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::batch;
use crate::error::check_session;
use crate::{ClusterError, Lease, NODE_HEADER, SEQ_HEADER};

/// The header naming an event's SSE `event:` (absent for the default event), or that of every
/// event of a message holding several of one name.
const EVENT_HEADER: &str = "Penguin-Event";

/// The header naming each event's SSE `event:` in a message holding events of several names,
/// comma-separated in order (empty for the default event).
const EVENTS_HEADER: &str = "Penguin-Events";

pub(crate) const PREFIX: &str = "penguin.events";

/// How long a request is tried again while JetStream does not answer (a nats-server died, a
/// stream leader is being elected) before it is [`ClusterError::Unavailable`]. An election
/// takes a few seconds on an idle machine; on a loaded one (a CI runner with two cores) it was
/// seen to take more than 10, so the window is generous: a caller that must answer sooner (an
/// HTTP request) checks [`Cluster::ensure_connected`](crate::Cluster::ensure_connected) first.
pub const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// One replicated event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterEvent {
    /// Its per-session sequence: 1, 2, 3, … with no gaps; the SSE event id.
    pub seq: u64,
    /// Its SSE `event:` name (`server_event`), `None` for the default (an OmniMessage).
    pub event: Option<String>,
    /// The event's data (the message's JSON, as the SSE data line carries it).
    pub data: Bytes,
}

/// What [`EventLog::replay`] found after an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Exactly the events after the id (possibly none).
    Events(Vec<ClusterEvent>),
    /// The retention window no longer holds the event after the id (or the id is from a
    /// future this session never reached): the client must resync.
    ResyncRequired,
}

/// Every session's replicated events.
#[derive(Clone, Debug)]
pub struct EventLog {
    js: jetstream::Context,
    stream: stream::Stream,
    node: String,
}

fn subject(session: &str) -> String {
    format!("{PREFIX}.{session}")
}

fn event_of(headers: Option<&HeaderMap>) -> Option<String> {
    Some(headers?.get(EVENT_HEADER)?.as_str().to_owned())
}

/// The SSE names of a message's `count` events.
fn events_of(headers: Option<&HeaderMap>, count: u64) -> Result<Vec<Option<String>>, String> {
    let Some(names) = headers.and_then(|h| h.get(EVENTS_HEADER)) else {
        return Ok(vec![event_of(headers); count as usize]);
    };
    let names: Vec<Option<String>> = names
        .as_str()
        .split(',')
        .map(|n| (!n.is_empty()).then(|| n.to_owned()))
        .collect();
    if names.len() as u64 != count {
        return Err(format!(
            "{EVENTS_HEADER} names {} events, the message holds {count}",
            names.len()
        ));
    }
    Ok(names)
}

/// Whether an event of this name may share a message with events of other names (its name
/// fits in [`EVENTS_HEADER`]).
fn listable(name: Option<&str>) -> bool {
    name.is_none_or(|n| !n.is_empty() && !n.contains(','))
}

pub(crate) fn seq_of(headers: Option<&HeaderMap>) -> Option<u64> {
    headers?.get(SEQ_HEADER)?.as_str().parse().ok()
}

/// The last message of a subject: its stream sequence and per-session sequence, `(0, 0)`
/// when the subject has none.
pub(crate) async fn last_of(
    stream: &stream::Stream,
    subject: &str,
) -> Result<(u64, u64), ClusterError> {
    retrying(
        &format!("reading the last message of {subject}"),
        || async {
            match stream.get_last_raw_message_by_subject(subject).await {
                Ok(m) => Ok(Ok(m)),
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(Err(())),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await?
    .map_or(Ok((0, 0)), |m| {
        let seq = seq_of(Some(&m.headers)).ok_or_else(|| ClusterError::Malformed {
            what: format!("message {} of {subject}", m.sequence),
            reason: format!("no {SEQ_HEADER} header"),
        })?;
        Ok((m.sequence, seq))
    })
}

/// Runs `attempt` until it succeeds or [`RETRY_FOR`] passed: a nats-server dying or a leader
/// being elected makes JetStream requests fail for a few seconds.
pub(crate) async fn retrying<T, F, Fut>(doing: &str, mut attempt: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(50);
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() + pause > RETRY_FOR => {
                return Err(ClusterError::unavailable(doing, e))
            }
            Err(e) => {
                tracing::debug!("{doing}, again: {e}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// An ordered consumer of `subject` from `deliver_policy`, and its messages.
pub(crate) async fn ordered(
    stream: &stream::Stream,
    subject: &str,
    deliver_policy: DeliverPolicy,
) -> Result<pull::Ordered, ClusterError> {
    retrying(&format!("following {subject}"), || async {
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: subject.to_owned(),
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        consumer.messages().await.map_err(|e| e.to_string())
    })
    .await
}

impl EventLog {
    pub(crate) fn new(js: jetstream::Context, stream: stream::Stream, node: String) -> EventLog {
        EventLog { js, stream, node }
    }

    /// The last event id of `session` (0 when it has none).
    pub async fn last_seq(&self, session: &str) -> Result<u64, ClusterError> {
        check_session(session)?;
        Ok(last_of(&self.stream, &subject(session)).await?.1)
    }

    /// A publisher for `session`, continuing its sequence, writing only while `lease` holds.
    pub async fn publisher(
        &self,
        session: &str,
        lease: Lease,
    ) -> Result<EventPublisher, ClusterError> {
        check_session(session)?;
        let subject = subject(session);
        let (stream_seq, seq) = last_of(&self.stream, &subject).await?;
        Ok(EventPublisher {
            js: self.js.clone(),
            session: session.to_owned(),
            subject,
            node: self.node.clone(),
            lease,
            last_stream_seq: stream_seq,
            seq,
        })
    }

    /// The events of `session` after id `after`, up to the last one published now, or
    /// [`Replay::ResyncRequired`] when the window no longer reaches back to `after + 1`.
    pub async fn replay(&self, session: &str, after: u64) -> Result<Replay, ClusterError> {
        check_session(session)?;
        let (_, last) = last_of(&self.stream, &subject(session)).await?;
        if after > last {
            return Ok(Replay::ResyncRequired);
        }
        if after == last {
            return Ok(Replay::Events(Vec::new()));
        }
        let mut feed = self.follow(session, Some(after)).await?;
        let mut out = Vec::new();
        while let Some(item) = feed.next().await {
            match item? {
                FeedItem::Resync => return Ok(Replay::ResyncRequired),
                FeedItem::Event(e) => {
                    let seq = e.seq;
                    out.push(e);
                    if seq >= last {
                        break;
                    }
                }
            }
        }
        Ok(Replay::Events(out))
    }

    /// Follows `session` live. With `after: Some(id)`, first the events after `id` (or one
    /// [`FeedItem::Resync`] when the window no longer reaches back that far), then every event
    /// as it is published; with `None`, only events published from now on.
    pub async fn follow(
        &self,
        session: &str,
        after: Option<u64>,
    ) -> Result<EventFeed, ClusterError> {
        check_session(session)?;
        let subject = subject(session);
        let (last_stream_seq, last) = last_of(&self.stream, &subject).await?;
        let (deliver_policy, after) = match after {
            None => (
                DeliverPolicy::ByStartSequence {
                    start_sequence: last_stream_seq + 1,
                },
                last,
            ),
            Some(a) if a > last => {
                return Ok(EventFeed {
                    inner: futures::stream::iter([Ok(FeedItem::Resync)]).boxed(),
                    after: a,
                })
            }
            Some(a) if a == last => (
                DeliverPolicy::ByStartSequence {
                    start_sequence: last_stream_seq + 1,
                },
                a,
            ),
            Some(a) => (DeliverPolicy::All, a),
        };
        let messages = ordered(&self.stream, &subject, deliver_policy).await?;
        Ok(EventFeed::live(
            self.stream.clone(),
            subject,
            after,
            messages,
        ))
    }

    /// Removes every event of `session` (it was deleted).
    pub async fn purge(&self, session: &str) -> Result<(), ClusterError> {
        check_session(session)?;
        self.stream
            .purge()
            .filter(subject(session))
            .await
            .map_err(|e| ClusterError::unavailable("purging a session's events", e))?;
        Ok(())
    }
}

/// One item of an [`EventFeed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedItem {
    /// The next event.
    Event(ClusterEvent),
    /// The window no longer reaches back to the requested id: the feed ends here.
    Resync,
}

/// How long a feed waits in silence before it asks the stream whether it missed something
/// (a consumer whose nats-server died can stall without an error); it then follows again from
/// its last id.
const STALL: Duration = Duration::from_secs(3);

/// A session's events as they are published, after a given id (from [`EventLog::follow`]).
/// It follows through a nats-server dying: its consumer is made again from the last id seen.
pub struct EventFeed {
    inner: futures::stream::BoxStream<'static, Result<FeedItem, ClusterError>>,
    after: u64,
}

impl std::fmt::Debug for EventFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFeed")
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

struct Follow {
    stream: stream::Stream,
    subject: String,
    after: u64,
    messages: Option<pull::Ordered>,
    /// The events of the last message read that are still to be handed out (a message may
    /// hold several); `after` already counts them.
    pending: std::collections::VecDeque<ClusterEvent>,
    done: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Result<FeedItem, ClusterError>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(Ok(FeedItem::Event(e)));
            }
            if self.done {
                return None;
            }
            let Some(messages) = self.messages.as_mut() else {
                // Follow again from the last id seen.
                match self.resume().await {
                    Ok(()) => continue,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            };
            let message = match tokio::time::timeout(STALL, messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => {
                    tracing::debug!(subject = %self.subject, "feed: {e}; following again");
                    self.messages = None;
                    continue;
                }
                Ok(None) => {
                    self.messages = None;
                    continue;
                }
                Err(_) => {
                    // Silence: fine unless the stream has events this feed has not seen.
                    match last_of(&self.stream, &self.subject).await {
                        Ok((_, last)) if last > self.after => self.messages = None,
                        Ok(_) => {}
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    }
                    continue;
                }
            };
            let Some(seq) = seq_of(message.headers.as_ref()) else {
                self.done = true;
                return Some(Err(ClusterError::Malformed {
                    what: format!("event on {}", message.subject),
                    reason: format!("no {SEQ_HEADER} header"),
                }));
            };
            if seq <= self.after {
                continue;
            }
            let items = batch::count_of(message.headers.as_ref()).and_then(|count| {
                let names = events_of(message.headers.as_ref(), count)?;
                Ok((
                    count,
                    names
                        .into_iter()
                        .zip(batch::split(&message.payload, count)?),
                ))
            });
            let (count, items) = match items {
                Ok(v) => v,
                Err(reason) => {
                    self.done = true;
                    return Some(Err(ClusterError::Malformed {
                        what: format!("event {seq} on {}", message.subject),
                        reason,
                    }));
                }
            };
            let first = (seq + 1).saturating_sub(count);
            if first > self.after + 1 {
                // The event right after `after` is gone: retention dropped it.
                self.done = true;
                return Some(Ok(FeedItem::Resync));
            }
            let after = self.after;
            self.pending
                .extend((first..=seq).zip(items).filter(|(s, _)| *s > after).map(
                    |(s, (event, data))| ClusterEvent {
                        seq: s,
                        event,
                        data,
                    },
                ));
            self.after = seq;
        }
    }

    async fn resume(&mut self) -> Result<(), ClusterError> {
        let (last_stream_seq, last) = last_of(&self.stream, &self.subject).await?;
        let policy = if last <= self.after {
            DeliverPolicy::ByStartSequence {
                start_sequence: last_stream_seq + 1,
            }
        } else {
            DeliverPolicy::All
        };
        self.messages = Some(ordered(&self.stream, &self.subject, policy).await?);
        Ok(())
    }
}

impl EventFeed {
    fn live(stream: stream::Stream, subject: String, after: u64, messages: pull::Ordered) -> Self {
        let follow = Follow {
            stream,
            subject,
            after,
            messages: Some(messages),
            pending: Default::default(),
            done: false,
        };
        let inner = futures::stream::unfold(follow, |mut f| async move {
            let item = f.next().await?;
            Some((item, f))
        })
        .boxed();
        EventFeed { inner, after }
    }
}

impl Stream for EventFeed {
    type Item = Result<FeedItem, ClusterError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(Some(Ok(FeedItem::Event(e)))) = &item {
            self.after = e.seq;
        }
        item
    }
}

/// Publishes one session's events in order, as the lease holder.
///
/// Each publish checks the lease first ([`Lease::check`]) and is conditional on the subject's
/// last stream sequence being the one this publisher last wrote: a second writer (a node that
/// took the session over) makes every later publish of this one fail with
/// [`ClusterError::Fenced`], so ids never fork.
#[derive(Debug)]
pub struct EventPublisher {
    js: jetstream::Context,
    session: String,
    subject: String,
    node: String,
    lease: Lease,
    last_stream_seq: u64,
    seq: u64,
}

impl EventPublisher {
    /// The id of the last event published (0 when none).
    pub fn last_seq(&self) -> u64 {
        self.seq
    }

    /// Publishes `data` as the next event and returns its id once JetStream stored it (on a
    /// quorum of its replicas).
    pub async fn publish(&mut self, data: Bytes) -> Result<u64, ClusterError> {
        self.publish_named(None, data).await
    }

    /// [`publish`](Self::publish) for an event with an SSE `event:` name (`server_event`).
    pub async fn publish_named(
        &mut self,
        event: Option<&str>,
        data: Bytes,
    ) -> Result<u64, ClusterError> {
        self.publish_chunk(&[event], std::slice::from_ref(&data))
            .await
    }

    /// Publishes `events` (each with its SSE `event:` name, `None` for the default) as the next
    /// ones, in order, and returns the id of the last once JetStream stored them all. They
    /// share messages (see the `batch` module; names go in `Penguin-Events` when they differ);
    /// a follower still reads them one by one under their own ids and names. When one message
    /// is not stored, neither is anything after it: the error says why, and
    /// [`last_seq`](Self::last_seq) is the last event stored.
    pub async fn publish_all(
        &mut self,
        events: &[(Option<String>, Bytes)],
    ) -> Result<u64, ClusterError> {
        let mut rest = events;
        while !rest.is_empty() {
            let n = batch::chunk_len(
                rest,
                |e| &e.1[..],
                |a, b| a.0 == b.0 || (listable(a.0.as_deref()) && listable(b.0.as_deref())),
            );
            let (chunk, after) = rest.split_at(n);
            rest = after;
            let names: Vec<Option<&str>> = chunk.iter().map(|e| e.0.as_deref()).collect();
            let data: Vec<Bytes> = chunk.iter().map(|e| e.1.clone()).collect();
            self.publish_chunk(&names, &data).await?;
        }
        Ok(self.seq)
    }

    /// Publishes `data` (events named `names`, one each) as one message; returns the last
    /// one's id.
    async fn publish_chunk(
        &mut self,
        names: &[Option<&str>],
        data: &[Bytes],
    ) -> Result<u64, ClusterError> {
        let seq = self.seq + data.len() as u64;
        let mut message = PublishMessage::build().payload(batch::join(data));
        if names.iter().all(|n| *n == names[0]) {
            if let Some(name) = names[0] {
                message = message.header(EVENT_HEADER, name);
            }
        } else {
            let list: Vec<&str> = names.iter().map(|n| n.unwrap_or("")).collect();
            message = message.header(EVENTS_HEADER, list.join(",").as_str());
        }
        if data.len() > 1 {
            message = message.header(batch::COUNT_HEADER, data.len().to_string().as_str());
        }
        let message = message
            .header(SEQ_HEADER, seq.to_string().as_str())
            .header(NODE_HEADER, self.node.as_str())
            .message_id(format!("{}:{seq}", self.session))
            .expected_last_subject_sequence(self.last_stream_seq);
        // A nats-server dying or a stream leader moving makes a publish fail for a moment:
        // it is tried again (the message id makes a retry of a stored event a no-op) until
        // `RETRY_FOR` passed, checking the lease before every try.
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            self.lease.check()?;
            let ack = match self
                .js
                .send_publish(self.subject.clone(), message.clone())
                .await
            {
                Ok(ack) => ack.await.map_err(|e| (e.kind(), e.to_string())),
                Err(e) => Err((e.kind(), e.to_string())),
            };
            match ack {
                Ok(ack) => {
                    self.last_stream_seq = ack.sequence;
                    self.seq = seq;
                    return Ok(seq);
                }
                Err((PublishErrorKind::WrongLastSequence, _)) => {
                    return Err(ClusterError::Fenced {
                        session: self.session.clone(),
                        reason: "another node published events of this session".into(),
                    })
                }
                Err((_, e)) if start.elapsed() + pause > RETRY_FOR => {
                    return Err(ClusterError::unavailable("publishing an event", e))
                }
                Err((kind, e)) => {
                    tracing::debug!(session = %self.session, seq, ?kind, "publish again: {e}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
            }
        }
    }
}
