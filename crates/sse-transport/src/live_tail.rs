//! `LiveTailTracker` (protocol [§5.7](penguin_omni_protocol::spec#s5.7) *History and the live
//! tail*): the in-flight fragments of a running session, so a client that connects mid-segment can
//! render what was streamed before it arrived.

use penguin_omni_protocol::{
    Body, ModelPayload, OmniMessage, PartialText, PartialThinking, PartialToolCall,
    PartialToolCallOutput, Role, StreamEventType, Timestamp,
};

/// Default per-fragment content cap (512 KiB).
pub const FRAGMENT_CAP: usize = 512 * 1024;
/// Growth allowed past the cap before trimming (64 KiB), so trimming is amortized.
pub const FRAGMENT_SLACK: usize = 64 * 1024;

/// The kind of a partial fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PartialKind {
    /// `partial_text`
    Text,
    /// `partial_thinking`
    Thinking,
    /// `partial_tool_call`
    ToolCall,
    /// `partial_tool_call_output`
    ToolCallOutput,
}

impl PartialKind {
    /// The kind of a partial payload.
    pub fn of_partial(p: &ModelPayload) -> Option<PartialKind> {
        Some(match p {
            ModelPayload::PartialText(_) => PartialKind::Text,
            ModelPayload::PartialThinking(_) => PartialKind::Thinking,
            ModelPayload::PartialToolCall(_) => PartialKind::ToolCall,
            ModelPayload::PartialToolCallOutput(_) => PartialKind::ToolCallOutput,
            _ => return None,
        })
    }

    /// The kind of fragment a complete payload closes. User texts close nothing: only the
    /// assistant streams `partial_text`.
    pub fn closed_by(p: &ModelPayload) -> Option<PartialKind> {
        Some(match p {
            ModelPayload::Text(t) if t.role == Role::Assistant => PartialKind::Text,
            ModelPayload::Thinking(_) => PartialKind::Thinking,
            ModelPayload::ToolCall(_) => PartialKind::ToolCall,
            ModelPayload::ToolCallOutput(_) => PartialKind::ToolCallOutput,
            _ => return None,
        })
    }
}

/// Identity of a fragment: origin chain, partial kind and tool_call_id.
///
/// Unlike `PartialAggregator`, origin is part of the key, so a subagent's text does not merge
/// with its parent's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    /// Origin chain; empty for the main session.
    pub origin: Vec<String>,
    /// Partial kind.
    pub kind: PartialKind,
    /// tool_call_id, or empty for text and thinking.
    pub tool_call_id: String,
}

impl FragmentKey {
    /// The key of a partial message.
    pub fn of_partial(msg: &OmniMessage) -> Option<FragmentKey> {
        let p = msg.model()?;
        Some(FragmentKey {
            origin: msg.origin.clone().unwrap_or_default(),
            kind: PartialKind::of_partial(p)?,
            tool_call_id: p.tool_call_id().unwrap_or("").to_owned(),
        })
    }

    /// The key of the fragment a complete message closes, if any.
    pub fn closed_by(msg: &OmniMessage) -> Option<FragmentKey> {
        let p = msg.model()?;
        Some(FragmentKey {
            origin: msg.origin.clone().unwrap_or_default(),
            kind: PartialKind::closed_by(p)?,
            tool_call_id: p.tool_call_id().unwrap_or("").to_owned(),
        })
    }
}

/// One open fragment: everything streamed so far for a key.
#[derive(Clone, Debug, PartialEq)]
pub struct Fragment {
    /// Its key.
    pub key: FragmentKey,
    /// Timestamp of the message that opened it.
    pub started_at: Timestamp,
    /// Tool name (tool calls only).
    pub name: String,
    /// Accumulated text, thinking, arguments or output.
    pub content: String,
    /// Latest non-empty image set (tool outputs only).
    pub images: Vec<String>,
}

impl Fragment {
    /// Opens a fragment from a partial message (its content is not appended here).
    pub(crate) fn open(key: FragmentKey, msg: &OmniMessage) -> Fragment {
        Fragment {
            key,
            started_at: msg.timestamp.clone(),
            name: String::new(),
            content: String::new(),
            images: Vec::new(),
        }
    }

