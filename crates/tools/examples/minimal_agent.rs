//! A minimal agent: the engine, an OpenAI-compatible provider and the built-in tools, working
//! in the current directory; each tool call is approved at the terminal. Besides this crate it
//! needs `penguin-engine` and `penguin-llm-providers` with its `openai-chat` and `http`
//! features.
//!
//! ```sh
//! OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_MODEL=local \
//!     cargo run --example minimal_agent -- "What is in this directory?"
//! ```
//! (`OPENAI_API_KEY` is sent when set: OpenAI itself, llama.cpp, vLLM and Ollama all work.)

use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_engine::{
    build, ApprovalDecision, ApprovalError, Approver, Engine, EngineConfig, Environment,
    ModelPayload, OmniMessage, RunOptions,
};
use penguin_llm_providers::translate::ToolCallIdAllocator;
use penguin_llm_providers::{HttpModel, ModelConfig, OpenAiChat};
use penguin_tools::{BuiltinTools, Sandbox, SandboxRequest, ToolsConfig};

/// Asks on the terminal: `y` allows the call, anything else denies it.
struct Terminal;

#[async_trait]
impl Approver for Terminal {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        let Some(ModelPayload::ToolCall(call)) = call.model() else {
            return Ok(ApprovalDecision::Deny);
        };
        print!("\nallow {} {}? [y/N] ", call.name, call.arguments);
        std::io::stdout().flush().ok();
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).ok();
        Ok(if answer.trim() == "y" {
            ApprovalDecision::Allow
        } else {
            ApprovalDecision::Deny
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or("What is in this directory?".into());
    let var = |name: &str| std::env::var(name).ok();
    let base_url = var("OPENAI_BASE_URL").ok_or("set OPENAI_BASE_URL (and OPENAI_MODEL)")?;

    // The Environment: the built-in tools, commands in the strongest sandbox here.
    let sandbox = Sandbox::resolve(&SandboxRequest::default())?;
    let config = ToolsConfig {
        sandbox,
        ..ToolsConfig::default()
    };
    let tools = BuiltinTools::new(std::env::current_dir()?, config)?;

    // The LLM: the model is told about the tools it may call.
    let mut model = ModelConfig::new(base_url, var("OPENAI_MODEL").unwrap_or("local".into()));
    model.api_key = var("OPENAI_API_KEY");
    model.tools = tools.tools();
    model.system_prompt = "You are a careful coding agent. Use the tools.".into();
    let llm = HttpModel::new(model, OpenAiChat::new(), ToolCallIdAllocator::default())?;

    let engine = Engine::new(Box::new(llm), Arc::new(tools), EngineConfig::default());
    let options = RunOptions::new(Arc::new(Terminal));
    let mut stream = engine.run(vec![build::user_text(prompt)], options)?;
    // The stream is the whole run, in order: print each complete message as one JSON line.
    while let Some(frame) = stream.next().await {
        if !frame.message().is_partial() {
            println!("{}", frame.json());
        }
    }
    Ok(())
}
