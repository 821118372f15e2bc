//! Compaction (protocol [§2.12](penguin_omni_protocol::spec#s2.12) *Compaction*): when a context
//! grows too large (or has run too many turns), replace it with a summary — or discard it — and
//! start a new context in a new trace file.
//!
//! Stream and Trace differ here on purpose: the compaction request's `request_begin`,
//! `request_end`, prompt, thinking and tool calls are written only; its summary text streams as
//! `partial_text`; its `token_usage` is written in place and streamed after the text.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_trait::async_trait;
use penguin_llm_providers::{CancellationToken, LlmOutcome, LlmRequest, MessageSink};
use penguin_merge_queue::Producer;
use penguin_omni_protocol::build::{self, RetryDetail};
use penguin_omni_protocol::markers::{extract_summary, marker_block};
use penguin_omni_protocol::{
    CompactionMode, CompactionReason, EventPayload, ModelPayload, OmniMessage, StopReason,
};

use crate::carry::{build_carry_over, downgrade_carried_goal_input};
use crate::request::{generate, panic_text, request_end, Ladder, Rung};
use crate::shared::{
    abort, deliver_notices, deliver_steering, emit, emit_stream_only, Item, Shared,
};
use crate::texts;
use crate::turn::Turn;

/// Whether a manual compaction would do anything. More reasons not to may come: match
/// [`Compactability::Ok`] and give the others' [`code`](Compactability::code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compactability {
    /// Compaction is not configured (or no model factory was given).
    Unsupported,
    /// There is something to compact.
    Ok,
    /// The context was just compacted and nothing has run since.
    JustCompacted,
    /// Nothing has run in this context.
    Empty,
}

impl Compactability {
    /// The reason code the server answers with.
    pub fn code(self) -> &'static str {
        match self {
            Compactability::Unsupported => "compaction_not_configured",
            Compactability::Ok => "ok",
            Compactability::JustCompacted => "already_compacted",
            Compactability::Empty => "nothing_to_compact",
        }
    }
}

pub(crate) fn compactability(shared: &Shared) -> Compactability {
    let st = shared.state();
    if shared.config.compaction.is_none() || st.create_llm.is_none() {
        Compactability::Unsupported
    } else if st.counters.session_turns > 0 {
        Compactability::Ok
    } else if st.from_compaction {
        Compactability::JustCompacted
    } else {
        Compactability::Empty
    }
}

/// What the run loop does after the compaction checkpoint.
pub(crate) enum Checkpoint {
    /// No compaction (or a failed one at a boundary): assemble the next input as usual.
    Proceed,
    /// The run is over (compacted at a boundary, or aborted).
    EndRun,
    /// A mid-task compaction completed: continue with this input.
    Continue(Vec<OmniMessage>),
}

fn trigger(shared: &Shared) -> Option<CompactionReason> {
    let config = shared.config.compaction.as_ref()?;
    let st = shared.state();
    st.create_llm.as_ref()?;
    if config.max_context_length > 0 && st.counters.last_request_total >= config.max_context_length
    {
        Some(CompactionReason::Context)
    } else if config.max_session_turns > 0
        && st.counters.session_turns as i64 >= config.max_session_turns
    {
        Some(CompactionReason::Turns)
    } else {
        None
    }
}

fn mode(shared: &Shared) -> CompactionMode {
    shared
        .config
        .compaction
        .as_ref()
        .map_or(CompactionMode::Summarize, |c| c.mode)
}

/// A task boundary: no tool outputs to answer, and nothing queued (steering, a notice) that
/// would take the task one more turn.
fn at_boundary(shared: &Shared, mid_task: bool) -> bool {
    let st = shared.state();
    !mid_task && st.steering.is_empty() && st.notices.is_empty()
}

