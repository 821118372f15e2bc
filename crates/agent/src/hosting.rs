//! Sessions for `penguin serve`: [`Session`] as the server's [`HostedSession`], and the two
//! [`SessionFactory`]s: [`ModelFactory`] (a configured model with the built-in tools) and
//! [`ScenarioFactory`] (a scenario file's scripted model and tools).
//!
//! ```no_run
//! use std::sync::Arc;
//! use penguin_agent::hosting::ScenarioFactory;
//! use penguin_server::{serve, ServeOptions};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let factory = ScenarioFactory::from_file("tests/scenarios/seed-two-tools.json")?;
//! let mut opts = ServeOptions::new(Arc::new(factory));
//! opts.port = 7364;
//! serve(opts).await?;
//! # Ok(())
//! # }
//! ```

// The door (clippy.toml) is for paths a command can change: this module reads the scenario
// files the user names on the command line.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::stream::BoxStream;
use penguin_engine::{
    CancellationToken, Engine, EngineBusy, EngineConfig, Environment, RunOptions,
};
use penguin_omni_protocol::{Frame, OmniMessage, SessionMeta};
use penguin_server::api::{SandboxInfo, SandboxSettings};
use penguin_server::{
    CreateSession, FactoryError, GoalRefusal, HostedSession, LoadSession, SessionFactory,
};
use penguin_tools::mcp::McpServerConfig;
use penguin_tools::policy::CommandPolicy;
use penguin_tools::sandbox::{Landlock, SandboxError};
use penguin_tools::{Sandbox, SandboxRequest};
use penguin_trace_store::{Resumed, Writer};

use crate::config::ParseError;
pub use crate::models::OfferedModel;
use crate::models::{ModelError, ModelSpec};
use penguin_llm_providers::scripted::ScriptError;

use crate::scenario::{Scenario, ScenarioError};
use crate::session::{Session, SessionError, SessionSpec};

impl HostedSession for Session {
    fn id(&self) -> &str {
        Session::id(self)
    }

    fn rewind_files(
        &self,
        to: usize,
        apply: bool,
        with_yours: bool,
    ) -> Option<Result<penguin_server::api::RewindFiles, String>> {
        Some(
            Session::rewind_files(self, to, apply, with_yours)?.map(|(files, failed)| {
                let yours = files.yours;
                let plan = files.plan;
                penguin_server::api::RewindFiles {
                    restore: plan.restore,
                    remove: plan.remove,
                    yours,
                    left_alone: plan
                        .left_alone
                        .into_iter()
                        .map(|s| format!("{} ({})", s.path, s.why))
                        .collect(),
                    failed,
                }
            }),
        )
    }

    fn files(&self, data_root: &Path) -> Option<Arc<dyn penguin_server::WorkspaceFiles>> {
        Some(Arc::new(self.workspace_files(data_root)))
    }

    fn meta(&self) -> &SessionMeta {
        self.session_meta()
    }

    fn run(
        &mut self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        Session::run(self, input, options)
    }

    fn compact(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        Session::compact(self, cancel)
    }

    fn engine(&self) -> &Engine {
        Session::engine(self)
    }

    fn writer(&self) -> &Writer {
        Session::writer(self)
    }

    fn environment(&self) -> Arc<dyn Environment> {
        Session::environment(self).clone()
    }

    fn on_notice(&self, hook: Arc<dyn Fn() + Send + Sync>) {
        Session::on_notice(self, hook);
    }

    fn on_background_message(&self, hook: Arc<dyn Fn(OmniMessage) + Send + Sync>) {
        Session::on_background_message(self, hook);
    }

    fn sandbox(&self) -> Option<SandboxInfo> {
        let unsandboxed_tools = self.environment().unsandboxed_tools();
        Session::sandbox(self).map(|s| sandbox_info(s, unsandboxed_tools))
    }

    fn run_goal(
        &mut self,
        input: Vec<OmniMessage>,
        budget: Option<u64>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, GoalRefusal> {
        let goal = crate::goal::GoalOptions {
            budget,
            ..crate::goal::GoalOptions::default()
        };
        Session::run_goal(self, input, goal, options).map_err(|e| match e {
            crate::goal::GoalError::Busy(busy) => GoalRefusal::Busy(busy),
            other => GoalRefusal::Invalid(other.to_string()),
        })
    }

    fn goal(&self) -> Option<serde_json::Value> {
        Session::goal(self).and_then(|g| serde_json::to_value(g).ok())
    }

    fn end(&self, reason: &str) -> futures::future::BoxFuture<'static, ()> {
        let hooks = self.hooks().cloned();
        let reason = reason.to_owned();
        Box::pin(async move {
            if let Some(hooks) = hooks {
                hooks.session_end(&reason).await;
            }
        })
    }
}

