//! Session resume (protocol [§3.5](penguin_omni_protocol::spec#s3.5) *Resume: rebuilding the state*
//! and [§3.6](penguin_omni_protocol::spec#s3.6) *Resuming a session*).

use std::borrow::Cow;

use penguin_omni_protocol::markers::{extract_summary, marker_block};
use penguin_omni_protocol::{
    build, Body, CompactionMode, CompactionReason, EventPayload, ModelPayload, OmniMessage, Role,
    SessionMeta, StopReason, TokenCounts,
};
use rustc_hash::FxHashMap;

use crate::error::TraceError;
use crate::paths::{find_latest_trace_file, LocatedTrace, TraceLocation};
use crate::reader::{read_trace_each, ReadMode};
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
///
/// `M` is how sure the session head is: [`resume_trace`] gives `Option<SessionMeta>` (any
/// records may be resumed, a head or not), [`resume_session`] gives `SessionMeta`, because a
/// session continues only from a trace that has one (it fails with
/// [`TraceError::MissingMeta`] otherwise).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resumed<M = Option<SessionMeta>> {
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
    pub meta: M,
    /// A compaction interrupted by a crash (see [§3.6](penguin_omni_protocol::spec#s3.6) *Resuming
    /// a session* step 7).
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

/// Which committed calls still wait for their output.
#[derive(Debug, Default)]
struct Pairing {
    /// Every committed call, `true` while it waits for its output.
    calls: FxHashMap<String, bool>,
    /// The calls committed since placeholders were last made, in commit order, so placeholders
    /// come out in the order the reference's insertion-ordered `Set` iterates. Making them
    /// answers every waiting call, so older calls never need looking at again and a long
    /// session's resume stays linear.
    since_placeholders: Vec<String>,
}

impl Pairing {
    fn commit_call(&mut self, id: &str) {
        if !self.calls.contains_key(id) {
            self.calls.insert(id.to_owned(), true);
            self.since_placeholders.push(id.to_owned());
        }
    }

    /// Keeps non-outputs, and outputs of committed calls not answered yet (the first one only).
    /// Marks the kept outputs answered.
    fn take_eligible(&mut self, msgs: Vec<OmniMessage>) -> Vec<OmniMessage> {
        let mut out = Vec::with_capacity(msgs.len());
        for m in msgs {
            let keep = match output_id(&m) {
                None => true,
                Some(id) => self
                    .calls
                    .get_mut(id)
                    .is_some_and(|waiting| std::mem::replace(waiting, false)),
            };
            if keep {
                out.push(m);
            }
        }
        out
    }

    /// Placeholders for every committed call still unanswered, which are then answered.
    fn placeholders(&mut self) -> Vec<OmniMessage> {
        let mut out = Vec::new();
        for id in std::mem::take(&mut self.since_placeholders) {
            if let Some(waiting) = self.calls.get_mut(&id) {
                if std::mem::replace(waiting, false) {
                    out.push(placeholder(&id));
                }
            }
        }
        out
    }
}

#[derive(Debug, Default)]
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

/// The assistant text of the last completed request, followed one record at a time: a
/// summarize compaction that closes the file names its summary there.
#[derive(Debug, Default)]
struct LastRequestText {
    current: Option<String>,
    last: Option<String>,
}

impl LastRequestText {
    fn see(&mut self, body: &Body) {
        match body {
            Body::Event(EventPayload::RequestBegin) => self.current = Some(String::new()),
            Body::Event(EventPayload::RequestEnd { status, .. }) => {
                if let Some(text) = self.current.take() {
                    if *status == StopReason::Completed {
                        self.last = Some(text);
                    }
                }
            }
            Body::Model(ModelPayload::Text(t)) if t.role == Role::Assistant => {
                if let Some(cur) = self.current.as_mut() {
                    cur.push_str(&t.text);
                }
            }
            _ => {}
        }
    }
}

