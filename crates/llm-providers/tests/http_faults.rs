//! The HTTP shell against a local server that plays canned responses (the test kit's
//! [`Server`]), through Chat Completions: the happy path, history and token bookkeeping, and
//! every fault of protocol §6.5 (`docs/protocol.md#s6.5`), with Chat Completions' own wire
//! (reasoning, tool calls, its history
//! format). Each fault must give the right outcome and close every segment it opened before
//! returning. `tests/fault_suite.rs` runs the kit's protocol-independent fault suite against
//! every adapter.

#![cfg(all(feature = "testkit", all(feature = "http", feature = "openai-chat")))]

use std::time::Duration;

use async_trait::async_trait;
use penguin_llm_providers::testkit::server::{Canned, Server, Step};
use penguin_llm_providers::testkit::{check_discipline, describe, describe_all, replay};
use penguin_llm_providers::{
    openai_chat::OpenAiChatDecoder, CancellationToken, HttpModel, Llm, LlmOutcome, LlmRequest,
    MessageSink, ModelConfig, OpenAiChat, ToolCallIdAllocator,
};
use penguin_omni_protocol::{build, OmniMessage, StopReason, TokenCounts};
use serde_json::{json, Value};
use tokio::net::TcpListener;

fn data(chunk: Value) -> Step {
    Step::Chunk(format!("data: {chunk}\n\n").into_bytes())
}

fn content(text: &str) -> Step {
    data(json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}))
}

fn reasoning(text: &str) -> Step {
    data(
        json!({"choices": [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": null}]}),
    )
}

fn tool_fragment(id: Option<&str>, name: Option<&str>, args: &str) -> Step {
    let mut call = json!({"index": 0, "type": "function", "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = json!(id);
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    data(json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]}))
}

fn finish(reason: &str, prompt: u64, completion: u64) -> Step {
    data(json!({
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    }))
}

fn done() -> Step {
    Step::Chunk(b"data: [DONE]\n\n".to_vec())
}

/// The idle timeout of the tests that are not about it: far longer than any gap a busy machine
/// puts between two chunks of a canned response.
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The idle timeout of the tests that are about it.
const SHORT_IDLE_TIMEOUT: Duration = Duration::from_millis(200);

fn model(server: &Server) -> HttpModel<OpenAiChat> {
    model_idle(server, IDLE_TIMEOUT)
}

fn model_idle(server: &Server, idle_timeout: Duration) -> HttpModel<OpenAiChat> {
    let mut config = ModelConfig::new(format!("{}/v1", server.base_url()), "test-model");
    config.api_key = Some("sk-test".into());
    config.system_prompt = "You are terse.".into();
    config.idle_timeout = Some(idle_timeout);
    config.extra_headers = vec![("x-trace".into(), "fault-tests".into())];
    HttpModel::new(config, OpenAiChat::new(), ToolCallIdAllocator::new()).unwrap()
}

fn request(text: &str) -> LlmRequest {
    LlmRequest {
        new_messages: vec![build::user_text(text)],
        cancel: CancellationToken::new(),
        thinking_level: None,
    }
}

async fn generate(model: &mut HttpModel<OpenAiChat>, req: LlmRequest) -> (Vec<String>, LlmOutcome) {
    let mut out: Vec<OmniMessage> = Vec::new();
    let outcome = model.stream_generate(req, &mut out).await;
    check_discipline(&out).unwrap_or_else(|e| panic!("discipline: {e}\n{:#?}", describe_all(&out)));
    if outcome.status != StopReason::Completed {
        assert!(
            out.iter().all(|m| m.event().is_none()),
            "token_usage is yielded only on completion"
        );
    }
    (describe_all(&out), outcome)
}

#[tokio::test]
async fn completed_stream_matches_the_pure_replay_and_commits_history() {
    let steps = vec![
        reasoning("Think"),
        Step::Sleep(Duration::from_millis(20)),
        reasoning("ing."),
        content("Hi"),
        content(" there"),
        finish("stop", 10, 4),
        done(),
    ];
    let body: Vec<u8> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Chunk(b) => Some(b.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let second = vec![content("Again"), finish("stop", 20, 1), done()];
    let server = Server::start(vec![Canned::Stream(steps), Canned::Stream(second)]).await;
    let mut model = model(&server);

    let (got, outcome) = generate(&mut model, request("hello")).await;
    assert_eq!(outcome, LlmOutcome::completed());
    let (expected, _) = replay(
        OpenAiChatDecoder::default(),
        &[&body],
        ToolCallIdAllocator::new(),
    );
    assert_eq!(got, describe_all(&expected));
    assert_eq!(got.last().unwrap(), "token_usage 0/10/4=14 session 14");

    let (got, _) = generate(&mut model, request("again")).await;
    assert_eq!(got.last().unwrap(), "token_usage 0/20/1=21 session 35");
    assert_eq!(model.session_tokens(), TokenCounts::new(0, 30, 5));

    let seen = server.requests();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    let header = |name: &str| {
        seen[0]
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("authorization").as_deref(), Some("Bearer sk-test"));
    assert_eq!(header("x-trace").as_deref(), Some("fault-tests"));
    assert_eq!(header("accept").as_deref(), Some("text/event-stream"));
    assert_eq!(
        seen[1].body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "Hi there", "reasoning_content": "Thinking."},
            {"role": "user", "content": "again"}
        ])
    );
    assert_eq!(seen[1].body["stream"], json!(true));
    assert_eq!(
        seen[1].body["stream_options"],
        json!({"include_usage": true})
    );
}