/// The API's view of a sandbox; `unsandboxed_tools`: see [`SandboxInfo::unsandboxed_tools`].
pub fn sandbox_info(sandbox: &Sandbox, unsandboxed_tools: Vec<String>) -> SandboxInfo {
    SandboxInfo {
        unsandboxed_tools,
        mode: sandbox.mode().as_str().to_owned(),
        requested: sandbox.requested().map(|m| m.as_str().to_owned()),
        network: sandbox.network(),
        allow_ports: if sandbox.network() {
            Vec::new()
        } else {
            sandbox.allow_ports().to_vec()
        },
        landlock_abi: match sandbox.landlock() {
            Landlock::Abi(n) => Some(n),
            Landlock::NotEnabled | Landlock::NotImplemented => None,
        },
        not_enforced: sandbox
            .gaps()
            .iter()
            .map(|g| g.as_str().to_owned())
            .collect(),
        summary: sandbox.summary(),
    }
}

/// Why a factory of this module could not give a session: the source its [`FactoryError`]
/// carries (`Unrecoverable` and `Internal`), for a host that wants to tell the cases apart.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostingError {
    /// The stored session was recorded with a provider this server does not serve.
    #[error("the session was recorded with provider {recorded:?}; this server serves {served:?}")]
    ProviderMismatch {
        /// The provider of the session's `session_meta`.
        recorded: String,
        /// The provider this factory serves.
        served: String,
    },
    /// A `mcpServers` entry stored with the session no longer reads as one.
    #[error("stored mcpServers[{index}]: {source}")]
    StoredMcpServer {
        /// Its position in the stored list.
        index: usize,
        /// Why it does not read.
        source: serde_json::Error,
    },
    /// The sandbox stored with the session names a mode penguin does not have.
    #[error(transparent)]
    SandboxOverride(#[from] ParseError),
    /// The sandbox cannot be given: a strict one the kernel cannot enforce, or a writable
    /// directory of the server's configuration that cannot be used.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The session's tools could not be built: the [`EnvironmentBuilder`]'s message.
    #[error("{0}")]
    Environment(String),
    /// The session's model could not be built.
    #[error("model: {0}")]
    Model(#[source] ModelError),
    /// The session could not be created, or resumed from its Trace.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The scenario could not be parsed again for a new session.
    #[error(transparent)]
    Scenario(#[from] ScriptError),
}

fn unrecoverable(e: impl Into<HostingError>) -> FactoryError {
    FactoryError::Unrecoverable(Box::new(e.into()))
}

fn internal(e: impl Into<HostingError>) -> FactoryError {
    FactoryError::Internal(Box::new(e.into()))
}

/// What loading a stored session gives before a model is built for it.
fn load(req: &LoadSession) -> Result<(Resumed<SessionMeta>, Writer), FactoryError> {
    Session::load(&req.location, &req.session_id, req.durability).map_err(|e| match e {
        SessionError::WorkspaceMissing(w) => FactoryError::WorkspaceMissing(w),
        other => unrecoverable(other),
    })
}

/// Plays one scenario file's scripted model and tools in every session.
///
/// Each session gets its own, unconsumed copy of the scripts: the file is parsed again per
/// session, because clones of a `ScriptedModel` share one queue of requests.
#[derive(Clone, Debug)]
pub struct ScenarioFactory {
    text: Arc<str>,
    workspace: PathBuf,
    policy: CommandPolicy,
}

impl ScenarioFactory {
    /// Reads and validates a scenario file. Sessions default to the current directory as their
    /// workspace.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ScenarioFactory, ScenarioError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ScenarioFactory::from_text(&text, ".").map_err(|source| ScenarioError::Invalid {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A factory over scenario text; sessions default to `workspace`.
    pub fn from_text(
        text: &str,
        workspace: impl Into<PathBuf>,
    ) -> Result<ScenarioFactory, ScriptError> {
        Scenario::parse(text)?;
        Ok(ScenarioFactory {
            text: text.into(),
            workspace: workspace.into(),
            policy: CommandPolicy::default(),
        })
    }

    /// Sets the default workspace of new sessions.
    pub fn with_workspace(mut self, workspace: impl Into<PathBuf>) -> ScenarioFactory {
        self.workspace = workspace.into();
        self
    }

    /// Sets the commands no session runs.
    pub fn with_policy(mut self, policy: CommandPolicy) -> ScenarioFactory {
        self.policy = policy;
        self
    }

    fn fresh(&self) -> Result<Scenario, FactoryError> {
        // Parsed once already in the constructor: this cannot fail unless memory is corrupt.
        Scenario::parse(&self.text).map_err(internal)
    }
}

impl SessionFactory for ScenarioFactory {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        if let Some(p) = req.provider.as_deref() {
            if p != "scripted" {
                return Err(FactoryError::invalid_request(
                    "provider",
                    format!(
                        "this server plays a scenario file and only offers \"scripted\", not {p:?}"
                    ),
                ));
            }
        }
        let workspace = checked_workspace(
            req.workspace
                .clone()
                .unwrap_or_else(|| self.workspace.clone()),
        )?;
        let sc = self.fresh()?;
        let spec = SessionSpec::new(req.location.clone(), workspace)
            .with_model(
                "scripted",
                req.model.clone().unwrap_or_else(|| "scenario".into()),
            )
            .with_durability(req.durability)
            .with_engine(sc.engine);
        let mut session =
            Session::create(spec, Box::new(sc.llm), Arc::new(sc.tools)).map_err(internal)?;
        session.set_command_policy(self.policy.clone());
        Ok(Box::new(session))
    }

    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let (resumed, writer) = load(req)?;
        let sc = self.fresh()?;
        let mut session = Session::resume(
            resumed,
            writer,
            sc.engine,
            Box::new(sc.llm),
            Arc::new(sc.tools),
        )
        .map_err(unrecoverable)?;
        session.set_command_policy(self.policy.clone());
        Ok(Box::new(session))
    }
}

