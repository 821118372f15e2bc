//! Compaction (protocol §2.12 *Compaction*, `docs/protocol.md#s2.12`) on the paused clock:
//! triggers, summarize and discard, the unusable-summary retry, mid-task compaction, manual
//! compaction, and the trace rotation that follows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::{
    ApprovalError, Approver, CancellationToken, Compactability, CompactionConfig, Engine,
    EngineConfig, Frame, InitialState, LlmFactory, RunOptions, TraceSink,
};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::{Llm, LlmOutcome};
use penguin_omni_protocol::validator::StreamValidator;
use penguin_omni_protocol::{
    build, ApprovalDecision, CompactionMode, OmniMessage, StopReason, StreamEventType, TokenCounts,
};

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl TraceSink for Recorder {
    fn record(&self, frame: &Frame) {
        self.0.lock().unwrap().push(describe(frame.message()));
    }
    fn rotate(&self) {
        self.0.lock().unwrap().push("ROTATE".into());
    }
}

fn describe(m: &OmniMessage) -> String {
    let content = m
        .model()
        .and_then(|p| p.content())
        .map(|c| format!(" {c:?}"))
        .unwrap_or_default();
    format!("{}{}", m.payload_type(), content)
}

struct AllowAll;

#[async_trait::async_trait]
impl Approver for AllowAll {
    async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        Ok(ApprovalDecision::Allow)
    }
}

fn step(message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(1),
        message,
    }
}

fn usage(total: u64) -> Step {
    step(build::token_usage(
        TokenCounts::new(0, total - 1, 1),
        TokenCounts::new(0, total - 1, 1),
    ))
}

fn text(t: &str, total: u64) -> ScriptedRequest {
    use StreamEventType::*;
    let ok = StopReason::Completed;
    let mut stream = Vec::new();
    if !t.is_empty() {
        stream.push(step(build::partial_text(Start, "", ok)));
        stream.push(step(build::partial_text(Delta, t, ok)));
        stream.push(step(build::partial_text(Stop, "", ok)));
        stream.push(step(build::assistant_text(t, ok)));
    }
    stream.push(usage(total));
    ScriptedRequest {
        stream,
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    }
}

struct Setup {
    engine: Engine,
    model: ScriptedModel,
    trace: Recorder,
}

fn setup(
    requests: Vec<ScriptedRequest>,
    compaction: CompactionConfig,
    tools: ScriptedEnvironment,
) -> Setup {
    let model = ScriptedModel::new(requests);
    let trace = Recorder::default();
    let config = EngineConfig {
        reconnect_backoff: Duration::from_millis(10),
        compaction: Some(compaction),
        ..EngineConfig::default()
    };
    let engine = Engine::with_parts(
        Box::new(model.clone()),
        Arc::new(tools),
        config,
        Some(Arc::new(trace.clone())),
        InitialState::default(),
    );
    engine.set_context_head(build::user_text("META"), Some(build::user_text("TOOLS")));
    let next = model.clone();
    let factory: LlmFactory = Arc::new(move |_tokens| Box::new(next.clone()) as Box<dyn Llm>);
    engine.enable_compaction(factory);
    Setup {
        engine,
        model,
        trace,
    }
}

fn by_size(limit: u64, mode: CompactionMode) -> CompactionConfig {
    CompactionConfig {
        max_context_length: limit,
        mode,
        prompt: "SUMMARIZE".into(),
        ..CompactionConfig::default()
    }
}

async fn run(engine: &Engine, prompt: &str) -> Vec<OmniMessage> {
    let options = RunOptions::new(Arc::new(AllowAll));
    let frames: Vec<Frame> = engine
        .run(vec![build::user_text(prompt)], options)
        .unwrap()
        .collect()
        .await;
    frames.into_iter().map(|f| f.message().clone()).collect()
}

fn kinds(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter().map(describe).collect()
}

