//! The client side of SSE: a decoder for a `text/event-stream` body that accepts it in
//! arbitrary chunks, for whoever reads a stream this crate serves (`penguin watch`, a test, a
//! bridge) and for penguin's provider adapters, whose model streams are SSE too. It is
//! penguin's one SSE parser.
//!
//! Bytes are buffered until a whole line is present, and only whole lines are decoded as
//! UTF-8, so a multi-byte character or a `\r\n` split across two chunks decodes the same as if
//! it had arrived in one piece. Lines end with `\n`, `\r\n` or a lone `\r` (the SSE grammar).
//!
//! ```
//! use penguin_sse_transport::decode::{DecodedEvent, SseDecoder};
//!
//! let mut decoder = SseDecoder::new().with_max_event_bytes(1 << 20);
//! let mut events = decoder.feed(b"id: 1a2b-1\ndata: {\"type\":\"hel").unwrap();
//! assert!(events.is_empty(), "nothing is dispatched before the blank line");
//! events.extend(decoder.feed(b"lo\"}\n\n: ping\n\n").unwrap());
//! events.extend(decoder.finish().unwrap());
//! assert_eq!(
//!     events,
//!     [DecodedEvent {
//!         event: None,
//!         data: r#"{"type":"hello"}"#.into(),
//!         id: Some("1a2b-1".into()),
//!     }]
//! );
//! ```

use std::fmt;

/// One dispatched event: the `event:` name (if any), the `data:` lines joined with `\n`, and
/// the last event id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedEvent {
    /// The `event:` field; `None` means the default `message` type.
    pub event: Option<String>,
    /// The data lines joined with `\n`.
    pub data: String,
    /// The last `id:` seen so far, which (as in `EventSource`) carries over to later events
    /// that set none: what a reconnect sends as `Last-Event-ID`.
    pub id: Option<String>,
}

/// Why a body could not be framed into events.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// A line of the body is not valid UTF-8.
    Utf8 {
        /// 1-based line number in the body.
        line: usize,
        /// The decoding error.
        source: std::str::Utf8Error,
    },
    /// The event being gathered (its data lines so far plus the unfinished line) outgrew the
    /// decoder's bound ([`SseDecoder::with_max_event_bytes`]).
    TooLarge {
        /// 1-based number of the line being read when the bound was crossed.
        line: usize,
        /// The bound, in bytes.
        limit: usize,
    },
}

impl DecodeError {
    /// The 1-based line the error is about.
    pub fn line(&self) -> usize {
        match self {
            DecodeError::Utf8 { line, .. } | DecodeError::TooLarge { line, .. } => *line,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Utf8 { line, source } => {
                write!(f, "SSE line {line} is not valid UTF-8: {source}")
            }
            DecodeError::TooLarge { line, limit } => write!(
                f,
                "SSE event at line {line} passed {} without ending",
                in_words(*limit)
            ),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecodeError::Utf8 { source, .. } => Some(source),
            DecodeError::TooLarge { .. } => None,
        }
    }
}

/// `n` bytes as a bound is usually set: in MiB or KiB when it is a whole number of them.
fn in_words(n: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

/// Incremental SSE decoder: [`feed`](SseDecoder::feed) chunks, then
/// [`finish`](SseDecoder::finish) at the end of the body.
///
/// Unbounded by default; [`with_max_event_bytes`](SseDecoder::with_max_event_bytes) bounds
/// what it buffers for one event, which every provider stream uses: a peer that never ends a
/// line must not make it buffer the whole body. After an error the decoder is spent.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    /// A `\r` ended the previous line; a `\n` at the start of the next chunk belongs to it.
    after_cr: bool,
    lines_seen: usize,
    event: Option<String>,
    data: Vec<String>,
    /// Bytes held in `data` (each line plus its joining `\n`).
    data_bytes: usize,
    has_data: bool,
    last_id: Option<String>,
    max_event_bytes: Option<usize>,
}

