//! Anthropic Messages (`POST {base}/v1/messages`, streamed).
//!
//! Wire → [`UniEvent`] mapping:
//! - `message_start.message.usage` and `message_delta.usage` update one running usage:
//!   `cache_read_input_tokens` → cached; `input_tokens + cache_creation_input_tokens` → the
//!   uncached prompt; `output_tokens` → response (Anthropic does not split out thinking);
//! - a `thinking` block's `thinking_delta`s → thinking with no fidelity, and its
//!   `signature_delta` → an empty thinking item with fidelity `{"signature": …}`, which closes
//!   the block (protocol [§6.2](penguin_omni_protocol::spec#s6.2) *Stream translation*, the
//!   thinking rule); a `redacted_thinking` block → an empty thinking item with
//!   fidelity `{"redacted_thinking": <data>}`;
//! - a `text` block's `text_delta`s → text;
//! - a `tool_use` block: its start → the call's first fragment (id, name), `input_json_delta`s
//!   → argument fragments, its `content_block_stop` → the complete call with parsed input;
//! - `message_delta.delta.stop_reason` normalized: `end_turn`/`stop_sequence` → `stop`,
//!   `tool_use` → `tool_call`, `max_tokens` → `length`, `refusal` → `content_filter`;
//! - `error` → a provider error classified by its `error.type`; `message_stop` ends the stream.
//!
//! A body that ends before `message_stop` is cut off ([`WireError::Malformed`]).
//!
//! # Prompt caching
//!
//! With [`ModelConfig::prompt_cache`] on (the default), each request carries
//! `cache_control: {"type": "ephemeral"}` breakpoints, never more than the API's four:
//!
//! 1. on the last tool definition (the tools are the start of the prompt);
//! 2. on the system prompt, sent as one `text` block so it can carry one;
//! 3. on the newest turn: the last block of the last message (the last one that may carry a
//!    breakpoint: thinking blocks may not), which writes the conversation so far to the cache;
//! 4. on the block where the previous committed request put its newest-turn breakpoint, so the
//!    entry that request wrote is read back even when a turn added more than the 20 blocks
//!    the API looks back from a breakpoint for an earlier entry (a reply with many parallel
//!    tool calls and their results).
//!
//! Nothing that changes from one request to the next is ever marked: tools, system prompt and
//! the history are resent byte for byte, and the newest turn becomes the next request's
//! history. The breakpoints move as the conversation grows, so a message carries
//! `cache_control` in one or two requests and not afterwards. That does not cost the cache: the
//! API matches the prompt's content (tools, system, messages, in that order, up to a
//! breakpoint), and `cache_control` marks where an entry ends rather than being part of it;
//! its own automatic caching moves its one breakpoint forward the same way. So the prefix
//! that must stay byte-stable is the request with every `cache_control` taken out, and that is
//! what `tests/prompt_cache.rs` holds each adapter to over a ten-request session.
//!
//! A cache write costs 1.25 × the input price and a read 0.1 ×, so one request that is never
//! followed by another pays a quarter more for its prompt, and every later request of a
//! session pays a tenth for what it shares with the one before. Entries live five minutes,
//! renewed by every read. A prefix below the model's minimum (1,024 to 4,096 tokens) is not
//! cached at all, without error. Near a full context window the thinking budget follows the
//! clamped `max_tokens`, and a changed thinking budget invalidates the cached messages (not the
//! tools and system prompt).

use std::collections::HashMap;

use penguin_omni_protocol::{Fidelity, ModelPayload, OmniMessage, Role};
use serde_json::{json, Map, Value};

use crate::sse::{DecodedEvent, SseEventHandler, SseStreamDecoder};
use crate::translate::{strip_suffix, ContentItem, UniEvent, Usage};
use crate::wire::{
    classify_error, provider_error, ModelConfig, WireError, WireProtocol, WireRequest,
};
use crate::ThinkingLevel;

/// The `anthropic-version` header value.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` is mandatory on this API; used when the configuration leaves it at 0.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// The Anthropic Messages protocol: builds requests and keeps the committed history.
#[derive(Clone, Debug, Default)]
pub struct AnthropicMessages {
    history: Vec<Value>,
    /// Where the last committed request put its newest-turn breakpoint, as (message, block)
    /// indexes into `history`: the cache entry it wrote ends there.
    written: Option<(usize, usize)>,
}

