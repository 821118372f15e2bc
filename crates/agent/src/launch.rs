//! The one place `config.toml` and a caller's overrides (a command line's flags, a request)
//! become a ready session: the agent with its MCP servers, the sandbox resolved against this
//! kernel, the model, the tools (built-in, MCP, `run_subagent`), and the session itself, new or
//! resumed. `penguin run`, `chat`, `resume` and `serve` go through a [`Launcher`]; the server's
//! `ModelFactory` (`hosting`, feature `server`) builds each session's tools with the same one.
//!
//! ```
//! use penguin_agent::agent::Agent;
//! use penguin_agent::launch::{Launcher, Overrides};
//!
//! let data_root = tempfile::tempdir()?;
//! let workspace = tempfile::tempdir()?;
//! let launcher = Launcher::new(
//!     Agent::at(data_root.path().to_path_buf())?,
//!     Overrides::default().model("demo").sandbox("off"),
//! )?;
//! let confinement = launcher.confinement()?;
//! let session = launcher.new_session(workspace.path(), &confinement)?;
//! assert_eq!(session.session_meta().provider, "demo");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use penguin_engine::Environment;
use penguin_omni_protocol::{SessionMeta, ToolDefinition};
use penguin_tools::mcp::{McpEnvironment, McpFlagError, McpServerConfig};
use penguin_tools::sandbox::SandboxError;
use penguin_tools::{
    BuiltinTool, BuiltinTools, Descriptions, Sandbox, SandboxBypass, SandboxMode, SandboxRequest,
    ToolsConfig,
};

use crate::agent::{Agent, SessionModel};
use crate::config::{resolve_model, ConfigError, ModelFlags};
use crate::models::{ModelChoices, ModelSpec, Protocol};
use crate::scenario::{Scenario, ScenarioError};
use crate::session::{Session, SessionError};
use crate::subagent::{SubagentEnvironment, SubagentSpawner};
use crate::window::{self, Profile, PromptTooLarge, Window};

/// What a caller overrides of `config.toml`: the command line's model, scenario, MCP and
/// sandbox flags. Everything left unset comes from the configuration and the environment
/// (`PENGUIN_MODEL`, `PENGUIN_PROVIDER`, ...).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Overrides {
    /// `--model`, `--provider`, `--base-url`, `--api-key-env`.
    pub model: ModelFlags,
    /// `--scenario FILE`: the scenario the `scripted` provider plays.
    pub scenario: Option<PathBuf>,
    /// `--real-tools`: a scenario's model with the real tools instead of its scripted ones.
    pub real_tools: bool,
    /// `--mcp NAME=COMMAND`: stdio MCP servers added after the configured ones.
    pub mcp: Vec<String>,
    /// `--sandbox MODE|strict`.
    pub sandbox: Option<String>,
}

impl Overrides {
    /// All the model flags at once.
    pub fn model_flags(mut self, flags: ModelFlags) -> Overrides {
        self.model = flags;
        self
    }

    /// A configured model's name (or, with a provider, the model id).
    pub fn model(mut self, name: impl Into<String>) -> Overrides {
        self.model.model = Some(name.into());
        self
    }

    /// The scenario file the `scripted` provider plays; `real_tools` runs the real tools
    /// instead of its scripted ones.
    pub fn scenario(mut self, file: impl Into<PathBuf>, real_tools: bool) -> Overrides {
        self.model.provider = Some("scripted".into());
        self.scenario = Some(file.into());
        self.real_tools = real_tools;
        self
    }

    /// Stdio MCP servers as `NAME=COMMAND [ARGS...]`, added after the configured ones.
    pub fn mcp(mut self, servers: impl IntoIterator<Item = impl Into<String>>) -> Overrides {
        self.mcp.extend(servers.into_iter().map(Into::into));
        self
    }

    /// The sandbox mode (`workspace-write`, `read-only`, `off`) or `strict`.
    pub fn sandbox(mut self, mode: impl Into<String>) -> Overrides {
        self.sandbox = Some(mode.into());
        self
    }

    fn scripted(&self) -> bool {
        self.model.provider.as_deref() == Some("scripted")
    }
}

