//! `penguin models test NAME` and `POST /api/models/test`: a model tried with one-line requests,
//! reporting how long it took to answer, whether its answer streamed, whether it calls a tool
//! and whether it takes an image, or the failure in the words the CLI uses everywhere else
//! ([`Failure::classify`]).
//!
//! Each check is a real request through the model's own adapter ([`build_llm`]): what works
//! here works in a session. The requests are small (a line of text, a 16-pixel image), and the
//! tool and image checks are skipped once the first request fails, since they would fail the
//! same way.

use std::time::{Duration, Instant};

use penguin_llm_providers::failure::Failure;
use penguin_llm_providers::{async_trait, CancellationToken, LlmRequest, MessageSink};
use penguin_omni_protocol::{
    build, ModelPayload, OmniMessage, Role, StopReason, StreamEventType, ToolDefinition,
};
use serde::Serialize;

use super::{build_llm, ModelContext, ModelSpec, Protocol};

/// A 16×16 red PNG: small enough for every provider's minimum, one colour a model can name.
const RED_PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAIAAACQkWg2AAAAFklEQVR42mP4z8BAEmIY1TCqYfhqAACQ+f8B8u7oVwAAAABJRU5ErkJggg==";

/// The tool the tool check offers.
const PING: &str = "ping";

/// What one check found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `works`, `fails` or `skipped`.
    pub status: CheckStatus,
    /// What was seen, for a person: the answer, or why it failed or was skipped.
    pub detail: String,
}

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    /// The model did it.
    Works,
    /// It did not: the request failed, or the answer was not what was asked.
    Fails,
    /// Not tried (the model could not be reached, or is configured without it).
    Skipped,
}

impl Check {
    fn works(detail: impl Into<String>) -> Check {
        Check {
            status: CheckStatus::Works,
            detail: detail.into(),
        }
    }
    fn fails(detail: impl Into<String>) -> Check {
        Check {
            status: CheckStatus::Fails,
            detail: detail.into(),
        }
    }
    fn skipped(detail: impl Into<String>) -> Check {
        Check {
            status: CheckStatus::Skipped,
            detail: detail.into(),
        }
    }
}

/// A failed request, classified: the same `kind`, `cause` and `hint` a failed task shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbeFailure {
    /// `connection_refused`, `auth`, `not_found`, … ([`penguin_llm_providers::failure::FailureKind`]),
    /// or `missing_key` when the key's variable is unset and nothing was sent.
    pub kind: String,
    /// The cause in a few words.
    pub cause: String,
    /// What to check.
    pub hint: Option<String>,
}

impl ProbeFailure {
    fn classify(status: StopReason, message: Option<&str>) -> ProbeFailure {
        let f = Failure::classify(status, message);
        ProbeFailure {
            kind: serde_json::to_value(f.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "other".into()),
            cause: f.cause,
            hint: f.hint.map(str::to_owned),
        }
    }
}

/// What [`probe`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    /// The model's name as configured.
    pub model: String,
    /// Its adapter.
    pub provider: String,
    /// Its upstream id.
    pub model_id: String,
    /// Whether the one-line request was answered.
    pub ok: bool,
    /// Milliseconds from sending the one-line request to the first thing the model sent.
    pub latency_ms: Option<u64>,
    /// Milliseconds until that answer was complete.
    pub total_ms: Option<u64>,
    /// The answer, on one line.
    pub reply: Option<String>,
    /// Whether the answer came in pieces as it was written.
    pub streaming: Check,
    /// Whether the model calls a tool it is offered.
    pub tools: Check,
    /// Whether the model takes an image (and names its colour).
    pub vision: Check,
    /// Why the one-line request failed.
    pub failure: Option<ProbeFailure>,
}

/// Records what a request streams, and when the first of it came.
struct Recorder {
    sent: Instant,
    first: Option<Duration>,
    messages: Vec<OmniMessage>,
}

#[async_trait]
impl MessageSink for Recorder {
    async fn emit(&mut self, msg: OmniMessage) {
        self.first.get_or_insert_with(|| self.sent.elapsed());
        self.messages.push(msg);
    }
}

