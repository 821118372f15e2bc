//! The protocol's timelines as snapshots: each reads like the numbered timeline of §0.4
//! (`docs/protocol.md#s0.4`), one line per message (a segment's consecutive fragments on
//! one line).

#[path = "support.rs"]
mod support;

use penguin::omni_protocol::validator::StreamValidator;
use penguin::scenario::{run_scenario_blocking, Scenario, ScenarioOutput};

fn run_file(name: &str) -> ScenarioOutput {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(format!("{name}.json"));
    run_scenario_blocking(Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap())
        .unwrap()
}

fn both(out: &ScenarioOutput) -> String {
    let violations = StreamValidator::validate(out.stream.iter().map(|f| f.message()));
    assert!(violations.is_empty(), "{violations:?}");
    format!(
        "stream:\n{}\ntrace:\n{}",
        support::timeline(&out.stream),
        support::timeline(&out.trace)
    )
}

/// §0.4's 17-line turn with two tool calls: B finishes first, A lands after request_end.
#[test]
fn seed_two_tools() {
    let out = run_file("seed-two-tools");
    insta::assert_snapshot!("seed_two_tools", both(&out));
}

/// A denial: approval_decision(deny) followed at once by the synthetic aborted output.
#[test]
fn deny_one() {
    insta::assert_snapshot!("deny_one", both(&run_file("deny-one")));
}

/// User interrupt: the open segment is closed, abort is the run's last message, carry-over
/// reaches only the next request.
#[test]
fn interrupt_mid_stream() {
    let out = run_file("interrupt-mid-stream");
    let requests = support::requests_timeline(&out.requests);
    insta::assert_snapshot!(
        "interrupt_mid_stream",
        format!("{}\n{requests}", both(&out))
    );
}

/// Automatic reconnect: request_end(timeout, attempt 1, retry in) then a fresh request_begin;
/// the [turn_retried] block is model-visible only.
#[test]
fn reconnect() {
    let out = run_file("reconnect-timeout-then-ok");
    let requests = support::requests_timeline(&out.requests);
    insta::assert_snapshot!("reconnect", format!("{}\n{requests}", both(&out)));
}

