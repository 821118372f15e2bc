//! `StreamValidator`: checks a message stream against the seed's guarantees.
//!
//! The validator is a pure state machine: feed it the messages of one `run()` output stream (or
//! of several consecutive runs, or of a Trace) one at a time with [`StreamValidator::push`], then
//! call [`StreamValidator::finish`] for the end-of-stream checks. Every broken guarantee comes
//! back as a [`Violation`] naming the 0-based message index and a stable [`Rule`].
//! [`validate_jsonl`] does the same for a JSON-lines file and adds line numbers. Section numbers
//! (§2.5, ...) refer to the reference-behaviour spec.
//!
//! ```
//! use penguin_omni_protocol::validator::{Rule, StreamValidator};
//! use penguin_omni_protocol::{build, ApprovalDecision, StopReason, TokenCounts};
//!
//! let usage = TokenCounts::new(0, 10, 5);
//! let stream = [
//!     build::request_begin(),
//!     build::tool_call("read_file", r#"{"path":"a"}"#, "call_a", StopReason::Completed, None),
//!     // Output before the approval: a broken approval position.
//!     build::tool_call_output("alpha", "call_a", StopReason::Completed),
//!     build::approval_decision(ApprovalDecision::Allow, "call_a"),
//!     build::token_usage(usage, usage),
//!     build::request_end(StopReason::Completed, Default::default()),
//! ];
//! let mut validator = StreamValidator::new();
//! let mut found = Vec::new();
//! for msg in &stream {
//!     found.extend(validator.push(msg));
//! }
//! found.extend(validator.finish());
//! assert_eq!(found[0].rule, Rule::ApprovalPosition);
//! assert_eq!(found[0].index, Some(2));
//! assert_eq!(
//!     found[0].to_string(),
//!     "message 2: approval_position: tool_call_output for call_a before its approval_decision"
//! );
//! ```
//!
//! # Producers and "right after"
//!
//! A turn has several concurrent producers that push into one merge queue (§2.2): the *driver*
//! (the LLM stream together with `request_begin`/`request_end`, approvals and the synthetic
//! denial outputs) and one producer per dispatched tool call (its `partial_tool_call_output`s and
//! `tool_call_output`). Only the order *within* a producer is preserved; different producers
//! interleave by arrival time. Child sessions forwarded with an `origin` are separate streams
//! altogether: every rule applies per origin chain, and the producers of one origin chain never
//! constrain another.
//!
//! So every "X comes right after Y" guarantee is checked as "the next message **of the same
//! producer** after Y is X". That is not only a convenience: the reference driver pushes a
//! message and then awaits its Trace write before pushing the next one, so a tool that finishes
//! during that write can land in between (a stop and its complete, a `token_usage` and its
//! `request_end`, a denial and its synthetic output). [`ValidatorConfig::strict_adjacency`]
//! tightens all three to "the next message of the same origin" for producers that push these
//! pairs in one tick.
//!
//! # Rules
//!
//! | rule | guarantee |
//! |---|---|
//! | `parse` | a line of [`validate_jsonl`] input is a well-formed OmniMessage |
//! | `segment_order` | each segment, keyed by (origin, partial type, tool_call_id), goes `start → delta* → stop`; a complete never arrives while its segment is still open |
//! | `complete_after_stop` | after a `stop`, the producer's next message is the matching complete message |
//! | `delta_concat` | the concatenated fragments equal the complete's content (and a tool call's name); a `tool_call`'s arguments may differ in bytes when both sides parse as equal JSON values (§1.8) |
//! | `segment_open` | no segment is open at `request_end` (LLM segments), at the next `request_begin`, at `abort` or at the end of the stream |
//! | `approval_position` | an `approval_decision` follows its committed `tool_call`, exactly once, and precedes every output of that call |
//! | `denial_output` | after `deny`/`forbidden`, the driver's next message is the synthetic `tool_call_output` (`stop_reason: aborted`, "Tool call denied by user." / "Tool call denied by policy."), and nothing is dispatched for the call |
//! | `pairing_missing_output` | every committed `tool_call` has a complete `tool_call_output` before the next `request_begin` of its origin, before an `abort` (unless the abort pre-empted its approval), or by the end of the stream |
//! | `pairing_duplicate_output` | at most one complete `tool_call_output` per call, and no output fragment after it |
//! | `pairing_unknown_call` | outputs answer a committed `tool_call` of the same origin (never an uncommitted synthetic closure) |
//! | `usage_tail` | `token_usage` is the LLM stream's last message: one per request, no LLM-stream message after it, none outside a request (except inside a compaction) |
//! | `request_end_follows_usage` | the driver's next message after `token_usage` is `request_end` |
//! | `request_end_usage` | commit criterion: a `completed` `request_end` has a `token_usage` in its request, any other status has none |
//! | `request_pairing` | `request_begin`/`request_end` alternate per origin: no nested begin, no end without begin, no request left open at `abort` or at the end |
//! | `abort_last` | `abort` is the last message of its run: the next message of that origin must start a new run |
//!
//! # Tolerated (the seed's non-guarantees and the reference's documented exceptions)
//!
//! - Tool outputs in completion order, fragments of different tool calls and of different
//!   origins interleaved, tool outputs between `request_end` and the next `request_begin`.
//! - Later LLM-stream messages between an `approval_decision` and that tool's first output.
//! - A complete message with no segment before it (tools and models may emit complete-only
//!   messages; denial outputs always are).
//! - Inside `compaction_begin … compaction_end` the reference yields the summary's
//!   `partial_text` fragments but not its complete text, and yields the compaction request's
//!   `token_usage` without its (Trace-only) `request_begin`/`request_end`: there, a text stop
//!   needs no complete and `token_usage` needs no request.
//! - The Trace of a compaction request holds its `tool_call`s (never approved nor dispatched)
//!   and the engine's repair `tool_call_output`s for them: calls committed inside a compaction
//!   need no approval and are owed no output.
//! - A committed `tool_call` that an interrupt caught before its approval (no
//!   `approval_decision` is emitted then, §2.5): nothing was dispatched, and the engine answers
//!   it in the *model context* through carry-over (Case A placeholders), which is never
//!   streamed. A call that did get a decision is still owed its output before the `abort`,
//!   because the turn, and so the abort, waits for every dispatched tool to settle. Missing
//!   outputs are flagged at the next `request_begin` of the same origin (a request starts only
//!   once every tool of the previous one has settled), at the `abort`, or at
//!   [`StreamValidator::finish`].
//! - After an `abort`, a new run may emit run-opening messages before its `request_begin`:
//!   user-role input or notices, `session_meta`, MCP/tool-list events, a compaction, a
//!   `goal_finished`, or another `abort` (a run whose signal fired before it started).
//!
//! Messages that do not match a rule's shape are otherwise accepted: the validator checks
//! ordering guarantees, not payload contents.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::BufRead;

