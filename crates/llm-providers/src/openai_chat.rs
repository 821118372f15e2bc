//! OpenAI Chat Completions (`POST {base}/chat/completions`, streamed), as spoken by OpenAI,
//! llama.cpp's server, vLLM, Ollama, OpenRouter and most local servers.
//!
//! Wire → [`UniEvent`] mapping (one chunk, choice 0):
//! - `delta.reasoning_content` or `delta.reasoning` → thinking, with fidelity
//!   `{"reasoning_field": "<the field>"}` on every delta so the block stays one segment and the
//!   reasoning goes back under the same field;
//! - `delta.content` → text;
//! - `delta.tool_calls[]`, keyed by `index` (id and name come on the first fragment) → argument
//!   fragments. A call is completed with its parsed arguments as soon as it is known to be
//!   whole: when a fragment for another index, reasoning or text arrives (servers stream calls
//!   one after another), or at `finish_reason`. Completing early lets approval of a call start
//!   while the model still streams the next. Unparsable arguments make the stream malformed,
//!   as the reference's gateway does;
//! - `finish_reason` normalized (`tool_calls`/`function_call` → `tool_call`);
//! - `usage` (with `stream_options.include_usage`, on the last chunk): `prompt_tokens` includes
//!   the cached ones and `completion_tokens` the reasoning ones, so both are split out;
//! - `data: {"error": …}` → a provider error; `data: [DONE]` ends the stream.
//!
//! A body that ends before any `finish_reason` is cut off ([`WireError::Malformed`]).
//!
//! Prompt caching: OpenAI caches every prompt of 1,024 tokens or more on its own, by prefix,
//! and reports the hits as `usage.prompt_tokens_details.cached_tokens` (read at a discount,
//! written at no extra cost). What keeps it hitting is a byte-stable prefix (the adapter
//! resends the system prompt, the tools and the history unchanged) and requests routed to
//! where the prefix is cached: the adapter sends [`ModelConfig::cache_key`] (the session id)
//! as `prompt_cache_key` unless [`ModelConfig::prompt_cache`] is off. llama.cpp, vLLM,
//! Ollama's `/v1` and the other OpenAI-compatible servers penguin was run against ignore the
//! field (llama.cpp reuses its own slot cache by prefix); a server that refuses unknown
//! fields wants `prompt_cache = false` for its model.

use penguin_omni_protocol::{Fidelity, ModelPayload, OmniMessage, Role, StopReason};
use serde_json::{json, Map, Value};

use crate::chat::{commit_turn, ChatRequest};
use crate::sse::{DecodedEvent, SseEventHandler, SseStreamDecoder};
use crate::translate::{strip_suffix, ContentItem, UniEvent, Usage};
use crate::wire::{
    classify_error, provider_error, ModelConfig, WireError, WireProtocol, WireRequest,
};
use crate::ThinkingLevel;

/// The reasoning field used when replaying thinking that carries no `reasoning_field`.
const DEFAULT_REASONING_FIELD: &str = "reasoning_content";

/// The Chat Completions protocol: builds requests and keeps the committed history.
#[derive(Clone, Debug, Default)]
pub struct OpenAiChat {
    history: Vec<Value>,
}

impl OpenAiChat {
    /// A protocol with an empty history.
    pub fn new() -> OpenAiChat {
        OpenAiChat::default()
    }

    /// The committed history as wire messages (without the system prompt).
    pub fn history(&self) -> &[Value] {
        &self.history
    }
}

/// The `reasoning_effort` value for a thinking level (see [`ThinkingLevel::openai_effort`]).
pub fn reasoning_effort(level: ThinkingLevel) -> &'static str {
    level.openai_effort()
}

impl WireProtocol for OpenAiChat {
    type Decoder = OpenAiChatDecoder;

    fn build_request(
        &self,
        config: &ModelConfig,
        new_messages: &[OmniMessage],
        thinking_level: Option<ThinkingLevel>,
    ) -> WireRequest {
        let mut after_tools = Vec::new();
        if config.max_output_tokens > 0 {
            after_tools.push(("max_tokens", json!(config.max_output_tokens)));
        }
        if let Some(level) = thinking_level {
            after_tools.push(("reasoning_effort", json!(reasoning_effort(level))));
        }
        if let Some(key) = config.prompt_cache_key() {
            after_tools.push(("prompt_cache_key", json!(key)));
        }
        ChatRequest {
            path: "/chat/completions",
            new_messages: to_wire_messages(new_messages),
            before_tools: vec![("stream_options", json!({"include_usage": true}))],
            after_tools,
        }
        .build(config, &self.history)
    }

    fn commit(&mut self, new_messages: &[OmniMessage], reply: &[OmniMessage]) {
        commit_turn(
            &mut self.history,
            to_wire_messages(new_messages),
            to_wire_messages(reply),
        );
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        self.history = to_wire_messages(history);
    }
}

