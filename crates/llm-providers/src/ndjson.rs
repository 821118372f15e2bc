//! Newline-delimited JSON framing (`application/x-ndjson`), the NDJSON counterpart of
//! [`crate::sse`]: one JSON object per line, the body in arbitrary chunks.
//!
//! Bytes are buffered until a whole line is present, and only whole lines are decoded as
//! UTF-8, so a multi-byte character or a `\r\n` split across two chunks decodes the same as if
//! it had arrived in one piece. A line ends with `\n` (a `\r` before it is dropped); blank
//! lines are skipped. What one line may hold is bounded
//! ([`NdjsonDecoder::with_max_line_bytes`]) the moment its bytes arrive, so a peer that never
//! ends a line cannot make the decoder buffer the whole body.
//!
//! An adapter implements [`NdjsonLineHandler`] (one line's JSON in, one
//! [`UniEvent`] out) and uses [`NdjsonStreamDecoder`] as its
//! [`StreamDecoder`]; [`crate::ollama`] is the worked example.

use std::fmt;

use crate::limits::human_bytes;
use crate::sse::{CUT_OFF_PREFIX, NO_EVENTS};
use crate::translate::UniEvent;
use crate::wire::{StreamDecoder, WireError};

/// Why a body could not be framed into lines.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NdjsonError {
    /// A line of the body is not valid UTF-8.
    #[error("NDJSON line {line} is not valid UTF-8: {source}")]
    Utf8 {
        /// 1-based line number in the body.
        line: usize,
        /// The decoding error.
        source: std::str::Utf8Error,
    },
    /// The line being read outgrew the decoder's bound
    /// ([`NdjsonDecoder::with_max_line_bytes`]).
    #[error("NDJSON line {line} passed {} without ending", human_bytes(*limit))]
    TooLarge {
        /// 1-based number of the line being read when the bound was crossed.
        line: usize,
        /// The bound, in bytes.
        limit: usize,
    },
}

impl NdjsonError {
    /// The 1-based line the error is about.
    pub fn line(&self) -> usize {
        match self {
            NdjsonError::Utf8 { line, .. } | NdjsonError::TooLarge { line, .. } => *line,
        }
    }
}

/// Incremental NDJSON line splitter: [`feed`](NdjsonDecoder::feed) chunks, then
/// [`finish`](NdjsonDecoder::finish) at the end of the body.
///
/// Unbounded by default; every provider stream bounds it with
/// [`with_max_line_bytes`](NdjsonDecoder::with_max_line_bytes). After an error the decoder is
/// spent.
#[derive(Debug, Default)]
pub struct NdjsonDecoder {
    buffer: Vec<u8>,
    lines_seen: usize,
    max_line_bytes: Option<usize>,
}

impl NdjsonDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> NdjsonDecoder {
        NdjsonDecoder::default()
    }

    /// A decoder that holds at most `max` bytes of one line. Crossing it fails
    /// [`feed`](NdjsonDecoder::feed) with [`NdjsonError::TooLarge`] as soon as the bytes
    /// arrive, before they are buffered.
    pub fn with_max_line_bytes(mut self, max: usize) -> NdjsonDecoder {
        self.max_line_bytes = Some(max);
        self
    }

    /// Sets the bound of [`with_max_line_bytes`](NdjsonDecoder::with_max_line_bytes).
    pub fn limit_line_bytes(&mut self, max: usize) {
        self.max_line_bytes = Some(max);
    }

    /// Lines read so far, blank ones included: the number an error names.
    pub fn lines_seen(&self) -> usize {
        self.lines_seen
    }

    /// Fails when `more` bytes added to the current line would take it past the bound.
    fn check_room(&self, more: usize) -> Result<(), NdjsonError> {
        match self.max_line_bytes {
            Some(limit) if self.buffer.len() + more > limit => Err(NdjsonError::TooLarge {
                line: self.lines_seen + 1,
                limit,
            }),
            _ => Ok(()),
        }
    }

    /// Consumes a chunk and returns the non-blank lines it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<String>, NdjsonError> {
        let mut lines = Vec::new();
        self.feed_into(chunk, &mut lines)?;
        Ok(lines)
    }

    /// [`feed`](NdjsonDecoder::feed) into `lines`: on an error, the lines the chunk completed
    /// before the bad one are already there, so what is decoded up to a fault does not depend
    /// on how the body was chunked.
    pub fn feed_into(&mut self, chunk: &[u8], lines: &mut Vec<String>) -> Result<(), NdjsonError> {
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            self.check_room(pos)?;
            self.buffer.extend_from_slice(&rest[..pos]);
            rest = &rest[pos + 1..];
            let line = std::mem::take(&mut self.buffer);
            self.line(&line, lines)?;
        }
        self.check_room(rest.len())?;
        self.buffer.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the body: an unterminated last line is taken as a line (servers may omit the final
    /// newline); a body cut mid-line then fails in the JSON parser rather than vanishing here.
    pub fn finish(&mut self) -> Result<Option<String>, NdjsonError> {
        let mut lines = Vec::new();
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            self.line(&line, &mut lines)?;
        }
        Ok(lines.pop())
    }

    fn line(&mut self, bytes: &[u8], lines: &mut Vec<String>) -> Result<(), NdjsonError> {
        self.lines_seen += 1;
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let line = std::str::from_utf8(bytes).map_err(|source| NdjsonError::Utf8 {
            line: self.lines_seen,
            source,
        })?;
        if !line.trim().is_empty() {
            lines.push(line.to_owned());
        }
        Ok(())
    }
}

