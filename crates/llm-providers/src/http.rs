//! The HTTP shell: drives a [`WireProtocol`] over reqwest and implements [`Llm`] (protocol
//! [§6.5](penguin_omni_protocol::spec#s6.5) *A request, and how it fails*).
//!
//! Everything protocol-specific is in the protocol and its decoder; this file only moves
//! bytes, watches the clock and the user's interrupt, and classifies failures:
//!
//! | what happened | outcome |
//! |---|---|
//! | `request.cancel` fired (before or during the request) | `aborted` |
//! | no upstream bytes for the idle timeout | `timeout`, no message |
//! | HTTP 401 (or an auth error code) | `auth` |
//! | HTTP 408, 429, 5xx; connection refused/reset/dropped | `timeout` (a 429 or 503's `Retry-After` appended to the message: [`with_retry_after`](crate::failure::with_retry_after)) |
//! | other 4xx (403 included) | `failed` |
//! | the prompt does not fit the context window (HTTP error or in-stream error event: llama.cpp's `exceeds the available context size`, OpenAI's `context_length_exceeded`, Anthropic's `prompt is too long`) | `failed`, permanent |
//! | bad JSON, bad UTF-8, a stream cut off before its terminal event | `malformed` |
//! | an error event inside an HTTP 200 stream | classified from its code and text |
//! | a message past `max_message_bytes`, the response past 4 × that, or one SSE event past `4 × max_message_bytes + 1 MiB` | `failed`, permanent |
//!
//! Nothing is buffered without a bound: the translator refuses the fragment that would take a
//! message past its cap and the shell stops reading there (the connection is dropped), the
//! SSE decoder refuses a line or event past [`max_event_bytes`], and only the first
//! [`ERROR_BODY_BYTES`] of an error response are read.
//!
//! Every non-completed outcome closes the open segments with its status first
//! ([`EventTranslator::finish_interrupted`]). There are no retries: the engine owns the retry
//! ladder.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_omni_protocol::{build, OmniMessage, StopReason, TokenCounts};

use crate::translate::{EventTranslator, ToolCallIdAllocator, UniEvent};
use crate::wire::{
    check_input, classify_error, http_error_message, max_event_bytes, ModelConfig, StreamDecoder,
    WireProtocol,
};
use crate::{CancellationToken, Llm, LlmOutcome, LlmRequest, MessageSink};

/// How much of an error response's body is read: enough for any provider's JSON error, while
/// a proxy's endless error page is cut (its first 500 characters are what is reported).
pub const ERROR_BODY_BYTES: usize = 64 * 1024;

/// The HTTP client could not be built (normally a TLS backend problem).
#[derive(Debug, thiserror::Error)]
#[error("could not build the HTTP client: {0}")]
pub struct ClientError(String);

/// A model reached over HTTP with streaming responses.
pub struct HttpModel<P: WireProtocol> {
    config: ModelConfig,
    protocol: P,
    client: reqwest::Client,
    ids: ToolCallIdAllocator,
    session: TokenCounts,
    /// Input-size estimate for the output clamp: the fixed part (prompt, tools) plus what the
    /// last request cost, or the resumed history before any request.
    base_input: u64,
    last_request_total: u64,
    /// Clamped values already warned about (once each, as the reference does).
    warned: std::collections::HashSet<u64>,
}

impl<P: WireProtocol> fmt::Debug for HttpModel<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpModel")
            .field("config", &self.config)
            .field("protocol", &self.protocol)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// The reqwest client builder every HTTP client penguin builds on this crate starts from. It
/// also installs ring as rustls's process-wide provider unless one is there: the rmcp MCP
/// client's reqwest takes its TLS from that provider, so whatever client comes first, the
/// other finds TLS ready.
pub fn client_builder() -> reqwest::ClientBuilder {
    #[cfg(feature = "rustls")]
    install_tls_provider();
    reqwest::Client::builder()
}

