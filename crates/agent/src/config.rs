//! Configuration: `config.toml` under the data root, environment variables, and flags.
//!
//! Precedence is flags > environment > file > defaults. With nothing configured the `demo`
//! model is used, so penguin runs offline on a fresh machine. Keys are never stored: a model
//! names the environment variable that holds its key.
//!
//! The file is read here; its models are changed in place by [`edit`] (`penguin models`, the
//! server's `/api/models`), which keeps the user's comments and layout.
//!
//! ```toml
//! default_model = "local"
//!
//! [models.local]
//! protocol = "openai-chat"            # openai-chat | openai-responses | anthropic-messages |
//!                                     # gemini | ollama | demo | an adapter the embedder
//!                                     # registered (models::register_adapter)
//! base_url = "http://127.0.0.1:8080/v1"
//! model = "smollm2"
//! api_key_env = "LOCAL_KEY"           # optional; each protocol has a default variable
//! max_output_tokens = 2048            # optional
//! context_window = 8192               # optional; bounds max_tokens per request to what the
//!                                     # window leaves after the prompt
//! thinking_level = "low"              # optional: none, low, medium, high, xhigh, max
//! idle_timeout_ms = 120000            # optional
//! max_message_bytes = 8388608         # optional; the most one streamed message may hold (8 MiB)
//! headers = { "X-Team" = "penguin" }  # optional
//! vision = false                      # optional; false: no read_image (the default is true)
//! reconnect_attempts = 1              # optional; retries of a failed request (default 5,
//!                                     # about a minute in all); 0 fails at once
//! prompt_cache = false               # optional; true by default: Anthropic cache_control
//!                                     # breakpoints, OpenAI prompt_cache_key (docs/cost.md)
//! price = { input = 3.0, output = 15.0, cached_input = 0.30, cache_write = 3.75 }
//!                                     # optional; dollars per million tokens, over the
//!                                     # table of well-known models (pricing, docs/cost.md)
//!
//! [tools]                             # optional
//! edit = "classic"                    # classic (write_file + edit_file) | apply_patch | both;
//!                                     # absent: apply_patch for openai-responses, classic for
//!                                     # the other providers
//!
//! [compaction]                        # optional; these are the defaults
//! max_context_length = 256000         # capped at the model's window - 2048; 0 disables
//! max_session_turns = -1
//! mode = "summarize"                  # or "discard"
//!
//! [session]                         # optional
//! max_turns = 50                      # model requests per task; -1 (the default): no cap
//! approval = "read-only"              # always-ask (alias ask; the default) | read-only |
//!                                     # deny-all | allow-all; a flag (--approve, --yes) wins
//!
//! [policy]
//! forbidden_commands = ["rm -rf /", "git push --force"]   # answered "forbidden", never asked
//!
//! [sandbox]                           # optional; confines exec_command (docs/security.md)
//! mode = "workspace-write"            # workspace-write (default where the kernel has Landlock) | read-only | off
//! network = false                     # the default; true lets commands use the network
//! allow_ports = [5432]                # TCP ports still allowed with network = false
//! writable = ["~/.cache/pip"]         # more writable directories in workspace-write mode
//! inherit_env = ["CARGO_HOME", "PIP_*"]   # variables commands get besides PATH, HOME, LANG, ...
//! strict = false                      # refuse to start when the kernel cannot enforce it all
//!
//! [[hooks.pre_tool_use]]              # optional; your programs at decision points (docs/hooks.md)
//! matcher = "exec_command"            # a regex over the tool name; absent: every tool
//! command = "no-rm-hook --strict"     # run with sh -c, the event's JSON on stdin
//! timeout_ms = 10000                  # optional
//! ```

// The door (clippy.toml) is for paths a command can change: config.toml lies under the data
// root, which commands never reach (docs/security.md).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[cfg(feature = "tools")]
use penguin_tools::{BuiltinTool, EditTools, SandboxMode, SandboxRequest, ToolsConfig};
use serde::Deserialize;

pub use crate::models::default_base_url;
use crate::models::{ModelSpec, Protocol};

