//! Choosing and building the LLM: provider protocols, model specs, and the offline demo model.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use penguin_llm_providers::http::HttpModel;
use penguin_llm_providers::scripted::{play, OpenSegments, Played, Step};
use penguin_llm_providers::translate::ToolCallIdAllocator;
use penguin_llm_providers::wire::ModelConfig;
use penguin_llm_providers::{Llm, LlmOutcome, LlmRequest, MessageSink, ThinkingLevel};
use penguin_omni_protocol::{
    build, ModelPayload, OmniMessage, StopReason, StreamEventType, TokenCounts, ToolDefinition,
};

/// A wire protocol penguin can speak, or a built-in model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// OpenAI Chat Completions, and every OpenAI-compatible server (llama.cpp, vLLM, Ollama, ...).
    OpenaiChat,
    /// OpenAI Responses API.
    OpenaiResponses,
    /// Anthropic Messages.
    AnthropicMessages,
    /// Google Gemini `streamGenerateContent`.
    Gemini,
    /// Ollama's native `/api/chat` (NDJSON streaming).
    Ollama,
    /// The built-in offline demo model.
    Demo,
}

impl Protocol {
    /// The spelling used in flags, config files and `session_meta.provider`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenaiChat => "openai-chat",
            Protocol::OpenaiResponses => "openai-responses",
            Protocol::AnthropicMessages => "anthropic-messages",
            Protocol::Gemini => "gemini",
            Protocol::Ollama => "ollama",
            Protocol::Demo => "demo",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "openai-chat" | "openai" => Protocol::OpenaiChat,
            "openai-responses" => Protocol::OpenaiResponses,
            "anthropic-messages" | "anthropic" => Protocol::AnthropicMessages,
            "gemini" => Protocol::Gemini,
            "ollama" => Protocol::Ollama,
            "demo" => Protocol::Demo,
            other => {
                return Err(format!(
                    "unknown provider protocol {other:?} (expected openai-chat, openai-responses, anthropic-messages, gemini, ollama or demo)"
                ))
            }
        })
    }
}

/// The default base URL of each protocol.
pub fn default_base_url(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenaiChat | Protocol::OpenaiResponses => "https://api.openai.com/v1",
        Protocol::AnthropicMessages => "https://api.anthropic.com",
        Protocol::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        Protocol::Ollama => penguin_llm_providers::ollama::DEFAULT_BASE_URL,
        Protocol::Demo => "",
    }
}

/// Everything needed to talk to one model. Keys are never stored here, only the name of the
/// environment variable holding one.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// Wire protocol.
    pub protocol: Protocol,
    /// Base URL (the protocol's path is appended).
    pub base_url: String,
    /// Upstream model id.
    pub model_id: String,
    /// Environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// Output token cap; 0 means the provider's default.
    pub max_output_tokens: u64,
    /// Context window, when known.
    pub context_window: Option<u64>,
    /// Default thinking effort.
    pub thinking_level: Option<ThinkingLevel>,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// Idle timeout between upstream events.
    pub idle_timeout: Option<Duration>,
    /// The most content one streamed message may hold, in bytes; `None` keeps the provider
    /// default ([`penguin_llm_providers::DEFAULT_MAX_MESSAGE_BYTES`]).
    pub max_message_bytes: Option<usize>,
    /// Whether the model takes images (`vision` in `config.toml`; `true` unless configured
    /// otherwise): a model without gets no `read_image` tool.
    pub vision: bool,
    /// Retries of a failed request before the run fails (`reconnect_attempts` in
    /// `config.toml`); `None` keeps the engine's default (the reference's 5).
    pub reconnect_attempts: Option<u32>,
}

/// A model a host offers by name (the server's `GET /api/models`, `run_subagent`'s `model`):
/// what may be named, and what it runs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OfferedModel {
    /// The name to give: a `[models.NAME]` of `config.toml`, or `demo`.
    pub name: String,
    /// The wire protocol (`openai-chat`, …, `demo`).
    pub provider: String,
    /// The upstream model id.
    pub model_id: String,
    /// Whether naming no model gives this one.
    pub default: bool,
}

/// The models one may name: a default and the configured ones (plus the built-in `demo`).
/// The one list of the server's model check and of `run_subagent`'s `model`.
#[derive(Clone, Copy, Debug)]
pub struct ModelChoices<'a> {
    /// What naming no model gives.
    pub default: &'a ModelSpec,
    /// The configured models by name.
    pub named: &'a [(String, ModelSpec)],
}

