//! OpenAI Responses (`POST {base}/responses`, streamed), as spoken by OpenAI and by llama.cpp's
//! server.
//!
//! The request is stateless (`store: false`): the adapter keeps the conversation as Responses
//! `input` items and resends it, and asks for `reasoning.encrypted_content` so reasoning can be
//! replayed without server-side storage.
//!
//! Wire → [`UniEvent`] mapping (items are keyed by `item_id`, which every server sends;
//! `output_index` is not relied on because llama.cpp omits it):
//! - `response.output_item.added` registers the item. A `message` item's `phase` (GPT-5
//!   `commentary` / `final_answer`) goes into the fidelity of each of its text deltas, so a
//!   change of phase opens a new text segment (protocol
//!   [§6.2](penguin_omni_protocol::spec#s6.2) *Stream translation*) and replays under the
//!   same phase. A
//!   `function_call` item starts the call (call id, name);
//! - `response.output_text.delta` → text; `response.refusal.delta` → text as well (it is what
//!   the user sees);
//! - `response.reasoning_summary_text.delta` and `response.reasoning_text.delta` → thinking
//!   without fidelity; `response.output_item.done` of a `reasoning` item → an empty thinking
//!   item with fidelity `{"reasoning_item": <the item verbatim>}` (its `id`, `summary` /
//!   `content` and `encrypted_content`), which closes the block the way Claude's signature does
//!   and is sent back unchanged. Encrypted reasoning with no visible text still becomes a
//!   (text-less) thinking message, so it is kept;
//! - `response.function_call_arguments.delta` → argument fragments; `output_item.done` of a
//!   `function_call` → the complete call with parsed arguments and fidelity `{"item_id": …}`;
//! - `response.completed` → usage (`input_tokens` includes `input_tokens_details.cached_tokens`
//!   and `output_tokens` includes `output_tokens_details.reasoning_tokens`, so both are split)
//!   and the finish reason: `tool_call` when the response holds a function call, else `stop`;
//! - `response.incomplete` → usage and `incomplete_details.reason` (`max_output_tokens` →
//!   `length`, `content_filter` kept);
//! - `response.failed` (`response.error`) and `error` events → a provider error.
//!
//! A body that ends before `response.completed` / `.incomplete` / `.failed` is cut off
//! ([`WireError::Malformed`]).
//!
//! Prompt caching: OpenAI caches prompts of 1,024 tokens or more on its own, by prefix
//! (`instructions`, `tools`, then `input`), and reports hits as
//! `usage.input_tokens_details.cached_tokens`. The adapter keeps the prefix byte-stable (the
//! whole conversation is resent unchanged, `store: false`) and sends
//! [`ModelConfig::cache_key`] (the session id) as `prompt_cache_key`, which routes a session's
//! requests to where its prefix is cached, unless [`ModelConfig::prompt_cache`] is off.
//! llama.cpp's `/v1/responses` ignores the field.

use std::collections::HashMap;

use penguin_omni_protocol::{Fidelity, ModelPayload, OmniMessage, Role, StopReason};
use serde_json::{json, Map, Value};

use crate::sse::{DecodedEvent, SseEventHandler, SseStreamDecoder};
use crate::translate::{strip_suffix, ContentItem, UniEvent, Usage};
use crate::wire::{
    classify_error, provider_error, ModelConfig, WireError, WireProtocol, WireRequest,
};
use crate::ThinkingLevel;

/// The fidelity key holding a reasoning item exactly as the server sent it.
pub const REASONING_ITEM: &str = "reasoning_item";

/// The Responses protocol: builds requests and keeps the committed history as input items.
#[derive(Clone, Debug, Default)]
pub struct OpenAiResponses {
    history: Vec<Value>,
}

impl OpenAiResponses {
    /// A protocol with an empty history.
    pub fn new() -> OpenAiResponses {
        OpenAiResponses::default()
    }

    /// The committed history as `input` items (without the instructions).
    pub fn history(&self) -> &[Value] {
        &self.history
    }
}

/// The `reasoning.effort` value for a thinking level (see [`ThinkingLevel::openai_effort`]).
pub fn reasoning_effort(level: ThinkingLevel) -> &'static str {
    level.openai_effort()
}

impl WireProtocol for OpenAiResponses {
    type Decoder = OpenAiResponsesDecoder;

