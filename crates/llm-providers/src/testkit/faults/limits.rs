//! The fault suite's checks on oversized responses: a runaway message, a line that never
//! ends, a huge error body, and a long message the default cap lets through.

use penguin_omni_protocol::{ModelPayload, StopReason};

use super::{
    generate, request, Canned, FaultSuite, LlmOutcome, Step, WireProtocol, WireScript, HUGE_BODY,
    IDLE_TIMEOUT, SMALL_CAP, STOPPED_EARLY,
};

impl<P: WireProtocol + 'static, S: WireScript> FaultSuite<P, S> {
    /// A text message streamed past `max_message_bytes` (64 KiB here) out of a 128 MiB body
    /// is refused with the permanent failure naming the limit: the deltas under the cap were
    /// streamed, the one crossing it was not, reading stopped (the connection dropped long
    /// before the body's end), and nothing was committed.
    pub async fn a_runaway_message_fails_permanently_and_stops_the_reading(&self) {
        let piece = "x".repeat(16 * 1024);
        let delta = self.script.text_delta(&piece);
        let mut steps = self.text(&[]);
        steps.push(Step::Repeat(delta.clone(), HUGE_BODY / delta.len()));
        steps.push(Step::Chunk(self.script.finish(1, 1)));
        let server = self
            .server(vec![
                Canned::Stream(steps),
                Canned::Stream(self.answer(&["ok"], 1, 1)),
            ])
            .await;
        let mut config = self.config(&server, IDLE_TIMEOUT);
        config.max_message_bytes = SMALL_CAP;
        let mut model = self.model(config.clone());
        let got = generate(&mut model, request("x")).await;
        assert_eq!(
            got.outcome,
            LlmOutcome::permanent_failure(
                "model output too large: a text message passed max_message_bytes (64 KiB); the rest of the response was not read"
            )
        );
        let described = got.described();
        let deltas = described
            .iter()
            .filter(|m| m.starts_with("partial_text/delta"))
            .count();
        assert_eq!(deltas, SMALL_CAP / piece.len(), "every delta under the cap");
        let last = described.last().map(String::as_str).unwrap_or("");
        assert!(
            last.starts_with("text ") && last.ends_with(" failed"),
            "{last:.80}"
        );
        let next = request("next");
        let input = next.new_messages.clone();
        assert_eq!(
            generate(&mut model, next).await.outcome,
            LlmOutcome::completed()
        );
        assert_eq!(
            server.requests().last().map(|s| s.body.clone()),
            Some(self.expected_request(&config, &[], &input).body),
            "nothing committed"
        );
        let written = server.finished().await;
        assert!(
            written < STOPPED_EARLY,
            "the client read {written} bytes of a {HUGE_BODY}-byte body"
        );
    }

    /// A line that never ends is refused as soon as it passes the per-event bound
    /// (`4 × max_message_bytes + 1 MiB`), before it is buffered whole.
    pub async fn a_line_that_never_ends_is_refused_before_it_is_buffered(&self) {
        let server = self
            .server(vec![Canned::Stream(vec![
                Step::Chunk(self.script.unterminated()),
                Step::Repeat(vec![b'x'; 64 * 1024], HUGE_BODY / (64 * 1024)),
            ])])
            .await;
        let mut config = self.config(&server, IDLE_TIMEOUT);
        config.max_message_bytes = SMALL_CAP;
        let got = generate(&mut self.model(config), request("x")).await;
        assert!(got.outcome.permanent, "{:?}", got.outcome);
        assert_eq!(got.outcome.status, StopReason::Failed);
        let message = got.outcome.error_message.as_deref().unwrap_or("");
        assert!(
            message.starts_with("response too large: ")
                && message.contains("passed 1280 KiB without ending")
                && message.ends_with("the rest of the response was not read"),
            "{message}"
        );
        let written = server.finished().await;
        assert!(written < STOPPED_EARLY, "read {written} bytes");
    }

    /// Only the first 64 KiB of an error response are read; the message holds its start.
    pub async fn only_the_start_of_a_huge_error_body_is_read(&self) {
        let server = self
            .server(vec![Canned::HugeError(
                500,
                "Internal Server Error",
                HUGE_BODY,
            )])
            .await;
        let got = generate(
            &mut self.model(self.config(&server, IDLE_TIMEOUT)),
            request("x"),
        )
        .await;
        assert!(got.messages.is_empty());
        assert_eq!(
            got.outcome,
            LlmOutcome::with_message(StopReason::Timeout, format!("500 {}", "x".repeat(500)))
        );
        let written = server.finished().await;
        assert!(written < STOPPED_EARLY, "read {written} bytes");
    }

    /// Under the default cap, 2 MiB of text in 4 KiB deltas (long for a model, far under
    /// 8 MiB) streams through whole.
    pub async fn the_default_cap_lets_a_long_message_through(&self) {
        let piece = "y".repeat(4096);
        let mut steps = self.text(&[]);
        steps.push(Step::Repeat(self.script.text_delta(&piece), 512));
        steps.push(Step::Chunk(self.script.finish(1, 1)));
        let server = self.server(vec![Canned::Stream(steps)]).await;
        let config = self.config(&server, IDLE_TIMEOUT);
        assert_eq!(config.max_message_bytes, crate::DEFAULT_MAX_MESSAGE_BYTES);
        let got = generate(&mut self.model(config), request("x")).await;
        assert_eq!(got.outcome, LlmOutcome::completed());
        let text = got
            .messages
            .iter()
            .find_map(|m| match m.model() {
                Some(ModelPayload::Text(t)) => Some(t.text.len()),
                _ => None,
            })
            .unwrap_or(0);
        assert_eq!(text, 2 * 1024 * 1024);
    }
}
