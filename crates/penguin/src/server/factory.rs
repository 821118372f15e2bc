//! Where the server gets a session's model and tools from: the [`SessionFactory`] seam, and the
//! scripted [`ScenarioFactory`] used by `penguin serve --provider scripted` and the tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use penguin_engine::{EngineConfig, Environment, Llm};
use penguin_omni_protocol::SessionMeta;
use penguin_trace_store::{Durability, Resumed, TraceLocation};

use crate::models::{build_llm, ModelContext, ModelSpec};
use crate::scenario::Scenario;
use crate::session::SessionSpec;

/// The body of `POST /api/sessions`, after validation, plus where the trace must live.
#[derive(Clone, Debug)]
pub struct CreateSession {
    /// `provider` of the request, when given.
    pub provider: Option<String>,
    /// `model` of the request, when given.
    pub model: Option<String>,
    /// `workspace` of the request, when given.
    pub workspace: Option<PathBuf>,
    /// Where the server keeps traces. The server overwrites `SessionSpec::location` with this,
    /// because it reads history from there.
    pub location: TraceLocation,
    /// The server's durability policy, suggested for `SessionSpec::durability`.
    pub durability: Durability,
}

/// What a new session is built from.
pub struct SessionParts {
    /// The session's description (location, provider, prompt, workspace, engine settings).
    pub spec: SessionSpec,
    /// The model.
    pub llm: Box<dyn Llm>,
    /// The tools; also consulted for `read-only` approvals.
    pub env: Arc<dyn Environment>,
    /// The model a compacted context continues with; `None` never compacts.
    pub compaction_model: Option<ModelSpec>,
}

impl std::fmt::Debug for SessionParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionParts")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// What a resumed session is built from (its trace already gives the rest).
pub struct ResumeParts {
    /// Engine settings for the resumed session.
    pub engine: EngineConfig,
    /// The model, already holding the resumed history when it needs it.
    pub llm: Box<dyn Llm>,
    /// The tools.
    pub env: Arc<dyn Environment>,
    /// The model a compacted context continues with; `None` never compacts.
    pub compaction_model: Option<ModelSpec>,
}

impl std::fmt::Debug for ResumeParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeParts")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

/// Builds the model and tools of the sessions a server hosts.
///
/// The server owns everything else (ids, traces, channels, approvals), so a real-model factory
/// (config + `build_llm` + the real tools) and a scripted one plug in the same way.
pub trait SessionFactory: Send + Sync {
    /// Parts for a new session. An `Err` is answered 400 `invalid_request` with the message, so
    /// say which field was wrong.
    fn create(&self, req: &CreateSession) -> Result<SessionParts, String>;

    /// Parts for a session found on disk (after a restart). `meta` is its `session_meta`;
    /// `resumed` is what the trace gives (history for models that need it). An `Err` is
    /// answered 409 `session_unrecoverable`.
    fn resume(&self, meta: &SessionMeta, resumed: &Resumed) -> Result<ResumeParts, String>;
}

/// Plays one scenario file's scripted model and tools in every session.
///
/// Each session gets its own, unconsumed copy of the scripts: the file is parsed again per
/// session, because clones of a `ScriptedModel` share one queue of requests.
#[derive(Clone, Debug)]
pub struct ScenarioFactory {
    text: Arc<str>,
    path: PathBuf,
    workspace: PathBuf,
}

impl ScenarioFactory {
    /// Reads and validates a scenario file. Sessions default to the current directory as their
    /// workspace.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ScenarioFactory, String> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read scenario {}: {e}", path.display()))?;
        let workspace = std::env::current_dir()
            .map_err(|e| format!("cannot determine the current directory: {e}"))?;
        ScenarioFactory::from_text(&text, path, workspace)
    }

    /// A factory over scenario text; `path` only names it in messages.
    pub fn from_text(
        text: &str,
        path: impl Into<PathBuf>,
        workspace: impl Into<PathBuf>,
    ) -> Result<ScenarioFactory, String> {
        let path = path.into();
        Scenario::parse(text).map_err(|e| format!("invalid scenario {}: {e}", path.display()))?;
        Ok(ScenarioFactory {
            text: text.into(),
            path,
            workspace: workspace.into(),
        })
    }

    /// Sets the default workspace of new sessions.
    pub fn with_workspace(mut self, workspace: impl Into<PathBuf>) -> ScenarioFactory {
        self.workspace = workspace.into();
        self
    }

    fn fresh(&self) -> Result<Scenario, String> {
        Scenario::parse(&self.text)
            .map_err(|e| format!("invalid scenario {}: {e}", self.path.display()))
    }
}

