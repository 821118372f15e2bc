//! Built-in tools: an [`Environment`] that runs shell commands and reads, writes and edits
//! files inside one workspace directory.
//!
//! # Close-out rules (reference §2.16)
//!
//! Every call, whatever happens, streams exactly this shape for its `tool_call_id`:
//! `partial_tool_call_output` start → delta* → stop(stop reason) → one complete
//! `tool_call_output`. The complete output is never empty, and the concatenated delta
//! `output`s equal it. The wrapper guarantees this independently of the tool:
//!
//! - **Unknown or disabled tool**: one delta `Unknown tool: NAME`, stop(failed), complete.
//! - **Unparseable arguments**: the same three messages with the reference's explanation
//!   (see [`notes::empty_arguments`] and [`notes::invalid_arguments`]).
//! - **Streaming and the cap**: a tool's chunk is forwarded as a delta while the content stays
//!   within `max_output_chars` (counted in Unicode scalar values). The chunk that crosses the
//!   cap is not forwarded: its head that still fits is kept and sent in the *compensation
//!   delta* at close-out, and everything after it is cut (head-keeping truncation).
//! - **Archive**: when output is truncated, the full output is written to
//!   `.penguin/archive/<millis>-<seq>-<id>.txt` under the workspace (when
//!   [`ToolsConfig::archive_truncated`] is on), and the note
//!   `[output archived: .penguin/archive/…]` (workspace-relative, so `read_file` can open it)
//!   or `[output archive failed: <errno name>]` follows the truncation note.
//! - **Notes**, each on its own line after the content, in order: `[output truncated:
//!   exceeded N chars]` plus the archive line; the tool's own note (`exec_command` writes
//!   `[exit code: N]` for a non-zero exit, `[exit signal: N]` when the shell died of a signal it
//!   did not get from us); one of `[interrupted: tool aborted by user]`, `[tool timeout:
//!   exceeded Nms]` or `[tool error] <msg>`; `[no output]` when nothing else was produced.
//! - **Stop reason**, first match wins: `aborted` (the user's token fired, or the tool itself
//!   reported aborted without a timeout), `failed` (timeout), `failed` (the tool returned an
//!   error or panicked), the tool's own stop reason (`exec_command`: `failed` for a non-zero
//!   exit), `completed`.
//! - **Final emission**: compensation delta (if the streamed prefix is shorter than the kept
//!   content), note delta (`"\n" + notes`, or just the notes when the content is empty),
//!   images delta (only when completed), stop, complete output (`content + "\n" + notes`).
//!
//! # Sandbox
//!
//! [`ToolsConfig::sandbox`] confines every `exec_command` process tree with Landlock (see
//! [`sandbox`]): in `workspace-write` mode a command writes only in the workspace and the temp
//! directory, in `read-only` mode only in the temp directory, and with the network off it cannot
//! open TCP connections. When a sandboxed command fails with a permission error, a
//! `[sandbox: …]` note after the exit code names what was probably refused: it is read from the
//! command's output, so it says "probably". In `read-only` mode `write_file` and `edit_file`
//! refuse too. A [`SandboxBypass`] lets an approver run one call outside the sandbox.
//!
//! Interrupt and timeout stop a tool by dropping its future: `exec_command` then kills its
//! whole process group with SIGKILL. A command's background jobs do not outlive it: once the
//! shell exits its group is killed and the remaining pipe contents are read for at most half a
//! second, so a process that keeps the pipe open cannot hang the call.
//!
//! # Command sessions
//!
//! A command still running when `exec_command`'s wait (`yield_time_ms`, default 60 s, ending at
//! least 1 s before the call's timeout) runs out keeps running: the output names its
//! `process_id`, and `input_command` writes to it or polls it, `kill_command` ends its group
//! (SIGTERM, SIGKILL after a second). `run_in_background` returns at once; when the command
//! settles, the session's [`CommandSessions`] listener gets a report (the harness notice).
//! Output waits in a 1 MiB buffer per command; a session keeps at most [`MAX_PROCESSES`]; every
//! process dies with its session, and [`kill_all_background_processes`] ends all of them.

