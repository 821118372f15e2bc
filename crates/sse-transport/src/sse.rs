//! The SSE encoding (protocol [§5.2](penguin_omni_protocol::spec#s5.2) *SSE and connection setup*):
//! wire format, batching and heartbeat, as a stream of bytes any HTTP server can send.
//! `response.rs` (feature `axum`) wraps it in an axum response.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::channel::{Channel, Subscription};
use crate::event::ServerEvent;

/// The reference's heartbeat interval.
pub const HEARTBEAT: Duration = Duration::from_secs(20);

/// The heartbeat comment.
pub const PING: &[u8] = b": ping\n\n";

/// Settings of an SSE response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseConfig {
    /// Time between `: ping` comments (reference: 20 s).
    pub heartbeat: Duration,
}

impl Default for SseConfig {
    fn default() -> Self {
        SseConfig {
            heartbeat: HEARTBEAT,
        }
    }
}

// Many queued small events are written as one chunk: a replay of thousands of events should not
// cost thousands of writes. Bounded so one chunk never holds a large share of the replay buffer,
// and so thousands of subscribers behind in a burst (each joining its own chunk) stay within
// tens of KiB each.
const MAX_CHUNK_EVENTS: usize = 256;
const MAX_CHUNK_BYTES: usize = 32 * 1024;
// An event at least this large is sent as its own chunk: the shared encoding, never a copy.
const OWN_CHUNK_BYTES: usize = 16 * 1024;

/// A subscription encoded as SSE bytes, with heartbeats. Ends when the subscription ends.
pub struct SseStream {
    sub: Subscription,
    // A large event taken while a batch of small ones was being built: it goes out next.
    held: Option<Bytes>,
    period: Duration,
    // Created on first poll: constructing an `Interval` needs a Tokio timer, and the stream may
    // be built outside the runtime.
    heartbeat: Option<Interval>,
}

impl std::fmt::Debug for SseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseStream")
            .field("sub", &self.sub)
            .field("period", &self.period)
            .finish()
    }
}

impl SseStream {
    /// Encodes `sub`, pinging every `heartbeat`.
    pub fn new(sub: Subscription, heartbeat: Duration) -> SseStream {
        SseStream {
            sub,
            held: None,
            period: heartbeat,
            heartbeat: None,
        }
    }

    /// The underlying subscription.
    pub fn subscription(&self) -> &Subscription {
        &self.sub
    }
}

impl Stream for SseStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(big) = this.held.take() {
            return Poll::Ready(Some(Ok(big)));
        }
        // The first event's shared bytes go out as they are when nothing follows (the common
        // live case) or when they are large; small queued events are joined into one chunk.
        let mut first: Option<Bytes> = None;
        let mut buf = Vec::new();
        let mut n = 0;
        while n < MAX_CHUNK_EVENTS && buf.len() < MAX_CHUNK_BYTES {
            match Pin::new(&mut this.sub).poll_next(cx) {
                Poll::Ready(Some(ev)) => {
                    let wire = ev.wire();
                    n += 1;
                    if n == 1 {
                        if wire.len() >= OWN_CHUNK_BYTES {
                            return Poll::Ready(Some(Ok(wire)));
                        }
                        first = Some(wire);
                        continue;
                    }
                    if wire.len() >= OWN_CHUNK_BYTES {
                        this.held = Some(wire);
                        break;
                    }
                    if let Some(f) = first.take() {
                        buf.extend_from_slice(&f);
                    }
                    buf.extend_from_slice(&wire);
                }
                Poll::Ready(None) if n == 0 => return Poll::Ready(None),
                // Flush what we have; the end is seen again on the next poll.
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        if let Some(only) = first {
            return Poll::Ready(Some(Ok(only)));
        }
        if !buf.is_empty() {
            return Poll::Ready(Some(Ok(Bytes::from(buf))));
        }
        let period = this.period;
        let hb = this.heartbeat.get_or_insert_with(|| {
            let mut iv = tokio::time::interval_at(Instant::now() + period, period);
            iv.set_missed_tick_behavior(MissedTickBehavior::Delay);
            iv
        });
        match hb.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Bytes::from_static(PING)))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Opens a stream on `channel` in the reference's setup order (subscribe; replay or
