//! The agent: where sessions live (data root, project, agent) and how they are created,
//! listed and resumed.

// The door (clippy.toml) is for paths a command can change: this module touches only the data
// root (session model records, the traces' folders), which commands never reach (docs/security.md).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use penguin_engine::{EngineConfig, Environment, Llm};
use penguin_omni_protocol::{EventPayload, SessionMeta, StopReason};
use penguin_trace_store::{
    data_root, find_last_record, is_regular_entry, parse_trace_file_name, read_session_head,
    Durability, TraceLocation, LIST_TAIL_BYTES,
};

use crate::config::{Config, ConfigError};
use crate::models::ModelSpec;
use crate::session::{Session, SessionError, SessionSpec, ToolsError};

/// The system prompt of sessions that do not bring their own.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a capable software agent working in the user's workspace through penguin. \
Use the tools to inspect and change files and to run commands; prefer small, verifiable steps, and say plainly what you did.";

/// Where an agent's sessions live and how they are configured.
#[derive(Clone, Debug)]
pub struct Agent {
    /// Data root, project and agent name.
    pub location: TraceLocation,
    /// The parsed `config.toml`.
    pub config: Config,
    /// When traces are fsynced.
    pub durability: Durability,
    /// Engine settings for new and resumed sessions.
    pub engine: EngineConfig,
}

/// A built model with what `session_meta` records about it.
pub struct SessionModel {
    /// The model.
    pub llm: Box<dyn Llm>,
    /// Provider group (`session_meta.provider`).
    pub provider: String,
    /// Upstream model id.
    pub model_id: String,
    /// Context window, when known.
    pub context_window: Option<u64>,
}

impl std::fmt::Debug for SessionModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionModel")
            .field("provider", &self.provider)
            .field("model_id", &self.model_id)
            .finish()
    }
}

/// One line of `penguin sessions`.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSummary {
    /// Session id.
    pub id: String,
    /// When it was created (from the id's timestamp part, local time).
    pub created: String,
    /// `provider/model_id`.
    pub model: String,
    /// The first user text, shortened.
    pub title: String,
    /// The first user text as a search reads it (whitespace collapsed, bounded:
    /// `penguin_trace_store::PROMPT_CHARS`).
    pub prompt: String,
    /// How the last run ended: `completed`, `aborted`, `failed`, `running or interrupted`, `empty`.
    pub state: String,
    /// The workspace its tools act on (empty when the trace has no `session_meta`).
    pub workspace: String,
    /// Trace files (one per model context).
    pub files: Vec<PathBuf>,
    /// When its trace was last written (the newest file's modification time).
    pub updated: std::time::SystemTime,
    /// A subagent's session (`session_meta.source`), which its parent session drives.
    pub subagent: bool,
}

/// A session id that names no session, or more than one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionLookupError {
    /// No session id matches.
    #[error("no session matches {0:?} (see `penguin sessions`)")]
    NotFound(String),
    /// Several do.
    #[error("{query:?} matches {count} sessions ({}{}); give more of the id", matches.join(", "), if *count > matches.len() { ", …" } else { "" })]
    Ambiguous {
        /// What was asked.
        query: String,
        /// The newest few matches.
        matches: Vec<String>,
        /// How many matched.
        count: usize,
    },
    /// The traces could not be listed.
    #[error("cannot list the sessions: {0}")]
    Io(std::io::Error),
}

/// The one id of `ids` (oldest first) that `query` names: the full id, a unique prefix (with or
/// without `session-`), or a unique suffix (the short id the CLI shows).
pub fn match_session_id(ids: &[String], query: &str) -> Result<String, SessionLookupError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(SessionLookupError::NotFound(String::new()));
    }
    if ids.iter().any(|id| id == query) {
        return Ok(query.to_owned());
    }
    let long = format!("session-{query}");
    let hits: Vec<&String> = ids
        .iter()
        .filter(|id| id.starts_with(query) || id.starts_with(&long) || id.ends_with(query))
        .collect();
    match hits.as_slice() {
        [] => Err(SessionLookupError::NotFound(query.to_owned())),
        [one] => Ok((*one).clone()),
        many => Err(SessionLookupError::Ambiguous {
            query: query.to_owned(),
            matches: many.iter().rev().take(5).map(|s| (*s).clone()).collect(),
            count: many.len(),
        }),
    }
}