/// The workspace as an absolute, symlink-free path (so the session and its resume agree on it,
/// whatever the server's current directory), or why it cannot be used.
fn checked_workspace(workspace: PathBuf) -> Result<PathBuf, FactoryError> {
    match workspace.canonicalize() {
        Ok(abs) if abs.is_dir() => Ok(abs),
        _ => Err(FactoryError::invalid_request(
            "workspace",
            format!("{} is not an existing directory", workspace.display()),
        )),
    }
}

/// Builds the tools of a session acting on a workspace, confining its commands with the
/// sandbox, with the MCP servers the session's request adds (`mcpServers` of
/// `POST /api/sessions`), or says why it cannot.
pub type EnvironmentBuilder = Arc<
    dyn Fn(&Path, &Sandbox, &[McpServerConfig]) -> Result<Arc<dyn Environment>, String>
        + Send
        + Sync,
>;

/// `mcpServers` of a request as entries, or the first one that does not even have the shape of
/// one (with its position). One that has the shape but is invalid is the session's warning and
/// failed server.
fn mcp_entries(
    raw: &[serde_json::Value],
) -> Result<Vec<McpServerConfig>, (usize, serde_json::Error)> {
    raw.iter()
        .enumerate()
        .map(|(i, v)| serde_json::from_value(v.clone()).map_err(|e| (i, e)))
        .collect()
}

/// How long each request of a model test may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long an endpoint has to list its models.
const DISCOVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The spec an endpoint is asked for its models with: the fields checked as an add checks
/// them, the protocol's default base URL when none is given.
pub fn endpoint_spec(
    fields: &penguin_server::api::ModelFields,
) -> Result<ModelSpec, crate::config::edit::EditError> {
    use crate::config::edit;
    let protocol: crate::models::Protocol =
        edit::check_protocol(fields.protocol.as_deref().unwrap_or(""))?
            .parse()
            .map_err(
                |e: crate::models::UnknownProtocol| edit::EditError::Invalid {
                    field: "protocol",
                    reason: e.to_string(),
                },
            )?;
    let base_url = match fields
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        Some(url) => {
            edit::check_base_url(url)?;
            url.to_owned()
        }
        None => crate::models::default_base_url(&protocol),
    };
    let api_key_env = match fields
        .api_key_env
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        Some(var) => {
            edit::check_key_env(var)?;
            Some(var.to_owned())
        }
        None => None,
    };
    Ok(ModelSpec {
        protocol,
        base_url,
        api_key_env,
        ..ModelSpec::demo()
    })
}