/// The parsed `config.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The model used when no flag or variable names one.
    pub default_model: Option<String>,
    /// Named models.
    #[serde(default)]
    pub models: BTreeMap<String, ModelEntry>,
    /// Context compaction.
    #[serde(default)]
    pub compaction: CompactionEntry,
    /// What sessions never run.
    #[serde(default)]
    pub policy: PolicyEntry,
    /// What confines the commands sessions run.
    #[serde(default)]
    pub sandbox: SandboxEntry,
    /// MCP servers whose tools every session gets (`[[mcp_servers]]`).
    #[serde(default)]
    pub mcp_servers: Vec<McpServerEntry>,
    /// How traces are written.
    #[serde(default)]
    pub trace: TraceEntry,
    /// `penguin serve`'s capacity.
    #[serde(default)]
    pub server: ServerEntry,
    /// The tools sessions are offered.
    #[serde(default)]
    pub tools: ToolsEntry,
    /// How sessions run tasks: the turn cap and the approval preset.
    #[serde(default)]
    pub session: SessionEntry,
    /// `penguin serve` as one node of a cluster on NATS JetStream.
    #[serde(default)]
    pub cluster: ClusterEntry,
    /// The user's hooks: `[[hooks.EVENT]]` tables (`docs/hooks.md`).
    #[cfg(feature = "tools")]
    #[serde(default)]
    pub hooks: crate::hooks::HooksConfig,
    /// What the checkpoints before and after each task keep (`docs/rewind.md`).
    #[serde(default)]
    pub checkpoints: CheckpointsEntry,
}

/// `[checkpoints]` in `config.toml`: whether sessions take checkpoints of their workspace, and
/// what they keep.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointsEntry {
    /// `false`: no checkpoints (and no rewind of the files). Default on.
    pub enabled: Option<bool>,
    /// Keep what the workspace's ignore files exclude too (build output, dependencies).
    /// Default off.
    pub include_ignored: bool,
    /// A larger file is left out, in MiB (default 16).
    pub max_file_mb: Option<u64>,
    /// New content one checkpoint stores at most, in MiB (default 256).
    pub max_new_mb: Option<u64>,
    /// The whole store's bound, in GiB (default 4): past it, the checkpoints of the sessions
    /// checkpointed least recently go first.
    pub store_max_gb: Option<u64>,
}

impl CheckpointsEntry {
    /// Whether sessions take checkpoints.
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// What one checkpoint keeps.
    #[cfg(feature = "tools")]
    pub fn limits(&self) -> penguin_tools::checkpoint::Limits {
        let defaults = penguin_tools::checkpoint::Limits::default();
        penguin_tools::checkpoint::Limits {
            max_file_bytes: self
                .max_file_mb
                .map_or(defaults.max_file_bytes, |mb| mb.saturating_mul(1 << 20)),
            max_new_bytes: self
                .max_new_mb
                .map_or(defaults.max_new_bytes, |mb| mb.saturating_mul(1 << 20)),
            include_ignored: self.include_ignored,
        }
    }

    /// The store's bound, in bytes.
    pub fn store_max_bytes(&self) -> u64 {
        self.store_max_gb
            .map_or(4 << 30, |gb| gb.saturating_mul(1 << 30))
    }
}

/// `[cluster]` in `config.toml`: the NATS servers and this node's name (`--cluster` and
/// `--node` override them). No `nats`: no cluster.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterEntry {
    /// NATS URLs (`nats://host:4222`); the node connects to any of them.
    pub nats: Vec<String>,
    /// This node's name, unique in the cluster (`[a-zA-Z0-9_-]`).
    pub node: Option<String>,
    /// Seconds a session's lease (and a node's registration) lives without renewal: how
    /// soon another node may take over the sessions of a node that died (default 10).
    pub lease_secs: Option<u64>,
    /// Replicas of the cluster's streams and buckets (default 3, for a 3-node NATS cluster;
    /// 1 on a single nats-server).
    pub replicas: Option<usize>,
    /// The file of the secret every node shares (`--cluster-secret-file`).
    pub secret_file: Option<PathBuf>,
    /// Join a NATS that asks for no credentials (`--insecure-nats`).
    pub insecure_nats: bool,
    /// The NATS user; its password comes from PENGUIN_NATS_PASSWORD, never from this file
    /// (`--nats-user`).
    pub nats_user: Option<String>,
    /// This node's NATS nkey seed file (`--nats-nkey`).
    pub nats_nkey: Option<PathBuf>,
    /// This node's NATS `.creds` file (`--nats-creds`).
    pub nats_creds: Option<PathBuf>,
    /// Refuse NATS without TLS (`--nats-tls`).
    pub nats_tls: bool,
    /// The CAs NATS's certificate must chain to (`--nats-ca`; implies `nats_tls`).
    pub nats_ca: Option<PathBuf>,
}

