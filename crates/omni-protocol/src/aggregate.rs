//! `PartialAggregator` (protocol [§1.9](crate::spec#s1.9) *Aggregation*): turns partial
//! fragments back into complete messages.

use crate::build;
use crate::message::*;

#[derive(Debug)]
struct Open {
    kind: &'static str,
    name: String,
    tool_call_id: String,
    buffer: String,
    images: Vec<String>,
    last_stop_reason: StopReason,
}

/// A stateful merger of partial fragments, keyed by `(partial type, tool_call_id)`.
///
/// Origin is not part of the key, as in the reference. Finalized messages get new timestamps
/// and no fidelity (partials never carry it).
///
/// ```
/// use penguin_omni_protocol::{build, PartialAggregator, StopReason, StreamEventType::*};
/// let mut agg = PartialAggregator::new();
/// assert!(agg.push(build::partial_text(Start, "", StopReason::Completed)).is_empty());
/// assert!(agg.push(build::partial_text(Delta, "Hel", StopReason::Completed)).is_empty());
/// assert!(agg.push(build::partial_text(Delta, "lo", StopReason::Completed)).is_empty());
/// let done = agg.push(build::partial_text(Stop, "", StopReason::Completed));
/// assert_eq!(done[0].model().unwrap().content(), Some("Hello"));
/// ```
#[derive(Debug, Default)]
pub struct PartialAggregator {
    open: Vec<(String, Open)>,
}

impl PartialAggregator {
    /// An empty aggregator.
    pub fn new() -> PartialAggregator {
        PartialAggregator::default()
    }

    /// Feeds one message; returns the messages it completes (a non-partial comes back as is).
    pub fn push(&mut self, msg: OmniMessage) -> Vec<OmniMessage> {
        let Some(payload) = msg.model().filter(|p| p.is_partial()) else {
            return vec![msg];
        };
        let kind = payload.type_name();
        let id = payload.tool_call_id().unwrap_or("").to_owned();
        let key = format!("{kind}::{id}");
        let (event_type, content) = payload.partial_parts().expect("partial");
        let mut out = Vec::new();
        let pos = self.open.iter().position(|(k, _)| *k == key);
        let pos = match (event_type, pos) {
            (StreamEventType::Start, Some(p)) => {
                let (_, earlier) = self.open.remove(p);
                out.push(finalize(earlier));
                None
            }
            (_, p) => p,
        };
        let idx = match pos {
            Some(p) => p,
            None => {
                let name = match payload {
                    ModelPayload::PartialToolCall(p) => p.name.clone(),
                    _ => String::new(),
                };
                self.open.push((
                    key,
                    Open {
                        kind,
                        name,
                        tool_call_id: id.clone(),
                        buffer: String::new(),
                        images: Vec::new(),
                        last_stop_reason: StopReason::Completed,
                    },
                ));
                self.open.len() - 1
            }
        };
        let open = &mut self.open[idx].1;
        open.buffer.push_str(content);
        if event_type != StreamEventType::Start {
            if let ModelPayload::PartialToolCall(p) = payload {
                if !p.name.is_empty() {
                    open.name = p.name.clone();
                }
            }
            if let ModelPayload::PartialToolCallOutput(p) = payload {
                if let Some(images) = p.images.as_ref().filter(|i| !i.is_empty()) {
                    open.images = images.clone();
                }
            }
            open.tool_call_id = id;
            if let Some(r) = payload.stop_reason() {
                open.last_stop_reason = r;
            }
        }
        if event_type == StreamEventType::Stop {
            let (_, done) = self.open.remove(idx);
            out.push(finalize(done));
        }
        out
    }

    /// Finalizes every still-open fragment in the order it was opened.
    pub fn flush(&mut self) -> Vec<OmniMessage> {
        self.open.drain(..).map(|(_, o)| finalize(o)).collect()
    }

    /// `aggregateAll`: pushes every message, then flushes.
    pub fn aggregate_all(messages: impl IntoIterator<Item = OmniMessage>) -> Vec<OmniMessage> {
        let mut agg = PartialAggregator::new();
        let mut out: Vec<OmniMessage> = messages.into_iter().flat_map(|m| agg.push(m)).collect();
        out.extend(agg.flush());
        out
    }

    /// True when no fragment is open.
    pub fn is_idle(&self) -> bool {
        self.open.is_empty()
    }
}

fn finalize(o: Open) -> OmniMessage {
    match o.kind {
        "partial_text" => build::assistant_text(o.buffer, o.last_stop_reason),
        "partial_thinking" => build::thinking(o.buffer, o.last_stop_reason, None),
        "partial_tool_call" => {
            build::tool_call(o.name, o.buffer, o.tool_call_id, o.last_stop_reason, None)
        }
        _ => build::tool_call_output_with_images(
            o.buffer,
            o.tool_call_id,
            o.last_stop_reason,
            o.images,
        ),
    }
}
