//! One turn: one LLM request plus the tools it calls (protocol
//! [§2.5](penguin_omni_protocol::spec#s2.5)–[§2.7](penguin_omni_protocol::spec#s2.7), *One turn* to
//! *request_end and token_usage*).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::FutureExt;
use penguin_llm_providers::{
    CancellationToken, LlmOutcome, LlmRequest, MessageSink, ThinkingLevel,
};
use penguin_merge_queue::Producer;
use penguin_omni_protocol::build;
use penguin_omni_protocol::validator::denial_text;
use penguin_omni_protocol::{
    ApprovalDecision, Body, EventPayload, ModelPayload, OmniMessage, PartialToolCallOutput,
    StopReason, StreamEventType,
};
use tokio::task::JoinSet;

use crate::environment::{Approver, ToolCallRequest, Verdict};
use crate::instant::{self, Chain, Orderer};
use crate::request::{generate, panic_text, request_end};
use crate::shared::{Item, Shared};

/// What one turn left behind, for the run loop and carry-over.
#[derive(Debug)]
pub(crate) struct Turn {
    /// One output per committed call, in call order (the last collected per id wins).
    pub tool_outputs: Vec<OmniMessage>,
    /// Committed tool calls (stop_reason completed), in call order.
    pub tool_calls: Vec<OmniMessage>,
    /// Complete thinking and text segments, for transcripts.
    pub assistant_segments: Vec<OmniMessage>,
    /// How the request ended.
    pub outcome: LlmOutcome,
}

pub(crate) struct TurnParams<'a> {
    pub input: Vec<OmniMessage>,
    pub approver: Option<Arc<dyn Approver>>,
    pub cancel: &'a CancellationToken,
    pub thinking_level: Option<ThinkingLevel>,
    pub reconnects: u32,
}

pub(crate) async fn run_turn(
    shared: &Arc<Shared>,
    producer: &Producer<Item>,
    p: TurnParams<'_>,
) -> Turn {
    let order = Arc::new(Orderer::new(
        shared.clone(),
        producer.clone(),
        p.cancel.clone(),
    ));
    let chain = order.driver();
    order.push(chain, build::request_begin(), instant::SAME_JOB);
    let outputs = Arc::new(Mutex::new(Vec::new()));
    let mut driver = Driver {
        shared: shared.clone(),
        order: order.clone(),
        chain,
        approver: p.approver,
        cancel: p.cancel.clone(),
        thinking_level: p.thinking_level,
        outputs: outputs.clone(),
        tools: JoinSet::new(),
        call_order: Vec::new(),
        tool_calls: Vec::new(),
        assistant_segments: Vec::new(),
    };
    let request = LlmRequest {
        new_messages: p.input,
        cancel: p.cancel.clone(),
        thinking_level: p.thinking_level,
    };
    let outcome = generate(shared, request, &mut driver).await;
    order.push(
        chain,
        request_end(shared, &outcome, p.reconnects, shared.config.max_reconnects),
        instant::REQUEST_END,
    );

    // request_end does not wait for tools; the turn does.
    while let Some(joined) = driver.tools.join_next().await {
        if let Err(e) = joined {
            tracing::error!("tool task failed to join: {e}");
        }
    }
    order.flush();
    let collected = std::mem::take(&mut *outputs.lock().expect("outputs lock"));
    let mut by_id: HashMap<String, OmniMessage> = HashMap::new();
    for out in collected {
        if let Some(id) = out.tool_call_id() {
            by_id.insert(id.to_owned(), out);
        }
    }
    let tool_outputs = driver
        .call_order
        .iter()
        .filter_map(|id| by_id.remove(id))
        .collect();
    Turn {
        tool_outputs,
        tool_calls: driver.tool_calls,
        assistant_segments: driver.assistant_segments,
        outcome,
    }
}

/// The driver: consumes the LLM stream, approves calls one at a time, dispatches tools.
struct Driver {
    shared: Arc<Shared>,
    order: Arc<Orderer>,
    chain: Chain,
    approver: Option<Arc<dyn Approver>>,
    cancel: CancellationToken,
    thinking_level: Option<ThinkingLevel>,
    outputs: Arc<Mutex<Vec<OmniMessage>>>,
    tools: JoinSet<()>,
    call_order: Vec<String>,
    tool_calls: Vec<OmniMessage>,
    assistant_segments: Vec<OmniMessage>,
}

#[async_trait]
impl MessageSink for Driver {
    async fn emit(&mut self, msg: OmniMessage) {
        self.take(msg, instant::MESSAGE).await;
    }

    async fn emit_closure(&mut self, msg: OmniMessage) {
        self.take(msg, instant::CLOSURE).await;
    }
}