/// The most `cache_control` breakpoints one request may carry.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The index of the last block of `message` that may carry `cache_control` (thinking blocks
/// may not).
fn last_cacheable_block(message: &Value) -> Option<usize> {
    let blocks = message.get("content")?.as_array()?;
    blocks.iter().rposition(|b| {
        !matches!(
            b.get("type").and_then(Value::as_str),
            Some("thinking" | "redacted_thinking")
        )
    })
}

/// Marks block `block` of message `message` of `messages` as a breakpoint.
fn mark(messages: &mut [Value], message: usize, block: usize) {
    if let Some(Value::Object(b)) = messages
        .get_mut(message)
        .and_then(|m| m.get_mut("content"))
        .and_then(|c| c.get_mut(block))
    {
        b.insert("cache_control".into(), ephemeral());
    }
}

impl AnthropicMessages {
    /// A protocol with an empty history.
    pub fn new() -> AnthropicMessages {
        AnthropicMessages::default()
    }

    /// The committed history as wire messages.
    pub fn history(&self) -> &[Value] {
        &self.history
    }
}

/// The extended-thinking budget for a level; `None` leaves thinking off.
pub fn thinking_budget(level: ThinkingLevel) -> Option<u64> {
    match level {
        ThinkingLevel::None => None,
        ThinkingLevel::Low => Some(2048),
        ThinkingLevel::Medium => Some(8192),
        ThinkingLevel::High => Some(16384),
        ThinkingLevel::Xhigh => Some(32768),
        ThinkingLevel::Max => Some(63999),
    }
}

/// The API's smallest accepted thinking budget.
const MIN_THINKING_BUDGET: u64 = 1024;

impl WireProtocol for AnthropicMessages {
    type Decoder = AnthropicDecoder;

    fn build_request(
        &self,
        config: &ModelConfig,
        new_messages: &[OmniMessage],
        thinking_level: Option<ThinkingLevel>,
    ) -> WireRequest {
        let max_tokens = if config.max_output_tokens > 0 {
            config.max_output_tokens
        } else {
            DEFAULT_MAX_TOKENS
        };
        let cache = config.prompt_cache;
        let mut messages = self.history.clone();
        messages.extend(to_wire_messages(new_messages));
        if cache {
            // The entry the last request wrote, then the newest turn (see the module docs).
            if let Some((message, block)) = self.written {
                mark(&mut messages, message, block);
            }
            if let Some(last) = messages.len().checked_sub(1) {
                if let Some(block) = last_cacheable_block(&messages[last]) {
                    mark(&mut messages, last, block);
                }
            }
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model_id));
        body.insert("max_tokens".into(), json!(max_tokens));
        if !config.system_prompt.is_empty() {
            let system = if cache {
                json!([{"type": "text", "text": config.system_prompt, "cache_control": ephemeral()}])
            } else {
                json!(config.system_prompt)
            };
            body.insert("system".into(), system);
        }
        body.insert("messages".into(), Value::Array(messages));
        if !config.tools.is_empty() {
            let mut tools: Vec<Value> = config
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                    })
                })
                .collect();
            if let (true, Some(Value::Object(last))) = (cache, tools.last_mut()) {
                last.insert("cache_control".into(), ephemeral());
            }
            body.insert("tools".into(), Value::Array(tools));
        }
        // The budget must stay below max_tokens; a level that cannot fit the minimum budget
        // leaves thinking off rather than sending a request the API rejects.
        if let Some(budget) = thinking_level
            .and_then(thinking_budget)
            .map(|b| b.min(max_tokens.saturating_sub(1)))
            .filter(|b| *b >= MIN_THINKING_BUDGET)
        {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        body.insert("stream".into(), json!(true));
        let mut headers = vec![("anthropic-version".to_owned(), ANTHROPIC_VERSION.to_owned())];
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push(("x-api-key".to_owned(), key.to_owned()));
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        WireRequest {
            path: "/v1/messages".into(),
            headers,
            body: Value::Object(body),
        }
    }

    fn commit(&mut self, new_messages: &[OmniMessage], reply: &[OmniMessage]) {
        self.history.extend(to_wire_messages(new_messages));
        // The request's newest-turn breakpoint was on its last message, now the history's.
        self.written =
            self.history.len().checked_sub(1).and_then(|last| {
                last_cacheable_block(&self.history[last]).map(|block| (last, block))
            });
        self.history.extend(to_wire_messages(reply));
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        self.history = to_wire_messages(history);
        self.written = None;
    }
}