/// Why the sandbox a request asks for cannot be given.
enum SandboxRefused {
    /// The request's override does not parse (its field is named).
    Override(ParseError),
    /// The kernel or the server's configuration cannot give it.
    Resolve(SandboxError),
}

/// Serves one configured model ([`ModelSpec`], e.g. from `config::resolve_model`) with the tools
/// an [`EnvironmentBuilder`] gives for each session's workspace.
#[derive(Clone)]
pub struct ModelFactory {
    /// The model of sessions whose request names none.
    pub spec: ModelSpec,
    /// The configured models a request may name (`model` of `POST /api/sessions`: a
    /// `[models.NAME]` of `config.toml`), besides `spec` and the built-in `demo`. A request
    /// naming anything else is refused with the list ([`ModelFactory::models`]). The tools
    /// come from `environment` whichever model a session runs.
    pub models: Vec<(String, ModelSpec)>,
    /// The base of new sessions' system prompts: each session's prompt adds its workspace,
    /// the machine, its tools and its `AGENTS.md` files ([`crate::prompt`]).
    pub system_prompt: String,
    /// The workspace of sessions created without one.
    pub default_workspace: PathBuf,
    /// Engine settings.
    pub engine: EngineConfig,
    /// The tools for a workspace.
    pub environment: EnvironmentBuilder,
    /// Commands no session runs, whatever its approval mode.
    pub policy: CommandPolicy,
    /// The sandbox of sessions that ask for none; a request's `sandbox` overrides its mode and
    /// network.
    pub sandbox: SandboxRequest,
    /// The data root whose skills and memory the API shows (`GET /api/sessions/{id}/skills`,
    /// `GET /api/memory`); `None` shows none.
    pub data_root: Option<PathBuf>,
    /// The user's hooks (`config.toml`'s `[hooks]`, `docs/hooks.md`), run by every session
    /// with a workspace's trusted `.penguin/hooks.toml` (trusted under `data_root`).
    pub hooks: crate::hooks::HooksConfig,
    /// The models as `config.toml` has them now, when the API may change them
    /// (`POST/PUT/DELETE /api/models`): then they, not `spec` and `models`, are what requests
    /// may name. `None`: `spec` and `models` as given, and the API's edits are refused.
    pub live: Option<LiveModels>,
    /// What sessions' checkpoints keep (`config.toml`'s `[checkpoints]`).
    pub checkpoints: crate::config::CheckpointsEntry,
}

/// The default model and the configured ones, by name.
type Models = (ModelSpec, Vec<(String, ModelSpec)>);

/// The models of a [`ModelFactory`] that follow `config.toml` as the API edits it
/// ([`crate::config::edit`]). Clones share them.
#[derive(Clone)]
pub struct LiveModels {
    root: PathBuf,
    default_pinned: bool,
    now: Arc<std::sync::RwLock<Models>>,
    // Edits read, change and write the file: one at a time, so none is lost.
    editing: Arc<std::sync::Mutex<()>>,
}

impl std::fmt::Debug for LiveModels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveModels")
            .field("root", &self.root)
            .field("default_pinned", &self.default_pinned)
            .finish_non_exhaustive()
    }
}

impl LiveModels {
    /// The models of `<root>/config.toml`, starting as `spec` (the default) and `models`.
    /// `default_pinned`: the default was chosen by a flag or variable, so a change of
    /// `default_model` does not move it (it does from the next start on).
    pub fn new(
        root: impl Into<PathBuf>,
        spec: ModelSpec,
        models: Vec<(String, ModelSpec)>,
        default_pinned: bool,
    ) -> LiveModels {
        LiveModels {
            root: root.into(),
            default_pinned,
            now: Arc::new(std::sync::RwLock::new((spec, models))),
            editing: Arc::new(std::sync::Mutex::new(())),
        }
    }