/// Installs ring as rustls's process-wide crypto provider unless one is installed: every
/// reqwest client in the process (this crate's, the MCP client's) takes its TLS from it.
///
/// rustls 0.23.48 deprecates its ring provider for lacking post-quantum key exchange, which
/// only its aws-lc-rs provider has; aws-lc-rs builds a C library, ring builds with no C
/// toolchain beyond `cc` and is what every TLS endpoint penguin talks to accepts. The choice is
/// deliberate, so the deprecation is allowed here, in its one place.
#[cfg(feature = "rustls")]
pub fn install_tls_provider() {
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    let _ = provider.install_default();
}

impl<P: WireProtocol> HttpModel<P> {
    /// A model speaking `protocol` with `config`, allocating tool call ids from the session's
    /// shared allocator.
    pub fn new(
        config: ModelConfig,
        protocol: P,
        ids: ToolCallIdAllocator,
    ) -> Result<HttpModel<P>, ClientError> {
        // No overall request timeout: a long generation is fine as long as bytes keep coming,
        // which the idle timeout watches.
        let client = client_builder()
            .build()
            .map_err(|e| ClientError(describe_error(&e)))?;
        let base_input = crate::limits::base_input_tokens(&config.system_prompt, &config.tools);
        Ok(HttpModel {
            config,
            protocol,
            client,
            ids,
            session: TokenCounts::default(),
            base_input,
            last_request_total: 0,
            warned: Default::default(),
        })
    }

    /// Seeds the session's cumulative token counts (after compaction or on resume).
    pub fn with_session_tokens(mut self, session: TokenCounts) -> HttpModel<P> {
        self.session = session;
        self
    }

    /// Replaces the conversation history (resume): registers every tool call id with the
    /// allocator so new ids never collide with old ones, then hands the history to the
    /// protocol. The same as [`Llm::set_history`], callable without the trait in scope.
    pub fn set_history(&mut self, history: &[OmniMessage]) {
        for msg in history {
            if let Some(id) = msg.model().and_then(|p| p.tool_call_id()) {
                self.ids.register(id);
            }
        }
        self.protocol.set_history(history);
        // Replaced, not added to: the fixed part plus this history.
        self.base_input =
            crate::limits::base_input_tokens(&self.config.system_prompt, &self.config.tools)
                + crate::limits::approx_tokens(history);
    }

    /// The output cap for a request adding `new_messages`:
    /// [`effective_max_output_tokens`](crate::limits::effective_max_output_tokens) of the
    /// configured cap, the window, and the input estimate (the last request's total, or the
    /// fixed part and history before the first, plus the new messages).
    pub fn max_output_tokens_for(&self, new_messages: &[OmniMessage]) -> u64 {
        let before = if self.last_request_total > 0 {
            self.last_request_total
        } else {
            self.base_input
        };
        let estimate = before + crate::limits::approx_tokens(new_messages);
        crate::limits::effective_max_output_tokens(
            self.config.max_output_tokens,
            self.config.context_window,
            estimate,
        )
    }