/// Rebuilds the engine state from the records of the highest-index trace file (`resumeTrace`).
///
/// Guarantees structural validity: every committed tool_call is answered exactly once, in
/// `history` or in `carry_over`, after the call. Messages carrying an origin are ignored.
pub fn resume_trace(messages: &[OmniMessage]) -> Resumed {
    let mut r = Resumer::new(true);
    for m in messages {
        r.push_record(Cow::Borrowed(m));
    }
    r.finish()
}

/// [`resume_trace`] fed one record at a time, so a trace can be resumed as it is read: only
/// the records the context keeps are held, never the whole file's.
///
/// ```
/// use penguin_omni_protocol::{build, StopReason};
/// use penguin_trace_store::Resumer;
///
/// let mut r = Resumer::new(false);
/// r.push(build::user_text("hi"));
/// r.push(build::request_begin());
/// r.push(build::assistant_text("hello", StopReason::Completed));
/// r.push(build::request_end(StopReason::Completed, Default::default()));
/// let resumed = r.finish();
/// assert_eq!(resumed.history.len(), 2);
/// ```
#[derive(Debug)]
pub struct Resumer {
    render: bool,
    replay: Replay,
    render_messages: Vec<OmniMessage>,
    session_tokens: TokenCounts,
    last_request_total: u64,
    meta: Option<SessionMeta>,
    last_text: LastRequestText,
    /// The mode of the completed compaction the records so far end with.
    closing: Option<CompactionMode>,
}

impl Resumer {
    /// A resume in progress; `render` also keeps the history view ([`Resumed::render_messages`]).
    pub fn new(render: bool) -> Self {
        Resumer {
            render,
            replay: Replay::default(),
            render_messages: Vec::new(),
            session_tokens: TokenCounts::default(),
            last_request_total: 0,
            meta: None,
            last_text: LastRequestText::default(),
            closing: None,
        }
    }

    /// The next record of the file.
    pub fn push(&mut self, m: OmniMessage) {
        self.push_record(Cow::Owned(m));
    }