#[tokio::test]
async fn failed_attempt_leaves_no_turn_in_history() {
    let server = Server::start(vec![
        Canned::Stream(vec![content("partial"), Step::Drop]),
        Canned::Stream(vec![content("ok"), finish("stop", 1, 1), done()]),
    ])
    .await;
    let mut model = model(&server);
    let (_, outcome) = generate(&mut model, request("q")).await;
    assert_eq!(outcome.status, StopReason::Timeout);
    let (_, outcome) = generate(&mut model, request("q")).await;
    assert_eq!(outcome, LlmOutcome::completed());
    let seen = server.requests();
    assert_eq!(seen[1].body["messages"], seen[0].body["messages"]);
    assert_eq!(model.protocol().history().len(), 2);
}

#[tokio::test]
async fn connection_dropped_mid_stream_is_a_timeout_and_closes_segments() {
    let server = Server::start(vec![Canned::Stream(vec![
        content("Hel"),
        tool_fragment(Some("call_1"), Some("read"), "{\"pa"),
        Step::Drop,
    ])])
    .await;
    let (got, outcome) = generate(&mut model(&server), request("x")).await;
    assert_eq!(outcome.status, StopReason::Timeout);
    let message = outcome.error_message.as_deref().unwrap_or("");
    assert!(message.contains("connection"), "{outcome:?}");
    assert_eq!(
        got,
        [
            "partial_text/start",
            "partial_text/delta \"Hel\"",
            "partial_text/stop completed",
            "text \"Hel\" completed",
            "partial_tool_call/start read(call_1)",
            "partial_tool_call/delta \"{\\\"pa\"",
            "partial_tool_call/stop timeout",
            "tool_call read(call_1) {\"pa timeout",
        ]
    );
}

async fn status_outcome(code: u16, reason: &'static str, body: &str) -> LlmOutcome {
    let server = Server::start(vec![Canned::Status(code, reason, body.to_owned())]).await;
    let (got, outcome) = generate(&mut model(&server), request("x")).await;
    assert!(got.is_empty(), "an HTTP error yields nothing: {got:?}");
    outcome
}