use crate::message::*;

/// The stable name of a guarantee a [`Violation`] breaks. See the module docs for each rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// A line could not be read or parsed as an OmniMessage.
    Parse,
    /// A segment's fragments are out of `start → delta* → stop` order.
    SegmentOrder,
    /// A stop fragment is not followed by its complete message (in the same producer).
    CompleteAfterStop,
    /// The concatenated fragments differ from the complete message.
    DeltaConcat,
    /// A segment is still open where every segment must be closed.
    SegmentOpen,
    /// An approval_decision is missing, duplicated or in the wrong place.
    ApprovalPosition,
    /// A denial is not followed by its synthetic output, or something was dispatched anyway.
    DenialOutput,
    /// A committed tool_call never got its complete tool_call_output.
    PairingMissingOutput,
    /// A tool_call got more than one complete output, or fragments after it.
    PairingDuplicateOutput,
    /// A tool output answers no committed tool_call.
    PairingUnknownCall,
    /// token_usage is not the last message of the LLM stream.
    UsageTail,
    /// The driver's next message after token_usage is not request_end.
    RequestEndFollowsUsage,
    /// request_end's status disagrees with the presence of a token_usage.
    RequestEndUsage,
    /// request_begin/request_end do not alternate.
    RequestPairing,
    /// A message of a finished run follows its abort.
    AbortLast,
}

impl Rule {
    /// Every rule, in declaration order.
    pub const ALL: &'static [Rule] = &[
        Rule::Parse,
        Rule::SegmentOrder,
        Rule::CompleteAfterStop,
        Rule::DeltaConcat,
        Rule::SegmentOpen,
        Rule::ApprovalPosition,
        Rule::DenialOutput,
        Rule::PairingMissingOutput,
        Rule::PairingDuplicateOutput,
        Rule::PairingUnknownCall,
        Rule::UsageTail,
        Rule::RequestEndFollowsUsage,
        Rule::RequestEndUsage,
        Rule::RequestPairing,
        Rule::AbortLast,
    ];

    /// The stable snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Parse => "parse",
            Rule::SegmentOrder => "segment_order",
            Rule::CompleteAfterStop => "complete_after_stop",
            Rule::DeltaConcat => "delta_concat",
            Rule::SegmentOpen => "segment_open",
            Rule::ApprovalPosition => "approval_position",
            Rule::DenialOutput => "denial_output",
            Rule::PairingMissingOutput => "pairing_missing_output",
            Rule::PairingDuplicateOutput => "pairing_duplicate_output",
            Rule::PairingUnknownCall => "pairing_unknown_call",
            Rule::UsageTail => "usage_tail",
            Rule::RequestEndFollowsUsage => "request_end_follows_usage",
            Rule::RequestEndUsage => "request_end_usage",
            Rule::RequestPairing => "request_pairing",
            Rule::AbortLast => "abort_last",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One broken guarantee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// 0-based position of the message where the violation was detected, among the messages fed
    /// to the validator. `None` for parse errors and for end-of-stream checks.
    pub index: Option<usize>,
    /// 1-based input line, when the stream came from [`validate_jsonl`].
    pub line: Option<usize>,
    /// Which guarantee.
    pub rule: Rule,
    /// What happened, naming the messages involved.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.index, self.line) {
            (Some(i), Some(l)) => write!(f, "message {i} (line {l})")?,
            (Some(i), None) => write!(f, "message {i}")?,
            (None, Some(l)) => write!(f, "line {l}")?,
            (None, None) => f.write_str("end of stream")?,
        }
        write!(f, ": {}: {}", self.rule, self.detail)
    }
}

/// Knobs of a [`StreamValidator`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValidatorConfig {
    /// When true, "right after" means the next message of the same origin, not of the same
    /// producer: a stop's complete, a `token_usage`'s `request_end` and a denial's synthetic
    /// output must be literally adjacent within their origin. Off by default, because the
    /// reference awaits a Trace write between such pushes and another producer can land there.
    pub strict_adjacency: bool,
}

/// The result of [`validate_jsonl`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages that parsed and were validated.
    pub messages: usize,
    /// Non-blank lines read.
    pub lines: usize,
    /// Every violation, in detection order (end-of-stream checks last).
    pub violations: Vec<Violation>,
}

impl Report {
    /// True when no violation was found.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violations of one rule.
    pub fn of(&self, rule: Rule) -> impl Iterator<Item = &Violation> + '_ {
        self.violations.iter().filter(move |v| v.rule == rule)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ok() {
            return write!(f, "ok: {} messages, no violations", self.messages);
        }
        write!(
            f,
            "{} violation(s) in {} messages:",
            self.violations.len(),
            self.messages
        )?;
        for v in &self.violations {
            write!(f, "\n  {v}")?;
        }
        Ok(())
    }
}

