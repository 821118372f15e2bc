//! End to end against a real model server: llama.cpp (through the `xllamacpp` wheel) serving
//! SmolLM2-135M-Instruct, started by `scripts/model-server.py` and run by `cargo xtask ci`.
//!
//! Set `PENGUIN_MODEL_SERVER=http://127.0.0.1:PORT` (the script's output) to run these; without
//! it they are ignored (`#[ignore]`), so a plain `cargo test` needs no server; `cargo xtask e2e`
//! runs them with `--ignored`.
//! With `PENGUIN_RECORD_FIXTURES=1` as well, each protocol's raw reply to a fixed prompt is
//! written to `tests/fixtures/<protocol>/llamacpp_smollm2_text.sse`, the bodies that
//! `tests/llamacpp_fixtures.rs` replays without a server.
//!
//! What each protocol gets, through the real [`HttpModel`] and real HTTP:
//! - a two-turn conversation: each request completes, streams non-empty text, obeys the
//!   streaming discipline, ends with a `token_usage` whose counts are plausible (input > 0,
//!   0 < output ≤ the token limit, session = running sum), and the second request's prompt is
//!   larger than the first's because the committed first turn was resent;
//! - the whole conversation, wrapped the way the engine wraps requests (the user input, then
//!   `request_begin … request_end`), passes the protocol's [`StreamValidator`] with strict
//!   adjacency;
//! - an interrupt after the first text delta: `aborted`, every opened segment closed with
//!   `aborted`, no `token_usage`, nothing committed, and the next request still completes;
//! - the raw body of a fixed prompt, decoded without HTTP by [`replay`], gives the same kind of
//!   stream.

#![cfg(feature = "testkit")]

use std::time::Duration;

use async_trait::async_trait;
use penguin_llm_providers::testkit::{check_discipline, replay};
use penguin_llm_providers::wire::WireProtocol;
use penguin_llm_providers::{
    CancellationToken, HttpModel, Llm, LlmOutcome, LlmRequest, MessageSink, ModelConfig,
    ToolCallIdAllocator,
};
use penguin_omni_protocol::build::{self, RetryDetail};
use penguin_omni_protocol::validator::{StreamValidator, ValidatorConfig};
use penguin_omni_protocol::{
    EventPayload, ModelPayload, OmniMessage, StopReason, StreamEventType, TokenCounts,
};

/// Small enough to keep each request well under a second on two CPU cores.
const MAX_TOKENS: u64 = 24;
const MODEL: &str = "smollm2-135m";
const SYSTEM: &str = "You are a helpful assistant. Answer briefly.";
const FIRST: &str = "Name three colors of the rainbow.";
const SECOND: &str = "Now name one more.";
/// The prompt whose raw reply is recorded as a fixture.
const FIXTURE_PROMPT: &str = "What color is the sky?";
/// Longer than the idle timeout any healthy local request needs, short enough that a hung
/// server fails the test instead of the CI job's clock.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's base URL. These tests are `#[ignore]`d: `cargo xtask e2e` (and so `ci`)
/// starts the server and runs them with `--ignored`, where a missing server is a failure.
fn server() -> String {
    let url = std::env::var("PENGUIN_MODEL_SERVER").unwrap_or_default();
    let url = url.trim().trim_end_matches('/');
    assert!(
        !url.is_empty(),
        "PENGUIN_MODEL_SERVER is not set: cargo xtask e2e starts the server and sets it"
    );
    url.to_owned()
}

fn config(base_url: String) -> ModelConfig {
    let mut config = ModelConfig::new(base_url, MODEL);
    config.system_prompt = SYSTEM.into();
    config.max_output_tokens = MAX_TOKENS;
    config.idle_timeout = Some(IDLE_TIMEOUT);
    config
}

fn request(text: &str, cancel: CancellationToken) -> LlmRequest {
    LlmRequest {
        new_messages: vec![build::user_text(text)],
        cancel,
        thinking_level: None,
    }
}

/// Cancels the request's token once it has seen the first text delta, the way a user's
/// interrupt lands in the middle of a reply.
struct InterruptAfterFirstDelta {
    cancel: CancellationToken,
    seen: Vec<OmniMessage>,
}

#[async_trait]
impl MessageSink for InterruptAfterFirstDelta {
    async fn emit(&mut self, msg: OmniMessage) {
        if let Some(ModelPayload::PartialText(p)) = msg.model() {
            if p.event_type == StreamEventType::Delta {
                self.cancel.cancel();
            }
        }
        self.seen.push(msg);
    }
}

fn texts(msgs: &[OmniMessage]) -> String {
    msgs.iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::Text(t)) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