impl Agent {
    /// The default agent under `PENGUIN_HOME` (or `~/.penguin/data`), project `default`,
    /// agent `penguin`, with `config.toml` loaded.
    pub fn from_env() -> Result<Agent, ConfigError> {
        Agent::at(data_root())
    }

    /// The default project and agent under `root`.
    pub fn at(root: PathBuf) -> Result<Agent, ConfigError> {
        let config = Config::load(&root)?;
        // A wrong `[tools] edit` is said before any session is built (a build without the
        // built-in tools offers no edit tools to choose).
        #[cfg(feature = "tools")]
        config.tools.edit()?;
        config.session.approval()?;
        let engine = EngineConfig {
            compaction: Some(config.compaction.to_engine()?),
            max_turns: config.session.max_turns()?,
            ..EngineConfig::default()
        };
        Ok(Agent {
            location: TraceLocation::new(root, "default", "penguin"),
            durability: config.trace.durability()?,
            config,
            engine,
        })
    }

    /// Creates a session with `model` acting on `workspace` through `env`.
    pub fn create_session(
        &self,
        model: &ModelSpec,
        workspace: &Path,
        env: Arc<dyn Environment>,
        system_prompt: Option<String>,
        source: Option<String>,
    ) -> Result<Session, SessionError> {
        let system_prompt = system_prompt.unwrap_or_else(|| {
            crate::prompt::system_prompt_in(
                DEFAULT_SYSTEM_PROMPT,
                workspace,
                env.tools(),
                &self.location.root,
            )
        });
        let spec = SessionSpec::new(self.location.clone(), workspace.to_path_buf())
            .with_system_prompt(system_prompt)
            .with_source(source)
            .with_durability(self.durability)
            .with_engine(self.engine_for(model));
        let mut session = Session::create_for_model(spec, model, env)?;
        session.set_command_policy(self.policy());
        if let Err(e) = self.record_model(session.id(), model) {
            tracing::warn!(
                "[penguin] how session {} reaches its model could not be saved ({e}); resuming it will need --model or --provider",
                session.id()
            );
        }
        Ok(session)
    }

    /// The command policy of `config.toml`'s `[policy]`.
    pub fn policy(&self) -> penguin_tools::policy::CommandPolicy {
        penguin_tools::policy::CommandPolicy::forbidding(
            self.config.policy.forbidden_commands.clone(),
        )
    }

    /// Engine settings for a session on `spec` (compaction sized to the model's window).
    pub fn engine_for(&self, spec: &ModelSpec) -> EngineConfig {
        crate::models::engine_config_for(
            &self.engine,
            spec,
            self.config.compaction.max_context_length,
        )
    }