struct Answer {
    status: StopReason,
    error: Option<String>,
    first: Option<Duration>,
    total: Duration,
    messages: Vec<OmniMessage>,
}

impl Answer {
    fn text(&self) -> String {
        let text: String = self
            .messages
            .iter()
            .filter_map(|m| match m.model() {
                Some(ModelPayload::Text(t)) if t.role == Role::Assistant => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" ");
        let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        match line.char_indices().nth(200) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line,
        }
    }

    fn deltas(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| {
                m.model()
                    .and_then(|p| match p {
                        ModelPayload::PartialText(p) => Some(p.event_type),
                        ModelPayload::PartialThinking(p) => Some(p.event_type),
                        ModelPayload::PartialToolCall(p) => Some(p.event_type),
                        _ => None,
                    })
                    .is_some_and(|t| t == StreamEventType::Delta)
            })
            .count()
    }

    fn failure(&self) -> Option<ProbeFailure> {
        (self.status != StopReason::Completed)
            .then(|| ProbeFailure::classify(self.status, self.error.as_deref()))
    }
}

async fn ask(
    spec: &ModelSpec,
    tools: Vec<ToolDefinition>,
    input: Vec<OmniMessage>,
    timeout: Duration,
) -> Answer {
    let cx = ModelContext {
        system_prompt:
            "You are being tested by penguin, an agent harness. Answer in one short line.".into(),
        tools,
        ..ModelContext::default()
    };
    let sent = Instant::now();
    let mut llm = match build_llm(spec, cx) {
        Ok(llm) => llm,
        Err(e) => {
            return Answer {
                status: StopReason::Failed,
                error: Some(e.to_string()),
                first: None,
                total: sent.elapsed(),
                messages: Vec::new(),
            }
        }
    };
    let cancel = CancellationToken::new();
    let mut sink = Recorder {
        sent,
        first: None,
        messages: Vec::new(),
    };
    let request = LlmRequest {
        new_messages: input,
        cancel: cancel.clone(),
        thinking_level: None,
    };
    let outcome = tokio::time::timeout(timeout, llm.stream_generate(request, &mut sink)).await;
    let (status, error) = match outcome {
        Ok(o) => (o.status, o.error_message),
        Err(_) => {
            cancel.cancel();
            (
                StopReason::Timeout,
                Some(format!("no complete answer within {} s", timeout.as_secs())),
            )
        }
    };
    Answer {
        status,
        error,
        first: sink.first,
        total: sent.elapsed(),
        messages: sink.messages,
    }
}

