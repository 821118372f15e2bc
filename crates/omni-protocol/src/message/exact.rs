//! [`OmniMessage::from_json_exact`]: the exactness check scenario files need, straight from the
//! text for the common message, without the two JSON trees of
//! [`OmniMessage::from_value_exact`] (a 44 MB scenario holds 227,000 messages).
//!
//! A message would lose a field when a key is unknown to its type or holds a `null` that a
//! typed field reads as absent. The fast path therefore takes only `model_msg` messages whose
//! text has no `null` at all and whose payload is flat (scalars only), and checks each payload
//! key against the fields its type declares. Anything else (events, nested values, escaped
//! keys, duplicates) goes the tree way, which accepts the same messages and names what is wrong.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
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

fn fast(s: &str) -> Option<OmniMessage> {
    if s.contains("null") {
        return None;
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope<'a> {
        #[serde(default)]
        timestamp: Option<Timestamp>,
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
        #[serde(borrow)]
        payload: &'a RawValue,
        #[serde(default)]
        origin: Option<Vec<String>>,
    }
    let env: Envelope<'_> = serde_json::from_str(s).ok()?;
    if env.kind != "model_msg" {
        return None;
    }
    let payload = env.payload.get();
    let flat: Flat<'_> = serde_json::from_str(payload).ok()?;
    let body = model_payload(flat.tag?, payload, Some(&flat.keys))?;
    Some(OmniMessage {
        timestamp: env.timestamp.unwrap_or_else(Timestamp::now),
        body: Body::Model(body),
        origin: env.origin,
    })
}

/// A `model_msg` payload of type `tag` from its text, read as that type's struct directly (not
/// through serde's buffering of an internally tagged enum). With `keys`, `None` when one of
/// them is not a field of that type (its `type` key is the tag, always allowed).
pub(super) fn model_payload(tag: &str, text: &str, keys: Option<&[&str]>) -> Option<ModelPayload> {
    let (payload, end) = model_payload_at_front(tag, text, keys)?;
    text[end..]
        .bytes()
        .all(|b| b.is_ascii_whitespace())
        .then_some(payload)
}

/// [`model_payload`] read from the front of `text`, which may go on after it: the payload and
/// the byte offset where it ends.
pub(super) fn model_payload_at_front(
    tag: &str,
    text: &str,
    keys: Option<&[&str]>,
) -> Option<(ModelPayload, usize)> {
    macro_rules! by_tag {
        ($($name:literal => $variant:ident($ty:ty)),* $(,)?) => {
            match tag {
                $($name => {
                    if let Some(keys) = keys {
                        let fields = fields_of::<$ty>();
                        if !keys.iter().all(|k| *k == "type" || fields.contains(k)) {
                            return None;
                        }
                    }
                    let (payload, end) = at_front::<$ty>(text)?;
                    (ModelPayload::$variant(payload), end)
                })*
                _ => return None,
            }
        };
    }
    Some(by_tag! {
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
    })
}

/// The JSON value at the front of `text` and the byte offset where it ends.
pub(super) fn at_front<'a, T: Deserialize<'a>>(text: &'a str) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, values.byte_offset()))
}

/// The keys of a JSON object whose values are all scalars, and its `type` string.
struct Flat<'a> {
    keys: Vec<&'a str>,
    tag: Option<&'a str>,
}

impl<'de> Deserialize<'de> for Flat<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flat<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of scalars")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Flat<'de>, A::Error> {
                let mut flat = Flat {
                    keys: Vec::with_capacity(8),
                    tag: None,
                };
                // A key with escapes cannot be borrowed: an error here sends the message the
                // tree way.
                while let Some(key) = map.next_key::<&'de str>()? {
                    if flat.keys.contains(&key) {
                        return Err(de::Error::custom("duplicate key"));
                    }
                    let value: Scalar<'de> = map.next_value()?;
                    if key == "type" {
                        flat.tag = value.0;
                    }
                    flat.keys.push(key);
                }
                Ok(flat)
            }
        }
        d.deserialize_map(V)
    }
}

/// A scalar value; `Some` for a string that borrows from the input.
struct Scalar<'a>(Option<&'a str>);

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar(Some(v)))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Scalar<'de>, E> {
                Ok(Scalar(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar<'de>, E> {
                Ok(Scalar(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Scalar<'de>, A::Error> {
                Err(de::Error::custom("nested"))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Scalar<'de>, A::Error> {
                Err(de::Error::custom("nested"))
            }
        }
        d.deserialize_any(V)
    }
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
            r#"{"type":"event_msg","payload":{"type":"request_begin"}}"#,
            r#"{"type":"model_msg","payload":{"type":"text","role":"user","text":"null is a word"}}"#,
            r#"{"type":"model_msg","payload":"#,
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