/// The protocol half of an NDJSON-framed [`StreamDecoder`]; [`NdjsonStreamDecoder`] is the
/// other, as [`crate::sse::SseEventHandler`] is for SSE.
pub trait NdjsonLineHandler: Send + fmt::Debug {
    /// Translates one non-blank line (one JSON object's text). An empty ([`Default`])
    /// [`UniEvent`] means the line carried nothing to translate and is dropped.
    fn line(&mut self, line: &str) -> Result<UniEvent, WireError>;

    /// How many protocol objects were decoded so far. None at the end of the body makes the
    /// stream malformed ([`NO_EVENTS`]).
    fn objects_seen(&self) -> usize;

    /// At the end of a body with objects: `None` when the protocol's final object came, else
    /// what the last one lacked, completing the sentence begun by [`CUT_OFF_PREFIX`].
    fn missing_end(&self) -> Option<String>;
}

/// A [`StreamDecoder`] for any NDJSON-framed protocol: frames with [`NdjsonDecoder`],
/// translates each line with `H`. The HTTP shell's per-event bound
/// ([`StreamDecoder::limit_event_bytes`]) bounds one line.
#[derive(Debug, Default)]
pub struct NdjsonStreamDecoder<H> {
    ndjson: NdjsonDecoder,
    handler: H,
}

impl<H: NdjsonLineHandler> NdjsonStreamDecoder<H> {
    /// A decoder at the start of a body.
    pub fn new(handler: H) -> NdjsonStreamDecoder<H> {
        NdjsonStreamDecoder {
            ndjson: NdjsonDecoder::new(),
            handler,
        }
    }

    /// The protocol half, for inspecting its state.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Translates `lines`, then turns a framing error (which came after them) into a
    /// [`WireError`].
    fn dispatch(
        &mut self,
        lines: Vec<String>,
        framing: Result<(), NdjsonError>,
        out: &mut Vec<UniEvent>,
    ) -> Result<(), WireError> {
        for line in &lines {
            let translated = self.handler.line(line)?;
            if translated != UniEvent::default() {
                out.push(translated);
            }
        }
        framing.map_err(|e| match e {
            NdjsonError::TooLarge { line, limit } => WireError::TooLarge(format!(
                "response too large: an NDJSON line (line {line}) passed {} without ending, the per-event limit set by max_message_bytes; the rest of the response was not read",
                human_bytes(limit)
            )),
            e @ NdjsonError::Utf8 { .. } => WireError::Malformed(e.to_string()),
        })
    }
}

