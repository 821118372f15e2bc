//! Session resume (§3.5, §3.6).

use penguin_omni_protocol::markers::extract_summary;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use penguin_omni_protocol::markers::marker_block;
use penguin_omni_protocol::{
    build, Body, CompactionMode, CompactionReason, EventPayload, ModelPayload, OmniMessage, Role,
    SessionMeta, StopReason, TokenCounts,
};

use crate::error::TraceError;
use crate::paths::{find_latest_trace_file, LocatedTrace, TraceLocation};
use crate::reader::read_trace_tolerant;
use crate::writer::{Durability, Writer, WriterConfig};

/// The output text of a resume placeholder.
pub const PLACEHOLDER_OUTPUT: &str = "[interrupted: process exited before the tool finished]";

/// A compaction whose `compaction_begin` has no `compaction_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DanglingCompaction {
    /// Why it ran.
    pub reason: CompactionReason,
    /// How.
    pub mode: CompactionMode,
}

/// The state rebuilt from a trace file (`resumeTrace`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resumed {
    /// Committed complete messages: the model context to restore.
    pub history: Vec<OmniMessage>,
    /// User-side messages not yet sent (reclaimed prompts, outputs waiting for the next turn,
    /// placeholders), to prefix to the next run's input.
    pub carry_over: Vec<OmniMessage>,
    /// The file ends with a completed compaction: the next write rotates to a new file.
    pub context_closed: bool,
    /// The `[context_summary]` user text to send first, after a summarize compaction.
    pub pending_summary: Option<OmniMessage>,
    /// `session` of the last token_usage.
    pub session_tokens: TokenCounts,
    /// `request.total` of the last token_usage.
    pub last_request_total: u64,
    /// Completed non-compaction requests in this context.
    pub session_turns: u64,
    /// Complete messages and abort events, for the history view ([`resume_trace`] only:
    /// [`resume_session`] leaves it empty).
    pub render_messages: Vec<OmniMessage>,
    /// The first session_meta.
    pub meta: Option<SessionMeta>,
    /// A compaction interrupted by a crash (see §3.6 step 7).
    pub dangling_compaction: Option<DanglingCompaction>,
}

/// The resume placeholder for a call whose output never reached the trace.
pub fn placeholder(tool_call_id: &str) -> OmniMessage {
    build::tool_call_output(PLACEHOLDER_OUTPUT, tool_call_id, StopReason::Aborted)
}

fn output_id(m: &OmniMessage) -> Option<&str> {
    match m.model() {
        Some(ModelPayload::ToolCallOutput(o)) => Some(&o.tool_call_id),
        _ => None,
    }
}

/// Which committed calls still wait for their output. Kept in commit order so placeholders come
/// out in the order the reference's insertion-ordered `Set` iterates; a map instead of a scan of
/// every committed id keeps a long session's resume linear.
#[derive(Default)]
struct Pairing {
    committed: HashSet<String>,
    answered: HashSet<String>,
    unanswered: BTreeMap<u64, String>,
    seq_of: HashMap<String, u64>,
    next_seq: u64,
}

impl Pairing {
    fn commit_call(&mut self, id: &str) {
        if self.committed.insert(id.to_owned()) && !self.answered.contains(id) {
            self.unanswered.insert(self.next_seq, id.to_owned());
            self.seq_of.insert(id.to_owned(), self.next_seq);
            self.next_seq += 1;
        }
    }

    fn answer(&mut self, id: &str) {
        self.answered.insert(id.to_owned());
        if let Some(seq) = self.seq_of.remove(id) {
            self.unanswered.remove(&seq);
        }
    }

