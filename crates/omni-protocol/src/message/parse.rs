//! Reading messages: a typed fast path, the JSON-tree path that names the offending field,
//! and the exactness check scenario files use.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::*;
use crate::Timestamp;

/// A `model_msg` payload's tag when it comes first, as written payloads have it: no pass over
/// a long text to find it.
fn written_tag(payload: &str) -> Option<&str> {
    let (tag, _) = payload.strip_prefix(r#"{"type":""#)?.split_once('"')?;
    (!tag.contains('\\')).then_some(tag)
}

/// A line exactly as the trace writer writes it (timestamp, type, payload, in that order, no
/// origin, no spaces), read in one pass: the payload is parsed where it stands instead of
/// being scanned once to find its end and again to read it. `None` for anything else.
fn written_line(s: &str) -> Option<OmniMessage> {
    let (timestamp, rest) = s.strip_prefix(r#"{"timestamp":""#)?.split_once('"')?;
    let (kind, rest) = rest.strip_prefix(r#","type":""#)?.split_once('"')?;
    let payload = rest.strip_prefix(r#","payload":"#)?;
    // Escapes and control characters are the JSON reader's business.
    if timestamp.bytes().any(|b| b == b'\\' || b < 0x20) {
        return None;
    }
    let (body, end) = match kind {
        "model_msg" => {
            let (p, end) = super::exact::model_payload_at_front(written_tag(payload)?, payload)?;
            (Body::Model(p), end)
        }
        "event_msg" => {
            let (e, end) = super::exact::at_front(payload)?;
            (Body::Event(e), end)
        }
        "session_meta" => {
            let (m, end) = super::exact::at_front(payload)?;
            (Body::SessionMeta(m), end)
        }
        _ => return None,
    };
    (&payload[end..] == "}").then(|| OmniMessage {
        timestamp: Timestamp::from_text(timestamp),
        body,
        origin: None,
    })
}

impl OmniMessage {
    /// Parses one message, naming the offending field on failure.
    pub fn from_json(s: &str) -> Result<OmniMessage, ParseError> {
        if let Some(msg) = OmniMessage::from_json_typed(s) {
            return Ok(msg);
        }
        let value: Value = serde_json::from_str(s)
            .map_err(|e| ParseError::new("", format!("invalid JSON: {e}")))?;
        OmniMessage::from_value(value)
    }

    /// The common case straight into the types, with no JSON tree in between (a resume reads
    /// tens of thousands of lines). `None` for anything unusual: the tree path then accepts
    /// exactly what it always did, or says precisely what is wrong.
    fn from_json_typed(s: &str) -> Option<OmniMessage> {
        if let Some(msg) = written_line(s) {
            return Some(msg);
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Envelope<'a> {
            timestamp: Timestamp,
            #[serde(rename = "type", borrow)]
            kind: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            payload: &'a serde_json::value::RawValue,
            #[serde(default)]
            origin: Option<Vec<String>>,
        }
        let env: Envelope<'_> = serde_json::from_str(s).ok()?;
        let payload = env.payload.get();
        let body = match env.kind.as_ref() {
            "session_meta" => Body::SessionMeta(serde_json::from_str(payload).ok()?),
            "model_msg" => {
                #[derive(Deserialize)]
                struct Tag<'a> {
                    #[serde(rename = "type", borrow)]
                    tag: std::borrow::Cow<'a, str>,
                }
                let tag = match written_tag(payload) {
                    Some(tag) => std::borrow::Cow::Borrowed(tag),
                    None => serde_json::from_str::<Tag<'_>>(payload).ok()?.tag,
                };
                Body::Model(super::exact::model_payload(&tag, payload)?)
            }
            "event_msg" => Body::Event(serde_json::from_str(payload).ok()?),
            _ => return None,
        };
        Some(OmniMessage {
            timestamp: env.timestamp,
            body,
            origin: env.origin,
        })
    }

    /// Parses an already-decoded JSON value.
    pub fn from_value(value: Value) -> Result<OmniMessage, ParseError> {
        let Value::Object(mut obj) = value else {
            return Err(ParseError::new("", "expected a JSON object"));
        };
        let timestamp = match obj.remove("timestamp") {
            Some(Value::String(s)) => Timestamp::from_string(s),
            Some(_) => return Err(ParseError::new("timestamp", "expected a string")),
            None => return Err(ParseError::new("timestamp", "missing")),
        };
        Self::from_object_with_timestamp(obj, timestamp)
    }

    /// Parses a message that may lack a `timestamp` (scenario files, hand-written input):
    /// a missing one is stamped now.
    pub fn from_value_stamping(value: Value) -> Result<OmniMessage, ParseError> {
        let Value::Object(mut obj) = value else {
            return Err(ParseError::new("", "expected a JSON object"));
        };
        let timestamp = match obj.remove("timestamp") {
            Some(Value::String(s)) => Timestamp::from_string(s),
            Some(_) => return Err(ParseError::new("timestamp", "expected a string")),
            None => Timestamp::now(),
        };
        Self::from_object_with_timestamp(obj, timestamp)
    }

    /// Like [`OmniMessage::from_value_stamping`], but a field the message would not carry back
    /// out is an error naming it (`payload.colour`), instead of being dropped. For files that
    /// script messages verbatim (scenarios), where a silently dropped key would make the run
    /// differ from what the file says. A `null` a typed field reads as absent counts as
    /// dropped too.
    pub fn from_value_exact(value: Value) -> Result<OmniMessage, ParseError> {
        let msg = OmniMessage::from_value_stamping(value.clone())?;
        let back = serde_json::to_value(&msg).map_err(|e| ParseError::new("", e.to_string()))?;
        match first_dropped_key(&value, &back, "") {
            Some(path) => Err(ParseError::new(
                path,
                "unknown field (it would be dropped, not passed on)",
            )),
            None => Ok(msg),
        }
    }

    fn from_object_with_timestamp(
        mut obj: Map<String, Value>,
        timestamp: Timestamp,
    ) -> Result<OmniMessage, ParseError> {
        let kind = match obj.remove("type") {
            Some(Value::String(s)) => s,
            Some(_) => return Err(ParseError::new("type", "expected a string")),
            None => return Err(ParseError::new("type", "missing")),
        };
        let payload = match obj.remove("payload") {
            Some(p @ Value::Object(_)) => p,
            Some(_) => return Err(ParseError::new("payload", "expected an object")),
            None => return Err(ParseError::new("payload", "missing")),
        };
        let origin = match obj.remove("origin") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                let mut hops = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => hops.push(s),
                        _ => {
                            return Err(ParseError::new(
                                format!("origin[{i}]"),
                                "expected a string",
                            ))
                        }
                    }
                }
                Some(hops)
            }
            Some(_) => {
                return Err(ParseError::new(
                    "origin",
                    "expected an array of session ids",
                ))
            }
        };
        let payload_type = payload
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = match kind.as_str() {
            "session_meta" => Body::SessionMeta(parse_payload(payload, "session_meta")?),
            "model_msg" => Body::Model(parse_payload(payload, payload_type.as_deref().unwrap_or("?"))?),
            "event_msg" => Body::Event(parse_payload(payload, payload_type.as_deref().unwrap_or("?"))?),
            other => {
                return Err(ParseError::new(
                    "type",
                    format!("unknown message type {other:?} (expected session_meta, model_msg or event_msg)"),
                ))
            }
        };
        Ok(OmniMessage {
            timestamp,
            body,
            origin,
        })
    }
}