/// The checkpoint after every completed turn.
pub(crate) async fn checkpoint(
    shared: &Arc<Shared>,
    producer: &Producer<Item>,
    turn: &Turn,
    cancel: &CancellationToken,
) -> Checkpoint {
    let Some(reason) = trigger(shared) else {
        return Checkpoint::Proceed;
    };
    let mid_task = !turn.tool_outputs.is_empty();
    let mode = mode(shared);
    if mode == CompactionMode::Discard {
        // Discarding mid-task would orphan the outputs the model is waiting for: defer to the
        // next boundary (the trigger is evaluated again after the next turn).
        if !at_boundary(shared, mid_task) {
            return Checkpoint::Proceed;
        }
        before_compaction(shared, reason, cancel).await;
        discard_context(shared, producer, reason).await;
        return Checkpoint::EndRun;
    }
    before_compaction(shared, reason, cancel).await;
    let folded = if mid_task {
        turn.tool_outputs.clone()
    } else {
        Vec::new()
    };
    let result = summarize_context(shared, producer, reason, folded, cancel).await;
    match (result.status, result.summary) {
        (StopReason::Completed, Some(summary)) => {
            if at_boundary(shared, mid_task) {
                shared.state().pending_summary = Some(summary);
                return Checkpoint::EndRun;
            }
            // Mid-task: the turn's outputs are inside the summary; the summary opens the new
            // context (this first write rotates the trace) and is not streamed.
            shared.record_only(summary.clone());
            let mut next = vec![summary];
            next.extend(deliver_notices(shared, producer));
            next.extend(deliver_steering(shared, producer));
            Checkpoint::Continue(next)
        }
        (status, _) if mid_task => {
            if !result.committed {
                // The model never saw these outputs: they still answer the committed calls.
                let carry = build_carry_over(&[], turn);
                shared.state().pending_carry_over.extend(carry);
            }
            let reason = if status == StopReason::Aborted {
                texts::ABORTED_DURING_COMPACTION
            } else {
                texts::COMPACTION_FAILED
            };
            abort(producer, reason);
            Checkpoint::EndRun
        }
        (StopReason::Aborted, _) => Checkpoint::EndRun,
        _ => Checkpoint::Proceed,
    }
}

/// The host's [`BeforeCompaction`](crate::BeforeCompaction), if any, until it is done or
/// the run is interrupted (the compaction then sees the interrupt itself).
async fn before_compaction(shared: &Shared, reason: CompactionReason, cancel: &CancellationToken) {
    let Some(before) = shared.state().before_compaction.clone() else {
        return;
    };
    tokio::select! {
        biased;
        () = cancel.cancelled() => {}
        () = before(reason) => {}
    }
}

/// `compact()`: a manual compaction between runs.
pub(crate) async fn compact_manually(
    shared: &Arc<Shared>,
    producer: &Producer<Item>,
    cancel: &CancellationToken,
) {
    if compactability(shared) != Compactability::Ok {
        return;
    }
    let mode = mode(shared);
    if mode == CompactionMode::Discard {
        // The structured outputs would answer calls of a context that no longer exists.
        shared
            .state()
            .pending_carry_over
            .retain(|m| !matches!(m.model(), Some(ModelPayload::ToolCallOutput(_))));
        discard_context(shared, producer, CompactionReason::Manual).await;
        return;
    }
    // Downgraded on the drained snapshot: a restore after a failed compaction keeps the
    // downgraded copies, which is harmless because the downgrade is idempotent.
    let folded: Vec<OmniMessage> = std::mem::take(&mut shared.state().pending_carry_over)
        .into_iter()
        .map(downgrade_carried_goal_input)
        .collect();
    let result = summarize_context(
        shared,
        producer,
        CompactionReason::Manual,
        folded.clone(),
        cancel,
    )
    .await;
    if let Some(summary) = result.summary {
        shared.state().pending_summary = Some(summary);
    } else if !result.committed {
        let mut st = shared.state();
        let stashed = std::mem::take(&mut st.pending_carry_over);
        st.pending_carry_over = folded.into_iter().chain(stashed).collect();
    }
}

async fn discard_context(
    shared: &Arc<Shared>,
    producer: &Producer<Item>,
    reason: CompactionReason,
) {
    emit(producer, begin(shared, reason, CompactionMode::Discard));
    emit(
        producer,
        build::compaction_end(
            reason,
            CompactionMode::Discard,
            StopReason::Completed,
            RetryDetail::default(),
        ),
    );
    start_new_context(shared).await;
}

/// `compaction_begin`: the context's size (the last request's total) and its turn count.
fn begin(shared: &Shared, reason: CompactionReason, mode: CompactionMode) -> OmniMessage {
    let st = shared.state();
    build::compaction_begin(
        reason,
        mode,
        st.counters.last_request_total,
        st.counters.session_turns,
    )
}

