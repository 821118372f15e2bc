//! A minimal agent with a Trace and a resume on the session layer alone: the engine, the trace
//! store (feature `engine`), the built-in tools and a scripted model, so it runs offline. The
//! first run reads a file; the session is then resumed from its trace and continues.
//!
//! It needs this crate's `engine` feature, `penguin-engine`, `penguin-tools`, `futures` and
//! `tokio`.
//!
//! ```sh
//! cargo run --example session_agent
//! ```

use std::sync::Arc;

use futures::StreamExt;
use penguin_engine::llm::scripted::{ScriptedModel, ScriptedRequest};
use penguin_engine::protocol::{ContextWindow, SessionMeta};
use penguin_engine::{build, AllowAll, Engine, EngineConfig, InitialState, Llm, RunOptions};
use penguin_tools::{BuiltinTools, ToolsConfig};
use penguin_trace_store::{new_session_id, resume_session, Durability, TraceLocation, Writer};

/// Runs one prompt, allowing every tool call, and prints the complete messages.
async fn run(engine: Engine, prompt: &str) -> Result<Engine, Box<dyn std::error::Error>> {
    let options = RunOptions::new(Arc::new(AllowAll));
    let mut stream = engine.run(vec![build::user_text(prompt)], options)?;
    while let Some(frame) = stream.next().await {
        if frame.message().is_complete_model() {
            println!("  {}", frame.json());
        }
    }
    Ok(engine)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::env::temp_dir().join(format!("penguin-session-agent-{}", std::process::id()));
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("notes.txt"), "Penguins resume.\n")?;
    // A real model is built with these tools (`ModelConfig::tools = tools.tools()`): the
    // engine never hands them over. The scripted model's calls are in its script.
    let tools = Arc::new(BuiltinTools::new(&workspace, ToolsConfig::default())?);
    let engine = |model: ScriptedModel, writer: &Writer, initial| {
        let trace = Some(Arc::new(writer.clone()) as _); // the Writer is the engine's TraceSink
        let config = EngineConfig::default();
        Engine::with_parts(Box::new(model), tools.clone(), config, trace, initial)
    };
    let location = TraceLocation::new(&root, "example", "default");

    // A new session: session_meta first (the engine never writes it; resuming needs it).
    let id = new_session_id();
    let writer = Writer::create(&location, &id, Durability::AtCommit)?;
    writer.record_session_meta(SessionMeta {
        session_id: id.clone(),
        provider: "scripted".into(),
        model_id: "scripted".into(),
        model_context_window: ContextWindow::Other("unknown".into()),
        system_prompt: String::new(),
        agent_state: root.join("state").display().to_string(),
        workspace: workspace.display().to_string(),
        source: None,
        forked_from: None,
    });
    let read = r#"{"path":"notes.txt"}"#;
    let model = ScriptedModel::new(vec![
        ScriptedRequest::builder()
            .tool_call("read_file", read, "c1")
            .build(),
        ScriptedRequest::builder()
            .text("The notes say that penguins resume.")
            .build(),
    ]);
    println!("session {id}, first run:");
    let first = engine(model, &writer, InitialState::default());
    run(first, "What do the notes say?").await?;
    writer.flush()?;

    // Resume from the trace: the history goes to the model, the rest to the engine.
    let session = resume_session(&location, &id, Durability::AtCommit)?;
    let mut resumed = session.resumed;
    let history = std::mem::take(&mut resumed.history);
    let (messages, turns) = (history.len(), resumed.session_turns);
    println!("resumed {id}: {messages} messages of history, {turns} turns");
    let answer = ScriptedRequest::builder()
        .text("That penguins resume.")
        .build();
    let mut model = ScriptedModel::new(vec![answer]);
    model.set_history(&history);
    let engine = engine(model, &session.writer, InitialState::from(resumed));
    let engine = run(engine, "Remind me what they said.").await?;
    println!("{} turns in this context", engine.counters().session_turns);
    session.writer.flush()?;
    std::fs::remove_dir_all(&root)?;
    Ok(())
}
