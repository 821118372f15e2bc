//! SSE framing for provider streams: an adapter whose model streams `text/event-stream`
//! writes only how one event translates ([`SseEventHandler`]), and [`SseStreamDecoder`] does
//! the rest on [`penguin_sse_transport::decode::SseDecoder`], penguin's one SSE parser (it
//! lives with the rest of the SSE transport, where a client of penguin's server finds it).

use std::fmt;

pub use penguin_sse_transport::decode::DecodedEvent;
use penguin_sse_transport::decode::{DecodeError, SseDecoder};

use crate::limits::human_bytes;
use crate::translate::UniEvent;
use crate::wire::{StreamDecoder, WireError};

/// The protocol half of an SSE-framed [`StreamDecoder`]; [`SseStreamDecoder`] is the other.
///
/// Every supported provider frames its stream as SSE, so the framing, the UTF-8 and chunking
/// concerns and the end-of-body checks live once in [`SseStreamDecoder`], and an adapter
/// writes only how one event translates and what its terminal event is.
pub trait SseEventHandler: Send + fmt::Debug {
    /// Translates one dispatched event. An empty ([`Default`]) [`UniEvent`] means the event
    /// carried nothing to translate (a ping, a sentinel, an item announcement) and is dropped.
    fn event(&mut self, event: &DecodedEvent) -> Result<UniEvent, WireError>;

    /// How many protocol events (not SSE frames: a `[DONE]` sentinel does not count) were
    /// decoded so far. None at the end of the body makes the stream malformed.
    fn events_seen(&self) -> usize;

    /// At the end of a body with events: `None` when the protocol's terminal event came, else
    /// what the last event lacked, completing the sentence begun by [`CUT_OFF_PREFIX`]
    /// (e.g. `"a finish_reason: …"`).
    fn missing_end(&self) -> Option<String>;
}

/// The error text of a body that decoded to no protocol event at all. With [`CUT_OFF_PREFIX`], one
/// of the two texts by which protocol [§6.5](penguin_omni_protocol::spec#s6.5) *A request, and how
/// it fails* recognizes a stream that ended early as malformed, so neither may change.
pub const NO_EVENTS: &str = "Streaming response yielded no events";

/// How every "the terminal event never came" error starts (see [`NO_EVENTS`]).
pub const CUT_OFF_PREFIX: &str = "Last event must carry";

/// A [`StreamDecoder`] for any SSE-framed protocol: frames with [`SseDecoder`], translates
/// each event with `H`.
#[derive(Debug, Default)]
pub struct SseStreamDecoder<H> {
    sse: SseDecoder,
    handler: H,
}

impl<H: SseEventHandler> SseStreamDecoder<H> {
    /// A decoder at the start of a body.
    pub fn new(handler: H) -> SseStreamDecoder<H> {
        SseStreamDecoder {
            sse: SseDecoder::new(),
            handler,
        }
    }

    /// Translates `events`, then turns a framing error (which came after them) into a
    /// [`WireError`].
    fn dispatch(
        &mut self,
        events: Vec<DecodedEvent>,
        framing: Result<(), DecodeError>,
        out: &mut Vec<UniEvent>,
    ) -> Result<(), WireError> {
        for e in &events {
            let translated = self.handler.event(e)?;
            if translated != UniEvent::default() {
                out.push(translated);
            }
        }
        framing.map_err(|e| match e {
            DecodeError::TooLarge { line, limit } => WireError::TooLarge(format!(
                "response too large: an SSE event (line {line}) passed {} without ending, the per-event limit set by max_message_bytes; the rest of the response was not read",
                human_bytes(limit)
            )),
            e => WireError::Malformed(e.to_string()),
        })
    }
}

impl<H: SseEventHandler> StreamDecoder for SseStreamDecoder<H> {
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<UniEvent>) -> Result<(), WireError> {
        let mut events = Vec::new();
        let framing = self.sse.feed_into(chunk, &mut events);
        self.dispatch(events, framing, out)
    }

    fn limit_event_bytes(&mut self, max: usize) {
        self.sse.limit_event_bytes(max);
    }

    fn finish(&mut self, out: &mut Vec<UniEvent>) -> Result<(), WireError> {
        let (events, framing) = match self.sse.finish() {
            Ok(events) => (events, Ok(())),
            Err(e) => (Vec::new(), Err(e)),
        };
        self.dispatch(events, framing, out)?;
        if self.handler.events_seen() == 0 {
            return Err(WireError::Malformed(NO_EVENTS.into()));
        }
        match self.handler.missing_end() {
            Some(missing) => Err(WireError::Malformed(format!("{CUT_OFF_PREFIX} {missing}"))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::ContentItem;

    /// One text item per event; `end` is the terminal event.
    #[derive(Debug, Default)]
    struct Echo {
        events: usize,
        ended: bool,
    }

    impl SseEventHandler for Echo {
        fn event(&mut self, event: &DecodedEvent) -> Result<UniEvent, WireError> {
            self.events += 1;
            if event.data == "end" {
                self.ended = true;
                return Ok(UniEvent::default());
            }
            Ok(UniEvent::item(ContentItem::Text {
                text: event.data.clone(),
                fidelity: None,
            }))
        }

        fn events_seen(&self) -> usize {
            self.events
        }

        fn missing_end(&self) -> Option<String> {
            (!self.ended).then(|| "`end`".to_owned())
        }
    }

    fn decode(chunks: &[&[u8]], limit: Option<usize>) -> (Vec<UniEvent>, Result<(), WireError>) {
        let mut decoder = SseStreamDecoder::new(Echo::default());
        if let Some(limit) = limit {
            decoder.limit_event_bytes(limit);
        }
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(e) = decoder.feed(chunk, &mut out) {
                return (out, Err(e));
            }
        }
        let end = decoder.finish(&mut out);
        (out, end)
    }

    #[test]
    fn events_translate_and_the_terminal_event_ends_the_body() {
        let (out, end) = decode(&[b"data: a\n\nda", b"ta: b\n\ndata: end\n\n"], None);
        assert_eq!(out.len(), 2);
        assert_eq!(end, Ok(()));
    }

    #[test]
    fn a_body_without_events_or_without_its_end_is_malformed() {
        assert_eq!(
            decode(&[b": ping\n\n"], None).1,
            Err(WireError::Malformed(NO_EVENTS.into()))
        );
        assert_eq!(
            decode(&[b"data: a\n\n"], None).1,
            Err(WireError::Malformed(format!("{CUT_OFF_PREFIX} `end`")))
        );
    }

    #[test]
    fn framing_errors_become_wire_errors_after_the_events_before_them() {
        let (out, end) = decode(&[b"data: a\n\ndata: \xff\n"], None);
        assert_eq!(out.len(), 1);
        assert!(
            matches!(&end, Err(WireError::Malformed(m)) if m.starts_with("SSE line 3 is not valid UTF-8")),
            "{end:?}"
        );
        let (_, end) = decode(&[b"data: a\n\ndata: ", &[b'x'; 2048]], Some(1024));
        assert_eq!(
            end,
            Err(WireError::TooLarge(
                "response too large: an SSE event (line 3) passed 1 KiB without ending, the per-event limit set by max_message_bytes; the rest of the response was not read".into()
            ))
        );
    }
}
