//! The OmniMessage envelope and every payload (protocol
//! [§1.1](crate::spec#s1.1)–[§1.6](crate::spec#s1.6), *Envelope* to *Events*).
//!
//! Field order in every struct is the reference's key order, and optional fields are skipped
//! when absent, so `serde_json::to_string` of a message gives the reference's exact bytes.

use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Timestamp;

mod event;
mod exact;
pub use exact::{exact_in_place, InPlace};
mod parse;

pub use event::*;

pub use parse::ParseError;

/// Provider wire data (signatures, encrypted reasoning, `phase`, ...) carried verbatim.
pub type Fidelity = Map<String, Value>;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vm])* #[doc = concat!("`", $text, "` on the wire.")] #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        concat!("unknown ", stringify!($name), " {:?} (expected one of: {})"),
                        other,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

string_enum! {
    /// How a segment, a request or a tool call ended. Exactly these six.
    StopReason {
        /// Normal end.
        Completed = "completed",
        /// A non-transient LLM error, or a tool failure.
        Failed = "failed",
        /// The user interrupted, or a denial.
        Aborted = "aborted",
        /// An LLM timeout or a transport-shaped error.
        Timeout = "timeout",
        /// A parse error, or the stream was cut off cleanly.
        Malformed = "malformed",
        /// The credentials were rejected.
        Auth = "auth",
    }
}

string_enum! {
    /// Where a partial fragment sits in its segment.
    StreamEventType { Start = "start", Delta = "delta", Stop = "stop" }
}

string_enum! {
    /// Who a model message is from, from the model's point of view.
    Role { User = "user", Assistant = "assistant" }
}

string_enum! {
    /// An approval answer. `Forbidden` comes only from the command-policy wrapper.
    ApprovalDecision { Allow = "allow", Deny = "deny", Forbidden = "forbidden" }
}

string_enum! {
    /// Who wrote a user-role text. Absence means `User`.
    TextSender { User = "user", ParentAgent = "parent_agent", Harness = "harness", Server = "server" }
}

string_enum! {
    /// Why a compaction ran.
    CompactionReason { Context = "context", Turns = "turns", Manual = "manual" }
}

string_enum! {
    /// How a compaction treats the old context.
    CompactionMode { Summarize = "summarize", Discard = "discard" }
}

string_enum! {
    /// Outcome of connecting MCP servers.
    McpConnectStatus { Completed = "completed", Failed = "failed", Aborted = "aborted" }
}

string_enum! {
    /// How a goal-mode run ended.
    GoalOutcomeStatus {
        Complete = "complete",
        Blocked = "blocked",
        BudgetLimited = "budget_limited",
        Aborted = "aborted",
    }
}

/// `model_context_window` of a session_meta: a token count or the literal `"unknown"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ContextWindow {
    /// A known window, in tokens.
    Tokens(u64),
    /// Anything else the trace holds, normally `"unknown"`.
    Other(String),
}

/// The per-session invariants ([§1.3](crate::spec#s1.3) *session_meta*).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// `session-YYYY-MM-DD-HH-mm-ss-<8hex>`.
    pub session_id: String,
    /// Provider group.
    pub provider: String,
    /// Upstream model id.
    pub model_id: String,
    /// Context window or `"unknown"`.
    pub model_context_window: ContextWindow,
    /// The fully assembled system prompt.
    pub system_prompt: String,
    /// Absolute path of the agent state directory.
    pub agent_state: String,
    /// Absolute path of the workspace.
    pub workspace: String,
    /// `subagent` or `schedule`; absent means user-created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The session this one is a fork of (penguin's own field; absent for every other
    /// session), so a list can tell the fork from its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// A complete text (`type: "text"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Text {
    /// `user` or `assistant`.
    pub role: Role,
    /// The text.
    pub text: String,
    /// Builders always set it; a hand-written input may leave it out (meaning completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Provider wire data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Box<Fidelity>>,
    /// Who wrote a user text; absent means the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<TextSender>,
}

/// An image by URL or data URL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// Always `user`.
    pub role: Role,
    /// Web URL or base64 data URL.
    pub image_url: String,
    /// Always completed when built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// Inline base64 data (`inline_data`) or inline thinking data (`inline_thinking`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InlineData {
    /// Role of the sender.
    pub role: Role,
    /// Base64 bytes.
    pub data: String,
    /// MIME type of `data`.
    pub mime_type: String,
    /// Always completed when built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Provider wire data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Box<Fidelity>>,
}