/// Reads JSON lines, parses each with [`OmniMessage::from_json`] and validates the stream.
///
/// Blank lines are skipped. A line that does not parse (or cannot be read) is reported as a
/// [`Rule::Parse`] violation with its line number and is not fed to the validator, so message
/// indices count parsed messages only.
pub fn validate_jsonl(reader: impl BufRead) -> Report {
    validate_jsonl_with(reader, ValidatorConfig::default())
}

/// [`validate_jsonl`] with an explicit configuration.
pub fn validate_jsonl_with(reader: impl BufRead, config: ValidatorConfig) -> Report {
    let mut validator = StreamValidator::with_config(config);
    let mut report = Report::default();
    for (n, line) in reader.lines().enumerate() {
        let lineno = n + 1;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                report.lines += 1;
                report.violations.push(Violation {
                    index: None,
                    line: Some(lineno),
                    rule: Rule::Parse,
                    detail: format!("cannot read line: {e}"),
                });
                // A reader that failed once (bad UTF-8 aside) may fail forever; stop here.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    continue;
                }
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        report.lines += 1;
        match OmniMessage::from_json(&line) {
            Ok(msg) => {
                report.messages += 1;
                report
                    .violations
                    .extend(validator.push(&msg).into_iter().map(|mut v| {
                        v.line = Some(lineno);
                        v
                    }));
            }
            Err(e) => report.violations.push(Violation {
                index: None,
                line: Some(lineno),
                rule: Rule::Parse,
                detail: e.to_string(),
            }),
        }
    }
    report.violations.extend(validator.finish());
    report
}

/// Checks a stream message by message against the seed's guarantees (see the module docs).
#[derive(Debug, Default)]
pub struct StreamValidator {
    config: ValidatorConfig,
    seen: usize,
    origins: BTreeMap<Vec<String>, OriginState>,
}

impl StreamValidator {
    /// A validator with the default (per-producer) configuration.
    pub fn new() -> StreamValidator {
        StreamValidator::default()
    }

    /// A validator with an explicit configuration.
    pub fn with_config(config: ValidatorConfig) -> StreamValidator {
        StreamValidator {
            config,
            ..StreamValidator::default()
        }
    }

    /// How many messages have been pushed; the next message gets this index.
    pub fn messages_seen(&self) -> usize {
        self.seen
    }

    /// Feeds the next message; returns the violations it reveals (all with this message's index).
    pub fn push(&mut self, msg: &OmniMessage) -> Vec<Violation> {
        let mut cx = Cx {
            index: self.seen,
            strict: self.config.strict_adjacency,
            out: Vec::new(),
        };
        self.seen += 1;
        let key = msg.origin.clone().unwrap_or_default();
        self.origins.entry(key).or_default().push(msg, &mut cx);
        cx.out
    }

    /// Ends the stream: reports open requests, open segments, unmet expectations and committed
    /// calls without output.
    pub fn finish(self) -> Vec<Violation> {
        let mut out = Vec::new();
        for (origin, state) in self.origins {
            state.finish(&origin, &mut out);
        }
        out
    }

    /// Validates a whole stream: pushes every message, then finishes.
    pub fn validate<'a>(messages: impl IntoIterator<Item = &'a OmniMessage>) -> Vec<Violation> {
        let mut v = StreamValidator::new();
        let mut out: Vec<Violation> = messages.into_iter().flat_map(|m| v.push(m)).collect();
        out.extend(v.finish());
        out
    }
}

const DENIED_BY_USER: &str = "Tool call denied by user.";
const DENIED_BY_POLICY: &str = "Tool call denied by policy.";

/// Who pushed a message into the merge queue (within one origin).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Producer {
    /// The turn driver: LLM stream, request events, approvals, synthetic denial outputs.
    Driver,
    /// One dispatched tool call's execution.
    Tool(String),
}

#[derive(Debug)]
struct OpenSegment {
    partial_type: &'static str,
    tool_call_id: String,
    producer: Producer,
    start: usize,
    name: String,
    content: String,
}

#[derive(Debug)]
enum Expect {
    Complete {
        producer: Producer,
        partial_type: &'static str,
        complete_type: &'static str,
        tool_call_id: String,
        name: String,
        content: String,
        stop_at: usize,
    },
    DenialOutput {
        tool_call_id: String,
        decision: ApprovalDecision,
        at: usize,
    },
    RequestEnd {
        usage_at: usize,
    },
}

impl Expect {
    fn producer(&self) -> &Producer {
        match self {
            Expect::Complete { producer, .. } => producer,
            Expect::DenialOutput { .. } | Expect::RequestEnd { .. } => &Producer::Driver,
        }
    }

    /// The rule and detail when `got` arrives instead of what was expected.
    fn unmet(&self, got: &str) -> (Rule, String) {
        match self {
            Expect::Complete {
                partial_type,
                complete_type,
                tool_call_id,
                stop_at,
                ..
            } => (
                Rule::CompleteAfterStop,
                format!(
                    "{partial_type}{} stop at message {stop_at} is not followed by its {complete_type}; {got}",
                    id_suffix(tool_call_id)
                ),
            ),
            Expect::DenialOutput {
                tool_call_id,
                decision,
                at,
            } => (
                Rule::DenialOutput,
                format!(
                    "{decision} for {tool_call_id} at message {at} is not followed by its synthetic tool_call_output; {got}"
                ),
            ),
            Expect::RequestEnd { usage_at } => (
                Rule::RequestEndFollowsUsage,
                format!("token_usage at message {usage_at} is not followed by request_end; {got}"),
            ),
        }
    }
}

#[derive(Debug)]
struct Call {
    at: usize,
    approval: Option<(ApprovalDecision, usize)>,
    first_output: Option<usize>,
    complete_output: Option<usize>,
    /// Needs no approval: made by a compaction request, whose calls are never dispatched.
    exempt: bool,
    unapproved_flagged: bool,
    /// No longer owed an output: flagged as missing, excused by an abort, or exempt.
    settled: bool,
}

