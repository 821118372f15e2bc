//! Choosing and building the LLM: provider protocols, model specs, and the offline demo model.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use penguin_llm_providers::http::HttpModel;
use penguin_llm_providers::scripted::{play, OpenSegments, Played, Step};
use penguin_llm_providers::translate::ToolCallIdAllocator;
use penguin_llm_providers::wire::{ModelConfig, WireProtocol};
use penguin_llm_providers::{Llm, LlmOutcome, LlmRequest, MessageSink, ThinkingLevel};
pub mod discover;
pub mod probe;

use penguin_omni_protocol::{
    build, ModelPayload, OmniMessage, StopReason, StreamEventType, TokenCounts, ToolDefinition,
};

/// The name of a model adapter, as `config.toml`'s `protocol`, `--provider` and
/// `session_meta.provider` spell it: a built-in wire protocol (`openai-chat`, …), the
/// built-in `demo`, or an adapter an embedder registered ([`register_adapter`]).
///
/// Parsing ([`FromStr`]) checks the name against the registry (and resolves the built-in
/// aliases `openai` and `anthropic`); [`Protocol::new`] and deserializing take any name, and
/// building the model ([`build_llm`]) looks it up.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Protocol(Cow<'static, str>);

impl Protocol {
    /// OpenAI Chat Completions, and every OpenAI-compatible server (llama.cpp, vLLM, Ollama's
    /// `/v1`, ...).
    pub const OPENAI_CHAT: Protocol = Protocol(Cow::Borrowed("openai-chat"));
    /// OpenAI Responses API.
    pub const OPENAI_RESPONSES: Protocol = Protocol(Cow::Borrowed("openai-responses"));
    /// Anthropic Messages.
    pub const ANTHROPIC_MESSAGES: Protocol = Protocol(Cow::Borrowed("anthropic-messages"));
    /// Google Gemini `streamGenerateContent`.
    pub const GEMINI: Protocol = Protocol(Cow::Borrowed("gemini"));
    /// Ollama's native `/api/chat` (NDJSON streaming).
    pub const OLLAMA: Protocol = Protocol(Cow::Borrowed("ollama"));
    /// The built-in offline demo model.
    pub const DEMO: Protocol = Protocol(Cow::Borrowed("demo"));

    /// The adapter named `name`, whether or not one is registered under it (yet).
    pub fn new(name: impl Into<String>) -> Protocol {
        Protocol(Cow::Owned(name.into()))
    }

    /// The spelling used in flags, config files and `session_meta.provider`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The registered adapter of this name.
    pub fn adapter(&self) -> Result<Arc<Adapter>, UnknownProtocol> {
        find_adapter(self.as_str()).ok_or_else(|| UnknownProtocol::new(self.as_str()))
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = UnknownProtocol;
    fn from_str(s: &str) -> Result<Self, UnknownProtocol> {
        find_adapter(s)
            .map(|a| a.protocol())
            .ok_or_else(|| UnknownProtocol::new(s))
    }
}

impl serde::Serialize for Protocol {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

// Unchecked: a saved record of a session whose adapter is not registered in this process
// still loads, and building its model says which adapters there are.
impl<'de> serde::Deserialize<'de> for Protocol {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Protocol::new)
    }
}

/// A name no registered adapter answers to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider protocol {name:?} (registered: {})", registered.join(", "))]
pub struct UnknownProtocol {
    /// The name given.
    pub name: String,
    /// Every registered adapter's name, in registration order.
    pub registered: Vec<String>,
}

impl UnknownProtocol {
    fn new(name: &str) -> UnknownProtocol {
        UnknownProtocol {
            name: name.to_owned(),
            registered: adapter_names(),
        }
    }
}