    /// The protocol, for inspecting its history.
    pub fn protocol(&self) -> &P {
        &self.protocol
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Sends the request and feeds the response through the translator. Returns `None` when
    /// the stream completed, or the outcome that interrupted it.
    async fn exchange(
        &self,
        request: &LlmRequest,
        translator: &mut EventTranslator,
        out: &mut Emitter<'_>,
    ) -> Option<LlmOutcome> {
        let thinking = request.thinking_level.or(self.config.thinking_level);
        let cap = self.max_output_tokens_for(&request.new_messages);
        let clamped;
        let config = if cap == self.config.max_output_tokens {
            &self.config
        } else {
            clamped = ModelConfig {
                max_output_tokens: cap,
                ..self.config.clone()
            };
            &clamped
        };
        let wire = self
            .protocol
            .build_request(config, &request.new_messages, thinking);
        let url = format!(
            "{}{}",
            self.config.base_url.trim_end_matches('/'),
            wire.path
        );
        let body = match serde_json::to_vec(&wire.body) {
            Ok(b) => b,
            Err(e) => {
                return Some(LlmOutcome::with_message(
                    StopReason::Failed,
                    format!("could not serialize the request body: {e}"),
                ))
            }
        };
        let mut builder = self
            .client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        for (name, value) in wire.headers.iter().chain(&self.config.extra_headers) {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let cancel = &request.cancel;
        let idle = self.config.idle_timeout.filter(|d| !d.is_zero());

        let builder = builder.body(body);
        let resend = builder.try_clone();
        let mut sent = wait(cancel, idle, builder.send()).await;
        if let (Waited::Ready(Err(e)), Some(resend)) = (&sent, resend) {
            if is_stale_connection(e) {
                sent = wait(cancel, idle, resend.send()).await;
            }
        }
        let response = match sent {
            Waited::Ready(Ok(r)) => r,
            Waited::Ready(Err(e)) => return Some(transport_outcome(&e)),
            Waited::Cancelled => return Some(LlmOutcome::new(StopReason::Aborted)),
            Waited::IdleTimeout => return Some(LlmOutcome::new(StopReason::Timeout)),
        };
        let status = response.status();
        if !status.is_success() {
            // A rate limit or an overload may say how long to wait; the engine's ladder
            // waits that long (within its ceiling) and reads it from the message.
            let asked = matches!(status.as_u16(), 429 | 503)
                .then(|| response.headers().get(reqwest::header::RETRY_AFTER))
                .flatten()
                .and_then(|v| v.to_str().ok())
                .and_then(|v| crate::failure::parse_retry_after(v, std::time::SystemTime::now()));
            let text = match wait(cancel, idle, error_body(response)).await {
                Waited::Ready(t) => t,
                Waited::Cancelled => return Some(LlmOutcome::new(StopReason::Aborted)),
                // The status already says what went wrong; a slow error body adds nothing.
                Waited::IdleTimeout => String::new(),
            };
            let (message, codes) =
                http_error_message(status.as_u16(), status.canonical_reason(), &text);
            let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
            if crate::failure::is_context_overflow_error(&message, &codes) {
                // The same prompt would be refused again: no retry ladder.
                return Some(LlmOutcome::permanent_failure(message));
            }
            let stop = classify_error(Some(status.as_u16()), &codes, &message);
            let message = match asked {
                Some(wait) => crate::failure::with_retry_after(message, wait),
                None => message,
            };
            return Some(LlmOutcome::with_message(stop, message));
        }

        let mut decoder = self.protocol.decoder();
        decoder.limit_event_bytes(max_event_bytes(self.config.max_message_bytes));
        let mut stream = response.bytes_stream();
        let mut events = Vec::new();
        loop {
            // Checked before every pull so an interrupt is never stuck behind a live stream.
            if cancel.is_cancelled() {
                return Some(LlmOutcome::new(StopReason::Aborted));
            }
            let result = match wait(cancel, idle, stream.next()).await {
                Waited::Cancelled => return Some(LlmOutcome::new(StopReason::Aborted)),
                Waited::IdleTimeout => return Some(LlmOutcome::new(StopReason::Timeout)),
                Waited::Ready(None) => {
                    // The stream ended. With its finish seen the turn is committed upstream and
                    // completes even if the interrupt fired during this last wait (§6.5 step 5);
                    // without it, an interrupt explains the early end.
                    let r = decoder.finish(&mut events);
                    out.translate(translator, &mut events).await;
                    if let Some(e) = translator.too_large() {
                        return Some(e.clone().into_outcome());
                    }
                    return match r {
                        Ok(()) => None,
                        Err(_) if cancel.is_cancelled() => {
                            Some(LlmOutcome::new(StopReason::Aborted))
                        }
                        Err(e) => Some(e.into_outcome()),
                    };
                }
                Waited::Ready(Some(Err(e))) => Err(e),
                Waited::Ready(Some(Ok(bytes))) => Ok(bytes),
            };
            let result = match result {
                Ok(bytes) => decoder.feed(&bytes, &mut events),
                Err(e) => return Some(transport_outcome(&e)),
            };
            if cancel.is_cancelled() {
                return Some(LlmOutcome::new(StopReason::Aborted));
            }
            out.translate(translator, &mut events).await;
            // A message that outgrew its cap came before any decoding error in the chunk;
            // either way nothing more is read: dropping the body closes the connection.
            if let Some(e) = translator.too_large() {
                return Some(e.clone().into_outcome());
            }
            if let Err(e) = result {
                return Some(e.into_outcome());
            }
        }
    }
}

#[async_trait]
impl<P: WireProtocol> Llm for HttpModel<P> {
    async fn stream_generate(
        &mut self,
        request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        if request.cancel.is_cancelled() {
            return LlmOutcome::new(StopReason::Aborted);
        }
        if let Err(e) = check_input(&request.new_messages) {
            return LlmOutcome::with_message(StopReason::Failed, e.to_string());
        }
        let cap = self.max_output_tokens_for(&request.new_messages);
        if cap < self.config.max_output_tokens / 2 && self.warned.insert(cap) {
            tracing::warn!(
                "[penguin] max output tokens clamped to {cap} (configured {}): the context window is nearly full",
                self.config.max_output_tokens
            );
        }
        let mut translator = EventTranslator::new(self.ids.clone())
            .with_max_message_bytes(self.config.max_message_bytes);
        let mut out = Emitter {
            sink,
            reply: Vec::new(),
        };
        let interrupted = self.exchange(&request, &mut translator, &mut out).await;
        if let Some(outcome) = interrupted {
            out.emit_all(translator.finish_interrupted(outcome.status))
                .await;
            return outcome;
        }
        out.emit_all(translator.finish()).await;
        let request_tokens = translator.request_tokens();
        self.session = self.session + request_tokens;
        self.last_request_total = request_tokens.total;
        self.protocol.commit(&request.new_messages, &out.reply);
        out.sink
            .emit(build::token_usage(self.session, request_tokens))
            .await;
        LlmOutcome::completed()
    }

    fn session_tokens(&self) -> TokenCounts {
        self.session
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        HttpModel::set_history(self, history);
    }
}

/// Forwards messages to the sink and keeps the complete ones: they are the turn committed to
/// history if the stream completes.
struct Emitter<'a> {
    sink: &'a mut dyn MessageSink,
    reply: Vec<OmniMessage>,
}

impl Emitter<'_> {
    async fn emit_all(&mut self, msgs: Vec<OmniMessage>) {
        for msg in msgs {
            if msg.is_complete_model() {
                self.reply.push(msg.clone());
            }
            self.sink.emit(msg).await;
        }
    }