fn token_usage(msgs: &[OmniMessage]) -> Option<(TokenCounts, TokenCounts)> {
    match msgs.last()?.event()? {
        EventPayload::TokenUsage { session, request } => Some((*session, *request)),
        _ => None,
    }
}

/// One completed request: checks everything a single request must satisfy and returns its
/// request and session counts.
fn check_completed(label: &str, msgs: &[OmniMessage], outcome: &LlmOutcome) -> TokenCounts {
    assert_eq!(
        outcome,
        &LlmOutcome::completed(),
        "{label}: outcome; stream: {msgs:#?}"
    );
    check_discipline(msgs).unwrap_or_else(|e| panic!("{label}: {e}; stream: {msgs:#?}"));
    let text = texts(msgs);
    assert!(
        !text.trim().is_empty(),
        "{label}: no text produced: {msgs:#?}"
    );
    let (session, req) =
        token_usage(msgs).unwrap_or_else(|| panic!("{label}: token_usage is not last: {msgs:#?}"));
    assert!(
        req.cache_read + req.uncached_prompt > 0,
        "{label}: no input tokens counted: {req:?}"
    );
    assert!(
        req.output > 0 && req.output <= MAX_TOKENS,
        "{label}: output tokens {} not in 1..={MAX_TOKENS}",
        req.output
    );
    assert_eq!(
        req.total,
        req.cache_read + req.uncached_prompt + req.output,
        "{label}: total is not the sum"
    );
    assert!(session.total >= req.total, "{label}: session < request");
    eprintln!(
        "{label}: {:?} ({} in, {} out)",
        text,
        req.cache_read + req.uncached_prompt,
        req.output
    );
    req
}

/// The engine's framing of one request, so the stream validator sees what a client would.
fn framed(input: &str, msgs: &[OmniMessage], outcome: &LlmOutcome) -> Vec<OmniMessage> {
    let mut v = vec![build::user_text(input), build::request_begin()];
    v.extend(msgs.iter().cloned());
    v.push(build::request_end(
        outcome.status,
        RetryDetail {
            error_message: outcome.error_message.clone(),
            ..RetryDetail::default()
        },
    ));
    v
}