/// An `[[mcp_servers]]` entry: the tools' MCP server configuration.
#[cfg(feature = "tools")]
pub type McpServerEntry = penguin_tools::mcp::McpServerConfig;
/// An `[[mcp_servers]]` entry, read and kept as it is written: a build without the `tools`
/// feature has no MCP client, yet reads the same `config.toml`.
#[cfg(not(feature = "tools"))]
pub type McpServerEntry = toml::Table;

pub use penguin_engine::ApprovalMode;

/// `[session]` in `config.toml`: the reference's `max_turns` and approval modes.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SessionEntry {
    /// The most model requests one task makes; past it the task ends with
    /// `[reached max turns (N); stopping]`. `-1` or absent: no cap; 0 is refused.
    pub max_turns: Option<i64>,
    /// How tool calls are approved when no flag says: `always-ask` (also `ask`), `read-only`
    /// (read-only tools run, the rest are asked), `deny-all`, `allow-all`.
    pub approval: Option<String>,
}

impl SessionEntry {
    /// The engine's `max_turns` (`-1`: no cap); 0 and values below -1 name the field.
    pub fn max_turns(&self) -> Result<i64, ConfigError> {
        match self.max_turns {
            None => Ok(-1),
            Some(n) if n == -1 || n > 0 => Ok(n),
            Some(n) => Err(ConfigError::Invalid(format!(
                "session.max_turns: {n} is not a turn cap (a positive number, or -1 for none)"
            ))),
        }
    }

    /// The approval mode named, `None` when none is.
    pub fn approval(&self) -> Result<Option<ApprovalMode>, ConfigError> {
        self.approval
            .as_deref()
            .map(|s| {
                parse_approval(s)
                    .map_err(|e| ConfigError::Invalid(format!("session.approval: {e}")))
            })
            .transpose()
    }
}

/// An approval mode by the reference's names (`always-ask`, `read-only`, `deny-all`,
/// `allow-all`), or `ask` for `always-ask`; an error lists them.
pub fn parse_approval(s: &str) -> Result<ApprovalMode, String> {
    let s = s.trim().to_ascii_lowercase();
    if s == "ask" {
        return Ok(ApprovalMode::AlwaysAsk);
    }
    ApprovalMode::parse(&s).ok_or_else(|| {
        format!("{s:?} is not an approval mode (always-ask or ask, read-only, deny-all, allow-all)")
    })
}

/// `[tools]` in `config.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsEntry {
    /// Which edit tools sessions offer: `classic` (`write_file` and `edit_file`),
    /// `apply_patch`, or `both`; absent: by the model's provider ([`default_edit_tools`]).
    pub edit: Option<String>,
}

#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
impl ToolsEntry {
    /// The edit tools named, `None` when none is.
    pub fn edit(&self) -> Result<Option<EditTools>, ConfigError> {
        self.edit
            .as_deref()
            .map(|name| match name {
                "classic" => Ok(EditTools::Classic),
                "apply_patch" => Ok(EditTools::ApplyPatch),
                "both" => Ok(EditTools::Both),
                other => Err(ConfigError::Invalid(format!(
                    "tools.edit: {other:?} is not a choice of edit tools (classic, apply_patch or both)"
                ))),
            })
            .transpose()
    }
}

/// The edit tools a model of `protocol` does its best work with: `apply_patch` for OpenAI's
/// Responses API (the GPT-5/codex family, trained on its patch format), `write_file` and
/// `edit_file` for the others (trained on string-replace edits), all three when the model
/// is unknown (`None`: a scenario's scripted model) or the demo. An adapter registered from
/// outside gets the classic pair, like the built-in protocols but Responses.
#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
pub fn default_edit_tools(protocol: Option<&Protocol>) -> EditTools {
    match protocol {
        Some(p) if *p == Protocol::OPENAI_RESPONSES => EditTools::ApplyPatch,
        Some(p) if *p == Protocol::DEMO => EditTools::Both,
        Some(_) => EditTools::Classic,
        None => EditTools::Both,
    }
}