/// What an adapter builds a model from: the model's configuration (base URL, model id, key,
/// system prompt, tools, limits), the session's tool call id allocator, and the session's
/// token counts so far (non-zero on resume and after compaction).
#[derive(Debug)]
pub struct AdapterInput {
    /// The model's configuration.
    pub config: ModelConfig,
    /// The session's tool call ids, shared by every model it builds.
    pub ids: ToolCallIdAllocator,
    /// The session's cumulative token counts.
    pub session_tokens: TokenCounts,
}

type BuildFn = dyn Fn(AdapterInput) -> Result<Box<dyn Llm>, ModelError> + Send + Sync;

/// A model adapter under a name: how to build its model, and the defaults a model of it gets
/// in `config.toml` and on the command line. Register one with [`register_adapter`].
///
/// ```
/// use penguin_agent::models::{register_adapter, Adapter, Protocol};
/// use penguin_llm_providers::OpenAiChat;
///
/// // An OpenAI-compatible gateway under a name of its own, with its own defaults.
/// register_adapter(
///     Adapter::http("my-gateway", OpenAiChat::new)
///         .with_default_base_url("https://llm.example.com/v1")
///         .with_default_key_env("MY_GATEWAY_KEY"),
/// );
/// let protocol: Protocol = "my-gateway".parse().unwrap();
/// assert_eq!(protocol.adapter().unwrap().default_base_url(), "https://llm.example.com/v1");
/// ```
pub struct Adapter {
    name: String,
    aliases: Vec<String>,
    default_base_url: String,
    default_key_env: Option<String>,
    build: Box<BuildFn>,
}

impl fmt::Debug for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adapter")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("default_base_url", &self.default_base_url)
            .field("default_key_env", &self.default_key_env)
            .finish_non_exhaustive()
    }
}

impl Adapter {
    /// An adapter whose model `build` makes, with no default base URL and no default key
    /// variable (a model then needs `base_url`, and `api_key_env` if it takes a key).
    pub fn new(
        name: impl Into<String>,
        build: impl Fn(AdapterInput) -> Result<Box<dyn Llm>, ModelError> + Send + Sync + 'static,
    ) -> Adapter {
        Adapter {
            name: name.into(),
            aliases: Vec::new(),
            default_base_url: String::new(),
            default_key_env: None,
            build: Box::new(build),
        }
    }

    /// An adapter for a wire protocol spoken over HTTP: each model is
    /// `HttpModel::new(config, protocol(), ids)`, penguin's HTTP shell (idle timeout,
    /// interrupts, error classification, commit on completion) around a fresh `protocol()`.
    pub fn http<P, F>(name: impl Into<String>, protocol: F) -> Adapter
    where
        P: WireProtocol + 'static,
        F: Fn() -> P + Send + Sync + 'static,
    {
        Adapter::new(name, move |input: AdapterInput| {
            let model_id = input.config.model_id.clone();
            let model = HttpModel::new(input.config, protocol(), input.ids)
                .map_err(|e| ModelError::Client {
                    model: model_id,
                    message: e.to_string(),
                })?
                .with_session_tokens(input.session_tokens);
            Ok(Box::new(model) as Box<dyn Llm>)
        })
    }

    /// The base URL of a model that names none.
    pub fn with_default_base_url(mut self, url: impl Into<String>) -> Adapter {
        self.default_base_url = url.into();
        self
    }

    /// The variable the API key is read from when a model names none. Leave it unset for a
    /// local server: a model at the default base URL with an unset default variable is
    /// refused before any request, for want of a key.
    pub fn with_default_key_env(mut self, var: impl Into<String>) -> Adapter {
        self.default_key_env = Some(var.into());
        self
    }

    /// Another name this adapter answers to when parsed; specs and records carry the
    /// adapter's own name.
    pub fn with_alias(mut self, alias: impl Into<String>) -> Adapter {
        self.aliases.push(alias.into());
        self
    }

    /// The adapter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The adapter's name as a [`Protocol`].
    pub fn protocol(&self) -> Protocol {
        Protocol::new(self.name.clone())
    }

