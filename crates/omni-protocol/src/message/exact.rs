//! [`OmniMessage::from_json_exact`]: the exactness check scenario files need, straight from the
//! text for the common message, without the two JSON trees of
//! [`OmniMessage::from_value_exact`] (a 44 MB scenario holds 227,000 messages).
//!
//! A message would lose a field when a key is unknown to its type or holds a `null` that a
//! typed field reads as absent. The fast path therefore takes only messages whose text has no
//! `null` at all. A `model_msg` whose payload starts with its `type` is read in one pass: each
//! payload key is checked against the fields its type declares as the struct is read. An
//! `event_msg` (a script's few `token_usage`s) has its payload read as a tree where it stands
//! and checked the tree way. Anything else (nested objects, escaped keys, duplicates, another
//! key order) goes the tree way, which accepts the same messages and names what is wrong.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::*;
use crate::Timestamp;

impl OmniMessage {
    /// [`OmniMessage::from_value_exact`] on JSON text: the same messages accepted, the same
    /// errors, a missing `timestamp` stamped now.
    pub fn from_json_exact(s: &str) -> Result<OmniMessage, ParseError> {
        if let Some(msg) = fast(s) {
            return Ok(msg);
        }
        let value: Value = serde_json::from_str(s)
            .map_err(|e| ParseError::new("", format!("invalid JSON: {e}")))?;
        OmniMessage::from_value_exact(value)
    }
}

/// Reads `text`, a JSON document holding messages as [`InPlace`] values, in one pass, each
/// message as exactly as [`OmniMessage::from_json_exact`] checks one. `None` when the text
/// holds a `null` anywhere (a typed field would read it as absent) or a message the one-pass
/// way leaves to the tree (see this module's introduction), or is not a `T`: the caller then
/// reads each message's own text with `from_json_exact`, which accepts the same messages and
/// names what is wrong.
///
/// ```
/// use penguin_omni_protocol::{exact_in_place, InPlace};
///
/// #[derive(serde::Deserialize)]
/// struct Step {
///     message: InPlace,
/// }
/// let text = r#"[{"message": {"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "hi", "stop_reason": "completed"}}}]"#;
/// let steps: Vec<Step> = exact_in_place(text).unwrap();
/// assert_eq!(steps[0].message.0.model().and_then(|p| p.content()), Some("hi"));
/// // A null, or an unknown key, is left to the message-by-message way.
/// assert!(exact_in_place::<Vec<Step>>(&text.replace(r#""hi""#, "null")).is_none());
/// assert!(exact_in_place::<Vec<Step>>(&text.replace(r#""role""#, r#""x": 1, "role""#)).is_none());
/// ```
pub fn exact_in_place<'a, T: Deserialize<'a>>(text: &'a str) -> Option<T> {
    if text.contains("null") {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// A message inside a document read by [`exact_in_place`]. Read by itself it would take a
/// `null` for an absent field: only `exact_in_place` makes sure there is none.
#[derive(Debug)]
pub struct InPlace(pub OmniMessage);

impl<'de> Deserialize<'de> for InPlace {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<InPlace, D::Error> {
        d.deserialize_map(ExactEnvelope).map(InPlace)
    }
}

/// One message's text, when it is a document of its own the one-pass way takes.
fn fast(s: &str) -> Option<OmniMessage> {
    exact_in_place::<InPlace>(s).map(|m| m.0)
}

/// Any error sends the message the tree way; its text is never shown.
fn leave<E: de::Error>() -> E {
    E::custom("left to the tree check")
}

/// The envelope of a `model_msg` or an `event_msg`: `timestamp` (optional), `type`, `payload`,
/// `origin`, each at most once; a model payload in any order, an event's after its `type`.
struct ExactEnvelope;

/// A payload as the envelope read it.
enum Read {
    Model(ModelPayload),
    /// An event's payload, checked the tree way once the envelope is read: events are few.
    Event(Value),
}

impl<'de> Visitor<'de> for ExactEnvelope {
    type Value = OmniMessage;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a model_msg or an event_msg")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OmniMessage, A::Error> {
        let (mut timestamp, mut kind, mut payload, mut origin) = (None, None, None, None);
        while let Some(key) = map.next_key::<&'de str>()? {
            match key {
                "timestamp" if timestamp.is_none() => timestamp = Some(map.next_value()?),
                "type" if kind.is_none() => match map.next_value::<&'de str>()? {
                    k @ ("model_msg" | "event_msg") => kind = Some(k),
                    _ => return Err(leave()),
                },
                "payload" if payload.is_none() => {
                    payload = Some(match kind {
                        Some("event_msg") => Read::Event(map.next_value()?),
                        _ => Read::Model(map.next_value_seed(ExactPayload)?),
                    })
                }
                "origin" if origin.is_none() => origin = Some(map.next_value::<Vec<String>>()?),
                _ => return Err(leave()),
            }
        }
        match (kind, payload) {
            (Some("model_msg"), Some(Read::Model(payload))) => Ok(OmniMessage {
                timestamp: timestamp.unwrap_or_else(Timestamp::now),
                body: Body::Model(payload),
                origin,
            }),
            (Some("event_msg"), Some(Read::Event(payload))) => {
                let mut tree = serde_json::Map::new();
                if let Some(t) = timestamp {
                    tree.insert("timestamp".into(), Value::from(t.as_str()));
                }
                tree.insert("type".into(), Value::from("event_msg"));
                tree.insert("payload".into(), payload);
                if let Some(origin) = origin {
                    tree.insert("origin".into(), Value::from(origin));
                }
                OmniMessage::from_value_exact(Value::Object(tree)).map_err(|_| leave())
            }
            _ => Err(leave()),
        }
    }
}

