//! The connect-first + dedup client pattern (protocol [§5.9](penguin_omni_protocol::spec#s5.9) *The
//! client pattern*), as a reducer over SSE events and history.

use std::collections::{HashSet, VecDeque};

use penguin_omni_protocol::{EventPayload, OmniMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::channel::LiveSnapshot;
use crate::event::{
    split_id, ApprovalRequest, ServerEvent, SessionStatus, TaskState, SERVER_EVENT,
};
use crate::live_tail::{Fragment, LiveTailTracker};

/// How many trailing history messages the dedup index holds.
pub const DEDUP_WINDOW: usize = 100;

/// `live` of a `/messages` response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LiveTail {
    /// The channel's last event id when `fragments` was taken.
    pub cursor: String,
    /// Synthetic `partial_* start` messages, one per open fragment.
    pub fragments: Vec<OmniMessage>,
}

impl From<LiveSnapshot> for LiveTail {
    fn from(s: LiveSnapshot) -> Self {
        LiveTail {
            cursor: s.cursor.to_string(),
            fragments: s.fragments,
        }
    }
}

/// The parts of a `/messages` response the reducer uses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// History messages as JSON objects, possibly with `tracePosition`.
    pub messages: Vec<Value>,
    /// Present while a run is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveTail>,
}

/// A pending approval as the client keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingApproval {
    /// Origin chain of the call; empty for the main session.
    pub origin: Vec<String>,
    /// The call's id.
    pub tool_call_id: String,
    /// The request as received.
    pub request: ApprovalRequest,
}

/// What a client shows. Two clients that saw the same session compare equal.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientState {
    /// Complete messages (and events) in render order.
    pub messages: Vec<OmniMessage>,
    /// In-flight fragments, in the order they were opened.
    pub fragments: Vec<Fragment>,
    /// The last `task_state` received: authoritative for the run state.
    pub task_state: Option<TaskState>,
    /// Pending approvals keyed by origin + tool_call_id, in registration order.
    pub approvals: Vec<PendingApproval>,
    /// The last `session_title` received.
    pub title: Option<String>,
    /// The last `trace_write_failed` message: the session's Trace lost records.
    pub trace_warning: Option<String>,
    /// Set by `resync_required` (and initially): history must be (re)fetched and passed to
    /// [`ClientReducer::on_history`].
    pub needs_history: bool,
}

enum Parsed {
    Message(String, Box<OmniMessage>),
    Server(Box<ServerEvent>),
    Unknown,
}

struct Buffered {
    epoch_seq: Option<(String, u64)>,
    parsed: Parsed,
}

/// The bundled Web App's stream consumption ([§5.9](penguin_omni_protocol::spec#s5.9) *The client
/// pattern*), in Rust.
///
/// Feed it every SSE event with [`on_event`](Self::on_event) from the moment the stream is open,
/// and the `/messages` answer with [`on_history`](Self::on_history). Until history arrives, events
/// are buffered; then the buffer is reordered around the live tail, replayed with dedup, and the
/// reducer switches to live mode.
///
/// Two additions to the reference, both for events still in flight when history arrives (the
/// reference assumes they all arrived before the `/messages` answer, and would otherwise apply
/// deltas or complete messages twice):
/// - an event whose id is at or below the live cursor is treated like a buffered one (partials
///   dropped, complete messages deduplicated);
/// - complete messages keep being deduplicated in live mode until the first recordable one
///   (no origin) that history does not hold: history is a prefix of the recordable stream, so
///   nothing after that can be a duplicate.
pub struct ClientReducer {
    messages: Vec<OmniMessage>,
    fragments: LiveTailTracker,
    task_state: Option<TaskState>,
    approvals: Vec<PendingApproval>,
    title: Option<String>,
    trace_warning: Option<String>,
    live: bool,
    buffer: Vec<Buffered>,
    last_epoch: Option<String>,
    cursor: Option<(String, u64)>,
    dedup: HashSet<String>,
    // History is a prefix of the recordable stream, so once a recordable complete message that
    // history lacks has been applied, no later one can be a duplicate: dedup stops there.
    dedup_open: bool,
    ignored: usize,
}