#[tokio::test]
async fn http_401_is_auth_with_the_provider_text() {
    let body = json!({"error": {"message": "Incorrect API key provided: sk-test.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
    assert_eq!(
        status_outcome(401, "Unauthorized", &body.to_string()).await,
        LlmOutcome::with_message(StopReason::Auth, "401 Incorrect API key provided: sk-test.")
    );
}

#[tokio::test]
async fn http_403_is_failed_not_auth() {
    let body = json!({"error": {"message": "Project does not have access to model", "type": "invalid_request_error", "code": "model_not_found"}});
    assert_eq!(
        status_outcome(403, "Forbidden", &body.to_string()).await,
        LlmOutcome::with_message(
            StopReason::Failed,
            "403 Project does not have access to model"
        )
    );
}

#[tokio::test]
async fn a_prompt_over_the_context_window_fails_for_good_not_retried() {
    // llama.cpp's answer, as its server sends it.
    let body = r#"{"error":{"code":400,"message":"request (5031 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5031,"n_ctx":4096}}"#;
    let outcome = status_outcome(400, "Bad Request", body).await;
    assert!(outcome.permanent, "{outcome:?}");
    assert_eq!(outcome.status, StopReason::Failed);
    assert!(
        outcome
            .error_message
            .as_deref()
            .is_some_and(|m| m.contains("exceeds the available context size")),
        "{outcome:?}"
    );
    // OpenAI's, by its code alone.
    let body = r#"{"error":{"message":"Input too big.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
    assert!(status_outcome(400, "Bad Request", body).await.permanent);
    // Any other 400 is still retried.
    let body = r#"{"error":{"message":"bad thing","type":"invalid_request_error"}}"#;
    assert!(!status_outcome(400, "Bad Request", body).await.permanent);
}

#[tokio::test]
async fn http_429_is_timeout() {
    let body = json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}});
    assert_eq!(
        status_outcome(429, "Too Many Requests", &body.to_string()).await,
        LlmOutcome::with_message(StopReason::Timeout, "429 Rate limit reached for requests")
    );
}

#[tokio::test]
async fn http_500_without_a_json_body_is_timeout_with_the_raw_text() {
    assert_eq!(
        status_outcome(500, "Internal Server Error", "upstream connect error").await,
        LlmOutcome::with_message(StopReason::Timeout, "500 upstream connect error")
    );
}

#[tokio::test]
async fn malformed_json_line_is_malformed_and_closes_segments() {
    let server = Server::start(vec![Canned::Stream(vec![
        reasoning("hmm"),
        Step::Chunk(b"data: {\"choices\": [oops\n\n".to_vec()),
        content("never"),
    ])])
    .await;
    let (got, outcome) = generate(&mut model(&server), request("x")).await;
    assert_eq!(outcome.status, StopReason::Malformed);
    let message = outcome.error_message.unwrap();
    assert!(
        message.starts_with("chat completion chunk 2 is not valid JSON"),
        "{message}"
    );
    assert_eq!(
        got,
        [
            "partial_thinking/start",
            "partial_thinking/delta \"hmm\"",
            "partial_thinking/stop malformed",
            "thinking \"hmm\" malformed",
        ]
    );
}

#[tokio::test]
async fn stream_ending_without_finish_or_done_is_malformed() {
    let server = Server::start(vec![Canned::Stream(vec![content("cut")])]).await;
    let (got, outcome) = generate(&mut model(&server), request("x")).await;
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            StopReason::Malformed,
            "Last event must carry a finish_reason: the stream ended after 1 chunk(s) without one"
        )
    );
    assert_eq!(
        &got[2..],
        ["partial_text/stop malformed", "text \"cut\" malformed"]
    );
}

#[tokio::test]
async fn finish_reason_without_done_still_completes() {
    let server = Server::start(vec![Canned::Stream(vec![
        content("ok"),
        finish("stop", 3, 1),
    ])])
    .await;
    let (got, outcome) = generate(&mut model(&server), request("x")).await;
    assert_eq!(outcome, LlmOutcome::completed());
    assert_eq!(got.last().unwrap(), "token_usage 0/3/1=4 session 4");
}

