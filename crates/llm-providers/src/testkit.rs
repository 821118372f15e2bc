//! The adapter test kit (feature `testkit`): the checks every provider adapter must pass, in
//! a few lines per adapter, for this crate's adapters and for one written anywhere else.
//!
//! An adapter is a pure decoder plus request building (see [`crate::wire`]); the kit holds it
//! to the same bar as penguin's own adapters:
//!
//! - **Fixture replay** ([`replay_fixtures`], [`Fixtures`]): every response body recorded (or
//!   written from the provider's documentation) under a directory is decoded and translated
//!   exactly as the HTTP shell would, without I/O, and checked for the streaming discipline
//!   (every segment `start → delta* → stop` then its complete message, nothing left open,
//!   `token_usage` last and only on completion). The caller then compares each replay with
//!   the exact expected stream, written with [`expect`]'s builders.
//!   [`assert_lines`] (or [`Replay::assert_lines`]) compares them, and on a difference prints
//!   the first differing message and a line diff.
//! - **Split invariance** ([`assert_split_invariant`]): the body fed one byte at a time, cut
//!   at every single point, and cut at hundreds of seeded random sets of points (empty chunks
//!   included) must give exactly the messages and outcome of the whole body.
//! - **Clean truncation** ([`assert_truncations_are_clean`]): any prefix of a body (a stream
//!   cut off anywhere) still closes every segment it opened and yields no `token_usage` unless
//!   it completed.
//! - **Message caps** ([`assert_message_cap`]): a message streamed past `max_message_bytes`
//!   ends the response with the permanent refusal naming the limit, having streamed no more
//!   than the cap.
//! - **Request fixtures** ([`requests`]): the JSON bodies an adapter builds compared with
//!   fixture files, among them [`requests::image_requests`], the images of a user's input and
//!   of a tool's output in the adapter's wire form.
//! - **Fault injection** ([`faults::FaultSuite`], over [`server::Server`], a local HTTP
//!   server playing canned responses): the adapter inside the real [`HttpModel`](crate::HttpModel)
//!   against dropped connections, HTTP errors, stalls, cut streams, error events, interrupts,
//!   a runaway message, a line that never ends and a huge error body. An adapter describes
//!   its wire events once ([`faults::WireScript`]); the suite does the rest.
//!
//! Split seeds are fixed (derived from each fixture's name) so failures reproduce; set
//! `PENGUIN_TESTKIT_SEED=<u64>` to explore other splits.
//!
//! # Example
//!
//! A toy protocol (one line per event: `t:<text>`, then `end`) tested with the kit; a real
//! adapter's decoder goes where `Toy` is, and [`replay_fixtures`] runs the same checks over
//! a directory of bodies.
//!
//! ```
//! use penguin_llm_providers::testkit::{self, expect::*};
//! use penguin_llm_providers::{ContentItem, StreamDecoder, UniEvent, WireError};
//! use penguin_omni_protocol::StopReason::{Completed, Malformed};
//!
//! #[derive(Debug, Default)]
//! struct Toy {
//!     line: Vec<u8>,
//!     ended: bool,
//! }
//!
//! impl StreamDecoder for Toy {
//!     fn feed(&mut self, chunk: &[u8], out: &mut Vec<UniEvent>) -> Result<(), WireError> {
//!         for &b in chunk {
//!             if b != b'\n' {
//!                 self.line.push(b);
//!                 continue;
//!             }
//!             let line = String::from_utf8(std::mem::take(&mut self.line))
//!                 .map_err(|e| WireError::Malformed(e.to_string()))?;
//!             match line.strip_prefix("t:") {
//!                 Some(text) => out.push(UniEvent::item(ContentItem::Text {
//!                     text: text.to_owned(),
//!                     fidelity: None,
//!                 })),
//!                 None if line == "end" => {
//!                     self.ended = true;
//!                     out.push(UniEvent { finish_reason: Some("stop".into()), ..UniEvent::default() });
//!                 }
//!                 None => return Err(WireError::Malformed(format!("bad line {line:?}"))),
//!             }
//!         }
//!         Ok(())
//!     }
//!
//!     fn finish(&mut self, _out: &mut Vec<UniEvent>) -> Result<(), WireError> {
//!         match self.ended {
//!             true => Ok(()),
//!             false => Err(WireError::Malformed("Last event must carry `end`".into())),
//!         }
//!     }
//! }
//!
//! let body = "t:Hel\nt:lo, wörld\nend\n".as_bytes();
//! // Replay, discipline, split invariance and clean truncation, in one call.
//! let replay = testkit::check_body(Toy::default, body, "toy");
//! replay.assert_lines(&expect(vec![
//!     text_segment(&["Hel", "lo, wörld"], Completed),
//!     usage(Tokens::default()),
//! ]));
//! // A cut-off body closes the text it opened.
//! let cut = testkit::replay_checked(Toy::default(), &[&body[..9]], Default::default(), "cut");
//! assert_eq!(cut.outcome.status, Malformed);
//! assert_eq!(cut.described().last().unwrap(), "text \"Hel\" malformed");
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use penguin_omni_protocol::{EventPayload, OmniMessage, StopReason};

