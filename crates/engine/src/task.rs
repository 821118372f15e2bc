//! The run loop (§2.3, §2.8–§2.11): turns until the model stops, with retries and backoff,
//! carry-over, max-turns, and steering and notices delivered between turns.

use std::sync::Arc;

use penguin_llm_providers::CancellationToken;
use penguin_merge_queue::Producer;
use penguin_omni_protocol::markers::marker_block;
use penguin_omni_protocol::{build, ModelPayload, OmniMessage, Role, StopReason, StreamEventType};
use tokio::sync::oneshot;

use crate::carry::{build_carry_over, downgrade_carried_goal_input, with_retried_turns};
use crate::compaction;
use crate::run::{RunOptions, Shared};
use crate::texts;
use crate::turn::{emit, run_turn, Item, TurnParams};

pub(crate) fn abort(producer: &Producer<Item>, reason: impl Into<String>) {
    emit(producer, build::abort(Some(reason.into())));
}

pub(crate) async fn run_to_completion(
    shared: &Arc<Shared>,
    new_messages: Vec<OmniMessage>,
    options: RunOptions,
    producer: &Producer<Item>,
) {
    let RunOptions {
        approver,
        cancel,
        thinking_level,
    } = options;
    let (summary, carry, bootstrap) = {
        let mut st = shared.state();
        (
            st.pending_summary.take(),
            std::mem::take(&mut st.pending_carry_over),
            std::mem::take(&mut st.pending_bootstrap),
        )
    };
    let carry = carry.into_iter().map(downgrade_carried_goal_input);
    let mut input: Vec<OmniMessage> = summary.iter().cloned().chain(carry).collect();
    // Carry-over is never written: its real messages were written when produced, and its
    // synthetic ones are never persisted.
    for msg in summary.iter().chain(&new_messages).chain(&bootstrap) {
        shared.record_only(msg.clone());
    }
    input.extend(new_messages);
    if cancel.is_cancelled() {
        shared.state().pending_carry_over = input;
        abort(producer, texts::ABORTED_BY_USER);
        return;
    }
    let config = &shared.config;
    let mut next_input = input;
    // Notices that arrived while the session was idle ride the first request, after the prompt.
    next_input.extend(deliver_notices(shared, producer));
    let mut turn_count: i64 = 0;
    loop {
        if config.max_turns > 0 && turn_count >= config.max_turns {
            shared.state().pending_carry_over = next_input;
            emit_max_turns(producer, config.max_turns);
            return;
        }
        turn_count += 1;
        let mut failed_turns = Vec::new();
        let mut attempt_input = next_input.clone();
        let mut reconnects = 0;
        let turn = loop {
            let params = TurnParams {
                input: attempt_input.clone(),
                approver: approver.clone(),
                cancel: &cancel,
                thinking_level,
                reconnects,
            };
            let turn = run_turn(shared, producer, params).await;
            let status = turn.outcome.status;
            // A fired interrupt wins even over a completed stream (Case A: tools were cut).
            if cancel.is_cancelled() || status == StopReason::Aborted {
                shared.state().pending_carry_over = build_carry_over(&attempt_input, &turn);
                abort(producer, texts::ABORTED_BY_USER);
                return;
            }
            if status == StopReason::Auth
                || (status == StopReason::Failed && turn.outcome.permanent)
            {
                shared.state().pending_carry_over = build_carry_over(&attempt_input, &turn);
                let msg = turn.outcome.error_message.as_deref().unwrap_or("unknown");
                abort(producer, format!("llm request error: {msg}"));
                return;
            }
            if status == StopReason::Completed {
                break turn;
            }
            let exhausted = match status {
                StopReason::Malformed => format!(
                    "malformed response failed after {} retries",
                    config.max_reconnects
                ),
                StopReason::Failed => format!(
                    "llm request failed after {} retries: {}",
                    config.max_reconnects,
                    turn.outcome.error_message.as_deref().unwrap_or("unknown")
                ),
                _ => format!("reconnect failed after {} retries", config.max_reconnects),
            };
            failed_turns.push(turn);
            attempt_input = with_retried_turns(&next_input, &failed_turns);
            if reconnects >= config.max_reconnects {
                shared.state().pending_carry_over = attempt_input;
                abort(producer, exhausted);
                return;
            }
            reconnects += 1;
            if !backoff(shared, reconnects, &cancel).await {
                shared.state().pending_carry_over = attempt_input;
                abort(producer, texts::ABORTED_DURING_BACKOFF);
                return;
            }
        };
        let mid_task = !turn.tool_outputs.is_empty();
        match compaction::checkpoint(shared, producer, &turn, &cancel).await {
            compaction::Checkpoint::Proceed => {}
            compaction::Checkpoint::EndRun => return,
            compaction::Checkpoint::Continue(input) => {
                next_input = input;
                continue;
            }
        }
        // Notices first: the user's own words come last.
        let mut injected = deliver_notices(shared, producer);
        injected.extend(deliver_steering(shared, producer));
        if !mid_task && injected.is_empty() {
            return;
        }
        let mut stashed = std::mem::take(&mut shared.state().pending_carry_over);
        stashed.extend(turn.tool_outputs);
        stashed.extend(injected);
        next_input = stashed;
        if next_input.is_empty() {
            return;
        }
    }
}

