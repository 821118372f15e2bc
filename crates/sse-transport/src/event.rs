//! Event ids, event payloads and the ServerEvent union (protocol
//! [§5.1](penguin_omni_protocol::spec#s5.1) *Channels and event ids* and
//! [§5.3](penguin_omni_protocol::spec#s5.3) *Server events*).

use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use penguin_omni_protocol::{Frame, OmniMessage};
use serde::{Deserialize, Serialize};

/// The `event:` name of every [`ServerEvent`]. OmniMessages use the default event (no name).
pub const SERVER_EVENT: &str = "server_event";

/// The random part of an event id, fixed when a channel is created.
///
/// Written as 8 lowercase hex digits, like the first 8 characters of the reference's UUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epoch(u32);

impl Epoch {
    /// A fresh random epoch.
    pub fn random() -> Epoch {
        use std::hash::{BuildHasher, Hasher};
        // std's hasher keys come from the OS's randomness (once per thread, stepped for each
        // `RandomState`), so every call gives a new value no run can predict: all an epoch
        // needs, since it only has to differ from the epochs of channels before it. It keeps
        // `rand` out of the crate, which every provider adapter now builds for its decoder.
        let bits = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Epoch((bits ^ (bits >> 32)) as u32)
    }

    /// A fixed epoch, for tests and for callers that persist epochs.
    pub fn from_u32(v: u32) -> Epoch {
        Epoch(v)
    }

    /// Parses the 8-hex-digit spelling this type writes (lowercase only, as produced).
    pub fn parse(s: &str) -> Option<Epoch> {
        if s.len() != 8
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        u32::from_str_radix(s, 16).ok().map(Epoch)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

/// An event id, `<epoch>-<seq>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId {
    /// The channel's epoch.
    pub epoch: Epoch,
    /// Position in the channel, from 1 (0 means "before any event").
    pub seq: u64,
}

impl EventId {
    /// Parses an id the way `replayAfter` does: split at the **last** `-`, separator not at
    /// index 0, and a non-negative integer seq.
    ///
    /// The seq must be plain ASCII digits. The reference uses JavaScript `Number()`, which also
    /// accepts `""`, whitespace, exponents and hex; no id this crate writes looks like that, so
    /// such ids are treated as misses.
    pub fn parse(s: &str) -> Option<EventId> {
        let (epoch, seq) = split_id(s)?;
        Some(EventId {
            epoch: Epoch::parse(epoch)?,
            seq,
        })
    }
}

/// Splits `<epoch>-<seq>` at the last `-`, returning the raw epoch text and the parsed seq.
pub(crate) fn split_id(s: &str) -> Option<(&str, u64)> {
    let dash = s.rfind('-')?;
    if dash == 0 {
        return None;
    }
    let seq = &s[dash + 1..];
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((&s[..dash], seq.parse().ok()?))
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.epoch, self.seq)
    }
}

/// The `data` of an event: serialized once, shared by every subscriber and the replay buffer.
///
/// Cloning is a reference-count bump in both variants. A [`Frame`] is kept as is (rather than
/// copied into an `Arc<str>`) so the bytes on the wire are the very bytes the Trace writes, which
/// is what client-side dedup relies on ([§5.9](penguin_omni_protocol::spec#s5.9) *The client
/// pattern*, and [§8](penguin_omni_protocol::spec#s8) *Pitfalls* item 7).
#[derive(Clone)]
pub enum EventData {
    /// An OmniMessage, serialized once by its producer.
    Frame(Frame),
    /// Any other single-line JSON (server events).
    Text(Arc<str>),
}

impl EventData {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        match self {
            EventData::Frame(f) => f.json(),
            EventData::Text(t) => t,
        }
    }
}

impl fmt::Debug for EventData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for EventData {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl From<Frame> for EventData {
    fn from(f: Frame) -> Self {
        EventData::Frame(f)
    }
}

impl From<&Frame> for EventData {
    fn from(f: &Frame) -> Self {
        EventData::Frame(f.clone())
    }
}

impl From<Arc<str>> for EventData {
    fn from(t: Arc<str>) -> Self {
        EventData::Text(t)
    }
}

impl From<&ServerEvent> for EventData {
    fn from(e: &ServerEvent) -> Self {
        EventData::Text(e.to_json().into())
    }
}

/// One numbered event of a channel.
///
/// Its wire form is encoded at most once and shared by every clone, so a large event sent to
/// many subscribers (and kept for replay) costs one encoding, not one per subscriber.
#[derive(Clone, Debug)]
pub struct SseEvent {
    /// `<epoch>-<seq>`.
    pub id: EventId,
    /// `Some("server_event")` for server events, `None` for OmniMessages.
    pub event: Option<&'static str>,
    /// Single-line JSON.
    pub data: EventData,
    wire: Arc<OnceLock<Bytes>>,
}

impl SseEvent {
    /// An event; its wire form is encoded on first use.
    pub fn new(id: EventId, event: Option<&'static str>, data: EventData) -> SseEvent {
        SseEvent {
            id,
            event,
            data,
            wire: Arc::default(),
        }
    }