impl SessionFactory for ScenarioFactory {
    fn create(&self, req: &CreateSession) -> Result<SessionParts, String> {
        if let Some(p) = req.provider.as_deref() {
            if p != "scripted" {
                return Err(format!(
                    "provider: this server plays a scenario file and only offers \"scripted\", not {p:?}"
                ));
            }
        }
        let workspace = checked_workspace(
            req.workspace
                .clone()
                .unwrap_or_else(|| self.workspace.clone()),
        )?;
        let sc = self.fresh()?;
        Ok(SessionParts {
            spec: SessionSpec {
                location: req.location.clone(),
                provider: "scripted".into(),
                model_id: req.model.clone().unwrap_or_else(|| "scenario".into()),
                context_window: None,
                system_prompt: String::new(),
                workspace,
                source: None,
                durability: req.durability,
                engine: sc.engine,
            },
            llm: Box::new(sc.llm),
            env: Arc::new(sc.tools),
            compaction_model: None,
        })
    }

    fn resume(&self, _meta: &SessionMeta, _resumed: &Resumed) -> Result<ResumeParts, String> {
        let sc = self.fresh()?;
        Ok(ResumeParts {
            engine: sc.engine,
            llm: Box::new(sc.llm),
            env: Arc::new(sc.tools),
            compaction_model: None,
        })
    }
}

/// The workspace as an absolute, symlink-free path (so the session and its resume agree on it,
/// whatever the server's current directory), or why it cannot be used.
fn checked_workspace(workspace: PathBuf) -> Result<PathBuf, String> {
    match workspace.canonicalize() {
        Ok(abs) if abs.is_dir() => Ok(abs),
        _ => Err(format!(
            "workspace: {} is not an existing directory",
            workspace.display()
        )),
    }
}

/// Builds the tools of a session acting on a workspace.
pub type EnvironmentBuilder = Arc<dyn Fn(&Path) -> Arc<dyn Environment> + Send + Sync>;

/// Serves one configured model ([`ModelSpec`], e.g. from `config::resolve_model`) with the tools
/// an [`EnvironmentBuilder`] gives for each session's workspace.
#[derive(Clone)]
pub struct ModelFactory {
    /// The model every session uses (`model` in a request overrides its id).
    pub spec: ModelSpec,
    /// The system prompt of new sessions.
    pub system_prompt: String,
    /// The workspace of sessions created without one.
    pub default_workspace: PathBuf,
    /// Engine settings.
    pub engine: EngineConfig,
    /// The tools for a workspace.
    pub environment: EnvironmentBuilder,
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

impl SessionFactory for ModelFactory {
    fn create(&self, req: &CreateSession) -> Result<SessionParts, String> {
        if let Some(p) = req.provider.as_deref() {
            if p != self.spec.protocol.as_str() {
                return Err(format!(
                    "provider: this server is configured for {:?}, not {p:?}",
                    self.spec.protocol.as_str()
                ));
            }
        }
        let mut spec = self.spec.clone();
        if let Some(m) = &req.model {
            spec.model_id = m.clone();
        }
        let workspace = checked_workspace(
            req.workspace
                .clone()
                .unwrap_or_else(|| self.default_workspace.clone()),
        )?;
        let env = (self.environment)(&workspace);
        let llm = build_llm(
            &spec,
            ModelContext {
                system_prompt: self.system_prompt.clone(),
                tools: env.tools(),
                ..ModelContext::default()
            },
        )
        .map_err(|e| format!("model: {e}"))?;
        Ok(SessionParts {
            spec: SessionSpec {
                location: req.location.clone(),
                provider: spec.protocol.as_str().into(),
                model_id: spec.model_id.clone(),
                context_window: spec.context_window,
                system_prompt: self.system_prompt.clone(),
                workspace,
                source: None,
                durability: req.durability,
                engine: self.engine.clone(),
            },
            llm,
            env,
            compaction_model: Some(spec),
        })
    }

    fn resume(&self, meta: &SessionMeta, resumed: &Resumed) -> Result<ResumeParts, String> {
        let mut spec = self.spec.clone();
        if meta.provider != spec.protocol.as_str() {
            return Err(format!(
                "the session was recorded with provider {:?}; this server serves {:?}",
                meta.provider,
                spec.protocol.as_str()
            ));
        }
        spec.model_id = meta.model_id.clone();
        let env = (self.environment)(Path::new(&meta.workspace));
        let llm = build_llm(
            &spec,
            ModelContext {
                system_prompt: meta.system_prompt.clone(),
                tools: env.tools(),
                history: resumed.history.clone(),
                session_tokens: resumed.session_tokens,
            },
        )
        .map_err(|e| format!("model: {e}"))?;
        Ok(ResumeParts {
            engine: self.engine.clone(),
            llm,
            env,
            compaction_model: Some(spec),
        })
    }
}