impl Default for ClientReducer {
    fn default() -> Self {
        ClientReducer::new()
    }
}

impl std::fmt::Debug for ClientReducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientReducer")
            .field("live", &self.live)
            .field("buffered", &self.buffer.len())
            .field("state", &self.state())
            .finish()
    }
}

impl ClientReducer {
    /// A reducer waiting for its first history.
    pub fn new() -> ClientReducer {
        ClientReducer {
            // Fragments are never capped on the client: the server's tail cap already bounds
            // what a late joiner receives, and the client must keep everything it streamed.
            fragments: LiveTailTracker::with_cap(usize::MAX, 0),
            messages: Vec::new(),
            task_state: None,
            approvals: Vec::new(),
            title: None,
            trace_warning: None,
            live: false,
            buffer: Vec::new(),
            last_epoch: None,
            cursor: None,
            dedup: HashSet::new(),
            dedup_open: false,
            ignored: 0,
        }
    }

    /// The observable state.
    pub fn state(&self) -> ClientState {
        ClientState {
            messages: self.messages.clone(),
            fragments: self.fragments.open_fragments().to_vec(),
            task_state: self.task_state.clone(),
            approvals: self.approvals.clone(),
            title: self.title.clone(),
            trace_warning: self.trace_warning.clone(),
            needs_history: !self.live,
        }
    }

    /// True once history was applied and events are applied as they come.
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Events whose data could not be parsed (skipped).
    pub fn ignored(&self) -> usize {
        self.ignored
    }

    /// One SSE event: its id (`lastEventId`), its `event:` name, its data.
    pub fn on_event(&mut self, id: Option<&str>, event: Option<&str>, data: &str) {
        let epoch_seq = id.and_then(split_id).map(|(e, s)| (e.to_owned(), s));
        if let Some((e, _)) = &epoch_seq {
            self.last_epoch = Some(e.clone());
        }
        let parsed = match event {
            Some(SERVER_EVENT) => match serde_json::from_str::<ServerEvent>(data) {
                Ok(ev) => Parsed::Server(Box::new(ev)),
                Err(_) => Parsed::Unknown,
            },
            None | Some("message") => match OmniMessage::from_json(data) {
                Ok(m) => Parsed::Message(data.to_owned(), Box::new(m)),
                Err(_) => Parsed::Unknown,
            },
            Some(_) => Parsed::Unknown,
        };
        if matches!(&parsed, Parsed::Server(ev) if **ev == ServerEvent::ResyncRequired) {
            // Rebuild from fresh history; the connection stays, and what follows (the initial
            // snapshot first) is buffered until that history arrives.
            self.live = false;
            self.buffer.clear();
            return;
        }
        let ev = Buffered { epoch_seq, parsed };
        if !self.live {
            self.buffer.push(ev);
        } else if self.at_or_before_cursor(&ev) {
            if !is_partial(&ev) {
                self.apply(ev, true);
            }
        } else {
            let dedup = self.dedup_open;
            self.apply(ev, dedup);
        }
    }

    fn at_or_before_cursor(&self, ev: &Buffered) -> bool {
        match (&self.cursor, &ev.epoch_seq) {
            (Some((ce, cs)), Some((e, s))) => ce == e && s <= cs,
            _ => false,
        }
    }