#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
impl Config {
    /// The built-in tools' configuration for a session of `model` (`None`: a model that is
    /// not configured, such as a scenario's): the edit tools `[tools] edit` names, else the
    /// model's provider's ([`default_edit_tools`]), and no `read_image` for a model with
    /// `vision = false`. The sandbox is the caller's to set.
    pub fn tools_config(&self, model: Option<&ModelSpec>) -> Result<ToolsConfig, ConfigError> {
        let edit_tools = self
            .tools
            .edit()?
            .unwrap_or_else(|| default_edit_tools(model.map(|m| &m.protocol)));
        let mut enabled = BuiltinTool::ALL.to_vec();
        if model.is_some_and(|m| !m.vision) {
            enabled.retain(|t| *t != BuiltinTool::ReadImage);
        }
        Ok(ToolsConfig {
            edit_tools,
            enabled,
            ..ToolsConfig::default()
        })
    }
}

/// `[trace]` in `config.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TraceEntry {
    /// When the trace is fsynced: `never`, `commit` (after each model request and compaction;
    /// the default) or `record` (after every record). See `docs/performance.md` for the cost.
    pub durability: Option<String>,
}

impl TraceEntry {
    /// The durability named, [`Durability::AtCommit`](penguin_trace_store::Durability) when none is.
    pub fn durability(&self) -> Result<penguin_trace_store::Durability, ConfigError> {
        self.durability
            .as_deref()
            .map_or(Ok(penguin_trace_store::Durability::default()), str::parse)
            .map_err(|e| ConfigError::Invalid(format!("trace.durability: {e}")))
    }
}

/// `[server]` in `config.toml`: how many connections `penguin serve` takes.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerEntry {
    /// Connections at once (default: what the open-file limit allows).
    pub max_connections: Option<usize>,
    /// Of those, SSE streams at once (default: all but an eighth, so API requests are always
    /// served while streams are at their cap).
    pub max_streams: Option<usize>,
    /// Idle sessions kept loaded; beyond them the least recently used are unloaded and loaded
    /// again from their trace when asked for (default 32).
    pub idle_sessions: Option<usize>,
}

/// `[sandbox]` in `config.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxEntry {
    /// `workspace-write`, `read-only` or `off`; absent: `workspace-write` where the kernel has
    /// Landlock, `off` elsewhere.
    pub mode: Option<String>,
    /// `true` lets commands use the network; `false` (the default) refuses TCP but to
    /// `allow_ports`, and every other kind of network socket.
    pub network: bool,
    /// TCP ports commands may still use with `network = false`.
    pub allow_ports: Vec<u16>,
    /// More directories commands may write in `workspace-write` mode (`~/` is the home
    /// directory).
    pub writable: Vec<String>,
    /// Refuse to run rather than run with less protection than asked.
    pub strict: bool,
    /// Variables commands inherit besides the core set (names, or prefixes ending in `*`):
    /// nothing else of penguin's environment reaches them, no provider key, no token.
    pub inherit_env: Vec<String>,
    /// `true` lets commands write the `.git` of the repositories in the workspace and the
    /// writable dirs (commit, fetch, change config and hooks); `false` (the default) keeps it
    /// read-only, since the user's own git runs what a repository's config and hooks say.
    pub git_writable: bool,
}