    /// Keeps non-outputs, and outputs of committed calls not answered yet (the first one only).
    /// Marks the kept outputs answered.
    fn take_eligible(&mut self, msgs: Vec<OmniMessage>) -> Vec<OmniMessage> {
        let mut out = Vec::with_capacity(msgs.len());
        for m in msgs {
            match output_id(&m) {
                None => out.push(m),
                Some(id) => {
                    if self.committed.contains(id) && !self.answered.contains(id) {
                        let id = id.to_owned();
                        self.answer(&id);
                        out.push(m);
                    }
                }
            }
        }
        out
    }

    /// Placeholders for every committed call still unanswered, which are then answered.
    fn placeholders(&mut self) -> Vec<OmniMessage> {
        let ids: Vec<String> = std::mem::take(&mut self.unanswered).into_values().collect();
        ids.into_iter()
            .map(|id| {
                let p = placeholder(&id);
                self.answered.insert(id.clone());
                self.seq_of.remove(&id);
                p
            })
            .collect()
    }
}

#[derive(Default)]
struct Replay {
    pending: Vec<OmniMessage>,
    snapshot: Vec<OmniMessage>,
    outputs: Vec<OmniMessage>,
    in_request: bool,
    in_compaction: bool,
    dangling: Option<DanglingCompaction>,
    pairing: Pairing,
    history: Vec<OmniMessage>,
    turns: u64,
}

impl Replay {
    fn commit(&mut self) {
        let snapshot = std::mem::take(&mut self.snapshot);
        // Calls this request's inputs answer must not get a placeholder, so eligibility is
        // decided (and the ids marked answered) before the placeholders are made.
        let eligible = self.pairing.take_eligible(snapshot);
        let placeholders = self.pairing.placeholders();
        self.history.extend(placeholders);
        self.history.extend(eligible);
        let outputs = std::mem::take(&mut self.outputs);
        for m in &outputs {
            if let Some(ModelPayload::ToolCall(tc)) = m.model() {
                let completed = tc.stop_reason.is_none_or(|s| s == StopReason::Completed);
                if completed && !tc.tool_call_id.is_empty() {
                    self.pairing.commit_call(&tc.tool_call_id);
                }
            }
        }
        self.history.extend(outputs);
        if !self.in_compaction {
            self.turns += 1;
        }
        self.in_request = false;
    }

    fn drop_turn(&mut self) {
        let snapshot = std::mem::take(&mut self.snapshot);
        let mut keep: Vec<OmniMessage> = if self.in_compaction {
            // The compaction prompt is the engine's, not the user's: never resend it.
            snapshot
                .into_iter()
                .filter(|m| output_id(m).is_some())
                .collect()
        } else {
            snapshot
        };
        keep.append(&mut self.pending);
        self.pending = keep;
        self.outputs.clear();
        self.in_request = false;
    }
}

/// The assistant text of the last completed request, or `None` when no request completed.
fn last_completed_request_text(messages: &[OmniMessage]) -> Option<String> {
    let mut last = None;
    let mut current: Option<String> = None;
    for m in messages {
        match &m.body {
            Body::Event(EventPayload::RequestBegin) => current = Some(String::new()),
            Body::Event(EventPayload::RequestEnd { status, .. }) => {
                if let Some(text) = current.take() {
                    if *status == StopReason::Completed {
                        last = Some(text);
                    }
                }
            }
            Body::Model(ModelPayload::Text(t)) if t.role == Role::Assistant => {
                if let Some(cur) = current.as_mut() {
                    cur.push_str(&t.text);
                }
            }
            _ => {}
        }
    }
    last
}

/// Rebuilds the engine state from the records of the highest-index trace file (`resumeTrace`).
///
/// Guarantees structural validity: every committed tool_call is answered exactly once, in
/// `history` or in `carry_over`, after the call. Messages carrying an origin are ignored.
pub fn resume_trace(messages: &[OmniMessage]) -> Resumed {
    replay(messages, messages.iter().map(Cow::Borrowed), true)
}

