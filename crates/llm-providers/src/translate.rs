//! The provider-neutral middle of every adapter (protocol
//! [§6.2](penguin_omni_protocol::spec#s6.2)–[§6.4](penguin_omni_protocol::spec#s6.4), *Stream
//! translation* to *Tool call ids*).
//!
//! A wire decoder turns provider bytes into [`UniEvent`]s; the [`EventTranslator`] turns those into
//! OmniMessages with the exact segmentation of the reference implementation. The translator is
//! pure: no I/O, no clock beyond the builders' timestamps, no async. Every rule of
//! [§6.2](penguin_omni_protocol::spec#s6.2) is enforced here, so an adapter only has to say *what*
//! the provider sent, never *how* to stream it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use penguin_omni_protocol::{
    build, Fidelity, OmniMessage, StopReason, StreamEventType, TokenCounts,
};
use serde_json::Value;

use crate::error::WireError;
use crate::limits::{human_bytes, DEFAULT_MAX_MESSAGE_BYTES, RESPONSE_MESSAGES};

/// One piece of model output as a provider reports it, before segmentation.
#[derive(Clone, Debug, PartialEq)]
pub enum ContentItem {
    /// Visible text. `fidelity` carries wire data such as `phase` or a `signature`.
    Text {
        /// The text fragment (may be empty when the item only carries fidelity).
        text: String,
        /// Provider wire data.
        fidelity: Option<Fidelity>,
    },
    /// Reasoning text. `fidelity` carries e.g. `{"reasoning_field": "reasoning_content"}` or a
    /// Claude `{"signature": ...}` (which arrives as an empty-text item closing the block).
    Thinking {
        /// The reasoning fragment (may be empty).
        thinking: String,
        /// Provider wire data.
        fidelity: Option<Fidelity>,
    },
    /// An argument fragment of a streamed tool call. The id may be present only on the first
    /// fragment; later fragments without one belong to the call most recently named.
    PartialToolCall {
        /// The provider's call id (first fragment, usually).
        tool_call_id: Option<String>,
        /// The tool name (first fragment, usually).
        name: Option<String>,
        /// A raw JSON text fragment.
        arguments: String,
        /// Provider wire data.
        fidelity: Option<Fidelity>,
    },
    /// A finished tool call with parsed arguments. Emitted at once, so approval can start
    /// while the model is still streaming.
    ToolCall {
        /// The provider's call id; an empty id makes the item ignored.
        tool_call_id: String,
        /// The tool name.
        name: String,
        /// Parsed arguments; `null` counts as `{}`.
        arguments: Value,
        /// Provider wire data.
        fidelity: Option<Fidelity>,
    },
}

/// Token usage as a provider snapshot, already split the reference's way.
///
/// Adapters must convert: OpenAI's `prompt_tokens` *includes* cached tokens, so
/// `prompt_tokens` here is the uncached remainder; `completion_tokens` includes reasoning, so
/// `response_tokens` is the remainder after `thoughts_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens served from the cache.
    pub cached_tokens: u64,
    /// Uncached prompt tokens.
    pub prompt_tokens: u64,
    /// Reasoning tokens.
    pub thoughts_tokens: u64,
    /// Visible output tokens (text and tool calls).
    pub response_tokens: u64,
}

/// One provider event: content, optionally a usage snapshot and a finish reason.
///
/// Finish reasons are normalized by the adapter to `stop`, `tool_call`, `length`,
/// `content_filter`, or passed through verbatim when unknown; only `stop` and `tool_call`
/// count as a normal end.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UniEvent {
    /// Content items, in wire order.
    pub content_items: Vec<ContentItem>,
    /// The latest cumulative usage snapshot.
    pub usage: Option<Usage>,
    /// The normalized finish reason.
    pub finish_reason: Option<String>,
}

impl UniEvent {
    /// An event holding one content item.
    pub fn item(item: ContentItem) -> UniEvent {
        UniEvent {
            content_items: vec![item],
            ..UniEvent::default()
        }
    }
}

/// Token counts from a usage snapshot ([§6.3](penguin_omni_protocol::spec#s6.3) *Token
/// accounting*): `uncached_prompt` (`cache_write` on the wire) is the uncached prompt, `output` is
/// thinking plus response, `total` the sum of all three.
pub fn usage_to_token_counts(usage: &Usage) -> TokenCounts {
    TokenCounts::new(
        usage.cached_tokens,
        usage.prompt_tokens,
        usage.thoughts_tokens + usage.response_tokens,
    )
}