    fn get(&self) -> Models {
        // Replaced whole under the lock, so a poisoned one still holds a whole list.
        self.now.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes the models of `config` (sized for their windows, as at start); one that does not
    /// resolve is logged and not offered.
    fn reload(&self, config: &crate::config::Config) {
        let mut models = Vec::new();
        for (name, spec) in config.named_models() {
            match spec {
                Ok(spec) => models.push((name, crate::window::sized(spec).0)),
                Err(e) => tracing::warn!("[models] {name} is not offered: {e}"),
            }
        }
        let mut now = self.now.write().unwrap_or_else(|p| p.into_inner());
        if !self.default_pinned {
            let flags = crate::config::ModelFlags::default();
            now.0 = crate::config::resolve_model(config, &flags, |_| None)
                .map(|spec| {
                    models
                        .iter()
                        .find(|(name, _)| config.default_model.as_deref() == Some(name))
                        .map(|(_, sized)| sized.clone())
                        .unwrap_or(spec)
                })
                .unwrap_or_else(|_| ModelSpec::demo());
        }
        now.1 = models;
    }
}

/// An edit refused by `config.toml`'s editor, as the API answers it (fields in its spelling).
fn models_error(e: crate::config::edit::EditError) -> penguin_server::ModelsError {
    use crate::config::edit::EditError;
    use penguin_server::ModelsError;
    match e {
        EditError::Invalid { field, reason } => ModelsError::Invalid {
            field: api_field(field).to_owned(),
            reason,
        },
        e @ EditError::NotFound { .. } => ModelsError::NotFound(e.to_string()),
        e @ EditError::Exists(_) => ModelsError::Exists(e.to_string()),
        e => ModelsError::Internal(Box::new(e)),
    }
}

fn api_field(field: &str) -> &str {
    match field {
        "base_url" => "baseUrl",
        "api_key_env" => "apiKeyEnv",
        other => other,
    }
}

fn edit_fields(f: &penguin_server::api::ModelFields) -> crate::config::edit::ModelFields {
    crate::config::edit::ModelFields {
        protocol: f.protocol.clone(),
        base_url: f.base_url.clone(),
        model: f.model.clone(),
        api_key_env: f.api_key_env.clone(),
    }
}

impl ModelFactory {
    /// The default model and the configured ones, as they are now ([`ModelFactory::live`]).
    fn current(&self) -> Models {
        match &self.live {
            Some(live) => live.get(),
            None => (self.spec.clone(), self.models.clone()),
        }
    }

    /// The models a request may name, the default first, then the configured ones by name,
    /// then the built-in `demo` (offline). Each appears once.
    pub fn models(&self) -> Vec<OfferedModel> {
        let (spec, models) = self.current();
        crate::models::ModelChoices {
            default: &spec,
            named: &models,
        }
        .offered()
    }

    /// The model a request names: the default when it names none; a configured name, or the
    /// upstream id of an offered model; `demo`. Anything else is refused, with the list.
    fn model_for(&self, asked: Option<&str>) -> Result<ModelSpec, FactoryError> {
        let (spec, models) = self.current();
        let choices = crate::models::ModelChoices {
            default: &spec,
            named: &models,
        };
        choices.pick(asked).map_err(|e| {
            FactoryError::invalid_request(
                "model",
                format!(
                    "no model named {:?} on this server; it offers: {}",
                    e.asked,
                    e.offered.join(", ")
                ),
            )
        })
    }

    /// The sandbox of one session: the factory's, with the request's overrides. A sandbox the
    /// kernel cannot give is logged once (or refused, when strict).
    fn sandbox(&self, asked: Option<&SandboxSettings>) -> Result<Sandbox, SandboxRefused> {
        let request = match asked {
            None => self.sandbox.clone(),
            Some(s) => crate::config::sandbox_override(&self.sandbox, s.mode.as_deref(), s.network)
                .map_err(SandboxRefused::Override)?,
        };
        let sandbox = Sandbox::resolve(&request).map_err(SandboxRefused::Resolve)?;
        if let Some(warning) = sandbox.warning_once() {
            tracing::warn!("[sandbox] {warning}");
        }
        Ok(sandbox)
    }
}

impl std::fmt::Debug for ModelFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelFactory")
            .field("spec", &self.spec)
            .field("default_workspace", &self.default_workspace)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl ModelFactory {
    /// The prices of its models (the default and the named ones), over the table of
    /// well-known model ids ([`crate::pricing`]).
    pub fn prices(&self) -> crate::pricing::Prices {
        let (spec, models) = self.current();
        crate::pricing::Prices::new(
            std::iter::once(&spec)
                .chain(models.iter().map(|(_, m)| m))
                .filter_map(|s| s.price.map(|p| (s.model_id.as_str(), p))),
        )
    }
}

impl SessionFactory for ModelFactory {
    fn skills(&self, workspace: &Path) -> Vec<serde_json::Value> {
        let Some(root) = &self.data_root else {
            return Vec::new();
        };
        crate::skills::discover(root, workspace)
            .into_iter()
            .filter_map(|s| serde_json::to_value(s).ok())
            .collect()
    }