#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
impl SandboxEntry {
    /// The tools' sandbox request, with `--sandbox FLAG` applied when given: a mode, or
    /// `strict` (the configured mode, `workspace-write` when that is `off` or absent, and
    /// refuse what the kernel cannot enforce). `home` expands `~/` in `writable`.
    pub fn request(
        &self,
        flag: Option<&str>,
        home: Option<&Path>,
    ) -> Result<SandboxRequest, ConfigError> {
        let mut mode = self
            .mode
            .as_deref()
            .map(str::parse::<SandboxMode>)
            .transpose()
            .map_err(|e| ConfigError::Invalid(format!("sandbox.mode: {e}")))?;
        let mut strict = self.strict;
        match flag {
            None => {}
            Some("strict") => {
                strict = true;
                if matches!(mode, None | Some(SandboxMode::Off)) {
                    mode = Some(SandboxMode::WorkspaceWrite);
                }
            }
            Some(other) => {
                mode = Some(other.parse().map_err(|e: String| {
                    ConfigError::Invalid(format!("--sandbox: {e}, or strict"))
                })?);
            }
        }
        let writable = self
            .writable
            .iter()
            .map(|w| match (w.strip_prefix("~/"), home) {
                (Some(rest), Some(home)) => Ok(home.join(rest)),
                (Some(_), None) => Err(ConfigError::Invalid(format!(
                    "sandbox.writable: {w:?} needs a home directory (HOME is not set)"
                ))),
                (None, _) if Path::new(w).is_absolute() => Ok(PathBuf::from(w)),
                (None, _) => Err(ConfigError::Invalid(format!(
                    "sandbox.writable: {w:?} is not an absolute path"
                ))),
            })
            .collect::<Result<_, _>>()?;
        Ok(SandboxRequest {
            mode,
            network: self.network,
            allow_ports: self.allow_ports.clone(),
            strict,
            temp_dir: None,
            writable,
            protected: Vec::new(),
            inherit_env: self.inherit_env.clone(),
            git_writable: self.git_writable,
        })
    }
}

/// `request` with one session's overrides (the API's `sandbox: {mode, network}`); a mode that
/// is none of penguin's is a [`ParseError`] of field `sandbox.mode`.
#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
pub fn sandbox_override(
    request: &SandboxRequest,
    mode: Option<&str>,
    network: Option<bool>,
) -> Result<SandboxRequest, ParseError> {
    let mut out = request.clone();
    if let Some(m) = mode {
        out.mode = Some(m.parse().map_err(|message| ParseError {
            field: "sandbox.mode".into(),
            message,
        })?);
    }
    if let Some(n) = network {
        out.network = n;
    }
    Ok(out)
}

/// `[policy]` in `config.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyEntry {
    /// `exec_command` commands containing any of these are answered `forbidden` without asking.
    pub forbidden_commands: Vec<String>,
}

/// `[compaction]` in `config.toml`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionEntry {
    /// Compact when a request's total tokens reach this (capped at the model's window - 2048);
    /// 0 disables compaction by size.
    pub max_context_length: i64,
    /// Compact after this many requests in one context; <= 0 disables it.
    pub max_session_turns: i64,
    /// `summarize` (default) or `discard`.
    pub mode: String,
    /// The summary request; the built-in prompt when absent.
    pub prompt: Option<String>,
}

impl Default for CompactionEntry {
    fn default() -> Self {
        CompactionEntry {
            max_context_length: 256_000,
            max_session_turns: -1,
            mode: "summarize".into(),
            prompt: None,
        }
    }
}

impl CompactionEntry {
    /// The engine's compaction settings (size threshold before the model's window is applied).
    pub fn to_engine(&self) -> Result<penguin_engine::CompactionConfig, ConfigError> {
        let mode = match self.mode.as_str() {
            "summarize" => penguin_omni_protocol::CompactionMode::Summarize,
            "discard" => penguin_omni_protocol::CompactionMode::Discard,
            other => {
                return Err(ConfigError::Invalid(format!(
                    "compaction.mode: {other:?} (expected summarize or discard)"
                )));
            }
        };
        Ok(penguin_engine::CompactionConfig {
            max_context_length: penguin_engine::CompactionConfig::effective_max_context_length(
                self.max_context_length,
                None,
            ),
            max_session_turns: self.max_session_turns,
            mode,
            prompt: self
                .prompt
                .clone()
                .unwrap_or_else(|| penguin_engine::DEFAULT_COMPACTION_PROMPT.to_owned()),
        })
    }
}

