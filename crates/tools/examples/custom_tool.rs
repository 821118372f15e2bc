//! A tool of one's own beside the built-in ones: `word_count`, under the same contract (its
//! output capped and archived, its timeout, interrupts and panics handled, one complete output
//! per call). The model is scripted so the program runs offline.
//!
//! ```sh
//! cargo run --example custom_tool
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_engine::llm::scripted::{ScriptedModel, ScriptedRequest};
use penguin_engine::{
    build, AllowAll, Engine, EngineConfig, Environment, Permission, RunOptions, ToolDefinition,
};
use penguin_tools::{BuiltinTools, Output, Tool, ToolOutcome, ToolResult, ToolsConfig};
use serde_json::{json, Value};

/// Counts the words of its `text`; a note after the content says how many.
struct WordCount;

#[async_trait]
impl Tool for WordCount {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        // An `Err` becomes the call's `[tool error] …` output.
        let text = args["text"].as_str().ok_or("expected {\"text\": string}")?;
        let words: Vec<&str> = text.split_whitespace().collect();
        out.emit(words.join("\n")).await;
        Ok(ToolOutcome {
            note: Some(format!("[{} words]", words.len())),
            ..Default::default()
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let definition = ToolDefinition {
        name: "word_count".into(),
        description: "Counts the words of a text.".into(),
        parameters: Some(json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        })),
    };
    let tools = BuiltinTools::new(std::env::current_dir()?, ToolsConfig::default())?.with_tool(
        definition,
        Permission::Read,
        WordCount,
    )?;
    assert!(tools.tools().iter().any(|t| t.name == "word_count"));

    let model = ScriptedModel::new(vec![
        ScriptedRequest::builder()
            .tool_call("word_count", r#"{"text": "the quick brown fox"}"#, "call_1")
            .usage(50, 15)
            .build(),
        ScriptedRequest::builder()
            .text("Four words.")
            .usage(80, 4)
            .build(),
    ]);
    let engine = Engine::new(Box::new(model), Arc::new(tools), EngineConfig::default());
    let options = RunOptions::new(Arc::new(AllowAll));
    let mut stream = engine.run(vec![build::user_text("How many words?")], options)?;
    while let Some(frame) = stream.next().await {
        if !frame.message().is_partial() {
            println!("{}", frame.json());
        }
    }
    Ok(())
}
