//! `StreamValidator`: checks a message stream against the protocol's guarantees
//! ([§0.5](crate::spec#s0.5) *Guarantees*).
//!
//! The validator is a pure state machine: feed it the messages of one `run()` output stream (or
//! of several consecutive runs, or of a Trace) one at a time with [`StreamValidator::push`], then
//! call [`StreamValidator::finish`] for the end-of-stream checks. Every broken guarantee comes
//! back as a [`Violation`] naming the 0-based message index and a stable [`Rule`].
//! [`validate_jsonl`] does the same for a JSON-lines file and names every message by its
//! 1-based line instead, in the position and in the detail alike. Section numbers
//! ([§2.5](crate::spec#s2.5), ...) are those of penguin's protocol specification, the
//! [`spec`](crate::spec) module.
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
//! A turn has several concurrent producers that push into one merge queue
//! ([§2.2](crate::spec#s2.2)): the *driver* (the LLM stream together with
//! `request_begin`/`request_end`, approvals and the synthetic denial outputs) and one producer per
//! dispatched tool call (its `partial_tool_call_output`s and `tool_call_output`). Only the order
//! *within* a producer is preserved; different producers interleave by arrival time. Child sessions
//! forwarded with an `origin` are separate streams altogether: every rule applies per origin chain,
//! and the producers of one origin chain never constrain another.
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
//! | `delta_concat` | the concatenated fragments equal the complete's content (and a tool call's name); a `tool_call`'s arguments may differ in bytes when both sides parse as equal JSON values ([§1.8](crate::spec#s1.8)) |
//! | `segment_open` | no segment is open at `request_end` (LLM segments), at the next `request_begin`, at `abort` or at the end of the stream |
//! | `approval_position` | an `approval_decision` follows its committed `tool_call`, exactly once, and precedes every output of that call |
//! | `denial_output` | after `deny`/`forbidden`, the driver's next message is the synthetic `tool_call_output` (`stop_reason: aborted`, "Tool call denied by user." / "Tool call denied by policy.", or [`denial_text`] of the decision's `decided_by` and `reason`), and nothing is dispatched for the call |
//! | `pairing_missing_output` | every committed `tool_call` has a complete `tool_call_output` before the next `request_begin` of its origin, before an `abort` (unless the abort pre-empted its approval), or by the end of the stream |
//! | `pairing_duplicate_output` | at most one complete `tool_call_output` per call, and no output fragment after it |
//! | `pairing_unknown_call` | outputs answer a committed `tool_call` of the same origin (never an uncommitted synthetic closure) |
//! | `usage_tail` | `token_usage` is the LLM stream's last message: one per request, no LLM-stream message after it, none outside a request (except inside a compaction) |
//! | `request_end_follows_usage` | the driver's next message after `token_usage` is `request_end` |
//! | `request_end_usage` | commit criterion: a `completed` `request_end` has a `token_usage` in its request, any other status has none |
//! | `request_pairing` | `request_begin`/`request_end` alternate per origin: no nested begin, no end without begin, no request left open at `abort` or at the end |
//! | `abort_last` | `abort` is the last message of its run: the next message of that origin must start a new run |
//!
//! # Tolerated (the protocol's non-guarantees, [§0.6](crate::spec#s0.6), and the exceptions its sections document)
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
//! - A committed `tool_call` that an interrupt caught before its approval (no `approval_decision`
//!   is emitted then, [§2.5](crate::spec#s2.5)): nothing was dispatched, and the engine answers it
//!   in the *model context* through carry-over (Case A placeholders), which is never streamed. A
//!   call that did get a decision is still owed its output before the `abort`, because the turn,
//!   and so the abort, waits for every dispatched tool to settle. Missing outputs are flagged at
//!   the next `request_begin` of the same origin (a request starts only once every tool of the
//!   previous one has settled), at the `abort`, or at [`StreamValidator::finish`].
//! - After an `abort`, a new run may emit run-opening messages before its `request_begin`:
//!   user-role input or notices, `session_meta`, MCP/tool-list events, a compaction, a
//!   `goal_finished`, or another `abort` (a run whose signal fired before it started).
//!
//! Messages that do not match a rule's shape are otherwise accepted: the validator checks
//! ordering guarantees, not payload contents.

use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;

use crate::message::*;

mod origin;
mod state;

pub use state::{denial_text, DENIED_BY_POLICY, DENIED_BY_USER};
use state::{Cx, OriginState, Pos};

/// The stable name of a guarantee a [`Violation`] breaks. See the module docs for each rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    /// 1-based input line, when the stream came from [`validate_jsonl`]. Then the message is
    /// shown by its line only, and `detail` names other messages by their lines too.
    pub line: Option<usize>,
    /// Which guarantee.
    pub rule: Rule,
    /// What happened, naming the messages involved.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One numbering: a line when there is one, else the message index.
        match (self.index, self.line) {
            (_, Some(l)) => write!(f, "line {l}")?,
            (Some(i), None) => write!(f, "message {i}")?,
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
/// Blank lines are skipped. A line without a `timestamp` is accepted (scenario files and
/// hand-written streams leave it out, and no rule reads it); a `timestamp` that is there must
/// be a string. A line that does not parse (or cannot be read) is reported as a [`Rule::Parse`]
/// violation with its line number and is not fed to the validator. Every violation names
/// messages by their 1-based line ("line 14: denial_output: deny for call_2 at line 13 …");
/// [`Violation::index`] still counts parsed messages only, from 0.
///
/// ```
/// use penguin_omni_protocol::validator::{validate_jsonl, Rule};
///
/// let stream = r#"{"type":"event_msg","payload":{"type":"request_begin"}}
///
/// {"type":"event_msg","payload":{"type":"request_begin"}}
/// "#;
/// let report = validate_jsonl(stream.as_bytes());
/// assert_eq!(report.messages, 2);
/// let v = &report.violations[0];
/// assert_eq!((v.rule, v.line, v.index), (Rule::RequestPairing, Some(3), Some(1)));
/// assert_eq!(
///     v.to_string(),
///     "line 3: request_pairing: the next request_begin while the request begun at line 1 has no request_end"
/// );
/// ```
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
        match parse_line(&line) {
            Ok(msg) => {
                report.messages += 1;
                report
                    .violations
                    .extend(validator.push_at(&msg, Some(lineno)));
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

/// One line of [`validate_jsonl`] input: a message as [`OmniMessage::from_json`] reads it, or
/// one without a `timestamp` (stamped now; no rule reads it).
fn parse_line(line: &str) -> Result<OmniMessage, ParseError> {
    match OmniMessage::from_json(line) {
        Err(e) if e.path == "timestamp" && e.message == "missing" => serde_json::from_str(line)
            .map_err(|_| e)
            .and_then(OmniMessage::from_value_stamping),
        parsed => parsed,
    }
}

/// Checks a stream message by message against the protocol's guarantees ([§0.5](crate::spec#s0.5)
/// *Guarantees*; see the module docs).
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
        self.push_at(msg, None)
    }

    /// [`StreamValidator::push`] for a message read from input line `line`: its violations,
    /// and every later detail naming it, say the line.
    fn push_at(&mut self, msg: &OmniMessage, line: Option<usize>) -> Vec<Violation> {
        let mut cx = Cx {
            index: Pos {
                index: self.seen,
                line,
            },
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

#[cfg(test)]
mod tests;
