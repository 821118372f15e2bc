//! Google Gemini (`POST {base}/models/{model}:streamGenerateContent?alt=sse`).
//!
//! Wire → [`UniEvent`] mapping (candidate 0 of each chunk):
//! - a part `{"text", "thought": true}` → thinking; `{"text"}` → text; a `thoughtSignature`
//!   on any part goes into that item's fidelity as `{"thoughtSignature": …}`;
//! - `{"functionCall": {"name", "args", "id"?}}` → a complete tool call at once (Gemini does
//!   not stream arguments). Without an `id` the function name is the id, and the session's
//!   [`ToolCallIdAllocator`](crate::ToolCallIdAllocator) makes repeats unique (`f`, `f#2`);
//! - `finishReason`: `STOP` → `stop`, `MAX_TOKENS` → `length`, `SAFETY`, `RECITATION`,
//!   `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII` → `content_filter`, others lower-cased;
//! - `usageMetadata`: `promptTokenCount` includes `cachedContentTokenCount`, so the cached
//!   part is split out; `thoughtsTokenCount` and `candidatesTokenCount` are separate already;
//! - `{"error": {"code", "message", "status"}}` → a provider error classified by `code`.
//!
//! A body that ends before any `finishReason` is cut off ([`WireError::Malformed`]).
//!
//! Prompt caching needs nothing here: Gemini 2.5 and later models cache implicitly, matching
//! each request's prefix (system instruction, tools, contents) against recent ones and
//! billing the hits at the cached rate, reported as `usageMetadata.cachedContentTokenCount`
//! (read above). The adapter sends no caching field, with [`ModelConfig::prompt_cache`] on or
//! off; it keeps the prefix byte-stable (the history is resent unchanged), which is all
//! implicit caching asks. Explicit caching (`cachedContents`, storage billed by the hour) is
//! not used.

use std::collections::HashMap;

use penguin_omni_protocol::{Fidelity, ModelPayload, OmniMessage, Role};
use serde_json::{json, Map, Value};

use crate::sse::{DecodedEvent, SseEventHandler, SseStreamDecoder};
use crate::translate::{strip_suffix, ContentItem, UniEvent, Usage};
use crate::wire::{
    classify_error, provider_error, ModelConfig, WireError, WireProtocol, WireRequest,
};
use crate::ThinkingLevel;

/// The Gemini protocol: builds requests and keeps the committed history.
#[derive(Clone, Debug, Default)]
pub struct Gemini {
    history: Vec<Value>,
    /// Provider call id → function name: a `functionResponse` must name its function, and a
    /// tool output carries only the id.
    call_names: HashMap<String, String>,
}

impl Gemini {
    /// A protocol with an empty history.
    pub fn new() -> Gemini {
        Gemini::default()
    }

    /// The committed history as wire `contents`.
    pub fn history(&self) -> &[Value] {
        &self.history
    }

    fn remember_calls(&mut self, msgs: &[OmniMessage]) {
        for msg in msgs {
            if let Some(ModelPayload::ToolCall(c)) = msg.model() {
                self.call_names
                    .insert(strip_suffix(&c.tool_call_id).to_owned(), c.name.clone());
            }
        }
    }

    fn to_contents(&self, msgs: &[OmniMessage]) -> Vec<Value> {
        let payloads: Vec<&ModelPayload> = msgs
            .iter()
            .filter_map(OmniMessage::model)
            .filter(|p| !p.is_partial())
            .collect();
        let mut out = Vec::new();
        for group in payloads.chunk_by(|a, b| a.role() == b.role()) {
            let (role, parts) = match group[0].role() {
                Role::User => ("user", self.user_parts(group)),
                Role::Assistant => ("model", model_parts(group)),
            };
            if !parts.is_empty() {
                out.push(json!({"role": role, "parts": parts}));
            }
        }
        out
    }

    fn user_parts(&self, group: &[&ModelPayload]) -> Vec<Value> {
        let mut responses = Vec::new();
        let mut tool_images = Vec::new();
        let mut rest = Vec::new();
        for p in group {
            match p {
                ModelPayload::ToolCallOutput(o) => {
                    // A functionResponse holds JSON only: the images a tool returned (read_image's
                    // data URLs) follow the responses as inlineData parts of the same turn.
                    tool_images.extend(o.images.iter().flatten().map(|u| image_part(u)));
                    let id = strip_suffix(&o.tool_call_id);
                    // Name-as-id calls map to themselves; real ids were remembered at commit.
                    let name = self.call_names.get(id).map_or(id, String::as_str);
                    let mut response = json!({"name": name, "response": {"output": o.output}});
                    if name != id {
                        response["id"] = json!(id);
                    }
                    responses.push(json!({"functionResponse": response}));
                }
                ModelPayload::Text(t) if !t.text.is_empty() => rest.push(json!({"text": t.text})),
                ModelPayload::ImageUrl(i) => rest.push(image_part(&i.image_url)),
                ModelPayload::InlineData(d) => {
                    rest.push(json!({"inlineData": {"mimeType": d.mime_type, "data": d.data}}))
                }
                _ => {}
            }
        }
        responses.extend(tool_images);
        responses.extend(rest);
        responses
    }
}

