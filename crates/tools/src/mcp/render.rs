//! A `tools/call` result as tool output: text the model can use, plus images.
//!
//! The result is read as JSON rather than through the SDK's content types, so a block of a
//! kind this version does not know becomes a placeholder line instead of an error.

use serde_json::Value;

/// Text and `data:` image URLs of one result, and whether the server flagged it an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub text: String,
    pub images: Vec<String>,
    pub is_error: bool,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Text blocks are joined by newlines; images ride along as data URLs; audio and binary
/// resources become placeholder lines; resource links name their URI (and description) so the
/// model can ask for them; a result with only `structuredContent` is that JSON, pretty-printed.
pub(crate) fn render(result: &Value) -> Rendered {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match str_of(block, "type") {
            Some("text") => parts.push(str_of(block, "text").unwrap_or_default().to_owned()),
            Some("image") => images.push(format!(
                "data:{};base64,{}",
                str_of(block, "mimeType").unwrap_or("application/octet-stream"),
                str_of(block, "data").unwrap_or_default()
            )),
            Some("audio") => parts.push(format!(
                "[audio content: {}]",
                str_of(block, "mimeType").unwrap_or("unknown type")
            )),
            Some("resource_link") => {
                let mut line = format!("[resource: {}]", str_of(block, "uri").unwrap_or("?"));
                if let Some(name) = str_of(block, "name") {
                    line.push_str(&format!(" {name}"));
                }
                if let Some(d) = str_of(block, "description") {
                    line.push_str(&format!(" — {d}"));
                }
                parts.push(line);
            }
            Some("resource") => {
                let resource = block.get("resource").unwrap_or(&Value::Null);
                match str_of(resource, "text") {
                    Some(text) => parts.push(text.to_owned()),
                    None => parts.push(format!(
                        "[resource: {} (binary{})]",
                        str_of(resource, "uri").unwrap_or("unknown"),
                        str_of(resource, "mimeType")
                            .map(|m| format!(", {m}"))
                            .unwrap_or_default()
                    )),
                }
            }
            other => parts.push(format!(
                "[unsupported content type: {}]",
                other.unwrap_or("none")
            )),
        }
    }
    let mut text = parts.join("\n");
    // A server with an output schema may answer with structured content only; the model
    // still needs to see it.
    if text.is_empty() {
        if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
            text = serde_json::to_string_pretty(structured).unwrap_or_default();
        }
    }
    Rendered {
        text,
        images,
        is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_block_kind_becomes_text_or_an_image() {
        let r = render(&json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAA"},
            {"type": "audio", "mimeType": "audio/wav", "data": "BBB"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "description": "the a file"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "inline b"}},
            {"type": "resource", "resource": {"uri": "file:///c", "blob": "CCC", "mimeType": "application/gzip"}},
            {"type": "hologram"}
        ]}));
        assert_eq!(
            r.text,
            "hello\n[audio content: audio/wav]\n[resource: file:///a.txt] a.txt — the a file\ninline b\n[resource: file:///c (binary, application/gzip)]\n[unsupported content type: hologram]"
        );
        assert_eq!(r.images, ["data:image/png;base64,AAA"]);
        assert!(!r.is_error);
    }

    #[test]
    fn structured_content_only_is_shown_as_json_and_errors_are_flagged() {
        let r = render(&json!({"content": [], "structuredContent": {"t": 1}, "isError": true}));
        assert_eq!(r.text, "{\n  \"t\": 1\n}");
        assert!(r.is_error);
        let r = render(
            &json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"t": 1}}),
        );
        assert_eq!(r.text, "x");
    }
}