    /// The event as SSE bytes (see [`encode_event`]), shared with every clone.
    pub fn wire(&self) -> Bytes {
        self.wire
            .get_or_init(|| {
                let mut out = Vec::with_capacity(self.data.as_str().len() + 48);
                encode_event(self, &mut out);
                Bytes::from(out)
            })
            .clone()
    }
}

impl PartialEq for SseEvent {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.event == other.event && self.data == other.data
    }
}

/// `task_state.state` and `session_state.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No task or compaction running.
    Idle,
    /// A task is running.
    Running,
    /// A compaction is running.
    Compacting,
}

/// A steering message or follow-up waiting to be consumed, as mirrored in `task_state`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingInput {
    /// Server-assigned id (used to recall it).
    pub id: String,
    /// The text.
    pub text: String,
    /// Number of attached images.
    pub images: u32,
    /// Number of attached files.
    pub files: u32,
}

/// The snapshot carried by `task_state`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    /// Run state.
    pub state: SessionStatus,
    /// Queued follow-ups; the server always sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<u32>,
    /// Present only when non-empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_steering: Option<Vec<PendingInput>>,
    /// Present only when non-empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_follow_ups: Option<Vec<PendingInput>>,
}

/// An approval routed to a human.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The full tool_call OmniMessage.
    pub tool_call: OmniMessage,
    /// The origin chain of a subagent's call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Vec<String>>,
    /// What the call would change, computed without changing anything (an edit's unified
    /// diff, or why it would fail), for the person deciding; absent when there is nothing
    /// beyond the arguments to show. penguin's own field: the reference sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// What answering `allow_always` would allow from then on in this session (`every
    /// read_file call`, ``commands starting `cargo test` ``); absent when "always" would grant
    /// no more than this call (a chain of commands, a redirection). penguin's own field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always: Option<String>,
}

/// The server's own events, sent as `event: server_event` ([§5.3](penguin_omni_protocol::spec#s5.3)
/// *Server events*).
///
/// Serialized as `{"type": "<snake_case>", ...camelCase fields}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerEvent {
    /// An approval waits for a human.
    ApprovalRequest(ApprovalRequest),
    /// The run state; the first snapshot event of a session stream.
    TaskState(TaskState),
    /// A session got a title.
    #[serde(rename_all = "camelCase")]
    SessionTitle {
        /// The titled session.
        session_id: String,
        /// The title.
        title: String,
    },
    /// A session was archived, pinned, or brought back (user channels; penguin's own), so
    /// every open list moves it.
    #[serde(rename_all = "camelCase")]
    SessionMarked {
        /// The session.
        session_id: String,
        /// Whether it is archived now.
        archived: bool,
        /// Whether it is pinned now.
        pinned: bool,
    },
    /// A session's run state flipped (user channels).
    #[serde(rename_all = "camelCase")]
    SessionState {
        /// The session.
        session_id: String,
        /// Its new state.
        state: SessionStatus,
        /// ISO timestamp of its last activity.
        last_active_at: String,
        /// Forced true whenever the state is not idle.
        has_trace: bool,
    },
    /// The replay window is gone: refetch history. Unicast only.
    ResyncRequired,
    /// The initial event of the user channel.
    Hello,
    /// A subagent registered under this session.
    #[serde(rename_all = "camelCase")]
    SessionCreated {
        /// Project of the child.
        project_id: String,
        /// Agent of the child.
        agent_id: String,
        /// The child session id.
        session_id: String,
        /// `subagent`, `schedule`, ...
        source: String,
    },
    /// The project's model credentials changed.
    CredentialsUpdated,
    /// A session's goal (goal mode) changed: started, a round began or ended, or it finished.
    /// `goal` is the state `GET /api/sessions/{id}/goal` answers (penguin's own event).
    GoalState {
        /// `{objective, status, budget, used, rounds, updatedAt}`.
        goal: serde_json::Value,
    },
    /// Records of a session could not be written to its Trace (penguin's own: a task whose
    /// trace lost records must not look cleanly completed).
    #[serde(rename_all = "camelCase")]
    TraceWriteFailed {
        /// The session.
        session_id: String,
        /// Records lost so far in this process.
        failed_records: u64,
        /// What it means for the person.
        message: String,
    },
}