    /// Creates a session around an already-built model (a scripted one, a custom adapter).
    pub fn create_session_with(
        &self,
        model: SessionModel,
        workspace: &Path,
        env: Arc<dyn Environment>,
        system_prompt: Option<String>,
        source: Option<String>,
    ) -> Result<Session, SessionError> {
        let spec = SessionSpec::new(self.location.clone(), workspace.to_path_buf())
            .with_model(model.provider, model.model_id)
            .with_context_window(model.context_window)
            .with_system_prompt(system_prompt.unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()))
            .with_source(source)
            .with_durability(self.durability)
            .with_engine(self.engine.clone());
        let mut session = Session::create(spec, model.llm, env)?;
        session.set_command_policy(self.policy());
        Ok(session)
    }

    /// Resumes a session around an already-built model; `make_env` builds the tools for the
    /// session's recorded workspace.
    pub fn resume_session_with(
        &self,
        id: &str,
        llm: Box<dyn Llm>,
        make_env: impl FnOnce(&Path) -> Result<Arc<dyn Environment>, ToolsError>,
    ) -> Result<Session, SessionError> {
        let (resumed, writer) = Session::load(&self.location, id, self.durability)?;
        let env = make_env(Path::new(&resumed.meta.workspace)).map_err(SessionError::Tools)?;
        let mut session = Session::resume(resumed, writer, self.engine.clone(), llm, env)?;
        session.set_command_policy(self.policy());
        Ok(session)
    }

    /// Resumes a session by id. `pick_model` maps the session's recorded provider and model to
    /// a spec (normally: the configured model with that id, or flags); `make_env` builds the
    /// tools for the recorded workspace and the picked model.
    pub fn resume_session(
        &self,
        id: &str,
        pick_model: impl FnOnce(&SessionMeta) -> Result<ModelSpec, ConfigError>,
        make_env: impl FnOnce(&Path, &ModelSpec) -> Result<Arc<dyn Environment>, ToolsError>,
    ) -> Result<Session, SessionError> {
        let (resumed, writer) = Session::load(&self.location, id, self.durability)?;
        let model = pick_model(&resumed.meta)?;
        let env =
            make_env(Path::new(&resumed.meta.workspace), &model).map_err(SessionError::Tools)?;
        let mut session =
            Session::resume_for_model(resumed, writer, self.engine_for(&model), &model, env)?;
        session.set_command_policy(self.policy());
        Ok(session)
    }

    /// Where the facade keeps its own per-session files (beside the traces, never in them).
    fn models_dir(&self) -> PathBuf {
        self.agent_dir().join("session_models")
    }

    /// `<root>/<project>/agents/<agent>`: the traces and the agent's other files below it.
    pub(crate) fn agent_dir(&self) -> PathBuf {
        self.location
            .root
            .join(&self.location.project)
            .join("agents")
            .join(&self.location.agent)
    }

    /// Saves how session `id` reaches its model (protocol, base URL, key variable; never a
    /// key), so a session made with ad-hoc flags resumes without them.
    pub fn record_model(&self, id: &str, spec: &ModelSpec) -> std::io::Result<()> {
        let dir = self.models_dir();
        std::fs::create_dir_all(&dir)?;
        let record = crate::models::ModelRecord::from(spec);
        let text = serde_json::to_string_pretty(&record).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(format!("{id}.json")), text)
    }

    /// The model record saved for session `id`, when there is one.
    pub fn recorded_model(&self, id: &str) -> Option<crate::models::ModelRecord> {
        let text = std::fs::read_to_string(self.models_dir().join(format!("{id}.json"))).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Forks stored session `id` at `at` into a new session without loading it (no model
    /// needed): its trace up to the end of that task (see [`Session::fork`]), and how the
    /// source reaches its model, so the fork resumes as the source would.
    pub fn fork_session(
        &self,
        id: &str,
        at: penguin_trace_store::ForkPoint,
    ) -> Result<penguin_trace_store::Forked, penguin_trace_store::ForkError> {
        let forked = penguin_trace_store::fork_session(&self.location.traces_dir(), id, at)?;
        let (from, to) = (
            self.models_dir().join(format!("{id}.json")),
            self.models_dir()
                .join(format!("{}.json", forked.session_id)),
        );
        if from.exists() {
            if let Err(e) = std::fs::copy(&from, &to) {
                tracing::warn!(
                    "[penguin] the model record of {id} was not copied to its fork ({e}); resuming the fork may need --model or --provider"
                );
            }
        }
        Ok(forked)
    }

    /// The one session `query` names: its full id, a unique prefix (with or without
    /// `session-`), or a unique suffix (the short id the CLI shows).
    pub fn resolve_id(&self, query: &str) -> Result<String, SessionLookupError> {
        let ids = self.session_ids().map_err(SessionLookupError::Io)?;
        match_session_id(&ids, query)
    }

    /// Every session id with a trace, oldest first (ids sort by creation time).
    pub fn session_ids(&self) -> std::io::Result<Vec<String>> {
        Ok(self.session_files()?.into_keys().collect())
    }

    fn session_files(&self) -> std::io::Result<BTreeMap<String, Vec<PathBuf>>> {
        let dir = self.location.traces_dir();
        let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let dates = match std::fs::read_dir(&dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
            Err(e) => return Err(e),
        };
        for date in dates {
            let date = date?.path();
            if !date.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(&date)? {
                let f = f?;
                // A FIFO or a device with a trace's name is no session (and is never opened).
                if !is_regular_entry(&f) {
                    continue;
                }
                let path = f.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if let Some((id, _)) = parse_trace_file_name(name) {
                    files.entry(id.to_owned()).or_default().push(path.clone());
                }
            }
        }
        for paths in files.values_mut() {
            paths.sort();
        }
        Ok(files)
    }

    /// Every session with a trace, most recently active first.
    /// The `limit` most recently written sessions that `keep` accepts, those whose id `first`
    /// accepts (pinned ones) before the others, newest first, and how many more sessions were
    /// not read. Only the sessions looked at are read (a stat of each file is all the others
    /// cost), so the first page of thousands of sessions is quick.
    pub fn recent_sessions(
        &self,
        limit: usize,
        first: impl Fn(&str) -> bool,
        keep: impl Fn(&SessionSummary) -> bool,
    ) -> std::io::Result<(Vec<SessionSummary>, usize)> {
        let newest = |paths: &[PathBuf]| {
            paths
                .iter()
                .filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
                .max()
                .unwrap_or(std::time::UNIX_EPOCH)
        };
        let mut all: Vec<(std::time::SystemTime, String, Vec<PathBuf>)> = self
            .session_files()?
            .into_iter()
            .map(|(id, paths)| (newest(&paths), id, paths))
            .collect();
        all.sort_by_cached_key(|(time, id, _)| {
            (
                std::cmp::Reverse(first(id)),
                std::cmp::Reverse(*time),
                std::cmp::Reverse(id.clone()),
            )
        });
        let total = all.len();
        let mut out = Vec::new();
        let mut read = 0;
        for (_, id, paths) in all {
            if out.len() == limit {
                break;
            }
            read += 1;
            let s = summarize(id, paths);
            if keep(&s) {
                out.push(s);
            }
        }
        Ok((out, total - read))
    }

    /// Every session, most recently active first (see [`recent_sessions`](Self::recent_sessions)
    /// for one page).
    pub fn sessions(&self) -> std::io::Result<Vec<SessionSummary>> {
        let mut out: Vec<SessionSummary> = self
            .session_files()?
            .into_iter()
            .map(|(id, paths)| summarize(id, paths))
            .collect();
        // Most recently active first: two sessions made in the same second have ids that order
        // by their random suffix, not by which came last.
        out.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| b.id.cmp(&a.id)));
        Ok(out)
    }
}