fn assert_valid(label: &str, transcript: &[OmniMessage]) {
    let mut validator = StreamValidator::with_config(ValidatorConfig {
        strict_adjacency: true,
    });
    let mut violations = Vec::new();
    for msg in transcript {
        violations.extend(validator.push(msg));
    }
    violations.extend(validator.finish());
    assert!(
        violations.is_empty(),
        "{label}: stream violations:\n{}",
        violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The two-turn conversation, the interrupt and the raw-body replay for one protocol.
/// `history_len` reads how many wire messages the protocol has committed.
async fn exercise<P: WireProtocol + Clone + 'static>(
    label: &str,
    base_url: String,
    protocol: P,
    history_len: fn(&P) -> usize,
    fixture_dir: &str,
) {
    let mut model = HttpModel::new(
        config(base_url.clone()),
        protocol.clone(),
        ToolCallIdAllocator::new(),
    )
    .expect("client");
    let mut transcript = Vec::new();
    let mut session = TokenCounts::default();
    let mut inputs = Vec::new();
    for (turn, prompt) in [FIRST, SECOND].into_iter().enumerate() {
        let mut msgs: Vec<OmniMessage> = Vec::new();
        let outcome = model
            .stream_generate(request(prompt, CancellationToken::new()), &mut msgs)
            .await;
        let req = check_completed(&format!("{label} turn {}", turn + 1), &msgs, &outcome);
        session = session + req;
        assert_eq!(
            token_usage(&msgs).map(|(s, _)| s),
            Some(session),
            "{label}: the session count is the running sum"
        );
        inputs.push(req.cache_read + req.uncached_prompt);
        transcript.extend(framed(prompt, &msgs, &outcome));
    }
    assert_eq!(model.session_tokens(), session, "{label}: session tokens");
    assert!(
        inputs[1] > inputs[0],
        "{label}: the second prompt ({} tokens) should carry the first turn (first prompt {} tokens)",
        inputs[1],
        inputs[0]
    );
    let committed = history_len(model.protocol());
    assert!(
        committed >= 4,
        "{label}: two turns should commit at least four wire messages, got {committed}"
    );

    // An interrupt mid-reply: closed segments, no usage, no history.
    let cancel = CancellationToken::new();
    let mut sink = InterruptAfterFirstDelta {
        cancel: cancel.clone(),
        seen: Vec::new(),
    };
    let outcome = model
        .stream_generate(request("Tell me a long story.", cancel), &mut sink)
        .await;
    let interrupted = sink.seen;
    assert_eq!(
        outcome.status,
        StopReason::Aborted,
        "{label}: interrupt: {outcome:?} {interrupted:#?}"
    );
    check_discipline(&interrupted).unwrap_or_else(|e| panic!("{label} interrupt: {e}"));
    assert!(
        token_usage(&interrupted).is_none(),
        "{label}: token_usage after an interrupt"
    );
    for msg in &interrupted {
        let Some(p) = msg.model() else { continue };
        if p.partial_parts().map(|(e, _)| e) == Some(StreamEventType::Stop) || !p.is_partial() {
            assert_eq!(
                p.stop_reason(),
                Some(StopReason::Aborted),
                "{label}: interrupted segment closed with the wrong reason: {msg:?}"
            );
        }
    }
    assert!(
        !texts(&interrupted).is_empty(),
        "{label}: the interrupted text segment was not flushed: {interrupted:#?}"
    );
    assert_eq!(
        history_len(model.protocol()),
        committed,
        "{label}: an interrupted turn must not enter the history"
    );
    transcript.extend(framed("Tell me a long story.", &interrupted, &outcome));

    // The model still works after the interrupt, on top of the same history.
    let mut msgs: Vec<OmniMessage> = Vec::new();
    let outcome = model
        .stream_generate(request(FIXTURE_PROMPT, CancellationToken::new()), &mut msgs)
        .await;
    check_completed(&format!("{label} after interrupt"), &msgs, &outcome);
    transcript.extend(framed(FIXTURE_PROMPT, &msgs, &outcome));
    assert_valid(label, &transcript);

    raw_body(label, &base_url, protocol, fixture_dir).await;
}

/// Fetches the raw reply to [`FIXTURE_PROMPT`] (a fresh conversation, the exact body the
/// adapter builds), replays it through the pure decoder, and records it when asked.
async fn raw_body<P: WireProtocol>(label: &str, base_url: &str, protocol: P, fixture_dir: &str) {
    let config = config(base_url.to_owned());
    let wire = protocol.build_request(&config, &[build::user_text(FIXTURE_PROMPT)], None);
    let mut post = reqwest::Client::new()
        .post(format!("{base_url}{}", wire.path))
        .header("accept", "text/event-stream")
        .header("content-type", "application/json")
        .body(wire.body.to_string());
    for (name, value) in &wire.headers {
        post = post.header(name.as_str(), value.as_str());
    }
    let response = post.send().await.expect("raw request");
    assert!(
        response.status().is_success(),
        "{label}: raw request: {}",
        response.status()
    );
    let body = response.bytes().await.expect("raw body").to_vec();
    // One chunk per line, the shape the server flushed it in.
    let chunks: Vec<&[u8]> = body.split_inclusive(|b| *b == b'\n').collect();
    let (msgs, outcome) = replay(protocol.decoder(), &chunks, ToolCallIdAllocator::new());
    check_completed(&format!("{label} raw body"), &msgs, &outcome);
    if std::env::var_os("PENGUIN_RECORD_FIXTURES").is_some() {
        let path = format!(
            "{}/tests/fixtures/{fixture_dir}/llamacpp_smollm2_text.sse",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::write(&path, &body).unwrap_or_else(|e| panic!("write {path}: {e}"));
        eprintln!("{label}: recorded {path}");
    }
}

#[cfg(feature = "openai-chat")]
#[tokio::test]
#[ignore = "needs a real model server: cargo xtask e2e"]
async fn openai_chat_against_llamacpp() {
    let url = server();
    exercise(
        "openai-chat",
        format!("{url}/v1"),
        penguin_llm_providers::OpenAiChat::new(),
        |p| p.history().len(),
        "openai_chat",
    )
    .await;
}

#[cfg(feature = "anthropic-messages")]
#[tokio::test]
#[ignore = "needs a real model server: cargo xtask e2e"]
async fn anthropic_messages_against_llamacpp() {
    let url = server();
    exercise(
        "anthropic-messages",
        url,
        penguin_llm_providers::AnthropicMessages::new(),
        |p| p.history().len(),
        "anthropic_messages",
    )
    .await;
}

#[cfg(feature = "openai-responses")]
#[tokio::test]
#[ignore = "needs a real model server: cargo xtask e2e"]
async fn openai_responses_against_llamacpp() {
    let url = server();
    exercise(
        "openai-responses",
        format!("{url}/v1"),
        penguin_llm_providers::OpenAiResponses::new(),
        |p| p.history().len(),
        "openai_responses",
    )
    .await;
}