    /// The base URL of a model that names none (empty when the adapter has none).
    pub fn default_base_url(&self) -> &str {
        &self.default_base_url
    }

    /// The API key variable of a model that names none.
    pub fn default_key_env(&self) -> Option<&str> {
        self.default_key_env.as_deref()
    }

    /// Builds a model.
    pub fn build(&self, input: AdapterInput) -> Result<Box<dyn Llm>, ModelError> {
        (self.build)(input)
    }
}

/// The adapters penguin ships, in the order an unknown name lists them.
fn builtin_adapters() -> Vec<Arc<Adapter>> {
    use penguin_llm_providers::{AnthropicMessages, Gemini, Ollama, OpenAiChat, OpenAiResponses};
    const OPENAI: &str = "https://api.openai.com/v1";
    vec![
        Adapter::http(Protocol::OPENAI_CHAT.as_str(), OpenAiChat::new)
            .with_alias("openai")
            .with_default_base_url(OPENAI)
            .with_default_key_env("OPENAI_API_KEY"),
        Adapter::http(Protocol::OPENAI_RESPONSES.as_str(), OpenAiResponses::new)
            .with_default_base_url(OPENAI)
            .with_default_key_env("OPENAI_API_KEY"),
        Adapter::http(
            Protocol::ANTHROPIC_MESSAGES.as_str(),
            AnthropicMessages::new,
        )
        .with_alias("anthropic")
        .with_default_base_url("https://api.anthropic.com")
        .with_default_key_env("ANTHROPIC_API_KEY"),
        Adapter::http(Protocol::GEMINI.as_str(), Gemini::new)
            .with_default_base_url("https://generativelanguage.googleapis.com/v1beta")
            .with_default_key_env("GEMINI_API_KEY"),
        // A local server takes no key; a hosted one is named with api_key_env.
        Adapter::http(Protocol::OLLAMA.as_str(), Ollama::new)
            .with_default_base_url(penguin_llm_providers::ollama::DEFAULT_BASE_URL),
        Adapter::new(Protocol::DEMO.as_str(), |_: AdapterInput| {
            Ok(Box::new(DemoModel::default()) as Box<dyn Llm>)
        }),
    ]
    .into_iter()
    .map(Arc::new)
    .collect()
}

/// The process's adapters: the built-ins, then what was registered, in order. One registry
/// per process, so every way a model is named (config files, flags, saved session records,
/// the server's model list, subagents) sees the same adapters.
static ADAPTERS: LazyLock<RwLock<Vec<Arc<Adapter>>>> =
    LazyLock::new(|| RwLock::new(builtin_adapters()));

fn adapters() -> std::sync::RwLockReadGuard<'static, Vec<Arc<Adapter>>> {
    // The list is replaced or extended in one step, so a poisoned lock still holds a whole one.
    ADAPTERS.read().unwrap_or_else(|p| p.into_inner())
}

/// Makes `adapter` available by its name (and aliases) to `config.toml`'s `protocol`,
/// `--provider`, `PENGUIN_PROVIDER` and every model built afterwards. An adapter already
/// registered under the same name is replaced (a built-in too) and returned.
pub fn register_adapter(adapter: Adapter) -> Option<Arc<Adapter>> {
    let mut list = ADAPTERS.write().unwrap_or_else(|p| p.into_inner());
    let adapter = Arc::new(adapter);
    match list.iter_mut().find(|a| a.name == adapter.name) {
        Some(slot) => Some(std::mem::replace(slot, adapter)),
        None => {
            list.push(adapter);
            None
        }
    }
}

/// The adapter a name (or an alias) gives, if any is registered.
pub fn find_adapter(name: &str) -> Option<Arc<Adapter>> {
    let list = adapters();
    list.iter()
        .find(|a| a.name == name)
        .or_else(|| list.iter().find(|a| a.aliases.iter().any(|x| x == name)))
        .cloned()
}