/// Converts complete model messages to Messages-API turns, one per run of a role.
///
/// User turns put `tool_result` blocks first (the API requires them right after the
/// `tool_use` turn), then texts and images. Assistant turns keep block order; thinking goes
/// back only with its signature (or as `redacted_thinking`), because the API rejects
/// unsigned thinking. Empty turns are dropped: the API merges consecutive same-role turns.
pub fn to_wire_messages(msgs: &[OmniMessage]) -> Vec<Value> {
    let payloads: Vec<&ModelPayload> = msgs
        .iter()
        .filter_map(OmniMessage::model)
        .filter(|p| !p.is_partial())
        .collect();
    let mut out = Vec::new();
    for group in payloads.chunk_by(|a, b| a.role() == b.role()) {
        let (role, blocks) = match group[0].role() {
            Role::User => ("user", user_blocks(group)),
            Role::Assistant => ("assistant", assistant_blocks(group)),
        };
        if !blocks.is_empty() {
            out.push(json!({"role": role, "content": blocks}));
        }
    }
    out
}

fn image_block(url: &str) -> Value {
    match url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    {
        Some((media_type, data)) => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

fn user_blocks(group: &[&ModelPayload]) -> Vec<Value> {
    let mut results = Vec::new();
    let mut rest = Vec::new();
    for p in group {
        match p {
            ModelPayload::ToolCallOutput(o) => {
                let content = match &o.images {
                    Some(images) if !images.is_empty() => {
                        let mut parts = vec![json!({"type": "text", "text": o.output})];
                        parts.extend(images.iter().map(|u| image_block(u)));
                        Value::Array(parts)
                    }
                    _ => json!(o.output),
                };
                results.push(json!({
                    "type": "tool_result",
                    "tool_use_id": strip_suffix(&o.tool_call_id),
                    "content": content,
                }));
            }
            ModelPayload::Text(t) if !t.text.is_empty() => {
                rest.push(json!({"type": "text", "text": t.text}))
            }
            ModelPayload::ImageUrl(i) => rest.push(image_block(&i.image_url)),
            ModelPayload::InlineData(d) if d.mime_type.starts_with("image/") => rest.push(
                json!({"type": "image", "source": {"type": "base64", "media_type": d.mime_type, "data": d.data}}),
            ),
            _ => {}
        }
    }
    results.extend(rest);
    results
}

fn assistant_blocks(group: &[&ModelPayload]) -> Vec<Value> {
    let mut blocks = Vec::new();
    for p in group {
        match p {
            ModelPayload::Thinking(t) => {
                let fidelity = t.fidelity.as_ref();
                if let Some(data) = fidelity.and_then(|f| f.get("redacted_thinking")) {
                    blocks.push(json!({"type": "redacted_thinking", "data": data}));
                } else if let Some(sig) = fidelity.and_then(|f| f.get("signature")) {
                    blocks.push(
                        json!({"type": "thinking", "thinking": t.thinking, "signature": sig}),
                    );
                }
            }
            ModelPayload::Text(t) if !t.text.is_empty() => {
                blocks.push(json!({"type": "text", "text": t.text}))
            }
            ModelPayload::ToolCall(c) => {
                let input = match serde_json::from_str::<Value>(&c.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                blocks.push(json!({
                    "type": "tool_use",
                    "id": strip_suffix(&c.tool_call_id),
                    "name": c.name,
                    "input": input,
                }));
            }
            _ => {}
        }
    }
    blocks
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking,
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    Other,
}

/// Decodes a Messages SSE body. See the module docs for the mapping.
pub type AnthropicDecoder = SseStreamDecoder<AnthropicEvents>;

/// The Messages half of [`AnthropicDecoder`]: the state of one response between events.
#[derive(Debug, Default)]
pub struct AnthropicEvents {
    blocks: HashMap<u64, Block>,
    input_tokens: u64,
    cache_read: u64,
    cache_creation: u64,
    output_tokens: u64,
    events: usize,
    stopped: bool,
}

impl AnthropicEvents {
    fn usage(&mut self, usage: &Value) -> Usage {
        let set = |key: &str, field: &mut u64| {
            if let Some(n) = usage.get(key).and_then(Value::as_u64) {
                *field = n;
            }
        };
        set("input_tokens", &mut self.input_tokens);
        set("cache_read_input_tokens", &mut self.cache_read);
        set("cache_creation_input_tokens", &mut self.cache_creation);
        set("output_tokens", &mut self.output_tokens);
        Usage {
            cached_tokens: self.cache_read,
            prompt_tokens: self.input_tokens + self.cache_creation,
            thoughts_tokens: 0,
            response_tokens: self.output_tokens,
        }
    }
}

impl SseEventHandler for AnthropicEvents {
    fn event(&mut self, sse: &DecodedEvent) -> Result<UniEvent, WireError> {
        let data = sse.data.as_str();
        if self.stopped {
            return Ok(UniEvent::default());
        }
        let event: Value = serde_json::from_str(data).map_err(|e| {
            WireError::Malformed(format!(
                "Messages event {} is not valid JSON ({e}): {}",
                self.events + 1,
                data.chars().take(200).collect::<String>()
            ))
        })?;
        self.events += 1;
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut ev = UniEvent::default();
        match kind {
            "message_start" => {
                if let Some(u) = event.pointer("/message/usage") {
                    ev.usage = Some(self.usage(u));
                }
            }
            "content_block_start" => {
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let state = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                        if !text.is_empty() {
                            ev.content_items.push(ContentItem::Text {
                                text: text.to_owned(),
                                fidelity: None,
                            });
                        }
                        Block::Text
                    }
                    Some("thinking") => Block::Thinking,
                    Some("redacted_thinking") => {
                        let mut f = Fidelity::new();
                        f.insert(
                            "redacted_thinking".into(),
                            block.get("data").cloned().unwrap_or(Value::Null),
                        );
                        ev.content_items.push(ContentItem::Thinking {
                            thinking: String::new(),
                            fidelity: Some(f),
                        });
                        Block::Other
                    }
                    Some("tool_use") => {
                        let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                        let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                        if id.is_empty() || name.is_empty() {
                            return Err(WireError::Malformed(format!(
                                "tool_use block {index} has no id or name: {block}"
                            )));
                        }
                        ev.content_items.push(ContentItem::PartialToolCall {
                            tool_call_id: Some(id.to_owned()),
                            name: Some(name.to_owned()),
                            arguments: String::new(),
                            fidelity: None,
                        });
                        Block::ToolUse {
                            id: id.to_owned(),
                            name: name.to_owned(),
                            input: String::new(),
                        }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(index, state);
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let str_of = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or("");
                match (
                    delta.get("type").and_then(Value::as_str),
                    self.blocks.get_mut(&index),
                ) {
                    (Some("text_delta"), _) => ev.content_items.push(ContentItem::Text {
                        text: str_of("text").to_owned(),
                        fidelity: None,
                    }),
                    (Some("thinking_delta"), _) => ev.content_items.push(ContentItem::Thinking {
                        thinking: str_of("thinking").to_owned(),
                        fidelity: None,
                    }),
                    (Some("signature_delta"), _) => {
                        let mut f = Fidelity::new();
                        f.insert("signature".into(), json!(str_of("signature")));
                        ev.content_items.push(ContentItem::Thinking {
                            thinking: String::new(),
                            fidelity: Some(f),
                        });
                    }
                    (Some("input_json_delta"), Some(Block::ToolUse { id, input, .. })) => {
                        let fragment = str_of("partial_json");
                        input.push_str(fragment);
                        ev.content_items.push(ContentItem::PartialToolCall {
                            tool_call_id: Some(id.clone()),
                            name: None,
                            arguments: fragment.to_owned(),
                            fidelity: None,
                        });
                    }
                    (Some("input_json_delta"), _) => {
                        return Err(WireError::Malformed(format!(
                        "input_json_delta for block {index}, which is not an open tool_use block"
                    )))
                    }
                    // citations_delta and future delta types carry nothing we stream.
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(Block::ToolUse { id, name, input }) = self.blocks.remove(&index) {
                    let arguments = if input.trim().is_empty() {
                        Value::Null
                    } else {
                        serde_json::from_str(&input).map_err(|e| {
                            WireError::Malformed(format!(
                                "input of tool_use {name} ({id}) is not valid JSON ({e}): {input}"
                            ))
                        })?
                    };
                    ev.content_items.push(ContentItem::ToolCall {
                        tool_call_id: id,
                        name,
                        arguments,
                        fidelity: None,
                    });
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    ev.finish_reason = Some(normalize_stop_reason(reason).to_owned());
                }
                if let Some(u) = event.get("usage") {
                    ev.usage = Some(self.usage(u));
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let (message, codes) = provider_error(&event)
                    .unwrap_or_else(|| (format!("provider error: {event}"), Vec::new()));
                let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
                return Err(WireError::Provider {
                    status: classify_error(None, &codes, &message),
                    message,
                });
            }
            // ping and event types added later.
            _ => {}
        }
        Ok(ev)
    }

    fn events_seen(&self) -> usize {
        self.events
    }

    fn missing_end(&self) -> Option<String> {
        (!self.stopped).then(|| {
            format!(
                "the end of the message: the stream ended after {} event(s) without message_stop",
                self.events
            )
        })
    }
}

fn normalize_stop_reason(reason: &str) -> &str {
    match reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_call",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason, ToolDefinition};

    #[test]
    fn request_has_required_max_tokens_thinking_budget_and_auth_headers() {
        let mut config = ModelConfig::new("https://api.anthropic.com", "claude-sonnet-4-5");
        config.api_key = Some("sk-ant".into());
        config.system_prompt = "sys".into();
        // The breakpoints have their own test.
        config.prompt_cache = false;
        config.tools = vec![ToolDefinition {
            name: "read".into(),
            description: "Reads".into(),
            parameters: None,
        }];
        let mut p = AnthropicMessages::new();
        let mut sig = Fidelity::new();
        sig.insert("signature".into(), json!("EqQB"));
        p.commit(
            &[build::user_text("hi")],
            &[
                build::thinking("plan", StopReason::Completed, Some(sig)),
                build::thinking("unsigned", StopReason::Completed, None),
                build::tool_call(
                    "read",
                    "{\"p\":1}",
                    "toolu_1#2",
                    StopReason::Completed,
                    None,
                ),
            ],
        );
        let req = p.build_request(
            &config,
            &[build::tool_call_output(
                "ok",
                "toolu_1#2",
                StopReason::Completed,
            )],
            Some(ThinkingLevel::High),
        );
        assert_eq!(req.path, "/v1/messages");
        assert_eq!(
            req.headers,
            [
                ("anthropic-version".to_owned(), "2023-06-01".to_owned()),
                ("x-api-key".to_owned(), "sk-ant".to_owned()),
                ("authorization".to_owned(), "Bearer sk-ant".to_owned()),
            ]
        );
        assert_eq!(
            req.body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 8192,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "plan", "signature": "EqQB"},
                        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}}
                    ]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
                ],
                "tools": [{"name": "read", "description": "Reads", "input_schema": {"type": "object", "properties": {}}}],
                "thinking": {"type": "enabled", "budget_tokens": 8191},
                "stream": true
            })
        );
    }

    /// The paths of every `cache_control` in `body`.
    fn breakpoints(body: &Value) -> Vec<String> {
        fn walk(v: &Value, path: String, out: &mut Vec<String>) {
            match v {
                Value::Object(o) => {
                    if o.get("cache_control") == Some(&json!({"type": "ephemeral"})) {
                        out.push(path.clone());
                    }
                    for (k, v) in o {
                        walk(v, format!("{path}/{k}"), out);
                    }
                }
                Value::Array(a) => {
                    for (i, v) in a.iter().enumerate() {
                        walk(v, format!("{path}/{i}"), out);
                    }
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(body, String::new(), &mut out);
        out.sort();
        out
    }

    #[test]
    fn breakpoints_mark_tools_system_the_last_entry_and_the_newest_turn() {
        let mut config = ModelConfig::new("x", "m");
        config.system_prompt = "sys".into();
        config.tools = vec![
            ToolDefinition {
                name: "a".into(),
                description: "A".into(),
                parameters: None,
            },
            ToolDefinition {
                name: "b".into(),
                description: "B".into(),
                parameters: None,
            },
        ];
        let mut p = AnthropicMessages::new();
        let first = [build::user_text("hi")];
        let req = p.build_request(&config, &first, None);
        assert_eq!(
            breakpoints(&req.body),
            ["/messages/0/content/0", "/system/0", "/tools/1"]
        );
        assert_eq!(
            req.body["system"],
            json!([{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}])
        );
        let mut sig = Fidelity::new();
        sig.insert("signature".into(), json!("S"));
        p.commit(
            &first,
            &[
                build::tool_call("a", "{}", "toolu_1", StopReason::Completed, None),
                build::tool_call("b", "{}", "toolu_2", StopReason::Completed, None),
            ],
        );
        let outputs = [
            build::tool_call_output("one", "toolu_1", StopReason::Completed),
            build::tool_call_output("two", "toolu_2", StopReason::Completed),
        ];
        let req = p.build_request(&config, &outputs, None);
        // The entry the first request wrote ends at message 0; the newest turn is message 2.
        assert_eq!(
            breakpoints(&req.body),
            [
                "/messages/0/content/0",
                "/messages/2/content/1",
                "/system/0",
                "/tools/1"
            ]
        );
        p.commit(
            &outputs,
            &[build::assistant_text("done", StopReason::Completed)],
        );
        let req = p.build_request(&config, &[build::user_text("more")], None);
        // Message 0 is no longer marked: four breakpoints at most, and they move on.
        assert_eq!(
            breakpoints(&req.body),
            [
                "/messages/2/content/1",
                "/messages/4/content/0",
                "/system/0",
                "/tools/1"
            ]
        );
        // A thinking block may not carry a breakpoint: the block before it does.
        let mut p = AnthropicMessages::new();
        let req = p.build_request(
            &config,
            &[
                build::assistant_text("a", StopReason::Completed),
                build::thinking("t", StopReason::Completed, Some(sig)),
            ],
            None,
        );
        assert_eq!(req.body["messages"][0]["content"][1]["type"], "thinking");
        assert!(breakpoints(&req.body).contains(&"/messages/0/content/0".to_owned()));
        // Off, nothing is marked and the system prompt is a plain string.
        config.prompt_cache = false;
        p.commit(&[build::user_text("x")], &[]);
        let req = p.build_request(&config, &[build::user_text("y")], None);
        assert!(breakpoints(&req.body).is_empty());
        assert_eq!(req.body["system"], json!("sys"));
    }

    #[test]
    fn a_budget_that_cannot_fit_leaves_thinking_off() {
        let mut config = ModelConfig::new("x", "m");
        config.max_output_tokens = 1000;
        let req = AnthropicMessages::new().build_request(
            &config,
            &[build::user_text("a")],
            Some(ThinkingLevel::Low),
        );
        assert!(req.body.get("thinking").is_none());
        assert_eq!(req.body["max_tokens"], json!(1000));
    }

    #[test]
    fn images_become_base64_or_url_sources() {
        assert_eq!(
            image_block("data:image/png;base64,AAAA"),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}})
        );
        assert_eq!(
            image_block("https://x/y.png"),
            json!({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}})
        );
    }

    #[test]
    fn stop_reasons_normalize() {
        assert_eq!(normalize_stop_reason("end_turn"), "stop");
        assert_eq!(normalize_stop_reason("tool_use"), "tool_call");
        assert_eq!(normalize_stop_reason("max_tokens"), "length");
        assert_eq!(normalize_stop_reason("pause_turn"), "pause_turn");
    }
}