/// One named model in `config.toml`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Wire protocol.
    pub protocol: String,
    /// Base URL; each protocol has a default.
    pub base_url: Option<String>,
    /// Upstream model id.
    pub model: String,
    /// Environment variable holding the key.
    pub api_key_env: Option<String>,
    /// Output token cap.
    pub max_output_tokens: Option<u64>,
    /// Context window.
    pub context_window: Option<u64>,
    /// Default thinking effort.
    pub thinking_level: Option<String>,
    /// Idle timeout between upstream events, in ms.
    pub idle_timeout_ms: Option<u64>,
    /// The most content one streamed message may hold, in bytes (1 to 32 MiB; 8 MiB when
    /// unset). A response past it fails at once, without a retry.
    pub max_message_bytes: Option<u64>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Whether the model takes images (default `true`); `false` leaves `read_image` out of
    /// its tools.
    pub vision: Option<bool>,
    /// How many times a failed request is retried before the run fails (the reconnect
    /// ladder's budget): 5 by default, so six attempts over about a minute; 0 fails at once.
    pub reconnect_attempts: Option<u32>,
    /// Whether requests ask the provider to cache their prompt (default `true`): Anthropic's
    /// `cache_control` breakpoints, OpenAI's `prompt_cache_key`. `false` sends no caching
    /// field (a strict OpenAI-compatible server that refuses unknown fields wants it).
    pub prompt_cache: Option<bool>,
    /// What its tokens cost, in dollars per million tokens (`[models.NAME.price]`:
    /// `input`, `output`, optional `cached_input` and `cache_write`; docs/cost.md).
    pub price: Option<crate::pricing::Price>,
}

/// Configuration that cannot be used, naming what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a field has the wrong shape.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The config file.
        path: PathBuf,
        /// What is wrong, and where.
        source: ParseError,
    },
    /// A value is not valid.
    #[error("{0}")]
    Invalid(String),
}

/// `<data root>/config.toml`.
pub fn config_path(root: &Path) -> PathBuf {
    root.join("config.toml")
}

