//! Ollama's native chat API (`POST {base}/api/chat`, streamed as NDJSON: one JSON object per
//! line), the runner most local users have. Its OpenAI-compatible `/v1` endpoint works through
//! [`crate::openai_chat`] too; this adapter speaks the native one, which streams thinking as
//! its own field and takes the model's options (`num_predict`, `num_ctx`).
//!
//! Wire → [`UniEvent`] mapping (one line at a time):
//! - `message.thinking` → thinking (no fidelity: the text goes back as the assistant message's
//!   `thinking`);
//! - `message.content` → text;
//! - `message.tool_calls[]` → complete tool calls at once: Ollama sends a call whole, its
//!   `function.arguments` a JSON object, never streamed. A call's `id` is used when the server
//!   sends one; otherwise the function name is the id and the session's
//!   [`ToolCallIdAllocator`](crate::ToolCallIdAllocator) makes repeats unique (`f`, `f#2`), as
//!   for Gemini;
//! - `done: true` ends the response: `done_reason` `stop` (or none) → `stop`, or `tool_call`
//!   when the response made calls; `length` → `length`; anything else is kept (and fails the
//!   last segment). Its `prompt_eval_count` is the prompt, `eval_count` the output (Ollama
//!   reports no cached or thinking split);
//! - `{"error": "…"}` (a line of its own; Ollama's way to fail mid-stream) → a provider error
//!   classified by its text.
//!
//! A body that ends before the `done: true` object is cut off ([`WireError::Malformed`]).
//! Lines after it are ignored.
//!
//! Request: `model`, `messages` (roles `system`, `user`, `assistant`, `tool`; a tool output
//! is a `tool` message naming its function in `tool_name`, plus `tool_call_id` when the server
//! gave the call an id; images go inline as base64 `images`), `tools` in the OpenAI function
//! format, `stream: true`, `think`, and `options.num_predict` (max output tokens) and
//! `options.num_ctx` (the configured context window: Ollama otherwise cuts the prompt at its
//! own small default window). `think` is on/off: Ollama accepts named levels only for gpt-oss
//! and answers 400 for other models, so every level but `none` is `true`.
//!
//! Prompt caching: Ollama's runner keeps the loaded model's KV cache and reuses the longest
//! prefix the next prompt shares with it, on its own; its API has no caching field, so none is
//! sent (not OpenAI's `prompt_cache_key` either), with [`ModelConfig::prompt_cache`] on or
//! off. What keeps it hitting is what the adapter does anyway: the history resent byte for
//! byte, and the same `num_ctx` on every request (another one reloads the model).

use std::collections::HashMap;

use penguin_omni_protocol::{ModelPayload, OmniMessage, Role, StopReason};
use serde_json::{json, Map, Value};

use crate::chat::{commit_turn, ChatRequest};
use crate::ndjson::{NdjsonLineHandler, NdjsonStreamDecoder};
use crate::translate::{strip_suffix, ContentItem, UniEvent, Usage};
use crate::wire::{classify_error, ModelConfig, WireError, WireProtocol, WireRequest};
use crate::ThinkingLevel;

/// Where a local Ollama listens unless told otherwise.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434";

/// The Ollama chat protocol: builds requests and keeps the committed history.
#[derive(Clone, Debug, Default)]
pub struct Ollama {
    history: Vec<Value>,
    /// Tool call id (as the session knows it, `#n` suffix included) → function name: a `tool`
    /// message names its function, and a tool output carries only the id.
    call_names: HashMap<String, String>,
}

impl Ollama {
    /// A protocol with an empty history.
    pub fn new() -> Ollama {
        Ollama::default()
    }

    /// The committed history as wire messages (without the system prompt).
    pub fn history(&self) -> &[Value] {
        &self.history
    }

    fn remember_calls(&mut self, msgs: &[OmniMessage]) {
        for msg in msgs {
            if let Some(ModelPayload::ToolCall(c)) = msg.model() {
                self.call_names
                    .insert(c.tool_call_id.clone(), c.name.clone());
            }
        }
    }