/// Hands out session-unique tool call ids ([§6.4](penguin_omni_protocol::spec#s6.4) *Tool call
/// ids*).
///
/// Clones share one set of used ids: the session keeps one allocator and passes clones to
/// every model it builds (including the ones rebuilt after compaction), so a provider that
/// reuses ids (Gemini names calls by function name) still yields unique ids session-wide.
#[derive(Clone, Debug, Default)]
pub struct ToolCallIdAllocator {
    used: Arc<Mutex<HashSet<String>>>,
}

impl ToolCallIdAllocator {
    /// An allocator with no id used yet.
    pub fn new() -> ToolCallIdAllocator {
        ToolCallIdAllocator::default()
    }

    /// Returns `id` if it is unused, otherwise the first unused `id#n` for n = 2, 3, ….
    /// The result is marked used either way.
    pub fn allocate(&self, id: &str) -> String {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        let chosen = if used.contains(id) {
            (2u64..)
                .map(|n| format!("{id}#{n}"))
                .find(|candidate| !used.contains(candidate))
                .unwrap_or_else(|| unreachable!("the u64 range outlasts any set"))
        } else {
            id.to_owned()
        };
        used.insert(chosen.clone());
        chosen
    }

    /// Marks an id seen in a resumed history as used.
    pub fn register(&self, id: &str) {
        self.used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned());
    }
}

/// `stripToolCallIdSuffix`: removes one trailing `#<digits>`, giving back the provider's id.
pub fn strip_suffix(id: &str) -> &str {
    match id.rfind('#') {
        Some(pos) if pos + 1 < id.len() && id[pos + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            &id[..pos]
        }
        _ => id,
    }
}

/// Maps a normalized finish reason to the stop reason of the last segments.
pub fn finish_reason_to_stop_reason(finish_reason: Option<&str>) -> StopReason {
    match finish_reason {
        None | Some("stop") | Some("tool_call") => StopReason::Completed,
        Some(_) => StopReason::Failed,
    }
}

#[derive(Debug, Default)]
struct Segment {
    buffer: String,
    started: bool,
    fidelity: Fidelity,
}

#[derive(Debug)]
struct ToolAccumulator {
    id: String,
    name: String,
    fidelity: Option<Fidelity>,
    arguments: String,
    complete_arguments: Option<String>,
    started: bool,
    emitted: bool,
}

/// The state machine of [§6.2](penguin_omni_protocol::spec#s6.2) *Stream translation* () for one
/// request: feed it [`UniEvent`]s, then call exactly one of [`finish`](EventTranslator::finish) or
/// [`finish_interrupted`](EventTranslator::finish_interrupted).
///
/// It is also where every adapter's output is held to
/// [`ModelConfig::max_message_bytes`](crate::ModelConfig::max_message_bytes): a text or
/// thinking segment, or a tool call's arguments, may not grow past it, nor the response's
/// content in all past [`RESPONSE_MESSAGES`] times it. The fragment that would cross a cap is
/// not emitted; from then on the translator drops everything, and
/// [`too_large`](EventTranslator::too_large) says why, so the caller stops reading and ends
/// the request with [`finish_interrupted`](EventTranslator::finish_interrupted): every
/// segment closes holding exactly what was streamed, never more than the cap.
#[derive(Debug)]
pub struct EventTranslator {
    allocator: ToolCallIdAllocator,
    text: Segment,
    thinking: Segment,
    tools: Vec<ToolAccumulator>,
    /// Provider key → index into `tools` of the newest accumulator with that key.
    by_key: HashMap<String, usize>,
    active_key: Option<String>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    max_message_bytes: usize,
    /// Content bytes of every message of the response so far.
    response_bytes: usize,
    too_large: Option<WireError>,
}

impl EventTranslator {
    /// A translator for one request, allocating call ids from the session's allocator, with
    /// the default message cap ([`DEFAULT_MAX_MESSAGE_BYTES`]).
    pub fn new(allocator: ToolCallIdAllocator) -> EventTranslator {
        EventTranslator {
            allocator,
            text: Segment::default(),
            thinking: Segment::default(),
            tools: Vec::new(),
            by_key: HashMap::new(),
            active_key: None,
            finish_reason: None,
            usage: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            response_bytes: 0,
            too_large: None,
        }
    }