impl Config {
    /// Reads `config.toml` under `root`; a missing file is an empty configuration.
    pub fn load(root: &Path) -> Result<Config, ConfigError> {
        let path = config_path(root);
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::parse(&text).map_err(|source| ConfigError::Parse { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Parses a config file's text.
    pub fn parse(text: &str) -> Result<Config, ParseError> {
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let message = e.inner().message().trim().replace('\n', " ");
            // A syntax error has no field to name (the path is `.`): the line and column are
            // all that lead the user to it.
            let message = match e.inner().span() {
                Some(span) => {
                    let (line, column) = line_and_column(text, span.start);
                    format!("line {line}, column {column}: {message}")
                }
                None => message,
            };
            ParseError {
                field: e.path().to_string(),
                message,
            }
        })
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..text.floor_char_boundary(offset.min(text.len()))];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

/// A `config.toml` that does not parse: the field path (`models.local.protocol`; `.` for the
/// whole file) and what is wrong there, with the line and column where the file says it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ParseError {
    /// Dotted path of the offending field.
    pub field: String,
    /// What is wrong, starting with `line L, column C:` where the parser knows the place.
    pub message: String,
}

/// The model choice given on the command line.
#[derive(Clone, Debug, Default)]
pub struct ModelFlags {
    /// `--model`: a configured name, or the model id when `--provider` is given.
    pub model: Option<String>,
    /// `--provider`: a protocol for an ad-hoc model.
    pub provider: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--api-key-env`.
    pub api_key_env: Option<String>,
    /// `--retries N`: retries of a failed request, over the model's `reconnect_attempts`.
    pub retries: Option<u32>,
}

fn adhoc(
    provider: &str,
    model: Option<String>,
    base_url: Option<String>,
    key_env: Option<String>,
) -> Result<ModelSpec, ConfigError> {
    let protocol = provider
        .parse::<Protocol>()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if protocol == Protocol::DEMO {
        return Ok(ModelSpec::demo());
    }
    let model_id = model.ok_or_else(|| {
        ConfigError::Invalid(format!("--provider {provider} needs --model MODEL_ID"))
    })?;
    Ok(ModelSpec {
        base_url: base_url.unwrap_or_else(|| default_base_url(&protocol)),
        protocol,
        model_id,
        api_key_env: key_env,
        ..ModelSpec::demo()
    })
}

fn named(config: &Config, name: &str) -> Result<ModelSpec, ConfigError> {
    if name == "demo" && !config.models.contains_key("demo") {
        return Ok(ModelSpec::demo());
    }
    let entry = config.models.get(name).ok_or_else(|| {
        let known: Vec<&str> = config.models.keys().map(String::as_str).collect();
        ConfigError::Invalid(format!(
            "no model named {name:?} (configured: {}; plus the built-in demo)",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    })?;
    let at = |field: &str| format!("models.{name}.{field}");
    let protocol = entry
        .protocol
        .parse::<Protocol>()
        .map_err(|e| ConfigError::Invalid(format!("{}: {e}", at("protocol"))))?;
    Ok(ModelSpec {
        base_url: entry
            .base_url
            .clone()
            .unwrap_or_else(|| default_base_url(&protocol)),
        protocol,
        model_id: entry.model.clone(),
        api_key_env: entry.api_key_env.clone(),
        max_output_tokens: entry.max_output_tokens.unwrap_or(0),
        context_window: entry.context_window,
        thinking_level: entry
            .thinking_level
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| ConfigError::Invalid(format!("{}: {e}", at("thinking_level"))))?,
        headers: entry
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        idle_timeout: entry.idle_timeout_ms.map(Duration::from_millis),
        max_message_bytes: entry
            .max_message_bytes
            .map(|n| {
                let ceiling = penguin_llm_providers::wire::MAX_MESSAGE_BYTES_CEILING;
                usize::try_from(n)
                    .ok()
                    .filter(|n| (1..=ceiling).contains(n))
                    .ok_or_else(|| {
                        ConfigError::Invalid(format!(
                            "{}: {n} is out of range: 1 to {ceiling} (32 MiB, half of what one Trace record may hold)",
                            at("max_message_bytes")
                        ))
                    })
            })
            .transpose()?,
        vision: entry.vision.unwrap_or(true),
        reconnect_attempts: entry.reconnect_attempts,
        prompt_cache: entry.prompt_cache.unwrap_or(true),
        price: entry
            .price
            .map(|p| p.check(&at("price")).map(|()| p))
            .transpose()
            .map_err(ConfigError::Invalid)?,
    })
}

impl Config {
    /// The prices of its models (`[models.NAME.price]`, by model id; a model that does not
    /// resolve is left out: the agent refuses it when it loads), over the table of
    /// well-known models ([`crate::pricing`]).
    pub fn prices(&self) -> crate::pricing::Prices {
        let specs: Vec<ModelSpec> = self
            .named_models()
            .into_iter()
            .filter_map(|(_, spec)| spec.ok())
            .collect();
        crate::pricing::Prices::new(
            specs
                .iter()
                .filter_map(|s| s.price.map(|p| (s.model_id.as_str(), p))),
        )
    }

    /// Every `[models.NAME]` resolved, by name; one that does not resolve (a bad field) is the
    /// error naming it.
    pub fn named_models(&self) -> Vec<(String, Result<ModelSpec, ConfigError>)> {
        self.models
            .keys()
            .map(|name| (name.clone(), named(self, name)))
            .collect()
    }
}

/// Picks the model: flags, then `PENGUIN_MODEL` / `PENGUIN_PROVIDER` (+ `PENGUIN_BASE_URL`,
/// `PENGUIN_MODEL_ID`, `PENGUIN_API_KEY_ENV`), then the file's `default_model`, then `demo`.
/// `env` is a lookup so tests need not touch the process environment.
pub fn resolve_model(
    config: &Config,
    flags: &ModelFlags,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ModelSpec, ConfigError> {
    let mut spec = choose_model(config, flags, env)?;
    if flags.retries.is_some() {
        spec.reconnect_attempts = flags.retries;
    }
    Ok(spec)
}

/// The model the flags, the environment or the config name, in that order.
fn choose_model(
    config: &Config,
    flags: &ModelFlags,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ModelSpec, ConfigError> {
    if let Some(provider) = &flags.provider {
        return adhoc(
            provider,
            flags.model.clone(),
            flags.base_url.clone(),
            flags.api_key_env.clone(),
        );
    }
    if let Some(name) = &flags.model {
        return named(config, name);
    }
    if let Some(provider) = env("PENGUIN_PROVIDER") {
        return adhoc(
            &provider,
            env("PENGUIN_MODEL_ID"),
            env("PENGUIN_BASE_URL"),
            env("PENGUIN_API_KEY_ENV"),
        );
    }
    if let Some(name) = env("PENGUIN_MODEL") {
        return named(config, &name);
    }
    match &config.default_model {
        Some(name) => named(config, name),
        None => Ok(ModelSpec::demo()),
    }
}

pub mod edit;

#[cfg(test)]
mod tests;