impl SseDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// A decoder that holds at most `max` bytes for one event: its data lines so far plus the
    /// line being read. Crossing it fails [`feed`](SseDecoder::feed) with
    /// [`DecodeError::TooLarge`] as soon as the bytes arrive, before they are buffered.
    pub fn with_max_event_bytes(mut self, max: usize) -> SseDecoder {
        self.max_event_bytes = Some(max);
        self
    }

    /// Sets the bound of [`with_max_event_bytes`](SseDecoder::with_max_event_bytes).
    pub fn limit_event_bytes(&mut self, max: usize) {
        self.max_event_bytes = Some(max);
    }

    /// Fails when `more` bytes added to the current line would take the event past the bound.
    fn check_room(&self, more: usize) -> Result<(), DecodeError> {
        match self.max_event_bytes {
            Some(limit) if self.data_bytes + self.buffer.len() + more > limit => {
                Err(DecodeError::TooLarge {
                    line: self.lines_seen + 1,
                    limit,
                })
            }
            _ => Ok(()),
        }
    }

    /// Consumes a chunk and returns the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<DecodedEvent>, DecodeError> {
        let mut events = Vec::new();
        self.feed_into(chunk, &mut events)?;
        Ok(events)
    }

    /// [`feed`](SseDecoder::feed) into `events`: on an error, the events the chunk completed
    /// before the bad line are already there, so what is decoded up to a fault does not
    /// depend on how the body was chunked.
    pub fn feed_into(
        &mut self,
        chunk: &[u8],
        events: &mut Vec<DecodedEvent>,
    ) -> Result<(), DecodeError> {
        let mut rest = chunk;
        // An empty chunk says nothing about whether the `\n` of a split `\r\n` is coming.
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.check_room(pos)?;
            self.buffer.extend_from_slice(&rest[..pos]);
            let terminator = rest[pos];
            rest = &rest[pos + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line = std::mem::take(&mut self.buffer);
            self.line(&line, events)?;
        }
        self.check_room(rest.len())?;
        self.buffer.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the body. An unterminated last line is taken as a line, and a pending event is
    /// dispatched, because servers commonly omit the final blank line after `[DONE]`; a body
    /// truncated mid-line then fails in the JSON parser rather than vanishing here.
    pub fn finish(&mut self) -> Result<Vec<DecodedEvent>, DecodeError> {
        let mut events = Vec::new();
        if !self.buffer.is_empty() {
            let line = std::mem::take(&mut self.buffer);
            self.line(&line, &mut events)?;
        }
        self.dispatch(&mut events);
        Ok(events)
    }

    fn line(&mut self, bytes: &[u8], events: &mut Vec<DecodedEvent>) -> Result<(), DecodeError> {
        self.lines_seen += 1;
        let line = std::str::from_utf8(bytes).map_err(|source| DecodeError::Utf8 {
            line: self.lines_seen,
            source,
        })?;
        if line.is_empty() {
            self.dispatch(events);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data_bytes += value.len() + 1;
                self.data.push(value.to_owned());
                self.has_data = true;
            }
            // A NUL in an id makes `EventSource` ignore the field; so do we.
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            // `retry` only matters to a reconnecting client, which picks its own delays.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, events: &mut Vec<DecodedEvent>) {
        let event = self.event.take();
        self.data_bytes = 0;
        if !self.has_data {
            return;
        }
        self.has_data = false;
        events.push(DecodedEvent {
            event,
            data: std::mem::take(&mut self.data).join("\n"),
            id: self.last_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(chunks: &[&[u8]]) -> Vec<DecodedEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.feed(c).unwrap());
        }
        out.extend(d.finish().unwrap());
        out
    }

    fn ev(event: Option<&str>, data: &str) -> DecodedEvent {
        DecodedEvent {
            event: event.map(Into::into),
            data: data.into(),
            id: None,
        }
    }

    #[test]
    fn parses_fields_comments_and_multiline_data() {
        let body =
            b": keep-alive\n\nevent: ping\ndata: {}\n\ndata: a\ndata:b\nid: 7\nretry: 10\n\n";
        let with_id = DecodedEvent {
            id: Some("7".into()),
            ..ev(None, "a\nb")
        };
        assert_eq!(all(&[body]), [ev(Some("ping"), "{}"), with_id]);
    }

    #[test]
    fn the_last_id_carries_over_and_a_nul_id_is_ignored() {
        let got = all(&[b"data: a\nid: 1\n\ndata: b\n\nid: x\0y\ndata: c\n\nid:\ndata: d\n\n"]);
        let ids: Vec<Option<&str>> = got.iter().map(|e| e.id.as_deref()).collect();
        assert_eq!(ids, [Some("1"), Some("1"), Some("1"), Some("")]);
    }

    #[test]
    fn crlf_and_lone_cr_end_lines() {
        assert_eq!(
            all(&[b"data: x\r\n\r\ndata: y\r\rdata: z\n\n"]),
            [ev(None, "x"), ev(None, "y"), ev(None, "z")]
        );
    }

    #[test]
    fn crlf_split_between_chunks_is_one_terminator() {
        assert_eq!(
            all(&[b"data: x\r", b"", b"\n\r", b"\ndata: y\r\n\r\n"]),
            [ev(None, "x"), ev(None, "y")]
        );
    }

    #[test]
    fn split_utf8_is_reassembled() {
        let body = "data: héllo — 世界\n\n".as_bytes();
        for i in 0..body.len() {
            assert_eq!(
                all(&[&body[..i], &body[i..]]),
                [ev(None, "héllo — 世界")],
                "split at {i}"
            );
        }
    }

    #[test]
    fn a_bound_in_mib_is_said_in_mib() {
        let err = DecodeError::TooLarge {
            line: 4,
            limit: 16 << 20,
        };
        assert_eq!(
            err.to_string(),
            "SSE event at line 4 passed 16 MiB without ending"
        );
    }

    #[test]
    fn unterminated_last_event_is_dispatched_at_finish() {
        assert_eq!(all(&[b"data: [DONE]"]), [ev(None, "[DONE]")]);
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let mut d = SseDecoder::new();
        let err = d.feed(b"data: ok\n\ndata: \xff\n").unwrap_err();
        assert_eq!(err.line(), 3);
        assert!(err.to_string().starts_with("SSE line 3 is not valid UTF-8"));
    }

    #[test]
    fn a_line_that_never_ends_fails_as_soon_as_it_passes_the_bound() {
        let mut d = SseDecoder::new().with_max_event_bytes(100);
        let mut fed = 0;
        let err = loop {
            match d.feed(if fed == 0 { b"data: " } else { b"x" }) {
                Ok(events) => assert!(events.is_empty()),
                Err(e) => break e,
            }
            fed += if fed == 0 { 6 } else { 1 };
            assert!(fed <= 100, "buffered {fed} bytes past the bound");
        };
        assert_eq!(fed, 100, "fails on the first byte past the bound");
        assert_eq!(
            err,
            DecodeError::TooLarge {
                line: 1,
                limit: 100
            }
        );
        assert_eq!(
            err.to_string(),
            "SSE event at line 1 passed 100 bytes without ending"
        );
    }

    #[test]
    fn the_bound_covers_an_event_of_many_data_lines_and_resets_after_it() {
        let line = format!("data: {}\n", "x".repeat(30));
        let mut d = SseDecoder::new().with_max_event_bytes(100);
        // Three 31-byte data values fit; each event's count starts afresh.
        let event = format!("{line}{line}{line}\n");
        for _ in 0..5 {
            assert_eq!(d.feed(event.as_bytes()).unwrap().len(), 1);
        }
        let err = d
            .feed(format!("{line}{line}{line}{line}").as_bytes())
            .unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooLarge {
                line: 24,
                limit: 100
            }
        );
    }

    #[test]
    fn events_before_a_bad_line_in_the_same_chunk_are_kept() {
        let mut d = SseDecoder::new().with_max_event_bytes(20);
        let mut events = Vec::new();
        let err = d
            .feed_into(b"data: a\n\ndata: b\n\ndata: 0123456789012345", &mut events)
            .unwrap_err();
        assert_eq!(events, [ev(None, "a"), ev(None, "b")]);
        assert_eq!(err.line(), 5);
        let mut events = Vec::new();
        let err = SseDecoder::new()
            .feed_into(b"data: a\n\ndata: \xff\n", &mut events)
            .unwrap_err();
        assert_eq!((events, err.line()), (vec![ev(None, "a")], 3));
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..12)) {
            let body = "event: a\r\ndata: {\"t\":\"é✓\"}\r\n\r\n: c\ndata: 1\ndata: 2\n\rdata: z\r\r".as_bytes();
            let whole = all(&[body]);
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut prev = 0;
            for p in points {
                chunks.push(&body[prev..p]);
                prev = p;
            }
            chunks.push(&body[prev..]);
            prop_assert_eq!(all(&chunks), whole);
        }
    }
}