/// [`resume_trace`] for a caller done with the records: they move into the history instead
/// of being copied, and no `render_messages` are kept (continuing a session needs none).
pub fn resume_trace_owned(messages: Vec<OmniMessage>) -> Resumed {
    let scan = scan_counters(&messages);
    if let Some(closed) = closed_context(&messages, &scan) {
        return closed;
    }
    replay_records(scan, messages.into_iter().map(Cow::Owned), false)
}

/// Token counts and the session head, from every record.
struct Scan {
    session_tokens: TokenCounts,
    last_request_total: u64,
    meta: Option<SessionMeta>,
}

fn replay<'a>(
    messages: &'a [OmniMessage],
    records: impl Iterator<Item = Cow<'a, OmniMessage>>,
    render: bool,
) -> Resumed {
    let scan = scan_counters(messages);
    if let Some(closed) = closed_context(messages, &scan) {
        return closed;
    }
    replay_records(scan, records, render)
}

fn scan_counters(messages: &[OmniMessage]) -> Scan {
    let mut session_tokens = TokenCounts::default();
    let mut last_request_total = 0;
    let mut meta = None;
    for m in messages {
        match &m.body {
            Body::Event(EventPayload::TokenUsage { session, request }) => {
                session_tokens = *session;
                last_request_total = request.total;
            }
            Body::SessionMeta(sm) if meta.is_none() => meta = Some(SessionMeta::clone(sm)),
            _ => {}
        }
    }
    Scan {
        session_tokens,
        last_request_total,
        meta,
    }
}

/// A context a completed compaction closed: nothing to replay.
fn closed_context(messages: &[OmniMessage], scan: &Scan) -> Option<Resumed> {
    let Some(Body::Event(EventPayload::CompactionEnd {
        mode,
        status: StopReason::Completed,
        ..
    })) = messages.last().map(|m| &m.body)
    else {
        return None;
    };
    let closed = Resumed {
        context_closed: true,
        session_tokens: scan.session_tokens,
        meta: scan.meta.clone(),
        ..Resumed::default()
    };
    match mode {
        CompactionMode::Discard => Some(closed),
        CompactionMode::Summarize => {
            let s = extract_summary(&last_completed_request_text(messages).unwrap_or_default());
            // An unusable summary voids the closure: replay the old context (legacy shape).
            (!s.is_empty()).then(|| Resumed {
                pending_summary: Some(build::user_text(marker_block("context_summary", &s))),
                ..closed
            })
        }
    }
}

fn replay_records<'a>(
    scan: Scan,
    records: impl Iterator<Item = Cow<'a, OmniMessage>>,
    render: bool,
) -> Resumed {
    let Scan {
        session_tokens,
        last_request_total,
        meta,
    } = scan;
    let mut r = Replay::default();
    let mut render_messages = Vec::new();
    for m in records {
        if m.has_origin() {
            continue;
        }
        match &m.body {
            Body::SessionMeta(_) => {}
            Body::Event(EventPayload::RequestBegin) => {
                if r.in_request {
                    r.drop_turn();
                }
                r.in_request = true;
                r.snapshot = std::mem::take(&mut r.pending);
            }
            Body::Event(EventPayload::RequestEnd { status, .. }) => {
                // A request_end without its request_begin cannot come from the writer; the
                // reference would commit an empty turn and emit placeholders early, so ignore it.
                if r.in_request {
                    if *status == StopReason::Completed {
                        r.commit();
                    } else {
                        r.drop_turn();
                    }
                }
            }
            Body::Event(EventPayload::CompactionBegin { reason, mode, .. }) => {
                r.in_compaction = true;
                r.dangling = Some(DanglingCompaction {
                    reason: *reason,
                    mode: *mode,
                });
            }
            Body::Event(EventPayload::CompactionEnd { .. }) => {
                r.in_compaction = false;
                r.dangling = None;
            }
            Body::Event(EventPayload::Abort { .. }) if render => {
                render_messages.push(m.into_owned())
            }
            Body::Event(_) => {}
            Body::Model(p) if p.is_partial() => {}
            Body::Model(p) => {
                let user = p.role() == Role::User;
                if render {
                    render_messages.push(m.as_ref().clone());
                }
                if user {
                    r.pending.push(m.into_owned());
                } else if r.in_request {
                    r.outputs.push(m.into_owned());
                }
            }
        }
    }
    if r.in_request {
        r.drop_turn();
    }
    let pending = std::mem::take(&mut r.pending);
    let mut carry_over = r.pairing.take_eligible(pending);
    carry_over.extend(r.pairing.placeholders());

    Resumed {
        history: r.history,
        carry_over,
        context_closed: false,
        pending_summary: None,
        session_tokens,
        last_request_total,
        session_turns: r.turns,
        render_messages,
        meta,
        dangling_compaction: r.dangling,
    }
}