    /// Folds one partial into the fragment: content appended, a non-empty name or image set
    /// replaces the stored one (as `PartialAggregator` does).
    pub(crate) fn absorb(&mut self, p: &ModelPayload) {
        if let Some((_, content)) = p.partial_parts() {
            self.content.push_str(content);
        }
        match p {
            ModelPayload::PartialToolCall(t) if !t.name.is_empty() => self.name.clone_from(&t.name),
            ModelPayload::PartialToolCallOutput(o) => {
                if let Some(images) = o.images.as_ref().filter(|i| !i.is_empty()) {
                    self.images.clone_from(images);
                }
            }
            _ => {}
        }
    }

    /// The synthetic `partial_* start` carrying the whole fragment, with the original start
    /// timestamp, a copy of the origin, and no `stop_reason` key.
    pub fn to_start_message(&self) -> OmniMessage {
        let k = &self.key;
        let payload = match k.kind {
            PartialKind::Text => ModelPayload::PartialText(PartialText {
                role: Role::Assistant,
                event_type: StreamEventType::Start,
                text: self.content.clone(),
                stop_reason: None,
            }),
            PartialKind::Thinking => ModelPayload::PartialThinking(PartialThinking {
                role: Role::Assistant,
                event_type: StreamEventType::Start,
                thinking: self.content.clone(),
                stop_reason: None,
            }),
            PartialKind::ToolCall => ModelPayload::PartialToolCall(PartialToolCall {
                role: Role::Assistant,
                event_type: StreamEventType::Start,
                name: self.name.clone(),
                arguments: self.content.clone(),
                tool_call_id: k.tool_call_id.clone(),
                stop_reason: None,
            }),
            PartialKind::ToolCallOutput => {
                ModelPayload::PartialToolCallOutput(PartialToolCallOutput {
                    role: Role::User,
                    event_type: StreamEventType::Start,
                    output: self.content.clone(),
                    images: (!self.images.is_empty()).then(|| self.images.clone()),
                    tool_call_id: k.tool_call_id.clone(),
                    stop_reason: None,
                })
            }
        };
        OmniMessage {
            timestamp: self.started_at.clone(),
            body: Body::Model(payload),
            origin: (!k.origin.is_empty()).then(|| k.origin.clone()),
        }
    }
}

/// Mirrors the partial fragments of one session's stream ([§5.7](penguin_omni_protocol::spec#s5.7)
/// *History and the live tail*).
///
/// Feed it every published message with [`observe`](Self::observe); [`fragments`](Self::fragments)
/// then answers "what is in flight right now". To pair the fragments with a consistent channel
/// cursor, use the tracker built into [`Channel`](crate::Channel)
/// ([`Channel::publish_message`](crate::Channel::publish_message) and
/// [`Channel::live_snapshot`](crate::Channel::live_snapshot)), which observes and numbers a message
/// under one lock.
///
/// Content is capped per fragment: once it exceeds `cap + slack` bytes, it is cut to the last
/// `cap` bytes (at a char boundary). Sizes are UTF-8 bytes, not the reference's UTF-16 units.
#[derive(Debug, Clone)]
pub struct LiveTailTracker {
    // Few fragments are open at once (one per concurrent tool at most), so a Vec in opening
    // order beats a map: lookups are short scans and the order is what `fragments` returns.
    open: Vec<Fragment>,
    cap: usize,
    slack: usize,
}

impl Default for LiveTailTracker {
    fn default() -> Self {
        LiveTailTracker::new()
    }
}

impl LiveTailTracker {
    /// A tracker with the reference's 512 KiB cap and 64 KiB slack.
    pub fn new() -> LiveTailTracker {
        LiveTailTracker::with_cap(FRAGMENT_CAP, FRAGMENT_SLACK)
    }

    /// A tracker with a custom cap and slack (bytes).
    pub fn with_cap(cap: usize, slack: usize) -> LiveTailTracker {
        LiveTailTracker {
            open: Vec::new(),
            cap,
            slack,
        }
    }

    /// Feeds one message of the stream.
    pub fn observe(&mut self, msg: &OmniMessage) {
        let Some(p) = msg.model() else { return };
        if let Some(key) = FragmentKey::of_partial(msg) {
            let (event_type, _) = p.partial_parts().expect("a partial has parts");
            let pos = self.open.iter().position(|f| f.key == key);
            match (event_type, pos) {
                (StreamEventType::Start, pos) => {
                    if let Some(i) = pos {
                        self.open.remove(i);
                    }
                    let mut f = Fragment::open(key, msg);
                    f.absorb(p);
                    self.push_capped(f);
                }
                (StreamEventType::Delta, Some(i)) => {
                    let f = &mut self.open[i];
                    f.absorb(p);
                    trim_to_tail(&mut f.content, self.cap, self.slack);
                }
                (StreamEventType::Delta, None) => {
                    let mut f = Fragment::open(key, msg);
                    f.absorb(p);
                    self.push_capped(f);
                }
                (StreamEventType::Stop, Some(i)) => {
                    self.open.remove(i);
                }
                (StreamEventType::Stop, None) => {}
            }
        } else if let Some(key) = FragmentKey::closed_by(msg) {
            self.open.retain(|f| f.key != key);
        }
    }