mod builtin;
mod call_output;
mod command;
mod contract;
mod exec;
mod files;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod notes;
mod path;
pub mod policy;
pub mod sandbox;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use penguin_engine::{BackgroundWork, Environment, MessageSink, Permission, ToolCallRequest};
use penguin_omni_protocol::{build, ModelPayload, StopReason, ToolCall, ToolDefinition};

use call_output::ArchiveBudget;
use contract::Tool;
use exec::{ExecCommand, InputCommand, KillCommand};
use files::{FileOp, FileTool};
use path::Workspace;

pub use builtin::BuiltinTool;
pub use call_output::{CallOutput, ARCHIVE_DIR};
pub use command::{kill_all_background_processes, CappedText, CommandSessions, MAX_PROCESSES};
pub use contract::Limits;
pub use sandbox::{Sandbox, SandboxBypass, SandboxMode, SandboxRequest};

/// The reference's default output cap, in chars.
pub const DEFAULT_MAX_OUTPUT_CHARS: i64 = 16_000;

/// The reference's default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Limits and the set of enabled tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolsConfig {
    /// Output cap in chars (Unicode scalar values); `<= 0` means no cap.
    pub max_output_chars: i64,
    /// Per-call timeout; `None` or zero means none. `exec_command`'s `timeout_ms` can shorten
    /// it for that call, never extend it.
    pub timeout: Option<Duration>,
    /// The tools offered; calls to any other name get `Unknown tool: NAME`.
    pub enabled: Vec<BuiltinTool>,
    /// Write the full output of truncated calls under [`ARCHIVE_DIR`] in the workspace.
    pub archive_truncated: bool,
    /// Most bytes archived for one call; the rest is dropped, and the note says how much.
    pub archive_max_file_bytes: u64,
    /// Most bytes archived by all calls of one [`BuiltinTools`] (one session) together.
    pub archive_max_session_bytes: u64,
    /// What `exec_command` processes are confined by ([`Sandbox::off`] by default: an
    /// embedder opts in with [`Sandbox::resolve`]).
    pub sandbox: Sandbox,
}

impl Default for ToolsConfig {
    fn default() -> ToolsConfig {
        ToolsConfig {
            max_output_chars: DEFAULT_MAX_OUTPUT_CHARS,
            timeout: Some(DEFAULT_TIMEOUT),
            enabled: BuiltinTool::ALL.to_vec(),
            archive_truncated: true,
            archive_max_file_bytes: 16 << 20,
            archive_max_session_bytes: 256 << 20,
            sandbox: Sandbox::off(),
        }
    }
}

/// The built-in tools, confined to one workspace directory.
#[derive(Clone, Debug)]
pub struct BuiltinTools {
    root: PathBuf,
    config: ToolsConfig,
    // Shared by clones: the archive limit is per session, not per copy.
    archive_budget: Arc<ArchiveBudget>,
    bypass: SandboxBypass,
    // Shared by clones: one session's background commands.
    commands: CommandSessions,
}