    async fn translate(&mut self, translator: &mut EventTranslator, events: &mut Vec<UniEvent>) {
        for event in events.drain(..) {
            let msgs = translator.translate(event);
            self.emit_all(msgs).await;
        }
    }
}

/// The first [`ERROR_BODY_BYTES`] of an error response's body, lossily decoded; a body that
/// breaks off gives what came before.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = ERROR_BODY_BYTES - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() == ERROR_BODY_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

enum Waited<T> {
    Ready(T),
    Cancelled,
    IdleTimeout,
}

/// Awaits `fut` unless the user interrupts or `idle` passes first. The timer covers only this
/// wait, so time spent by the consumer between waits never counts.
async fn wait<F: Future>(
    cancel: &CancellationToken,
    idle: Option<Duration>,
    fut: F,
) -> Waited<F::Output> {
    let timed = async {
        match idle {
            Some(d) => tokio::time::timeout(d, fut).await.ok(),
            None => Some(fut.await),
        }
    };
    // The stream goes first: when its end and the interrupt are ready together, the end
    // decides (a finished turn stays completed); the caller checks the interrupt before every
    // pull, so a live stream never hides one.
    tokio::select! {
        biased;
        r = timed => match r {
            Some(v) => Waited::Ready(v),
            None => Waited::IdleTimeout,
        },
        _ = cancel.cancelled() => Waited::Cancelled,
    }
}

