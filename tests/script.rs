//! Building scenario scripts for the generated-interleaving proptests.

use serde_json::{json, Value};

/// `{delay_ms, message}` steps of one scripted request, the delays taken in turn from `delays`.
///
/// A complete follows its stop at once: a script that waits between them can be cut there, and
/// the scripted model then leaves the segment without its complete (the scenario format's rule),
/// which is a broken script rather than an engine behaviour.
pub fn timed_stream(steps: Vec<Value>, delays: &[u64]) -> Vec<Value> {
    let mut after_stop = false;
    steps
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let delay = if after_stop {
                0
            } else {
                delays[i % delays.len()]
            };
            after_stop = m["payload"]["event_type"] == "stop";
            json!({"delay_ms": delay, "message": m})
        })
        .collect()
}