    /// The `/messages` answer: rebuilds the state from it and the buffered events, then goes
    /// live.
    pub fn on_history(&mut self, history: History) {
        self.messages.clear();
        self.fragments.clear();
        self.task_state = None;
        self.approvals.clear();
        self.dedup.clear();
        self.dedup_open = true;
        let n = history.messages.len();
        for (i, mut v) in history.messages.into_iter().enumerate() {
            if let Value::Object(obj) = &mut v {
                obj.shift_remove("tracePosition");
            }
            if i + DEDUP_WINDOW >= n {
                self.dedup.insert(v.to_string());
            }
            match OmniMessage::from_value(v) {
                Ok(m) => self.messages.push(m),
                Err(_) => self.ignored += 1,
            }
        }

        let cursor = history
            .live
            .as_ref()
            .and_then(|l| split_id(&l.cursor).map(|(e, s)| (e.to_owned(), s)));
        let use_live = match (&cursor, &self.last_epoch) {
            (Some((ce, _)), Some(last)) => ce == last,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let buffer = std::mem::take(&mut self.buffer);
        let mut ordered: VecDeque<Buffered> = VecDeque::with_capacity(buffer.len());
        if use_live {
            self.cursor = cursor;
            let (covered, rest): (Vec<Buffered>, Vec<Buffered>) = buffer
                .into_iter()
                .partition(|ev| self.at_or_before_cursor(ev));
            ordered.extend(covered.into_iter().filter(|ev| !is_partial(ev)));
            let fragments = history.live.map(|l| l.fragments).unwrap_or_default();
            ordered.extend(fragments.into_iter().map(|m| Buffered {
                epoch_seq: None,
                parsed: Parsed::Message(m.to_json(), Box::new(m)),
            }));
            ordered.extend(rest);
        } else {
            self.cursor = None;
            ordered.extend(buffer);
        }
        for ev in ordered {
            self.apply(ev, true);
        }
        self.live = true;
    }

    fn apply(&mut self, ev: Buffered, dedup: bool) {
        match ev.parsed {
            Parsed::Message(json, msg) => {
                if let Some(EventPayload::ApprovalDecision { tool_call_id, .. }) = msg.event() {
                    let origin = msg.origin.clone().unwrap_or_default();
                    self.approvals
                        .retain(|a| !(a.origin == origin && a.tool_call_id == *tool_call_id));
                }
                // Partials feed the fragments; a complete message closes the one it finishes,
                // even when it is itself dropped as a duplicate of history.
                self.fragments.observe(&msg);
                if msg.is_partial() {
                    return;
                }
                let known = self.dedup.contains(&json);
                if !known && msg.is_recordable() {
                    self.dedup_open = false;
                }
                if !(dedup && known) {
                    self.messages.push(*msg);
                }
            }
            Parsed::Server(ev) => self.apply_server_event(*ev),
            Parsed::Unknown => self.ignored += 1,
        }
    }

    fn apply_server_event(&mut self, ev: ServerEvent) {
        match ev {
            ServerEvent::TaskState(ts) => {
                if ts.state == SessionStatus::Idle {
                    self.approvals.clear();
                }
                self.task_state = Some(ts);
            }
            ServerEvent::ApprovalRequest(req) => {
                let origin = req
                    .origin
                    .clone()
                    .or_else(|| req.tool_call.origin.clone())
                    .unwrap_or_default();
                let tool_call_id = req.tool_call.tool_call_id().unwrap_or("").to_owned();
                self.approvals
                    .retain(|a| !(a.origin == origin && a.tool_call_id == tool_call_id));
                self.approvals.push(PendingApproval {
                    origin,
                    tool_call_id,
                    request: req,
                });
            }
            ServerEvent::SessionTitle { title, .. } => self.title = Some(title),
            ServerEvent::TraceWriteFailed { message, .. } => self.trace_warning = Some(message),
            ServerEvent::ResyncRequired
            | ServerEvent::SessionState { .. }
            | ServerEvent::SessionMarked { .. }
            | ServerEvent::Hello
            | ServerEvent::SessionCreated { .. }
            | ServerEvent::CredentialsUpdated
            | ServerEvent::GoalState { .. } => {}
        }
    }
}

fn is_partial(ev: &Buffered) -> bool {
    matches!(&ev.parsed, Parsed::Message(_, m) if m.is_partial())
}
