//! What the fixture tests share: running a fixture through a decoder, splitting bodies, and
//! the expected-stream builders.

#![allow(dead_code)]

use penguin_llm_providers::testing::{check_discipline, replay, split_at, without_timestamps};
use penguin_llm_providers::wire::StreamDecoder;
use penguin_llm_providers::{LlmOutcome, ToolCallIdAllocator};
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
    split_at(body, cuts.iter().map(|i| i.index(body.len() + 1)))
}

/// One protocol's fixtures: the `tests/fixtures/<dir>` bodies and the decoder that reads them.
///
/// Every run checks the streaming discipline, so no test can forget it.
pub struct Fixtures<D> {
    dir: &'static str,
    decoder: fn() -> D,
}

impl<D: StreamDecoder> Fixtures<D> {
    /// The fixtures under `tests/fixtures/<dir>`, each decoded by a fresh `decoder()`.
    pub const fn new(dir: &'static str, decoder: fn() -> D) -> Fixtures<D> {
        Fixtures { dir, decoder }
    }

    /// The bytes of fixture `name`.
    pub fn body(&self, name: &str) -> Vec<u8> {
        fixture(self.dir, name)
    }

    /// The raw messages and outcome for `chunks`, after checking the streaming discipline.
    pub fn replay(
        &self,
        name: &str,
        chunks: &[&[u8]],
        ids: ToolCallIdAllocator,
    ) -> (Vec<penguin_omni_protocol::OmniMessage>, LlmOutcome) {
        let (msgs, outcome) = replay((self.decoder)(), chunks, ids);
        check_discipline(&msgs).unwrap_or_else(|e| panic!("{name}: {e}"));
        (msgs, outcome)
    }

    /// `chunks` (of fixture `name`, which only labels failures) as timestamp-free JSON lines,
    /// with the given id allocator.
    pub fn run_chunks_with(
        &self,
        name: &str,
        chunks: &[&[u8]],
        ids: ToolCallIdAllocator,
    ) -> (Vec<String>, LlmOutcome) {
        let (msgs, outcome) = self.replay(name, chunks, ids);
        (without_timestamps(&msgs), outcome)
    }

    /// `chunks` as timestamp-free JSON lines, with a fresh id allocator.
    pub fn run_chunks(&self, name: &str, chunks: &[&[u8]]) -> (Vec<String>, LlmOutcome) {
        self.run_chunks_with(name, chunks, ToolCallIdAllocator::new())
    }

    /// Fixture `name` in one chunk.
    pub fn run(&self, name: &str) -> (Vec<String>, LlmOutcome) {
        self.run_chunks(name, &[&self.body(name)])
    }

    /// Fixture `name` split at `cuts` (see [`split`]).
    pub fn run_split(
        &self,
        name: &str,
        cuts: &[proptest::sample::Index],
    ) -> (Vec<String>, LlmOutcome) {
        let body = self.body(name);
        self.run_chunks(name, &split(&body, cuts))
    }

    /// Each fixture fed one byte at a time must give what it gives in one chunk: the hardest
    /// split for the SSE framing and UTF-8 reassembly.
    pub fn assert_byte_at_a_time_is_whole(&self, names: &[&str]) {
        for name in names {
            let body = self.body(name);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            assert_eq!(self.run_chunks(name, &bytes), self.run(name), "{name}");
        }
    }
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

/// The reply every llama.cpp recording (SmolLM2, "What color is the sky?") holds, as the server tokenized it.
pub const SKY: [&str; 24] = [
    "The",
    " sky",
    " is",
    " often",
    " described",
    " as",
    " a",
    " deep",
    " shade",
    " of",
    " blue",
    ",",
    " but",
    " in",
    " reality",
    ",",
    " the",
    " sky",
    " can",
    " be",
    " a",
    " range",
    " of",
    " colors",
];