    fn push_record(&mut self, m: Cow<'_, OmniMessage>) {
        // Counters, the session head and the closing compaction come from every record,
        // origins included, as the reference's scans do.
        self.closing = None;
        match &m.body {
            Body::Event(EventPayload::TokenUsage { session, request }) => {
                self.session_tokens = *session;
                self.last_request_total = request.total;
            }
            // The head, then the session's own later ones: a session that went on on another
            // model names it from there (a subagent's, with an origin, never replaces it).
            Body::SessionMeta(sm) if self.meta.is_none() || !m.has_origin() => {
                self.meta = Some(SessionMeta::clone(sm))
            }
            Body::Event(EventPayload::CompactionEnd {
                mode,
                status: StopReason::Completed,
                ..
            }) => self.closing = Some(*mode),
            _ => {}
        }
        self.last_text.see(&m.body);
        if m.has_origin() {
            return;
        }
        let r = &mut self.replay;
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
            Body::Event(EventPayload::Abort { .. }) if self.render => {
                self.render_messages.push(m.into_owned())
            }
            Body::Event(_) => {}
            Body::Model(p) if p.is_partial() => {}
            Body::Model(p) => {
                let user = p.role() == Role::User;
                if self.render {
                    self.render_messages.push(m.as_ref().clone());
                }
                if user {
                    r.pending.push(m.into_owned());
                } else if r.in_request {
                    r.outputs.push(m.into_owned());
                }
            }
        }
    }

    /// The state the records rebuild.
    pub fn finish(self) -> Resumed {
        let Resumer {
            mut replay,
            render_messages,
            session_tokens,
            last_request_total,
            meta,
            last_text,
            closing,
            ..
        } = self;
        if let Some(mode) = closing {
            let closed = Resumed {
                context_closed: true,
                session_tokens,
                meta: meta.clone(),
                ..Resumed::default()
            };
            match mode {
                CompactionMode::Discard => return closed,
                CompactionMode::Summarize => {
                    let s = extract_summary(&last_text.last.unwrap_or_default());
                    // An unusable summary voids the closure: replay the old context (legacy
                    // shape).
                    if !s.is_empty() {
                        return Resumed {
                            pending_summary: Some(build::user_text(marker_block(
                                "context_summary",
                                &s,
                            ))),
                            ..closed
                        };
                    }
                }
            }
        }
        let r = &mut replay;
        if r.in_request {
            r.drop_turn();
        }
        let pending = std::mem::take(&mut r.pending);
        let mut carry_over = r.pairing.take_eligible(pending);
        carry_over.extend(r.pairing.placeholders());

        Resumed {
            history: std::mem::take(&mut r.history),
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
}

impl Resumed {
    /// The same state with its session head required: `None` when the records held no
    /// session_meta.
    pub fn with_meta(self) -> Option<Resumed<SessionMeta>> {
        let Resumed {
            history,
            carry_over,
            context_closed,
            pending_summary,
            session_tokens,
            last_request_total,
            session_turns,
            render_messages,
            meta,
            dangling_compaction,
        } = self;
        Some(Resumed {
            history,
            carry_over,
            context_closed,
            pending_summary,
            session_tokens,
            last_request_total,
            session_turns,
            render_messages,
            meta: meta?,
            dangling_compaction,
        })
    }
}

/// A resumed session: its state, where it was read from, and a writer continuing that file.
#[derive(Debug)]
pub struct ResumedSession {
    /// The rebuilt state, with the session's head (`resumed.meta`) guaranteed.
    pub resumed: Resumed<SessionMeta>,
    /// The file resumed from.
    pub located: LocatedTrace,
    /// Appends to `located.path` (same date directory, same index).
    pub writer: Writer,
}

/// Finds the newest file of `session_id` under `location` (the one the location knows, see
/// [`TraceLocation::with_known_trace`], else by reading every date directory), reads it
/// tolerantly, resumes it, and returns a writer that continues appending to that same file
/// ([§3.6](penguin_omni_protocol::spec#s3.6) *Resuming a session* steps 1, 2, 6, 7).
///
/// A dangling compaction is closed at once with `compaction_end {status: failed}`, queued before
/// anything else can be recorded. Checks that need the project configuration (provider, model,
/// workspace) are the caller's.
///
/// A trace without a session_meta fails with [`TraceError::MissingMeta`]: the session's
/// invariants (model, system prompt, workspace) are unknown. The engine never writes that
/// record; whoever creates the session does, first, with [`Writer::record_session_meta`] (the
/// example on [`Writer`] shows both outcomes). To continue the session with the engine, give
/// `resumed.history` to the model (`Llm::set_history`) and the rest to the engine
/// (`InitialState::from(resumed)`, feature `engine`, whose `engine` module has the whole cycle).
pub fn resume_session(
    location: &TraceLocation,
    session_id: &str,
    durability: Durability,
) -> Result<ResumedSession, TraceError> {
    let traces_dir = location.traces_dir();
    let known = location
        .known_trace(session_id)
        .filter(|k| std::fs::metadata(&k.path).is_ok_and(|m| m.is_file()))
        .cloned();
    let located = match known {
        Some(k) => k,
        None => find_latest_trace_file(&traces_dir, session_id)?.ok_or_else(|| {
            TraceError::SessionNotFound {
                session_id: session_id.to_owned(),
                traces_dir: traces_dir.clone(),
            }
        })?,
    };
    // Records are resumed as they are read, and continuing a session needs no render copy.
    let mut resumer = Resumer::new(false);
    let report = read_trace_each(&located.path, ReadMode::Tolerant, |_, m| resumer.push(m))?;
    report.warn_skipped(&located.path);
    let resumed = resumer
        .finish()
        .with_meta()
        .ok_or_else(|| TraceError::MissingMeta {
            path: located.path.clone(),
        })?;
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