/// Converts complete model messages to Chat Completions messages, grouping consecutive
/// messages of one role.
///
/// - A user group becomes one `tool` message per tool output (first, since they must follow
///   the assistant's `tool_calls`), then one `user` message with the texts and images
///   (a plain string when it is a single text).
/// - An assistant group becomes one `assistant` message: texts joined, thinking under its
///   recorded `reasoning_field`, tool calls with their provider ids (suffix stripped).
pub fn to_wire_messages(msgs: &[OmniMessage]) -> Vec<Value> {
    let mut out = Vec::new();
    let payloads: Vec<&ModelPayload> = msgs
        .iter()
        .filter_map(OmniMessage::model)
        .filter(|p| !p.is_partial())
        .collect();
    for group in payloads.chunk_by(|a, b| a.role() == b.role()) {
        match group[0].role() {
            Role::User => user_messages(group, &mut out),
            Role::Assistant => out.push(assistant_message(group)),
        }
    }
    out
}

fn user_messages(group: &[&ModelPayload], out: &mut Vec<Value>) {
    let mut parts = Vec::new();
    for p in group {
        match p {
            ModelPayload::Text(t) => parts.push(json!({"type": "text", "text": t.text})),
            ModelPayload::ImageUrl(i) => {
                parts.push(json!({"type": "image_url", "image_url": {"url": i.image_url}}))
            }
            ModelPayload::InlineData(d) if d.mime_type.starts_with("image/") => parts.push(
                json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", d.mime_type, d.data)}}),
            ),
            ModelPayload::ToolCallOutput(o) => {
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": strip_suffix(&o.tool_call_id),
                    "content": o.output,
                }));
                // Tool messages are text-only on most servers; images ride in the user turn.
                for url in o.images.iter().flatten() {
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            _ => {}
        }
    }
    let content = match parts.as_slice() {
        [] => return,
        [single] if single["type"] == "text" => single["text"].clone(),
        _ => Value::Array(parts),
    };
    out.push(json!({"role": "user", "content": content}));
}

fn assistant_message(group: &[&ModelPayload]) -> Value {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut reasoning_field = DEFAULT_REASONING_FIELD.to_owned();
    let mut tool_calls = Vec::new();
    for p in group {
        match p {
            ModelPayload::Text(t) => text.push_str(&t.text),
            ModelPayload::Thinking(t) => {
                reasoning.push_str(&t.thinking);
                if let Some(field) = t
                    .fidelity
                    .as_ref()
                    .and_then(|f| f.get("reasoning_field"))
                    .and_then(Value::as_str)
                {
                    reasoning_field = field.to_owned();
                }
            }
            ModelPayload::ToolCall(c) => tool_calls.push(json!({
                "id": strip_suffix(&c.tool_call_id),
                "type": "function",
                "function": {"name": c.name, "arguments": normalized_arguments(&c.arguments)},
            })),
            _ => {}
        }
    }
    let mut msg = Map::new();
    msg.insert("role".into(), json!("assistant"));
    msg.insert(
        "content".into(),
        if text.is_empty() && !tool_calls.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        },
    );
    if !reasoning.is_empty() {
        msg.insert(reasoning_field, Value::String(reasoning));
    }
    if !tool_calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    Value::Object(msg)
}

/// [§6.1](penguin_omni_protocol::spec#s6.1) *Input* (): arguments go back as a JSON object; `""` and
/// non-objects become `{}`.
fn normalized_arguments(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v.to_string(),
        _ => "{}".to_owned(),
    }
}

#[derive(Debug)]
struct ToolCallState {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

/// Decodes a Chat Completions SSE body. See the module docs for the mapping.
pub type OpenAiChatDecoder = SseStreamDecoder<OpenAiChatEvents>;

/// The Chat Completions half of [`OpenAiChatDecoder`]: the state of one response between events.
#[derive(Debug, Default)]
pub struct OpenAiChatEvents {
    /// Calls whose fragments may still come.
    tool_calls: Vec<ToolCallState>,
    /// Indices of the calls already completed: a fragment for one of them cannot be appended.
    completed_indices: Vec<u64>,
    /// Calls begun so far, which is the index of a call that comes without one.
    calls_begun: u64,
    chunks: usize,
    finish_seen: bool,
    done: bool,
}

impl SseEventHandler for OpenAiChatEvents {
    fn event(&mut self, sse: &DecodedEvent) -> Result<UniEvent, WireError> {
        let data = sse.data.as_str();
        if self.done {
            return Ok(UniEvent::default());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(UniEvent::default());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            WireError::Malformed(format!(
                "chat completion chunk {} is not valid JSON ({e}): {}",
                self.chunks + 1,
                preview(data)
            ))
        })?;
        self.chunks += 1;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(in_stream_error(&chunk));
        }
        let mut event = UniEvent::default();
        if let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            })
        {
            if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
                self.delta(delta, &mut event.content_items)?;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.complete_tool_calls(None, &mut event.content_items)?;
                self.finish_seen = true;
                event.finish_reason = Some(normalize_finish_reason(reason).to_owned());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            event.usage = Some(parse_usage(usage));
        }
        Ok(event)
    }

    fn events_seen(&self) -> usize {
        self.chunks
    }

    fn missing_end(&self) -> Option<String> {
        (!self.finish_seen).then(|| {
            format!(
                "a finish_reason: the stream ended after {} chunk(s) {} one",
                self.chunks,
                if self.done {
                    "with [DONE] but without"
                } else {
                    "without"
                }
            )
        })
    }
}