impl BuiltinTools {
    /// Tools working in `root`, which must exist; it is canonicalized here so every later
    /// confinement check compares against the real location.
    pub fn new(root: impl AsRef<Path>, config: ToolsConfig) -> io::Result<BuiltinTools> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", root.display()),
            ));
        }
        let archive_budget = Arc::new(ArchiveBudget::new(
            config.archive_max_file_bytes,
            config.archive_max_session_bytes,
        ));
        Ok(BuiltinTools {
            root,
            config,
            archive_budget,
            bypass: SandboxBypass::new(),
            commands: CommandSessions::new(),
        })
    }

    /// The session's background commands: list and kill them, or hear when background
    /// launches settle ([`CommandSessions::set_listener`]).
    pub fn commands(&self) -> &CommandSessions {
        &self.commands
    }

    /// These tools, running the `exec_command` calls granted in `bypass` outside the sandbox.
    pub fn with_bypass(mut self, bypass: SandboxBypass) -> BuiltinTools {
        self.bypass = bypass;
        self
    }

    /// The grants of calls that run outside the sandbox.
    pub fn bypass(&self) -> &SandboxBypass {
        &self.bypass
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The configuration.
    pub fn config(&self) -> &ToolsConfig {
        &self.config
    }

    /// What each call may produce and how long it may run, by the configuration: the cap,
    /// the archive under the workspace (with this session's archive budget) and the timeout.
    pub fn limits(&self) -> Limits {
        Limits::new(&self.config, Some(&self.root), self.archive_budget.clone())
    }

    fn bind(&self, call: &ToolCall) -> Option<Box<dyn Tool>> {
        let tool =
            BuiltinTool::from_name(&call.name).filter(|t| self.config.enabled.contains(t))?;
        let root = self.root.clone();
        // penguin's own file tools honour a read-only sandbox even where the kernel cannot.
        let read_only = self.config.sandbox.intended() == SandboxMode::ReadOnly;
        let workspace = || Workspace {
            root: root.clone(),
            protected: self.config.sandbox.protected().to_vec(),
        };
        Some(match tool {
            BuiltinTool::ExecCommand => Box::new(ExecCommand {
                root,
                sandbox: if self.bypass.take(&call.tool_call_id, &call.arguments) {
                    self.config.sandbox.unconfined()
                } else {
                    self.config.sandbox.clone()
                },
                commands: self.commands.clone(),
            }),
            BuiltinTool::InputCommand => Box::new(InputCommand {
                commands: self.commands.clone(),
            }),
            BuiltinTool::KillCommand => Box::new(KillCommand {
                commands: self.commands.clone(),
            }),
            BuiltinTool::ReadFile => Box::new(FileTool {
                op: FileOp::Read,
                workspace: workspace(),
                read_only,
            }),
            BuiltinTool::WriteFile => Box::new(FileTool {
                op: FileOp::Write,
                workspace: workspace(),
                read_only,
            }),
            BuiltinTool::EditFile => Box::new(FileTool {
                op: FileOp::Edit,
                workspace: workspace(),
                read_only,
            }),
        })
    }
}

#[async_trait]
impl Environment for BuiltinTools {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let Some(ModelPayload::ToolCall(call)) = request.call.model() else {
            // The engine only dispatches tool calls; answer anything else rather than panic.
            let id = request.call.tool_call_id().unwrap_or_default().to_owned();
            sink.emit(build::tool_call_output(
                notes::tool_error("not a tool_call message"),
                id,
                StopReason::Failed,
            ))
            .await;
            return;
        };
        let tool = self.bind(call);
        contract::execute(tool.as_deref(), call, &request.cancel, &self.limits(), sink).await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        BuiltinTool::ALL
            .into_iter()
            .filter(|t| self.config.enabled.contains(t))
            .map(BuiltinTool::definition)
            .collect()
    }

    fn permission(&self, name: &str) -> Permission {
        BuiltinTool::from_name(name).map_or(Permission::ReadWrite, BuiltinTool::permission)
    }

    fn background(&self) -> Option<Arc<dyn BackgroundWork>> {
        Some(Arc::new(self.commands.clone()))
    }

    /// `exec_command` when commands are sandboxed: the one tool whose calls start processes.
    fn unsandboxed_tools(&self) -> Vec<String> {
        if self.config.sandbox.is_active() {
            vec![BuiltinTool::ExecCommand.name().to_owned()]
        } else {
            Vec::new()
        }
    }

    /// Grants an `exec_command` call in [`BuiltinTools::bypass`] when commands are sandboxed.
    fn grant_unsandboxed(&self, call: &ToolCall) -> bool {
        if !self.unsandboxed_tools().contains(&call.name) {
            return false;
        }
        self.bypass.grant(&call.tool_call_id, &call.arguments);
        true
    }
}