    /// The same translator with another cap on one message's content, in bytes.
    pub fn with_max_message_bytes(mut self, max: usize) -> EventTranslator {
        self.max_message_bytes = max;
        self
    }

    /// Why the response was refused, once a message (or the response) outgrew its cap: a
    /// [`WireError::TooLarge`] naming the limit. Everything translated after it is dropped.
    pub fn too_large(&self) -> Option<&WireError> {
        self.too_large.as_ref()
    }

    /// Counts `growth` more bytes of content into the response for a message that will then
    /// hold `size`. When that crosses `max_message_bytes`, or the response's
    /// `RESPONSE_MESSAGES` times it, records why (naming the message with `what`, called only
    /// then) and returns false: the translator refuses the response from then on.
    fn admit(&mut self, size: usize, growth: usize, what: &dyn Fn(&Self) -> String) -> bool {
        if self.too_large.is_some() {
            return false;
        }
        let max = self.max_message_bytes;
        let total = max.saturating_mul(RESPONSE_MESSAGES);
        let reason = if size > max {
            format!(
                "model output too large: {} passed max_message_bytes ({}); the rest of the response was not read",
                what(self),
                human_bytes(max)
            )
        } else if self.response_bytes.saturating_add(growth) > total {
            format!(
                "model output too large: the response's messages passed {} in all ({RESPONSE_MESSAGES} × max_message_bytes); the rest of the response was not read",
                human_bytes(total)
            )
        } else {
            self.response_bytes += growth;
            return true;
        };
        self.too_large = Some(WireError::TooLarge(reason));
        false
    }

    /// The last non-null finish reason seen.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The request's token counts from the latest usage snapshot (zero when none arrived).
    pub fn request_tokens(&self) -> TokenCounts {
        self.usage
            .as_ref()
            .map(usage_to_token_counts)
            .unwrap_or_default()
    }

    /// Translates one event into the messages to yield, in order.
    pub fn translate(&mut self, event: UniEvent) -> Vec<OmniMessage> {
        if let Some(reason) = event.finish_reason {
            self.finish_reason = Some(reason);
        }
        if let Some(usage) = event.usage {
            // Snapshots are cumulative: the latest replaces, never adds.
            self.usage = Some(usage);
        }
        let mut out = Vec::new();
        for item in event.content_items {
            if self.too_large.is_some() {
                break;
            }
            match item {
                ContentItem::Text { text, fidelity } => self.on_text(text, fidelity, &mut out),
                ContentItem::Thinking { thinking, fidelity } => {
                    self.on_thinking(thinking, fidelity, &mut out)
                }
                ContentItem::PartialToolCall {
                    tool_call_id,
                    name,
                    arguments,
                    fidelity,
                } => self.on_partial_tool_call(tool_call_id, name, arguments, fidelity, &mut out),
                ContentItem::ToolCall {
                    tool_call_id,
                    name,
                    arguments,
                    fidelity,
                } => self.on_tool_call(tool_call_id, name, arguments, fidelity, &mut out),
            }
        }
        out
    }

    /// Normal end: closes thinking and text with the stop reason the finish reason gives, then
    /// emits (as completed) every tool call whose complete item never arrived, in first-seen
    /// order. The caller yields `token_usage` afterwards.
    pub fn finish(&mut self) -> Vec<OmniMessage> {
        let reason = finish_reason_to_stop_reason(self.finish_reason.as_deref());
        let mut out = Vec::new();
        self.flush_thinking(reason, &mut out);
        self.flush_text(reason, &mut out);
        self.flush_tools(StopReason::Completed, &mut out);
        out
    }

    /// Interrupted end: closes every open segment and every unemitted tool call with `reason`.
    /// Those tool calls are never dispatched; they exist so no fragment stays open.
    pub fn finish_interrupted(&mut self, reason: StopReason) -> Vec<OmniMessage> {
        let mut out = Vec::new();
        self.flush_thinking(reason, &mut out);
        self.flush_text(reason, &mut out);
        self.flush_tools(reason, &mut out);
        out
    }