#[tokio::test]
async fn stall_longer_than_the_idle_timeout_is_a_timeout_without_message() {
    let server = Server::start(vec![Canned::Stream(vec![
        content("wait"),
        Step::Sleep(Duration::from_secs(5)),
        content("too late"),
        finish("stop", 1, 1),
        done(),
    ])])
    .await;
    let started = std::time::Instant::now();
    let (got, outcome) = generate(&mut model_idle(&server, SHORT_IDLE_TIMEOUT), request("x")).await;
    assert_eq!(outcome, LlmOutcome::new(StopReason::Timeout));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "gave up at the idle timeout, not at the end of the stall: {:?}",
        started.elapsed()
    );
    assert_eq!(
        &got[2..],
        ["partial_text/stop timeout", "text \"wait\" timeout"]
    );
}

#[tokio::test]
async fn headers_that_never_come_are_a_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(socket);
    });
    let mut config = ModelConfig::new(format!("http://{addr}/v1"), "m");
    config.idle_timeout = Some(SHORT_IDLE_TIMEOUT);
    let mut model = HttpModel::new(config, OpenAiChat::new(), ToolCallIdAllocator::new()).unwrap();
    let (got, outcome) = generate(&mut model, request("x")).await;
    assert_eq!(outcome, LlmOutcome::new(StopReason::Timeout));
    assert!(got.is_empty());
    holder.abort();
}

#[tokio::test]
async fn a_slow_consumer_does_not_count_toward_the_idle_timeout() {
    /// Takes longer per message than the idle timeout.
    struct SlowSink(Vec<OmniMessage>);
    #[async_trait]
    impl MessageSink for SlowSink {
        async fn emit(&mut self, msg: OmniMessage) {
            tokio::time::sleep(Duration::from_millis(120)).await;
            self.0.push(msg);
        }
    }
    let server = Server::start(vec![Canned::Stream(vec![
        content("a"),
        content("b"),
        content("c"),
        finish("stop", 1, 3),
        done(),
    ])])
    .await;
    let mut model = model_idle(&server, SHORT_IDLE_TIMEOUT);
    let mut sink = SlowSink(Vec::new());
    let outcome = model.stream_generate(request("x"), &mut sink).await;
    assert_eq!(outcome, LlmOutcome::completed());
    check_discipline(&sink.0).unwrap();
}