/// A new context: the next write rotates the trace, a fresh model keeps the session's token
/// counts, and the turn counter restarts.
async fn start_new_context(shared: &Arc<Shared>) {
    shared.head().pending_rotation = true;
    let (factory, tokens) = {
        let mut st = shared.state();
        st.counters.session_turns = 0;
        st.counters.last_request_total = 0;
        st.from_compaction = true;
        (st.create_llm.clone(), st.counters.session_tokens)
    };
    if let Some(factory) = factory {
        match std::panic::catch_unwind(AssertUnwindSafe(|| factory(tokens))) {
            Ok(llm) => *shared.llm.lock().await = llm,
            Err(panic) => tracing::error!(
                "the new context's model could not be built: {}",
                panic_text(&panic)
            ),
        }
    }
}

struct Summarized {
    status: StopReason,
    summary: Option<OmniMessage>,
    committed: bool,
}

async fn summarize_context(
    shared: &Arc<Shared>,
    producer: &Producer<Item>,
    reason: CompactionReason,
    folded: Vec<OmniMessage>,
    cancel: &CancellationToken,
) -> Summarized {
    let mode = CompactionMode::Summarize;
    emit(producer, begin(shared, reason, mode));
    let prompt_text = shared
        .config
        .compaction
        .as_ref()
        .map(|c| c.prompt.clone())
        .unwrap_or_default();
    let prompt = build::user_text(prompt_text);
    shared.record_only(prompt.clone());
    let mut base: Vec<OmniMessage> = folded.into_iter().chain([prompt.clone()]).collect();
    let mut input = base.clone();
    let cap = shared.config.compaction_cap();
    // The summary's retry loop climbs the run loop's ladder (`task.rs`), with its own budget
    // and its own rules: the interrupt is checked before each request, permanent failures and
    // unusable summaries are retried, and it ends with a `compaction_end` (whether the run
    // then aborts is `checkpoint`'s call).
    let mut ladder = Ladder::new(cap);
    let mut attempts = 0u32;
    let mut committed = false;
    let mut repairs: Vec<OmniMessage> = Vec::new();
    let end = |status: StopReason, attempt: Option<u32>, error_message: Option<String>| {
        build::compaction_end(
            reason,
            mode,
            status,
            RetryDetail {
                error_message,
                attempt,
                retry_in_ms: None,
            },
        )
    };
    // Repairs pair with tool calls the model already committed; they must reach it next time.
    let stash = |repairs: &mut Vec<OmniMessage>| {
        let mut st = shared.state();
        let rest = std::mem::take(&mut st.pending_carry_over);
        st.pending_carry_over = std::mem::take(repairs).into_iter().chain(rest).collect();
    };
    loop {
        if cancel.is_cancelled() {
            stash(&mut repairs);
            emit(
                producer,
                end(
                    StopReason::Aborted,
                    (attempts > 0).then_some(attempts),
                    None,
                ),
            );
            return Summarized {
                status: StopReason::Aborted,
                summary: None,
                committed,
            };
        }
        let attempt = request(
            shared,
            producer,
            input.clone(),
            cancel,
            ladder.reconnects(),
            cap,
        )
        .await;
        attempts += 1;
        if let Some(usage) = attempt.usage {
            emit_stream_only(producer, usage);
        }
        let mut unusable = false;
        let last_error: Option<String>;
        match attempt.outcome.status {
            StopReason::Completed => {
                committed = true;
                base = vec![prompt.clone()];
                repairs.clear();
                let summary = extract_summary(&attempt.text);
                if !summary.is_empty() && attempt.tool_calls.is_empty() {
                    emit(producer, end(StopReason::Completed, Some(attempts), None));
                    start_new_context(shared).await;
                    let summary = build::user_text(marker_block("context_summary", &summary));
                    return Summarized {
                        status: StopReason::Completed,
                        summary: Some(summary),
                        committed,
                    };
                }
                unusable = true;
                last_error = Some(
                    if attempt.tool_calls.is_empty() {
                        "the response contained no usable summary"
                    } else {
                        "the response called tools instead of writing a summary"
                    }
                    .to_owned(),
                );
                for id in &attempt.tool_calls {
                    let repair = build::tool_call_output(
                        texts::COMPACTION_TOOL_REPAIR,
                        id,
                        StopReason::Failed,
                    );
                    shared.record_only(repair.clone());
                    repairs.push(repair);
                }
            }
            StopReason::Aborted => {
                stash(&mut repairs);
                emit(producer, end(StopReason::Aborted, Some(attempts), None));
                return Summarized {
                    status: StopReason::Aborted,
                    summary: None,
                    committed,
                };
            }
            StopReason::Auth => {
                stash(&mut repairs);
                emit(
                    producer,
                    end(
                        StopReason::Failed,
                        Some(attempts),
                        attempt.outcome.error_message,
                    ),
                );
                return Summarized {
                    status: StopReason::Failed,
                    summary: None,
                    committed,
                };
            }
            _ => last_error = attempt.outcome.error_message.clone(),
        }
        // The reference waits out the backoff after an unusable summary too.
        match ladder.climb(shared, cancel, &attempt.outcome).await {
            Rung::Retry => {}
            Rung::Exhausted => {
                stash(&mut repairs);
                emit(
                    producer,
                    end(StopReason::Failed, Some(attempts), last_error),
                );
                return Summarized {
                    status: StopReason::Failed,
                    summary: None,
                    committed,
                };
            }
            Rung::Interrupted => {
                stash(&mut repairs);
                emit(producer, end(StopReason::Aborted, Some(attempts), None));
                return Summarized {
                    status: StopReason::Aborted,
                    summary: None,
                    committed,
                };
            }
        }
        if unusable {
            let guidance = build::user_text(texts::SUMMARY_RETRY_GUIDANCE);
            shared.record_only(guidance.clone());
            input = repairs
                .iter()
                .cloned()
                .chain([guidance])
                .chain(base.iter().cloned())
                .collect();
        }
    }
}

