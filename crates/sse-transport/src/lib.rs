//! Serving the OmniMessage stream over Server-Sent Events.

mod channel;
mod client;
mod event;
mod live_tail;
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
pub use sse::{
    encode_event, into_response, last_event_id, open_stream, sse_response, SseConfig, SseStream,
    HEARTBEAT, PING,
};