#[tokio::test]
async fn error_event_after_http_200_is_classified() {
    let server = Server::start(vec![
        Canned::Stream(vec![
            content("Par"),
            data(json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error", "code": null}})),
        ]),
        Canned::Stream(vec![data(
            json!({"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
        )]),
    ])
    .await;
    let mut model = model(&server);
    let (got, outcome) = generate(&mut model, request("x")).await;
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            StopReason::Timeout,
            "The server had an error while processing your request."
        )
    );
    assert_eq!(
        &got[2..],
        ["partial_text/stop timeout", "text \"Par\" timeout"]
    );
    let (got, outcome) = generate(&mut model, request("x")).await;
    // A prompt over the context window is refused for good: retrying cannot help.
    assert_eq!(
        outcome,
        LlmOutcome::permanent_failure("This model's maximum context length is 8192 tokens.")
    );
    assert!(got.is_empty());
}

#[tokio::test]
async fn user_interrupt_mid_stream_is_aborted_and_closes_segments() {
    /// The user interrupts as soon as the first delta shows.
    struct InterruptAtFirstDelta {
        msgs: Vec<OmniMessage>,
        cancel: CancellationToken,
    }
    #[async_trait]
    impl MessageSink for InterruptAtFirstDelta {
        async fn emit(&mut self, msg: OmniMessage) {
            if describe(&msg).contains("/delta ") {
                self.cancel.cancel();
            }
            self.msgs.push(msg);
        }
    }
    // The rest of the call comes only long after the interrupt.
    let server = Server::start(vec![Canned::Stream(vec![
        tool_fragment(Some("call_7"), Some("write"), "{\"x\":"),
        Step::Sleep(Duration::from_secs(5)),
        tool_fragment(None, None, "1}"),
        finish("tool_calls", 1, 1),
        done(),
    ])])
    .await;
    let mut model = model(&server);
    let req = request("x");
    let mut sink = InterruptAtFirstDelta {
        msgs: Vec::new(),
        cancel: req.cancel.clone(),
    };
    let outcome = model.stream_generate(req, &mut sink).await;
    check_discipline(&sink.msgs)
        .unwrap_or_else(|e| panic!("discipline: {e}\n{:#?}", describe_all(&sink.msgs)));
    let got = describe_all(&sink.msgs);
    assert_eq!(outcome, LlmOutcome::new(StopReason::Aborted));
    assert_eq!(
        got,
        [
            "partial_tool_call/start write(call_7)",
            "partial_tool_call/delta \"{\\\"x\\\":\"",
            "partial_tool_call/stop aborted",
            "tool_call write(call_7) {\"x\": aborted",
        ]
    );
    assert!(model.protocol().history().is_empty());
}

#[tokio::test]
async fn already_cancelled_request_sends_nothing() {
    let server = Server::start(vec![]).await;
    let mut model = model(&server);
    let req = request("x");
    req.cancel.cancel();
    let (got, outcome) = generate(&mut model, req).await;
    assert_eq!(outcome, LlmOutcome::new(StopReason::Aborted));
    assert!(got.is_empty());
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn connection_refused_is_a_timeout_naming_the_cause() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let config = ModelConfig::new(format!("http://{addr}/v1"), "m");
    let mut model = HttpModel::new(config, OpenAiChat::new(), ToolCallIdAllocator::new()).unwrap();
    let (_, outcome) = generate(&mut model, request("x")).await;
    assert_eq!(outcome.status, StopReason::Timeout);
    let message = outcome.error_message.unwrap();
    assert!(message.to_lowercase().contains("connect"), "{message}");
}

#[tokio::test]
async fn invalid_input_fails_before_any_io() {
    let server = Server::start(vec![]).await;
    let mut model = model(&server);
    let req = LlmRequest {
        new_messages: vec![
            build::user_text("a"),
            build::assistant_text("b", StopReason::Completed),
        ],
        cancel: CancellationToken::new(),
        thinking_level: None,
    };
    let (_, outcome) = generate(&mut model, req).await;
    assert_eq!(
        outcome,
        LlmOutcome::with_message(
            StopReason::Failed,
            "streamGenerate does not accept mixed roles: user and assistant"
        )
    );
    let (_, outcome) = generate(
        &mut model,
        LlmRequest {
            new_messages: vec![],
            cancel: CancellationToken::new(),
            thinking_level: None,
        },
    )
    .await;
    assert_eq!(
        outcome.error_message.as_deref(),
        Some("streamGenerate requires at least one input message")
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn resumed_history_reserves_tool_call_ids() {
    let server = Server::start(vec![Canned::Stream(vec![
        tool_fragment(Some("call_1"), Some("read"), "{}"),
        finish("tool_calls", 1, 1),
        done(),
    ])])
    .await;
    let mut model = model(&server);
    model.set_history(&[
        build::user_text("earlier"),
        build::tool_call("read", "{}", "call_1", StopReason::Completed, None),
        build::tool_call_output("done", "call_1", StopReason::Completed),
    ]);
    let (got, outcome) = generate(&mut model, request("again")).await;
    assert_eq!(outcome, LlmOutcome::completed());
    assert!(
        got.contains(&"tool_call read(call_1#2) {} completed".to_owned()),
        "{got:#?}"
    );
    let messages = &server.requests()[0].body["messages"];
    assert_eq!(messages[2]["tool_calls"][0]["id"], json!("call_1"));
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "done"})
    );
}