struct Attempt {
    outcome: LlmOutcome,
    text: String,
    tool_calls: Vec<String>,
    usage: Option<OmniMessage>,
}

/// One compaction request (`runCompactionRequest`).
async fn request(
    shared: &Arc<Shared>,
    producer: &Producer<Item>,
    input: Vec<OmniMessage>,
    cancel: &CancellationToken,
    reconnects: u32,
    cap: u32,
) -> Attempt {
    shared.record_only(build::request_begin());
    let mut sink = CompactionSink {
        shared: shared.clone(),
        producer: producer.clone(),
        streamed_text: false,
        text: String::new(),
        tool_calls: Vec::new(),
        usage: None,
    };
    // The compaction request keeps the session's tools and sends no thinking level.
    let request = LlmRequest {
        new_messages: input,
        cancel: cancel.clone(),
        thinking_level: None,
    };
    let outcome = generate(shared, request, &mut sink).await;
    shared.record_only(request_end(shared, &outcome, reconnects, cap));
    Attempt {
        outcome,
        text: sink.text,
        tool_calls: sink.tool_calls,
        usage: sink.usage,
    }
}

struct CompactionSink {
    shared: Arc<Shared>,
    producer: Producer<Item>,
    streamed_text: bool,
    text: String,
    tool_calls: Vec<String>,
    usage: Option<OmniMessage>,
}

#[async_trait]
impl MessageSink for CompactionSink {
    async fn emit(&mut self, msg: OmniMessage) {
        match msg.model() {
            Some(ModelPayload::PartialText(p)) => {
                self.streamed_text |= !p.text.is_empty();
                emit(&self.producer, msg);
                return;
            }
            Some(ModelPayload::Text(t)) => {
                self.text.push_str(&t.text);
                // A model that streams no fragments still shows its summary.
                if !self.streamed_text && !t.text.is_empty() {
                    emit(&self.producer, msg);
                    return;
                }
            }
            Some(ModelPayload::ToolCall(c))
                if c.stop_reason.is_none_or(|r| r == StopReason::Completed) =>
            {
                self.tool_calls.push(c.tool_call_id.clone());
            }
            _ => {}
        }
        if let Some(EventPayload::TokenUsage { session, request }) = msg.event() {
            // Context size and session tokens move; the turn counter does not.
            let mut st = self.shared.state();
            st.counters.last_request_total = request.total;
            st.counters.session_tokens = *session;
            drop(st);
            self.usage = Some(msg.clone());
        }
        self.shared.record_only(msg);
    }
}