use crate::limits::human_bytes;
use crate::translate::ToolCallIdAllocator;
use crate::wire::{StreamDecoder, WireProtocol};
use crate::LlmOutcome;

pub mod expect;
pub mod faults;
mod fixtures;
pub mod requests;
pub mod server;
mod splits;
mod stream;

pub use fixtures::Fixtures;
pub use splits::{assert_split_invariant, assert_truncations_are_clean};
pub use stream::{
    assert_lines, check_discipline, describe, describe_all, lines_diff, replay, replay_limited,
    split_at, without_timestamp, without_timestamps,
};

/// What one response body gave: the messages the shell would yield and the outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// Every message, in order (`token_usage` last on completion).
    pub messages: Vec<OmniMessage>,
    /// How the request ended.
    pub outcome: LlmOutcome,
}

impl Replay {
    /// The messages as timestamp-free JSON lines ([`without_timestamps`]): compare these with
    /// [`expect::expect`] of the expected stream.
    pub fn lines(&self) -> Vec<String> {
        without_timestamps(&self.messages)
    }

    /// The messages in [`describe`]'s compact form, for readable assertions.
    pub fn described(&self) -> Vec<String> {
        describe_all(&self.messages)
    }

    /// The bytes of every delta fragment streamed (text, thinking, arguments).
    pub fn streamed_bytes(&self) -> usize {
        self.messages
            .iter()
            .filter_map(|m| m.model()?.partial_parts())
            .map(|(_, content)| content.len())
            .sum()
    }

    /// Asserts that the messages are `want`'s lines ([`assert_lines`]: on a difference, the
    /// first differing message and a line diff).
    #[track_caller]
    pub fn assert_lines(&self, want: &[String]) {
        assert_lines(&self.lines(), want);
    }

    /// The lines and the outcome, the pair the split checks compare.
    pub fn observed(&self) -> (Vec<String>, LlmOutcome) {
        (self.lines(), self.outcome.clone())
    }
}

/// Every fixture's replay, by file name.
pub type Replays = BTreeMap<String, Replay>;

/// Checks what a request's output must always satisfy: [`check_discipline`], and
/// `token_usage` as the last message of a completed request and nowhere in any other.
pub fn check_replay(replay: &Replay) -> Result<(), String> {
    check_discipline(&replay.messages)?;
    let usage_at = replay
        .messages
        .iter()
        .position(|m| matches!(m.event(), Some(EventPayload::TokenUsage { .. })));
    match (replay.outcome.status, usage_at) {
        (StopReason::Completed, Some(i)) if i + 1 == replay.messages.len() => Ok(()),
        (StopReason::Completed, _) => Err("a completed request must end with token_usage".into()),
        (status, Some(i)) => Err(format!(
            "message {i}: token_usage in a request that ended {}",
            status.as_str()
        )),
        (_, None) => Ok(()),
    }
}