/// A `model_msg` payload whose first key is its `type`: the rest is read as that type's struct.
struct ExactPayload;

impl<'de> DeserializeSeed<'de> for ExactPayload {
    type Value = ModelPayload;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ModelPayload, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ExactPayload {
    type Value = ModelPayload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a model_msg payload")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ModelPayload, A::Error> {
        if map.next_key::<&'de str>()? != Some("type") {
            return Err(leave());
        }
        let tag = map.next_value::<&'de str>()?;
        by_tag(tag, &mut RestOfMap(Some(map)))?.ok_or_else(leave)
    }
}

/// Where a payload struct is read from.
trait PayloadSource<'de> {
    type Error;
    fn read<T: Deserialize<'de>>(&mut self) -> Result<T, Self::Error>;
}

/// The payload of type `tag` from `source`; `Ok(None)` for an unknown tag. Read as that type's
/// struct directly, not through serde's buffering of an internally tagged enum.
fn by_tag<'de, S: PayloadSource<'de>>(
    tag: &str,
    source: &mut S,
) -> Result<Option<ModelPayload>, S::Error> {
    macro_rules! by_tag {
        ($($name:literal => $variant:ident($ty:ty)),* $(,)?) => {
            match tag {
                $($name => ModelPayload::$variant(source.read::<$ty>()?),)*
                _ => return Ok(None),
            }
        };
    }
    Ok(Some(by_tag! {
        "text" => Text(Text),
        "image_url" => ImageUrl(ImageUrl),
        "inline_data" => InlineData(InlineData),
        "thinking" => Thinking(Thinking),
        "inline_thinking" => InlineThinking(InlineData),
        "tool_call" => ToolCall(ToolCall),
        "tool_call_output" => ToolCallOutput(ToolCallOutput),
        "partial_text" => PartialText(PartialText),
        "partial_thinking" => PartialThinking(PartialThinking),
        "partial_tool_call" => PartialToolCall(PartialToolCall),
        "partial_tool_call_output" => PartialToolCallOutput(PartialToolCallOutput),
    }))
}

/// The keys after a payload's `type`, each checked against the fields of the struct reading
/// them.
struct RestOfMap<A>(Option<A>);