impl<H: NdjsonLineHandler> StreamDecoder for NdjsonStreamDecoder<H> {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<UniEvent>) -> Result<(), WireError> {
        let mut lines = Vec::new();
        let framing = self.ndjson.feed_into(chunk, &mut lines);
        self.dispatch(lines, framing, out)
    }

    fn finish(&mut self, out: &mut Vec<UniEvent>) -> Result<(), WireError> {
        let (lines, framing) = match self.ndjson.finish() {
            Ok(last) => (last.into_iter().collect(), Ok(())),
            Err(e) => (Vec::new(), Err(e)),
        };
        self.dispatch(lines, framing, out)?;
        if self.handler.objects_seen() == 0 {
            return Err(WireError::Malformed(NO_EVENTS.into()));
        }
        match self.handler.missing_end() {
            Some(missing) => Err(WireError::Malformed(format!("{CUT_OFF_PREFIX} {missing}"))),
            None => Ok(()),
        }
    }

    fn limit_event_bytes(&mut self, max: usize) {
        self.ndjson.limit_line_bytes(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "testkit")]
    use proptest::prelude::*;

    fn all(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = NdjsonDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.feed(c).unwrap());
        }
        out.extend(d.finish().unwrap());
        out
    }

    #[test]
    fn lines_end_with_lf_or_crlf_and_blank_lines_are_skipped() {
        assert_eq!(
            all(&[b"{\"a\":1}\n\n{\"b\":2}\r\n  \r\n{\"c\":3}"]),
            ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]
        );
    }

    #[test]
    fn split_utf8_and_split_crlf_are_reassembled() {
        let body = "{\"t\":\"héllo — 世界\"}\r\n{\"u\":1}\n".as_bytes();
        for i in 0..=body.len() {
            assert_eq!(
                all(&[&body[..i], b"", &body[i..]]),
                ["{\"t\":\"héllo — 世界\"}", "{\"u\":1}"],
                "split at {i}"
            );
        }
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let mut d = NdjsonDecoder::new();
        let err = d.feed(b"{}\n\n{\"x\":\"\xff\"}\n").unwrap_err();
        assert_eq!(err.line(), 3);
        assert!(err
            .to_string()
            .starts_with("NDJSON line 3 is not valid UTF-8"));
    }

    #[test]
    fn a_line_that_never_ends_fails_as_soon_as_it_passes_the_bound() {
        let mut d = NdjsonDecoder::new().with_max_line_bytes(100);
        assert_eq!(d.feed(b"{\"ok\":1}\n").unwrap().len(), 1);
        let mut fed = 0;
        let err = loop {
            match d.feed(b"x") {
                Ok(lines) => assert!(lines.is_empty()),
                Err(e) => break e,
            }
            fed += 1;
            assert!(fed <= 100, "buffered {fed} bytes past the bound");
        };
        assert_eq!(fed, 100, "fails on the first byte past the bound");
        assert_eq!(
            err,
            NdjsonError::TooLarge {
                line: 2,
                limit: 100
            }
        );
        assert_eq!(
            err.to_string(),
            "NDJSON line 2 passed 100 bytes without ending"
        );
    }

    #[test]
    fn a_whole_line_past_the_bound_is_refused_and_the_lines_before_it_kept() {
        let mut d = NdjsonDecoder::new().with_max_line_bytes(10);
        let mut lines = Vec::new();
        let err = d
            .feed_into(
                b"{\"a\":1}\n{\"b\":2}\n{\"c\":\"0123456789\"}\n",
                &mut lines,
            )
            .unwrap_err();
        assert_eq!(lines, ["{\"a\":1}", "{\"b\":2}"]);
        assert_eq!(err.line(), 3);
        // Each line's count starts afresh: many short lines never add up.
        let mut d = NdjsonDecoder::new().with_max_line_bytes(10);
        for _ in 0..100 {
            assert_eq!(d.feed(b"{\"a\":1}\n").unwrap().len(), 1);
        }
    }

    // The chunkings come from the kit, which a build without `testkit` lacks.
    #[cfg(feature = "testkit")]
    proptest! {
        #[test]
        fn any_chunking_gives_the_same_lines(cuts in proptest::collection::vec(0usize..120, 0..12)) {
            let body = "{\"t\":\"é✓\"}\r\n\n{\"a\":[1,2]}\n  \n{\"z\":\"\\n\"}".as_bytes();
            let whole = all(&[body]);
            let chunks = crate::testkit::split_at(body, cuts.into_iter().map(|c| c % (body.len() + 1)));
            prop_assert_eq!(all(&chunks), whole);
        }
    }
}