    fn build_request(
        &self,
        config: &ModelConfig,
        new_messages: &[OmniMessage],
        thinking_level: Option<ThinkingLevel>,
    ) -> WireRequest {
        let mut input = self.history.clone();
        input.extend(to_input_items(new_messages));
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model_id));
        if !config.system_prompt.is_empty() {
            body.insert("instructions".into(), json!(config.system_prompt));
        }
        body.insert("input".into(), Value::Array(input));
        body.insert("stream".into(), json!(true));
        // The adapter owns the history; nothing needs to live on the server, and without
        // storage reasoning only survives a turn as encrypted content.
        body.insert("store".into(), json!(false));
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
        if !config.tools.is_empty() {
            let tools: Vec<Value> = config
                .tools
                .iter()
                .map(|t| {
                    let mut tool = Map::new();
                    tool.insert("type".into(), json!("function"));
                    tool.insert("name".into(), json!(t.name));
                    tool.insert("description".into(), json!(t.description));
                    if let Some(p) = &t.parameters {
                        tool.insert("parameters".into(), p.clone());
                    }
                    Value::Object(tool)
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if config.max_output_tokens > 0 {
            body.insert("max_output_tokens".into(), json!(config.max_output_tokens));
        }
        if let Some(level) = thinking_level {
            body.insert(
                "reasoning".into(),
                json!({"effort": reasoning_effort(level)}),
            );
        }
        if let Some(key) = config.prompt_cache_key() {
            body.insert("prompt_cache_key".into(), json!(key));
        }
        let mut headers = Vec::new();
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        WireRequest {
            path: "/responses".into(),
            headers,
            body: Value::Object(body),
        }
    }

    fn commit(&mut self, new_messages: &[OmniMessage], reply: &[OmniMessage]) {
        self.history.extend(to_input_items(new_messages));
        self.history.extend(to_input_items(reply));
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        self.history = to_input_items(history);
    }
}

/// Converts complete model messages to Responses `input` items, in order.
///
/// - User texts and images, grouped while consecutive, become one `user` message of
///   `input_text` / `input_image` parts; each tool output becomes a `function_call_output`.
/// - Assistant texts become `message` items of `output_text` (consecutive texts of one phase
///   merged), thinking becomes its recorded reasoning item verbatim (or a summary-only
///   `reasoning` item when none was recorded), and tool calls become `function_call` items
///   with their provider call ids (suffix stripped).
pub fn to_input_items(msgs: &[OmniMessage]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut user_parts: Vec<Value> = Vec::new();
    let flush_user = |parts: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !parts.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(parts)}));
        }
    };
    for p in msgs
        .iter()
        .filter_map(OmniMessage::model)
        .filter(|p| !p.is_partial())
    {
        match (p.role(), p) {
            (Role::User, ModelPayload::Text(t)) => {
                user_parts.push(json!({"type": "input_text", "text": t.text}));
            }
            (Role::User, ModelPayload::ImageUrl(i)) => {
                user_parts.push(json!({"type": "input_image", "image_url": i.image_url}));
            }
            (Role::User, ModelPayload::InlineData(d)) if d.mime_type.starts_with("image/") => {
                user_parts.push(json!({
                    "type": "input_image",
                    "image_url": format!("data:{};base64,{}", d.mime_type, d.data),
                }));
            }
            (Role::User, ModelPayload::ToolCallOutput(o)) => {
                flush_user(&mut user_parts, &mut out);
                out.push(json!({
                    "type": "function_call_output",
                    "call_id": strip_suffix(&o.tool_call_id),
                    "output": o.output,
                }));
                // function_call_output is text-only; images ride in a user message.
                for url in o.images.iter().flatten() {
                    user_parts.push(json!({"type": "input_image", "image_url": url}));
                }
            }
            (Role::Assistant, ModelPayload::Text(t)) => {
                flush_user(&mut user_parts, &mut out);
                push_assistant_text(&mut out, &t.text, t.fidelity.as_deref());
            }
            (Role::Assistant, ModelPayload::Thinking(t)) => {
                flush_user(&mut user_parts, &mut out);
                match t.fidelity.as_deref().and_then(|f| f.get(REASONING_ITEM)) {
                    Some(item) => out.push(item.clone()),
                    None if !t.thinking.is_empty() => out.push(json!({
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": t.thinking}],
                    })),
                    None => {}
                }
            }
            (Role::Assistant, ModelPayload::ToolCall(c)) => {
                flush_user(&mut user_parts, &mut out);
                let mut item = Map::new();
                item.insert("type".into(), json!("function_call"));
                if let Some(id) = c
                    .fidelity
                    .as_ref()
                    .and_then(|f| f.get("item_id"))
                    .filter(|v| v.is_string())
                {
                    item.insert("id".into(), id.clone());
                }
                item.insert("call_id".into(), json!(strip_suffix(&c.tool_call_id)));
                item.insert("name".into(), json!(c.name));
                item.insert(
                    "arguments".into(),
                    json!(normalized_arguments(&c.arguments)),
                );
                out.push(Value::Object(item));
            }
            _ => {}
        }
    }
    flush_user(&mut user_parts, &mut out);
    out
}

