//! The command line: subcommands and their flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use penguin::engine::ThinkingLevel;

#[derive(Parser, Debug)]
#[command(
    name = "penguin",
    version,
    about = "An agent harness: one ordered stream between you, a model and its tools."
)]
pub(crate) struct Cli {
    /// None: bare `penguin`, which opens a chat in a terminal (as codex and claude do).
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ModelArgs {
    /// A configured model name, or the model id when --provider is given.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Provider protocol for an ad-hoc model: openai-chat (alias openai), openai-responses,
    /// anthropic-messages (alias anthropic), gemini, ollama, demo, or scripted (with --scenario).
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// Base URL of the provider (e.g. http://127.0.0.1:8080/v1 for a local llama.cpp server).
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long)]
    pub(crate) api_key_env: Option<String>,
    /// Retries of a failed model request before the task fails (default 5, or the model's
    /// reconnect_attempts in config.toml); 0 fails at the first error.
    #[arg(long, value_name = "N")]
    pub(crate) retries: Option<u32>,
    /// Scenario file for --provider scripted: the model and tools play its scripts.
    #[arg(long)]
    pub(crate) scenario: Option<PathBuf>,
    /// With --provider scripted: the scenario's model calls penguin's real tools (built-in and
    /// MCP) instead of the scenario's scripted ones.
    #[arg(long, requires = "scenario")]
    pub(crate) real_tools: bool,
    /// An MCP server over stdio for this run, besides config.toml's: NAME=COMMAND [ARGS...]
    /// (split on spaces); repeatable. Its tools are mcp__NAME__TOOL.
    #[arg(long = "mcp", value_name = "NAME=COMMAND")]
    pub(crate) mcp: Vec<String>,
}

#[derive(Args, Debug, Clone, Default)]
pub(crate) struct SandboxArgs {
    /// Confine commands: workspace-write (default where the kernel has Landlock), read-only,
    /// off, or strict (the configured mode, refusing to run if the kernel cannot enforce it).
    #[arg(long, value_name = "MODE", value_parser = ["workspace-write", "read-only", "off", "strict"])]
    pub(crate) sandbox: Option<String>,
}

#[derive(Args, Debug, Clone, Default)]
pub(crate) struct TaskArgs {
    /// Allow every tool call without asking (the same as --approve allow-all).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// How tool calls are approved: always-ask (or ask), read-only (read-only tools run, the
    /// rest are asked), deny-all, allow-all. Default: `[session] approval`, else always-ask.
    #[arg(long, value_name = "MODE", conflicts_with = "yes", value_parser = penguin::config::parse_approval)]
    pub(crate) approve: Option<penguin::config::ApprovalMode>,
    /// `[session] approval` of config.toml, set once the agent is loaded ([`TaskArgs::configured`]).
    #[arg(skip)]
    pub(crate) configured_approval: Option<penguin::config::ApprovalMode>,
    /// Print the raw stream as JSON lines instead of rendering it.
    #[arg(long)]
    pub(crate) jsonl: bool,
    /// Thinking effort: none, low, medium, high, xhigh, max.
    #[arg(long)]
    pub(crate) thinking: Option<ThinkingLevel>,
    /// Show tool output in full instead of its first line.
    #[arg(long, short = 'v')]
    pub(crate) verbose: bool,
    /// Set by `run --goal` and `/goal`: the task is a goal (docs/goal-mode.md).
    #[arg(skip)]
    pub(crate) goal: Option<penguin::goal::GoalOptions>,
    /// Attach an image (PNG, JPEG, GIF, WebP) to the prompt; repeatable. In chat, to the
    /// first message (later ones attach an image of the workspace by naming it: @shot.png).
    #[arg(long = "image", value_name = "FILE")]
    pub(crate) images: Vec<PathBuf>,
    /// Stop when the requests' cost reaches this many dollars (0.50, $2): per task for
    /// `run`, over the whole conversation for `chat`. Refused for a model without a price.
    #[arg(long, value_name = "DOLLARS", value_parser = penguin::pricing::parse_dollars)]
    pub(crate) max_cost: Option<f64>,
    /// The prices of config.toml's models over the table (`penguin::pricing`), set once the
    /// agent is loaded ([`TaskArgs::configured`]).
    #[arg(skip)]
    pub(crate) prices: penguin::pricing::Prices,
    /// Dollars the tasks run with these arguments spent so far (`--max-cost` over a chat).
    #[arg(skip)]
    pub(crate) spent: std::sync::Arc<std::sync::Mutex<f64>>,
}