#[tokio::test(start_paused = true)]
async fn summarize_at_a_boundary_then_the_next_run_starts_from_the_summary() {
    let s = setup(
        vec![
            text("hi", 150),
            text("[summary]the gist[/summary]", 40),
            text("ok", 30),
        ],
        by_size(100, CompactionMode::Summarize),
        ScriptedEnvironment::default(),
    );
    let first = run(&s.engine, "hello").await;
    assert!(StreamValidator::validate(first.iter()).is_empty());
    let tail: Vec<String> = kinds(&first).into_iter().skip(7).collect();
    assert_eq!(
        tail,
        [
            "compaction_begin",
            "partial_text \"\"",
            "partial_text \"[summary]the gist[/summary]\"",
            "partial_text \"\"",
            "token_usage",
            "compaction_end"
        ]
    );
    assert_eq!(
        serde_json::to_string(first[7].event().unwrap()).unwrap(),
        r#"{"type":"compaction_begin","reason":"context","mode":"summarize","context":150,"turns":1}"#
    );
    assert_eq!(
        serde_json::to_string(first.last().unwrap().event().unwrap()).unwrap(),
        r#"{"type":"compaction_end","reason":"context","mode":"summarize","status":"completed","attempt":1}"#
    );
    assert_eq!(s.engine.compactability(), Compactability::JustCompacted);
    assert_eq!(s.engine.counters().session_turns, 0);

    run(&s.engine, "next").await;
    let requests = s.model.requests();
    assert_eq!(kinds(&requests[1]), ["text \"SUMMARIZE\""]);
    assert_eq!(
        kinds(&requests[2]),
        [
            "text \"[context_summary]\\nthe gist\\n[/context_summary]\"",
            "text \"next\""
        ]
    );
    let trace = s.trace.0.lock().unwrap().clone();
    let rotate = trace
        .iter()
        .position(|r| r == "ROTATE")
        .expect("the new context starts a new file");
    assert_eq!(
        trace[..rotate],
        [
            "text \"hello\"",
            "request_begin",
            "text \"hi\"",
            "token_usage",
            "request_end",
            "compaction_begin",
            "text \"SUMMARIZE\"",
            "request_begin",
            "text \"[summary]the gist[/summary]\"",
            "token_usage",
            "request_end",
            "compaction_end",
        ]
    );
    assert_eq!(
        trace[rotate + 1..rotate + 5],
        [
            "text \"META\"",
            "text \"TOOLS\"",
            "text \"[context_summary]\\nthe gist\\n[/context_summary]\"",
            "text \"next\""
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn discard_drops_the_context_without_a_request() {
    let s = setup(
        vec![text("hi", 150), text("fresh", 20)],
        by_size(100, CompactionMode::Discard),
        ScriptedEnvironment::default(),
    );
    let first = run(&s.engine, "hello").await;
    assert_eq!(kinds(&first)[7..], ["compaction_begin", "compaction_end"]);
    run(&s.engine, "again").await;
    let requests = s.model.requests();
    assert_eq!(requests.len(), 2, "discard makes no compaction request");
    assert_eq!(kinds(&requests[1]), ["text \"again\""]);
    assert!(s.trace.0.lock().unwrap().contains(&"ROTATE".to_string()));
}

#[tokio::test(start_paused = true)]
async fn an_unusable_reply_is_retried_with_guidance() {
    let s = setup(
        vec![
            text("hi", 150),
            text("", 10),
            text("[summary]second try[/summary]", 20),
        ],
        by_size(100, CompactionMode::Summarize),
        ScriptedEnvironment::default(),
    );
    let first = run(&s.engine, "hello").await;
    assert_eq!(
        serde_json::to_string(first.last().unwrap().event().unwrap()).unwrap(),
        r#"{"type":"compaction_end","reason":"context","mode":"summarize","status":"completed","attempt":2}"#
    );
    let retry = &s.model.requests()[2];
    assert!(kinds(retry)[0].starts_with("text \"Your previous reply was not a usable summary."));
    assert_eq!(kinds(retry)[1], "text \"SUMMARIZE\"");
}

#[tokio::test(start_paused = true)]
async fn mid_task_compaction_folds_the_outputs_and_continues() {
    let call = build::tool_call("probe", "{}", "call_1", StopReason::Completed, None);
    let tools = ScriptedEnvironment::new(HashMap::from([(
        "call_1".to_string(),
        vec![step(build::tool_call_output(
            "probe result",
            "call_1",
            StopReason::Completed,
        ))],
    )]));
    let first_turn = ScriptedRequest {
        stream: vec![step(call), usage(150)],
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    };
    let s = setup(
        vec![
            first_turn,
            text("[summary]probed[/summary]", 40),
            text("done", 30),
        ],
        by_size(100, CompactionMode::Summarize),
        tools,
    );
    let msgs = run(&s.engine, "probe it").await;
    assert!(
        StreamValidator::validate(msgs.iter()).is_empty(),
        "{:?}",
        StreamValidator::validate(msgs.iter())
    );
    let requests = s.model.requests();
    assert_eq!(
        kinds(&requests[1]),
        ["tool_call_output \"probe result\"", "text \"SUMMARIZE\""]
    );
    assert_eq!(
        kinds(&requests[2]),
        ["text \"[context_summary]\\nprobed\\n[/context_summary]\""]
    );
    assert_eq!(kinds(&msgs).last().unwrap(), "request_end");
}

#[tokio::test(start_paused = true)]
async fn manual_compaction_and_its_preconditions() {
    let s = setup(
        vec![
            text("hi", 20),
            text("[summary]short[/summary]", 10),
            text("ok", 10),
        ],
        by_size(0, CompactionMode::Summarize),
        ScriptedEnvironment::default(),
    );
    assert_eq!(s.engine.compactability(), Compactability::Empty);
    let nothing: Vec<Frame> = s
        .engine
        .compact(CancellationToken::new())
        .unwrap()
        .collect()
        .await;
    assert!(nothing.is_empty());
    run(&s.engine, "hello").await;
    assert_eq!(s.engine.compactability(), Compactability::Ok);
    let frames: Vec<Frame> = s
        .engine
        .compact(CancellationToken::new())
        .unwrap()
        .collect()
        .await;
    assert_eq!(
        frames[0].json().split_once(",\"type\"").unwrap().1,
        r#":"event_msg","payload":{"type":"compaction_begin","reason":"manual","mode":"summarize","context":20,"turns":1}}"#
    );
    run(&s.engine, "after").await;
    assert_eq!(
        kinds(&s.model.requests()[2])[0],
        "text \"[context_summary]\\nshort\\n[/context_summary]\""
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_model_factory_nothing_compacts() {
    let model = ScriptedModel::new(vec![text("hi", 500)]);
    let config = EngineConfig {
        compaction: Some(by_size(100, CompactionMode::Summarize)),
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        Box::new(model),
        Arc::new(ScriptedEnvironment::default()),
        config,
    );
    assert_eq!(engine.compactability(), Compactability::Unsupported);
    let msgs = run(&engine, "hello").await;
    assert!(!kinds(&msgs).iter().any(|k| k.starts_with("compaction")));
}
