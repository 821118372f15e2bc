//! The request shape OpenAI's Chat Completions and Ollama's native `/api/chat` share: a
//! `messages` list (system prompt, committed history, the new messages), `model`, `stream`,
//! and tools in the OpenAI function format. Each adapter adds its own knobs around it and
//! keeps its own message conversion.

use serde_json::{json, Map, Value};

use crate::wire::{ModelConfig, WireRequest};

/// The parts of a chat request that differ between the two dialects. The body's keys come in
/// this order: `model`, `messages`, `stream`, `before_tools`, `tools` (when there are some),
/// `after_tools`; fixtures compare the bytes, so the order is part of the request.
pub(crate) struct ChatRequest {
    /// Appended to the base URL.
    pub path: &'static str,
    /// The new messages in the dialect's wire form.
    pub new_messages: Vec<Value>,
    /// Keys between `stream` and `tools`.
    pub before_tools: Vec<(&'static str, Value)>,
    /// Keys after `tools`.
    pub after_tools: Vec<(&'static str, Value)>,
}

impl ChatRequest {
    /// The request on top of `history`, authenticated with the configured key as a bearer
    /// token when there is one.
    pub(crate) fn build(self, config: &ModelConfig, history: &[Value]) -> WireRequest {
        let mut messages = Vec::with_capacity(history.len() + self.new_messages.len() + 1);
        if !config.system_prompt.is_empty() {
            messages.push(json!({"role": "system", "content": config.system_prompt}));
        }
        messages.extend(history.iter().cloned());
        messages.extend(self.new_messages);
        let mut body = Map::new();
        body.insert("model".into(), json!(config.model_id));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("stream".into(), json!(true));
        for (key, value) in self.before_tools {
            body.insert(key.into(), value);
        }
        if !config.tools.is_empty() {
            let tools: Vec<Value> = config
                .tools
                .iter()
                .map(|t| {
                    let mut function = Map::new();
                    function.insert("name".into(), json!(t.name));
                    function.insert("description".into(), json!(t.description));
                    if let Some(p) = &t.parameters {
                        function.insert("parameters".into(), p.clone());
                    }
                    json!({"type": "function", "function": function})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        for (key, value) in self.after_tools {
            body.insert(key.into(), value);
        }
        let mut headers = Vec::new();
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        WireRequest {
            path: self.path.into(),
            headers,
            body: Value::Object(body),
        }
    }
}

/// Appends a completed turn to a chat history: its input, then its reply, or an empty
/// assistant message when the model said nothing, to keep user and assistant alternating.
pub(crate) fn commit_turn(history: &mut Vec<Value>, input: Vec<Value>, reply: Vec<Value>) {
    history.extend(input);
    if reply.is_empty() {
        history.push(json!({"role": "assistant", "content": ""}));
    }
    history.extend(reply);
}

#[cfg(test)]
mod tests {
    use penguin_omni_protocol::{build, ToolDefinition};

    use crate::wire::{ModelConfig, WireProtocol};
    use crate::ThinkingLevel;

    fn config() -> ModelConfig {
        let mut config = ModelConfig::new("http://127.0.0.1:1", "m");
        config.system_prompt = "be brief".into();
        config.api_key = Some("k".into());
        config.max_output_tokens = 64;
        config.context_window = Some(4096);
        config.tools = vec![ToolDefinition {
            name: "f".into(),
            description: "does f".into(),
            parameters: None,
        }];
        config
    }

    /// The body's keys in the order they are sent. Request fixtures compare JSON values,
    /// which ignore key order, so the order the shared builder keeps is held here.
    fn keys(protocol: &impl WireProtocol) -> Vec<String> {
        let request = protocol.build_request(
            &config(),
            &[build::user_text("hi")],
            Some(ThinkingLevel::Low),
        );
        assert_eq!(
            request.headers,
            [("authorization".to_owned(), "Bearer k".to_owned())]
        );
        request.body.as_object().unwrap().keys().cloned().collect()
    }

    #[cfg(feature = "openai-chat")]
    #[test]
    fn openai_chat_keeps_its_key_order() {
        assert_eq!(
            keys(&crate::openai_chat::OpenAiChat::new()),
            [
                "model",
                "messages",
                "stream",
                "stream_options",
                "tools",
                "max_tokens",
                "reasoning_effort"
            ]
        );
    }

    #[cfg(feature = "ollama")]
    #[test]
    fn ollama_keeps_its_key_order() {
        assert_eq!(
            keys(&crate::ollama::Ollama::new()),
            ["model", "messages", "stream", "tools", "think", "options"]
        );
    }
}
