//! Fault injection: an adapter inside the real [`HttpModel`], against a local [`Server`]
//! playing canned responses, through every fault of protocol
//! [§6.5](penguin_omni_protocol::spec#s6.5) *A request, and how it fails*. Each fault must
//! give the right
//! outcome, close every segment it opened, and leave nothing in the history.
//!
//! An adapter describes how its protocol says a few things ([`WireScript`]: open a text
//! block, add text to it, end the response with usage, start a line that never ends, an error
//! event); [`FaultSuite::run_all`] builds every scenario from those. Each check is also a
//! method of its own, for a test per fault.
//!
//! ```no_run
//! # #[cfg(feature = "openai-chat")] {
//! use penguin_llm_providers::testkit::faults::{FaultSuite, WireScript};
//! use penguin_llm_providers::OpenAiChat;
//! use serde_json::json;
//!
//! #[derive(Debug)]
//! struct Chat;
//!
//! impl WireScript for Chat {
//!     fn text_delta(&self, text: &str) -> Vec<u8> {
//!         let chunk = json!({"choices": [{"index": 0, "delta": {"content": text}}]});
//!         format!("data: {chunk}\n\n").into_bytes()
//!     }
//!     fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8> {
//!         let chunk = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
//!             "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens}});
//!         format!("data: {chunk}\n\ndata: [DONE]\n\n").into_bytes()
//!     }
//!     fn unterminated(&self) -> Vec<u8> {
//!         b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec()
//!     }
//!     fn error_event(&self, message: &str) -> Option<Vec<u8>> {
//!         Some(format!("data: {}\n\n", json!({"error": {"message": message}})).into_bytes())
//!     }
//! }
//!
//! # async fn run() {
//! FaultSuite::new(OpenAiChat::new, Chat).run_all().await;
//! # }
//! # }
//! ```

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use penguin_omni_protocol::{build, OmniMessage, StopReason, TokenCounts};
use serde_json::json;
use tokio::net::TcpListener;

use crate::http::HttpModel;
use crate::translate::ToolCallIdAllocator;
use crate::wire::{ModelConfig, WireProtocol, WireRequest};
use crate::{CancellationToken, Llm, LlmOutcome, LlmRequest, MessageSink};

use super::server::{Canned, Server, Step};
use super::{check_replay, describe, replay_checked, Replay};

mod limits;

/// The idle timeout of the checks that are not about it: far longer than any gap a busy
/// machine puts between two chunks of a canned response.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The idle timeout of the checks that are about it.
pub const SHORT_IDLE_TIMEOUT: Duration = Duration::from_millis(200);

/// The message cap of the oversized-output checks.
pub const SMALL_CAP: usize = 64 * 1024;

/// What the server offers in the oversized-body checks: 128 MiB, far more than the cap, the
/// per-event bound or anything the client may buffer.
pub const HUGE_BODY: usize = 128 * 1024 * 1024;

/// The most body bytes a client that stopped reading at a cap may have let through: the
/// cap's worth of events plus whatever the two sockets' buffers absorb.
pub const STOPPED_EARLY: usize = 32 * 1024 * 1024;

/// How an adapter's protocol says the few things the fault scenarios are made of. Each method
/// returns wire bytes: whole events (SSE events with their blank line, NDJSON lines with
/// their newline), except [`unterminated`](WireScript::unterminated).
pub trait WireScript: Send + Sync + fmt::Debug {
    /// The `content-type` of a streamed response.
    fn content_type(&self) -> &'static str {
        "text/event-stream"
    }

    /// The events before the first text delta: whatever opens the response and a text block
    /// (Anthropic's `message_start` and `content_block_start`). Empty for most protocols.
    fn text_start(&self) -> Vec<u8> {
        Vec::new()
    }

    /// One event adding `text` to the open text block; sent many times in a row.
    fn text_delta(&self, text: &str) -> Vec<u8>;

    /// The events that close the text block and end a normal response, reporting
    /// `prompt_tokens` uncached prompt tokens and `output_tokens` output tokens.
    fn finish(&self, prompt_tokens: u64, output_tokens: u64) -> Vec<u8>;

    /// The response's start up to the middle of a text event whose line never ends: the
    /// checks append bytes without a line end after it.
    fn unterminated(&self) -> Vec<u8>;

    /// An error event inside a `200` stream whose error text is `message`; `None` when the
    /// protocol has no such event.
    fn error_event(&self, message: &str) -> Option<Vec<u8>>;
}