impl TaskArgs {
    /// These arguments with `config.toml`'s defaults of `agent` filled in.
    pub(crate) fn configured(mut self, agent: &penguin::agent::Agent) -> TaskArgs {
        // A wrong value was refused when the agent loaded.
        self.configured_approval = agent.config.session.approval().ok().flatten();
        self.prices = agent.config.prices();
        self
    }

    /// The approval mode in force: `--approve`, else `--yes` (allow-all), else `[session]
    /// approval`, else always-ask.
    pub(crate) fn approval(&self) -> penguin::config::ApprovalMode {
        use penguin::config::ApprovalMode;
        self.approve
            .or(self.yes.then_some(ApprovalMode::AllowAll))
            .or(self.configured_approval)
            .unwrap_or_default()
    }
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run one task in a new session and render it live.
    Run {
        /// The prompt (read from stdin when absent and stdin is not a terminal).
        prompt: Option<String>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
        /// The workspace the tools act on (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the system prompt a new session here would get, and exit.
        #[arg(long)]
        print_system_prompt: bool,
        /// Goal mode: the prompt is an objective, and rounds run until the model marks it
        /// complete or blocked (exit 0 only when complete); an optional token budget (500k, 2m).
        #[arg(long, value_name = "BUDGET", num_args = 0..=1, default_missing_value = "")]
        goal: Option<String>,
    },
    /// A conversation over one session (`/help` lists its commands).
    Chat {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
        /// The workspace the tools act on (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Continue this session (an id or a unique part of one) instead of starting a new one.
        #[arg(long)]
        resume: Option<String>,
        /// Continue the newest session of this workspace.
        #[arg(long, conflicts_with = "resume")]
        last: bool,
    },
    /// Continue a session: run PROMPT in it, or open a chat when no prompt is given.
    Resume {
        /// The session id, or a unique part of it (see `penguin sessions`); with --last, the
        /// prompt.
        #[arg(required_unless_present = "last")]
        session_id: Option<String>,
        /// The prompt.
        prompt: Option<String>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
        /// Continue the newest session of the current workspace.
        #[arg(long)]
        last: bool,
    },
    /// Tokens and cost of the model requests, added up from the traces (docs/cost.md).
    Usage {
        /// Only requests from this date on: YYYY-MM-DD (UTC) or an RFC 3339 time.
        #[arg(long, value_name = "DATE")]
        since: Option<String>,
        /// One row per day (UTC), model or session.
        #[arg(long, value_name = "GROUP", default_value = "day", value_parser = ["day", "model", "session"])]
        by: String,
    },
    /// List sessions, pinned ones first, then the current workspace's, each newest first
    /// (archived ones only with --archived); or archive, unarchive, pin or unpin one.
    #[command(args_conflicts_with_subcommands = true)]
    Sessions {
        /// Mark a session instead of listing.
        #[command(subcommand)]
        mark: Option<SessionMark>,
        /// Only the current workspace's sessions.
        #[arg(long)]
        here: bool,
        /// How many of the most recently active sessions to show.
        #[arg(long, default_value_t = 30, value_name = "N")]
        limit: usize,
        /// Show every session.
        #[arg(long, conflicts_with = "limit")]
        all: bool,
        /// Only the archived sessions (the list leaves them out otherwise).
        #[arg(long)]
        archived: bool,
        /// Only the sessions whose title or first prompt holds every word of TEXT, whatever
        /// the case.
        #[arg(long, value_name = "TEXT")]
        search: Option<String>,
    },
    /// Show a stored session as it happened, from its trace (no model needed).
    Show {
        /// The session id, or a unique part of it.
        #[arg(required_unless_present = "last")]
        session_id: Option<String>,
        /// The newest session of the current workspace.
        #[arg(long, conflicts_with = "session_id")]
        last: bool,
        /// Print the raw trace records (JSON lines) instead.
        #[arg(long)]
        jsonl: bool,
        /// Show tool output in full.
        #[arg(long, short = 'v')]
        verbose: bool,
    },
    /// Fork a stored session: a new session holding its conversation up to the end of one
    /// completed task (all of them by default); the source is untouched.
    Fork {
        /// The session id, or a unique part of it.
        #[arg(required_unless_present = "last")]
        session_id: Option<String>,
        /// The newest session of the current workspace.
        #[arg(long, conflicts_with = "session_id")]
        last: bool,
        /// Keep the first N completed tasks (from 1; default: every completed task).
        #[arg(long, value_name = "N")]
        at: Option<usize>,
    },
    /// Rewind a session to before one of its tasks: the workspace's files as they were (from
    /// the checkpoint taken before it), and the conversation as it was (a fork at the task
    /// before). Shows what it will change and asks first.
    Rewind {
        /// The session id, or a unique part of it.
        #[arg(required_unless_present = "last")]
        session_id: Option<String>,
        /// The newest session of the current workspace.
        #[arg(long, conflicts_with = "session_id")]
        last: bool,
        /// As before task N ran (from 1, as `fork --at` counts).
        #[arg(long, value_name = "N")]
        to: usize,
        /// Only the files.
        #[arg(long, conflicts_with_all = ["conversation", "both"])]
        code: bool,
        /// Only the conversation (a fork).
        #[arg(long, conflicts_with = "both")]
        conversation: bool,
        /// Both (the default).
        #[arg(long)]
        both: bool,
        /// Rewind without asking (for a script).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Undo the changes made between the session's tasks too (by you, not by its tasks;
        /// kept otherwise).
        #[arg(long)]
        with_yours: bool,
    },
    /// Replay a stored session through the engine on a paused clock: its Trace rebuilt as a
    /// scenario (the model's committed output, each tool's output, approvals, steering,
    /// aborts) and run; the new Trace compared with the original.
    Replay {
        /// The session id, or a unique part of it.
        #[arg(required_unless_present = "last")]
        session_id: Option<String>,
        /// The newest session of the current workspace.
        #[arg(long, conflicts_with = "session_id")]
        last: bool,
        /// Exit non-zero on the first record that differs, naming it.
        #[arg(long)]
        check: bool,
        /// Keep the scenario in FILE (a regression test of the harness from then on).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Counterfactual: keep the recorded history before task N (from 1, as `fork --at`
        /// counts) and run task N again live, with --model (or --prompt), as a new session
        /// linked to this one.
        #[arg(long, value_name = "N", conflicts_with_all = ["check", "out"])]
        from: Option<usize>,
        /// With --from: send this instead of task N's recorded prompt.
        #[arg(long, value_name = "TEXT", requires = "from")]
        prompt: Option<String>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Write a session's Trace as one file to take away (its files in order, a
    /// `{"type":"trace_rotate"}` line between them): to another machine, or a bug report.
    Export {
        /// The session id, or a unique part of it.
        #[arg(required_unless_present = "last")]
        session_id: Option<String>,
        /// The newest session of the current workspace.
        #[arg(long, conflicts_with = "session_id")]
        last: bool,
        /// Where (default: stdout).
        #[arg(long, short = 'o', value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Import an exported Trace as a session here (checked first: a trace the checker calls
    /// broken is refused); prints its id.
    Import {
        /// The exported file.
        file: PathBuf,
    },
    /// Write a commented starter config.toml into the data root.
    Init {
        /// Replace an existing config.toml.
        #[arg(long)]
        force: bool,
    },
    /// Print shell completions: bash, zsh, fish, elvish or powershell.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Follow a session on a running `penguin serve`: its history, then what it does live.
    Watch {
        /// The session: its full id, or a unique prefix or tail of it.
        session_id: String,
        /// The server.
        #[arg(long, default_value = "http://127.0.0.1:7364")]
        url: String,
        /// The bearer token (default: PENGUIN_TOKEN, else the server's token file in the data root).
        #[arg(long)]
        token: Option<String>,
        /// Keep following after the session goes idle.
        #[arg(long)]
        follow: bool,
    },
    /// Serve sessions over HTTP + SSE (every request needs `Authorization: Bearer <token>`).
    Serve(ServeArgs),
    /// Scenario files: a scripted model and tools driving the real engine.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
    /// Check a JSONL stream (`penguin run --jsonl` output) for the order every run keeps:
    /// segments start, grow and stop in turn, each tool call is answered once, abort is last.
    CheckStream {
        /// The stream file (one OmniMessage per line).
        file: PathBuf,
    },
    /// Trace files.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// MCP servers.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// The models sessions run on: list (the default), add, test, default, remove. Edits
    /// config.toml in place, its comments kept; a key is never written, only its variable's name.
    Models {
        /// What to do (default: list).
        #[command(subcommand)]
        command: Option<ModelsCommand>,
    },
    /// Skills: instruction packages (a directory with a SKILL.md) the model reads on demand.
    Skills {
        /// What to do (default: list).
        #[command(subcommand)]
        command: Option<SkillsCommand>,
    },
    /// Memory: the notes the agent keeps between sessions (yours, and each workspace's).
    Memory {
        /// What to do (default: list).
        #[command(subcommand)]
        command: Option<MemoryCommand>,
    },
    /// Hooks: your own programs at a session's decision points (docs/hooks.md).
    Hooks {
        #[command(subcommand)]
        command: HooksCommand,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum HooksCommand {
    /// The hooks a session here runs: yours (config.toml [[hooks.EVENT]]) and the workspace's
    /// (.penguin/hooks.toml, once trusted).
    List {
        /// The workspace (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Run EVENT's hooks (pre_tool_use, PreToolUse, …) on a sample payload and print what each
    /// answered.
    Test {
        /// The event.
        event: String,
        /// The tool of a pre_tool_use or post_tool_use sample.
        #[arg(long, default_value = "exec_command")]
        tool: String,
        /// The tool's arguments, as JSON.
        #[arg(long, default_value = r#"{"cmd":"echo hello"}"#)]
        input: String,
        /// The prompt of a user_prompt_submit sample.
        #[arg(long, default_value = "hello")]
        prompt: String,
        /// The workspace (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Trust the workspace's .penguin/hooks.toml as it is now (shown first): its hooks run in
    /// the sessions started there until it changes.
    Trust {
        /// The workspace (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Trust without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// `penguin sessions archive|unarchive|pin|unpin ID`: the marks the web app sets too.
#[derive(Subcommand, Debug)]
pub(crate) enum SessionMark {
    /// Archive a session: the list leaves it out (`penguin sessions --archived` shows it).
    Archive {
        /// The session id, or a unique part of it.
        session_id: String,
    },
    /// Bring an archived session back to the list.
    Unarchive {
        /// The session id, or a unique part of it.
        session_id: String,
    },
    /// Pin a session: listed before the others.
    Pin {
        /// The session id, or a unique part of it.
        session_id: String,
    },
    /// Unpin a session.
    Unpin {
        /// The session id, or a unique part of it.
        session_id: String,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ModelsCommand {
    /// The configured models and the built-in demo, the default marked with *.
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a model to config.toml. In a terminal it asks for what the flags leave out, and
    /// offers the endpoint's own list of models; elsewhere the flags must say it all.
    Add {
        /// Its name (`--model NAME` runs it).
        name: Option<String>,
        /// openai-chat, openai-responses, anthropic-messages, gemini or ollama.
        #[arg(long)]
        protocol: Option<String>,
        /// The endpoint (default: the protocol's).
        #[arg(long)]
        base_url: Option<String>,
        /// The upstream model id.
        #[arg(long = "model", value_name = "ID")]
        model_id: Option<String>,
        /// The NAME of the environment variable holding the key (default: the protocol's,
        /// e.g. OPENAI_API_KEY). The key itself is never written.
        #[arg(long, value_name = "VAR")]
        api_key_env: Option<String>,
        /// Make it the default model.
        #[arg(long)]
        default: bool,
        /// Ask nothing, even in a terminal: a missing flag is an error.
        #[arg(long)]
        no_input: bool,
    },
    /// Send a model one-line requests: how soon it answers, whether it streams, calls a tool
    /// and takes an image, or why it fails.
    Test {
        /// The model (default: the default model).
        name: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make NAME the default model (config.toml's default_model; `demo` is allowed).
    Default {
        /// The model.
        name: String,
    },
    /// Remove NAME from config.toml (with the comments right above it).
    Remove {
        /// The model.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum SkillsCommand {
    /// The skills a session here gets: yours (the data root's skills/) and the workspace's
    /// (.agents/skills/).
    List {
        /// The workspace (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Install skills from a directory or a git URL (cloned with git) into your skills folder;
    /// a skill of the same name is replaced.
    Install {
        /// A skill's directory, a directory of skills, or a git URL.
        source: String,
    },
    /// Remove one of your skills.
    Remove {
        /// The skill's name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum MemoryCommand {
    /// Every memory scope and its notes (yours first, then each workspace's).
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a note (or, without one, the scope's MEMORY.md index).
    Show {
        /// The note's name (its file name without .md).
        name: Option<String>,
        #[command(flatten)]
        scope: MemoryScopeArgs,
    },
    /// Open a note (or the scope's MEMORY.md) in $VISUAL or $EDITOR.
    Edit {
        /// The note's name; a new one is created.
        name: Option<String>,
        #[command(flatten)]
        scope: MemoryScopeArgs,
    },
    /// Delete a note and drop its lines from the scope's MEMORY.md.
    Forget {
        /// The note's name.
        name: String,
        #[command(flatten)]
        scope: MemoryScopeArgs,
    },
}

/// Which memory scope: the current workspace's by default.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct MemoryScopeArgs {
    /// Your own memory (the user scope) instead of the workspace's.
    #[arg(long, conflicts_with_all = ["scope", "workspace"])]
    pub(crate) user: bool,
    /// A scope by its key (see `penguin memory list`).
    #[arg(long, value_name = "KEY", conflicts_with = "workspace")]
    pub(crate) scope: Option<String>,
    /// The workspace whose memory (default: the current directory).
    #[arg(long)]
    pub(crate) workspace: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub(crate) enum McpCommand {
    /// Connect each configured server (config.toml's and --mcp's) and show its status and tools.
    List {
        /// An extra stdio server: NAME=COMMAND [ARGS...]; repeatable.
        #[arg(long = "mcp", value_name = "NAME=COMMAND")]
        mcp: Vec<String>,
        /// The workspace stdio servers start in (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the results as JSON (the `results` of mcp_connect_end, plus each server's tools).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ScenarioCommand {
    /// Run a scenario; the stream goes to stdout as JSON lines.
    Run {
        /// The scenario file.
        scenario: PathBuf,
        /// Write every trace record here, one per line.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Write each model request's new messages here, one `{"input": [...]}` per line.
        #[arg(long)]
        requests: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum TraceCommand {
    /// Check trace files: every line parses, only recordable messages, requests balanced,
    /// every committed tool call answered once.
    Check {
        /// Trace files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// How a cluster node authenticates: to the other nodes (the cluster secret) and to NATS.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct NatsArgs {
    /// The file holding the secret every node of the cluster shares (32 bytes or more, e.g.
    /// `openssl rand -hex 32`): the nodes sign what they send each other with it, and run only
    /// what is signed (default: PENGUIN_CLUSTER_SECRET_FILE).
    #[arg(long, value_name = "FILE")]
    pub(crate) cluster_secret_file: Option<PathBuf>,
    /// Join a NATS that lets anyone connect without credentials. Whoever can reach such a NATS
    /// reads every session's events and traces and can forge the cluster's state: use it only
    /// for a NATS nothing but the nodes can reach.
    #[arg(long)]
    pub(crate) insecure_nats: bool,
    /// The NATS user (its password from PENGUIN_NATS_PASSWORD); a token instead comes from
    /// PENGUIN_NATS_TOKEN.
    #[arg(long, value_name = "USER")]
    pub(crate) nats_user: Option<String>,
    /// A file holding this node's NATS nkey user seed (`SU…`).
    #[arg(long, value_name = "FILE")]
    pub(crate) nats_nkey: Option<PathBuf>,
    /// This node's NATS credentials file (`.creds`: a user JWT and its seed).
    #[arg(long, value_name = "FILE")]
    pub(crate) nats_creds: Option<PathBuf>,
    /// Refuse NATS without TLS (a `tls://` URL requires it too).
    #[arg(long)]
    pub(crate) nats_tls: bool,
    /// PEM file of the CAs NATS's certificate must chain to (default: the system's); implies
    /// --nats-tls.
    #[arg(long, value_name = "FILE")]
    pub(crate) nats_ca: Option<PathBuf>,
    /// PEM file of this node's TLS client certificate, for a NATS that verifies clients (with
    /// --nats-key).
    #[arg(long, value_name = "FILE", requires = "nats_key")]
    pub(crate) nats_cert: Option<PathBuf>,
    /// PEM file of the key of --nats-cert.
    #[arg(long, value_name = "FILE", requires = "nats_cert")]
    pub(crate) nats_key: Option<PathBuf>,
    /// Copies NATS keeps of the cluster's state: 3 in a NATS cluster of three, 1 on a single
    /// nats-server (default: `[cluster] replicas`, else 3, or 1 with a warning when NATS is a
    /// single server).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub(crate) replicas: Option<u8>,
}

/// `penguin serve`.
#[derive(Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Port to bind.
    #[arg(long, default_value_t = 7364)]
    pub(crate) port: u16,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) sandbox: SandboxArgs,
    /// The workspace of sessions created without one (default: the current directory).
    #[arg(long)]
    pub(crate) workspace: Option<PathBuf>,
    /// Sessions created over the API must have their workspace under this directory (default:
    /// the directory serve was started in).
    #[arg(long)]
    pub(crate) workspace_root: Option<PathBuf>,
    /// A host name (besides localhost and IP addresses) requests may use in their Host header;
    /// repeatable.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub(crate) allowed_hosts: Vec<String>,
    /// Append the server's log here instead of stderr (level from RUST_LOG, default warn).
    #[arg(long)]
    pub(crate) log_file: Option<PathBuf>,
    /// Connections at once (default: `[server] max_connections`, else what the open-file limit
    /// allows).
    #[arg(long, value_name = "N")]
    pub(crate) max_connections: Option<usize>,
    /// SSE streams at once, fewer than the connections so API requests are always served
    /// (default: `[server] max_streams`, else all but an eighth of the connections).
    #[arg(long, value_name = "N")]
    pub(crate) max_streams: Option<usize>,
    /// Idle sessions kept loaded; the least recently used beyond them are unloaded and loaded
    /// again from their trace when asked for (default: `[server] idle_sessions`, else 32).
    #[arg(long, value_name = "N")]
    pub(crate) idle_sessions: Option<usize>,
    /// When traces are fsynced: never, commit (after each model request; the default) or
    /// record (after every record). Default: `[trace] durability`.
    #[arg(long, value_name = "WHEN")]
    pub(crate) durability: Option<String>,
    /// Serve as one node of a cluster on NATS JetStream at these URLs (comma-separated;
    /// default: `[cluster] nats`; `nats://user:password@host:4222`, `tls://host:4222`). Every
    /// node needs the same --token and the same --cluster-secret-file.
    #[arg(long, value_name = "NATS_URLS", value_delimiter = ',')]
    pub(crate) cluster: Vec<String>,
    /// This node's name in the cluster, unique among its nodes (default: `[cluster] node`).
    #[arg(long, value_name = "NAME")]
    pub(crate) node: Option<String>,
    // Boxed: the command enum stays small.
    #[command(flatten)]
    pub(crate) nats: Box<NatsArgs>,
    /// The token requests must present (16 characters at least; default: PENGUIN_TOKEN, else
    /// the token file). A cluster's nodes must all have the same one.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
}
