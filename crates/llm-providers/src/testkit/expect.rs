//! Builders for expected streams: each returns the messages one segment gives, so a test
//! writes a whole response as `expect(vec![thinking_segment(…), text_segment(…), usage(…)])`
//! and compares it with [`Replay::lines`](super::Replay::lines).

use penguin_omni_protocol::{
    build, Fidelity, OmniMessage, StopReason, StreamEventType, TokenCounts,
};
use serde_json::Value;

use StopReason::Completed;
use StreamEventType::{Delta, Start, Stop};

/// A fidelity object from a JSON object literal (`fidelity(json!({"signature": "…"}))`).
/// Panics on anything but an object.
pub fn fidelity(v: Value) -> Option<Fidelity> {
    match v {
        Value::Object(m) => Some(m),
        other => panic!("fidelity must be an object, got {other}"),
    }
}

/// A text segment: start, the deltas, stop with `reason`, and the complete text.
pub fn text_segment(deltas: &[&str], reason: StopReason) -> Vec<OmniMessage> {
    let mut v = vec![build::partial_text(Start, "", Completed)];
    v.extend(
        deltas
            .iter()
            .map(|d| build::partial_text(Delta, *d, Completed)),
    );
    v.push(build::partial_text(Stop, "", reason));
    v.push(build::assistant_text(deltas.concat(), reason));
    v
}

/// A thinking segment: start, the deltas, stop with `reason`, and the complete thinking with
/// `fidelity`.
pub fn thinking_segment(
    deltas: &[&str],
    reason: StopReason,
    fidelity: Option<Fidelity>,
) -> Vec<OmniMessage> {
    let mut v = vec![build::partial_thinking(Start, "", Completed)];
    v.extend(
        deltas
            .iter()
            .map(|d| build::partial_thinking(Delta, *d, Completed)),
    );
    v.push(build::partial_thinking(Stop, "", reason));
    v.push(build::thinking(deltas.concat(), reason, fidelity));
    v
}

/// A streamed tool call's start and its first argument deltas.
pub fn tool_start(name: &str, id: &str, deltas: &[&str]) -> Vec<OmniMessage> {
    let mut v = vec![build::partial_tool_call(Start, name, "", id, Completed)];
    v.extend(tool_deltas(id, deltas));
    v
}

/// Argument deltas of a started tool call.
pub fn tool_deltas(id: &str, deltas: &[&str]) -> Vec<OmniMessage> {
    deltas
        .iter()
        .map(|d| build::partial_tool_call(Delta, "", *d, id, Completed))
        .collect()
}

/// A streamed tool call's stop and its complete message (`arguments` as the translator
/// serializes them: compact JSON).
pub fn tool_end(name: &str, arguments: &str, id: &str, reason: StopReason) -> Vec<OmniMessage> {
    vec![
        build::partial_tool_call(Stop, "", "", id, reason),
        build::tool_call(name, arguments, id, reason, None),
    ]
}

/// A tool call that arrived whole (no fragments): only its complete message.
pub fn whole_tool_call(
    name: &str,
    arguments: &str,
    id: &str,
    reason: StopReason,
    fidelity: Option<Fidelity>,
) -> Vec<OmniMessage> {
    vec![build::tool_call(name, arguments, id, reason, fidelity)]
}

/// The token counts of an expected [`usage`], by name (the total is their sum):
/// `usage(Tokens { uncached_prompt: 26, output: 8, ..Tokens::default() })`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// The rest of the prompt (`cache_write` on the wire).
    pub uncached_prompt: u64,
    /// Thinking plus response tokens.
    pub output: u64,
}

/// The `token_usage` of a first request (session = request).
pub fn usage(tokens: Tokens) -> Vec<OmniMessage> {
    let c = TokenCounts::new(tokens.cache_read, tokens.uncached_prompt, tokens.output);
    vec![build::token_usage(c, c)]
}

/// The expected stream as timestamp-free JSON lines.
pub fn expect(parts: Vec<Vec<OmniMessage>>) -> Vec<String> {
    super::without_timestamps(&parts.concat())
}