impl Call {
    fn denied(&self) -> bool {
        matches!(self.approval, Some((d, _)) if d != ApprovalDecision::Allow)
    }
}

#[derive(Debug)]
struct Request {
    begin: usize,
    usage: Option<usize>,
}

#[derive(Debug, Default)]
struct OriginState {
    segments: Vec<OpenSegment>,
    expects: Vec<Expect>,
    request: Option<Request>,
    calls: BTreeMap<String, Call>,
    uncommitted: HashSet<String>,
    compaction: Option<usize>,
    aborted_at: Option<usize>,
}

struct Cx {
    index: usize,
    strict: bool,
    out: Vec<Violation>,
}

impl Cx {
    fn flag(&mut self, rule: Rule, detail: String) {
        self.out.push(Violation {
            index: Some(self.index),
            line: None,
            rule,
            detail,
        });
    }
}

fn id_suffix(id: &str) -> String {
    if id.is_empty() {
        String::new()
    } else {
        format!(" {id}")
    }
}

/// "partial_text delta", "tool_call_output for call_a", ... for details.
fn describe(msg: &OmniMessage) -> String {
    let mut s = msg.payload_type().to_owned();
    if let Some((event, _)) = msg.model().and_then(ModelPayload::partial_parts) {
        s.push(' ');
        s.push_str(event.as_str());
    }
    if let Some(id) = msg.tool_call_id() {
        s.push_str(" for ");
        s.push_str(id);
    }
    s
}

/// Messages of the LLM stream proper (what `token_usage` must be the last of).
fn is_llm_stream(p: &ModelPayload) -> bool {
    match p {
        ModelPayload::PartialText(_)
        | ModelPayload::PartialThinking(_)
        | ModelPayload::PartialToolCall(_)
        | ModelPayload::Thinking(_)
        | ModelPayload::InlineThinking(_)
        | ModelPayload::ToolCall(_) => true,
        ModelPayload::PartialToolCallOutput(_) | ModelPayload::ToolCallOutput(_) => false,
        other => other.role() == Role::Assistant,
    }
}

/// Messages a new run may emit before its first `request_begin`.
fn opens_run(msg: &OmniMessage) -> bool {
    match &msg.body {
        Body::SessionMeta(_) => true,
        Body::Model(p) => !p.is_partial() && p.role() == Role::User && p.tool_call_id().is_none(),
        Body::Event(e) => matches!(
            e,
            EventPayload::RequestBegin
                | EventPayload::Abort { .. }
                | EventPayload::CompactionBegin { .. }
                | EventPayload::GoalFinished { .. }
                | EventPayload::Subagent { .. }
                | EventPayload::ToolListReady { .. }
                | EventPayload::McpConnectBegin { .. }
                | EventPayload::McpConnectEnd { .. }
        ),
    }
}

fn contents_match(complete_type: &str, streamed: &str, complete: &str) -> bool {
    if streamed == complete {
        return true;
    }
    // §1.8: a complete tool_call may carry JSON.stringify of the provider's parsed arguments.
    complete_type == "tool_call"
        && matches!(
            (
                serde_json::from_str::<serde_json::Value>(streamed),
                serde_json::from_str::<serde_json::Value>(complete),
            ),
            (Ok(a), Ok(b)) if a == b
        )
}

impl OriginState {
    fn producer_of(&self, msg: &OmniMessage) -> Producer {
        match msg.model() {
            Some(
                p @ (ModelPayload::ToolCallOutput(_) | ModelPayload::PartialToolCallOutput(_)),
            ) => {
                let id = p.tool_call_id().unwrap_or_default();
                // The synthetic denial output is pushed by the driver, not by a tool.
                if self.calls.get(id).is_some_and(Call::denied) {
                    Producer::Driver
                } else {
                    Producer::Tool(id.to_owned())
                }
            }
            _ => Producer::Driver,
        }
    }

    fn push(&mut self, msg: &OmniMessage, cx: &mut Cx) {
        let producer = self.producer_of(msg);

        if let Some(abort_at) = self.aborted_at {
            if opens_run(msg) {
                if matches!(
                    msg.event(),
                    Some(EventPayload::RequestBegin | EventPayload::CompactionBegin { .. })
                ) {
                    self.aborted_at = None;
                }
            } else {
                cx.flag(
                    Rule::AbortLast,
                    format!(
                        "{} after the abort at message {abort_at}; the next message of this origin must start a new run",
                        describe(msg)
                    ),
                );
            }
        }

        self.check_expectations(msg, &producer, cx);

        match &msg.body {
            Body::SessionMeta(_) => {}
            Body::Model(p) => {
                if let Some((event, content)) = p.partial_parts() {
                    self.on_partial(msg, p, event, content, producer, cx);
                } else {
                    self.on_complete(msg, p, cx);
                }
            }
            Body::Event(e) => self.on_event(e, cx),
        }
    }