/// A model name that is none of the offered ones.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no model named {asked:?}; it offers: {}", offered.join(", "))]
pub struct UnknownModel {
    /// The name asked for.
    pub asked: String,
    /// The names that may be given.
    pub offered: Vec<String>,
}

impl ModelChoices<'_> {
    /// The models that may be named, the default first, then the configured ones by name,
    /// then the built-in `demo` (offline). Each appears once.
    pub fn offered(&self) -> Vec<OfferedModel> {
        let offered = |name: &str, spec: &ModelSpec, default: bool| OfferedModel {
            name: name.to_owned(),
            provider: spec.protocol.as_str().to_owned(),
            model_id: spec.model_id.clone(),
            default,
        };
        let default_name = self
            .named
            .iter()
            .find(|(_, m)| m == self.default)
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| match self.default.protocol {
                Protocol::Demo => "demo".to_owned(),
                _ => self.default.model_id.clone(),
            });
        let mut list = vec![offered(&default_name, self.default, true)];
        for (name, spec) in self.named {
            if list.iter().all(|m| m.name != *name) {
                list.push(offered(name, spec, false));
            }
        }
        if list.iter().all(|m| m.name != "demo") {
            list.push(offered("demo", &ModelSpec::demo(), false));
        }
        list
    }

    /// The model `asked` names: the default when it names none; a configured name, or the
    /// upstream id of an offered model; `demo`. Anything else is refused, with the list.
    pub fn pick(&self, asked: Option<&str>) -> Result<ModelSpec, UnknownModel> {
        let Some(asked) = asked.map(str::trim).filter(|a| !a.is_empty()) else {
            return Ok(self.default.clone());
        };
        if let Some((_, spec)) = self.named.iter().find(|(name, _)| name == asked) {
            return Ok(spec.clone());
        }
        if self.default.model_id == asked
            || (asked == "demo" && self.default.protocol == Protocol::Demo)
        {
            return Ok(self.default.clone());
        }
        if let Some((_, spec)) = self.named.iter().find(|(_, m)| m.model_id == asked) {
            return Ok(spec.clone());
        }
        if asked == "demo" {
            return Ok(ModelSpec::demo());
        }
        Err(UnknownModel {
            asked: asked.to_owned(),
            offered: self.offered().into_iter().map(|m| m.name).collect(),
        })
    }
}

impl ModelSpec {
    /// The offline demo model.
    pub fn demo() -> ModelSpec {
        ModelSpec {
            protocol: Protocol::Demo,
            base_url: String::new(),
            model_id: "demo".into(),
            api_key_env: None,
            max_output_tokens: 0,
            context_window: None,
            thinking_level: None,
            headers: Vec::new(),
            idle_timeout: None,
            max_message_bytes: None,
            vision: true,
            reconnect_attempts: None,
        }
    }

    /// The default API key variable of each protocol.
    pub fn default_key_env(protocol: Protocol) -> Option<&'static str> {
        match protocol {
            Protocol::OpenaiChat | Protocol::OpenaiResponses => Some("OPENAI_API_KEY"),
            Protocol::AnthropicMessages => Some("ANTHROPIC_API_KEY"),
            Protocol::Gemini => Some("GEMINI_API_KEY"),
            // A local server takes no key; a hosted one is named with api_key_env.
            Protocol::Ollama | Protocol::Demo => None,
        }
    }
}

/// How a session reaches its model, saved beside its trace (see [`crate::agent::Agent::record_model`])
/// so that a session made with ad-hoc flags (`--provider`, `--base-url`) resumes as it was
/// created. Never holds a key: only the name of the variable holding one.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelRecord {
    /// Wire protocol.
    pub protocol: Protocol,
    /// Base URL.
    pub base_url: String,
    /// Upstream model id.
    pub model_id: String,
    /// Environment variable holding the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Output token cap; 0 means the provider's default.
    #[serde(default)]
    pub max_output_tokens: u64,
    /// Context window, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

impl From<&ModelSpec> for ModelRecord {
    fn from(spec: &ModelSpec) -> Self {
        ModelRecord {
            protocol: spec.protocol,
            base_url: spec.base_url.clone(),
            model_id: spec.model_id.clone(),
            api_key_env: spec.api_key_env.clone(),
            max_output_tokens: spec.max_output_tokens,
            context_window: spec.context_window,
        }
    }
}

impl ModelRecord {
    /// The spec it describes (headers, thinking level and idle timeout at their defaults).
    pub fn to_spec(&self) -> ModelSpec {
        ModelSpec {
            protocol: self.protocol,
            base_url: self.base_url.clone(),
            model_id: self.model_id.clone(),
            api_key_env: self.api_key_env.clone(),
            max_output_tokens: self.max_output_tokens,
            context_window: self.context_window,
            ..ModelSpec::demo()
        }
    }
}