    fn on_text(&mut self, text: String, fidelity: Option<Fidelity>, out: &mut Vec<OmniMessage>) {
        let item_fidelity = fidelity.filter(|f| !f.is_empty());
        let signed = self.text.fidelity.contains_key("signature");
        let item_phase = item_fidelity
            .as_ref()
            .and_then(|f| f.get("phase"))
            .filter(|p| !p.is_null());
        let phase_changed =
            item_phase.is_some_and(|p| self.text.fidelity.get("phase").is_none_or(|cur| cur != p));
        if (signed && (!text.is_empty() || item_fidelity.is_some())) || phase_changed {
            self.flush_thinking(StopReason::Completed, out);
            self.flush_text(StopReason::Completed, out);
        }
        if let Some(f) = item_fidelity {
            self.text.fidelity.extend(f);
        }
        if text.is_empty() {
            return;
        }
        let size = self.text.buffer.len().saturating_add(text.len());
        if !self.admit(size, text.len(), &|_| "a text message".into()) {
            return;
        }
        self.flush_thinking(StopReason::Completed, out);
        if !self.text.started {
            self.text.started = true;
            out.push(build::partial_text(
                StreamEventType::Start,
                "",
                StopReason::Completed,
            ));
        }
        self.text.buffer.push_str(&text);
        out.push(build::partial_text(
            StreamEventType::Delta,
            text,
            StopReason::Completed,
        ));
    }

    fn on_thinking(
        &mut self,
        thinking: String,
        fidelity: Option<Fidelity>,
        out: &mut Vec<OmniMessage>,
    ) {
        let item_fidelity = fidelity.filter(|f| !f.is_empty());
        let empty = Fidelity::new();
        if !self.thinking.fidelity.is_empty()
            && self.thinking.fidelity != *item_fidelity.as_ref().unwrap_or(&empty)
            && (!thinking.is_empty() || item_fidelity.is_some())
        {
            self.flush_thinking(StopReason::Completed, out);
        }
        if let Some(f) = item_fidelity {
            self.thinking.fidelity = f;
        }
        if thinking.is_empty() {
            return;
        }
        let size = self.thinking.buffer.len().saturating_add(thinking.len());
        if !self.admit(size, thinking.len(), &|_| "a thinking message".into()) {
            return;
        }
        self.flush_text(StopReason::Completed, out);
        if !self.thinking.started {
            self.thinking.started = true;
            out.push(build::partial_thinking(
                StreamEventType::Start,
                "",
                StopReason::Completed,
            ));
        }
        self.thinking.buffer.push_str(&thinking);
        out.push(build::partial_thinking(
            StreamEventType::Delta,
            thinking,
            StopReason::Completed,
        ));
    }

