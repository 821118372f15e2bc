//! The run loop (protocol [§2.3](penguin_omni_protocol::spec#s2.3) *A run*,
//! [§2.4](penguin_omni_protocol::spec#s2.4) *The turn loop* and
//! [§2.8](penguin_omni_protocol::spec#s2.8)–[§2.11](penguin_omni_protocol::spec#s2.11)): turns
//! until the model stops, with retries and backoff, carry-over, max-turns, and steering and notices
//! delivered between turns.

use std::sync::Arc;

use penguin_llm_providers::{CancellationToken, ThinkingLevel};
use penguin_merge_queue::Producer;
use penguin_omni_protocol::{build, OmniMessage, StopReason, StreamEventType};

use crate::carry::{build_carry_over, downgrade_carried_goal_input, with_retried_turns};
use crate::compaction;
use crate::environment::Approver;
use crate::request::{Ladder, Rung};
use crate::shared::{abort, deliver_notices, deliver_steering, emit, Item, Shared};
use crate::texts;
use crate::turn::{run_turn, TurnParams};

/// One run, from its prompt to its last message; `approver`, `cancel` and `thinking_level`
/// are the run's [`RunOptions`](crate::RunOptions).
pub(crate) async fn run_to_completion(
    shared: &Arc<Shared>,
    new_messages: Vec<OmniMessage>,
    approver: Option<Arc<dyn Approver>>,
    cancel: CancellationToken,
    thinking_level: Option<ThinkingLevel>,
    producer: &Producer<Item>,
) {
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
        // The turn's retry loop. Compaction's (`compaction::summarize_context`) climbs the
        // same ladder, but its attempts differ: it checks the interrupt before each request,
        // retries permanent failures and unusable summaries, and ends with a `compaction_end`
        // rather than an `abort`. So each loop keeps its own body; `Ladder` is their common
        // part (the budget, the reconnect count, the backoff).
        let mut ladder = Ladder::new(config.max_reconnects);
        let turn = loop {
            let params = TurnParams {
                input: attempt_input.clone(),
                approver: approver.clone(),
                cancel: &cancel,
                thinking_level,
                reconnects: ladder.reconnects(),
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
            let outcome = turn.outcome.clone();
            failed_turns.push(turn);
            attempt_input = with_retried_turns(&next_input, &failed_turns);
            match ladder.climb(shared, &cancel, &outcome).await {
                Rung::Retry => {}
                Rung::Exhausted => {
                    shared.state().pending_carry_over = attempt_input;
                    abort(producer, exhausted);
                    return;
                }
                Rung::Interrupted => {
                    shared.state().pending_carry_over = attempt_input;
                    abort(producer, texts::ABORTED_DURING_BACKOFF);
                    return;
                }
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