#[tokio::test]
async fn a_reused_connection_the_server_closed_is_resent_once() {
    let server = Server::start(vec![
        Canned::StreamThenCloseIdle(vec![content("one"), finish("stop", 5, 1), done()]),
        Canned::Stream(vec![content("two"), finish("stop", 9, 1), done()]),
    ])
    .await;
    let mut m = model(&server);
    let (first, outcome) = generate(&mut m, request("a")).await;
    assert_eq!(outcome, LlmOutcome::completed());
    assert!(
        first.contains(&"text \"one\" completed".to_owned()),
        "{first:?}"
    );
    // The second request first goes out on the pooled connection, which the server closes
    // unanswered; it must come back from a fresh connection, not as a timeout.
    let (second, outcome) = generate(&mut m, request("b")).await;
    assert_eq!(outcome, LlmOutcome::completed(), "{second:?}");
    assert!(
        second.contains(&"text \"two\" completed".to_owned()),
        "{second:?}"
    );
    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies.len(),
        2,
        "the unanswered request is not logged as served"
    );
    // The resent request is the whole second request, committed first turn included.
    assert_eq!(
        bodies[1]["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "b"}
        ])
    );
}

/// The message cap of the tests that are about it.
const SMALL_CAP: usize = 64 * 1024;

/// What the server offers in the oversized-body tests: 128 MiB, far more than the cap, the
/// event bound or anything the client may buffer.
const HUGE_BODY: usize = 128 * 1024 * 1024;

/// The most body bytes a client that stopped reading at the cap may have let through: the
/// cap's worth of events plus whatever the two sockets' buffers absorb.
const STOPPED_EARLY: usize = 32 * 1024 * 1024;

fn model_capped(server: &Server, max_message_bytes: usize) -> HttpModel<OpenAiChat> {
    let mut config = ModelConfig::new(format!("{}/v1", server.base_url()), "test-model");
    config.idle_timeout = Some(IDLE_TIMEOUT);
    config.max_message_bytes = max_message_bytes;
    HttpModel::new(config, OpenAiChat::new(), ToolCallIdAllocator::new()).unwrap()
}

fn bytes_of(step: Step) -> Vec<u8> {
    match step {
        Step::Chunk(bytes) => bytes,
        other => panic!("not a chunk: {other:?}"),
    }
}

#[tokio::test]
async fn a_message_past_max_message_bytes_fails_permanently_and_stops_the_reading() {
    let piece = "x".repeat(16 * 1024);
    let kinds = [
        ("a text message", None, content(&piece), "text"),
        ("a thinking message", None, reasoning(&piece), "thinking"),
        (
            "the arguments of tool call call_1 (write)",
            Some(tool_fragment(Some("call_1"), Some("write"), "{\"a\":\"")),
            tool_fragment(None, None, &piece),
            "tool_call",
        ),
    ];
    for (what, first, repeated, complete) in kinds {
        let mut steps: Vec<Step> = first.into_iter().collect();
        let event = bytes_of(repeated);
        let times = HUGE_BODY / event.len();
        steps.extend([Step::Repeat(event, times), finish("stop", 1, 1), done()]);
        let server = Server::start(vec![Canned::Stream(steps)]).await;
        let mut model = model_capped(&server, SMALL_CAP);
        let (got, outcome) = generate(&mut model, request("x")).await;
        assert_eq!(
            outcome,
            LlmOutcome::permanent_failure(format!(
                "model output too large: {what} passed max_message_bytes (64 KiB); the rest of the response was not read"
            )),
        );
        // Every delta under the cap was streamed, the one crossing it was not, and the
        // segment closed holding exactly those deltas.
        let deltas = got.iter().filter(|m| m.contains("/delta \"x")).count();
        assert_eq!(
            deltas,
            SMALL_CAP / piece.len() - usize::from(complete == "tool_call")
        );
        let last = got.last().unwrap();
        assert!(
            last.starts_with(&format!("{complete} ")) && last.ends_with(" failed"),
            "{what}: {last:.80}"
        );
        assert!(model.protocol().history().is_empty(), "nothing committed");
        let written = server.finished().await;
        assert!(
            written < STOPPED_EARLY,
            "{what}: the client read {written} bytes of a {HUGE_BODY}-byte body"
        );
    }
}