impl<'de, A: MapAccess<'de>> PayloadSource<'de> for RestOfMap<A> {
    type Error = A::Error;

    fn read<T: Deserialize<'de>>(&mut self) -> Result<T, A::Error> {
        let map = self.0.take().ok_or_else(leave)?;
        T::deserialize(MapAccessDeserializer::new(Checked {
            map,
            fields: fields_of::<T>(),
            _key: PhantomData,
        }))
    }
}

/// Fields holding an object: what is inside is not checked here, so they go the tree way.
const NESTED: &[&str] = &["fidelity"];

/// A map whose keys must be fields of the struct reading it (and not nested ones).
struct Checked<'de, A> {
    map: A,
    fields: &'static [&'static str],
    _key: PhantomData<&'de str>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Checked<'de, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.map.next_key::<&'de str>()? else {
            return Ok(None);
        };
        if !self.fields.contains(&key) || NESTED.contains(&key) {
            return Err(leave());
        }
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A payload struct read from the front of a text.
struct AtFront<'a> {
    text: &'a str,
    end: usize,
}

impl<'a> PayloadSource<'a> for AtFront<'a> {
    type Error = ();

    fn read<T: Deserialize<'a>>(&mut self) -> Result<T, ()> {
        let (value, end) = at_front(self.text).ok_or(())?;
        self.end = end;
        Ok(value)
    }
}

/// A `model_msg` payload of type `tag` from its whole text (its `type` key is ignored).
pub(super) fn model_payload(tag: &str, text: &str) -> Option<ModelPayload> {
    let (payload, end) = model_payload_at_front(tag, text)?;
    text[end..]
        .bytes()
        .all(|b| b.is_ascii_whitespace())
        .then_some(payload)
}

/// [`model_payload`] read from the front of `text`, which may go on after it: the payload and
/// the byte offset where it ends.
pub(super) fn model_payload_at_front(tag: &str, text: &str) -> Option<(ModelPayload, usize)> {
    let mut source = AtFront { text, end: 0 };
    let payload = by_tag(tag, &mut source).ok()??;
    Some((payload, source.end))
}

