//! One model request (protocol [§2.7](penguin_omni_protocol::spec#s2.7) *request_end and
//! token_usage*) and the reconnect ladder between attempts
//! ([§2.8](penguin_omni_protocol::spec#s2.8) *The reconnect ladder*), shared by the run loop's
//! turns (`task.rs`, through `turn.rs`) and compaction's summary requests.
//!
//! Both retry loops climb the same [`Ladder`]: the retry budget, the reconnect count and the
//! backoff between attempts are implemented once, here. What one attempt is, and which of its
//! outcomes end the loop, is each loop's own (see the loops' comments), so the loops
//! themselves stay two.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use penguin_llm_providers::{CancellationToken, LlmOutcome, LlmRequest, MessageSink};
use penguin_omni_protocol::build::{self, RetryDetail};
use penguin_omni_protocol::{OmniMessage, StopReason};
use tokio::sync::oneshot;

use crate::shared::Shared;

/// Runs one model request. The trait promises never to panic; a panicking adapter still must
/// not take the run down with it, so it becomes a failed request like any other error.
pub(crate) async fn generate(
    shared: &Shared,
    request: LlmRequest,
    sink: &mut dyn MessageSink,
) -> LlmOutcome {
    let mut llm = shared.llm.lock().await;
    AssertUnwindSafe(llm.stream_generate(request, sink))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            LlmOutcome::with_message(
                StopReason::Failed,
                format!("llm panicked: {}", panic_text(&panic)),
            )
        })
}

/// Stamps `request_end` ([§2.7](penguin_omni_protocol::spec#s2.7) *request_end and token_usage*);
/// `cap` is the retry budget the request runs under.
pub(crate) fn request_end(
    shared: &Shared,
    outcome: &LlmOutcome,
    reconnects: u32,
    cap: u32,
) -> OmniMessage {
    let status = outcome.status;
    let retryable = matches!(
        status,
        StopReason::Failed | StopReason::Timeout | StopReason::Malformed
    );
    build::request_end(
        status,
        RetryDetail {
            error_message: outcome.error_message.clone(),
            attempt: (status != StopReason::Completed || reconnects > 0).then_some(reconnects + 1),
            retry_in_ms: (retryable && !outcome.permanent && reconnects < cap)
                .then(|| retry_delay(shared, reconnects + 1, outcome).as_millis() as u64),
        },
    )
}

/// The wait before the n-th reconnect after `outcome`: what the provider asked for (a 429 or
/// 503's `Retry-After`, which the HTTP shell writes into the message, see
/// [`penguin_llm_providers::failure::with_retry_after`]) capped at the ladder's ceiling
/// (`reconnect_backoff_max`), else the ladder's own `min(base · 2^(n-1), ceiling)`.
pub(crate) fn retry_delay(shared: &Shared, n: u32, outcome: &LlmOutcome) -> Duration {
    match asked_wait(outcome) {
        Some(asked) => asked.min(shared.config.reconnect_backoff_max),
        None => shared.config.reconnect_delay(n),
    }
}

/// The wait a failed request's provider asked for, if any.
pub(crate) fn asked_wait(outcome: &LlmOutcome) -> Option<Duration> {
    outcome
        .error_message
        .as_deref()
        .and_then(penguin_llm_providers::failure::retry_after)
}

/// The message of a caught panic.
pub(crate) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// A retry loop's place on the reconnect ladder: how many reconnects it made, out of how many
/// it may make.
#[derive(Debug)]
pub(crate) struct Ladder {
    cap: u32,
    reconnects: u32,
}

/// What [`Ladder::climb`] did after a failed attempt.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rung {
    /// The backoff was waited out (or cut short): make the next attempt.
    Retry,
    /// The budget was used up: no backoff, no further attempt.
    Exhausted,
    /// The interrupt fired before or during the backoff.
    Interrupted,
}

impl Ladder {
    /// A loop that may reconnect `cap` times.
    pub(crate) fn new(cap: u32) -> Ladder {
        Ladder { cap, reconnects: 0 }
    }

    /// Reconnects made so far (the next attempt's `attempt` is this plus one).
    pub(crate) fn reconnects(&self) -> u32 {
        self.reconnects
    }

    /// After the failed attempt that ended with `outcome`: [`Rung::Exhausted`] when the budget
    /// is used up, otherwise one more reconnect and its backoff ([`retry_delay`]: the wait the
    /// provider asked for, within the ceiling, or the ladder's own).
    pub(crate) async fn climb(
        &mut self,
        shared: &Shared,
        cancel: &CancellationToken,
        outcome: &LlmOutcome,
    ) -> Rung {
        if self.reconnects >= self.cap {
            return Rung::Exhausted;
        }
        self.reconnects += 1;
        let delay = retry_delay(shared, self.reconnects, outcome);
        if backoff(shared, delay, cancel).await {
            Rung::Retry
        } else {
            Rung::Interrupted
        }
    }
}

/// Waits out a reconnect delay. False when the interrupt fired.
async fn backoff(shared: &Shared, delay: Duration, cancel: &CancellationToken) -> bool {
    if cancel.is_cancelled() {
        return false;
    }
    let (wake, woken) = oneshot::channel();
    shared.state().backoff_wake = Some(wake);
    let proceed = tokio::select! {
        biased;
        _ = cancel.cancelled() => false,
        _ = woken => true,
        _ = tokio::time::sleep(delay) => true,
    };
    shared.state().backoff_wake = None;
    proceed
}
