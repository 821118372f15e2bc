//! What a wire protocol adapter implements, and the provider-neutral pieces every adapter
//! shares: the model configuration, input validation (protocol
//! [§6.1](penguin_omni_protocol::spec#s6.1) *Input*) and error classification
//! ([§6.5](penguin_omni_protocol::spec#s6.5) *A request, and how it fails*).
//!
//! An adapter is two pure parts: a [`WireProtocol`] (request bodies and the committed history)
//! and a [`StreamDecoder`] (response bytes in, [`UniEvent`]s out). The HTTP shell in
//! `http.rs` drives them; nothing here does I/O.

use std::fmt;
use std::time::Duration;

use penguin_omni_protocol::{OmniMessage, Role, StopReason, ToolDefinition};
use serde_json::Value;

use crate::translate::UniEvent;
use crate::ThinkingLevel;

/// Default idle timeout between upstream events: 120 s ([§6.5](penguin_omni_protocol::spec#s6.5) *A
/// request, and how it fails*).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

pub use crate::error::WireError;
pub use crate::limits::{
    max_event_bytes, DEFAULT_MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES_CEILING, RESPONSE_MESSAGES,
};

/// Everything needed to talk to one model. Built once per session (and again after compaction).
#[derive(Clone)]
pub struct ModelConfig {
    /// Base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`; the protocol's
    /// path (`/chat/completions`) is appended.
    pub base_url: String,
    /// The API key value (the caller resolves it from the configured environment variable).
    pub api_key: Option<String>,
    /// The upstream model id.
    pub model_id: String,
    /// The fully assembled system prompt; omitted from the request when empty.
    pub system_prompt: String,
    /// Tools offered to the model; omitted from the request when empty (vLLM rejects `[]`).
    pub tools: Vec<ToolDefinition>,
    /// Maximum output tokens; 0 leaves it to the provider. Clamped per request to what the context
    /// window leaves after the input ([§6.6](penguin_omni_protocol::spec#s6.6) *Request
    /// configuration*) when `context_window` is known.
    pub max_output_tokens: u64,
    /// The model's context window, when known.
    pub context_window: Option<u64>,
    /// Thinking level used when a request does not ask for one.
    pub thinking_level: Option<ThinkingLevel>,
    /// Extra HTTP headers sent with every request.
    pub extra_headers: Vec<(String, String)>,
    /// Idle timeout between upstream events; `None` disables it.
    pub idle_timeout: Option<Duration>,
    /// The most content one streamed message may hold, in bytes: the UTF-8 text of a text or
    /// thinking message, or a tool call's JSON arguments. The response is refused (a permanent
    /// `failed`, see [`WireError::TooLarge`]) the moment a message would cross it, so neither
    /// memory nor the Trace ever holds more. [`DEFAULT_MAX_MESSAGE_BYTES`] unless configured.
    pub max_message_bytes: usize,
    /// Whether the request asks the provider to cache its prompt (`prompt_cache` in
    /// `config.toml`; on by default). Anthropic gets `cache_control` breakpoints, OpenAI's
    /// Responses and Chat Completions get [`cache_key`](ModelConfig::cache_key) as
    /// `prompt_cache_key`; Gemini and Ollama cache on their own and are sent nothing either way.
    /// Off, no request carries a caching field.
    pub prompt_cache: bool,
    /// The key the provider's automatic cache routes this conversation by (OpenAI's
    /// `prompt_cache_key`): the session id, so every request of a session, resumed or
    /// compacted, lands where its prefix is cached. `None` sends none.
    pub cache_key: Option<String>,
}

impl ModelConfig {
    /// A configuration with no key, prompt, tools or limits, the default idle timeout, and
    /// prompt caching on (with no cache key).
    pub fn new(base_url: impl Into<String>, model_id: impl Into<String>) -> ModelConfig {
        ModelConfig {
            base_url: base_url.into(),
            api_key: None,
            model_id: model_id.into(),
            system_prompt: String::new(),
            tools: Vec::new(),
            max_output_tokens: 0,
            context_window: None,
            thinking_level: None,
            extra_headers: Vec::new(),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            prompt_cache: true,
            cache_key: None,
        }
    }
}