impl ModelSpec {
    /// The variable the API key is read from: the configured one, else the protocol's default.
    pub fn key_env(&self) -> Option<String> {
        self.api_key_env
            .clone()
            .or_else(|| ModelSpec::default_key_env(self.protocol).map(str::to_owned))
    }

    /// Why a request is bound to fail for want of a key, said before any is sent: the key
    /// variable is unset (or empty) while it was named explicitly, or while the model is the
    /// protocol's hosted API. A local server at another base URL usually needs no key, so
    /// there a missing default variable is fine. `env` reads the environment.
    pub fn missing_key(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        if self.protocol == Protocol::Demo {
            return None;
        }
        let var = self.key_env()?;
        if env(&var).is_some_and(|v| !v.trim().is_empty()) {
            return None;
        }
        let hosted = self.base_url.trim_end_matches('/')
            == default_base_url(self.protocol).trim_end_matches('/');
        if self.api_key_env.is_none() && !hosted {
            return None;
        }
        Some(format!(
            "{var} is not set: {} at {} needs an API key. Export {var}=..., or name another variable with --api-key-env (or api_key_env in config.toml)",
            self.protocol, self.base_url
        ))
    }
}

/// A model could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The HTTP client could not be created.
    #[error("cannot create the HTTP client for {model}: {message}")]
    Client {
        /// Model id.
        model: String,
        /// Why.
        message: String,
    },
}

/// What a model is built with besides its spec.
#[derive(Debug, Clone, Default)]
pub struct ModelContext {
    /// The session's system prompt.
    pub system_prompt: String,
    /// The tools offered.
    pub tools: Vec<ToolDefinition>,
    /// Committed history (on resume).
    pub history: Vec<OmniMessage>,
    /// Cumulative token counts (on resume).
    pub session_tokens: TokenCounts,
    /// The session's workspace: where a model without vision has its images saved
    /// ([`crate::images::TextOnly`]). Without it, such a model is sent images as they are.
    pub workspace: Option<std::path::PathBuf>,
}

/// Builds the LLM for `spec`. The API key is read from its environment variable here and
/// nowhere else.
pub fn build_llm(spec: &ModelSpec, cx: ModelContext) -> Result<Box<dyn Llm>, ModelError> {
    if spec.protocol == Protocol::Demo {
        return Ok(text_only(
            spec,
            cx.workspace.as_deref(),
            Box::new(DemoModel::default()),
        ));
    }
    let key_env = spec.key_env();
    let mut config = ModelConfig::new(&spec.base_url, &spec.model_id);
    config.api_key = key_env
        .and_then(|var| std::env::var(var).ok())
        .filter(|k| !k.is_empty());
    config.system_prompt = cx.system_prompt;
    config.tools = cx.tools;
    config.max_output_tokens = spec.max_output_tokens;
    config.context_window = spec.context_window;
    config.thinking_level = spec.thinking_level;
    config.extra_headers = spec.headers.clone();
    if spec.idle_timeout.is_some() {
        config.idle_timeout = spec.idle_timeout;
    }
    if let Some(max) = spec.max_message_bytes {
        config.max_message_bytes = max;
    }
    let ids = ToolCallIdAllocator::new();
    let client_err = |e: penguin_llm_providers::http::ClientError| ModelError::Client {
        model: spec.model_id.clone(),
        message: e.to_string(),
    };
    macro_rules! http {
        ($proto:expr) => {{
            let m = HttpModel::new(config, $proto, ids)
                .map_err(client_err)?
                .with_session_tokens(cx.session_tokens);
            Box::new(m) as Box<dyn Llm>
        }};
    }
    let llm = match spec.protocol {
        Protocol::OpenaiChat => http!(penguin_llm_providers::openai_chat::OpenAiChat::new()),
        Protocol::OpenaiResponses => {
            http!(penguin_llm_providers::openai_responses::OpenAiResponses::new())
        }
        Protocol::AnthropicMessages => {
            http!(penguin_llm_providers::anthropic_messages::AnthropicMessages::new())
        }
        Protocol::Gemini => http!(penguin_llm_providers::gemini::Gemini::new()),
        Protocol::Ollama => http!(penguin_llm_providers::ollama::Ollama::new()),
        Protocol::Demo => unreachable!("handled above"),
    };
    let mut llm = text_only(spec, cx.workspace.as_deref(), llm);
    if !cx.history.is_empty() {
        llm.set_history(&cx.history);
    }
    Ok(llm)
}

