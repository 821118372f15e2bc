//! Expected-stream builders shared by the fixture tests.

#![allow(dead_code)]

use penguin_llm_providers::testing::without_timestamps;
use penguin_omni_protocol::{
    build, Fidelity, OmniMessage, StopReason, StreamEventType, TokenCounts,
};
use serde_json::Value;

use StopReason::Completed;
use StreamEventType::{Delta, Start, Stop};

/// Reads `tests/fixtures/<dir>/<name>`.
pub fn fixture(dir: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {path}: {e}"))
}

/// Splits `body` at the given cut points (any order, any value; taken modulo the length).
pub fn split<'a>(body: &'a [u8], cuts: &[proptest::sample::Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut prev = 0;
    for p in points {
        chunks.push(&body[prev..p]);
        prev = p;
    }
    chunks.push(&body[prev..]);
    chunks
}

/// A fidelity object from a JSON object literal.
pub fn fidelity(v: Value) -> Option<Fidelity> {
    match v {
        Value::Object(m) => Some(m),
        other => panic!("fidelity must be an object, got {other}"),
    }
}

/// start, the deltas, stop with `reason`, and the complete text.
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

/// start, the deltas, stop with `reason`, and the complete thinking with `fidelity`.
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

/// A tool call's start and its first argument deltas.
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

/// A tool call's stop and its complete message.
pub fn tool_end(name: &str, arguments: &str, id: &str, reason: StopReason) -> Vec<OmniMessage> {
    vec![
        build::partial_tool_call(Stop, "", "", id, reason),
        build::tool_call(name, arguments, id, reason, None),
    ]
}

/// `token_usage` of a first request (session = request).
pub fn usage(cache_read: u64, cache_write: u64, output: u64) -> Vec<OmniMessage> {
    let c = TokenCounts::new(cache_read, cache_write, output);
    vec![build::token_usage(c, c)]
}

/// The expected stream as timestamp-free JSON lines.
pub fn expect(parts: Vec<Vec<OmniMessage>>) -> Vec<String> {
    without_timestamps(&parts.concat())
}
