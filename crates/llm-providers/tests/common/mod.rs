//! What the fixture tests share beyond the test kit: where the fixtures are, and the reply
//! every llama.cpp recording holds.

#![allow(dead_code)]

use std::path::PathBuf;

pub use penguin_llm_providers::testkit::expect::*;
pub use penguin_llm_providers::testkit::Fixtures;
use penguin_llm_providers::wire::StreamDecoder;

/// `tests/fixtures/<dir>` of this package.
pub fn fixture_dir(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
}

/// The fixtures under `tests/fixtures/<dir>`, each decoded by a fresh `decoder()`.
pub fn fixtures<D: StreamDecoder>(dir: &str, decoder: fn() -> D) -> Fixtures<D> {
    Fixtures::new(fixture_dir(dir), decoder)
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