#[tokio::test]
async fn an_sse_line_that_never_ends_is_refused_before_it_is_buffered_whole() {
    let server = Server::start(vec![Canned::Stream(vec![
        Step::Chunk(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec()),
        Step::Repeat(vec![b'x'; 64 * 1024], HUGE_BODY / (64 * 1024)),
    ])])
    .await;
    let mut model = model_capped(&server, SMALL_CAP);
    let (got, outcome) = generate(&mut model, request("x")).await;
    // 4 × 64 KiB + 1 MiB.
    assert_eq!(
        outcome,
        LlmOutcome::permanent_failure(
            "response too large: an SSE event (line 1) passed 1280 KiB without ending, the per-event limit set by max_message_bytes; the rest of the response was not read"
        )
    );
    assert!(got.is_empty(), "{got:?}");
    let written = server.finished().await;
    assert!(written < STOPPED_EARLY, "read {written} bytes");
}

#[tokio::test]
async fn only_the_start_of_a_huge_error_body_is_read() {
    let server = Server::start(vec![Canned::HugeError(
        500,
        "Internal Server Error",
        HUGE_BODY,
    )])
    .await;
    let (got, outcome) = generate(&mut model(&server), request("x")).await;
    assert!(got.is_empty());
    assert_eq!(
        outcome,
        LlmOutcome::with_message(StopReason::Timeout, format!("500 {}", "x".repeat(500)))
    );
    let written = server.finished().await;
    assert!(written < STOPPED_EARLY, "read {written} bytes");
}

#[tokio::test]
async fn the_default_cap_lets_an_ordinary_long_message_through() {
    // 2 MiB of text in 4 KiB deltas: long for a model, far under the 8 MiB default.
    let piece = "y".repeat(4096);
    let server = Server::start(vec![Canned::Stream(vec![
        Step::Repeat(bytes_of(content(&piece)), 512),
        finish("stop", 1, 1),
        done(),
    ])])
    .await;
    let mut config = ModelConfig::new(format!("{}/v1", server.base_url()), "test-model");
    config.idle_timeout = Some(IDLE_TIMEOUT);
    assert_eq!(
        config.max_message_bytes,
        penguin_llm_providers::DEFAULT_MAX_MESSAGE_BYTES
    );
    let mut model = HttpModel::new(config, OpenAiChat::new(), ToolCallIdAllocator::new()).unwrap();
    let mut out: Vec<OmniMessage> = Vec::new();
    let outcome = model.stream_generate(request("x"), &mut out).await;
    assert_eq!(outcome, LlmOutcome::completed());
    let text = out
        .iter()
        .find_map(|m| match m.model() {
            Some(penguin_omni_protocol::ModelPayload::Text(t)) => Some(t.text.len()),
            _ => None,
        })
        .unwrap();
    assert_eq!(text, 2 * 1024 * 1024);
}

/// An `https` base URL goes through rustls (reqwest's, with the ring provider the shell
/// installs): the client builds, and a peer that speaks no TLS is a failed request with the
/// reason, never a panic or a hang.
#[cfg(feature = "rustls")]
#[tokio::test]
async fn an_https_base_url_is_spoken_to_with_tls() {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket.write_all(b"HTTP/1.1 200 OK\r\n\r\nnot tls").await;
        }
    });
    let mut config = ModelConfig::new(format!("https://127.0.0.1:{port}/v1"), "m");
    config.idle_timeout = Some(Duration::from_secs(10));
    let mut model = HttpModel::new(config, OpenAiChat::new(), ToolCallIdAllocator::new())
        .expect("a TLS client builds");
    let mut sink: Vec<OmniMessage> = Vec::new();
    let request = LlmRequest {
        new_messages: vec![build::user_text("hi")],
        cancel: CancellationToken::new(),
        thinking_level: None,
    };
    let outcome = model.stream_generate(request, &mut sink).await;
    assert_ne!(outcome.status, StopReason::Completed, "{outcome:?}");
    assert!(outcome.error_message.is_some(), "{outcome:?}");
}