impl OpenAiChatEvents {
    fn delta(&mut self, delta: &Value, items: &mut Vec<ContentItem>) -> Result<(), WireError> {
        let non_empty = |field: &str| {
            delta
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
        };
        if ["reasoning_content", "reasoning", "content"]
            .into_iter()
            .any(non_empty)
        {
            self.complete_tool_calls(None, items)?;
        }
        for field in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                let mut fidelity = Fidelity::new();
                fidelity.insert("reasoning_field".into(), json!(field));
                items.push(ContentItem::Thinking {
                    thinking: text.to_owned(),
                    fidelity: Some(fidelity),
                });
                // Servers that send both carry the same text twice.
                break;
            }
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            items.push(ContentItem::Text {
                text: text.to_owned(),
                fidelity: None,
            });
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.tool_call_fragment(call, items)?;
        }
        Ok(())
    }

    fn tool_call_fragment(
        &mut self,
        call: &Value,
        items: &mut Vec<ContentItem>,
    ) -> Result<(), WireError> {
        // Some servers omit `index` when they send one call per chunk in full.
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(self.calls_begun);
        if self.completed_indices.contains(&index) {
            return Err(WireError::Malformed(format!(
                "tool call at index {index} continues after it was completed"
            )));
        }
        self.complete_tool_calls(Some(index), items)?;
        let function = call.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let arguments = function
            .and_then(|f| f.get("arguments"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty());
        let state = match self.tool_calls.iter().position(|t| t.index == index) {
            Some(i) => &mut self.tool_calls[i],
            None => {
                let Some(name) = name else {
                    return Err(WireError::Malformed(format!(
                        "tool call at index {index} starts without a function name"
                    )));
                };
                self.calls_begun += 1;
                self.tool_calls.push(ToolCallState {
                    index,
                    // Servers that send no ids still need one to pair the output with.
                    id: id.map_or_else(|| format!("call_{index}"), str::to_owned),
                    name: name.to_owned(),
                    arguments: String::new(),
                });
                self.tool_calls.last_mut().expect("just pushed")
            }
        };
        state.arguments.push_str(arguments);
        items.push(ContentItem::PartialToolCall {
            tool_call_id: Some(state.id.clone()),
            name: Some(state.name.clone()),
            arguments: arguments.to_owned(),
            fidelity: None,
        });
        Ok(())
    }

    /// Completes every open call except the one at index `keep`, in the order they began.
    fn complete_tool_calls(
        &mut self,
        keep: Option<u64>,
        items: &mut Vec<ContentItem>,
    ) -> Result<(), WireError> {
        let (open, complete): (Vec<_>, Vec<_>) = std::mem::take(&mut self.tool_calls)
            .into_iter()
            .partition(|c| Some(c.index) == keep);
        self.tool_calls = open;
        for call in complete {
            self.completed_indices.push(call.index);
            let arguments = if call.arguments.trim().is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&call.arguments).map_err(|e| {
                    WireError::Malformed(format!(
                        "arguments of tool call {} ({}) are not valid JSON ({e}): {}",
                        call.name,
                        call.id,
                        preview(&call.arguments)
                    ))
                })?
            };
            items.push(ContentItem::ToolCall {
                tool_call_id: call.id,
                name: call.name,
                arguments,
                fidelity: None,
            });
        }
        Ok(())
    }
}

fn normalize_finish_reason(reason: &str) -> &str {
    match reason {
        "tool_calls" | "function_call" => "tool_call",
        other => other,
    }
}

fn parse_usage(usage: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let prompt = n(usage.get("prompt_tokens"));
    let completion = n(usage.get("completion_tokens"));
    let cached = n(usage.pointer("/prompt_tokens_details/cached_tokens"));
    let reasoning = n(usage.pointer("/completion_tokens_details/reasoning_tokens"));
    Usage {
        cached_tokens: cached,
        prompt_tokens: prompt.saturating_sub(cached),
        thoughts_tokens: reasoning,
        response_tokens: completion.saturating_sub(reasoning),
    }
}

fn in_stream_error(chunk: &Value) -> WireError {
    let (message, codes) = provider_error(chunk)
        .unwrap_or_else(|| (format!("provider error: {}", chunk["error"]), Vec::new()));
    // llama.cpp puts the HTTP status it would have sent in a numeric `code`.
    let status = chunk
        .pointer("/error/code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c));
    let code_refs: Vec<&str> = codes.iter().map(String::as_str).collect();
    let status = match classify_error(status, &code_refs, &message) {
        // The stream did start, so a completed classification cannot happen; keep the type
        // total anyway.
        StopReason::Completed => StopReason::Failed,
        s => s,
    };
    WireError::Provider { status, message }
}

fn preview(s: &str) -> String {
    const MAX: usize = 200;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
mod tests;