/// Every registered adapter's name, in registration order (the built-ins first).
pub fn adapter_names() -> Vec<String> {
    adapters().iter().map(|a| a.name.clone()).collect()
}

/// The default base URL of `protocol`'s adapter (empty when it has none or is not
/// registered).
pub fn default_base_url(protocol: &Protocol) -> String {
    protocol
        .adapter()
        .map(|a| a.default_base_url.clone())
        .unwrap_or_default()
}

/// Everything needed to talk to one model. Keys are never stored here, only the name of the
/// environment variable holding one.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The adapter, by its registered name.
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
    /// Whether requests ask the provider to cache their prompt (`prompt_cache` in
    /// `config.toml`; `true` unless configured otherwise): Anthropic's `cache_control`
    /// breakpoints, OpenAI's `prompt_cache_key` (the session id). See
    /// [`ModelConfig::prompt_cache`].
    pub prompt_cache: bool,
    /// What its tokens cost (`[models.NAME.price]` in `config.toml`); `None` leaves it to the
    /// table of well-known model ids ([`crate::pricing`]).
    pub price: Option<crate::pricing::Price>,
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
            .unwrap_or_else(|| match self.default.protocol == Protocol::DEMO {
                true => "demo".to_owned(),
                false => self.default.model_id.clone(),
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
            || (asked == "demo" && self.default.protocol == Protocol::DEMO)
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
            protocol: Protocol::DEMO,
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
            prompt_cache: true,
            price: None,
        }
    }

    /// The default API key variable of `protocol`'s adapter.
    pub fn default_key_env(protocol: &Protocol) -> Option<String> {
        protocol.adapter().ok()?.default_key_env.clone()
    }
}

/// How a session reaches its model, saved beside its trace (see [`crate::agent::Agent::record_model`])
/// so that a session made with ad-hoc flags (`--provider`, `--base-url`) resumes as it was
/// created. Never holds a key: only the name of the variable holding one.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelRecord {
    /// The adapter, by its registered name.
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
            protocol: spec.protocol.clone(),
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
            protocol: self.protocol.clone(),
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
            .or_else(|| ModelSpec::default_key_env(&self.protocol))
    }

    /// Why a request is bound to fail for want of a key, said before any is sent: the key
    /// variable is unset (or empty) while it was named explicitly, or while the model is the
    /// protocol's hosted API. A local server at another base URL usually needs no key, so
    /// there a missing default variable is fine. `env` reads the environment.
    pub fn missing_key(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        if self.protocol == Protocol::DEMO {
            return None;
        }
        let var = self.key_env()?;
        if env(&var).is_some_and(|v| !v.trim().is_empty()) {
            return None;
        }
        let hosted = self.base_url.trim_end_matches('/')
            == default_base_url(&self.protocol).trim_end_matches('/');
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
#[non_exhaustive]
pub enum ModelError {
    /// The HTTP client could not be created.
    #[error("cannot create the HTTP client for {model}: {message}")]
    Client {
        /// Model id.
        model: String,
        /// Why.
        message: String,
    },
    /// The spec names an adapter that is not registered.
    #[error(transparent)]
    UnknownProtocol(#[from] UnknownProtocol),
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
    /// The key the provider's prompt cache routes the session by: its session id
    /// ([`ModelConfig::cache_key`]), the same for every model the session builds (resumed,
    /// compacted, rebuilt for new tools).
    pub cache_key: Option<String>,
}

/// Builds the LLM for `spec`. The API key is read from its environment variable here and
/// nowhere else.
pub fn build_llm(spec: &ModelSpec, cx: ModelContext) -> Result<Box<dyn Llm>, ModelError> {
    let adapter = spec.protocol.adapter()?;
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
    config.prompt_cache = spec.prompt_cache;
    config.cache_key = cx.cache_key;
    let llm = adapter.build(AdapterInput {
        config,
        ids: ToolCallIdAllocator::new(),
        session_tokens: cx.session_tokens,
    })?;
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