/// The fault scenarios for one adapter: `protocol` makes a fresh protocol (with an empty
/// history), `script` speaks its wire.
pub struct FaultSuite<P, S> {
    protocol: fn() -> P,
    script: S,
}

impl<P, S: fmt::Debug> fmt::Debug for FaultSuite<P, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultSuite")
            .field("script", &self.script)
            .finish_non_exhaustive()
    }
}

/// A user request with one text message.
pub fn request(text: &str) -> LlmRequest {
    LlmRequest {
        new_messages: vec![build::user_text(text)],
        cancel: CancellationToken::new(),
        thinking_level: None,
    }
}

/// Runs `request` on `model` into a plain sink and checks the output with
/// [`check_replay`].
pub async fn generate<L: Llm + ?Sized>(model: &mut L, request: LlmRequest) -> Replay {
    let mut messages: Vec<OmniMessage> = Vec::new();
    let outcome = model.stream_generate(request, &mut messages).await;
    let replay = Replay { messages, outcome };
    if let Err(e) = check_replay(&replay) {
        panic!(
            "{e}\n{:#?}\noutcome: {:?}",
            replay.described(),
            replay.outcome
        );
    }
    replay
}

/// A sink that fires the request's interrupt at the first delta it sees.
struct InterruptAtFirstDelta {
    messages: Vec<OmniMessage>,
    cancel: CancellationToken,
}

#[async_trait]
impl MessageSink for InterruptAtFirstDelta {
    async fn emit(&mut self, msg: OmniMessage) {
        if describe(&msg).contains("/delta ") {
            self.cancel.cancel();
        }
        self.messages.push(msg);
    }
}

