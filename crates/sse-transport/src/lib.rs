//! Serving the OmniMessage stream over Server-Sent Events (reference §5.1–§5.3, §5.7, §5.9).
//!
//! How the pieces fit:
//!
//! - A [`ChannelHub`] holds one [`Channel`] per session (or `user:<id>`), created lazily and
//!   reclaimed when idle; a recreated channel has a new [`Epoch`], so old ids miss.
//! - The session's driver serializes each message once ([`Frame`](penguin_omni_protocol::Frame))
//!   and calls [`Channel::publish_message`]: the event gets the next id `<epoch>-<seq>`, enters
//!   the bounded replay buffer, is queued for every subscriber, and feeds the channel's
//!   [`LiveTailTracker`] — all under one lock, never waiting on a subscriber.
//! - A stream request calls [`sse_response`] (or [`open_stream`] + [`into_response`]) with the
//!   `Last-Event-ID` header ([`last_event_id`]) and the initial snapshot events. Setup is atomic:
//!   subscribe, then the replay or `resync_required`, then the initial events, then live events,
//!   with `: ping` heartbeats.
//! - A `/messages` request takes [`Channel::live_snapshot`] (cursor + in-flight fragments) before
//!   reading the trace, and returns both; [`LiveTail`] is its wire shape.
//! - A client (a test, a TUI, a bridge) folds the stream and the history together with
//!   [`ClientReducer`]: connect first, buffer, reorder around the live cursor, dedup by exact
//!   JSON, then go live.
//!
//! Slow subscribers: each has a bounded queue ([`ChannelConfig::subscriber_queue`]); when it is
//! full the subscriber is disconnected (its stream ends) and reconnects with `Last-Event-ID`.
//! A socket that stops reading altogether keeps its HTTP connection open until the OS or the
//! server's connection handling gives up; the channel has forgotten it long before.
//!
//! ```
//! use penguin_omni_protocol::{build, Frame, StopReason};
//! use penguin_sse_transport::{Channel, ChannelConfig, ReplayOutcome, ServerEvent};
//!
//! let channel = Channel::new(ChannelConfig::default());
//! let mut live = channel.subscribe();
//!
//! let hello = Frame::new(build::assistant_text("hello", StopReason::Completed));
//! let first = channel.publish_message(&hello);
//! channel.publish_message(&Frame::new(build::request_begin()));
//!
//! // Every subscriber gets the very same bytes, in seq order.
//! let ev = live.try_next().unwrap();
//! assert_eq!(ev.id, first);
//! assert_eq!(ev.data.as_str(), hello.json());
//! assert_eq!(ev.event, None); // OmniMessages use the default event
//!
//! // A client that saw `first` reconnects: it gets the gap, then its snapshot, then live.
//! let mut back = channel.connect(Some(&first.to_string()), || vec![ServerEvent::Hello]);
//! assert_eq!(back.replay(), ReplayOutcome::Replayed(1));
//! assert_eq!(back.try_next().unwrap().id.seq, first.seq + 1);
//! assert_eq!(back.try_next().unwrap().data.as_str(), r#"{"type":"hello"}"#);
//!
//! // An id from another epoch (a restarted server) cannot be replayed.
//! let mut lost = channel.connect(Some("00000000-1"), Vec::new);
//! assert_eq!(lost.replay(), ReplayOutcome::ResyncRequired);
//! assert_eq!(lost.try_next().unwrap().data.as_str(), r#"{"type":"resync_required"}"#);
//! ```

mod channel;
mod client;
mod event;
mod live_tail;
#[cfg(feature = "axum")]
mod response;
mod sse;

pub use channel::{
    Channel, ChannelConfig, ChannelHub, LiveSnapshot, ReplayOutcome, SubscriberId, Subscription,
};
pub use client::{ClientReducer, ClientState, History, LiveTail, PendingApproval, DEDUP_WINDOW};
pub use event::{
    ApprovalRequest, Epoch, EventData, EventId, PendingInput, ServerEvent, SessionStatus, SseEvent,
    TaskState, SERVER_EVENT,
};
pub use live_tail::{
    Fragment, FragmentKey, LiveTailTracker, PartialKind, FRAGMENT_CAP, FRAGMENT_SLACK,
};
#[cfg(feature = "axum")]
pub use response::{into_response, last_event_id, sse_response};
pub use sse::{encode_event, open_stream, SseConfig, SseStream, HEARTBEAT, PING};
