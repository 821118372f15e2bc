//! Sessions resume from their trace: the next request carries the rebuilt carry-over before
//! the new prompt, and writing continues in the same file.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use penguin_agent::agent::{Agent, SessionModel};
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::AllowAll;
use penguin_engine::{CancellationToken, DenyAll, RunOptions};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::LlmOutcome;
use penguin_omni_protocol::{
    build, EventPayload, ModelPayload, OmniMessage, StopReason, TokenCounts,
};
use penguin_trace_store::{read_trace, ReadMode};

fn step(ms: u64, message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(ms),
        message,
    }
}

fn usage() -> Step {
    step(
        1,
        build::token_usage(TokenCounts::new(0, 10, 2), TokenCounts::new(0, 10, 2)),
    )
}

fn scripted(requests: Vec<ScriptedRequest>, name: &str) -> (SessionModel, ScriptedModel) {
    let model = ScriptedModel::new(requests);
    (
        SessionModel {
            llm: Box::new(model.clone()),
            provider: "scripted".into(),
            model_id: name.into(),
            context_window: None,
        },
        model,
    )
}

fn content(m: &OmniMessage) -> String {
    m.model()
        .and_then(|p| p.content())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn an_interrupted_session_resumes_with_its_carry_over_first() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();

    // Run 1: the model calls a slow tool; the user interrupts while it runs (Case A).
    let call = build::tool_call(
        "exec_command",
        r#"{"cmd":"sleep 60"}"#,
        "call_a",
        StopReason::Completed,
        None,
    );
    let (model, _) = scripted(
        vec![ScriptedRequest {
            stream: vec![step(1, call), usage()],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        }],
        "m",
    );
    let tool = vec![step(
        60_000,
        build::tool_call_output("never", "call_a", StopReason::Completed),
    )];
    let env = Arc::new(ScriptedEnvironment::new(HashMap::from([(
        "call_a".to_string(),
        tool,
    )])));
    let mut session = agent
        .create_session_with(model, ws.path(), env.clone(), None, None)
        .unwrap();
    let id = session.id().to_owned();
    let cancel = CancellationToken::new();
    let mut stream = session
        .run(
            vec![build::user_text("sleep")],
            RunOptions::new(Arc::new(AllowAll)).with_cancel(cancel.clone()),
        )
        .unwrap();
    let mut seen = Vec::new();
    while let Some(f) = stream.next().await {
        if matches!(f.message().event(), Some(EventPayload::RequestEnd { .. })) {
            cancel.cancel();
        }
        seen.push(f);
    }
    assert!(matches!(
        seen.last().unwrap().message().event(),
        Some(EventPayload::Abort { .. })
    ));
    session.writer().flush().unwrap();
    let first_file = session.writer().current_path();
    drop(session);

    // Run 2, in a "new process": the first request carries the interrupted output, then the prompt.
    let ok = ScriptedRequest {
        stream: vec![
            step(1, build::assistant_text("resumed", StopReason::Completed)),
            usage(),
        ],
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    };
    let (model, log) = scripted(vec![ok], "m");
    let mut resumed = agent
        .resume_session_with(&id, model.llm, |_| Ok(env))
        .unwrap();
    let frames: Vec<_> = resumed
        .run(
            vec![build::user_text("go on")],
            RunOptions::new(Arc::new(AllowAll)),
        )
        .unwrap()
        .collect()
        .await;
    assert_eq!(frames[0].message().payload_type(), "tool_list_ready");
    resumed.writer().flush().unwrap();
    let input = &log.requests()[0];
    assert_eq!(input.len(), 2, "{input:?}");
    assert_eq!(input[0].tool_call_id(), Some("call_a"));
    assert!(
        matches!(input[0].model(), Some(ModelPayload::ToolCallOutput(o)) if o.stop_reason == Some(StopReason::Aborted))
    );
    assert_eq!(content(&input[1]), "go on");
    assert_eq!(
        resumed.writer().current_path(),
        first_file,
        "writing continues in the same file"
    );

    let trace = read_trace(&first_file, ReadMode::Strict).unwrap().messages;
    assert_eq!(trace.iter().filter(|m| m.is_session_meta()).count(), 1);
    assert_eq!(
        content(trace.last().unwrap()),
        "",
        "the file ends with request_end"
    );
    assert!(trace.iter().any(|m| content(m) == "resumed"));
    assert_eq!(agent.sessions().unwrap()[0].state, "completed");
}

#[tokio::test]
async fn a_call_left_open_by_a_crash_gets_the_exited_placeholder() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    // A session whose process died while its tool ran: the trace ends after request_end.
    let call = build::tool_call(
        "exec_command",
        r#"{"cmd":"make"}"#,
        "call_x",
        StopReason::Completed,
        None,
    );
    let (model, _) = scripted(
        vec![ScriptedRequest {
            stream: vec![step(1, call), usage()],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        }],
        "m",
    );
    let tool = vec![step(
        60_000,
        build::tool_call_output("never", "call_x", StopReason::Completed),
    )];
    let env = Arc::new(ScriptedEnvironment::new(HashMap::from([(
        "call_x".to_string(),
        tool,
    )])));
    let mut session = agent
        .create_session_with(model, ws.path(), env.clone(), None, None)
        .unwrap();
    let id = session.id().to_owned();
    let mut stream = session
        .run(
            vec![build::user_text("build")],
            RunOptions::new(Arc::new(AllowAll)),
        )
        .unwrap();
    while let Some(f) = stream.next().await {
        if matches!(f.message().event(), Some(EventPayload::RequestEnd { .. })) {
            break; // "crash": stop consuming with the tool still running
        }
    }
    session.writer().flush().unwrap();
    std::mem::forget(stream); // no interrupt, no abort record: as if the process vanished
    std::mem::forget(session);

    let (model, log) = scripted(
        vec![ScriptedRequest {
            stream: vec![usage()],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        }],
        "m",
    );
    let mut resumed = agent
        .resume_session_with(&id, model.llm, |_| Ok(env))
        .unwrap();
    let _: Vec<_> = resumed
        .run(
            vec![build::user_text("again")],
            RunOptions::new(Arc::new(DenyAll)),
        )
        .unwrap()
        .collect()
        .await;
    let input = &log.requests()[0];
    assert_eq!(
        content(&input[0]),
        "[interrupted: process exited before the tool finished]"
    );
    assert_eq!(input[0].tool_call_id(), Some("call_x"));
    assert_eq!(content(&input[1]), "again");
}