/// A resumed session: its state, where it was read from, and a writer continuing that file.
#[derive(Debug)]
pub struct ResumedSession {
    /// The rebuilt state.
    pub resumed: Resumed,
    /// The file resumed from.
    pub located: LocatedTrace,
    /// Appends to `located.path` (same date directory, same index).
    pub writer: Writer,
}

/// Finds the newest file of `session_id` under `location`, reads it tolerantly, resumes it, and
/// returns a writer that continues appending to that same file (§3.6 steps 1, 2, 6, 7).
///
/// A dangling compaction is closed at once with `compaction_end {status: failed}`, queued before
/// anything else can be recorded. Checks that need the project configuration (provider, model,
/// workspace) are the caller's.
pub fn resume_session(
    location: &TraceLocation,
    session_id: &str,
    durability: Durability,
) -> Result<ResumedSession, TraceError> {
    let traces_dir = location.traces_dir();
    let located = find_latest_trace_file(&traces_dir, session_id)?.ok_or_else(|| {
        TraceError::SessionNotFound {
            session_id: session_id.to_owned(),
            traces_dir: traces_dir.clone(),
        }
    })?;
    let messages = read_trace_tolerant(&located.path)?;
    // Continuing a session needs no render copy of the whole conversation.
    let resumed = resume_trace_owned(messages);
    if resumed.meta.is_none() {
        return Err(TraceError::MissingMeta {
            path: located.path.clone(),
        });
    }
    let writer = Writer::open(
        WriterConfig::new(traces_dir, session_id)
            .date_dir(located.date_dir.clone())
            .start_index(located.index)
            .durability(durability),
    )?;
    if let Some(d) = resumed.dangling_compaction {
        writer.record_message(build::compaction_end(
            d.reason,
            d.mode,
            StopReason::Failed,
            Default::default(),
        ));
    }
    Ok(ResumedSession {
        resumed,
        located,
        writer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder() {
        assert_eq!(
            extract_summary("[summary]a[/summary][summary]b[/summary]"),
            "a"
        );
        assert_eq!(
            extract_summary("[summary] [summary] [/summary]<summary>x</summary>"),
            "x"
        );
        assert_eq!(
            extract_summary("<summary>\n\n</summary>tail [/summary]"),
            "tail"
        );
        assert_eq!(
            extract_summary("keep [summary][/summary] this"),
            "keep  this"
        );
        assert_eq!(extract_summary("[summary]unclosed"), "unclosed");
        assert_eq!(extract_summary(""), "");
        // A [summary] block nested in <summary> is stripped of its tags, not lost.
        assert_eq!(
            extract_summary("<summary>[summary]in[/summary]</summary>"),
            "in"
        );
    }

    #[test]
    fn placeholder_shape() {
        let p = placeholder("c1");
        assert_eq!(output_id(&p), Some("c1"));
        assert!(p.to_json().ends_with(
            r#""payload":{"type":"tool_call_output","role":"user","output":"[interrupted: process exited before the tool finished]","tool_call_id":"c1","stop_reason":"aborted"}}"#
        ));
    }
}