/// Why a session could not be made ready. Each names what was wrong in the words a user of
/// the command line reads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// `config.toml` or a flag is wrong.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The `scripted` provider was asked for without a scenario.
    #[error("--provider scripted needs --scenario FILE")]
    NoScenario,
    /// The scenario file does not load.
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// An `--mcp` flag is not `NAME=COMMAND`.
    #[error("{0}")]
    McpFlag(#[from] McpFlagError),
    /// The model's API key variable is unset (the message names it).
    #[error("{0}")]
    MissingKey(String),
    /// The kernel or the configuration cannot give the sandbox asked for.
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
    /// The built-in tools cannot be built for this workspace.
    #[error("workspace {}: {source}", workspace.display())]
    Tools {
        /// The workspace the tools were built for.
        workspace: PathBuf,
        /// Why they could not be.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The session cannot be created or resumed.
    #[error("{0}")]
    Session(#[from] SessionError),
    /// Even the compact system prompt and tool definitions leave the model's context window
    /// no room for a conversation: no request could succeed, so none is sent.
    #[error("{0}")]
    PromptTooLarge(#[from] PromptTooLarge),
    /// A hook table of `config.toml` or of the workspace's `.penguin/hooks.toml` is wrong.
    #[error("{0}")]
    Hooks(#[from] crate::hooks::HookConfigError),
}

/// Where a launcher's notices go (the demo model chosen, a sandbox the kernel cannot fully
/// give, an MCP server's warning): the CLI prints them, a server logs them.
pub type Notices = Arc<dyn Fn(&str) + Send + Sync>;

/// What a session is built from: a model plus tools, or a scenario's scripts.
// One is made per session, and moved once: a boxed spec would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Source {
    /// A configured or ad-hoc model, with the built-in tools.
    Model(ModelSpec),
    /// A scenario's scripted model and tools (with `real_tools`, the real tools instead).
    Scenario {
        /// The scenario file's model, tools and settings.
        scenario: Box<Scenario>,
        /// The real tools instead of the scenario's scripted ones.
        real_tools: bool,
    },
}

/// The sandbox of this process's sessions, and where their tools keep the calls an approver
/// let run outside it.
#[derive(Clone, Debug)]
pub struct Confinement {
    /// The sandbox resolved against this kernel.
    pub sandbox: Sandbox,
    /// The calls let run outside the sandbox once (shared by a session and its children).
    pub bypass: SandboxBypass,
    /// `strict` was asked: what the kernel cannot enforce was refused rather than said.
    pub strict: bool,
}

/// Builds ready sessions from an [`Agent`] (its `config.toml`) and [`Overrides`].
#[derive(Clone)]
pub struct Launcher {
    agent: Agent,
    overrides: Overrides,
    notices: Notices,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launcher")
            .field("root", &self.agent.location.root)
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl Launcher {
    /// `agent` with the overrides' MCP servers added after its configured ones. Notices are
    /// logged (`tracing`) until [`Launcher::with_notices`] says otherwise.
    pub fn new(mut agent: Agent, overrides: Overrides) -> Result<Launcher, LaunchError> {
        for flag in &overrides.mcp {
            let server = McpServerConfig::from_flag(flag)?;
            agent.config.mcp_servers.push(server);
        }
        Ok(Launcher {
            agent,
            overrides,
            notices: Arc::new(|n| tracing::warn!("[penguin] {n}")),
        })
    }

    /// Where notices go instead of the log.
    pub fn with_notices(mut self, notices: Notices) -> Launcher {
        self.notices = notices;
        self
    }

    /// The agent: its data root, `config.toml` (with the overrides' MCP servers) and traces.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The overrides this launcher applies.
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }

    /// What new sessions are built from: the scenario of the `scripted` provider, or the model
    /// the overrides, the environment and `config.toml` name (its key variable checked).
    pub fn source(&self) -> Result<Source, LaunchError> {
        if self.overrides.scripted() {
            let path = self
                .overrides
                .scenario
                .as_ref()
                .ok_or(LaunchError::NoScenario)?;
            return Ok(Source::Scenario {
                scenario: Box::new(Scenario::from_file(path)?),
                real_tools: self.overrides.real_tools,
            });
        }
        let spec = self.model()?;
        check_key(&spec)?;
        if spec.protocol == Protocol::DEMO {
            (self.notices)(if self.demo_was_asked() {
                "using the built-in demo model (offline; it only lists the workspace)"
            } else {
                "no model configured; using the built-in demo model (`penguin init` writes a starter config.toml; see the README)"
            });
        }
        Ok(Source::Model(spec))
    }

    /// The model of new sessions: the overrides over the environment over `config.toml` (a
    /// scenario's `scripted` provider aside). Its key variable is not checked here: a prompt
    /// can be shown without one ([`Launcher::source`] checks it).
    pub fn model(&self) -> Result<ModelSpec, LaunchError> {
        let mut flags = self.overrides.model.clone();
        flags.provider = flags.provider.filter(|p| p != "scripted");
        Ok(resolve_model(&self.agent.config, &flags, |k| {
            std::env::var(k).ok()
        })?)
    }

    /// Named anywhere (a flag, `PENGUIN_MODEL`/`PENGUIN_PROVIDER`, or `default_model`, which
    /// `penguin init` writes as "demo"), the demo was chosen, not fallen back to.
    fn demo_was_asked(&self) -> bool {
        let demo = |v: Option<&str>| v == Some("demo");
        let env = |k: &str| std::env::var(k).ok();
        demo(self.overrides.model.model.as_deref())
            || demo(self.overrides.model.provider.as_deref())
            || demo(env("PENGUIN_MODEL").as_deref())
            || demo(env("PENGUIN_PROVIDER").as_deref())
            || demo(self.agent.config.default_model.as_deref())
    }

    /// `[sandbox]` of `config.toml` with the override applied; the data root (the config,
    /// the server token, every trace) is never a command's to read or change.
    pub fn sandbox_request(&self) -> Result<SandboxRequest, LaunchError> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut request = self
            .agent
            .config
            .sandbox
            .request(self.overrides.sandbox.as_deref(), home.as_deref())?;
        request.protected.push(self.agent.location.root.clone());
        Ok(request)
    }

    /// The sandbox resolved against this kernel. What the kernel cannot enforce is a notice,
    /// once; `strict` refuses instead. A sandbox turned off is a notice too.
    pub fn confinement(&self) -> Result<Confinement, LaunchError> {
        let request = self.sandbox_request()?;
        let sandbox = Sandbox::resolve(&request)?;
        if let Some(warning) = sandbox.warning_once() {
            (self.notices)(&warning);
        }
        if sandbox.requested() == Some(SandboxMode::Off) {
            (self.notices)(&format!(
                "warning: the sandbox is off: commands can change every file you can{}; each one is still asked unless --yes",
                if sandbox.is_active() { "" } else { " and use the network" }
            ));
        }
        Ok(Confinement {
            sandbox,
            bypass: SandboxBypass::new(),
            strict: request.strict,
        })
    }

    /// A new session in `workspace`, from [`Launcher::source`], with its hooks
    /// ([`Launcher::hooks`]).
    pub fn new_session(
        &self,
        workspace: &Path,
        confinement: &Confinement,
    ) -> Result<Session, LaunchError> {
        let session = self.new_session_without_hooks(workspace, confinement)?;
        self.with_hooks(session, confinement)
    }

    /// The hooks of a session in `workspace`: the user's `[hooks]` tables and the workspace's
    /// `.penguin/hooks.toml` when its content is trusted (when not, a notice says how to
    /// trust it), run under `confinement`'s sandbox. `None` when there are none.
    pub fn hooks(
        &self,
        workspace: &Path,
        confinement: &Confinement,
    ) -> Result<Option<crate::hooks::Hooks>, LaunchError> {
        self.hooks_saying(workspace, confinement, true)
    }

    /// [`Launcher::hooks`], saying that a workspace's file is not trusted only when `say`.
    fn hooks_saying(
        &self,
        workspace: &Path,
        confinement: &Confinement,
        say: bool,
    ) -> Result<Option<crate::hooks::Hooks>, LaunchError> {
        let config = &self.agent.config.hooks;
        let store = crate::hooks::trust::TrustStore::new(&self.agent.location.root);
        let loaded = crate::hooks::trust::load(config, workspace, &store)?;
        if let Some(notice) = loaded.untrusted_notice().filter(|_| say) {
            (self.notices)(&notice);
        }
        if loaded.hooks.is_empty() {
            return Ok(None);
        }
        let max_stop = config
            .max_stop_continuations
            .unwrap_or(crate::hooks::DEFAULT_MAX_STOP_CONTINUATIONS);
        let hooks = crate::hooks::Hooks::new(
            loaded.hooks,
            workspace,
            confinement.sandbox.clone(),
            max_stop,
        );
        Ok(Some(hooks.with_notices(self.notices.clone())))
    }

    fn with_hooks(
        &self,
        mut session: Session,
        confinement: &Confinement,
    ) -> Result<Session, LaunchError> {
        let workspace = PathBuf::from(&session.session_meta().workspace);
        if let Some(hooks) = self.hooks(&workspace, confinement)? {
            session.set_hooks(hooks);
        }
        Ok(session)
    }

    fn new_session_without_hooks(
        &self,
        workspace: &Path,
        confinement: &Confinement,
    ) -> Result<Session, LaunchError> {
        match self.source()? {
            Source::Model(asked) => {
                let (spec, window) = window::sized(asked.clone());
                let tools = self.session_tools(&spec, workspace, confinement)?;
                let prompt = self.system_prompt(&spec, workspace, tools.tools());
                window::check_fit(window, &prompt, &tools.tools())?;
                let mut session =
                    self.agent
                        .create_session(&spec, workspace, tools, Some(prompt), None)?;
                if spec != asked {
                    // The record says how the session was asked for; the window is asked
                    // again on resume.
                    let _ = self.agent.record_model(session.id(), &asked);
                }
                session.set_sandbox(confinement.sandbox.clone());
                session.enable_checkpoints_as(
                    self.agent.checkpoint_store(),
                    &self.agent.config.checkpoints,
                );
                Ok(session)
            }
            Source::Scenario {
                scenario,
                real_tools,
            } => {
                let Scenario { llm, tools, .. } = *scenario;
                let tools = self.scenario_tools(tools, real_tools, workspace, confinement)?;
                let model = SessionModel {
                    llm: Box::new(llm),
                    provider: "scripted".into(),
                    model_id: "scenario".into(),
                    context_window: None,
                };
                let mut session = self
                    .agent
                    .create_session_with(model, workspace, tools, None, None)?;
                if real_tools {
                    session.set_sandbox(confinement.sandbox.clone());
                    session.enable_checkpoints_as(
                        self.agent.checkpoint_store(),
                        &self.agent.config.checkpoints,
                    );
                }
                Ok(session)
            }
        }
    }

    /// Stored session `id`, resumed on the model the overrides name, else the one it was made
    /// with ([`Launcher::model_for_resume`]); a scenario's model with the `scripted` provider.
    /// Its hooks are those of its workspace now ([`Launcher::hooks`]).
    pub fn open_session(
        &self,
        id: &str,
        confinement: &Confinement,
    ) -> Result<Session, LaunchError> {
        let session = self.open_session_without_hooks(id, confinement)?;
        self.with_hooks(session, confinement)
    }

    fn open_session_without_hooks(
        &self,
        id: &str,
        confinement: &Confinement,
    ) -> Result<Session, LaunchError> {
        if self.overrides.scripted() {
            let Source::Scenario {
                scenario,
                real_tools,
            } = self.source()?
            else {
                unreachable!("the scripted provider gives a scenario")
            };
            let Scenario { llm, tools, .. } = *scenario;
            let mut session = self.agent.resume_session_with(id, Box::new(llm), |ws| {
                Ok(self.scenario_tools(tools, real_tools, ws, confinement)?)
            })?;
            if real_tools {
                session.set_sandbox(confinement.sandbox.clone());
                session.enable_checkpoints_as(
                    self.agent.checkpoint_store(),
                    &self.agent.config.checkpoints,
                );
            }
            return Ok(session);
        }
        let mut window = None;
        let mut session = self.agent.resume_session(
            id,
            |meta| {
                let spec = self.model_for_resume(meta)?;
                check_key(&spec).map_err(|e| ConfigError::Invalid(e.to_string()))?;
                let (spec, found) = window::sized(spec);
                window = found;
                Ok(spec)
            },
            // run_subagent children use the same model, so the tools need it too.
            |ws, spec| Ok(self.session_tools(spec, ws, confinement)?),
        )?;
        // The prompt is the one the session was created with.
        window::check_fit(
            window,
            &session.session_meta().system_prompt,
            &session.environment().tools(),
        )?;
        session.set_sandbox(confinement.sandbox.clone());
        session.enable_checkpoints_as(
            self.agent.checkpoint_store(),
            &self.agent.config.checkpoints,
        );
        Ok(session)
    }

    /// The window of `spec`'s model ([`window::resolve`]: configured, asked from its server,
    /// or known for its id).
    pub fn window(&self, spec: &ModelSpec) -> Option<Window> {
        window::resolve(spec)
    }

    /// `spec` with its window filled in as sessions get it ([`window::sized`]): what
    /// [`Launcher::system_prompt`] and [`Launcher::session_tools`] size the session by.
    pub fn sized(&self, spec: ModelSpec) -> (ModelSpec, Option<Window>) {
        window::sized(spec)
    }

    /// The system prompt of a new session of `spec` in `workspace` offering `tools`: compact
    /// when the model's window (`spec.context_window`, which [`window::sized`] fills in) is
    /// small ([`Profile::compact`]).
    pub fn system_prompt(
        &self,
        spec: &ModelSpec,
        workspace: &Path,
        tools: Vec<ToolDefinition>,
    ) -> String {
        crate::prompt::system_prompt_sized(
            crate::agent::DEFAULT_SYSTEM_PROMPT,
            workspace,
            tools,
            &self.agent.location.root,
            Profile::for_window(spec.context_window).compact(),
        )
    }

    /// The model a resumed session continues with: the overrides when they name one, else
    /// the configured model it was made with, else how it was made (saved beside its trace
    /// when created, so a session of `--provider X --base-url Y` resumes without them).
    pub fn model_for_resume(&self, meta: &SessionMeta) -> Result<ModelSpec, ConfigError> {
        let flags = &self.overrides.model;
        if flags.provider.is_some() || flags.model.is_some() {
            return resolve_model(&self.agent.config, flags, |k| std::env::var(k).ok());
        }
        if meta.provider == "demo" {
            return Ok(ModelSpec::demo());
        }
        let config = &self.agent.config;
        let configured = config
            .models
            .iter()
            .find(|(_, m)| m.model == meta.model_id && m.protocol == meta.provider)
            .map(|(name, _)| name.clone());
        if let Some(name) = configured {
            let flags = ModelFlags {
                model: Some(name),
                ..Default::default()
            };
            return resolve_model(config, &flags, |_| None);
        }
        self.agent
            .recorded_model(&meta.session_id)
            .filter(|r| r.protocol.as_str() == meta.provider && r.model_id == meta.model_id)
            .map(|record| record.to_spec())
            .ok_or_else(|| ConfigError::Invalid(format!(
                "the session used {}/{}, which is not configured and was not recorded; pass --model, or --provider with --base-url",
                meta.provider, meta.model_id
            )))
    }

    /// The built-in tools' configuration for a session of `model` (`None`: a scenario's
    /// model): `[tools]` or what the model's provider prefers, and the session's sandbox. Under
    /// a small window ([`Profile`] of `context_window`) the definitions are the compact ones,
    /// and at [`window::ESSENTIAL_WINDOW`] tokens or fewer only the essential tools
    /// ([`BuiltinTool::ESSENTIAL`]) are offered.
    pub fn tools_config(
        &self,
        model: Option<&ModelSpec>,
        sandbox: &Sandbox,
    ) -> Result<ToolsConfig, LaunchError> {
        let mut config = self.agent.config.tools_config(model)?;
        let profile = Profile::for_window(model.and_then(|m| m.context_window));
        if profile.compact() {
            config.descriptions = Descriptions::Compact;
        }
        if profile == Profile::Essential {
            config
                .enabled
                .retain(|t| BuiltinTool::ESSENTIAL.contains(t));
        }
        let root = &self.agent.location.root;
        Ok(ToolsConfig {
            // The user's skills: read by the model (file tools) and its commands, never written.
            sandbox: sandbox
                .clone()
                .with_readable([crate::skills::user_skills_dir(root)]),
            // Memory: written by the file tools only (the sandbox hides the data root).
            memory: vec![crate::memory::memory_root(root)],
            ..config
        })
    }

    /// The tools of a session of `spec` in `workspace`: the built-in tools, the agent's MCP
    /// servers, and `run_subagent`, whose children use the same tools under the same sandbox
    /// (without `run_subagent`: depth limit 1).
    pub fn session_tools(
        &self,
        spec: &ModelSpec,
        workspace: &Path,
        confinement: &Confinement,
    ) -> Result<Arc<dyn Environment>, LaunchError> {
        // The memory folders of this workspace exist before the tools and the prompt look.
        if let Err(e) = crate::memory::SessionMemory::prepare(&self.agent.location.root, workspace)
        {
            (self.notices)(&format!("memory is not available: {e}"));
        }
        let builtin = self.workspace_tools(Some(spec), workspace, confinement)?;
        // A child's answer is capped and archived like any tool output of the session.
        let limits = builtin.limits();
        let tools = self.with_servers(workspace, &confinement.sandbox, Arc::new(builtin));
        if Profile::for_window(spec.context_window).compact() {
            // A small window has no room for the subagent tools' definitions, nor a child
            // on the same model much room to work.
            return Ok(tools);
        }
        let spawner: Arc<dyn SubagentSpawner> = Arc::new(Spawner {
            launcher: self.clone(),
            spec: spec.clone(),
            models: self
                .agent
                .config
                .named_models()
                .into_iter()
                .filter_map(|(name, spec)| Some((name, spec.ok()?)))
                .collect(),
            workspace: workspace.to_path_buf(),
            confinement: confinement.clone(),
        });
        Ok(Arc::new(
            SubagentEnvironment::new(tools, spawner).with_limits(limits),
        ))
    }

    fn workspace_tools(
        &self,
        model: Option<&ModelSpec>,
        workspace: &Path,
        confinement: &Confinement,
    ) -> Result<BuiltinTools, LaunchError> {
        let mut config = self.tools_config(model, &confinement.sandbox)?;
        if Profile::for_window(model.and_then(|m| m.context_window)).compact() {
            // The compact prompt speaks of memory only when something is saved; without it
            // the model is not given the folders (nor memory_forget) either.
            let memory = crate::memory::SessionMemory::read(&self.agent.location.root, workspace);
            if !crate::prompt::has_notes(&memory) {
                config.memory.clear();
            }
        }
        BuiltinTools::new(workspace, config)
            .map(|t| t.with_bypass(confinement.bypass.clone()))
            .map_err(|e| LaunchError::Tools {
                workspace: workspace.to_path_buf(),
                source: e.into(),
            })
    }

    /// `tools` plus the agent's MCP servers (unchanged when there are none); their warnings
    /// are notices.
    pub fn with_servers(
        &self,
        workspace: &Path,
        sandbox: &Sandbox,
        tools: Arc<dyn Environment>,
    ) -> Arc<dyn Environment> {
        let servers = &self.agent.config.mcp_servers;
        if servers.is_empty() {
            return tools;
        }
        let config = ToolsConfig {
            sandbox: sandbox.clone(),
            ..ToolsConfig::default()
        };
        let notices = self.notices.clone();
        let env = McpEnvironment::new(tools, servers, workspace, sandbox.clone(), config)
            .with_warnings(Arc::new(move |w| notices(w)));
        Arc::new(env)
    }

    /// A scenario's scripted tools, or with `real_tools` the workspace's built-in tools and
    /// the agent's MCP servers.
    fn scenario_tools(
        &self,
        scripted: penguin_engine::scripted::ScriptedEnvironment,
        real_tools: bool,
        workspace: &Path,
        confinement: &Confinement,
    ) -> Result<Arc<dyn Environment>, LaunchError> {
        if !real_tools {
            return Ok(Arc::new(scripted));
        }
        let builtin = self.workspace_tools(None, workspace, confinement)?;
        Ok(self.with_servers(workspace, &confinement.sandbox, Arc::new(builtin)))
    }

    /// The configured models a session may be asked to run on, by name; one that does not
    /// resolve (a bad field) is a notice and left out.
    pub fn named_models(&self) -> Vec<(String, ModelSpec)> {
        let mut models = Vec::new();
        for (name, spec) in self.agent.config.named_models() {
            match spec {
                Ok(spec) => models.push((name, spec)),
                Err(e) => (self.notices)(&format!("model {name} is not offered: {e}")),
            }
        }
        models
    }

    /// The server's factory of sessions on `spec` (and the configured models a request may
    /// name), created in `workspace` unless a request says where, each with its own tools
    /// from [`Launcher::session_tools`] under the sandbox of `confinement` or the request's.
    #[cfg(feature = "server")]
    #[cfg_attr(docsrs, doc(cfg(feature = "server")))]
    pub fn model_factory(
        &self,
        spec: ModelSpec,
        workspace: PathBuf,
    ) -> Result<crate::hosting::ModelFactory, LaunchError> {
        // Each model's window is asked once, here: the factory's sessions get the prompt and
        // the tools it calls for, and a prompt that cannot fit is refused when a session is
        // created.
        let (spec, _) = window::sized(spec);
        let models: Vec<(String, ModelSpec)> = self
            .named_models()
            .into_iter()
            .map(|(name, spec)| (name, window::sized(spec).0))
            .collect();
        let launcher = self.clone();
        let tools_spec = spec.clone();
        let environment: crate::hosting::EnvironmentBuilder = Arc::new(
            move |ws: &Path, sandbox: &Sandbox, extra: &[McpServerConfig]| {
                // A request's own MCP servers come after the configured ones.
                let mut launcher = launcher.clone();
                launcher.agent.config.mcp_servers.extend_from_slice(extra);
                // Each session's grants of "run this once unsandboxed" are its own (its
                // subagents share them, as their calls are approved there too).
                let confinement = Confinement {
                    sandbox: sandbox.clone(),
                    bypass: SandboxBypass::new(),
                    strict: false,
                };
                launcher
                    .session_tools(&tools_spec, ws, &confinement)
                    .map_err(|e| e.to_string())
            },
        );
        // A default chosen by a flag or variable stays while the API edits default_model.
        let env = |k: &str| std::env::var(k).ok();
        let pinned = self.overrides.model.model.is_some()
            || self.overrides.model.provider.is_some()
            || env("PENGUIN_MODEL").is_some()
            || env("PENGUIN_PROVIDER").is_some();
        let live = crate::hosting::LiveModels::new(
            self.agent.location.root.clone(),
            spec.clone(),
            models.clone(),
            pinned,
        );
        Ok(crate::hosting::ModelFactory {
            checkpoints: self.agent.config.checkpoints.clone(),
            live: Some(live),
            models,
            system_prompt: crate::agent::DEFAULT_SYSTEM_PROMPT.to_owned(),
            default_workspace: workspace,
            engine: self.agent.engine_for(&spec),
            environment,
            policy: self.agent.policy(),
            sandbox: self.sandbox_request()?,
            data_root: Some(self.agent.location.root.clone()),
            hooks: self.agent.config.hooks.clone(),
            spec,
        })
    }
}

/// Refuses a model whose API key variable is unset before any request is sent, naming it.
pub fn check_key(spec: &ModelSpec) -> Result<(), LaunchError> {
    match spec.missing_key(|k| std::env::var(k).ok()) {
        Some(problem) => Err(LaunchError::MissingKey(problem)),
        None => Ok(()),
    }
}

/// The children of a session: on its model or another configured one (`run_subagent`'s
/// `model`), in its workspace, with tools of their own (their background commands, and where
/// their reports go, are the child's, never the parent's) under the same sandbox.
struct Spawner {
    launcher: Launcher,
    spec: ModelSpec,
    models: Vec<(String, ModelSpec)>,
    workspace: PathBuf,
    confinement: Confinement,
}

impl Spawner {
    fn choices(&self) -> ModelChoices<'_> {
        ModelChoices {
            default: &self.spec,
            named: &self.models,
        }
    }
}

impl SubagentSpawner for Spawner {
    fn spawn(&self) -> Result<Session, SessionError> {
        self.spawn_with(None)
    }

    fn spawn_with(&self, model: Option<&str>) -> Result<Session, SessionError> {
        let invalid = |e: String| SessionError::Config(ConfigError::Invalid(e));
        let spec = self
            .choices()
            .pick(model)
            .map_err(|e| invalid(e.to_string()))?;
        check_key(&spec).map_err(|e| invalid(e.to_string()))?;
        let (spec, window) = window::sized(spec);
        let ws = &self.workspace;
        let builtin = self
            .launcher
            .workspace_tools(Some(&spec), ws, &self.confinement)
            .map_err(|e| match e {
                LaunchError::Tools { .. } => SessionError::Tools(e.to_string().into()),
                e => invalid(e.to_string()),
            })?;
        let tools = self
            .launcher
            .with_servers(ws, &self.confinement.sandbox, Arc::new(builtin));
        let prompt = self.launcher.system_prompt(&spec, ws, tools.tools());
        window::check_fit(window, &prompt, &tools.tools()).map_err(|e| invalid(e.to_string()))?;
        let mut child = self.launcher.agent.create_session(
            &spec,
            ws,
            tools,
            Some(prompt),
            Some("subagent".into()),
        )?;
        // The parent's hooks, as the parent loaded them (its session said what was not
        // trusted): their subagent_stop hooks are the child's stop hooks.
        let hooks = self
            .launcher
            .hooks_saying(ws, &self.confinement, false)
            .map_err(|e| invalid(e.to_string()))?;
        if let Some(own) = hooks.and_then(|h| h.for_subagent()) {
            child.set_hooks(own);
        }
        Ok(child)
    }

    fn models(&self) -> Vec<String> {
        self.choices()
            .offered()
            .into_iter()
            .map(|m| m.name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher(root: &Path, overrides: Overrides) -> Launcher {
        Launcher::new(Agent::at(root.to_path_buf()).unwrap(), overrides).unwrap()
    }

    #[test]
    fn the_scripted_provider_without_a_scenario_is_refused_by_name() {
        let root = tempfile::tempdir().unwrap();
        let overrides = Overrides::default().model_flags(ModelFlags {
            provider: Some("scripted".into()),
            ..Default::default()
        });
        let err = launcher(root.path(), overrides).source().unwrap_err();
        assert_eq!(err.to_string(), "--provider scripted needs --scenario FILE");
    }

    #[test]
    fn an_mcp_override_joins_the_configured_servers_and_a_malformed_one_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let launcher = launcher(root.path(), Overrides::default().mcp(["fs=npx server"]));
        let names: Vec<_> = launcher
            .agent()
            .config
            .mcp_servers
            .iter()
            .map(|s| s.name.clone())
            .collect();
        assert_eq!(names, ["fs"]);
        let agent = Agent::at(root.path().to_path_buf()).unwrap();
        let err = Launcher::new(agent, Overrides::default().mcp(["no-equals-sign"])).unwrap_err();
        assert!(matches!(err, LaunchError::McpFlag(_)), "{err}");
    }

    /// A data root whose default model is an OpenAI-compatible server at `url` (the canned
    /// llama.cpp below), with `extra` lines in its `[models.local]`.
    fn local_model(root: &Path, url: &str, extra: &str) -> Launcher {
        std::fs::write(
            root.join("config.toml"),
            format!(
                "default_model = \"local\"\n[models.local]\nprotocol = \"openai-chat\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\n{extra}\n"
            ),
        )
        .unwrap();
        launcher(root, Overrides::default().sandbox("off"))
    }

    /// A llama.cpp `/props` answer for a window of `n_ctx`, on a runtime kept by the caller.
    fn llama_cpp(
        runtime: &tokio::runtime::Runtime,
        n_ctx: u64,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let props = serde_json::json!({"default_generation_settings": {"n_ctx": n_ctx}});
        runtime.block_on(crate::window::testing::canned_server(vec![(
            "GET /props",
            200,
            props.to_string(),
        )]))
    }

    #[test]
    fn a_4096_token_window_gets_the_compact_prompt_and_the_essential_tools() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (url, _) = llama_cpp(&runtime, 4096);
        let root = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let launcher = local_model(root.path(), &url, "");
        let confinement = launcher.confinement().unwrap();
        let session = launcher
            .new_session(workspace.path(), &confinement)
            .unwrap();
        let meta = session.session_meta();
        assert_eq!(
            meta.model_context_window,
            penguin_omni_protocol::ContextWindow::Tokens(4096)
        );
        assert!(
            meta.system_prompt.contains("\n\nWorkspace: "),
            "{}",
            meta.system_prompt
        );
        assert!(!meta.system_prompt.contains("# Tools"));
        assert!(!meta.system_prompt.contains("# Memory"));
        let tools = session.environment().tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["exec_command", "read_file", "write_file", "edit_file"]
        );
        assert_eq!(
            tools[0],
            BuiltinTool::ExecCommand.definition_with(Descriptions::Compact)
        );
        let fixed = penguin_llm_providers::limits::base_input_tokens(&meta.system_prompt, &tools);
        assert!(fixed < 1024, "{fixed} tokens of a 4096-token window");
        // The record says how the session was asked for: the window is asked again on resume.
        let record = launcher.agent().recorded_model(session.id()).unwrap();
        assert_eq!(record.context_window, None);
    }

    #[test]
    fn a_large_or_unknown_window_keeps_the_full_prompt_and_every_tool() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (url, _) = llama_cpp(&runtime, 32_768);
        let root = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let launcher = local_model(root.path(), &url, "");
        let confinement = launcher.confinement().unwrap();
        let session = launcher
            .new_session(workspace.path(), &confinement)
            .unwrap();
        let meta = session.session_meta();
        assert_eq!(
            meta.model_context_window,
            penguin_omni_protocol::ContextWindow::Tokens(32_768)
        );
        assert!(meta.system_prompt.contains("# Environment\n"));
        assert!(meta.system_prompt.contains("# Tools\n"));
        let names: Vec<_> = session
            .environment()
            .tools()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert!(names.contains(&"grep_files".to_owned()), "{names:?}");
        assert!(names.contains(&"run_subagent".to_owned()), "{names:?}");
    }

    #[test]
    fn a_prompt_that_cannot_fit_fails_at_once_in_one_line_and_asks_the_model_nothing() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (url, seen) = llama_cpp(&runtime, 1024);
        let root = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(
            workspace.path().join("AGENTS.md"),
            "Always answer in the style of a sonnet. ".repeat(30),
        )
        .unwrap();
        let launcher = local_model(root.path(), &url, "");
        let confinement = launcher.confinement().unwrap();
        let began = std::time::Instant::now();
        let err = launcher
            .new_session(workspace.path(), &confinement)
            .unwrap_err();
        assert!(began.elapsed() < std::time::Duration::from_secs(5));
        let LaunchError::PromptTooLarge(too_large) = &err else {
            panic!("{err}");
        };
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with(&format!(
                "the prompt does not fit the model's context window: the window is 1024 tokens (from the server's /props) and the compact system prompt with 4 tool definitions takes ~{} tokens",
                too_large.prompt_tokens
            )),
            "{line}"
        );
        // The server was asked for its window, never for a completion.
        let requests = seen.lock().unwrap().clone();
        assert!(
            requests.iter().all(|r| r.starts_with("GET /props ")),
            "{requests:?}"
        );
        // A configured window says so.
        let launcher = local_model(root.path(), &url, "context_window = 700");
        let err = launcher
            .new_session(workspace.path(), &confinement)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("the window is 700 tokens (configured)"),
            "{err}"
        );
    }

    #[test]
    fn a_session_made_by_the_launcher_resumes_on_the_model_it_was_made_with() {
        let root = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let launcher = launcher(
            root.path(),
            Overrides::default().model("demo").sandbox("off"),
        );
        let confinement = launcher.confinement().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let id = runtime.block_on(async {
            use futures::StreamExt;
            let mut session = launcher
                .new_session(workspace.path(), &confinement)
                .unwrap();
            let options = penguin_engine::RunOptions::new(Arc::new(penguin_engine::AllowAll));
            let input = vec![penguin_omni_protocol::build::user_text("hello")];
            session
                .run(input, options)
                .unwrap()
                .collect::<Vec<_>>()
                .await;
            session.writer().flush().unwrap();
            session.id().to_owned()
        });
        // No override: the model comes from the session's record.
        let plain = Launcher::new(
            Agent::at(root.path().to_path_buf()).unwrap(),
            Overrides::default().sandbox("off"),
        )
        .unwrap();
        let resumed = runtime
            .block_on(async { plain.open_session(&id, &confinement) })
            .unwrap();
        assert_eq!(resumed.id(), id);
        assert_eq!(resumed.session_meta().provider, "demo");
        assert!(
            resumed.sandbox().is_some(),
            "the resumed session's tools are sandboxed"
        );
    }
}
