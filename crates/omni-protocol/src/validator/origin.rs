//! The rules, applied to the messages of one origin chain.

use crate::message::*;

use super::state::{
    contents_match, denial_text, describe, id_suffix, is_llm_stream, opens_run, Call, Cx, Expect,
    OpenSegment, OriginState, Producer, Request,
};
use super::{Rule, Violation};

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

    pub(super) fn push(&mut self, msg: &OmniMessage, cx: &mut Cx) {
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
                        "{} after the abort at {abort_at}; the next message of this origin must start a new run",
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
                                "{complete_type}{} content {got:?} differs from its concatenated fragments {content:?} (stop at {stop_at})",
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
                        want,
                        ..
                    },
                    Body::Model(ModelPayload::ToolCallOutput(out)),
                ) if out.tool_call_id == *tool_call_id => {
                    if out.output != *want || out.stop_reason != Some(StopReason::Aborted) {
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
                        "{partial_type}{} start while the segment started at {} is still open",
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
                        "{} arrived while its {pt} segment (started at {}) is still open (missing stop)",
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
                                "tool_call {id} ({}) is committed again before it got a tool_call_output",
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
                    "{} after the token_usage at {usage_at}, which must be the LLM stream's last message",
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
                        "{what}, but the call was denied ({decision} at {at}) and nothing may be dispatched for it"
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
                format!("{kind} for {id} (complete output at {first})"),
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
                decided_by,
                reason,
                ..
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
                        format!("second approval_decision for {tool_call_id} (first at {first})"),
                    );
                    return;
                }
                if let Some(out) = call.first_output {
                    cx.flag(
                        Rule::ApprovalPosition,
                        format!("approval_decision for {tool_call_id} after its output at {out}"),
                    );
                }
                call.approval = Some((*decision, cx.index));
                if *decision != ApprovalDecision::Allow {
                    self.expects.push(Expect::DenialOutput {
                        tool_call_id: tool_call_id.clone(),
                        decision: *decision,
                        want: denial_text(*decision, decided_by.as_deref(), reason.as_deref()),
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
                                "second token_usage in the request begun at {} (first at {first})",
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
                    "{what} while the request begun at {} has no request_end",
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
                        "tool_call {id} ({}) has no tool_call_output before the next request_begin",
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
                    "completed request_end without a token_usage in its request (begun at {})",
                    r.begin
                ),
            ),
            (s, Some(at)) if s != StopReason::Completed => cx.flag(
                Rule::RequestEndUsage,
                format!(
                    "{s} request_end after a token_usage ({at}); only completed requests produce one"
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
                        "tool_call {id} ({}, {decision} at {at}) has no tool_call_output before the abort",
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
                    "{}{} started at {} is still open at {at}",
                    s.partial_type,
                    id_suffix(&s.tool_call_id),
                    s.start
                ),
            );
        }
    }

    pub(super) fn finish(self, origin: &[String], out: &mut Vec<Violation>) {
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
                format!("request begun at {} never ended", r.begin),
            );
        }
        for s in &self.segments {
            flag(
                Rule::SegmentOpen,
                format!(
                    "{}{} started at {} is still open at the end of the stream",
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
                    "tool_call {id} ({}) has no tool_call_output by the end of the stream",
                    call.at
                ),
            );
        }
    }
}