/// Tries `spec` (configured as `name`): a one-line request (latency, streaming), then, if it
/// was answered, a request offering a tool and one with an image. `timeout` bounds each
/// request. The key is read from its variable as a session reads it; an unset one is reported
/// without sending anything.
pub async fn probe(name: &str, spec: &ModelSpec, timeout: Duration) -> ProbeReport {
    let mut report = ProbeReport {
        model: name.to_owned(),
        provider: spec.protocol.as_str().to_owned(),
        model_id: spec.model_id.clone(),
        ok: false,
        latency_ms: None,
        total_ms: None,
        reply: None,
        streaming: Check::skipped("the model did not answer"),
        tools: Check::skipped("the model did not answer"),
        vision: Check::skipped("the model did not answer"),
        failure: None,
    };
    if let Some(problem) = spec.missing_key(|k| std::env::var(k).ok()) {
        report.failure = Some(ProbeFailure {
            kind: "missing_key".into(),
            cause: problem,
            hint: Some("export the variable in the environment penguin runs in".into()),
        });
        return report;
    }

    let hello = ask(
        spec,
        Vec::new(),
        vec![build::user_text("Say hello in one short line.")],
        timeout,
    )
    .await;
    report.latency_ms = hello.first.map(|d| d.as_millis() as u64);
    report.total_ms = Some(hello.total.as_millis() as u64);
    if let Some(failure) = hello.failure() {
        report.failure = Some(failure);
        return report;
    }
    report.ok = true;
    report.reply = Some(hello.text());
    let deltas = hello.deltas();
    report.streaming = match deltas {
        0 => Check::fails("the answer came whole, not as it was written"),
        1 => Check::works("1 piece"),
        n => Check::works(format!("{n} pieces")),
    };
    if spec.protocol == Protocol::DEMO {
        report.tools = Check::works("the demo calls exec_command");
        report.vision = Check::skipped("the demo reads no images");
        return report;
    }

    let ping = ToolDefinition {
        name: PING.into(),
        description: "Answers pong. Call it when asked to.".into(),
        parameters: Some(serde_json::json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        })),
    };
    let tooled = ask(
        spec,
        vec![ping],
        vec![build::user_text(
            "Call the ping tool with text \"hi\". Do not answer in words.",
        )],
        timeout,
    )
    .await;
    report.tools = match tooled.failure() {
        Some(f) => Check::fails(f.cause),
        None => {
            let called = tooled.messages.iter().find_map(|m| match m.model() {
                Some(ModelPayload::ToolCall(c)) => Some((c.name.clone(), c.arguments.clone())),
                _ => None,
            });
            match called {
                Some((name, args)) if name == PING => Check::works(format!("called ping({args})")),
                Some((name, _)) => {
                    Check::fails(format!("called {name:?}, which it was not offered"))
                }
                None => Check::fails(format!(
                    "answered without calling the tool: {}",
                    tooled.text()
                )),
            }
        }
    };

    report.vision = if !spec.vision {
        Check::skipped("vision = false in config.toml")
    } else {
        let seen = ask(
            spec,
            Vec::new(),
            vec![
                build::user_text("What colour is this image? Answer with one word."),
                build::image_url(RED_PNG),
            ],
            timeout,
        )
        .await;
        match seen.failure() {
            Some(f) => Check::fails(f.cause),
            None if seen.text().to_lowercase().contains("red") => Check::works(seen.text()),
            None => Check::fails(format!(
                "took the image but did not see a red square: {}",
                seen.text()
            )),
        }
    };
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_demo_answers_streams_and_calls_its_tool() {
        let report = probe("demo", &ModelSpec::demo(), Duration::from_secs(30)).await;
        assert!(report.ok, "{report:?}");
        assert_eq!(report.streaming.status, CheckStatus::Works);
        assert!(report.reply.unwrap().contains("demo model"));
        assert_eq!(report.vision.status, CheckStatus::Skipped);
    }

    #[tokio::test]
    async fn nothing_listening_is_classified_and_the_rest_skipped() {
        // Port 9 (discard) on loopback: nothing listens there on a test machine.
        let spec = ModelSpec {
            protocol: Protocol::OPENAI_CHAT,
            base_url: "http://127.0.0.1:9/v1".into(),
            model_id: "m".into(),
            ..ModelSpec::demo()
        };
        let report = probe("local", &spec, Duration::from_secs(30)).await;
        assert!(!report.ok);
        let failure = report.failure.unwrap();
        assert_eq!(failure.kind, "connection_refused", "{failure:?}");
        assert!(failure.cause.contains("127.0.0.1:9"), "{failure:?}");
        assert_eq!(report.tools.status, CheckStatus::Skipped);
    }

    #[tokio::test]
    async fn an_unset_key_is_reported_before_anything_is_sent() {
        let spec = ModelSpec {
            protocol: Protocol::OPENAI_CHAT,
            base_url: "http://127.0.0.1:9/v1".into(),
            model_id: "m".into(),
            api_key_env: Some("PENGUIN_PROBE_TEST_UNSET_KEY".into()),
            ..ModelSpec::demo()
        };
        let report = probe("hosted", &spec, Duration::from_secs(30)).await;
        let failure = report.failure.unwrap();
        assert_eq!(failure.kind, "missing_key");
        assert!(failure.cause.contains("PENGUIN_PROBE_TEST_UNSET_KEY"));
        assert_eq!(report.latency_ms, None, "nothing was sent");
    }
}
