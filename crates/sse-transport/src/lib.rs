#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod channel;
mod client;
pub mod decode;
mod event;
mod hub;
mod live_tail;
#[cfg(feature = "axum")]
mod response;
mod sse;

pub use channel::{
    Channel, ChannelConfig, LiveSnapshot, Observer, ReplayOutcome, SubscriberId, Subscription,
};
pub use client::{ClientReducer, ClientState, History, LiveTail, PendingApproval, DEDUP_WINDOW};
pub use decode::{DecodeError, DecodedEvent, SseDecoder};
pub use event::{
    encode_event, ApprovalRequest, Epoch, EventData, EventId, PendingInput, ServerEvent,
    SessionStatus, SseEvent, TaskState, SERVER_EVENT,
};
pub use hub::ChannelHub;
pub use live_tail::{
    Fragment, FragmentKey, LiveTailTracker, PartialKind, FRAGMENT_CAP, FRAGMENT_SLACK,
};
#[cfg(feature = "axum")]
pub use response::{into_response, last_event_id, sse_response};
pub use sse::{open_stream, SseConfig, SseStream, HEARTBEAT, PING};