    fn push_capped(&mut self, mut f: Fragment) {
        trim_to_tail(&mut f.content, self.cap, self.slack);
        self.open.push(f);
    }

    /// One synthetic `partial_* start` per open fragment, in the order they were opened.
    pub fn fragments(&self) -> Vec<OmniMessage> {
        self.open.iter().map(Fragment::to_start_message).collect()
    }

    /// The open fragments themselves.
    pub fn open_fragments(&self) -> &[Fragment] {
        &self.open
    }

    /// Forgets everything (the run ended).
    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Keeps the last `cap` bytes once `s` has grown past `cap + slack`.
fn trim_to_tail(s: &mut String, cap: usize, slack: usize) {
    if s.len() <= cap.saturating_add(slack) {
        return;
    }
    let mut cut = s.len() - cap;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    s.drain(..cut);
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason, StreamEventType::*};

    const OK: StopReason = StopReason::Completed;

    fn contents(t: &LiveTailTracker) -> Vec<(String, String)> {
        t.fragments()
            .iter()
            .map(|m| {
                let p = m.model().unwrap();
                (p.type_name().to_owned(), p.content().unwrap().to_owned())
            })
            .collect()
    }

    #[test]
    fn start_delta_stop_lifecycle() {
        let mut t = LiveTailTracker::new();
        let start = build::partial_text(Start, "He", OK);
        t.observe(&start);
        t.observe(&build::partial_text(Delta, "llo", OK));
        let frags = t.fragments();
        assert_eq!(frags.len(), 1);
        assert_eq!(
            frags[0].timestamp, start.timestamp,
            "original start timestamp"
        );
        let json = frags[0].to_json();
        assert!(
            json.ends_with(
                r#""payload":{"type":"partial_text","role":"assistant","event_type":"start","text":"Hello"}}"#
            ),
            "no stop_reason key, no origin key: {json}"
        );
        t.observe(&build::partial_text(Stop, "", OK));
        assert!(t.is_empty());
    }

    #[test]
    fn complete_messages_close_matching_fragments_but_user_text_does_not() {
        let mut t = LiveTailTracker::new();
        t.observe(&build::partial_text(Start, "a", OK));
        t.observe(&build::partial_thinking(Start, "b", OK));
        t.observe(&build::partial_tool_call(Start, "bash", "{", "c1", OK));
        t.observe(&build::partial_tool_call_output(Start, "out", "c0", OK));
        t.observe(&build::user_text("hi"));
        assert_eq!(t.fragments().len(), 4);
        t.observe(&build::assistant_text("a", OK));
        t.observe(&build::thinking("b", OK, None));
        // A different call id closes nothing.
        t.observe(&build::tool_call("bash", "{}", "c9", OK, None));
        assert_eq!(
            contents(&t),
            [
                ("partial_tool_call".to_owned(), "{".to_owned()),
                ("partial_tool_call_output".to_owned(), "out".to_owned())
            ]
        );
        t.observe(&build::tool_call("bash", "{}", "c1", OK, None));
        t.observe(&build::tool_call_output("out", "c0", OK));
        assert!(t.is_empty());
    }

    #[test]
    fn origin_is_part_of_the_key_and_is_copied() {
        let mut t = LiveTailTracker::new();
        t.observe(&build::partial_text(Start, "parent", OK));
        t.observe(&build::partial_text(Start, "child", OK).with_origin("kid"));
        t.observe(&build::partial_text(Delta, "!", OK).with_origin("kid"));
        let frags = t.fragments();
        assert_eq!(frags.len(), 2);
        assert_eq!(frags[0].origin, None);
        assert_eq!(frags[1].origin, Some(vec!["kid".to_owned()]));
        assert_eq!(frags[1].model().unwrap().content(), Some("child!"));
        // The parent's complete text does not close the child's fragment.
        t.observe(&build::assistant_text("parent", OK));
        assert_eq!(
            contents(&t),
            [("partial_text".to_owned(), "child!".to_owned())]
        );
        t.observe(&build::assistant_text("child!", OK).with_origin("kid"));
        assert!(t.is_empty());
    }