    fn check_expectations(&mut self, msg: &OmniMessage, producer: &Producer, cx: &mut Cx) {
        let (due, keep): (Vec<Expect>, Vec<Expect>) = std::mem::take(&mut self.expects)
            .into_iter()
            .partition(|e| cx.strict || e.producer() == producer);
        self.expects = keep;
        for expect in due {
            match (&expect, &msg.body) {
                (
                    Expect::Complete {
                        complete_type,
                        tool_call_id,
                        name,
                        content,
                        stop_at,
                        ..
                    },
                    Body::Model(p),
                ) if p.type_name() == *complete_type
                    && p.tool_call_id().unwrap_or_default() == tool_call_id =>
                {
                    let got = p.content().unwrap_or_default();
                    if !contents_match(complete_type, content, got) {
                        cx.flag(
                            Rule::DeltaConcat,
                            format!(
                                "{complete_type}{} content {got:?} differs from its concatenated fragments {content:?} (stop at message {stop_at})",
                                id_suffix(tool_call_id)
                            ),
                        );
                    }
                    if let ModelPayload::ToolCall(tc) = p {
                        if !name.is_empty() && tc.name != *name {
                            cx.flag(
                                Rule::DeltaConcat,
                                format!(
                                    "tool_call {tool_call_id} is named {:?} but its partial start named {name:?}",
                                    tc.name
                                ),
                            );
                        }
                    }
                }
                (
                    Expect::DenialOutput {
                        tool_call_id,
                        decision,
                        ..
                    },
                    Body::Model(ModelPayload::ToolCallOutput(out)),
                ) if out.tool_call_id == *tool_call_id => {
                    let want = if *decision == ApprovalDecision::Forbidden {
                        DENIED_BY_POLICY
                    } else {
                        DENIED_BY_USER
                    };
                    if out.output != want || out.stop_reason != Some(StopReason::Aborted) {
                        cx.flag(
                            Rule::DenialOutput,
                            format!(
                                "synthetic output for {decision} {tool_call_id} is {:?} with stop_reason {}, expected {want:?} with stop_reason aborted",
                                out.output,
                                out.stop_reason.map_or("(absent)", StopReason::as_str)
                            ),
                        );
                    }
                }
                (Expect::RequestEnd { .. }, Body::Event(EventPayload::RequestEnd { .. })) => {}
                _ => {
                    let (rule, detail) = expect.unmet(&format!("got {}", describe(msg)));
                    cx.flag(rule, detail);
                }
            }
        }
    }

    fn on_partial(
        &mut self,
        msg: &OmniMessage,
        p: &ModelPayload,
        event: StreamEventType,
        content: &str,
        producer: Producer,
        cx: &mut Cx,
    ) {
        let partial_type = p.type_name();
        let id = p.tool_call_id().unwrap_or_default();
        if is_llm_stream(p) {
            self.check_usage_tail(msg, cx);
        }
        if let ModelPayload::PartialToolCallOutput(_) = p {
            self.check_output(msg, id, false, cx);
        }
        let pos = self
            .segments
            .iter()
            .position(|s| s.partial_type == partial_type && s.tool_call_id == id);
        let name = match p {
            ModelPayload::PartialToolCall(tc) => tc.name.clone(),
            _ => String::new(),
        };
        let idx = match (event, pos) {
            (StreamEventType::Start, Some(i)) => {
                cx.flag(
                    Rule::SegmentOrder,
                    format!(
                        "{partial_type}{} start while the segment started at message {} is still open",
                        id_suffix(id),
                        self.segments[i].start
                    ),
                );
                self.segments.remove(i);
                None
            }
            (StreamEventType::Start, None) => None,
            (_, Some(i)) => Some(i),
            (_, None) => {
                cx.flag(
                    Rule::SegmentOrder,
                    format!(
                        "{partial_type}{} {event} with no open segment (missing start)",
                        id_suffix(id)
                    ),
                );
                None
            }
        };
        let idx = idx.unwrap_or_else(|| {
            self.segments.push(OpenSegment {
                partial_type,
                tool_call_id: id.to_owned(),
                producer,
                start: cx.index,
                name: String::new(),
                content: String::new(),
            });
            self.segments.len() - 1
        });
        let seg = &mut self.segments[idx];
        seg.content.push_str(content);
        if !name.is_empty() {
            seg.name = name;
        }
        if event == StreamEventType::Stop {
            let seg = self.segments.remove(idx);
            // Compaction yields the summary's partial_text but never its complete text.
            if self.compaction.is_some() && partial_type == "partial_text" {
                return;
            }
            self.expects.push(Expect::Complete {
                producer: seg.producer,
                partial_type,
                complete_type: p.complete_type_of_partial().unwrap_or_default(),
                tool_call_id: seg.tool_call_id,
                name: seg.name,
                content: seg.content,
                stop_at: cx.index,
            });
        }
    }

    fn on_complete(&mut self, msg: &OmniMessage, p: &ModelPayload, cx: &mut Cx) {
        let id = p.tool_call_id().unwrap_or_default();
        if is_llm_stream(p) {
            self.check_usage_tail(msg, cx);
        }
        let partial_type = match p {
            ModelPayload::Text(t) if t.role == Role::Assistant => Some("partial_text"),
            ModelPayload::Thinking(_) => Some("partial_thinking"),
            ModelPayload::ToolCall(_) => Some("partial_tool_call"),
            ModelPayload::ToolCallOutput(_) => Some("partial_tool_call_output"),
            _ => None,
        };
        if let Some(pt) = partial_type {
            if let Some(i) = self
                .segments
                .iter()
                .position(|s| s.partial_type == pt && s.tool_call_id == id)
            {
                let seg = self.segments.remove(i);
                cx.flag(
                    Rule::SegmentOrder,
                    format!(
                        "{} arrived while its {pt} segment (started at message {}) is still open (missing stop)",
                        describe(msg),
                        seg.start
                    ),
                );
            }
        }
        match p {
            ModelPayload::ToolCall(tc) => {
                if matches!(tc.stop_reason, None | Some(StopReason::Completed)) {
                    self.uncommitted.remove(id);
                    // A compaction request's calls (Trace only) are never approved or
                    // dispatched; the engine writes a repair output for each instead.
                    let compaction = self.compaction.is_some();
                    let earlier = self.calls.insert(
                        id.to_owned(),
                        Call {
                            at: cx.index,
                            approval: None,
                            first_output: None,
                            complete_output: None,
                            exempt: compaction,
                            unapproved_flagged: false,
                            settled: compaction,
                        },
                    );
                    if let Some(c) = earlier.filter(|c| !c.settled && c.complete_output.is_none()) {
                        cx.flag(
                            Rule::PairingMissingOutput,
                            format!(
                                "tool_call {id} (message {}) is committed again before it got a tool_call_output",
                                c.at
                            ),
                        );
                    }
                } else {
                    self.uncommitted.insert(id.to_owned());
                }
            }
            ModelPayload::ToolCallOutput(_) => self.check_output(msg, id, true, cx),
            _ => {}
        }
    }