/// Waits out the n-th reconnect delay. False when the interrupt fired.
pub(crate) async fn backoff(shared: &Shared, n: u32, cancel: &CancellationToken) -> bool {
    if cancel.is_cancelled() {
        return false;
    }
    let (wake, woken) = oneshot::channel();
    shared.state().backoff_wake = Some(wake);
    let delay = shared.config.reconnect_delay(n);
    let proceed = tokio::select! {
        biased;
        _ = cancel.cancelled() => false,
        _ = woken => true,
        _ = tokio::time::sleep(delay) => true,
    };
    shared.state().backoff_wake = None;
    proceed
}

/// The max-turns notice: an assistant text cut off with stop_reason failed; no abort follows.
fn emit_max_turns(producer: &Producer<Item>, max_turns: i64) {
    let text = format!("[reached max turns ({max_turns}); stopping]");
    emit(
        producer,
        build::partial_text(StreamEventType::Start, "", StopReason::Completed),
    );
    emit(
        producer,
        build::partial_text(StreamEventType::Delta, text.clone(), StopReason::Completed),
    );
    emit(
        producer,
        build::partial_text(StreamEventType::Stop, "", StopReason::Failed),
    );
    emit(producer, build::assistant_text(text, StopReason::Failed));
}

/// Drains the harness notices (§2.11): each is streamed and written, and returned for the next
/// input.
pub(crate) fn deliver_notices(shared: &Shared, producer: &Producer<Item>) -> Vec<OmniMessage> {
    let notices = std::mem::take(&mut shared.state().notices);
    for msg in &notices {
        emit(producer, msg.clone());
    }
    notices
}

/// Drains the steering queue, each queued input becoming one `[user_steering]` user text
/// (its user texts joined) followed by the rest of that input unchanged, and returns them for
/// the next input. Every message is streamed and written.
///
/// The steering text is there even when the input had no user text (an image alone): it is
/// what marks the images after it as steering rather than the start of a new task.
pub(crate) fn deliver_steering(shared: &Shared, producer: &Producer<Item>) -> Vec<OmniMessage> {
    let queued = std::mem::take(&mut shared.state().steering);
    let mut delivered = Vec::new();
    for (_, input) in queued {
        let mut texts = Vec::new();
        let mut rest = Vec::new();
        for msg in input {
            match msg.model() {
                Some(ModelPayload::Text(t)) if t.role == Role::User => texts.push(t.text.clone()),
                _ => rest.push(msg),
            }
        }
        delivered.push(build::user_text(marker_block(
            "user_steering",
            &texts.join("\n\n"),
        )));
        delivered.extend(rest);
    }
    for msg in &delivered {
        emit(producer, msg.clone());
    }
    delivered
}