/// An image by URL: a `data:` URL inline (`inlineData`), any other URL by reference
/// (`fileData`).
fn image_part(url: &str) -> Value {
    match url
        .strip_prefix("data:")
        .and_then(|r| r.split_once(";base64,"))
    {
        Some((mime, data)) => json!({"inlineData": {"mimeType": mime, "data": data}}),
        None => json!({"fileData": {"fileUri": url}}),
    }
}

fn with_signature(mut part: Value, fidelity: Option<&Fidelity>) -> Value {
    if let Some(sig) = fidelity.and_then(|f| f.get("thoughtSignature")) {
        part["thoughtSignature"] = sig.clone();
    }
    part
}

fn model_parts(group: &[&ModelPayload]) -> Vec<Value> {
    let mut parts = Vec::new();
    for p in group {
        match p {
            ModelPayload::Thinking(t) => parts.push(with_signature(
                json!({"text": t.thinking, "thought": true}),
                t.fidelity.as_deref(),
            )),
            ModelPayload::Text(t) if !t.text.is_empty() || t.fidelity.is_some() => parts.push(
                with_signature(json!({"text": t.text}), t.fidelity.as_deref()),
            ),
            ModelPayload::ToolCall(c) => {
                let id = strip_suffix(&c.tool_call_id);
                let args = match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                let mut call = json!({"name": c.name, "args": args});
                if id != c.name {
                    call["id"] = json!(id);
                }
                parts.push(with_signature(
                    json!({"functionCall": call}),
                    c.fidelity.as_deref(),
                ));
            }
            _ => {}
        }
    }
    parts
}

/// The `thinkingBudget` for a level (`0` turns thinking off).
pub fn thinking_budget(level: ThinkingLevel) -> u64 {
    match level {
        ThinkingLevel::None => 0,
        ThinkingLevel::Low => 1024,
        ThinkingLevel::Medium => 8192,
        ThinkingLevel::High => 16384,
        ThinkingLevel::Xhigh | ThinkingLevel::Max => 32768,
    }
}

impl WireProtocol for Gemini {
    type Decoder = GeminiDecoder;

    fn build_request(
        &self,
        config: &ModelConfig,
        new_messages: &[OmniMessage],
        thinking_level: Option<ThinkingLevel>,
    ) -> WireRequest {
        let mut contents = self.history.clone();
        contents.extend(self.to_contents(new_messages));
        let mut body = Map::new();
        body.insert("contents".into(), Value::Array(contents));
        if !config.system_prompt.is_empty() {
            body.insert(
                "systemInstruction".into(),
                json!({"parts": [{"text": config.system_prompt}]}),
            );
        }
        if !config.tools.is_empty() {
            let declarations: Vec<Value> = config
                .tools
                .iter()
                .map(|t| {
                    let mut d = json!({"name": t.name, "description": t.description});
                    if let Some(p) = &t.parameters {
                        d["parameters"] = p.clone();
                    }
                    d
                })
                .collect();
            body.insert(
                "tools".into(),
                json!([{"functionDeclarations": declarations}]),
            );
        }
        let mut generation = Map::new();
        if config.max_output_tokens > 0 {
            generation.insert("maxOutputTokens".into(), json!(config.max_output_tokens));
        }
        if let Some(level) = thinking_level {
            let budget = thinking_budget(level);
            generation.insert(
                "thinkingConfig".into(),
                json!({"thinkingBudget": budget, "includeThoughts": budget > 0}),
            );
        }
        if !generation.is_empty() {
            body.insert("generationConfig".into(), Value::Object(generation));
        }
        let mut headers = Vec::new();
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push(("x-goog-api-key".to_owned(), key.to_owned()));
        }
        WireRequest {
            path: format!("/models/{}:streamGenerateContent?alt=sse", config.model_id),
            headers,
            body: Value::Object(body),
        }
    }

    fn commit(&mut self, new_messages: &[OmniMessage], reply: &[OmniMessage]) {
        self.remember_calls(reply);
        let mut turn = self.to_contents(new_messages);
        turn.extend(self.to_contents(reply));
        self.history.extend(turn);
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        self.call_names.clear();
        self.remember_calls(history);
        self.history = self.to_contents(history);
    }
}

/// Decodes a Gemini SSE body. See the module docs for the mapping.
pub type GeminiDecoder = SseStreamDecoder<GeminiEvents>;

/// The Gemini half of [`GeminiDecoder`]: the state of one response between events.
#[derive(Debug, Default)]
pub struct GeminiEvents {
    chunks: usize,
    finish_seen: bool,
}