impl Driver {
    /// One message of the model's stream: streamed, then acted on (segments kept for
    /// transcripts, calls approved and dispatched).
    async fn take(&mut self, msg: OmniMessage, cost: i64) {
        // Most messages (fragments) are only streamed: they move into the order, and only the
        // few the turn keeps are copied.
        let kept = !msg.has_origin()
            && matches!(
                msg.model(),
                Some(ModelPayload::Thinking(_) | ModelPayload::Text(_) | ModelPayload::ToolCall(_))
            );
        if !kept {
            let usage = match &msg.body {
                Body::Event(EventPayload::TokenUsage { session, request }) => {
                    Some((*session, *request))
                }
                _ => None,
            };
            self.order.push(self.chain, msg, cost);
            if let Some((session, request)) = usage {
                self.shared.observe_token_usage(session, request);
            }
            return;
        }
        self.order.push(self.chain, msg.clone(), cost);
        match &msg.body {
            Body::Model(ModelPayload::Thinking(_) | ModelPayload::Text(_)) => {
                self.assistant_segments.push(msg);
            }
            Body::Model(ModelPayload::ToolCall(tc)) => {
                // A tool_call closed by an interruption is a synthetic closure: never
                // dispatched, recorded as committed, or answered.
                if tc.stop_reason.is_some_and(|r| r != StopReason::Completed) {
                    return;
                }
                let id = tc.tool_call_id.clone();
                self.call_order.push(id.clone());
                self.tool_calls.push(msg.clone());
                if self.cancel.is_cancelled() {
                    return;
                }
                let Some(verdict) = self.approve(&msg).await else {
                    // The reference waits for the approver even then, so the model goes on
                    // only after everything the interrupt closed.
                    self.order.defer(self.chain);
                    return;
                };
                if self.cancel.is_cancelled() {
                    return;
                }
                let Verdict {
                    decision,
                    decided_by,
                    reason,
                    updated_arguments,
                } = verdict;
                let text = denial_text(decision, decided_by.as_deref(), reason.as_deref());
                self.order.push(
                    self.chain,
                    build::approval_decision_by(
                        decision,
                        &id,
                        decided_by,
                        reason,
                        updated_arguments.clone(),
                    ),
                    instant::APPROVAL,
                );
                match decision {
                    ApprovalDecision::Allow => {
                        self.dispatch(with_arguments(msg, updated_arguments))
                    }
                    _ => {
                        let out = build::tool_call_output(text, id, StopReason::Aborted);
                        self.order.push(self.chain, out.clone(), instant::DENIAL);
                        self.outputs.lock().expect("outputs lock").push(out);
                    }
                }
            }
            _ => {}
        }
    }

    /// Asks the approver; `None` when the interrupt fired while waiting (then no
    /// approval_decision is emitted, as in the reference).
    async fn approve(&self, call: &OmniMessage) -> Option<Verdict> {
        let Some(approver) = self.approver.clone() else {
            return Some(ApprovalDecision::Deny.into());
        };
        let answer = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return None,
            answer = AssertUnwindSafe(approver.verdict(call)).catch_unwind() => answer,
        };
        Some(match answer {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(e)) => {
                tracing::warn!("[penguin] approve callback threw: {e}; denying.");
                ApprovalDecision::Deny.into()
            }
            Err(panic) => {
                tracing::warn!(
                    "[penguin] approve callback threw: {}; denying.",
                    panic_text(&panic)
                );
                ApprovalDecision::Deny.into()
            }
        })
    }

    /// Starts `executeOne` without waiting for it: the model stream goes on.
    fn dispatch(&mut self, call: OmniMessage) {
        let id = call.tool_call_id().unwrap_or_default().to_owned();
        let request = ToolCallRequest {
            call,
            cancel: self.cancel.clone(),
            approver: self.approver.clone(),
            thinking_level: self.thinking_level,
        };
        let mut sink = ToolSink {
            chain: self.order.fork(self.chain),
            order: self.order.clone(),
            outputs: self.outputs.clone(),
            tool_call_id: id,
            answered: false,
            streamed: Streamed::Nothing,
        };
        let env = self.shared.env.clone();
        let cancel = self.cancel.clone();
        self.tools.spawn(async move {
            let result = AssertUnwindSafe(env.execute(request, &mut sink))
                .catch_unwind()
                .await;
            let silent_interrupt = result.is_ok() && cancel.is_cancelled();
            if !sink.answered && !silent_interrupt {
                // The Environment broke its contract; answer the call anyway so pairing holds.
                // (A tool that just returns on an interrupt is left unanswered: the run's
                // carry-over gives it the interrupted placeholder, as a tool abort would.)
                let why = match result {
                    Err(panic) => panic_text(&panic),
                    Ok(()) => "the environment ended without a tool_call_output".into(),
                };
                sink.answer_for_the_tool(&format!("[tool error] {why}"));
            } else if let Err(panic) = result {
                tracing::warn!(
                    "[penguin] environment threw after tool output: {}",
                    panic_text(&panic)
                );
            }
        });
    }
}

/// The call as the environment runs it: with the arguments its approver rewrote them to (a
/// hook's `updatedInput`), else as the model made it. The turn keeps the model's own call.
fn with_arguments(mut call: OmniMessage, arguments: Option<String>) -> OmniMessage {
    if let (Some(arguments), Body::Model(ModelPayload::ToolCall(tc))) = (arguments, &mut call.body)
    {
        tc.arguments = arguments;
    }
    call
}