/// The JSON value at the front of `text` and the byte offset where it ends.
pub(super) fn at_front<'a, T: Deserialize<'a>>(text: &'a str) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// The field names a derived `Deserialize` struct declares (serde hands them to
/// `deserialize_struct`; this deserializer only records them).
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    #[derive(Debug)]
    struct Fields(&'static [&'static str]);
    impl fmt::Display for Fields {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fields recorded")
        }
    }
    impl std::error::Error for Fields {}
    impl de::Error for Fields {
        fn custom<M: fmt::Display>(_: M) -> Fields {
            Fields(&[])
        }
    }
    struct Record;
    impl<'de> Deserializer<'de> for Record {
        type Error = Fields;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
            Err(Fields(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Fields> {
            Err(Fields(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    match T::deserialize(Record) {
        Err(Fields(fields)) => fields,
        Ok(_) => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(s: &str) {
        let tree = serde_json::from_str::<Value>(s)
            .map_err(|e| ParseError::new("", format!("invalid JSON: {e}")))
            .and_then(OmniMessage::from_value_exact);
        let text = OmniMessage::from_json_exact(s);
        match (&tree, &text) {
            (Ok(a), Ok(b)) => {
                // A missing timestamp is stamped now in both: compare the rest.
                assert_eq!((&a.body, &a.origin), (&b.body, &b.origin), "{s}");
                if s.contains("timestamp") {
                    assert_eq!(a.timestamp, b.timestamp, "{s}");
                }
            }
            _ => assert_eq!(tree, text, "{s}"),
        }
    }

    #[test]
    fn the_fast_path_accepts_and_refuses_what_the_tree_path_does() {
        for s in [
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"hi"}}"#,
            r#"{"timestamp":"2026-07-18T03:10:22.531Z","type":"model_msg","payload":{"type":"partial_text","role":"assistant","event_type":"delta","text":"x","stop_reason":"completed"},"origin":["s1"]}"#,
            r#"{"type":"model_msg","payload":{"type":"tool_call","role":"assistant","name":"t","arguments":"{\"a\":1}","tool_call_id":"c","stop_reason":"completed"}}"#,
            r#"{"type":"model_msg","payload":{"type":"partial_tool_call_output","role":"user","event_type":"stop","output":"","tool_call_id":"c","stop_reason":"aborted"}}"#,
            r#"{"type":"model_msg","payload":{"type":"inline_thinking","role":"assistant","data":"AA==","mime_type":"x/y"}}"#,
            // Refused: an unknown key, at either level.
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"hi","colour":"red"}}"#,
            r#"{"type":"model_msg","colour":1,"payload":{"type":"text","role":"user","text":"hi"}}"#,
            // A null read as absent, a wrong type, a missing field, an unknown payload type.
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"hi","sender":null}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":5}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"user"}}"#,
            r#"{"type":"model_msg","payload":{"type":"texture","role":"user","text":"hi"}}"#,
            // Duplicates, escaped keys, nested values, events: the tree way decides.
            r#"{"type":"model_msg","payload":{"type":"text","type":"thinking","role":"user","text":"hi"}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","te\u0078t":"hi"}}"#,
            r#"{"type":"model_msg","payload":{"type":"tool_call_output","role":"user","output":"o","images":["data:x"],"tool_call_id":"c"}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"null is a word"}}"#,
            // Events, read as trees where they stand: accepted, and refused, as the tree does.
            r#"{"type":"event_msg","payload":{"type":"request_begin"}}"#,
            r#"{"timestamp":"2026-07-18T03:10:22.531Z","type":"event_msg","payload":{"type":"token_usage","session":{"cache_read":0,"cache_write":1,"output":2,"total":3},"request":{"cache_read":0,"cache_write":1,"output":2,"total":3}},"origin":["s1"]}"#,
            r#"{"type":"event_msg","payload":{"type":"token_usage","session":{"cache_read":0,"cache_write":1,"output":2,"total":3,"input":1},"request":{"cache_read":0,"cache_write":1,"output":2,"total":3}}}"#,
            r#"{"type":"event_msg","payload":{"type":"warp_drive"}}"#,
            r#"{"type":"event_msg","payload":{"type":"request_begin"},"colour":1}"#,
            r#"{"type":"event_msg","payload":[1]}"#,
            r#"{"type":"model_msg","payload":"#,
            // Other key orders, repeated envelope keys, nested objects, another kind after
            // the payload.
            r#"{"payload":{"type":"text","role":"user","text":"hi"},"type":"model_msg"}"#,
            r#"{"type":"model_msg","payload":{"role":"user","type":"text","text":"hi"}}"#,
            r#"{"timestamp":"a","timestamp":"b","type":"model_msg","payload":{"type":"text","role":"user","text":"hi"}}"#,
            r#"{"type":"model_msg","payload":{"type":"thinking","role":"assistant","thinking":"t","fidelity":{"signature":"s","deep":{"k":1}}}}"#,
            r#"{"payload":{"type":"text","role":"user","text":"hi"},"type":"event_msg"}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"hi"}} trailing"#,
        ] {
            same(s);
        }
    }

    #[test]
    fn the_common_messages_take_the_fast_path() {
        let taken = |s: &str| fast(s).is_some();
        assert!(taken(
            r#"{"type":"model_msg","payload":{"type":"partial_text","role":"assistant","event_type":"delta","text":"x","stop_reason":"completed"}}"#
        ));
        assert!(taken(
            r#"{"type":"model_msg","payload":{"type":"tool_call_output","role":"user","output":"o","tool_call_id":"c"}}"#
        ));
        assert!(taken(
            r#"{"type":"event_msg","payload":{"type":"token_usage","session":{"cache_read":0,"cache_write":1,"output":2,"total":3},"request":{"cache_read":0,"cache_write":1,"output":2,"total":3}}}"#
        ));
        assert!(!taken(
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"hi","colour":"red"}}"#
        ));
    }

    #[test]
    fn every_payload_struct_declares_its_fields() {
        assert_eq!(
            fields_of::<Text>(),
            ["role", "text", "stop_reason", "fidelity", "sender"]
        );
        assert!(fields_of::<PartialToolCallOutput>().contains(&"images"));
    }
}