    /// Converts complete model messages to Ollama chat messages, grouping consecutive messages
    /// of one role.
    ///
    /// - A user group becomes one `tool` message per tool output (first, since they answer
    ///   the assistant's `tool_calls`), then one `user` message with the texts joined by a
    ///   blank line and the images as base64 `images` (only inline images can be sent).
    /// - An assistant group becomes one `assistant` message: texts joined, thinking in
    ///   `thinking`, tool calls with their arguments as an object.
    pub fn to_wire_messages(&self, msgs: &[OmniMessage]) -> Vec<Value> {
        let payloads: Vec<&ModelPayload> = msgs
            .iter()
            .filter_map(OmniMessage::model)
            .filter(|p| !p.is_partial())
            .collect();
        let mut out = Vec::new();
        for group in payloads.chunk_by(|a, b| a.role() == b.role()) {
            match group[0].role() {
                Role::User => self.user_messages(group, &mut out),
                Role::Assistant => out.push(assistant_message(group)),
            }
        }
        out
    }

    fn user_messages(&self, group: &[&ModelPayload], out: &mut Vec<Value>) {
        let mut texts = Vec::new();
        let mut images = Vec::new();
        for p in group {
            match p {
                ModelPayload::Text(t) => texts.push(t.text.as_str()),
                ModelPayload::ImageUrl(i) => images.extend(base64_of(&i.image_url)),
                ModelPayload::InlineData(d) if d.mime_type.starts_with("image/") => {
                    images.push(d.data.clone())
                }
                ModelPayload::ToolCallOutput(o) => {
                    let name = self
                        .call_names
                        .get(&o.tool_call_id)
                        .map_or_else(|| strip_suffix(&o.tool_call_id), String::as_str);
                    let mut msg = json!({"role": "tool", "tool_name": name, "content": o.output});
                    let id = strip_suffix(&o.tool_call_id);
                    if id != name {
                        msg["tool_call_id"] = json!(id);
                    }
                    let tool_images: Vec<String> = o
                        .images
                        .iter()
                        .flatten()
                        .filter_map(|url| base64_of(url))
                        .collect();
                    if !tool_images.is_empty() {
                        msg["images"] = json!(tool_images);
                    }
                    out.push(msg);
                }
                _ => {}
            }
        }
        if texts.is_empty() && images.is_empty() {
            return;
        }
        let mut msg = json!({"role": "user", "content": texts.join("\n\n")});
        if !images.is_empty() {
            msg["images"] = json!(images);
        }
        out.push(msg);
    }
}

/// The base64 payload of a `data:<mime>;base64,…` URL; Ollama takes images only inline.
fn base64_of(url: &str) -> Option<String> {
    url.strip_prefix("data:")
        .and_then(|r| r.split_once(";base64,"))
        .map(|(_, data)| data.to_owned())
}

fn assistant_message(group: &[&ModelPayload]) -> Value {
    let mut text = String::new();
    let mut thinking = String::new();
    let mut tool_calls = Vec::new();
    for p in group {
        match p {
            ModelPayload::Text(t) => text.push_str(&t.text),
            ModelPayload::Thinking(t) => thinking.push_str(&t.thinking),
            ModelPayload::ToolCall(c) => {
                let arguments = match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                let mut call = json!({"function": {"name": c.name, "arguments": arguments}});
                let id = strip_suffix(&c.tool_call_id);
                if id != c.name {
                    call["id"] = json!(id);
                }
                tool_calls.push(call);
            }
            _ => {}
        }
    }
    let mut msg = Map::new();
    msg.insert("role".into(), json!("assistant"));
    msg.insert("content".into(), Value::String(text));
    if !thinking.is_empty() {
        msg.insert("thinking".into(), Value::String(thinking));
    }
    if !tool_calls.is_empty() {
        msg.insert("tool_calls".into(), Value::Array(tool_calls));
    }
    Value::Object(msg)
}

/// The `think` value for a thinking level: off for `none`, on for every other level.
pub fn think(level: ThinkingLevel) -> bool {
    level != ThinkingLevel::None
}

impl WireProtocol for Ollama {
    type Decoder = OllamaDecoder;

    fn build_request(
        &self,
        config: &ModelConfig,
        new_messages: &[OmniMessage],
        thinking_level: Option<ThinkingLevel>,
    ) -> WireRequest {
        let mut after_tools = Vec::new();
        if let Some(level) = thinking_level {
            after_tools.push(("think", json!(think(level))));
        }
        let mut options = Map::new();
        if config.max_output_tokens > 0 {
            options.insert("num_predict".into(), json!(config.max_output_tokens));
        }
        if let Some(window) = config.context_window.filter(|w| *w > 0) {
            options.insert("num_ctx".into(), json!(window));
        }
        if !options.is_empty() {
            after_tools.push(("options", Value::Object(options)));
        }
        ChatRequest {
            path: "/api/chat",
            new_messages: self.to_wire_messages(new_messages),
            before_tools: Vec::new(),
            after_tools,
        }
        .build(config, &self.history)
    }

