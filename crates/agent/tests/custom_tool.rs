//! An agent with a tool of its own and nothing else: no server, no built-in tools, no sandbox.
//! It builds with `--no-default-features` (the embedder's smallest build, which the facade's
//! crate budget in `cargo xtask tidy` measures), so it proves that build makes a working
//! session: the approver decides, the tool answers, the Trace keeps it, the agent lists it.

use std::sync::Arc;

use futures::StreamExt;
use penguin_agent::agent::{Agent, SessionModel};
use penguin_engine::llm::scripted::{ScriptedModel, ScriptedRequest};
use penguin_engine::{
    async_trait, build, texts, AllowAll, DenyAll, Environment, MessageSink, ModelPayload,
    OmniMessage, Permission, RunOptions, StopReason, ToolCallRequest, ToolDefinition,
};

/// One tool, `clock`, that always says noon.
struct Clock;

#[async_trait]
impl Environment for Clock {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let id = request.tool_call().tool_call_id.clone();
        sink.emit(build::tool_call_output("12:00", id, StopReason::Completed))
            .await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        vec![ToolDefinition {
            name: "clock".into(),
            description: "Tells the time.".into(),
            parameters: None,
        }]
    }

    fn permission(&self, _tool: &str) -> Permission {
        Permission::Read
    }
}

/// A model that asks the clock, then answers.
fn model() -> SessionModel {
    let llm = ScriptedModel::new(vec![
        ScriptedRequest::builder()
            .tool_call("clock", "{}", "call_1")
            .usage(40, 12)
            .build(),
        ScriptedRequest::builder()
            .text("It is noon.")
            .usage(60, 6)
            .build(),
    ]);
    SessionModel {
        llm: Box::new(llm),
        provider: "scripted".into(),
        model_id: "clock-demo".into(),
        context_window: None,
    }
}

/// The complete `tool_call_output` of `call_1` in `stream`, and the last assistant text.
fn answers(stream: &[OmniMessage]) -> (Option<String>, Option<String>) {
    let mut output = None;
    let mut text = None;
    for m in stream {
        match m.model() {
            Some(ModelPayload::ToolCallOutput(o)) if o.tool_call_id == "call_1" => {
                output = Some(o.output.clone());
            }
            Some(ModelPayload::Text(t)) => text = Some(t.text.clone()),
            _ => {}
        }
    }
    (output, text)
}

#[tokio::test]
async fn a_custom_tool_runs_in_a_session_without_server_or_builtin_tools() {
    let data_root = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let agent = Agent::at(data_root.path().to_path_buf()).unwrap();
    let mut session = agent
        .create_session_with(model(), workspace.path(), Arc::new(Clock), None, None)
        .unwrap();
    let id = session.id().to_owned();

    let stream: Vec<OmniMessage> = session
        .run(
            vec![build::user_text("What time is it?")],
            RunOptions::new(Arc::new(AllowAll)),
        )
        .unwrap()
        .map(|frame| frame.message().clone())
        .collect()
        .await;
    let (output, text) = answers(&stream);
    assert_eq!(output.as_deref(), Some("12:00"), "the tool answered");
    assert_eq!(text.as_deref(), Some("It is noon."));
    drop(session);

    let listed = agent.sessions().unwrap();
    let stored = listed
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("the agent lists the session it wrote: {listed:?}"));
    assert_eq!(stored.model, "scripted/clock-demo");
    assert_eq!(stored.state, "completed");
}

#[tokio::test]
async fn deny_all_is_a_denial_the_model_is_told_of() {
    let data_root = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let agent = Agent::at(data_root.path().to_path_buf()).unwrap();
    let mut session = agent
        .create_session_with(model(), workspace.path(), Arc::new(Clock), None, None)
        .unwrap();
    let stream: Vec<OmniMessage> = session
        .run(
            vec![build::user_text("What time is it?")],
            RunOptions::new(Arc::new(DenyAll)),
        )
        .unwrap()
        .map(|frame| frame.message().clone())
        .collect()
        .await;
    let (output, _) = answers(&stream);
    assert_eq!(output.as_deref(), Some(texts::DENIED_BY_USER));
}