fn parse_payload<T: serde::de::DeserializeOwned>(
    payload: Value,
    ty: &str,
) -> Result<T, ParseError> {
    if ty == "?" {
        return Err(ParseError::new("payload.type", "missing"));
    }
    // Deserialize from a borrow so the payload is still there to locate the offending field:
    // serde_json's errors from a `Value` carry no path.
    T::deserialize(&payload).map_err(|e| {
        let msg = e.to_string();
        let quoted = msg.split('`').nth(1).unwrap_or_default();
        if msg.starts_with("missing field") {
            let path = missing_field_path(&payload, ty, quoted);
            return ParseError::new(path, format!("missing (payload type {ty:?})"));
        }
        if msg.starts_with("unknown variant") {
            if quoted == ty {
                return ParseError::new(
                    "payload.type",
                    format!("unknown payload type {ty:?}: {msg}"),
                );
            }
            // An enum-valued field (status, role, decision, ...) holds an unknown spelling.
            if let Some(path) = find_leaf(&payload, "payload", &Value::String(quoted.to_owned())) {
                return ParseError::new(path, format!("{msg} (payload type {ty:?})"));
            }
        }
        if let Some(path) = invalid_type_leaf(&msg).and_then(|v| find_leaf(&payload, "payload", &v))
        {
            return ParseError::new(path, format!("{msg} (payload type {ty:?})"));
        }
        ParseError::new("payload", format!("{msg} (payload type {ty:?})"))
    })
}