fn push_assistant_text(out: &mut Vec<Value>, text: &str, fidelity: Option<&Fidelity>) {
    let phase = fidelity.and_then(|f| f.get("phase")).cloned();
    // Texts of one reply message arrive as one complete message per segment; a segment break
    // without a phase change (none happens today) still belongs to the same message.
    if let Some(last) = out.last_mut().filter(|l| {
        l["type"] == "message" && l["role"] == "assistant" && l.get("phase") == phase.as_ref()
    }) {
        if let Some(Value::Array(content)) = last.get_mut("content") {
            content.push(json!({"type": "output_text", "text": text}));
            return;
        }
    }
    let mut item = Map::new();
    item.insert("type".into(), json!("message"));
    item.insert("role".into(), json!("assistant"));
    item.insert(
        "content".into(),
        json!([{"type": "output_text", "text": text}]),
    );
    if let Some(phase) = phase {
        item.insert("phase".into(), phase);
    }
    out.push(Value::Object(item));
}

/// [§6.1](penguin_omni_protocol::spec#s6.1) *Input* (): arguments go back as a JSON object; `""`
/// and non-objects become `{}`.
fn normalized_arguments(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v.to_string(),
        _ => "{}".to_owned(),
    }
}

#[derive(Debug)]
enum Item {
    Message { phase: Option<Value> },
    Reasoning,
    FunctionCall { call_id: String, name: String },
    Other,
}

/// Decodes a Responses SSE body. See the module docs for the mapping.
pub type OpenAiResponsesDecoder = SseStreamDecoder<OpenAiResponsesEvents>;

/// The Responses half of [`OpenAiResponsesDecoder`]: the state of one response between events.
#[derive(Debug, Default)]
pub struct OpenAiResponsesEvents {
    items: HashMap<String, Item>,
    events: usize,
    saw_function_call: bool,
    terminal: bool,
}