/// A complete thinking segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thinking {
    /// Always `assistant`.
    pub role: Role,
    /// The reasoning text (may be empty when only fidelity carries it).
    pub thinking: String,
    /// How the segment ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Provider wire data (signatures, encrypted reasoning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Box<Fidelity>>,
}

/// A complete tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Always `assistant`.
    pub role: Role,
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON **string**.
    pub arguments: String,
    /// Session-unique id.
    pub tool_call_id: String,
    /// Anything but completed marks a synthetic closure that is never dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Provider wire data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Box<Fidelity>>,
}

/// A complete tool output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallOutput {
    /// Always `user`.
    pub role: Role,
    /// The output text.
    pub output: String,
    /// `data:<mime>;base64,...` URLs; set only when non-empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    /// The call this answers.
    pub tool_call_id: String,
    /// How the tool ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// A `partial_text` fragment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartialText {
    /// Always `assistant`.
    pub role: Role,
    /// start, delta or stop.
    pub event_type: StreamEventType,
    /// The fragment's text.
    #[serde(default)]
    pub text: String,
    /// Meaningful only on the stop fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// A `partial_thinking` fragment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartialThinking {
    /// Always `assistant`.
    pub role: Role,
    /// start, delta or stop.
    pub event_type: StreamEventType,
    /// The fragment's thinking text.
    #[serde(default)]
    pub thinking: String,
    /// Meaningful only on the stop fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// A `partial_tool_call` fragment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartialToolCall {
    /// Always `assistant`.
    pub role: Role,
    /// start, delta or stop.
    pub event_type: StreamEventType,
    /// Set on start; `""` on delta and stop.
    #[serde(default)]
    pub name: String,
    /// An argument fragment.
    #[serde(default)]
    pub arguments: String,
    /// The call being streamed.
    pub tool_call_id: String,
    /// Meaningful only on the stop fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// A `partial_tool_call_output` fragment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartialToolCallOutput {
    /// Always `user`.
    pub role: Role,
    /// start, delta or stop.
    pub event_type: StreamEventType,
    /// An output fragment.
    #[serde(default)]
    pub output: String,
    /// Not incremental: a later set replaces an earlier one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    /// The call whose output this is.
    pub tool_call_id: String,
    /// Meaningful only on the stop fragment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// Every `model_msg` payload, discriminated by `payload.type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ModelPayload {
    /// `text`
    Text(Text),
    /// `image_url`
    ImageUrl(ImageUrl),
    /// `inline_data`
    InlineData(InlineData),
    /// `thinking`
    Thinking(Thinking),
    /// `inline_thinking`
    InlineThinking(InlineData),
    /// `tool_call`
    ToolCall(ToolCall),
    /// `tool_call_output`
    ToolCallOutput(ToolCallOutput),
    /// `partial_text`
    PartialText(PartialText),
    /// `partial_thinking`
    PartialThinking(PartialThinking),
    /// `partial_tool_call`
    PartialToolCall(PartialToolCall),
    /// `partial_tool_call_output`
    PartialToolCallOutput(PartialToolCallOutput),
}