impl ModelConfig {
    /// The `prompt_cache_key` to send: the cache key, when caching is on and there is one.
    pub fn prompt_cache_key(&self) -> Option<&str> {
        self.cache_key
            .as_deref()
            .filter(|k| self.prompt_cache && !k.is_empty())
    }
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key must never reach a log line.
        f.debug_struct("ModelConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model_id", &self.model_id)
            .field("system_prompt_chars", &self.system_prompt.len())
            .field("tools", &self.tools.len())
            .field("max_output_tokens", &self.max_output_tokens)
            .field("thinking_level", &self.thinking_level)
            .field("extra_headers", &self.extra_headers.len())
            .field("idle_timeout", &self.idle_timeout)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("prompt_cache", &self.prompt_cache)
            .field("cache_key", &self.cache_key)
            .finish()
    }
}

/// An HTTP request an adapter wants sent: always a `POST` of a JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct WireRequest {
    /// Path appended to the base URL, e.g. `/chat/completions`.
    pub path: String,
    /// Protocol headers (authentication, versions); the shell adds `content-type`,
    /// `accept` and the configured extra headers.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Value,
}

/// Turns one response body into [`UniEvent`]s. One decoder per request.
pub trait StreamDecoder: Send + fmt::Debug {
    /// Consumes a chunk of the body (any size, split anywhere), pushing the events it
    /// completed onto `out`. On error, the events before the bad one are already in `out`, so
    /// the output up to a fault does not depend on how the body was chunked.
    fn feed(&mut self, chunk: &[u8], out: &mut Vec<UniEvent>) -> Result<(), WireError>;

    /// The body ended cleanly: pushes the last events, or fails with
    /// [`WireError::Malformed`] when the protocol's terminal event never came (a cut-off
    /// stream).
    fn finish(&mut self, out: &mut Vec<UniEvent>) -> Result<(), WireError>;

    /// Bounds what the decoder buffers for one event (an SSE line and its event's data) to
    /// `max` bytes: past it, [`feed`](StreamDecoder::feed) fails with
    /// [`WireError::TooLarge`] instead of buffering a line that never ends. The HTTP shell
    /// sets [`max_event_bytes`] of the model's cap. A decoder that buffers nothing across
    /// chunks may keep the default, which ignores it.
    fn limit_event_bytes(&mut self, max: usize) {
        let _ = max;
    }
}

/// A wire protocol: request building plus the conversation history the provider needs.
///
/// The provider side is stateless, so the adapter keeps the history and resends it. A turn
/// enters the history only through [`commit`](WireProtocol::commit), which the shell calls
/// once a stream completed, so a failed attempt never leaves a partial turn behind.
pub trait WireProtocol: Send + Sync + fmt::Debug {
    /// The decoder for this protocol's response stream.
    type Decoder: StreamDecoder + Default;

    /// Builds the request for `new_messages` (already validated: non-empty, one role) on top
    /// of the committed history.
    fn build_request(
        &self,
        config: &ModelConfig,
        new_messages: &[OmniMessage],
        thinking_level: Option<ThinkingLevel>,
    ) -> WireRequest;

    /// A fresh decoder for one response. Decoders hold only per-response state, so the default
    /// one fits unless a protocol's decoding depends on its request.
    fn decoder(&self) -> Self::Decoder {
        Self::Decoder::default()
    }

    /// Appends a completed turn: the request's input, then the complete messages the model
    /// produced (fidelity included, replayed verbatim next time).
    fn commit(&mut self, new_messages: &[OmniMessage], reply: &[OmniMessage]);

    /// Replaces the history (resume). Messages are complete model messages in trace order.
    fn set_history(&mut self, history: &[OmniMessage]);
}

/// Why a request's input is not one a model accepts ([§6.1](penguin_omni_protocol::spec#s6.1)
/// *Input*). The texts are the reference implementation's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// No input message at all.
    #[error("streamGenerate requires at least one input message")]
    Empty,
    /// An input message that is not a complete model message (a partial, an event, a
    /// session_meta).
    #[error("streamGenerate accepts only complete model messages, got {payload_type}")]
    NotCompleteModelMessage {
        /// Its position in the input.
        index: usize,
        /// Its `payload.type`.
        payload_type: &'static str,
    },
    /// Messages of both roles.
    #[error("streamGenerate does not accept mixed roles: {first} and {other}")]
    MixedRoles {
        /// The role of the first message.
        first: Role,
        /// The first other role.
        other: Role,
        /// The position of the message with the other role.
        index: usize,
    },
}