impl<P: WireProtocol + 'static, S: WireScript> FaultSuite<P, S> {
    /// The suite for `protocol` (e.g. `OpenAiChat::new`) spoken as `script` describes.
    pub fn new(protocol: fn() -> P, script: S) -> FaultSuite<P, S> {
        FaultSuite { protocol, script }
    }

    /// Every check, one after another; panics at the first failure, naming it.
    pub async fn run_all(&self) {
        self.completed_stream_matches_the_replay_and_commits_the_turn()
            .await;
        self.a_failed_attempt_leaves_no_turn_behind().await;
        self.a_dropped_connection_is_a_timeout_that_closes_segments()
            .await;
        self.http_errors_are_classified().await;
        self.a_retry_after_rides_the_message().await;
        self.a_stall_past_the_idle_timeout_is_a_timeout().await;
        self.a_cut_stream_is_malformed().await;
        self.an_error_event_is_classified().await;
        self.an_interrupt_is_aborted_and_commits_nothing().await;
        self.an_already_cancelled_request_sends_nothing().await;
        self.a_refused_connection_is_a_timeout_naming_the_cause()
            .await;
        self.a_runaway_message_fails_permanently_and_stops_the_reading()
            .await;
        self.a_line_that_never_ends_is_refused_before_it_is_buffered()
            .await;
        self.only_the_start_of_a_huge_error_body_is_read().await;
        self.the_default_cap_lets_a_long_message_through().await;
    }

    /// A 429 or 503 with `Retry-After` (seconds, or an HTTP date) carries the wait in its
    /// message, for the engine's ladder; another status, or a header that is neither, does not.
    pub async fn a_retry_after_rides_the_message(&self) {
        let body = json!({"error": {"message": "Rate limit reached", "type": "rate_limit_error"}})
            .to_string();
        let in_a_minute = std::time::SystemTime::now() + Duration::from_secs(90);
        let date = http_date(in_a_minute);
        let canned = vec![
            Canned::StatusWithHeaders(
                429,
                "Too Many Requests",
                vec![("retry-after", "20".into())],
                body.clone(),
            ),
            Canned::StatusWithHeaders(
                503,
                "Service Unavailable",
                vec![("Retry-After", date)],
                body.clone(),
            ),
            Canned::StatusWithHeaders(
                500,
                "Internal Server Error",
                vec![("retry-after", "20".into())],
                body.clone(),
            ),
            Canned::StatusWithHeaders(
                429,
                "Too Many Requests",
                vec![("retry-after", "whenever".into())],
                body,
            ),
        ];
        let server = self.server(canned).await;
        let mut model = self.model(self.config(&server, IDLE_TIMEOUT));
        let got = generate(&mut model, request("x")).await.outcome;
        assert_eq!(
            got,
            LlmOutcome::with_message(
                StopReason::Timeout,
                "429 Rate limit reached (Retry-After: 20 s)"
            )
        );
        let got = generate(&mut model, request("x")).await.outcome;
        let asked = crate::failure::retry_after(got.error_message.as_deref().unwrap_or(""))
            .unwrap_or_else(|| panic!("a 503 with a date gives a wait: {got:?}"));
        // The date is whole seconds, and a second may pass.
        assert!(
            (88..=90).contains(&asked.as_secs()),
            "a date 90 s ahead asks {asked:?}"
        );
        for status in [500, 429] {
            let got = generate(&mut model, request("x")).await.outcome;
            assert_eq!(
                got,
                LlmOutcome::with_message(
                    StopReason::Timeout,
                    format!("{status} Rate limit reached")
                ),
                "HTTP {status}: no wait asked"
            );
        }
    }

    async fn server(&self, responses: Vec<Canned>) -> Server {
        Server::start_as(self.script.content_type(), responses).await
    }

    fn config(&self, server: &Server, idle_timeout: Duration) -> ModelConfig {
        let mut config = ModelConfig::new(server.base_url(), "test-model");
        config.api_key = Some("sk-test".into());
        config.system_prompt = "You are terse.".into();
        config.idle_timeout = Some(idle_timeout);
        config.extra_headers = vec![("x-trace".into(), "fault-suite".into())];
        config
    }

    fn model(&self, config: ModelConfig) -> HttpModel<P> {
        HttpModel::new(config, (self.protocol)(), ToolCallIdAllocator::new())
            .expect("an HTTP client")
    }

    /// The request a fresh protocol builds for `new_messages` after committing `turns`.
    fn expected_request(
        &self,
        config: &ModelConfig,
        turns: &[(&[OmniMessage], &[OmniMessage])],
        new_messages: &[OmniMessage],
    ) -> WireRequest {
        let mut protocol = (self.protocol)();
        for (input, reply) in turns {
            protocol.commit(input, reply);
        }
        protocol.build_request(config, new_messages, None)
    }

    /// `text_start`, then a delta per piece: the steps of a text block that stays open.
    fn text(&self, pieces: &[&str]) -> Vec<Step> {
        let start = self.script.text_start();
        let mut steps: Vec<Step> = (!start.is_empty())
            .then_some(Step::Chunk(start))
            .into_iter()
            .collect();
        steps.extend(
            pieces
                .iter()
                .map(|p| Step::Chunk(self.script.text_delta(p))),
        );
        steps
    }

    /// A whole text response: `pieces`, then the finish with this usage.
    fn answer(&self, pieces: &[&str], prompt: u64, output: u64) -> Vec<Step> {
        let mut steps = self.text(pieces);
        steps.push(Step::Chunk(self.script.finish(prompt, output)));
        steps
    }

    /// A completed stream yields exactly what the pure replay of its bytes gives, ends with
    /// `token_usage` (session = running sum), sends what the protocol built (path, headers,
    /// body), and commits the turn: the next request is what a protocol that committed the
    /// same reply builds.
    pub async fn completed_stream_matches_the_replay_and_commits_the_turn(&self) {
        let mut first = self.text(&["Hel"]);
        first.push(Step::Sleep(Duration::from_millis(20)));
        first.push(Step::Chunk(self.script.text_delta("lo")));
        first.push(Step::Chunk(self.script.finish(10, 4)));
        let body: Vec<u8> = first
            .iter()
            .filter_map(|s| match s {
                Step::Chunk(b) => Some(b.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        let second = self.answer(&["Again"], 20, 1);
        let server = self
            .server(vec![Canned::Stream(first), Canned::Stream(second)])
            .await;
        let config = self.config(&server, IDLE_TIMEOUT);
        let mut model = self.model(config.clone());

        let hello = request("hello");
        let hello_input = hello.new_messages.clone();
        let got = generate(&mut model, hello).await;
        assert_eq!(
            got.outcome,
            LlmOutcome::completed(),
            "{:#?}",
            got.described()
        );
        let expected = replay_checked(
            (self.protocol)().decoder(),
            &[&body],
            ToolCallIdAllocator::new(),
            "the completed stream's bytes",
        );
        // The shell yields the replay.
        got.assert_lines(&expected.lines());
        assert_eq!(
            got.described().last().map(String::as_str),
            Some("token_usage 0/10/4=14 session 14")
        );
        let reply: Vec<OmniMessage> = got
            .messages
            .iter()
            .filter(|m| m.is_complete_model())
            .cloned()
            .collect();

        let again = request("again");
        let again_input = again.new_messages.clone();
        let got = generate(&mut model, again).await;
        assert_eq!(
            got.described().last().map(String::as_str),
            Some("token_usage 0/20/1=21 session 35")
        );
        assert_eq!(model.session_tokens(), TokenCounts::new(0, 30, 5));

        let seen = server.requests();
        assert_eq!(seen.len(), 2);
        let wire = self.expected_request(&config, &[], &hello_input);
        assert_eq!(seen[0].path, wire.path);
        assert_eq!(
            seen[0].body, wire.body,
            "the first request is what the protocol built"
        );
        for (name, value) in &wire.headers {
            assert_eq!(
                seen[0].header(&name.to_ascii_lowercase()),
                Some(value.as_str()),
                "header {name}"
            );
        }
        assert_eq!(seen[0].header("x-trace"), Some("fault-suite"));
        assert_eq!(seen[0].header("content-type"), Some("application/json"));
        let wire = self.expected_request(&config, &[(&hello_input, &reply)], &again_input);
        assert_eq!(
            seen[1].body, wire.body,
            "the second request carries the committed first turn"
        );
    }

    /// A request that failed (the connection dropped) commits nothing: the retry sends the
    /// same body.
    pub async fn a_failed_attempt_leaves_no_turn_behind(&self) {
        let mut dropped = self.text(&["partial"]);
        dropped.push(Step::Drop);
        let server = self
            .server(vec![
                Canned::Stream(dropped),
                Canned::Stream(self.answer(&["ok"], 1, 1)),
            ])
            .await;
        let mut model = self.model(self.config(&server, IDLE_TIMEOUT));
        let got = generate(&mut model, request("q")).await;
        assert_eq!(got.outcome.status, StopReason::Timeout, "{:?}", got.outcome);
        let got = generate(&mut model, request("q")).await;
        assert_eq!(got.outcome, LlmOutcome::completed());
        let seen = server.requests();
        assert_eq!(
            seen[1].body, seen[0].body,
            "the retry resends the same request"
        );
    }

    /// A connection dropped mid-stream is a `timeout` naming the connection, and the open
    /// text closes with it.
    pub async fn a_dropped_connection_is_a_timeout_that_closes_segments(&self) {
        let mut steps = self.text(&["Hel"]);
        steps.push(Step::Drop);
        let server = self.server(vec![Canned::Stream(steps)]).await;
        let got = generate(
            &mut self.model(self.config(&server, IDLE_TIMEOUT)),
            request("x"),
        )
        .await;
        assert_eq!(got.outcome.status, StopReason::Timeout, "{:?}", got.outcome);
        let message = got.outcome.error_message.as_deref().unwrap_or("");
        assert!(message.contains("connection"), "{:?}", got.outcome);
        assert_eq!(
            got.described(),
            [
                "partial_text/start",
                "partial_text/delta \"Hel\"",
                "partial_text/stop timeout",
                "text \"Hel\" timeout",
            ]
        );
    }

    /// HTTP errors are classified ([§6.5](penguin_omni_protocol::spec#s6.5) *A request, and how it
    /// fails*) with the provider's text, and yield nothing.
    pub async fn http_errors_are_classified(&self) {
        let cases: [(u16, &'static str, String, LlmOutcome); 5] = [
            (
                401,
                "Unauthorized",
                json!({"error": {"message": "Incorrect API key provided: sk-test.", "type": "invalid_request_error", "code": "invalid_api_key"}}).to_string(),
                LlmOutcome::with_message(StopReason::Auth, "401 Incorrect API key provided: sk-test."),
            ),
            (
                403,
                "Forbidden",
                json!({"error": {"message": "Project does not have access to model", "type": "invalid_request_error", "code": "model_not_found"}}).to_string(),
                LlmOutcome::with_message(StopReason::Failed, "403 Project does not have access to model"),
            ),
            (
                404,
                "Not Found",
                json!({"error": "model \"test-model\" not found, try pulling it first"}).to_string(),
                LlmOutcome::with_message(StopReason::Failed, "404 model \"test-model\" not found, try pulling it first"),
            ),
            (
                429,
                "Too Many Requests",
                json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}).to_string(),
                LlmOutcome::with_message(StopReason::Timeout, "429 Rate limit reached for requests"),
            ),
            (
                500,
                "Internal Server Error",
                "upstream connect error".into(),
                LlmOutcome::with_message(StopReason::Timeout, "500 upstream connect error"),
            ),
        ];
        let canned = cases
            .iter()
            .map(|(code, reason, body, _)| Canned::Status(*code, reason, body.clone()))
            .collect();
        let server = self.server(canned).await;
        let mut model = self.model(self.config(&server, IDLE_TIMEOUT));
        for (code, _, _, expected) in cases {
            let got = generate(&mut model, request("x")).await;
            assert_eq!(got.outcome, expected, "HTTP {code}");
            assert!(got.messages.is_empty(), "HTTP {code} yields nothing");
        }
    }

    /// No byte for longer than the idle timeout is a `timeout` without a message, given up
    /// at the timeout, with the open text closed.
    pub async fn a_stall_past_the_idle_timeout_is_a_timeout(&self) {
        let mut steps = self.text(&["wait"]);
        steps.push(Step::Sleep(Duration::from_secs(5)));
        steps.extend(self.answer(&["too late"], 1, 1));
        let server = self.server(vec![Canned::Stream(steps)]).await;
        let started = Instant::now();
        let got = generate(
            &mut self.model(self.config(&server, SHORT_IDLE_TIMEOUT)),
            request("x"),
        )
        .await;
        assert_eq!(got.outcome, LlmOutcome::new(StopReason::Timeout));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "gave up at the idle timeout, not at the end of the stall: {:?}",
            started.elapsed()
        );
        assert_eq!(
            got.described()[2..],
            ["partial_text/stop timeout", "text \"wait\" timeout"]
        );
    }

    /// A stream that ends cleanly before its terminal event is `malformed`.
    pub async fn a_cut_stream_is_malformed(&self) {
        let server = self.server(vec![Canned::Stream(self.text(&["cut"]))]).await;
        let got = generate(
            &mut self.model(self.config(&server, IDLE_TIMEOUT)),
            request("x"),
        )
        .await;
        assert_eq!(
            got.outcome.status,
            StopReason::Malformed,
            "{:?}",
            got.outcome
        );
        let message = got.outcome.error_message.as_deref().unwrap_or("");
        assert!(
            message.starts_with(crate::sse::CUT_OFF_PREFIX),
            "the text §6.5 recognizes: {message}"
        );
        assert_eq!(
            got.described()[2..],
            ["partial_text/stop malformed", "text \"cut\" malformed"]
        );
    }

    /// An error event inside a `200` stream is classified from its text (an overload is a
    /// `timeout`) and closes the open text. Skipped when the protocol has none.
    pub async fn an_error_event_is_classified(&self) {
        let message = "The server is overloaded, please retry";
        let Some(event) = self.script.error_event(message) else {
            return;
        };
        let mut steps = self.text(&["Par"]);
        steps.push(Step::Chunk(event));
        let server = self.server(vec![Canned::Stream(steps)]).await;
        let got = generate(
            &mut self.model(self.config(&server, IDLE_TIMEOUT)),
            request("x"),
        )
        .await;
        assert_eq!(
            got.outcome,
            LlmOutcome::with_message(StopReason::Timeout, message)
        );
        assert_eq!(
            got.described()[2..],
            ["partial_text/stop timeout", "text \"Par\" timeout"]
        );
    }

    /// The user's interrupt mid-stream (the rest of the response far away) is `aborted` at
    /// once, closes the open text, and commits nothing.
    pub async fn an_interrupt_is_aborted_and_commits_nothing(&self) {
        let mut slow = self.text(&["a"]);
        slow.push(Step::Sleep(Duration::from_secs(5)));
        slow.extend(self.answer(&["b"], 1, 1));
        let server = self
            .server(vec![
                Canned::Stream(slow),
                Canned::Stream(self.answer(&["ok"], 1, 1)),
            ])
            .await;
        let config = self.config(&server, IDLE_TIMEOUT);
        let mut model = self.model(config.clone());
        let req = request("x");
        let mut sink = InterruptAtFirstDelta {
            messages: Vec::new(),
            cancel: req.cancel.clone(),
        };
        let started = Instant::now();
        let outcome = model.stream_generate(req, &mut sink).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "aborted at once"
        );
        let replay = Replay {
            messages: sink.messages,
            outcome,
        };
        check_replay(&replay).unwrap_or_else(|e| panic!("{e}\n{:#?}", replay.described()));
        assert_eq!(replay.outcome, LlmOutcome::new(StopReason::Aborted));
        assert_eq!(
            replay.described(),
            [
                "partial_text/start",
                "partial_text/delta \"a\"",
                "partial_text/stop aborted",
                "text \"a\" aborted",
            ]
        );
        let next = request("next");
        let input = next.new_messages.clone();
        let got = generate(&mut model, next).await;
        assert_eq!(got.outcome, LlmOutcome::completed());
        let seen = server.requests();
        assert_eq!(
            seen.last().map(|s| &s.body),
            Some(&self.expected_request(&config, &[], &input).body),
            "the aborted turn is not in the history"
        );
    }

    /// A request interrupted before it starts sends nothing.
    pub async fn an_already_cancelled_request_sends_nothing(&self) {
        let server = self.server(vec![]).await;
        let mut model = self.model(self.config(&server, IDLE_TIMEOUT));
        let req = request("x");
        req.cancel.cancel();
        let got = generate(&mut model, req).await;
        assert_eq!(got.outcome, LlmOutcome::new(StopReason::Aborted));
        assert!(got.messages.is_empty());
        assert!(server.requests().is_empty());
    }

    /// Nobody listening is a `timeout` whose text says the connection failed.
    pub async fn a_refused_connection_is_a_timeout_naming_the_cause(&self) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("an address");
        drop(listener);
        let config = ModelConfig::new(format!("http://{addr}"), "m");
        let got = generate(&mut self.model(config), request("x")).await;
        assert_eq!(got.outcome.status, StopReason::Timeout);
        let message = got.outcome.error_message.unwrap_or_default();
        assert!(message.to_lowercase().contains("connect"), "{message}");
    }
}

/// `at` as an HTTP date (IMF-fixdate), as a server writes `Retry-After`.
fn http_date(at: std::time::SystemTime) -> String {
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // The civil date of a day count (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}