/// The request went out on a pooled keep-alive connection that the server had already
/// closed, so the server never saw it and no response byte came back.
///
/// llama.cpp's server does this after every streamed response while still advertising
/// `Keep-Alive`; curl resends transparently, hyper does not resend a `POST`. Resending once on
/// a fresh connection is safe for exactly this error (nothing was processed) and keeps a
/// routine connection reuse from surfacing as a `timeout` the engine would retry visibly.
/// hyper reports it only through its error text (`IncompleteMessage`), hence the match on it.
fn is_stale_connection(e: &reqwest::Error) -> bool {
    e.is_request()
        && e.status().is_none()
        && describe_error(e).contains("connection closed before message completed")
}

/// A reqwest failure: a bad URL or request is `failed`; anything on the wire (refused,
/// reset, dropped mid-body) is transport-shaped, so `timeout`.
fn transport_outcome(e: &reqwest::Error) -> LlmOutcome {
    let message = describe_error(e);
    let status = if e.is_builder() {
        StopReason::Failed
    } else {
        StopReason::Timeout
    };
    LlmOutcome::with_message(status, message)
}

/// Joins the messages along the `source` chain with `": "`, dropping repeats, so a bare
/// "error sending request" says why (`…: tcp connect error: Connection refused`).
pub fn describe_error(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(e);
    while let Some(err) = current {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = err.source();
    }
    parts.join(": ")
}

#[cfg(all(test, feature = "openai-chat"))]
mod clamp_tests {
    use super::*;
    use penguin_omni_protocol::build;

    #[test]
    fn the_output_cap_leaves_room_for_the_input() {
        let mut config = ModelConfig::new("http://127.0.0.1:1", "m");
        config.max_output_tokens = 4000;
        config.context_window = Some(8192);
        config.system_prompt = "x".repeat(4 * 2000);
        let model = HttpModel::new(
            config.clone(),
            crate::openai_chat::OpenAiChat::new(),
            ToolCallIdAllocator::new(),
        )
        .unwrap();
        // 8192 - (2000 prompt + 1000 new) - 1024 = 4168 ≥ 4000: unchanged.
        assert_eq!(
            model.max_output_tokens_for(&[build::user_text("y".repeat(4000))]),
            4000
        );
        // 8192 - (2000 + 3000) - 1024 = 2168.
        assert_eq!(
            model.max_output_tokens_for(&[build::user_text("y".repeat(12_000))]),
            2168
        );
        // Never below 512.
        assert_eq!(
            model.max_output_tokens_for(&[build::user_text("y".repeat(40_000))]),
            512
        );
        config.context_window = None;
        let unknown = HttpModel::new(
            config,
            crate::openai_chat::OpenAiChat::new(),
            ToolCallIdAllocator::new(),
        )
        .unwrap();
        assert_eq!(
            unknown.max_output_tokens_for(&[build::user_text("y".repeat(40_000))]),
            4000
        );
    }
}

#[cfg(all(test, feature = "openai-chat"))]
mod tests {
    use super::*;
    use crate::openai_chat::OpenAiChat;

    #[test]
    fn set_history_through_the_llm_trait_replaces_and_reserves_ids() {
        let ids = ToolCallIdAllocator::new();
        let config = ModelConfig::new("http://127.0.0.1:9/v1", "m");
        let model = HttpModel::new(config, OpenAiChat::new(), ids.clone()).unwrap();
        let fixed = model.base_input;
        let history = [
            build::user_text("earlier"),
            build::tool_call("read", "{}", "call_1", StopReason::Completed, None),
            build::tool_call_output("done", "call_1", StopReason::Completed),
        ];
        // As a session layer holds it: boxed, through the trait.
        let mut llm: Box<dyn Llm> = Box::new(model);
        llm.set_history(&history);
        llm.set_history(&history);
        // A new call with the old id gets another one.
        assert_ne!(ids.allocate("call_1"), "call_1");
        let expected = fixed + crate::limits::approx_tokens(&history);
        // Replaced, not added twice: the estimate counts the history once.
        let mut plain = HttpModel::new(
            ModelConfig::new("http://127.0.0.1:9/v1", "m"),
            OpenAiChat::new(),
            ToolCallIdAllocator::new(),
        )
        .unwrap();
        Llm::set_history(&mut plain, &history);
        Llm::set_history(&mut plain, &history);
        assert_eq!(plain.base_input, expected);
    }
}