impl SseEventHandler for GeminiEvents {
    fn event(&mut self, sse: &DecodedEvent) -> Result<UniEvent, WireError> {
        let data = sse.data.as_str();
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            WireError::Malformed(format!(
                "Gemini chunk {} is not valid JSON ({e}): {}",
                self.chunks + 1,
                data.chars().take(200).collect::<String>()
            ))
        })?;
        self.chunks += 1;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            let (message, codes) = provider_error(&chunk)
                .unwrap_or_else(|| (format!("provider error: {}", chunk["error"]), Vec::new()));
            let status = chunk
                .pointer("/error/code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (400..600).contains(c));
            let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
            return Err(WireError::Provider {
                status: classify_error(status, &codes, &message),
                message,
            });
        }
        let mut ev = UniEvent::default();
        let candidate = chunk.pointer("/candidates/0");
        for part in candidate
            .and_then(|c| c.pointer("/content/parts"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let fidelity = part.get("thoughtSignature").map(|sig| {
                let mut f = Fidelity::new();
                f.insert("thoughtSignature".into(), sig.clone());
                f
            });
            if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    return Err(WireError::Malformed(format!(
                        "functionCall without a name in chunk {}: {call}",
                        self.chunks
                    )));
                }
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|i| !i.is_empty())
                    .unwrap_or(name);
                ev.content_items.push(ContentItem::ToolCall {
                    tool_call_id: id.to_owned(),
                    name: name.to_owned(),
                    arguments: call.get("args").cloned().unwrap_or(Value::Null),
                    fidelity,
                });
            } else if let Some(text) = part.get("text").and_then(Value::as_str) {
                if part.get("thought").and_then(Value::as_bool) == Some(true) {
                    ev.content_items.push(ContentItem::Thinking {
                        thinking: text.to_owned(),
                        fidelity,
                    });
                } else {
                    ev.content_items.push(ContentItem::Text {
                        text: text.to_owned(),
                        fidelity,
                    });
                }
            }
        }
        if let Some(reason) = candidate
            .and_then(|c| c.get("finishReason"))
            .and_then(Value::as_str)
            .filter(|r| *r != "FINISH_REASON_UNSPECIFIED")
        {
            self.finish_seen = true;
            ev.finish_reason = Some(normalize_finish_reason(reason));
        }
        if let Some(u) = chunk.get("usageMetadata").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            let cached = n("cachedContentTokenCount");
            ev.usage = Some(Usage {
                cached_tokens: cached,
                prompt_tokens: n("promptTokenCount").saturating_sub(cached),
                thoughts_tokens: n("thoughtsTokenCount"),
                response_tokens: n("candidatesTokenCount"),
            });
        }
        Ok(ev)
    }

    fn events_seen(&self) -> usize {
        self.chunks
    }

    fn missing_end(&self) -> Option<String> {
        (!self.finish_seen).then(|| {
            format!(
                "a finishReason: the stream ended after {} chunk(s) without one",
                self.chunks
            )
        })
    }
}

fn normalize_finish_reason(reason: &str) -> String {
    match reason {
        "STOP" => "stop".into(),
        "MAX_TOKENS" => "length".into(),
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" => {
            "content_filter".into()
        }
        other => other.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    #[test]
    fn tool_outputs_name_their_function_and_ids_lose_their_suffix() {
        let mut g = Gemini::new();
        let mut config = ModelConfig::new(
            "https://generativelanguage.googleapis.com/v1beta",
            "gemini-2.5-flash",
        );
        config.api_key = Some("k".into());
        g.commit(
            &[build::user_text("weather?")],
            &[
                build::tool_call(
                    "get_weather",
                    "{\"city\":\"Paris\"}",
                    "get_weather",
                    StopReason::Completed,
                    None,
                ),
                build::tool_call(
                    "get_weather",
                    "{\"city\":\"Rome\"}",
                    "get_weather#2",
                    StopReason::Completed,
                    None,
                ),
            ],
        );
        let req = g.build_request(
            &config,
            &[
                build::tool_call_output("sunny", "get_weather", StopReason::Completed),
                build::tool_call_output("rain", "get_weather#2", StopReason::Completed),
            ],
            Some(ThinkingLevel::Low),
        );
        assert_eq!(
            req.path,
            "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(req.headers, [("x-goog-api-key".to_owned(), "k".to_owned())]);
        assert_eq!(
            req.body,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "weather?"}]},
                    {"role": "model", "parts": [
                        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}
                    ]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
                        {"functionResponse": {"name": "get_weather", "response": {"output": "rain"}}}
                    ]}
                ],
                "generationConfig": {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}}
            })
        );
    }

    #[test]
    fn finish_reasons_normalize() {
        assert_eq!(normalize_finish_reason("STOP"), "stop");
        assert_eq!(normalize_finish_reason("MAX_TOKENS"), "length");
        assert_eq!(normalize_finish_reason("SAFETY"), "content_filter");
        assert_eq!(
            normalize_finish_reason("MALFORMED_FUNCTION_CALL"),
            "malformed_function_call"
        );
    }
}