/// What a tool streamed of its own call's output segment (`partial_tool_call_output`), so
/// an answer the engine has to make up for it agrees with the fragments already out.
#[derive(Debug, Default)]
enum Streamed {
    /// No fragment yet.
    #[default]
    Nothing,
    /// A segment is open; its fragments so far, concatenated.
    Open(String),
    /// A segment was stopped, its complete output still owed; what it streamed.
    Stopped(String),
}

/// `executeOne`'s view of one running tool.
struct ToolSink {
    order: Arc<Orderer>,
    chain: Chain,
    outputs: Arc<Mutex<Vec<OmniMessage>>>,
    tool_call_id: String,
    answered: bool,
    streamed: Streamed,
}

impl ToolSink {
    fn collect(&mut self, out: OmniMessage, cost: i64) {
        self.order.push(self.chain, out.clone(), cost);
        self.outputs.lock().expect("outputs lock").push(out);
        self.answered = true;
    }

    /// Answers a call whose tool ended (or panicked) without its complete output, with
    /// `failed` and `error` (`[tool error] …`), keeping the stream rules the tool's own
    /// fragments already committed to:
    ///
    /// - nothing streamed: the complete output alone, `error`;
    /// - a segment left open: the error as its last delta (on a line of its own after any
    ///   streamed text, as the reference puts a tool's notes), a `failed` stop, then the
    ///   complete output holding exactly the fragments: what was streamed, then the error;
    /// - a segment already stopped: its complete must follow and equal the fragments, so it
    ///   holds what was streamed, with `failed`; the error can no longer be added, and is
    ///   logged instead.
    fn answer_for_the_tool(&mut self, error: &str) {
        let id = self.tool_call_id.clone();
        let output = match std::mem::take(&mut self.streamed) {
            Streamed::Nothing => error.to_owned(),
            Streamed::Open(streamed) => {
                let note = if streamed.is_empty() {
                    error.to_owned()
                } else {
                    format!("\n{error}")
                };
                let delta = build::partial_tool_call_output(
                    StreamEventType::Delta,
                    note.as_str(),
                    &id,
                    StopReason::Completed,
                );
                self.order.push(self.chain, delta, instant::MESSAGE);
                let stop = build::partial_tool_call_output(
                    StreamEventType::Stop,
                    "",
                    &id,
                    StopReason::Failed,
                );
                self.order.push(self.chain, stop, instant::CLOSURE);
                streamed + &note
            }
            Streamed::Stopped(streamed) => {
                tracing::warn!(
                    "[penguin] tool call {id} stopped its output without answering: {error}"
                );
                streamed
            }
        };
        let out = build::tool_call_output(output, id, StopReason::Failed);
        self.collect(out, instant::MESSAGE);
    }

    /// Follows the call's own output segment (see [`Streamed`]), fragment by fragment, the
    /// way the stream's validator reads it.
    fn observe(&mut self, p: &PartialToolCallOutput) {
        self.streamed = match (std::mem::take(&mut self.streamed), p.event_type) {
            (Streamed::Open(mut s), StreamEventType::Delta) => {
                s.push_str(&p.output);
                Streamed::Open(s)
            }
            (Streamed::Open(mut s), StreamEventType::Stop) => {
                s.push_str(&p.output);
                Streamed::Stopped(s)
            }
            // A start, or a fragment without one: a new segment from here.
            (_, StreamEventType::Stop) => Streamed::Stopped(p.output.clone()),
            (_, _) => Streamed::Open(p.output.clone()),
        };
    }

    fn take(&mut self, msg: OmniMessage, cost: i64) {
        if msg.has_origin() {
            // A child session's message: streamed, never recorded, never this call's output.
            // Its first message (session_meta, one hop) leaves the pointer in our Trace.
            let pointer = match (&msg.body, msg.origin.as_deref()) {
                (Body::SessionMeta(_), Some([hop])) => Some(build::subagent(hop.clone())),
                _ => None,
            };
            self.order.push(self.chain, msg, cost);
            if let Some(pointer) = pointer {
                self.order.record_only(self.chain, pointer);
            }
            return;
        }
        let own = msg.tool_call_id() == Some(self.tool_call_id.as_str());
        match msg.model() {
            Some(ModelPayload::ToolCallOutput(_)) if own => self.collect(msg, cost),
            Some(ModelPayload::PartialToolCallOutput(p)) if own => {
                self.observe(p);
                self.order.push(self.chain, msg, cost);
            }
            _ => self.order.push(self.chain, msg, cost),
        }
    }
}

#[async_trait]
impl MessageSink for ToolSink {
    async fn emit(&mut self, msg: OmniMessage) {
        self.take(msg, instant::MESSAGE);
    }

    async fn emit_closure(&mut self, msg: OmniMessage) {
        self.take(msg, instant::CLOSURE);
    }
}