impl ModelPayload {
    /// The `payload.type` string.
    pub fn type_name(&self) -> &'static str {
        match self {
            ModelPayload::Text(_) => "text",
            ModelPayload::ImageUrl(_) => "image_url",
            ModelPayload::InlineData(_) => "inline_data",
            ModelPayload::Thinking(_) => "thinking",
            ModelPayload::InlineThinking(_) => "inline_thinking",
            ModelPayload::ToolCall(_) => "tool_call",
            ModelPayload::ToolCallOutput(_) => "tool_call_output",
            ModelPayload::PartialText(_) => "partial_text",
            ModelPayload::PartialThinking(_) => "partial_thinking",
            ModelPayload::PartialToolCall(_) => "partial_tool_call",
            ModelPayload::PartialToolCallOutput(_) => "partial_tool_call_output",
        }
    }

    /// True for the four `partial_*` payloads.
    pub fn is_partial(&self) -> bool {
        matches!(
            self,
            ModelPayload::PartialText(_)
                | ModelPayload::PartialThinking(_)
                | ModelPayload::PartialToolCall(_)
                | ModelPayload::PartialToolCallOutput(_)
        )
    }

    /// The role every payload carries.
    pub fn role(&self) -> Role {
        match self {
            ModelPayload::Text(p) => p.role,
            ModelPayload::ImageUrl(p) => p.role,
            ModelPayload::InlineData(p) | ModelPayload::InlineThinking(p) => p.role,
            ModelPayload::Thinking(p) => p.role,
            ModelPayload::ToolCall(p) => p.role,
            ModelPayload::ToolCallOutput(p) => p.role,
            ModelPayload::PartialText(p) => p.role,
            ModelPayload::PartialThinking(p) => p.role,
            ModelPayload::PartialToolCall(p) => p.role,
            ModelPayload::PartialToolCallOutput(p) => p.role,
        }
    }

    /// The payload's `stop_reason`, when present.
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self {
            ModelPayload::Text(p) => p.stop_reason,
            ModelPayload::ImageUrl(p) => p.stop_reason,
            ModelPayload::InlineData(p) | ModelPayload::InlineThinking(p) => p.stop_reason,
            ModelPayload::Thinking(p) => p.stop_reason,
            ModelPayload::ToolCall(p) => p.stop_reason,
            ModelPayload::ToolCallOutput(p) => p.stop_reason,
            ModelPayload::PartialText(p) => p.stop_reason,
            ModelPayload::PartialThinking(p) => p.stop_reason,
            ModelPayload::PartialToolCall(p) => p.stop_reason,
            ModelPayload::PartialToolCallOutput(p) => p.stop_reason,
        }
    }

    /// The tool_call_id of tool calls, tool outputs and their partials.
    pub fn tool_call_id(&self) -> Option<&str> {
        match self {
            ModelPayload::ToolCall(p) => Some(&p.tool_call_id),
            ModelPayload::ToolCallOutput(p) => Some(&p.tool_call_id),
            ModelPayload::PartialToolCall(p) => Some(&p.tool_call_id),
            ModelPayload::PartialToolCallOutput(p) => Some(&p.tool_call_id),
            _ => None,
        }
    }

    /// For a partial: its event type and the streamed content of this fragment.
    pub fn partial_parts(&self) -> Option<(StreamEventType, &str)> {
        match self {
            ModelPayload::PartialText(p) => Some((p.event_type, &p.text)),
            ModelPayload::PartialThinking(p) => Some((p.event_type, &p.thinking)),
            ModelPayload::PartialToolCall(p) => Some((p.event_type, &p.arguments)),
            ModelPayload::PartialToolCallOutput(p) => Some((p.event_type, &p.output)),
            _ => None,
        }
    }

    /// The complete payload type a partial aggregates into (`partial_text` → `text`, ...).
    pub fn complete_type_of_partial(&self) -> Option<&'static str> {
        match self {
            ModelPayload::PartialText(_) => Some("text"),
            ModelPayload::PartialThinking(_) => Some("thinking"),
            ModelPayload::PartialToolCall(_) => Some("tool_call"),
            ModelPayload::PartialToolCallOutput(_) => Some("tool_call_output"),
            _ => None,
        }
    }

    /// The streamed content of a complete message: text, thinking, arguments or output.
    pub fn content(&self) -> Option<&str> {
        match self {
            ModelPayload::Text(p) => Some(&p.text),
            ModelPayload::Thinking(p) => Some(&p.thinking),
            ModelPayload::ToolCall(p) => Some(&p.arguments),
            ModelPayload::ToolCallOutput(p) => Some(&p.output),
            _ => self.partial_parts().map(|(_, c)| c),
        }
    }
}

/// The three envelope kinds with their payloads.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// `type: "session_meta"` (boxed: it is rare and large, and every message is as large as
    /// its largest kind)
    SessionMeta(Box<SessionMeta>),
    /// `type: "model_msg"`
    Model(ModelPayload),
    /// `type: "event_msg"`
    Event(EventPayload),
}