    fn memory(&self) -> Vec<serde_json::Value> {
        let Some(root) = &self.data_root else {
            return Vec::new();
        };
        crate::memory::scopes(root)
            .into_iter()
            .filter_map(|s| serde_json::to_value(s).ok())
            .collect()
    }

    fn cost(
        &self,
        provider: &str,
        model_id: &str,
        tokens: &penguin_omni_protocol::TokenCounts,
    ) -> Option<f64> {
        self.prices().cost(provider, model_id, tokens)
    }

    fn price(&self, provider: &str, model_id: &str) -> Option<serde_json::Value> {
        let (p, _) = self.prices().lookup(provider, model_id)?;
        Some(serde_json::json!({
            "input": p.input,
            "cachedInput": p.cached_input.unwrap_or(p.input),
            "cacheWrite": p.cache_write.unwrap_or(p.input),
            "output": p.output,
        }))
    }

    fn models(&self) -> Vec<penguin_server::api::ModelChoice> {
        let (default, named) = self.current();
        ModelFactory::models(self)
            .into_iter()
            .map(|m| {
                let configured = named.iter().find(|(name, _)| *name == m.name);
                let spec = match configured {
                    Some((_, spec)) => spec.clone(),
                    None if m.default => default.clone(),
                    None => ModelSpec::demo(),
                };
                let demo = spec.protocol == crate::models::Protocol::DEMO;
                let key_env = spec.key_env().filter(|_| !demo);
                penguin_server::api::ModelChoice {
                    key_set: key_env
                        .as_ref()
                        .map(|var| std::env::var(var).is_ok_and(|v| !v.trim().is_empty())),
                    api_key_env: key_env,
                    base_url: (!demo).then(|| spec.base_url.clone()),
                    configured: self.live.is_some() && configured.is_some(),
                    name: m.name,
                    provider: m.provider,
                    model_id: m.model_id,
                    default: m.default,
                }
            })
            .collect()
    }

    fn edit_models(
        &self,
        edit: &penguin_server::api::ModelEdit,
    ) -> Result<(), penguin_server::ModelsError> {
        use penguin_server::api::ModelEdit;
        let Some(live) = &self.live else {
            return Err(penguin_server::ModelsError::NotEditable);
        };
        let _one_at_a_time = live.editing.lock().unwrap_or_else(|p| p.into_inner());
        let mut file = crate::config::edit::ConfigFile::open(&live.root).map_err(models_error)?;
        match edit {
            ModelEdit::Add {
                name,
                fields,
                default,
            } => {
                file.add_model(name, &edit_fields(fields))
                    .map_err(models_error)?;
                if *default {
                    file.set_default(name).map_err(models_error)?;
                }
            }
            ModelEdit::Change {
                name,
                fields,
                default,
            } => {
                file.change_model(name, &edit_fields(fields))
                    .map_err(models_error)?;
                if *default {
                    file.set_default(name).map_err(models_error)?;
                }
            }
            ModelEdit::Remove { name } => {
                file.remove_model(name).map_err(models_error)?;
            }
            other => {
                return Err(penguin_server::ModelsError::Invalid {
                    field: "model".into(),
                    reason: format!("{other:?} is not an edit this server knows"),
                })
            }
        }
        let config = file.save().map_err(models_error)?;
        live.reload(&config);
        Ok(())
    }

    fn test_model(
        &self,
        name: &str,
    ) -> futures::future::BoxFuture<'static, Result<serde_json::Value, penguin_server::ModelsError>>
    {
        let (default, named) = self.current();
        let choices = crate::models::ModelChoices {
            default: &default,
            named: &named,
        };
        let picked = choices.pick(Some(name));
        let name = name.to_owned();
        Box::pin(async move {
            let spec = picked.map_err(|e| penguin_server::ModelsError::NotFound(e.to_string()))?;
            let report = crate::models::probe::probe(&name, &spec, PROBE_TIMEOUT).await;
            serde_json::to_value(report)
                .map_err(|e| penguin_server::ModelsError::Internal(Box::new(e)))
        })
    }