/// One session's line, from a bounded head of its first file (`session_meta`, the first
/// prompt) and a bounded tail of its last (how the last run ended): never a whole file, so
/// listing costs the same however long the sessions are.
fn summarize(id: String, files: Vec<PathBuf>) -> SessionSummary {
    // An unreadable file lists as a session without them, as an empty one does.
    let head = files
        .first()
        .and_then(|first| read_session_head(first).ok())
        .unwrap_or_default();
    let meta = head.meta.as_ref();
    let title = head.title.clone().unwrap_or_default();
    let prompt = head.prompt.clone().unwrap_or_default();
    let state = files
        .last()
        .and_then(|last| {
            find_last_record(last, LIST_TAIL_BYTES, |m| match m.event() {
                Some(EventPayload::Abort { .. }) => Some("aborted"),
                Some(EventPayload::RequestEnd {
                    status: StopReason::Completed,
                    ..
                }) => Some("completed"),
                Some(EventPayload::RequestEnd { .. }) => Some("failed"),
                Some(EventPayload::RequestBegin) => Some("running or interrupted"),
                _ => None,
            })
            .ok()
            .flatten()
        })
        .unwrap_or("empty")
        .to_owned();
    // session-YYYY-MM-DD-HH-mm-ss-xxxxxxxx
    let created = id
        .strip_prefix("session-")
        .and_then(|rest| rest.get(..19))
        .and_then(|t| {
            Some(format!(
                "{} {}",
                t.get(..10)?,
                t.get(11..)?.replace('-', ":")
            ))
        })
        .unwrap_or_default();
    let updated = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(std::time::UNIX_EPOCH);
    SessionSummary {
        updated,
        model: meta
            .map(|m| format!("{}/{}", m.provider, m.model_id))
            .unwrap_or_default(),
        workspace: meta.map(|m| m.workspace.clone()).unwrap_or_default(),
        subagent: meta.is_some_and(|m| m.source.as_deref() == Some("subagent")),
        id,
        created,
        title,
        prompt,
        state,
        files,
    }
}

#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
impl Agent {
    /// Where this agent's sessions keep their checkpoints ([`crate::rewind::checkpoint_store`]).
    pub fn checkpoint_store(&self) -> penguin_tools::checkpoint::Store {
        crate::rewind::checkpoint_store(&self.location)
    }

    /// The checkpoint of session `id`'s workspace from before task `task` ran: the first one
    /// taken after task `task - 1` ended (the session's first for task 1). Checkpoints that
    /// cannot be read are passed over, and said in the second value.
    pub fn checkpoint_before(
        &self,
        id: &str,
        task: usize,
    ) -> Result<(penguin_tools::checkpoint::Manifest, Vec<String>), crate::rewind::RewindError>
    {
        crate::rewind::checkpoint_before(
            &self.checkpoint_store(),
            &self.location.traces_dir(),
            id,
            task,
        )
    }
}