/// `llm` as a model of `spec` is sent: images folded into paths in the workspace when the
/// spec has no vision ([`crate::images`]).
fn text_only(
    spec: &ModelSpec,
    workspace: Option<&std::path::Path>,
    llm: Box<dyn Llm>,
) -> Box<dyn Llm> {
    match workspace {
        Some(workspace) if !spec.vision => Box::new(crate::images::TextOnly::new(llm, workspace)),
        _ => llm,
    }
}

/// penguin's offline demo model: it looks at the workspace with `exec_command`, then reports
/// what it found. It exists so a fresh machine can run a real tool-using session with nothing
/// configured; every reply says it is the demo.
#[derive(Debug)]
pub struct DemoModel {
    session: TokenCounts,
    calls: u32,
    // A session outlives its model (each resume builds a new one), so ids carry a random tag
    // to stay unique within the session.
    tag: u32,
}

impl Default for DemoModel {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        DemoModel {
            session: TokenCounts::default(),
            calls: 0,
            tag: random as u32,
        }
    }
}

const DEMO_INTRO: &str = "I am penguin's built-in demo model. I will list the workspace with a tool call so you can see a full turn: approval, tool output, and my reply.";

fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in text.chars() {
        cur.push(ch);
        if ch == ' ' {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn step(ms: u64, message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(ms),
        message,
    }
}

fn text_steps(text: &str, steps: &mut Vec<Step>) {
    use StreamEventType::*;
    steps.push(step(
        30,
        build::partial_text(Start, "", StopReason::Completed),
    ));
    for w in words(text) {
        steps.push(step(
            12,
            build::partial_text(Delta, w, StopReason::Completed),
        ));
    }
    steps.push(step(
        5,
        build::partial_text(Stop, "", StopReason::Completed),
    ));
    steps.push(step(0, build::assistant_text(text, StopReason::Completed)));
}

fn approx_tokens(msgs: &[OmniMessage]) -> u64 {
    let chars: usize = msgs
        .iter()
        .filter_map(|m| m.model().and_then(ModelPayload::content))
        .map(str::len)
        .sum();
    (chars as u64).div_ceil(4) + 20
}

#[async_trait]
impl Llm for DemoModel {
    async fn stream_generate(
        &mut self,
        request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        use StreamEventType::*;
        let outputs: Vec<&penguin_omni_protocol::ToolCallOutput> = request
            .new_messages
            .iter()
            .filter_map(|m| match m.model() {
                Some(ModelPayload::ToolCallOutput(o)) => Some(o),
                _ => None,
            })
            .collect();
        let mut steps = Vec::new();
        let asks_for_summary = request.new_messages.iter().any(|m| match m.model() {
            Some(ModelPayload::Text(t)) => {
                t.role == penguin_omni_protocol::Role::User && t.text.contains("[summary]")
            }
            _ => false,
        });
        let reply = if asks_for_summary {
            // A compaction request: answer in the requested format so the demo compacts cleanly.
            let summary = "[summary]The user is trying penguin with its built-in demo model: each task listed the workspace with exec_command and reported the number of entries.[/summary]";
            text_steps(summary, &mut steps);
            summary.len()
        } else if outputs.is_empty() {
            text_steps(DEMO_INTRO, &mut steps);
            self.calls += 1;
            let id = format!("demo_call_{:08x}_{}", self.tag, self.calls);
            let args = r#"{"cmd":"ls -la"}"#;
            steps.push(step(
                20,
                build::partial_tool_call(Start, "exec_command", "", &id, StopReason::Completed),
            ));
            steps.push(step(
                10,
                build::partial_tool_call(Delta, "", args, &id, StopReason::Completed),
            ));
            steps.push(step(
                5,
                build::partial_tool_call(Stop, "", "", &id, StopReason::Completed),
            ));
            steps.push(step(
                0,
                build::tool_call("exec_command", args, &id, StopReason::Completed, None),
            ));
            DEMO_INTRO.len() + args.len()
        } else {
            let out = outputs[0];
            let text = if out.stop_reason == Some(StopReason::Aborted) {
                "The listing was not approved or was interrupted, so I stopped there. That is the whole demo: configure a real model (see the README) to do real work.".to_string()
            } else {
                let entries = out
                    .output
                    .lines()
                    .filter(|l| !l.starts_with("total ") && !l.trim().is_empty())
                    .count();
                format!("The workspace listing has {entries} entries. That is the whole demo: configure a real model (see the README) and penguin will run the same loop with it.")
            };
            text_steps(&text, &mut steps);
            text.len()
        };
        let mut open = OpenSegments::default();
        if play(steps, &request.cancel, &mut open, sink, |_| {}).await == Played::Aborted {
            for m in open.close_all(StopReason::Aborted) {
                sink.emit(m).await;
            }
            return LlmOutcome::new(StopReason::Aborted);
        }
        let req = TokenCounts::new(
            0,
            approx_tokens(&request.new_messages),
            (reply as u64).div_ceil(4),
        );
        self.session = self.session + req;
        sink.emit(build::token_usage(self.session, req)).await;
        LlmOutcome::completed()
    }

    fn session_tokens(&self) -> TokenCounts {
        self.session
    }
}

/// The factory compaction uses to start a new context with the same model: a fresh model
/// like `cx`'s (its history dropped) seeded with the session's cumulative token counts.
pub fn llm_factory(spec: &ModelSpec, cx: ModelContext) -> penguin_engine::LlmFactory {
    let spec = spec.clone();
    std::sync::Arc::new(move |session_tokens| {
        let cx = ModelContext {
            history: Vec::new(),
            session_tokens,
            ..cx.clone()
        };
        build_llm(&spec, cx).unwrap_or_else(|e| Box::new(Unavailable(e.to_string())))
    })
}

/// Builds a session's model again for the tools its connect phase found (see
/// [`Session::set_model_rebuild`](crate::session::Session::set_model_rebuild)).
pub type ModelRebuild = std::sync::Arc<dyn Fn(Vec<ToolDefinition>) -> Box<dyn Llm> + Send + Sync>;

/// Rebuilds the model of `cx` with other tools (a session's tools found by connecting MCP
/// servers); a model that cannot be built fails its requests with the reason.
pub fn model_rebuild(spec: &ModelSpec, cx: ModelContext) -> ModelRebuild {
    let spec = spec.clone();
    std::sync::Arc::new(move |tools| {
        let cx = ModelContext {
            tools,
            ..cx.clone()
        };
        build_llm(&spec, cx).unwrap_or_else(|e| Box::new(Unavailable(e.to_string())))
    })
}

/// A model that could not be built: every request fails with the reason, so the engine's
/// ladder and abort report it instead of a panic.
#[derive(Debug)]
pub struct Unavailable(pub String);

#[async_trait]
impl Llm for Unavailable {
    async fn stream_generate(
        &mut self,
        _request: LlmRequest,
        _sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        LlmOutcome {
            status: StopReason::Failed,
            error_message: Some(self.0.clone()),
            permanent: true,
        }
    }
}

/// `base` with `spec`'s retry budget (`reconnect_attempts`), when it sets one.
pub fn engine_for_model(
    base: &penguin_engine::EngineConfig,
    spec: &ModelSpec,
) -> penguin_engine::EngineConfig {
    let mut config = base.clone();
    if let Some(n) = spec.reconnect_attempts {
        config.max_reconnects = n;
    }
    config
}

/// The engine settings for a session on `spec`: its retry budget ([`engine_for_model`]), and
/// compaction's size threshold following the model's context window
/// (`min(configured, window - 2048)`).
pub fn engine_config_for(
    base: &penguin_engine::EngineConfig,
    spec: &ModelSpec,
    configured_max_context: i64,
) -> penguin_engine::EngineConfig {
    let mut config = engine_for_model(base, spec);
    if let Some(c) = config.compaction.as_mut() {
        c.max_context_length = penguin_engine::CompactionConfig::effective_max_context_length(
            configured_max_context,
            spec.context_window,
        );
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_llm_providers::{CancellationToken, LlmRequest};

    async fn first_call_id(model: &mut DemoModel) -> String {
        let mut out: Vec<OmniMessage> = Vec::new();
        let request = LlmRequest {
            new_messages: vec![build::user_text("hi")],
            cancel: CancellationToken::new(),
            thinking_level: None,
        };
        model.stream_generate(request, &mut out).await;
        out.iter()
            .find_map(|m| match m.model() {
                Some(ModelPayload::ToolCall(tc)) => Some(tc.tool_call_id.clone()),
                _ => None,
            })
            .expect("the demo calls a tool")
    }

    #[tokio::test(start_paused = true)]
    async fn demo_tool_call_ids_stay_unique_across_turns_and_resumed_models() {
        let mut model = DemoModel::default();
        let a = first_call_id(&mut model).await;
        let b = first_call_id(&mut model).await;
        // A resumed session builds a new model: its ids must not repeat the old ones.
        let c = first_call_id(&mut DemoModel::default()).await;
        assert!(a != b && a != c && b != c, "{a} {b} {c}");
    }
}