    fn check_usage_tail(&self, msg: &OmniMessage, cx: &mut Cx) {
        if let Some(usage_at) = self.request.as_ref().and_then(|r| r.usage) {
            cx.flag(
                Rule::UsageTail,
                format!(
                    "{} after the token_usage at message {usage_at}, which must be the LLM stream's last message",
                    describe(msg)
                ),
            );
        }
    }

    fn check_output(&mut self, msg: &OmniMessage, id: &str, complete: bool, cx: &mut Cx) {
        let what = describe(msg);
        let Some(call) = self.calls.get_mut(id) else {
            let why = if self.uncommitted.contains(id) {
                "whose tool_call was not committed (a synthetic closure is never dispatched)"
            } else {
                "which no earlier tool_call of this origin announced"
            };
            cx.flag(Rule::PairingUnknownCall, format!("{what}, {why}"));
            return;
        };
        match call.approval {
            None if !call.exempt && !call.unapproved_flagged => {
                // Flag the first fragment only; the rest of the output adds nothing.
                call.unapproved_flagged = true;
                cx.flag(
                    Rule::ApprovalPosition,
                    format!("{what} before its approval_decision"),
                );
            }
            Some((decision, at)) if decision != ApprovalDecision::Allow && !complete => {
                cx.flag(
                    Rule::DenialOutput,
                    format!(
                        "{what}, but the call was denied ({decision} at message {at}) and nothing may be dispatched for it"
                    ),
                );
            }
            _ => {}
        }
        call.first_output.get_or_insert(cx.index);
        if let Some(first) = call.complete_output {
            let kind = if complete {
                "second complete output"
            } else {
                "output fragment after the complete output"
            };
            cx.flag(
                Rule::PairingDuplicateOutput,
                format!("{kind} for {id} (complete output at message {first})"),
            );
        } else if complete {
            call.complete_output = Some(cx.index);
        }
    }

    fn on_event(&mut self, e: &EventPayload, cx: &mut Cx) {
        match e {
            EventPayload::ApprovalDecision {
                decision,
                tool_call_id,
            } => {
                let Some(call) = self.calls.get_mut(tool_call_id) else {
                    cx.flag(
                        Rule::ApprovalPosition,
                        format!(
                            "approval_decision for {tool_call_id} with no earlier committed tool_call"
                        ),
                    );
                    return;
                };
                if let Some((_, first)) = call.approval {
                    cx.flag(
                        Rule::ApprovalPosition,
                        format!(
                            "second approval_decision for {tool_call_id} (first at message {first})"
                        ),
                    );
                    return;
                }
                if let Some(out) = call.first_output {
                    cx.flag(
                        Rule::ApprovalPosition,
                        format!(
                            "approval_decision for {tool_call_id} after its output at message {out}"
                        ),
                    );
                }
                call.approval = Some((*decision, cx.index));
                if *decision != ApprovalDecision::Allow {
                    self.expects.push(Expect::DenialOutput {
                        tool_call_id: tool_call_id.clone(),
                        decision: *decision,
                        at: cx.index,
                    });
                }
            }
            EventPayload::RequestBegin => self.on_request_begin(cx),
            EventPayload::TokenUsage { .. } => match &mut self.request {
                Some(r) => {
                    if let Some(first) = r.usage {
                        cx.flag(
                            Rule::UsageTail,
                            format!(
                                "second token_usage in the request begun at message {} (first at message {first})",
                                r.begin
                            ),
                        );
                    }
                    r.usage = Some(cx.index);
                    self.expects.push(Expect::RequestEnd { usage_at: cx.index });
                }
                // The compaction request's begin/end are written to the Trace only.
                None if self.compaction.is_some() => {}
                None => cx.flag(
                    Rule::UsageTail,
                    "token_usage outside any request (and outside a compaction)".to_owned(),
                ),
            },
            EventPayload::RequestEnd { status, .. } => self.on_request_end(*status, cx),
            EventPayload::Abort { .. } => self.on_abort(cx),
            EventPayload::CompactionBegin { .. } => self.compaction = Some(cx.index),
            EventPayload::CompactionEnd { .. } => self.compaction = None,
            _ => {}
        }
    }

    /// What must be settled before `what` (a new request_begin, or an abort): no open
    /// request, no open segment, no unmet expectation.
    fn settle_before(&mut self, what: &str, cx: &mut Cx) {
        if let Some(r) = self.request.take() {
            cx.flag(
                Rule::RequestPairing,
                format!(
                    "{what} while the request begun at message {} has no request_end",
                    r.begin
                ),
            );
        }
        self.close_segments(what, |_| true, cx);
        for e in std::mem::take(&mut self.expects) {
            let (rule, detail) = e.unmet(&format!("{what} came first"));
            cx.flag(rule, detail);
        }
    }

    fn on_request_begin(&mut self, cx: &mut Cx) {
        // The next request starts only once every tool of the previous turn has settled.
        self.settle_before("the next request_begin", cx);
        for (id, call) in self.calls.iter_mut() {
            if !call.settled && call.complete_output.is_none() {
                call.settled = true;
                cx.flag(
                    Rule::PairingMissingOutput,
                    format!(
                        "tool_call {id} (message {}) has no tool_call_output before the next request_begin",
                        call.at
                    ),
                );
            }
        }
        self.request = Some(Request {
            begin: cx.index,
            usage: None,
        });
    }