    fn on_partial_tool_call(
        &mut self,
        tool_call_id: Option<String>,
        name: Option<String>,
        arguments: String,
        fidelity: Option<Fidelity>,
        out: &mut Vec<OmniMessage>,
    ) {
        let item_id = tool_call_id.filter(|id| !id.is_empty());
        let Some(key) = item_id.clone().or_else(|| self.active_key.clone()) else {
            return;
        };
        if item_id.is_some() {
            self.active_key = Some(key.clone());
        }
        // An emitted call is finished. A late fragment for it can neither join it (that would
        // break start → delta* → stop) nor open a call the model never made (a phantom call the
        // engine would dispatch), so it is dropped. Only a complete item reusing an id opens a
        // new `#n` call.
        let index = match self.by_key.get(&key) {
            Some(&i) if self.tools[i].emitted => return,
            Some(&i) => i,
            None => self.new_accumulator(&key),
        };
        let acc = &mut self.tools[index];
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            acc.name = name;
        }
        if let Some(f) = fidelity.filter(|f| !f.is_empty()) {
            acc.fidelity = Some(f);
        }
        if !self.tools[index].started {
            self.flush_thinking(StopReason::Completed, out);
            self.flush_text(StopReason::Completed, out);
            let acc = &mut self.tools[index];
            acc.started = true;
            out.push(build::partial_tool_call(
                StreamEventType::Start,
                acc.name.clone(),
                "",
                acc.id.clone(),
                StopReason::Completed,
            ));
        }
        if !arguments.is_empty() {
            let size = self.tools[index]
                .arguments
                .len()
                .saturating_add(arguments.len());
            if !self.admit(size, arguments.len(), &|t| t.call_what(index)) {
                return;
            }
            let acc = &mut self.tools[index];
            acc.arguments.push_str(&arguments);
            out.push(build::partial_tool_call(
                StreamEventType::Delta,
                "",
                arguments,
                acc.id.clone(),
                StopReason::Completed,
            ));
        }
    }

    fn on_tool_call(
        &mut self,
        tool_call_id: String,
        name: String,
        arguments: Value,
        fidelity: Option<Fidelity>,
        out: &mut Vec<OmniMessage>,
    ) {
        if tool_call_id.is_empty() {
            return;
        }
        self.flush_thinking(StopReason::Completed, out);
        self.flush_text(StopReason::Completed, out);
        // A repeated id whose call was already emitted is a new call (providers that use the
        // function name as the id), so it gets a fresh `#n` id.
        let index = match self.by_key.get(&tool_call_id) {
            Some(&i) if !self.tools[i].emitted => i,
            _ => self.new_accumulator(&tool_call_id),
        };
        let arguments = if arguments.is_null() {
            Value::Object(Default::default())
        } else {
            arguments
        }
        .to_string();
        if !name.is_empty() {
            self.tools[index].name = name;
        }
        // The complete arguments replace what was streamed, so only their growth counts
        // toward the response. A refused call is closed, undispatched, by the interrupted
        // finish with what was streamed of it.
        let growth = arguments
            .len()
            .saturating_sub(self.tools[index].arguments.len());
        if !self.admit(arguments.len(), growth, &|t| t.call_what(index)) {
            return;
        }
        let acc = &mut self.tools[index];
        acc.complete_arguments = Some(arguments);
        if let Some(f) = fidelity.filter(|f| !f.is_empty()) {
            acc.fidelity = Some(f);
        }
        Self::emit_tool(acc, StopReason::Completed, out);
        if self.active_key.as_deref() == Some(tool_call_id.as_str()) {
            self.active_key = None;
        }
    }

    /// How tool call `index`'s arguments are named in a too-large error.
    fn call_what(&self, index: usize) -> String {
        let acc = &self.tools[index];
        format!("the arguments of tool call {} ({})", acc.id, acc.name)
    }

    fn new_accumulator(&mut self, key: &str) -> usize {
        let id = self.allocator.allocate(key);
        self.tools.push(ToolAccumulator {
            id,
            name: String::new(),
            fidelity: None,
            arguments: String::new(),
            complete_arguments: None,
            started: false,
            emitted: false,
        });
        let index = self.tools.len() - 1;
        self.by_key.insert(key.to_owned(), index);
        index
    }

    fn emit_tool(acc: &mut ToolAccumulator, reason: StopReason, out: &mut Vec<OmniMessage>) {
        if acc.started {
            out.push(build::partial_tool_call(
                StreamEventType::Stop,
                "",
                "",
                acc.id.clone(),
                reason,
            ));
        }
        let arguments = acc
            .complete_arguments
            .clone()
            .unwrap_or_else(|| acc.arguments.clone());
        out.push(build::tool_call(
            acc.name.clone(),
            arguments,
            acc.id.clone(),
            reason,
            acc.fidelity.clone(),
        ));
        acc.emitted = true;
    }

    fn flush_tools(&mut self, reason: StopReason, out: &mut Vec<OmniMessage>) {
        for acc in self.tools.iter_mut().filter(|a| !a.emitted) {
            Self::emit_tool(acc, reason, out);
        }
        self.active_key = None;
    }

    fn flush_text(&mut self, reason: StopReason, out: &mut Vec<OmniMessage>) {
        let seg = std::mem::take(&mut self.text);
        if seg.started {
            out.push(build::partial_text(StreamEventType::Stop, "", reason));
        }
        if !seg.buffer.is_empty() || !seg.fidelity.is_empty() {
            out.push(build::assistant_text_with(
                seg.buffer,
                reason,
                Some(seg.fidelity),
            ));
        }
    }

    fn flush_thinking(&mut self, reason: StopReason, out: &mut Vec<OmniMessage>) {
        let seg = std::mem::take(&mut self.thinking);
        if seg.started {
            out.push(build::partial_thinking(StreamEventType::Stop, "", reason));
        }
        if !seg.buffer.is_empty() || !seg.fidelity.is_empty() {
            out.push(build::thinking(seg.buffer, reason, Some(seg.fidelity)));
        }
    }
}

// The tests check streams with the kit's discipline checker, which needs `testkit`.
#[cfg(all(test, feature = "testkit"))]
mod tests;