/// Where a required field is missing. Nested structs are deserialized while their parent's
/// fields are read, and a parent reports its own missing fields only afterwards, so a nested
/// object lacking `field` is the culprit when the payload type has one that declares it.
fn missing_field_path(payload: &Value, ty: &str, field: &str) -> String {
    const COUNTS: &[&str] = &["cache_read", "cache_write", "output", "total"];
    const TOOL: &[&str] = &["name", "description"];
    const MCP: &[&str] = &["server", "transport", "status", "duration_ms"];
    let nested: &[(&str, &[&str])] = match ty {
        "token_usage" => &[("session", COUNTS), ("request", COUNTS)],
        "tool_list_ready" => &[("tools", TOOL)],
        "mcp_connect_end" => &[("results", MCP)],
        _ => &[],
    };
    for (key, fields) in nested {
        if !fields.contains(&field) {
            continue;
        }
        match payload.get(*key) {
            Some(Value::Object(o)) if !o.contains_key(field) => {
                return format!("payload.{key}.{field}");
            }
            Some(Value::Array(items)) => {
                if let Some(i) = items
                    .iter()
                    .position(|v| v.as_object().is_some_and(|o| !o.contains_key(field)))
                {
                    return format!("payload.{key}[{i}].{field}");
                }
            }
            _ => {}
        }
    }
    format!("payload.{field}")
}

/// The path of the first object key in `given` that `kept` lacks, depth first.
fn first_dropped_key(given: &Value, kept: &Value, path: &str) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => g.iter().find_map(|(key, gv)| match k.get(key) {
            None => Some(join(key)),
            Some(kv) => first_dropped_key(gv, kv, &join(key)),
        }),
        (Value::Array(g), Value::Array(k)) => g
            .iter()
            .zip(k)
            .enumerate()
            .find_map(|(i, (gv, kv))| first_dropped_key(gv, kv, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// The scalar an "invalid type" message quotes (an integer, boolean, string or null).
fn invalid_type_leaf(msg: &str) -> Option<Value> {
    let rest = msg.strip_prefix("invalid type: ")?;
    let rest = &rest[..rest.find(", expected")?];
    if rest == "null" {
        return Some(Value::Null);
    }
    if let Some(s) = rest.strip_prefix("string ") {
        return serde_json::from_str::<String>(s).ok().map(Value::String);
    }
    let inner = rest.split('`').nth(1)?;
    match rest.split(' ').next()? {
        "integer" | "boolean" => serde_json::from_str(inner).ok(),
        _ => None,
    }
}

/// The path of the first leaf equal to `want`, shallowest first.
fn find_leaf(value: &Value, path: &str, want: &Value) -> Option<String> {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| path != "payload" || k.as_str() != "type")
            .map(|(k, v)| (format!("{path}.{k}"), v))
            .collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("{path}[{i}]"), v))
            .collect(),
        _ => return None,
    };
    if let Some((p, _)) = children.iter().find(|(_, v)| *v == want) {
        return Some(p.clone());
    }
    children.iter().find_map(|(p, v)| find_leaf(v, p, want))
}

