//! The validator's bookkeeping: producers, open segments, expectations, calls, requests.

use crate::message::*;
use std::collections::{BTreeMap, HashSet};

use super::{Rule, Violation};

/// The synthetic output of a call the human denied (`deny`, protocol [§2.5](crate::spec#s2.5) *One
/// turn*).
pub const DENIED_BY_USER: &str = "Tool call denied by user.";
/// The synthetic output of a call a command policy forbade (`forbidden`).
pub const DENIED_BY_POLICY: &str = "Tool call denied by policy.";

/// The synthetic output of a denied call: [`DENIED_BY_USER`] or [`DENIED_BY_POLICY`], or, when
/// the `approval_decision` names its decider (a hook, [§2.5](crate::spec#s2.5) *One turn*),
/// `Tool call denied by <decider>: <reason>`, so the model reads why.
pub fn denial_text(
    decision: ApprovalDecision,
    decided_by: Option<&str>,
    reason: Option<&str>,
) -> String {
    match (decided_by, reason) {
        (Some(by), Some(reason)) => format!("Tool call denied by {by}: {reason}"),
        (Some(by), None) => format!("Tool call denied by {by}."),
        (None, Some(reason)) => format!("Tool call denied: {reason}"),
        (None, None) if decision == ApprovalDecision::Forbidden => DENIED_BY_POLICY.to_owned(),
        (None, None) => DENIED_BY_USER.to_owned(),
    }
}

/// Who pushed a message into the merge queue (within one origin).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Producer {
    /// The turn driver: LLM stream, request events, approvals, synthetic denial outputs.
    Driver,
    /// One dispatched tool call's execution.
    Tool(String),
}

#[derive(Debug)]
pub(super) struct OpenSegment {
    pub(super) partial_type: &'static str,
    pub(super) tool_call_id: String,
    pub(super) producer: Producer,
    pub(super) start: Pos,
    pub(super) name: String,
    pub(super) content: String,
}

#[derive(Debug)]
pub(super) enum Expect {
    Complete {
        producer: Producer,
        partial_type: &'static str,
        complete_type: &'static str,
        tool_call_id: String,
        name: String,
        content: String,
        stop_at: Pos,
    },
    DenialOutput {
        tool_call_id: String,
        decision: ApprovalDecision,
        /// The synthetic output's text ([`denial_text`]).
        want: String,
        at: Pos,
    },
    RequestEnd {
        usage_at: Pos,
    },
}

impl Expect {
    pub(super) fn producer(&self) -> &Producer {
        match self {
            Expect::Complete { producer, .. } => producer,
            Expect::DenialOutput { .. } | Expect::RequestEnd { .. } => &Producer::Driver,
        }
    }

    /// The rule and detail when `got` arrives instead of what was expected.
    pub(super) fn unmet(&self, got: &str) -> (Rule, String) {
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
                    "{partial_type}{} stop at {stop_at} is not followed by its {complete_type}; {got}",
                    id_suffix(tool_call_id)
                ),
            ),
            Expect::DenialOutput {
                tool_call_id,
                decision,
                at,
                ..
            } => (
                Rule::DenialOutput,
                format!(
                    "{decision} for {tool_call_id} at {at} is not followed by its synthetic tool_call_output; {got}"
                ),
            ),
            Expect::RequestEnd { usage_at } => (
                Rule::RequestEndFollowsUsage,
                format!("token_usage at {usage_at} is not followed by request_end; {got}"),
            ),
        }
    }
}

#[derive(Debug)]
pub(super) struct Call {
    pub(super) at: Pos,
    pub(super) approval: Option<(ApprovalDecision, Pos)>,
    pub(super) first_output: Option<Pos>,
    pub(super) complete_output: Option<Pos>,
    /// Needs no approval: made by a compaction request, whose calls are never dispatched.
    pub(super) exempt: bool,
    pub(super) unapproved_flagged: bool,
    /// No longer owed an output: flagged as missing, excused by an abort, or exempt.
    pub(super) settled: bool,
}

impl Call {
    pub(super) fn denied(&self) -> bool {
        matches!(self.approval, Some((d, _)) if d != ApprovalDecision::Allow)
    }
}

#[derive(Debug)]
pub(super) struct Request {
    pub(super) begin: Pos,
    pub(super) usage: Option<Pos>,
}

#[derive(Debug, Default)]
pub(super) struct OriginState {
    pub(super) segments: Vec<OpenSegment>,
    pub(super) expects: Vec<Expect>,
    pub(super) request: Option<Request>,
    pub(super) calls: BTreeMap<String, Call>,
    pub(super) uncommitted: HashSet<String>,
    pub(super) compaction: Option<Pos>,
    pub(super) aborted_at: Option<Pos>,
}

/// Where a message stands: its 0-based index among the messages pushed and, for
/// [`super::validate_jsonl`], its 1-based input line. Details name a message by its line when
/// there is one ("line 14"), by its index otherwise ("message 12"): one numbering per report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pos {
    pub(super) index: usize,
    pub(super) line: Option<usize>,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}"),
            None => write!(f, "message {}", self.index),
        }
    }
}

pub(super) struct Cx {
    pub(super) index: Pos,
    pub(super) strict: bool,
    pub(super) out: Vec<Violation>,
}

impl Cx {
    pub(super) fn flag(&mut self, rule: Rule, detail: String) {
        self.out.push(Violation {
            index: Some(self.index.index),
            line: self.index.line,
            rule,
            detail,
        });
    }
}

pub(super) fn id_suffix(id: &str) -> String {
    if id.is_empty() {
        String::new()
    } else {
        format!(" {id}")
    }
}

/// "partial_text delta", "tool_call_output for call_a", ... for details.
pub(super) fn describe(msg: &OmniMessage) -> String {
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
pub(super) fn is_llm_stream(p: &ModelPayload) -> bool {
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
pub(super) fn opens_run(msg: &OmniMessage) -> bool {
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

pub(super) fn contents_match(complete_type: &str, streamed: &str, complete: &str) -> bool {
    if streamed == complete {
        return true;
    }
    // §1.8: a complete tool_call may carry the provider's parsed arguments serialized again.
    complete_type == "tool_call"
        && matches!(
            (
                serde_json::from_str::<serde_json::Value>(streamed),
                serde_json::from_str::<serde_json::Value>(complete),
            ),
            (Ok(a), Ok(b)) if a == b
        )
}
