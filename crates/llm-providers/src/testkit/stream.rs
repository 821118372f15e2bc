//! The pure half of the kit: a body replayed as the HTTP shell would without I/O,
//! timestamp-free views of a message stream, a readable difference of two streams, and a
//! checker for the streaming discipline of protocol
//! [§1.8](penguin_omni_protocol::spec#s1.8) *Streaming discipline*.

use std::collections::BTreeMap;

use penguin_omni_protocol::{build, EventPayload, ModelPayload, OmniMessage, StreamEventType};
use serde_json::Value;

use crate::translate::{EventTranslator, ToolCallIdAllocator};
use crate::wire::{max_event_bytes, StreamDecoder, DEFAULT_MAX_MESSAGE_BYTES};
use crate::LlmOutcome;

/// `body` cut at `points` (byte offsets up to `body.len()`, in any order): the chunkings the
/// split-invariance tests feed a decoder. Empty chunks are kept, since a decoder must accept
/// them too.
pub fn split_at(body: &[u8], points: impl IntoIterator<Item = usize>) -> Vec<&[u8]> {
    let mut points: Vec<usize> = points.into_iter().collect();
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

/// What the HTTP shell yields for a response body that arrived as `chunks`, without any I/O:
/// decode and translate each chunk, then on a clean end `finish()` plus `token_usage`
/// (session = this request), or on a decoder error `finish_interrupted` with its status.
///
/// This is the harness for fixture tests: a recorded body in, the exact message stream and
/// outcome out. The message cap is the default one; see [`replay_limited`].
pub fn replay<D: StreamDecoder>(
    decoder: D,
    chunks: &[&[u8]],
    ids: ToolCallIdAllocator,
) -> (Vec<OmniMessage>, LlmOutcome) {
    replay_limited(decoder, chunks, ids, DEFAULT_MAX_MESSAGE_BYTES)
}

/// [`replay`] under a `max_message_bytes` cap, bounding the decoder's events the way the HTTP
/// shell does: a message that outgrows it stops the replay after that chunk with the
/// permanent `failed` outcome, as a too-large response stops the shell's reading.
pub fn replay_limited<D: StreamDecoder>(
    mut decoder: D,
    chunks: &[&[u8]],
    ids: ToolCallIdAllocator,
    max_message_bytes: usize,
) -> (Vec<OmniMessage>, LlmOutcome) {
    decoder.limit_event_bytes(max_event_bytes(max_message_bytes));
    let mut translator = EventTranslator::new(ids).with_max_message_bytes(max_message_bytes);
    let mut out = Vec::new();
    let mut events = Vec::new();
    let mut result = Ok(());
    for chunk in chunks {
        result = decoder.feed(chunk, &mut events);
        for e in events.drain(..) {
            out.extend(translator.translate(e));
        }
        if let Some(e) = translator.too_large() {
            result = Err(e.clone());
        }
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = decoder.finish(&mut events);
        for e in events.drain(..) {
            out.extend(translator.translate(e));
        }
        if let Some(e) = translator.too_large() {
            result = Err(e.clone());
        }
    }
    match result {
        Ok(()) => {
            out.extend(translator.finish());
            let request = translator.request_tokens();
            out.push(build::token_usage(request, request));
            (out, LlmOutcome::completed())
        }
        Err(e) => {
            let outcome = e.into_outcome();
            out.extend(translator.finish_interrupted(outcome.status));
            (out, outcome)
        }
    }
}

/// A message's JSON without its `timestamp`, keeping key order, so streams can be compared
/// exactly while builders stamp the wall clock.
pub fn without_timestamp(msg: &OmniMessage) -> String {
    let mut value: Value = serde_json::from_str(&msg.to_json()).expect("a message is valid JSON");
    if let Value::Object(map) = &mut value {
        map.shift_remove("timestamp");
    }
    value.to_string()
}

/// [`without_timestamp`] of every message.
pub fn without_timestamps(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter().map(without_timestamp).collect()
}

/// A compact one-line view for readable assertions:
/// `partial_text/delta "Hel"`, `text "Hello" completed`, `tool_call f(call_1) {"a":1} completed`,
/// `token_usage 10/20/5=35 session 35` (cache_read/uncached_prompt/output=total).
pub fn describe(msg: &OmniMessage) -> String {
    if let Some(EventPayload::TokenUsage { session, request }) = msg.event() {
        return format!(
            "token_usage {}/{}/{}={} session {}",
            request.cache_read,
            request.uncached_prompt,
            request.output,
            request.total,
            session.total
        );
    }
    let Some(p) = msg.model() else {
        return msg.payload_type().to_owned();
    };
    let reason = p.stop_reason().map(|r| r.as_str()).unwrap_or("-");
    match p {
        ModelPayload::PartialToolCall(c) => match c.event_type {
            StreamEventType::Start => {
                format!("partial_tool_call/start {}({})", c.name, c.tool_call_id)
            }
            StreamEventType::Delta => format!("partial_tool_call/delta {:?}", c.arguments),
            StreamEventType::Stop => format!("partial_tool_call/stop {reason}"),
        },
        ModelPayload::ToolCall(c) => {
            format!(
                "tool_call {}({}) {} {reason}",
                c.name, c.tool_call_id, c.arguments
            )
        }
        _ if p.is_partial() => {
            let (event, content) = p.partial_parts().expect("partial payload");
            match event {
                StreamEventType::Start => format!("{}/start", p.type_name()),
                StreamEventType::Delta => format!("{}/delta {content:?}", p.type_name()),
                StreamEventType::Stop => format!("{}/stop {reason}", p.type_name()),
            }
        }
        _ => format!("{} {:?} {reason}", p.type_name(), p.content().unwrap_or("")),
    }
}

/// Asserts that a stream's lines (`Replay::lines`, [`without_timestamps`]) are `want`
/// (usually built with [`expect`](super::expect::expect)). On a difference it panics with the
/// index of the first message that differs and a line diff, one message a line, rather than
/// the two one-line arrays of `assert_eq!`.
#[track_caller]
pub fn assert_lines(got: &[String], want: &[String]) {
    if got != want {
        panic!("{}", lines_diff(want, got));
    }
}

/// What [`assert_lines`] prints: the index of the first line where `got` differs from `want`
/// (a stream's lines are its messages), then the diff (`-` expected, `+` got, each line with
/// its index), three unchanged lines around each change.
pub fn lines_diff(want: &[String], got: &[String]) -> String {
    use similar::{ChangeTag, TextDiff};
    use std::fmt::Write;

    let first = (0..want.len().max(got.len()))
        .find(|&i| want.get(i) != got.get(i))
        .unwrap_or(want.len());
    let want_lines: Vec<&str> = want.iter().map(String::as_str).collect();
    let got_lines: Vec<&str> = got.iter().map(String::as_str).collect();
    let diff = TextDiff::from_slices(&want_lines, &got_lines);
    let mut out = format!(
        "first difference at index {first} (expected {} lines, got {}); - expected, + got:\n",
        want.len(),
        got.len()
    );
    for (n, group) in diff.grouped_ops(3).iter().enumerate() {
        if n > 0 {
            out.push_str("  ...\n");
        }
        for op in group {
            for change in diff.iter_changes(op) {
                let (sign, index) = match change.tag() {
                    ChangeTag::Delete => ('-', change.old_index()),
                    ChangeTag::Insert => ('+', change.new_index()),
                    ChangeTag::Equal => (' ', change.new_index()),
                };
                let index = index.map_or_else(String::new, |i| i.to_string());
                let _ = writeln!(out, "{sign} {index:>3} {}", change.value());
            }
        }
    }
    out
}

/// [`describe`] of every message.
pub fn describe_all(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter().map(describe).collect()
}

/// Checks the streaming discipline of a whole request's output:
/// - each segment, keyed by `(payload.type, tool_call_id)`, goes `start → delta* → stop`;
/// - the complete message of the same kind follows its stop immediately;
/// - concatenated deltas equal the complete content (tool calls excepted: their complete
///   arguments may be the provider's object re-serialized);
/// - every stop fragment has the same stop reason as the complete message that follows it;
/// - nothing is left open, and `token_usage`, if present, is last.
///
/// Returns a description of the first violation.
pub fn check_discipline(msgs: &[OmniMessage]) -> Result<(), String> {
    let mut open: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut expect_complete: Option<(usize, String, String, Option<String>)> = None;
    for (i, msg) in msgs.iter().enumerate() {
        if let Some(EventPayload::TokenUsage { .. }) = msg.event() {
            if i + 1 != msgs.len() {
                return Err(format!("message {i}: token_usage is not the last message"));
            }
        }
        let Some(p) = msg.model() else { continue };
        if let Some((at, kind, content, reason)) = expect_complete.take() {
            let complete_kind = kind.trim_start_matches("partial_");
            if p.type_name() != complete_kind {
                return Err(format!(
                    "message {i}: expected the complete {complete_kind} after the stop at {at}, got {}",
                    p.type_name()
                ));
            }
            let got_reason = p.stop_reason().map(|r| r.as_str().to_owned());
            if got_reason != reason {
                return Err(format!(
                    "message {i}: complete {complete_kind} has stop_reason {got_reason:?}, its stop fragment {reason:?}"
                ));
            }
            if complete_kind != "tool_call" && p.content() != Some(content.as_str()) {
                return Err(format!(
                    "message {i}: complete {complete_kind} content {:?} differs from the deltas {content:?}",
                    p.content().unwrap_or("")
                ));
            }
            continue;
        }
        if !p.is_partial() {
            continue;
        }
        let (event, content) = p.partial_parts().expect("partial payload");
        let key = (
            p.type_name().to_owned(),
            p.tool_call_id().unwrap_or("").to_owned(),
        );
        match event {
            StreamEventType::Start => {
                if open.insert(key.clone(), String::new()).is_some() {
                    return Err(format!("message {i}: {key:?} started twice"));
                }
            }
            StreamEventType::Delta => match open.get_mut(&key) {
                Some(buffer) => buffer.push_str(content),
                None => return Err(format!("message {i}: delta for {key:?} without a start")),
            },
            StreamEventType::Stop => match open.remove(&key) {
                Some(buffer) => {
                    expect_complete = Some((
                        i,
                        key.0,
                        buffer,
                        p.stop_reason().map(|r| r.as_str().to_owned()),
                    ))
                }
                None => return Err(format!("message {i}: stop for {key:?} without a start")),
            },
        }
    }
    if let Some((at, kind, _, _)) = expect_complete {
        return Err(format!(
            "the stop of {kind} at {at} is not followed by its complete message"
        ));
    }
    if let Some((key, _)) = open.into_iter().next() {
        return Err(format!("segment {key:?} was never closed"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_diff_names_the_first_difference_and_shows_one_line_each() {
        let want = lines(&["a", "b", "c", "d", "e", "f", "g", "h"]);
        let got = lines(&["a", "b", "c", "d", "E", "f", "g", "h", "i"]);
        assert_eq!(
            lines_diff(&want, &got),
            "first difference at index 4 (expected 8 lines, got 9); - expected, + got:
    1 b
    2 c
    3 d
-   4 e
+   4 E
    5 f
    6 g
    7 h
+   8 i
"
        );
    }

    #[test]
    #[should_panic(expected = "first difference at index 1 (expected 2 lines, got 1)")]
    fn a_failed_assertion_prints_the_diff() {
        assert_lines(&lines(&["a"]), &lines(&["a", "b"]));
    }
}
