//! A directory of response bodies and the decoder that reads them.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::translate::ToolCallIdAllocator;
use crate::wire::StreamDecoder;
use crate::LlmOutcome;

use super::{check_body, replay_checked, split_at, Replay, Replays};

/// One protocol's fixtures: the response bodies in a directory (every file but `README*`,
/// `*.md` and hidden ones) and the decoder that reads them.
///
/// Every replay is held to [`check_replay`](super::check_replay), so no test can forget the
/// streaming discipline. [`check_all`](Fixtures::check_all) runs every generic check on
/// every fixture; the other methods serve tests of one fixture.
pub struct Fixtures<D> {
    dir: PathBuf,
    decoder: fn() -> D,
}

impl<D> fmt::Debug for Fixtures<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixtures").field("dir", &self.dir).finish()
    }
}

impl<D: StreamDecoder> Fixtures<D> {
    /// The fixtures in `dir` (a relative path is taken from the current directory, which is
    /// the package's root under `cargo test`), each decoded by a fresh `decoder()`.
    pub fn new(dir: impl Into<PathBuf>, decoder: fn() -> D) -> Fixtures<D> {
        Fixtures {
            dir: dir.into(),
            decoder,
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The fixtures' file names, sorted. Panics when the directory cannot be read.
    pub fn names(&self) -> Vec<String> {
        let entries = std::fs::read_dir(&self.dir)
            .unwrap_or_else(|e| panic!("cannot list the fixtures in {}: {e}", self.dir.display()));
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.') && !n.starts_with("README") && !n.ends_with(".md"))
            .collect();
        names.sort();
        names
    }

    /// The bytes of fixture `name`.
    pub fn body(&self, name: &str) -> Vec<u8> {
        let path = self.dir.join(name);
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()))
    }

    /// `chunks` (of fixture `name`, which only labels failures) replayed with `ids`, checked.
    pub fn replay(&self, name: &str, chunks: &[&[u8]], ids: ToolCallIdAllocator) -> Replay {
        replay_checked((self.decoder)(), chunks, ids, name)
    }

    /// `chunks` as timestamp-free JSON lines, and the outcome, with the given id allocator.
    pub fn run_chunks_with(
        &self,
        name: &str,
        chunks: &[&[u8]],
        ids: ToolCallIdAllocator,
    ) -> (Vec<String>, LlmOutcome) {
        self.replay(name, chunks, ids).observed()
    }

    /// `chunks` as timestamp-free JSON lines, and the outcome, with a fresh id allocator.
    pub fn run_chunks(&self, name: &str, chunks: &[&[u8]]) -> (Vec<String>, LlmOutcome) {
        self.run_chunks_with(name, chunks, ToolCallIdAllocator::new())
    }

    /// Fixture `name` in one chunk, as lines and outcome.
    pub fn run(&self, name: &str) -> (Vec<String>, LlmOutcome) {
        self.run_chunks(name, &[&self.body(name)])
    }

    /// Fixture `name` cut at `cuts` (any order; each taken modulo the body's length + 1).
    pub fn run_split(
        &self,
        name: &str,
        cuts: impl IntoIterator<Item = usize>,
    ) -> (Vec<String>, LlmOutcome) {
        let body = self.body(name);
        let len = body.len() + 1;
        self.run_chunks(name, &split_at(&body, cuts.into_iter().map(|c| c % len)))
    }

    /// Fixture `name` cut off at the start of the line holding the first `needle` (a stream
    /// that ended before that line), replayed and checked. Panics when `needle` is absent.
    pub fn cut_before(&self, name: &str, needle: &str) -> Replay {
        let body = self.body(name);
        let at = body
            .windows(needle.len().max(1))
            .position(|w| w == needle.as_bytes())
            .unwrap_or_else(|| panic!("{name} holds no {needle:?}"));
        let line_start = body[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        self.replay(
            &format!("{name} cut before {needle:?}"),
            &[&body[..line_start]],
            ToolCallIdAllocator::new(),
        )
    }

    /// [`check_body`] of fixture `name`: replay, split invariance, clean truncation.
    pub fn check(&self, name: &str) -> Replay {
        check_body(self.decoder, &self.body(name), name)
    }

    /// [`check`](Fixtures::check) of every fixture, by name. Panics when there is none.
    pub fn check_all(&self) -> Replays {
        let names = self.names();
        assert!(
            !names.is_empty(),
            "no fixtures in {}: a wrong path must not pass",
            self.dir.display()
        );
        names
            .into_iter()
            .map(|name| {
                let replay = self.check(&name);
                (name, replay)
            })
            .collect()
    }
}