impl SseEventHandler for OpenAiResponsesEvents {
    fn event(&mut self, sse: &DecodedEvent) -> Result<UniEvent, WireError> {
        let data = sse.data.as_str();
        if self.terminal {
            return Ok(UniEvent::default());
        }
        let event: Value = serde_json::from_str(data).map_err(|e| {
            WireError::Malformed(format!(
                "Responses event {} is not valid JSON ({e}): {}",
                self.events + 1,
                data.chars().take(200).collect::<String>()
            ))
        })?;
        self.events += 1;
        let str_at = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let item_id = str_at(&event, "item_id");
        let mut ev = UniEvent::default();
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "response.output_item.added" => {
                let item = event.get("item").unwrap_or(&Value::Null);
                let id = str_at(item, "id");
                let state = match item.get("type").and_then(Value::as_str) {
                    Some("message") => Item::Message {
                        phase: item.get("phase").filter(|p| !p.is_null()).cloned(),
                    },
                    Some("reasoning") => Item::Reasoning,
                    Some("function_call") => {
                        let (call_id, name) = call_identity(item)?;
                        self.saw_function_call = true;
                        ev.content_items.push(ContentItem::PartialToolCall {
                            tool_call_id: Some(call_id.clone()),
                            name: Some(name.clone()),
                            // A server that sends the call whole puts the arguments here.
                            arguments: str_at(item, "arguments"),
                            fidelity: None,
                        });
                        Item::FunctionCall { call_id, name }
                    }
                    _ => Item::Other,
                };
                self.items.insert(id, state);
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let fidelity = match self.items.get(&item_id) {
                    Some(Item::Message { phase: Some(phase) }) => {
                        let mut f = Fidelity::new();
                        f.insert("phase".into(), phase.clone());
                        Some(f)
                    }
                    _ => None,
                };
                ev.content_items.push(ContentItem::Text {
                    text: str_at(&event, "delta"),
                    fidelity,
                });
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                ev.content_items.push(ContentItem::Thinking {
                    thinking: str_at(&event, "delta"),
                    fidelity: None,
                });
            }
            "response.function_call_arguments.delta" => match self.items.get(&item_id) {
                Some(Item::FunctionCall { call_id, .. }) => {
                    ev.content_items.push(ContentItem::PartialToolCall {
                        tool_call_id: Some(call_id.clone()),
                        name: None,
                        arguments: str_at(&event, "delta"),
                        fidelity: None,
                    });
                }
                _ => {
                    return Err(WireError::Malformed(format!(
                        "function_call_arguments.delta for {item_id:?}, which is not an open function_call item"
                    )))
                }
            },
            "response.output_item.done" => {
                let item = event.get("item").unwrap_or(&Value::Null);
                let id = str_at(item, "id");
                let known = self.items.remove(&id);
                match item.get("type").and_then(Value::as_str) {
                    Some("reasoning") => {
                        let mut f = Fidelity::new();
                        f.insert(REASONING_ITEM.into(), item.clone());
                        ev.content_items.push(ContentItem::Thinking {
                            thinking: String::new(),
                            fidelity: Some(f),
                        });
                    }
                    Some("function_call") => {
                        let (call_id, name) = match known {
                            Some(Item::FunctionCall { call_id, name }) => (call_id, name),
                            // Announced only now: its fragments never came, so it is whole.
                            _ => call_identity(item)?,
                        };
                        self.saw_function_call = true;
                        let raw = str_at(item, "arguments");
                        let arguments = if raw.trim().is_empty() {
                            Value::Null
                        } else {
                            serde_json::from_str(&raw).map_err(|e| {
                                WireError::Malformed(format!(
                                    "arguments of function_call {name} ({call_id}) are not valid JSON ({e}): {}",
                                    raw.chars().take(200).collect::<String>()
                                ))
                            })?
                        };
                        let fidelity = (!id.is_empty()).then(|| {
                            let mut f = Fidelity::new();
                            f.insert("item_id".into(), json!(id));
                            f
                        });
                        ev.content_items.push(ContentItem::ToolCall {
                            tool_call_id: call_id,
                            name,
                            arguments,
                            fidelity,
                        });
                    }
                    _ => {}
                }
            }
            "response.completed" => {
                self.terminal = true;
                ev.usage = event.pointer("/response/usage").map(parse_usage);
                ev.finish_reason = Some(if self.saw_function_call { "tool_call" } else { "stop" }.into());
            }
            "response.incomplete" => {
                self.terminal = true;
                ev.usage = event.pointer("/response/usage").map(parse_usage);
                let reason = event
                    .pointer("/response/incomplete_details/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("incomplete");
                ev.finish_reason = Some(
                    match reason {
                        "max_output_tokens" => "length",
                        other => other,
                    }
                    .to_owned(),
                );
            }
            "response.failed" => {
                let error = event.pointer("/response/error").unwrap_or(&Value::Null);
                return Err(stream_error(error, &event));
            }
            "error" => return Err(stream_error(&event, &event)),
            // created, in_progress, content_part.*, *.done text events, summary parts: the
            // deltas and the item events already carry everything.
            _ => {}
        }
        Ok(ev)
    }

    fn events_seen(&self) -> usize {
        self.events
    }

    fn missing_end(&self) -> Option<String> {
        (!self.terminal).then(|| {
            format!(
                "the response's end: the stream ended after {} event(s) without response.completed",
                self.events
            )
        })
    }
}

fn call_identity(item: &Value) -> Result<(String, String), WireError> {
    let get = |k: &str| {
        item.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    match (get("call_id").or_else(|| get("id")), get("name")) {
        (Some(call_id), Some(name)) => Ok((call_id, name)),
        _ => Err(WireError::Malformed(format!(
            "function_call item without a call_id or name: {item}"
        ))),
    }
}

/// A `response.failed` error object or an `error` event: `{code, message}` at the top level.
fn stream_error(error: &Value, event: &Value) -> WireError {
    let (message, codes) =
        provider_error(error).unwrap_or_else(|| (format!("provider error: {event}"), Vec::new()));
    let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
    let status = match classify_error(None, &codes, &message) {
        // An error event never completes a request.
        StopReason::Completed => StopReason::Failed,
        s => s,
    };
    WireError::Provider { status, message }
}

fn parse_usage(usage: &Value) -> Usage {
    let n = |p: &str| usage.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let input = n("/input_tokens");
    let cached = n("/input_tokens_details/cached_tokens");
    let output = n("/output_tokens");
    let reasoning = n("/output_tokens_details/reasoning_tokens");
    Usage {
        cached_tokens: cached,
        prompt_tokens: input.saturating_sub(cached),
        thoughts_tokens: reasoning,
        response_tokens: output.saturating_sub(reasoning),
    }
}

#[cfg(test)]
mod tests;