    fn on_request_end(&mut self, status: StopReason, cx: &mut Cx) {
        let Some(r) = self.request.take() else {
            cx.flag(
                Rule::RequestPairing,
                "request_end with no open request".to_owned(),
            );
            return;
        };
        match (status, r.usage) {
            (StopReason::Completed, None) => cx.flag(
                Rule::RequestEndUsage,
                format!(
                    "completed request_end without a token_usage in its request (begun at message {})",
                    r.begin
                ),
            ),
            (s, Some(at)) if s != StopReason::Completed => cx.flag(
                Rule::RequestEndUsage,
                format!(
                    "{s} request_end after a token_usage (message {at}); only completed requests produce one"
                ),
            ),
            _ => {}
        }
        // The LLM closes its segments before its generator returns; tools may still stream.
        self.close_segments("request_end", |s| s.producer == Producer::Driver, cx);
    }

    fn on_abort(&mut self, cx: &mut Cx) {
        self.settle_before("the abort", cx);
        for (id, call) in self.calls.iter_mut() {
            if call.settled || call.complete_output.is_some() {
                continue;
            }
            call.settled = true;
            // A call the abort caught before its approval was never dispatched; carry-over
            // answers it in the model context, never on the stream. A decided call was either
            // answered synthetically or dispatched, and the turn (hence the abort) waits for
            // every dispatched tool to settle.
            if let Some((decision, at)) = call.approval {
                cx.flag(
                    Rule::PairingMissingOutput,
                    format!(
                        "tool_call {id} (message {}, {decision} at message {at}) has no tool_call_output before the abort",
                        call.at
                    ),
                );
            }
        }
        self.compaction = None;
        self.aborted_at = Some(cx.index);
    }

    fn close_segments(&mut self, at: &str, which: impl Fn(&OpenSegment) -> bool, cx: &mut Cx) {
        let (closing, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.segments)
            .into_iter()
            .partition(which);
        self.segments = keep;
        for s in closing {
            cx.flag(
                Rule::SegmentOpen,
                format!(
                    "{}{} started at message {} is still open at {at}",
                    s.partial_type,
                    id_suffix(&s.tool_call_id),
                    s.start
                ),
            );
        }
    }