    #[test]
    fn restart_replaces_and_moves_to_end_and_lenient_delta_opens() {
        let mut t = LiveTailTracker::new();
        t.observe(&build::partial_text(Start, "old", OK));
        t.observe(&build::partial_thinking(Start, "think", OK));
        let restart = build::partial_text(Start, "new", OK);
        t.observe(&restart);
        assert_eq!(
            contents(&t),
            [
                ("partial_thinking".to_owned(), "think".to_owned()),
                ("partial_text".to_owned(), "new".to_owned())
            ]
        );
        assert_eq!(t.fragments()[1].timestamp, restart.timestamp);
        // A stop with nothing open is ignored; a delta with nothing open opens.
        t.observe(&build::partial_tool_call(Stop, "", "", "x", OK));
        assert_eq!(t.fragments().len(), 2);
        t.observe(&build::partial_tool_call_output(Delta, "tail", "y", OK));
        assert_eq!(t.fragments().len(), 3);
        t.clear();
        assert!(t.fragments().is_empty());
    }

    #[test]
    fn tool_fragments_carry_name_arguments_and_images() {
        let mut t = LiveTailTracker::new();
        t.observe(&build::partial_tool_call(Start, "bash", "", "c1", OK));
        t.observe(&build::partial_tool_call(Delta, "", r#"{"cmd":"#, "c1", OK));
        let mut out = build::partial_tool_call_output(Delta, "x", "c2", OK);
        if let Body::Model(ModelPayload::PartialToolCallOutput(p)) = &mut out.body {
            p.images = Some(vec!["data:image/png;base64,AA".into()]);
        }
        t.observe(&out);
        t.observe(&build::partial_tool_call_output(Delta, "y", "c2", OK));
        let frags = t.fragments();
        match frags[0].model().unwrap() {
            ModelPayload::PartialToolCall(p) => {
                assert_eq!(
                    (p.name.as_str(), p.arguments.as_str()),
                    ("bash", r#"{"cmd":"#)
                );
                assert_eq!(p.tool_call_id, "c1");
                assert_eq!(p.stop_reason, None);
            }
            other => panic!("{other:?}"),
        }
        match frags[1].model().unwrap() {
            ModelPayload::PartialToolCallOutput(p) => {
                assert_eq!(p.output, "xy");
                assert_eq!(
                    p.images.as_deref(),
                    Some(&["data:image/png;base64,AA".to_owned()][..])
                );
                assert_eq!(p.role, Role::User);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cap_keeps_the_tail_after_slack_is_exceeded() {
        let mut t = LiveTailTracker::with_cap(10, 5);
        t.observe(&build::partial_text(Start, "0123456789", OK));
        t.observe(&build::partial_text(Delta, "abcde", OK));
        // 15 bytes = cap + slack: not trimmed yet.
        assert_eq!(contents(&t)[0].1, "0123456789abcde");
        t.observe(&build::partial_text(Delta, "f", OK));
        assert_eq!(contents(&t)[0].1, "6789abcdef");
        // Trimming never splits a character: the cut moves forward to a boundary.
        let mut t = LiveTailTracker::with_cap(4, 0);
        t.observe(&build::partial_text(Start, "aéé", OK)); // 1 + 2 + 2 bytes
        assert_eq!(contents(&t)[0].1, "éé");
        t.observe(&build::partial_text(Delta, "b", OK)); // "ééb" = 5 bytes → keep ≤ 4
        assert_eq!(contents(&t)[0].1, "éb");
    }

    #[test]
    fn default_cap_is_512_kib_with_64_kib_slack() {
        let mut t = LiveTailTracker::new();
        t.observe(&build::partial_tool_call_output(Start, "", "c", OK));
        let chunk = "x".repeat(64 * 1024);
        for _ in 0..9 {
            t.observe(&build::partial_tool_call_output(
                Delta,
                chunk.as_str(),
                "c",
                OK,
            ));
        }
        assert_eq!(
            t.open_fragments()[0].content.len(),
            9 * 64 * 1024,
            "within slack"
        );
        t.observe(&build::partial_tool_call_output(Delta, "END", "c", OK));
        let content = &t.open_fragments()[0].content;
        assert_eq!(content.len(), FRAGMENT_CAP);
        assert!(content.ends_with("END"));
    }
}