impl ServerEvent {
    /// Single-line JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a ServerEvent always serializes")
    }
}

/// Appends one event in the reference's field order: `event:` (server events only), `data:`,
/// `id:`, blank line.
///
/// Data is single-line JSON in practice; should it ever contain line breaks, each line gets its
/// own `data:` field so the event still parses as the same string.
pub fn encode_event(ev: &SseEvent, out: &mut Vec<u8>) {
    if let Some(name) = ev.event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    let data = ev.data.as_str();
    if data.contains(['\n', '\r']) {
        for line in data.split("\r\n").flat_map(|l| l.split(['\n', '\r'])) {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    } else {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(data.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(ev.id.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    #[test]
    fn ids_parse_at_the_last_dash() {
        let id = EventId::parse("0000abcd-42").unwrap();
        assert_eq!(id.epoch, Epoch::from_u32(0xabcd));
        assert_eq!(id.seq, 42);
        assert_eq!(id.to_string(), "0000abcd-42");
        assert_eq!(split_id("a-b-7"), Some(("a-b", 7)));
        assert_eq!(
            split_id("abc--1"),
            Some(("abc-", 1)),
            "the epoch part then mismatches"
        );
        for bad in ["", "-5", "abc", "abc-", "abc-x", "abc-1.5", "abc-+1"] {
            assert_eq!(split_id(bad), None, "{bad:?}");
        }
        assert_eq!(
            EventId::parse("ABCDEF01-1"),
            None,
            "uppercase is not what we write"
        );
    }

    #[test]
    fn server_events_use_snake_case_type_and_camel_case_fields() {
        let ts = ServerEvent::TaskState(TaskState {
            state: SessionStatus::Running,
            queued: Some(0),
            pending_steering: Some(vec![PendingInput {
                id: "s1".into(),
                text: "hurry".into(),
                images: 0,
                files: 1,
            }]),
            pending_follow_ups: None,
        });
        assert_eq!(
            ts.to_json(),
            r#"{"type":"task_state","state":"running","queued":0,"pendingSteering":[{"id":"s1","text":"hurry","images":0,"files":1}]}"#
        );
        assert_eq!(
            ServerEvent::ResyncRequired.to_json(),
            r#"{"type":"resync_required"}"#
        );
        assert_eq!(ServerEvent::Hello.to_json(), r#"{"type":"hello"}"#);
        assert_eq!(
            ServerEvent::CredentialsUpdated.to_json(),
            r#"{"type":"credentials_updated"}"#
        );
        let st = ServerEvent::SessionState {
            session_id: "s".into(),
            state: SessionStatus::Idle,
            last_active_at: "2026-01-01T00:00:00.000Z".into(),
            has_trace: true,
        };
        assert_eq!(
            st.to_json(),
            r#"{"type":"session_state","sessionId":"s","state":"idle","lastActiveAt":"2026-01-01T00:00:00.000Z","hasTrace":true}"#
        );
        let created = ServerEvent::SessionCreated {
            project_id: "p".into(),
            agent_id: "a".into(),
            session_id: "c".into(),
            source: "subagent".into(),
        };
        assert_eq!(
            created.to_json(),
            r#"{"type":"session_created","projectId":"p","agentId":"a","sessionId":"c","source":"subagent"}"#
        );
        let marked = ServerEvent::SessionMarked {
            session_id: "s".into(),
            archived: true,
            pinned: false,
        };
        assert_eq!(
            marked.to_json(),
            r#"{"type":"session_marked","sessionId":"s","archived":true,"pinned":false}"#
        );
        let title = ServerEvent::SessionTitle {
            session_id: "s".into(),
            title: "t".into(),
        };
        assert_eq!(
            title.to_json(),
            r#"{"type":"session_title","sessionId":"s","title":"t"}"#
        );

        let call = build::tool_call("bash", "{}", "c1", StopReason::Completed, None);
        let req = ServerEvent::ApprovalRequest(ApprovalRequest {
            tool_call: call.clone(),
            origin: Some(vec!["child".into()]),
            preview: None,
            always: None,
        });
        let json = req.to_json();
        assert!(json.starts_with(r#"{"type":"approval_request","toolCall":{"timestamp":"#));
        assert!(json.ends_with(r#","origin":["child"]}"#));
        for ev in [ts, req, st, created, title, ServerEvent::ResyncRequired] {
            let back: ServerEvent = serde_json::from_str(&ev.to_json()).unwrap();
            assert_eq!(back, ev);
        }
    }
}