    fn finish(self, origin: &[String], out: &mut Vec<Violation>) {
        let whose = if origin.is_empty() {
            String::new()
        } else {
            format!(" (origin {})", origin.join("/"))
        };
        let mut flag = |rule: Rule, detail: String| {
            out.push(Violation {
                index: None,
                line: None,
                rule,
                detail: format!("{detail}{whose}"),
            })
        };
        if let Some(r) = &self.request {
            flag(
                Rule::RequestPairing,
                format!("request begun at message {} never ended", r.begin),
            );
        }
        for s in &self.segments {
            flag(
                Rule::SegmentOpen,
                format!(
                    "{}{} started at message {} is still open at the end of the stream",
                    s.partial_type,
                    id_suffix(&s.tool_call_id),
                    s.start
                ),
            );
        }
        for e in &self.expects {
            let (rule, detail) = e.unmet("the stream ended first");
            flag(rule, detail);
        }
        let mut missing: Vec<_> = self
            .calls
            .iter()
            .filter(|(_, c)| !c.settled && c.complete_output.is_none())
            .collect();
        missing.sort_by_key(|(_, c)| c.at);
        for (id, call) in missing {
            flag(
                Rule::PairingMissingOutput,
                format!(
                    "tool_call {id} (message {}) has no tool_call_output by the end of the stream",
                    call.at
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::StreamEventType::*;

    fn usage() -> OmniMessage {
        let c = TokenCounts::new(0, 1, 1);
        build::token_usage(c, c)
    }

    fn end(status: StopReason) -> OmniMessage {
        build::request_end(status, Default::default())
    }

    fn rules(stream: &[OmniMessage]) -> Vec<Rule> {
        StreamValidator::validate(stream)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn rule_names_are_unique_snake_case() {
        let names: HashSet<_> = Rule::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Rule::ALL.len());
        assert!(names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }

    #[test]
    fn tool_output_between_usage_and_request_end_is_per_producer() {
        let stream = [
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            build::approval_decision(ApprovalDecision::Allow, "a"),
            usage(),
            build::tool_call_output("x", "a", StopReason::Completed),
            end(StopReason::Completed),
        ];
        assert_eq!(rules(&stream), vec![]);
        let mut strict = StreamValidator::with_config(ValidatorConfig {
            strict_adjacency: true,
        });
        let found: Vec<Rule> = stream
            .iter()
            .flat_map(|m| strict.push(m))
            .map(|v| v.rule)
            .collect();
        assert_eq!(found, vec![Rule::RequestEndFollowsUsage]);
    }

    #[test]
    fn strict_adjacency_rejects_what_per_producer_tolerates() {
        let stream = [
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            build::approval_decision(ApprovalDecision::Allow, "a"),
            build::tool_call("t", "{}", "b", StopReason::Completed, None),
            build::approval_decision(ApprovalDecision::Deny, "b"),
            // Tool a lands between the denial and its synthetic output ...
            build::partial_tool_call_output(Start, "", "a", StopReason::Completed),
            build::tool_call_output(DENIED_BY_USER, "b", StopReason::Aborted),
            build::partial_text(Start, "", StopReason::Completed),
            build::partial_text(Stop, "ok", StopReason::Completed),
            // ... and between a text stop and its complete.
            build::partial_tool_call_output(Stop, "x", "a", StopReason::Completed),
            build::assistant_text("ok", StopReason::Completed),
            build::tool_call_output("x", "a", StopReason::Completed),
            usage(),
            end(StopReason::Completed),
        ];
        assert_eq!(rules(&stream), vec![]);
        let mut strict = StreamValidator::with_config(ValidatorConfig {
            strict_adjacency: true,
        });
        let found: Vec<Rule> = stream
            .iter()
            .flat_map(|m| strict.push(m))
            .map(|v| v.rule)
            .collect();
        assert_eq!(
            found,
            vec![
                Rule::DenialOutput,
                Rule::CompleteAfterStop,
                Rule::CompleteAfterStop
            ]
        );
    }

    #[test]
    fn tool_call_arguments_may_be_reserialized_json() {
        let stream = [
            build::request_begin(),
            build::partial_tool_call(Start, "t", "", "a", StopReason::Completed),
            build::partial_tool_call(
                Delta,
                "",
                r#"{ "b": 1, "a": [1, 2] }"#,
                "a",
                StopReason::Completed,
            ),
            build::partial_tool_call(Stop, "", "", "a", StopReason::Completed),
            build::tool_call(
                "t",
                r#"{"a":[1,2],"b":1}"#,
                "a",
                StopReason::Completed,
                None,
            ),
            build::approval_decision(ApprovalDecision::Deny, "a"),
            build::tool_call_output(DENIED_BY_USER, "a", StopReason::Aborted),
            usage(),
            end(StopReason::Completed),
        ];
        assert_eq!(rules(&stream), vec![]);
        let mut text = stream.to_vec();
        text[4] = build::tool_call(
            "t",
            r#"{"a":[2,1],"b":1}"#,
            "a",
            StopReason::Completed,
            None,
        );
        assert_eq!(rules(&text), vec![Rule::DeltaConcat]);
    }

    #[test]
    fn forbidden_needs_the_policy_text() {
        let stream = [
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            build::approval_decision(ApprovalDecision::Forbidden, "a"),
            build::tool_call_output(DENIED_BY_USER, "a", StopReason::Aborted),
            usage(),
            end(StopReason::Completed),
        ];
        assert_eq!(rules(&stream), vec![Rule::DenialOutput]);
    }

    #[test]
    fn abort_excuses_unanswered_calls_but_not_a_missing_request_begin() {
        let stream = [
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            end(StopReason::Aborted),
            build::abort(Some("aborted by user".into())),
            build::user_text_from("notice", TextSender::Harness),
            build::request_begin(),
            usage(),
            end(StopReason::Completed),
        ];
        assert_eq!(rules(&stream), vec![]);
        let mut late = stream[..4].to_vec();
        late.push(build::tool_call_output("x", "a", StopReason::Completed));
        let found = rules(&late);
        assert!(found.contains(&Rule::AbortLast), "{found:?}");
    }

    #[test]
    fn missing_output_is_flagged_at_the_next_request_begin() {
        let stream = [
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            build::approval_decision(ApprovalDecision::Allow, "a"),
            usage(),
            end(StopReason::Completed),
            build::request_begin(),
            usage(),
            end(StopReason::Completed),
        ];
        let found = StreamValidator::validate(&stream);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, Rule::PairingMissingOutput);
        assert_eq!(found[0].index, Some(5));
    }

    #[test]
    fn origins_are_independent() {
        let child = |m: OmniMessage| m.with_origin("child");
        let stream = [
            build::request_begin(),
            child(build::request_begin()),
            build::partial_text(Start, "", StopReason::Completed),
            child(build::partial_text(Start, "", StopReason::Completed)),
            child(build::partial_text(Delta, "kid", StopReason::Completed)),
            build::partial_text(Delta, "parent", StopReason::Completed),
            build::partial_text(Stop, "", StopReason::Completed),
            child(build::partial_text(Stop, "", StopReason::Completed)),
            child(build::assistant_text("kid", StopReason::Completed)),
            build::assistant_text("parent", StopReason::Completed),
            child(usage()),
            usage(),
            child(end(StopReason::Completed)),
            end(StopReason::Completed),
        ];
        assert_eq!(rules(&stream), vec![]);
    }

    #[test]
    fn compaction_yields_partials_and_usage_without_request() {
        let stream = [
            build::compaction_begin(CompactionReason::Context, CompactionMode::Summarize, 10, 1),
            build::partial_text(Start, "", StopReason::Completed),
            build::partial_text(Delta, "[summary]x[/summary]", StopReason::Completed),
            build::partial_text(Stop, "", StopReason::Completed),
            usage(),
            build::compaction_end(
                CompactionReason::Context,
                CompactionMode::Summarize,
                StopReason::Completed,
                build::RetryDetail {
                    attempt: Some(1),
                    ..Default::default()
                },
            ),
        ];
        assert_eq!(rules(&stream), vec![]);
    }

    #[test]
    fn compaction_trace_calls_need_no_approval() {
        let reason = CompactionReason::Context;
        let mode = CompactionMode::Summarize;
        let stream = [
            build::compaction_begin(reason, mode, 10, 1),
            build::user_text("summarize"),
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            usage(),
            end(StopReason::Completed),
            build::tool_call_output(
                "[tool error] the compaction request expects a summary, not tool calls",
                "a",
                StopReason::Failed,
            ),
            build::compaction_end(reason, mode, StopReason::Failed, Default::default()),
        ];
        assert_eq!(rules(&stream), vec![]);
        let mut twice = stream.to_vec();
        twice.insert(7, stream[6].clone());
        assert_eq!(rules(&twice), vec![Rule::PairingDuplicateOutput]);
    }

    #[test]
    fn a_call_committed_twice_without_output_is_missing_its_output() {
        let call = build::tool_call("t", "{}", "a", StopReason::Completed, None);
        let stream = [build::request_begin(), call.clone(), call];
        let found = StreamValidator::validate(&stream);
        assert!(found
            .iter()
            .any(|v| v.rule == Rule::PairingMissingOutput && v.index == Some(2)));
    }

    #[test]
    fn display_forms() {
        let v = Violation {
            index: Some(12),
            line: Some(13),
            rule: Rule::ApprovalPosition,
            detail: "tool_call_output for call_a before its approval_decision".into(),
        };
        assert_eq!(
            v.to_string(),
            "message 12 (line 13): approval_position: tool_call_output for call_a before its approval_decision"
        );
        let end = Violation {
            index: None,
            line: None,
            rule: Rule::RequestPairing,
            detail: "x".into(),
        };
        assert_eq!(end.to_string(), "end of stream: request_pairing: x");
    }
}
