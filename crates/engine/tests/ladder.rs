//! The reconnect ladder, terminal outcomes, backoff interrupts, steering and the default
//! approver, each checked on tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::{
    CancellationToken, DenyAll, Engine, EngineConfig, Frame, RunOptions, Steered,
};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::LlmOutcome;
use penguin_omni_protocol::{
    build, Body, EventPayload, InlineData, ModelPayload, OmniMessage, Role, StopReason, TokenCounts,
};

fn usage() -> Step {
    Step {
        delay: Duration::from_millis(1),
        message: build::token_usage(TokenCounts::new(0, 10, 1), TokenCounts::new(0, 10, 1)),
    }
}

fn text(t: &str) -> Step {
    Step {
        delay: Duration::from_millis(1),
        message: build::assistant_text(t, StopReason::Completed),
    }
}

fn ok(steps: Vec<Step>) -> ScriptedRequest {
    ScriptedRequest {
        stream: steps,
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    }
}

fn fail(status: StopReason, msg: Option<&str>) -> ScriptedRequest {
    ScriptedRequest {
        stream: vec![],
        outcome: LlmOutcome {
            status,
            error_message: msg.map(Into::into),
            permanent: false,
        },
        end_delay: std::time::Duration::ZERO,
    }
}

fn engine(requests: Vec<ScriptedRequest>, config: EngineConfig) -> (Engine, ScriptedModel) {
    let model = ScriptedModel::new(requests);
    let engine = Engine::new(
        Box::new(model.clone()),
        Arc::new(ScriptedEnvironment::default()),
        config,
    );
    (engine, model)
}

async fn collect(engine: &Engine, options: RunOptions) -> Vec<OmniMessage> {
    let stream = engine.run(vec![build::user_text("go")], options).unwrap();
    stream.map(|f: Frame| f.message().clone()).collect().await
}

