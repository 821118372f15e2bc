//! A subagent run: origin-tagged child messages on the parent stream, the parent trace holding
//! only the pointer, the child's own trace, and the child's answer as the tool output.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use penguin::agent::{Agent, SessionModel};
use penguin::engine::scripted::ScriptedEnvironment;
use penguin::engine::AllowAll;
use penguin::engine::{Environment, RunOptions};
use penguin::llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin::llm_providers::LlmOutcome;
use penguin::omni_protocol::validator::StreamValidator;
use penguin::omni_protocol::{
    build, EventPayload, ModelPayload, OmniMessage, StopReason, StreamEventType, TokenCounts,
};
use penguin::subagent::{SubagentEnvironment, SubagentSpawner};
use penguin::trace_store::{read_trace, ReadMode};

fn step(message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(2),
        message,
    }
}

fn usage() -> Step {
    step(build::token_usage(
        TokenCounts::new(0, 10, 2),
        TokenCounts::new(0, 10, 2),
    ))
}

fn text_turn(text: &str) -> ScriptedRequest {
    use StreamEventType::*;
    let ok = StopReason::Completed;
    ScriptedRequest {
        stream: vec![
            step(build::partial_text(Start, "", ok)),
            step(build::partial_text(Delta, &text[..3], ok)),
            step(build::partial_text(Delta, &text[3..], ok)),
            step(build::partial_text(Stop, "", ok)),
            step(build::assistant_text(text, ok)),
            usage(),
        ],
        outcome: LlmOutcome::completed(),
    }
}

#[tokio::test]
async fn subagent_messages_are_forwarded_with_origin_and_only_the_pointer_is_recorded() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();

    let child_agent = agent.clone();
    let child_ws = ws.path().to_path_buf();
    let spawner: Arc<dyn SubagentSpawner> = Arc::new(move || {
        let model = SessionModel {
            llm: Box::new(ScriptedModel::new(vec![text_turn("Hi from the child.")])),
            provider: "scripted".into(),
            model_id: "child".into(),
            context_window: None,
        };
        child_agent.create_session_with(
            model,
            &child_ws,
            Arc::new(ScriptedEnvironment::default()),
            None,
            Some("subagent".into()),
        )
    });
    let env: Arc<dyn Environment> = Arc::new(SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        spawner,
    ));
    assert!(env.tools().iter().any(|t| t.name == "run_subagent"));

    let call = build::tool_call(
        "run_subagent",
        r#"{"prompt":"say hi"}"#,
        "call_sub",
        StopReason::Completed,
        None,
    );
    let parent_model = ScriptedModel::new(vec![
        ScriptedRequest {
            stream: vec![step(call), usage()],
            outcome: LlmOutcome::completed(),
        },
        text_turn("The child said hi."),
    ]);
    let model = SessionModel {
        llm: Box::new(parent_model.clone()),
        provider: "scripted".into(),
        model_id: "parent".into(),
        context_window: None,
    };
    let mut session = agent
        .create_session_with(model, ws.path(), env, None, None)
        .unwrap();
    let parent_id = session.id().to_owned();
    let options = RunOptions {
        approver: Some(Arc::new(AllowAll)),
        ..Default::default()
    };
    let frames: Vec<_> = session
        .run(vec![build::user_text("delegate")], options)
        .unwrap()
        .collect()
        .await;
    session.writer().flush().unwrap();
    let msgs: Vec<&OmniMessage> = frames.iter().map(|f| f.message()).collect();

    let violations = StreamValidator::validate(msgs.iter().copied());
    assert!(violations.is_empty(), "{violations:?}");

    // The child's stream, tagged with its id: session_meta first, then its prompt.
    let child: Vec<&&OmniMessage> = msgs.iter().filter(|m| m.has_origin()).collect();
    let child_id = child[0]
        .session_meta()
        .expect("the child's first message is its session_meta")
        .session_id
        .clone();
    assert_eq!(child[0].origin.as_deref(), Some(&[child_id.clone()][..]));
    assert_eq!(
        child[0].session_meta().unwrap().source.as_deref(),
        Some("subagent")
    );
    assert_eq!(child[1].model().and_then(|p| p.content()), Some("say hi"));
    assert!(child
        .iter()
        .all(|m| m.origin.as_deref() == Some(&[child_id.clone()][..])));
    assert!(child
        .iter()
        .any(|m| matches!(m.event(), Some(EventPayload::RequestEnd { .. }))));

    // The tool output is the child's answer, and the parent model got it.
    let output = msgs.iter().find_map(|m| match m.model() {
        Some(ModelPayload::ToolCallOutput(o)) if !m.has_origin() => Some(o.output.clone()),
        _ => None,
    });
    assert_eq!(output.as_deref(), Some("Hi from the child."));
    assert_eq!(
        parent_model.requests()[1][0].model().unwrap().content(),
        Some("Hi from the child.")
    );

    // Parent trace: the pointer, nothing with an origin. Child trace: its own session.
    let files: Vec<_> = walk(home.path());
    let parent_file = files
        .iter()
        .find(|p| p.to_string_lossy().contains(&parent_id))
        .unwrap();
    let child_file = files
        .iter()
        .find(|p| p.to_string_lossy().contains(&child_id))
        .unwrap();
    let parent_trace = read_trace(parent_file, ReadMode::Strict).unwrap().messages;
    assert!(parent_trace.iter().all(|m| !m.has_origin()));
    let pointers: Vec<_> = parent_trace
        .iter()
        .filter_map(|m| match m.event() {
            Some(EventPayload::Subagent { session_id }) => Some(session_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(pointers, std::slice::from_ref(&child_id));
    let child_trace = read_trace(child_file, ReadMode::Strict).unwrap().messages;
    assert_eq!(child_trace[0].session_meta().unwrap().session_id, child_id);
    assert!(child_trace
        .iter()
        .any(|m| m.model().and_then(|p| p.content()) == Some("Hi from the child.")));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
