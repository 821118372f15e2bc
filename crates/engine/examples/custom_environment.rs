//! An `Environment` of one's own: a `calculator` tool that adds numbers, driven by the engine.
//! The model here is scripted (it asks for `2 + 3`, then answers), so the program runs
//! offline; swap in any `Llm` (see penguin-tools' `minimal_agent`). It needs `penguin-engine`
//! alone (its re-exports name the protocol and the scripted model), `futures`, `serde_json` and
//! `tokio`.
//!
//! ```sh
//! cargo run --example custom_environment
//! ```

use std::sync::Arc;

use futures::StreamExt;
use penguin_engine::llm::scripted::{ScriptedModel, ScriptedRequest};
use penguin_engine::{
    async_trait, build, AllowAll, Engine, EngineConfig, Environment, MessageSink, Permission,
    RunOptions, StopReason, ToolCallRequest, ToolDefinition,
};
use serde_json::{json, Value};

/// One tool: `calculator {"add": [numbers]}` answers their sum.
struct Calculator;

#[async_trait]
impl Environment for Calculator {
    /// Every call must end with exactly one `tool_call_output` for its id, whatever happens.
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let call = request.tool_call();
        let sum = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .and_then(|args| {
                Some(
                    args["add"]
                        .as_array()?
                        .iter()
                        .filter_map(Value::as_f64)
                        .sum::<f64>(),
                )
            });
        let (text, stop) = match (call.name.as_str(), sum) {
            ("calculator", Some(sum)) => (sum.to_string(), StopReason::Completed),
            ("calculator", None) => (
                "[tool error] expected {\"add\": [numbers]}".into(),
                StopReason::Failed,
            ),
            (other, _) => (format!("Unknown tool: {other}"), StopReason::Failed),
        };
        sink.emit(build::tool_call_output(
            text,
            call.tool_call_id.clone(),
            stop,
        ))
        .await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        vec![ToolDefinition {
            name: "calculator".into(),
            description: "Adds numbers.".into(),
            parameters: Some(json!({
                "type": "object",
                "properties": {"add": {"type": "array", "items": {"type": "number"}}},
                "required": ["add"],
            })),
        }]
    }

    /// Read-only tools may be allowed by a `read-only` approval mode.
    fn permission(&self, _tool: &str) -> Permission {
        Permission::Read
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Streamed as a model streams: fragments, the complete message, the token usage.
    let model = ScriptedModel::new(vec![
        ScriptedRequest::builder()
            .tool_call("calculator", r#"{"add": [2, 3]}"#, "call_1")
            .usage(40, 12)
            .build(),
        ScriptedRequest::builder()
            .text("2 + 3 = 5")
            .usage(60, 6)
            .build(),
    ]);
    let engine = Engine::new(
        Box::new(model),
        Arc::new(Calculator),
        EngineConfig::default(),
    );
    let options = RunOptions::new(Arc::new(AllowAll));
    let mut stream = engine.run(vec![build::user_text("What is 2 + 3?")], options)?;
    while let Some(frame) = stream.next().await {
        println!("{}", frame.json());
    }
    Ok(())
}