/// One message of the stream and the Trace ([§1.1](crate::spec#s1.1) *Envelope*).
#[derive(Clone, Debug, PartialEq)]
pub struct OmniMessage {
    /// When the message was built.
    pub timestamp: Timestamp,
    /// Envelope type and payload.
    pub body: Body,
    /// Child session ids, outermost first; absent for the main session. Never empty when set.
    pub origin: Option<Vec<String>>,
}

impl OmniMessage {
    /// A message stamped now, with no origin.
    pub fn new(body: Body) -> OmniMessage {
        OmniMessage {
            timestamp: Timestamp::now(),
            body,
            origin: None,
        }
    }

    /// The envelope `type`.
    pub fn kind(&self) -> &'static str {
        match self.body {
            Body::SessionMeta(_) => "session_meta",
            Body::Model(_) => "model_msg",
            Body::Event(_) => "event_msg",
        }
    }

    /// `payload.type`, or `"session_meta"` for a session_meta (which has none).
    pub fn payload_type(&self) -> &'static str {
        match &self.body {
            Body::SessionMeta(_) => "session_meta",
            Body::Model(p) => p.type_name(),
            Body::Event(p) => p.type_name(),
        }
    }

    /// The model payload, if this is a model_msg.
    pub fn model(&self) -> Option<&ModelPayload> {
        match &self.body {
            Body::Model(p) => Some(p),
            _ => None,
        }
    }

    /// The event payload, if this is an event_msg.
    pub fn event(&self) -> Option<&EventPayload> {
        match &self.body {
            Body::Event(p) => Some(p),
            _ => None,
        }
    }

    /// The session_meta payload, if this is one.
    pub fn session_meta(&self) -> Option<&SessionMeta> {
        match &self.body {
            Body::SessionMeta(m) => Some(m),
            _ => None,
        }
    }

    /// `isPartialPayload`.
    pub fn is_partial(&self) -> bool {
        self.model().is_some_and(ModelPayload::is_partial)
    }

    /// `isCompleteModelMessage`.
    pub fn is_complete_model(&self) -> bool {
        self.model().is_some_and(|p| !p.is_partial())
    }

    /// `isModelMessage`.
    pub fn is_model(&self) -> bool {
        matches!(self.body, Body::Model(_))
    }

    /// `isEventMessage`.
    pub fn is_event(&self) -> bool {
        matches!(self.body, Body::Event(_))
    }

    /// `isSessionMeta`.
    pub fn is_session_meta(&self) -> bool {
        matches!(self.body, Body::SessionMeta(_))
    }

    /// True when the message carries a non-empty origin (it belongs to a child session).
    pub fn has_origin(&self) -> bool {
        self.origin.as_ref().is_some_and(|o| !o.is_empty())
    }

    /// What the Trace records ([§3.2](crate::spec#s3.2) *What is recorded*): no origin,
    /// and not a partial.
    pub fn is_recordable(&self) -> bool {
        !self.has_origin() && !self.is_partial()
    }

    /// `withOrigin`: prepends one hop, outermost first.
    pub fn with_origin(mut self, hop: impl Into<String>) -> OmniMessage {
        let mut chain = vec![hop.into()];
        chain.extend(self.origin.take().unwrap_or_default());
        self.origin = Some(chain);
        self
    }

    /// The tool_call_id of tool-related model messages.
    pub fn tool_call_id(&self) -> Option<&str> {
        match &self.body {
            Body::Model(p) => p.tool_call_id(),
            Body::Event(EventPayload::ApprovalDecision { tool_call_id, .. }) => Some(tool_call_id),
            _ => None,
        }
    }

    /// Single-line JSON with the reference's key order.
    pub fn to_json(&self) -> String {
        // Most messages fit: one allocation instead of growing from serde_json's 128 bytes.
        let mut out = Vec::with_capacity(256);
        serde_json::to_writer(&mut out, self).expect("an OmniMessage always serializes");
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }
}

impl Serialize for OmniMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("timestamp", &self.timestamp)?;
        map.serialize_entry("type", self.kind())?;
        match &self.body {
            Body::SessionMeta(m) => map.serialize_entry("payload", m)?,
            Body::Model(p) => map.serialize_entry("payload", p)?,
            Body::Event(p) => map.serialize_entry("payload", p)?,
        }
        if let Some(origin) = &self.origin {
            map.serialize_entry("origin", origin)?;
        }
        map.end()
    }
}