    fn commit(&mut self, new_messages: &[OmniMessage], reply: &[OmniMessage]) {
        self.remember_calls(reply);
        let input = self.to_wire_messages(new_messages);
        let reply = self.to_wire_messages(reply);
        commit_turn(&mut self.history, input, reply);
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        self.call_names.clear();
        self.remember_calls(history);
        self.history = self.to_wire_messages(history);
    }
}

/// Decodes an Ollama `/api/chat` NDJSON body. See the module docs for the mapping.
pub type OllamaDecoder = NdjsonStreamDecoder<OllamaEvents>;

/// The Ollama half of [`OllamaDecoder`]: the state of one response between lines.
#[derive(Debug, Default)]
pub struct OllamaEvents {
    objects: usize,
    calls: usize,
    done: bool,
}

impl NdjsonLineHandler for OllamaEvents {
    fn line(&mut self, line: &str) -> Result<UniEvent, WireError> {
        if self.done {
            return Ok(UniEvent::default());
        }
        let object: Value = serde_json::from_str(line).map_err(|e| {
            WireError::Malformed(format!(
                "Ollama chat line {} is not valid JSON ({e}): {}",
                self.objects + 1,
                preview(line)
            ))
        })?;
        self.objects += 1;
        if let Some(error) = object.get("error").filter(|e| !e.is_null()) {
            let message = match error {
                Value::String(s) => s.clone(),
                other => other
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| other.to_string(), str::to_owned),
            };
            let status = match classify_error(None, &[], &message) {
                StopReason::Completed => StopReason::Failed,
                s => s,
            };
            return Err(WireError::Provider { status, message });
        }
        let mut event = UniEvent::default();
        if let Some(message) = object.get("message").filter(|m| m.is_object()) {
            self.message(message, &mut event.content_items)?;
        }
        if object.get("done").and_then(Value::as_bool) == Some(true) {
            self.done = true;
            let reason = object
                .get("done_reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
                .unwrap_or("stop");
            event.finish_reason = Some(
                match reason {
                    "stop" if self.calls > 0 => "tool_call",
                    other => other,
                }
                .to_owned(),
            );
            let n = |k: &str| object.get(k).and_then(Value::as_u64).unwrap_or(0);
            event.usage = Some(Usage {
                cached_tokens: 0,
                prompt_tokens: n("prompt_eval_count"),
                thoughts_tokens: 0,
                response_tokens: n("eval_count"),
            });
        }
        Ok(event)
    }

    fn objects_seen(&self) -> usize {
        self.objects
    }

    fn missing_end(&self) -> Option<String> {
        (!self.done).then(|| {
            format!(
                "\"done\": true: the stream ended after {} line(s) without it",
                self.objects
            )
        })
    }
}

impl OllamaEvents {
    fn message(&mut self, message: &Value, items: &mut Vec<ContentItem>) -> Result<(), WireError> {
        let text = |field: &str| {
            message
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
        };
        if let Some(thinking) = text("thinking") {
            items.push(ContentItem::Thinking {
                thinking: thinking.to_owned(),
                fidelity: None,
            });
        }
        if let Some(content) = text("content") {
            items.push(ContentItem::Text {
                text: content.to_owned(),
                fidelity: None,
            });
        }
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            items.push(self.tool_call(call)?);
        }
        Ok(())
    }

    fn tool_call(&mut self, call: &Value) -> Result<ContentItem, WireError> {
        let function = call.get("function").unwrap_or(&Value::Null);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                WireError::Malformed(format!(
                    "tool call without a function name in line {}: {}",
                    self.objects,
                    preview(&call.to_string())
                ))
            })?;
        let arguments = match function.get("arguments") {
            None | Some(Value::Null) => Value::Null,
            Some(v @ Value::Object(_)) => v.clone(),
            // Some servers send the object as a JSON string.
            Some(Value::String(s)) if s.trim().is_empty() => Value::Null,
            Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => return Err(bad_arguments(name, s)),
            },
            Some(other) => return Err(bad_arguments(name, &other.to_string())),
        };
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty())
            .unwrap_or(name);
        self.calls += 1;
        Ok(ContentItem::ToolCall {
            tool_call_id: id.to_owned(),
            name: name.to_owned(),
            arguments,
            fidelity: None,
        })
    }
}

fn bad_arguments(name: &str, arguments: &str) -> WireError {
    WireError::Malformed(format!(
        "arguments of tool call {name} are not a JSON object: {}",
        preview(arguments)
    ))
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