    fn endpoint_models(
        &self,
        fields: &penguin_server::api::ModelFields,
    ) -> futures::future::BoxFuture<'static, Result<Vec<String>, penguin_server::ModelsError>> {
        let spec = endpoint_spec(fields);
        Box::pin(async move {
            let spec = spec.map_err(models_error)?;
            crate::models::discover::endpoint_models(&spec, DISCOVER_TIMEOUT)
                .await
                .map_err(penguin_server::ModelsError::Unreachable)
        })
    }

    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let spec = self.model_for(req.model.as_deref())?;
        if let Some(p) = req.provider.as_deref() {
            if p != spec.protocol.as_str() {
                return Err(FactoryError::invalid_request(
                    "provider",
                    format!(
                        "the model {:?} is served over {:?}, not {p:?}",
                        spec.model_id,
                        spec.protocol.as_str()
                    ),
                ));
            }
        }
        let workspace = checked_workspace(
            req.workspace
                .clone()
                .unwrap_or_else(|| self.default_workspace.clone()),
        )?;
        let sandbox = self.sandbox(req.sandbox.as_ref()).map_err(|e| match e {
            SandboxRefused::Override(e) => FactoryError::invalid_request(e.field, e.message),
            // The request's mode or network is one the kernel cannot enforce, strictly.
            SandboxRefused::Resolve(e @ SandboxError::NotEnforceable { .. }) => {
                FactoryError::invalid_request("sandbox", e.to_string())
            }
            // The server's own configuration is at fault.
            SandboxRefused::Resolve(e) => internal(e),
        })?;
        let servers = mcp_entries(&req.mcp_servers).map_err(|(i, e)| {
            FactoryError::invalid_request(format!("mcpServers[{i}]"), e.to_string())
        })?;
        let env = (self.environment)(&workspace, &sandbox, &servers)
            .map_err(|e| internal(HostingError::Environment(e)))?;
        // Compact under a small window (the launcher's factory has the windows filled in);
        // a prompt that leaves the model no room is refused before any request.
        let system_prompt = crate::prompt::system_prompt_sized(
            &self.system_prompt,
            &workspace,
            env.tools(),
            &req.location.root,
            crate::window::Profile::for_window(spec.context_window).compact(),
        );
        crate::window::check_fit(
            spec.context_window
                .and_then(|_| crate::window::resolve(&spec)),
            &system_prompt,
            &env.tools(),
        )
        .map_err(|e| FactoryError::invalid_request("model", e.to_string()))?;
        let session_spec = SessionSpec::new(req.location.clone(), workspace)
            .with_system_prompt(system_prompt)
            .with_durability(req.durability)
            .with_engine(crate::models::engine_for_model(&self.engine, &spec));
        let mut session =
            Session::create_for_model(session_spec, &spec, env).map_err(|e| match e {
                SessionError::Model(e) => internal(HostingError::Model(e)),
                other => internal(other),
            })?;
        session.set_command_policy(self.policy.clone());
        self.set_hooks(&mut session, &sandbox)?;
        session.set_sandbox(sandbox);
        session.enable_checkpoints_as(
            crate::rewind::checkpoint_store(&req.location),
            &self.checkpoints,
        );
        Ok(Box::new(session))
    }

    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let (resumed, writer) = load(req)?;
        let meta = &resumed.meta;
        // The offered model the session was made with, else the default model's provider
        // with the recorded id (a session made before the list existed).
        let (default, models) = self.current();
        let offered = models
            .iter()
            .map(|(_, m)| m)
            .chain([&default])
            .find(|m| m.protocol.as_str() == meta.provider && m.model_id == meta.model_id)
            .cloned()
            .or_else(|| (meta.provider == "demo").then(ModelSpec::demo));
        let spec = match offered {
            Some(spec) => spec,
            None if meta.provider != default.protocol.as_str() => {
                return Err(unrecoverable(HostingError::ProviderMismatch {
                    recorded: meta.provider.clone(),
                    served: default.protocol.as_str().to_owned(),
                }))
            }
            None => ModelSpec {
                model_id: meta.model_id.clone(),
                ..default.clone()
            },
        };
        let sandbox = self.sandbox(req.sandbox.as_ref()).map_err(|e| match e {
            SandboxRefused::Override(e) => unrecoverable(e),
            SandboxRefused::Resolve(e) => unrecoverable(e),
        })?;
        // The session's own servers were checked when it was created.
        let servers = mcp_entries(&req.mcp_servers).map_err(|(index, source)| {
            unrecoverable(HostingError::StoredMcpServer { index, source })
        })?;
        let env = (self.environment)(Path::new(&meta.workspace), &sandbox, &servers)
            .map_err(|e| unrecoverable(HostingError::Environment(e)))?;
        let engine = crate::models::engine_for_model(&self.engine, &spec);
        let mut session = Session::resume_for_model(resumed, writer, engine, &spec, env)
            .map_err(unrecoverable)?;
        session.set_command_policy(self.policy.clone());
        self.set_hooks(&mut session, &sandbox)?;
        session.set_sandbox(sandbox);
        session.enable_checkpoints_as(
            crate::rewind::checkpoint_store(&req.location),
            &self.checkpoints,
        );
        Ok(Box::new(session))
    }
}