/// max_turns reached: a length notice ends the run (no abort); the unsent tool output is kept
/// as carry-over for the next run.
#[test]
fn max_turns() {
    let scenario = r#"{
      "engine": {"max_turns": 1},
      "approvals": {"default": "allow"},
      "llm": [
        {"stream": [
          {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "tool_call", "role": "assistant", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}", "tool_call_id": "call_1", "stop_reason": "completed"}}},
          {"delay_ms": 1, "message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 10, "output": 5, "total": 15}, "request": {"cache_read": 0, "cache_write": 10, "output": 5, "total": 15}}}}
        ]},
        {"stream": [
          {"delay_ms": 1, "message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "Listed.", "stop_reason": "completed"}}},
          {"delay_ms": 1, "message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 30, "output": 7, "total": 37}, "request": {"cache_read": 0, "cache_write": 20, "output": 2, "total": 22}}}}
        ]}
      ],
      "tools": {"call_1": {"stream": [{"delay_ms": 5, "message": {"type": "model_msg", "payload": {"type": "tool_call_output", "role": "user", "output": "a b", "tool_call_id": "call_1", "stop_reason": "completed"}}}]}},
      "runs": [
        {"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "list"}}]},
        {"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "go on"}}]}
      ]
    }"#;
    let out = run_scenario_blocking(Scenario::parse(scenario).unwrap()).unwrap();
    let requests = support::requests_timeline(&out.requests);
    insta::assert_snapshot!("max_turns", format!("{}\n{requests}", both(&out)));
}

/// The prompt is written to the Trace, never echoed onto the stream.
#[test]
fn prompt_not_echoed() {
    let out = run_file("seed-two-tools");
    let prompt = |f: &penguin::omni_protocol::Frame| {
        f.message().model().is_some_and(|p| {
            p.role() == penguin::omni_protocol::Role::User && p.type_name() == "text"
        })
    };
    assert!(
        !out.stream.iter().any(prompt),
        "the prompt is not on the stream"
    );
    assert!(
        prompt(&out.trace[0]),
        "the prompt is the trace's first record"
    );
    insta::assert_snapshot!(
        "prompt_not_echoed",
        format!(
            "stream starts:\n{}\ntrace starts:\n{}",
            support::timeline(&out.stream[..1]),
            support::timeline(&out.trace[..2])
        )
    );
}

/// Compaction at a task boundary: compaction_begin → the summary streamed as partial_text →
/// that request's token_usage → compaction_end; the request itself is in the Trace only, and the
/// next run's trace starts a new file with the session head and the summary.
#[test]
fn compaction() {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use penguin::engine::scripted::ScriptedEnvironment;
    use penguin::engine::{CompactionConfig, Engine, EngineConfig, InitialState, Llm, RunOptions};
    use penguin::llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
    use penguin::llm_providers::LlmOutcome;
    use penguin::omni_protocol::{build, StopReason, StreamEventType::*, TokenCounts};
    use penguin::scenario::MemoryTrace;

    let ok = StopReason::Completed;
    let step = |m| Step {
        delay: Duration::from_millis(1),
        message: m,
    };
    let usage = |total: u64| {
        step(build::token_usage(
            TokenCounts::new(0, total - 2, 2),
            TokenCounts::new(0, total - 2, 2),
        ))
    };
    let turn = |t: &str, total| ScriptedRequest {
        stream: vec![
            step(build::partial_text(Start, "", ok)),
            step(build::partial_text(Delta, t, ok)),
            step(build::partial_text(Stop, "", ok)),
            step(build::assistant_text(t, ok)),
            usage(total),
        ],
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    };
    let model = ScriptedModel::new(vec![
        turn("Done.", 140_000),
        turn("[summary]We did it.[/summary]", 900),
        turn("Continuing.", 1200),
    ]);
    let trace = MemoryTrace::default();
    let config = EngineConfig {
        compaction: Some(CompactionConfig::default()),
        ..EngineConfig::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (stream, requests) = rt.block_on(async {
        let engine = Engine::with_parts(
            Box::new(model.clone()),
            Arc::new(ScriptedEnvironment::default()),
            config,
            Some(Arc::new(trace.clone())),
            InitialState::default(),
        );
        engine.set_context_head(build::user_text("(session_meta)"), None);
        let next = model.clone();
        engine.enable_compaction(Arc::new(move |_| Box::new(next.clone()) as Box<dyn Llm>));
        let mut all: Vec<penguin::omni_protocol::Frame> = engine
            .run(
                vec![build::user_text("Do it.")],
                RunOptions::new(std::sync::Arc::new(penguin::engine::DenyAll)),
            )
            .unwrap()
            .collect()
            .await;
        all.extend(
            engine
                .run(
                    vec![build::user_text("Go on.")],
                    RunOptions::new(std::sync::Arc::new(penguin::engine::DenyAll)),
                )
                .unwrap()
                .collect::<Vec<_>>()
                .await,
        );
        (all, model.requests())
    });
    let violations = StreamValidator::validate(stream.iter().map(|f| f.message()));
    assert!(violations.is_empty(), "{violations:?}");
    let req = support::requests_timeline(&requests);
    insta::assert_snapshot!(
        "compaction",
        format!(
            "stream:\n{}\ntrace:\n{}\n{req}",
            support::timeline(&stream),
            support::timeline(&trace.records())
        )
    );
}

/// A background notice arriving while a tool runs: it waits for the next input assembly and
/// goes out before the user's steering (the reference's v2 scenario).
#[test]
fn notice_mid_tool() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios-v2")
        .join("notice-during-tool-before-steering.json");
    let out =
        run_scenario_blocking(Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap())
            .unwrap();
    let requests = support::requests_timeline(&out.requests);
    insta::assert_snapshot!("notice_mid_tool", format!("{}\n{requests}", both(&out)));
}

/// A background notice arriving while the session is idle: the next run delivers it after its
/// prompt, in the same request, and the model answers both.
#[test]
fn notice_at_an_idle_session() {
    let notice = penguin::omni_protocol::background::BackgroundTaskDone {
        kind: penguin::omni_protocol::background::BackgroundKind::Command,
        id: "proc-0a1b2c3d".into(),
        label: "cargo build".into(),
        completed: true,
        detail: "exit code 0".into(),
        output: "Finished".into(),
    }
    .notice();
    let usage = r#"{"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 10}}}"#;
    let text = |t: &str| {
        format!(
            r#"{{"stream": [{{"delay_ms": 1, "message": {{"type": "model_msg", "payload": {{"type": "text", "role": "assistant", "text": "{t}", "stop_reason": "completed"}}}}}}, {{"delay_ms": 1, "message": {usage}}}]}}"#
        )
    };
    let scenario = format!(
        r#"{{
          "llm": [{}, {}],
          "runs": [
            {{"input": [{{"type": "model_msg", "payload": {{"type": "text", "role": "user", "text": "start the build"}}}}]}},
            {{"input": [{{"type": "model_msg", "payload": {{"type": "text", "role": "user", "text": "and now?"}}}}],
              "notices": [{{"after_ms": 0, "message": {}}}]}}
          ]
        }}"#,
        text("Building in the background."),
        text("The build finished."),
        notice.to_json()
    );
    let out = run_scenario_blocking(Scenario::parse(&scenario).unwrap()).unwrap();
    let requests = support::requests_timeline(&out.requests);
    insta::assert_snapshot!(
        "notice_at_an_idle_session",
        format!("{}\n{requests}", both(&out))
    );
}