/// `resync_required`; the initial events; then live, with heartbeats).
///
/// `initial` runs under the channel lock (see [`Channel::connect`]) so the snapshot it builds
/// cannot be overtaken by a concurrent publish.
pub fn open_stream(
    channel: &Arc<Channel>,
    last_event_id: Option<&str>,
    initial: impl FnOnce() -> Vec<ServerEvent>,
    config: &SseConfig,
) -> SseStream {
    SseStream::new(channel.connect(last_event_id, initial), config.heartbeat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::ChannelConfig;
    use crate::event::{encode_event, Epoch, EventData, EventId, SseEvent, SERVER_EVENT};
    use futures::StreamExt;

    #[test]
    fn wire_format_matches_the_reference_field_order() {
        let mut out = Vec::new();
        let id = EventId {
            epoch: Epoch::from_u32(0xab),
            seq: 7,
        };
        encode_event(
            &SseEvent::new(
                id,
                Some(SERVER_EVENT),
                EventData::Text(r#"{"type":"hello"}"#.into()),
            ),
            &mut out,
        );
        encode_event(
            &SseEvent::new(id, None, EventData::Text("{}".into())),
            &mut out,
        );
        encode_event(
            &SseEvent::new(id, None, EventData::Text("a\nb\r\nc".into())),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: server_event\ndata: {\"type\":\"hello\"}\nid: 000000ab-7\n\n\
             data: {}\nid: 000000ab-7\n\n\
             data: a\ndata: b\ndata: c\nid: 000000ab-7\n\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeat_fires_on_the_configured_period_only_when_idle() {
        let ch = Channel::with_epoch(Epoch::from_u32(1), ChannelConfig::default());
        let cfg = SseConfig {
            heartbeat: Duration::from_secs(20),
        };
        let mut s = open_stream(&ch, None, || vec![ServerEvent::Hello], &cfg);
        let first = s.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"event: server_event\n"));
        let start = Instant::now();
        // Paused time: the runtime jumps straight to the next timer, so this observes exactly
        // when the ping is due.
        let ping = s.next().await.unwrap().unwrap();
        assert_eq!(&ping[..], PING);
        assert_eq!(start.elapsed(), Duration::from_secs(20));
        ch.publish(EventData::Text("{}".into()), None);
        assert_eq!(
            &s.next().await.unwrap().unwrap()[..],
            b"data: {}\nid: 00000001-2\n\n"
        );
        let ping = s.next().await.unwrap().unwrap();
        assert_eq!(&ping[..], PING);
        assert_eq!(start.elapsed(), Duration::from_secs(40));
    }

    #[tokio::test]
    async fn queued_events_are_batched_and_the_stream_ends_when_closed() {
        let ch = Channel::with_epoch(Epoch::from_u32(1), ChannelConfig::default());
        for _ in 0..3 {
            ch.publish(EventData::Text("{}".into()), None);
        }
        let mut s = open_stream(&ch, Some("00000001-0"), Vec::new, &SseConfig::default());
        let chunk = s.next().await.unwrap().unwrap();
        assert_eq!(
            &chunk[..],
            b"data: {}\nid: 00000001-1\n\ndata: {}\nid: 00000001-2\n\ndata: {}\nid: 00000001-3\n\n"
        );
        ch.close();
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_large_event_is_encoded_once_and_shared_by_every_subscriber() {
        let ch = Channel::with_epoch(Epoch::from_u32(1), ChannelConfig::default());
        let mut streams: Vec<SseStream> = (0..3)
            .map(|_| open_stream(&ch, None, Vec::new, &SseConfig::default()))
            .collect();
        let big = format!("\"{}\"", "x".repeat(1 << 20));
        ch.publish(EventData::Text(big.into()), None);
        ch.publish(EventData::Text("{}".into()), None);
        let mut chunks = Vec::new();
        for s in &mut streams {
            let chunk = s.next().await.unwrap().unwrap();
            assert!(chunk.ends_with(b"\"\nid: 00000001-1\n\n"));
            chunks.push(chunk);
            // The small event after it is its own chunk, not glued to a copy of the big one.
            assert_eq!(
                &s.next().await.unwrap().unwrap()[..],
                b"data: {}\nid: 00000001-2\n\n"
            );
        }
        assert!(
            chunks.iter().all(|c| c.as_ptr() == chunks[0].as_ptr()),
            "one shared buffer"
        );
    }
}