impl ModelFactory {
    /// Gives `session` the user's hooks and its workspace's trusted ones, run under `sandbox`;
    /// an untrusted workspace file is logged, not run.
    fn set_hooks(&self, session: &mut Session, sandbox: &Sandbox) -> Result<(), FactoryError> {
        let workspace = PathBuf::from(&session.session_meta().workspace);
        let loaded = match &self.data_root {
            Some(root) => {
                let store = crate::hooks::trust::TrustStore::new(root);
                crate::hooks::trust::load(&self.hooks, &workspace, &store)
            }
            None => crate::hooks::Hook::all_of(&self.hooks, crate::hooks::HookOrigin::User).map(
                |hooks| crate::hooks::trust::Loaded {
                    hooks,
                    untrusted: None,
                },
            ),
        }
        // A hooks table that does not load is the configuration's fault, named.
        .map_err(|e| FactoryError::invalid_request("hooks", e.to_string()))?;
        if let Some(notice) = loaded.untrusted_notice() {
            tracing::warn!("[penguin] {notice}");
        }
        if !loaded.hooks.is_empty() {
            session.set_hooks(crate::hooks::Hooks::new(
                loaded.hooks,
                &workspace,
                sandbox.clone(),
                self.hooks
                    .max_stop_continuations
                    .unwrap_or(crate::hooks::DEFAULT_MAX_STOP_CONTINUATIONS),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Protocol;
    use penguin_trace_store::{Durability, TraceLocation};

    fn factory(root: &Path) -> ModelFactory {
        let local = ModelSpec {
            protocol: Protocol::OPENAI_CHAT,
            base_url: "http://127.0.0.1:9/v1".into(),
            model_id: "qwen".into(),
            ..ModelSpec::demo()
        };
        ModelFactory {
            spec: local.clone(),
            models: vec![("local".into(), local)],
            system_prompt: String::new(),
            default_workspace: root.to_path_buf(),
            engine: EngineConfig::default(),
            environment: Arc::new(|_: &Path, _: &Sandbox, _: &[McpServerConfig]| {
                Ok(
                    Arc::new(penguin_engine::scripted::ScriptedEnvironment::default())
                        as Arc<dyn Environment>,
                )
            }),
            policy: CommandPolicy::default(),
            sandbox: SandboxRequest::default(),
            data_root: None,
            hooks: Default::default(),
            checkpoints: Default::default(),
            live: None,
        }
    }

    fn request(root: &Path, model: Option<&str>) -> CreateSession {
        CreateSession {
            provider: None,
            model: model.map(str::to_owned),
            workspace: None,
            sandbox: None,
            mcp_servers: Vec::new(),
            location: TraceLocation::new(root.join("data"), "default", "penguin"),
            durability: Durability::default(),
        }
    }

    #[test]
    fn a_request_names_an_offered_model_or_is_refused_with_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let f = factory(dir.path());
        let names: Vec<(String, bool)> = f
            .models()
            .into_iter()
            .map(|m| (m.name, m.default))
            .collect();
        assert_eq!(
            names,
            [("local".to_owned(), true), ("demo".to_owned(), false)]
        );
        let err = f
            .create(&request(dir.path(), Some("gpt-9")))
            .err()
            .expect("refused");
        assert_eq!(
            err.to_string(),
            "model: no model named \"gpt-9\" on this server; it offers: local, demo"
        );
        // `demo` is the built-in demo, not the configured server asked for a model "demo".
        let demo = f.create(&request(dir.path(), Some("demo"))).unwrap();
        assert_eq!(demo.meta().provider, "demo");
        let local = f.create(&request(dir.path(), Some("local"))).unwrap();
        assert_eq!(
            (
                local.meta().provider.as_str(),
                local.meta().model_id.as_str()
            ),
            ("openai-chat", "qwen")
        );
        let default = f.create(&request(dir.path(), None)).unwrap();
        assert_eq!(default.meta().model_id, "qwen");
    }
}