/// The input check of [§6.1](penguin_omni_protocol::spec#s6.1) *Input* (): at least one message,
/// all complete model messages of one role.
pub fn check_input(new_messages: &[OmniMessage]) -> Result<Role, InputError> {
    let mut roles = new_messages
        .iter()
        .enumerate()
        .map(|(index, m)| match m.model() {
            Some(p) if !p.is_partial() => Ok((index, p.role())),
            _ => Err(InputError::NotCompleteModelMessage {
                index,
                payload_type: m.payload_type(),
            }),
        });
    let (_, first) = roles.next().ok_or(InputError::Empty)??;
    for role in roles {
        let (index, other) = role?;
        if other != first {
            return Err(InputError::MixedRoles {
                first,
                other,
                index,
            });
        }
    }
    Ok(first)
}

/// The classification of a provider error, as [§6.5](penguin_omni_protocol::spec#s6.5) *A request,
/// and how it fails* gives it: 401 or an auth code → `auth`; 408, 429, 5xx, or a transient
/// code/text → `timeout`; anything else → `failed`. `codes` are the error's `code`/`type` strings,
/// when known.
pub fn classify_error(http_status: Option<u16>, codes: &[&str], message: &str) -> StopReason {
    const AUTH_CODES: [&str; 3] = ["invalid_api_key", "authentication_error", "unauthorized"];
    // Error types providers put in HTTP-200 error events for overload and rate limits, which
    // the HTTP-status path would have classified as 429/5xx.
    const TRANSIENT_CODES: [&str; 6] = [
        "rate_limit_error",
        "rate_limit_exceeded",
        "overloaded_error",
        "server_error",
        "api_error",
        "timeout",
    ];
    if http_status == Some(401) || codes.iter().any(|c| AUTH_CODES.contains(c)) {
        return StopReason::Auth;
    }
    match http_status {
        Some(408 | 429 | 500..=599) => return StopReason::Timeout,
        Some(400..=499) => return StopReason::Failed,
        _ => {}
    }
    if codes.iter().any(|c| TRANSIENT_CODES.contains(c)) || is_transient_text(message) {
        StopReason::Timeout
    } else {
        StopReason::Failed
    }
}

/// The reference's text test for transport-shaped errors.
pub fn is_transient_text(message: &str) -> bool {
    const NEEDLES: [&str; 16] = [
        "timeout",
        "timed out",
        "network",
        "socket hang up",
        "econnreset",
        "connection reset",
        "other side closed",
        "fetch failed",
        "too many requests",
        "rate limit",
        "temporarily unavailable",
        "503",
        "502",
        "504",
        "overloaded",
        "connection refused",
    ];
    let lower = message.to_lowercase();
    NEEDLES.iter().any(|n| lower.contains(n))
        || (lower.contains("terminated")
            && ["socket", "connection", "closed"]
                .iter()
                .any(|n| lower.contains(n)))
}

/// The error text and codes of a provider error object, as found in HTTP error bodies and
/// in-stream error events: `{"error": {"message", "type", "code"}}`, `{"error": "text"}`,
/// `{"message": ...}` or `{"detail": ...}`.
pub fn provider_error(value: &Value) -> Option<(String, Vec<String>)> {
    let inner = value.get("error").unwrap_or(value);
    let message = match inner {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o
            .get("message")
            .or_else(|| o.get("detail"))
            .and_then(|m| m.as_str().map(str::to_owned)),
        _ => None,
    }?;
    let mut codes = Vec::new();
    for source in [Some(inner), value.get("error").and_then(|e| e.get("error"))]
        .into_iter()
        .flatten()
    {
        for key in ["type", "code", "status"] {
            if let Some(Value::String(s)) = source.get(key) {
                codes.push(s.clone());
            }
        }
    }
    Some((message, codes))
}