/// A message that failed to parse, with the path of the offending field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct ParseError {
    /// Dotted path of the field (`payload.text`, `origin[1]`); empty for the whole message.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl ParseError {
    pub(super) fn new(path: impl Into<String>, message: impl Into<String>) -> ParseError {
        ParseError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl<'de> Deserialize<'de> for OmniMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        OmniMessage::from_value(value).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(line: &str) -> Result<OmniMessage, ParseError> {
        OmniMessage::from_value(
            serde_json::from_str(line).map_err(|e| ParseError::new("", e.to_string()))?,
        )
    }

    /// What the one-pass reader takes, it reads as the tree does; what it leaves (another key
    /// order, an origin, trailing text, escapes), the general path still reads the same way.
    #[test]
    fn written_lines_read_in_one_pass_as_the_tree_reads_them() {
        let call = r#"{"type":"tool_call","role":"assistant","name":"sh","arguments":"{\"cmd\":\"ls\"}","tool_call_id":"c1","stop_reason":"completed"}"#;
        let taken = [
            format!(r#"{{"timestamp":"2026-11-30T16:06:05.475Z","type":"model_msg","payload":{call}}}"#),
            r#"{"timestamp":"2026-11-30T16:06:05.475Z","type":"event_msg","payload":{"type":"request_begin"}}"#.to_owned(),
            r#"{"timestamp":"t","type":"session_meta","payload":{"session_id":"s","provider":"p","model_id":"m","model_context_window":"unknown","system_prompt":"","agent_state":"a","workspace":"w"}}"#.to_owned(),
        ];
        for line in &taken {
            let one_pass = written_line(line).unwrap_or_else(|| panic!("not taken: {line}"));
            assert_eq!(one_pass, tree(line).unwrap());
            assert_eq!(one_pass.to_json(), *line);
        }
        let left = [
            format!(r#"{{"timestamp":"2026-11-30T16:06:05.475Z","type":"model_msg","payload":{call},"origin":["a"]}}"#),
            format!(r#"{{"type":"model_msg","timestamp":"2026-11-30T16:06:05.475Z","payload":{call}}}"#),
            format!(r#"{{"timestamp":"2026-11-30T16:06:05.475Z","type":"model_msg","payload":{call} }}"#),
            format!(r#"{{"timestamp":"2026\u002d11","type":"model_msg","payload":{call}}}"#),
            r#"{"timestamp":"t","type":"model_msg","payload":{"role":"user","type":"text","text":"a","stop_reason":"completed"}}"#.to_owned(),
        ];
        for line in &left {
            assert!(written_line(line).is_none(), "taken: {line}");
            assert_eq!(OmniMessage::from_json(line).unwrap(), tree(line).unwrap());
        }
        let broken = [
            format!(r#"{{"timestamp":"t","type":"model_msg","payload":{call}}}}}"#),
            format!(r#"{{"timestamp":"t","type":"model_msg","payload":{call}"#),
            "{\"timestamp\":\"a\u{1}b\",\"type\":\"event_msg\",\"payload\":{\"type\":\"request_begin\"}}".to_owned(),
        ];
        for line in &broken {
            assert!(written_line(line).is_none(), "taken: {line}");
            assert!(OmniMessage::from_json(line).is_err(), "read: {line}");
        }
        // An unknown payload key: whatever the tree says, the one-pass reader says too.
        let extra =
            r#"{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin","x":1}}"#;
        assert_eq!(written_line(extra), tree(extra).ok());
    }
}