/// [`replay`] of `chunks`, checked with [`check_replay`]; panics naming `label` on a
/// violation.
pub fn replay_checked<D: StreamDecoder>(
    decoder: D,
    chunks: &[&[u8]],
    ids: ToolCallIdAllocator,
    label: &str,
) -> Replay {
    let (messages, outcome) = replay(decoder, chunks, ids);
    let replay = Replay { messages, outcome };
    if let Err(e) = check_replay(&replay) {
        panic!(
            "{label}: {e}\n{:#?}\noutcome: {:?}",
            replay.described(),
            replay.outcome
        );
    }
    replay
}

/// Every generic check on one body: the whole body's replay ([`replay_checked`]),
/// [`assert_split_invariant`] and [`assert_truncations_are_clean`]. Returns the whole body's
/// replay, for the caller to compare with the exact expected stream.
pub fn check_body<D: StreamDecoder>(decoder: impl Fn() -> D, body: &[u8], label: &str) -> Replay {
    let whole = replay_checked(decoder(), &[body], ToolCallIdAllocator::new(), label);
    assert_split_invariant(&decoder, body, label);
    assert_truncations_are_clean(&decoder, body, label);
    whole
}

/// Runs [`check_body`] on every fixture in `dir` (every file but `README*` and `*.md`) with
/// protocol `P`'s decoder, and returns the replays by file name. Panics when `dir` holds no
/// fixture, so a wrong path cannot pass.
///
/// ```no_run
/// # #[cfg(feature = "ollama")] {
/// use penguin_llm_providers::{testkit, LlmOutcome, Ollama};
/// let replays = testkit::replay_fixtures::<Ollama>("tests/fixtures/ollama");
/// assert_eq!(replays["text_only.ndjson"].outcome, LlmOutcome::completed());
/// # }
/// ```
pub fn replay_fixtures<P: WireProtocol>(dir: impl AsRef<Path>) -> Replays {
    Fixtures::new(dir.as_ref(), <P::Decoder as Default>::default).check_all()
}

/// Replays `chunks` under a `max_message_bytes` cap ([`replay_limited`]) and asserts the
/// refusal of a message that outgrew it: the outcome is the permanent failure naming `what`
/// (`"a text message"`, `"a thinking message"`, `"the arguments of tool call ID (NAME)"`)
/// and the limit, the discipline holds, no more than the cap was streamed, and the last
/// message is the complete message of type `kind` (`"text"`, `"thinking"`, `"tool_call"`)
/// closed `failed`. Returns the replay for further checks.
pub fn assert_message_cap<D: StreamDecoder>(
    decoder: D,
    chunks: &[&[u8]],
    max_message_bytes: usize,
    what: &str,
    kind: &str,
) -> Replay {
    let (messages, outcome) = replay_limited(
        decoder,
        chunks,
        ToolCallIdAllocator::new(),
        max_message_bytes,
    );
    let replay = Replay { messages, outcome };
    if let Err(e) = check_replay(&replay) {
        panic!("{what}: {e}\n{:#?}", replay.described());
    }
    assert_eq!(
        replay.outcome,
        LlmOutcome::permanent_failure(format!(
            "model output too large: {what} passed max_message_bytes ({}); the rest of the response was not read",
            human_bytes(max_message_bytes)
        )),
        "{what}"
    );
    let streamed = replay.streamed_bytes();
    assert!(
        streamed <= max_message_bytes,
        "{what}: {streamed} bytes streamed past a cap of {max_message_bytes}"
    );
    let described = replay.described();
    let last = described.last().map(String::as_str).unwrap_or("");
    assert!(
        last.starts_with(&format!("{kind} ")) && last.ends_with(" failed"),
        "{what}: the last message must be the complete {kind}, failed: {last:.120}"
    );
    replay
}