/// The message for a non-2xx response: `"<status> <provider text>"`, where the text comes
/// from the JSON error body when there is one, else the raw body, else the status phrase.
pub fn http_error_message(status: u16, reason: Option<&str>, body: &str) -> (String, Vec<String>) {
    let parsed = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| provider_error(&v));
    let (text, codes) = match parsed {
        Some(p) => p,
        None => {
            let trimmed = body.trim();
            let text = if trimmed.is_empty() {
                reason.unwrap_or("error").to_owned()
            } else {
                // A proxy's HTML error page can be huge; the start says what happened.
                trimmed.chars().take(500).collect()
            };
            (text, Vec::new())
        }
    };
    (format!("{status} {text}"), codes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::build;
    use serde_json::json;

    #[test]
    fn input_must_be_nonempty_complete_and_single_role() {
        assert_eq!(check_input(&[]), Err(InputError::Empty));
        assert_eq!(
            InputError::Empty.to_string(),
            "streamGenerate requires at least one input message"
        );
        assert_eq!(check_input(&[build::user_text("a")]), Ok(Role::User));
        let mixed = check_input(&[
            build::user_text("a"),
            build::user_text("b"),
            build::assistant_text("c", StopReason::Completed),
        ])
        .unwrap_err();
        assert_eq!(
            mixed,
            InputError::MixedRoles {
                first: Role::User,
                other: Role::Assistant,
                index: 2
            }
        );
        assert_eq!(
            mixed.to_string(),
            "streamGenerate does not accept mixed roles: user and assistant"
        );
        let event = check_input(&[build::user_text("a"), build::request_begin()]).unwrap_err();
        assert_eq!(
            event,
            InputError::NotCompleteModelMessage {
                index: 1,
                payload_type: "request_begin"
            }
        );
        assert_eq!(
            event.to_string(),
            "streamGenerate accepts only complete model messages, got request_begin"
        );
    }

    #[test]
    fn http_statuses_classify_like_the_reference() {
        assert_eq!(classify_error(Some(401), &[], "x"), StopReason::Auth);
        assert_eq!(
            classify_error(Some(403), &[], "forbidden"),
            StopReason::Failed
        );
        assert_eq!(classify_error(Some(404), &[], "nope"), StopReason::Failed);
        assert_eq!(classify_error(Some(408), &[], ""), StopReason::Timeout);
        assert_eq!(classify_error(Some(429), &[], ""), StopReason::Timeout);
        assert_eq!(classify_error(Some(500), &[], ""), StopReason::Timeout);
        assert_eq!(classify_error(Some(503), &[], ""), StopReason::Timeout);
        // A 400 whose text mentions a rate limit is still a plain 4xx.
        assert_eq!(
            classify_error(Some(400), &[], "rate limit"),
            StopReason::Failed
        );
        assert_eq!(
            classify_error(Some(400), &["invalid_api_key"], ""),
            StopReason::Auth
        );
    }

    #[test]
    fn in_stream_errors_classify_by_code_then_text() {
        assert_eq!(
            classify_error(None, &["authentication_error"], ""),
            StopReason::Auth
        );
        assert_eq!(
            classify_error(None, &["overloaded_error"], "Overloaded"),
            StopReason::Timeout
        );
        assert_eq!(
            classify_error(None, &[], "terminated: other side closed"),
            StopReason::Timeout
        );
        assert_eq!(
            classify_error(None, &["invalid_request_error"], "context too long"),
            StopReason::Failed
        );
    }

    #[test]
    fn error_bodies_give_the_provider_text() {
        let body = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}).to_string();
        let (msg, codes) = http_error_message(401, Some("Unauthorized"), &body);
        assert_eq!(msg, "401 Incorrect API key provided");
        assert_eq!(codes, ["invalid_request_error", "invalid_api_key"]);
        assert_eq!(
            http_error_message(502, Some("Bad Gateway"), "").0,
            "502 Bad Gateway"
        );
        assert_eq!(
            http_error_message(500, None, "upstream exploded").0,
            "500 upstream exploded"
        );
        assert_eq!(
            http_error_message(400, None, r#"{"error":"bad model"}"#).0,
            "400 bad model"
        );
        assert_eq!(
            http_error_message(422, None, r#"{"detail":"missing field"}"#).0,
            "422 missing field"
        );
    }
}