fn events(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter()
        .filter_map(OmniMessage::event)
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

fn quick() -> EngineConfig {
    EngineConfig {
        max_reconnects: 2,
        reconnect_backoff: Duration::from_millis(100),
        reconnect_backoff_max: Duration::from_millis(150),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn exhaustion_reason_follows_the_last_failure() {
    for (status, reason) in [
        (StopReason::Timeout, "reconnect failed after 2 retries"),
        (
            StopReason::Malformed,
            "malformed response failed after 2 retries",
        ),
        (
            StopReason::Failed,
            "llm request failed after 2 retries: boom",
        ),
    ] {
        let (engine, model) = engine(
            vec![
                fail(status, Some("boom")),
                fail(status, Some("boom")),
                fail(status, Some("boom")),
            ],
            quick(),
        );
        let msgs = collect(&engine, RunOptions::new(Arc::new(DenyAll))).await;
        let ev = events(&msgs);
        let s = status.as_str();
        assert_eq!(
            ev,
            [
                r#"{"type":"request_begin"}"#.to_string(),
                format!(
                    r#"{{"type":"request_end","status":"{s}","error_message":"boom","attempt":1,"retry_in_ms":100}}"#
                ),
                r#"{"type":"request_begin"}"#.to_string(),
                format!(
                    r#"{{"type":"request_end","status":"{s}","error_message":"boom","attempt":2,"retry_in_ms":150}}"#
                ),
                r#"{"type":"request_begin"}"#.to_string(),
                format!(
                    r#"{{"type":"request_end","status":"{s}","error_message":"boom","attempt":3}}"#
                ),
                format!(r#"{{"type":"abort","reason":"{reason}"}}"#),
            ]
        );
        assert_eq!(model.requests().len(), 3);
        // Nothing was streamed by the failed attempts, so the retry input is unchanged.
        assert!(model.requests().iter().all(|r| r.len() == 1));
        assert_eq!(
            engine.pending_carry_over().len(),
            1,
            "the unsent prompt is kept"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn auth_and_permanent_failures_stop_at_once() {
    let (e, model) = engine(
        vec![fail(StopReason::Auth, Some("bad key")), ok(vec![])],
        quick(),
    );
    let ev = events(&collect(&e, RunOptions::new(Arc::new(DenyAll))).await);
    assert_eq!(
        ev.last().unwrap(),
        r#"{"type":"abort","reason":"llm request error: bad key"}"#
    );
    assert_eq!(
        ev[1],
        r#"{"type":"request_end","status":"auth","error_message":"bad key","attempt":1}"#
    );
    assert_eq!(model.requests().len(), 1);

    let permanent = ScriptedRequest {
        stream: vec![],
        outcome: LlmOutcome {
            status: StopReason::Failed,
            error_message: None,
            permanent: true,
        },
        end_delay: std::time::Duration::ZERO,
    };
    let (e, model) = engine(vec![permanent, ok(vec![])], quick());
    let ev = events(&collect(&e, RunOptions::new(Arc::new(DenyAll))).await);
    assert_eq!(
        ev[1], r#"{"type":"request_end","status":"failed","attempt":1}"#,
        "no retry_in_ms for a permanent failure"
    );
    assert_eq!(
        ev.last().unwrap(),
        r#"{"type":"abort","reason":"llm request error: unknown"}"#
    );
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn abort_during_backoff_and_skip_wait() {
    let config = EngineConfig {
        reconnect_backoff: Duration::from_secs(10),
        reconnect_backoff_max: Duration::from_secs(10),
        ..quick()
    };
    let (e, _) = engine(
        vec![
            fail(StopReason::Timeout, None),
            ok(vec![text("hi"), usage()]),
        ],
        config.clone(),
    );
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.cancel();
    });
    let ev = events(&collect(&e, RunOptions::new(Arc::new(DenyAll)).with_cancel(cancel)).await);
    assert_eq!(
        ev.last().unwrap(),
        r#"{"type":"abort","reason":"aborted during reconnect backoff"}"#
    );
    assert!(!e.skip_reconnect_wait(), "no wait in progress once idle");

    let (e, _) = engine(
        vec![
            fail(StopReason::Timeout, None),
            ok(vec![text("hi"), usage()]),
        ],
        config,
    );
    let skipper = e.clone();
    let started = tokio::time::Instant::now();
    let waiter = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if skipper.skip_reconnect_wait() {
                return;
            }
        }
    });
    let ev = events(&collect(&e, RunOptions::new(Arc::new(DenyAll))).await);
    waiter.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the wait was cut short"
    );
    assert_eq!(
        ev.last().unwrap(),
        r#"{"type":"request_end","status":"completed","attempt":2}"#
    );
}

#[tokio::test(start_paused = true)]
async fn steering_keeps_the_task_alive_and_is_streamed_and_sent() {
    let slow = ScriptedRequest {
        stream: vec![
            Step {
                delay: Duration::from_millis(100),
                ..text("first")
            },
            usage(),
        ],
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    };
    let (e, model) = engine(vec![slow, ok(vec![text("second"), usage()])], quick());
    assert_eq!(e.steer(vec![build::user_text("x")]), Steered::NotRunning);
    let stream = e
        .run(
            vec![build::user_text("go")],
            RunOptions::new(Arc::new(DenyAll)),
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(e.steer(vec![build::user_text("   ")]), Steered::Empty);
    let Steered::Queued(dropped) = e.steer(vec![build::user_text("not this")]) else {
        panic!("queued")
    };
    assert!(e.unsteer(dropped));
    assert!(!e.unsteer(dropped));
    assert!(matches!(
        e.steer(vec![build::user_text("faster"), build::user_text("please")]),
        Steered::Queued(_)
    ));
    let msgs: Vec<OmniMessage> = stream.map(|f| f.message().clone()).collect().await;
    let steering = "[user_steering]\nfaster\n\nplease\n[/user_steering]";
    assert!(
        msgs.iter()
            .any(|m| m.model().and_then(|p| p.content()) == Some(steering)),
        "steering is streamed"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1][0].model().unwrap().content(), Some(steering));
    assert!(!e.is_running());
}

/// One queued input becomes one `[user_steering]` text holding its user texts, followed by
/// everything else it held, unchanged; an image alone still gets the (empty) steering text.
#[tokio::test(start_paused = true)]
async fn steering_wraps_user_texts_and_keeps_the_rest_after_them() {
    let slow = ok(vec![
        Step {
            delay: Duration::from_millis(100),
            ..text("first")
        },
        usage(),
    ]);
    let (e, model) = engine(vec![slow, ok(vec![text("second"), usage()])], quick());
    let stream = e
        .run(
            vec![build::user_text("go")],
            RunOptions::new(Arc::new(DenyAll)),
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let image = build::image_url("https://example.com/a.png");
    assert!(matches!(e.steer(vec![image.clone()]), Steered::Queued(_)));
    let said = build::assistant_text("assistant steer", StopReason::Completed);
    assert!(matches!(
        e.steer(vec![said.clone(), build::user_text("user steer")]),
        Steered::Queued(_)
    ));
    // Only an image_url or non-blank text is worth steering with.
    assert_eq!(
        e.steer(vec![OmniMessage::new(Body::Model(
            ModelPayload::InlineData(InlineData {
                role: Role::User,
                data: "aGk=".into(),
                mime_type: "image/png".into(),
                stop_reason: None,
                fidelity: None,
            })
        ))]),
        Steered::Empty
    );
    let _: Vec<Frame> = stream.collect().await;
    let sent: Vec<String> = model.requests()[1]
        .iter()
        .map(|m| {
            serde_json::to_value(m.model().unwrap())
                .unwrap()
                .to_string()
        })
        .collect();
    let expected = [
        build::user_text("[user_steering]\n\n[/user_steering]"),
        image,
        build::user_text("[user_steering]\nuser steer\n[/user_steering]"),
        said,
    ]
    .map(|m| {
        serde_json::to_value(m.model().unwrap())
            .unwrap()
            .to_string()
    });
    assert_eq!(sent, expected);
}

#[tokio::test(start_paused = true)]
async fn deny_all_denies_every_call() {
    let call = Step {
        delay: Duration::from_millis(1),
        message: build::tool_call("rm", "{}", "call_x", StopReason::Completed, None),
    };
    let (e, model) = engine(
        vec![ok(vec![call, usage()]), ok(vec![text("ok"), usage()])],
        quick(),
    );
    let msgs = collect(&e, RunOptions::new(Arc::new(DenyAll))).await;
    let denial = msgs
        .iter()
        .find(|m| {
            m.tool_call_id() == Some("call_x")
                && m.model()
                    .is_some_and(|p| p.type_name() == "tool_call_output")
        })
        .unwrap();
    assert_eq!(
        denial.to_json().split_once(",\"type\"").unwrap().1,
        r#":"model_msg","payload":{"type":"tool_call_output","role":"user","output":"Tool call denied by user.","tool_call_id":"call_x","stop_reason":"aborted"}}"#
    );
    assert_eq!(
        model.requests()[1].len(),
        1,
        "the denial is re-fed to the model"
    );
    assert!(matches!(
        msgs.iter().find_map(OmniMessage::event),
        Some(EventPayload::RequestBegin)
    ));
}

#[tokio::test(start_paused = true)]
async fn aborted_before_start_keeps_the_input() {
    let (e, model) = engine(vec![ok(vec![text("hi"), usage()])], quick());
    let cancel = CancellationToken::new();
    cancel.cancel();
    let ev = events(&collect(&e, RunOptions::new(Arc::new(DenyAll)).with_cancel(cancel)).await);
    assert_eq!(ev, [r#"{"type":"abort","reason":"aborted by user"}"#]);
    assert!(model.requests().is_empty());
    assert_eq!(e.pending_carry_over().len(), 1);
}

/// A tool that honours the interrupt by just returning leaves its call to the carry-over's
/// interrupted placeholder, not a made-up tool error.
#[tokio::test(start_paused = true)]
async fn a_tool_that_returns_on_interrupt_gets_the_interrupted_placeholder() {
    struct Quits;
    #[async_trait::async_trait]
    impl penguin_engine::Environment for Quits {
        async fn execute(
            &self,
            request: penguin_engine::ToolCallRequest,
            _sink: &mut dyn penguin_engine::MessageSink,
        ) {
            request.cancel.cancelled().await;
        }
        fn tools(&self) -> Vec<penguin_omni_protocol::ToolDefinition> {
            Vec::new()
        }
        fn permission(&self, _name: &str) -> penguin_engine::Permission {
            penguin_engine::Permission::Read
        }
    }
    struct Yes;
    #[async_trait::async_trait]
    impl penguin_engine::Approver for Yes {
        async fn approve(
            &self,
            _c: &OmniMessage,
        ) -> Result<penguin_omni_protocol::ApprovalDecision, penguin_engine::ApprovalError>
        {
            Ok(penguin_omni_protocol::ApprovalDecision::Allow)
        }
    }
    let call = Step {
        delay: Duration::from_millis(1),
        message: build::tool_call("wait", "{}", "call_w", StopReason::Completed, None),
    };
    let model = ScriptedModel::new(vec![ok(vec![call, usage()])]);
    let engine = Engine::new(Box::new(model), Arc::new(Quits), quick());
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.cancel();
    });
    let msgs = collect(&engine, RunOptions::new(Arc::new(Yes)).with_cancel(cancel)).await;
    assert!(
        !msgs.iter().any(|m| m
            .model()
            .is_some_and(|p| p.type_name() == "tool_call_output")),
        "nothing made up on the stream"
    );
    let carry = engine.pending_carry_over();
    assert_eq!(carry.len(), 1);
    assert_eq!(
        carry[0].model().unwrap().content(),
        Some("[interrupted: tool aborted by user]")
    );
}

/// Only a run takes steering; a manual compaction does not.
#[tokio::test(start_paused = true)]
async fn steering_is_refused_outside_a_run() {
    let (e, _) = engine(vec![ok(vec![text("hi"), usage()])], quick());
    let stream = e.compact(CancellationToken::new()).unwrap();
    assert_eq!(e.steer(vec![build::user_text("x")]), Steered::NotRunning);
    let _: Vec<Frame> = stream.collect().await;
}

/// A 429 or 503's `Retry-After` (carried in the message by the HTTP shell) sets the wait
/// before the next attempt, announced in `retry_in_ms`, capped at `reconnect_backoff_max`;
/// a failure that asks nothing keeps the ladder's own delay. Timed on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_retry_after_sets_the_wait_within_the_ceiling() {
    let config = EngineConfig {
        max_reconnects: 3,
        reconnect_backoff: Duration::from_millis(100),
        reconnect_backoff_max: Duration::from_secs(30),
        ..Default::default()
    };
    let asked = |secs: u64| {
        penguin_llm_providers::failure::with_retry_after(
            "429 Rate limit reached",
            Duration::from_secs(secs),
        )
    };
    let (engine, model) = engine(
        vec![
            fail(StopReason::Timeout, Some(&asked(7))),
            fail(StopReason::Timeout, Some(&asked(120))),
            fail(StopReason::Timeout, Some("503 Service Unavailable")),
            ok(vec![text("hi"), usage()]),
        ],
        config,
    );
    let start = tokio::time::Instant::now();
    let stream = engine
        .run(
            vec![build::user_text("go")],
            RunOptions::new(Arc::new(DenyAll)),
        )
        .unwrap();
    let timed: Vec<(u128, String)> = stream
        .filter_map(|f: Frame| async move {
            f.message()
                .event()
                .map(|e| serde_json::to_string(e).unwrap())
        })
        .map(|e| (start.elapsed().as_millis(), e))
        .collect()
        .await;
    let begins: Vec<u128> = timed
        .iter()
        .filter(|(_, e)| e.contains("request_begin"))
        .map(|(t, _)| *t)
        .collect();
    // 7 s as asked, then 30 s (120 asked, the ceiling), then the ladder's third rung (400 ms).
    assert_eq!(begins.len(), 4, "{timed:?}");
    assert_eq!(begins[1] - begins[0], 7_000, "{timed:?}");
    assert_eq!(begins[2] - begins[1], 30_000, "{timed:?}");
    assert_eq!(begins[3] - begins[2], 400, "{timed:?}");
    let retry_in: Vec<&str> = timed
        .iter()
        .filter(|(_, e)| e.contains("request_end"))
        .map(|(_, e)| e.as_str())
        .collect();
    assert!(
        retry_in[0].contains(r#""attempt":1,"retry_in_ms":7000"#),
        "{retry_in:?}"
    );
    assert!(
        retry_in[1].contains(r#""attempt":2,"retry_in_ms":30000"#),
        "{retry_in:?}"
    );
    assert!(
        retry_in[2].contains(r#""attempt":3,"retry_in_ms":400"#),
        "{retry_in:?}"
    );
    assert!(
        retry_in[0].contains("(Retry-After: 7 s)"),
        "the message says what was asked: {retry_in:?}"
    );
    assert_eq!(model.requests().len(), 4);
}
