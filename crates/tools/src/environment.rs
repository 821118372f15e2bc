//! The built-in tools as one [`Environment`]: [`BuiltinTools`] and its [`ToolsConfig`]
//! (feature `builtin`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use penguin_engine::{BackgroundWork, Environment, MessageSink, Permission, ToolCallRequest};
use penguin_omni_protocol::{build, ModelPayload, StopReason, ToolCall, ToolDefinition};

use crate::call_output::{
    ArchiveBudget, DEFAULT_ARCHIVE_MAX_FILE_BYTES, DEFAULT_ARCHIVE_MAX_SESSION_BYTES,
};
use crate::exec::{ExecCommand, InputCommand, KillCommand};
use crate::fs_tool::{FsCtx, FsFn, FsTool};
use crate::path::{ExtraRoot, Workspace};
use crate::plan::{PlanCell, UpdatePlan};
use crate::{
    contract, files, image, memory, notes, patch, search, BuiltinTool, CommandSessions,
    Descriptions, EditTools, Limits, Plan, Sandbox, SandboxBypass, SandboxMode, SandboxRequest,
    Tool, DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TIMEOUT,
};

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
    /// Which edit tools of `enabled` are offered: `apply_patch`, `write_file` and
    /// `edit_file`, or some of them ([`EditTools::Both`], all three, by default).
    pub edit_tools: EditTools,
    /// Which definitions the model is shown: [`Descriptions::Full`] (the default), or
    /// [`Descriptions::Compact`] for a model with a small context window.
    pub descriptions: Descriptions,
    /// Write the full output of truncated calls under [`ARCHIVE_DIR`](crate::ARCHIVE_DIR) in the
    /// workspace.
    pub archive_truncated: bool,
    /// Most bytes archived for one call; the rest is dropped, and the note says how much.
    pub archive_max_file_bytes: u64,
    /// Most bytes archived by all calls of one [`BuiltinTools`] (one session) together.
    pub archive_max_session_bytes: u64,
    /// What `exec_command` processes are confined by. By default the platform's, as
    /// `penguin run` resolves it without flags ([`ToolsConfig::platform_sandbox`]): the
    /// strongest mode the kernel offers, network off. [`Sandbox::off`] is an explicit choice.
    pub sandbox: Sandbox,
    /// Memory folders (existing directories, usually penguin's `<data root>/memory`, holding a
    /// folder per scope) the file tools may read and write although they are outside the
    /// workspace; with any, `memory_forget` is offered. Commands never get them (the sandbox
    /// hides the data root).
    pub memory: Vec<PathBuf>,
}

impl ToolsConfig {
    /// These limits, truncated output archived under `workspace` (when given and the
    /// configuration archives) within `archive_budget`.
    pub(crate) fn limits(
        &self,
        workspace: Option<&Path>,
        archive_budget: Arc<ArchiveBudget>,
    ) -> Limits {
        Limits {
            max_output_chars: usize::try_from(self.max_output_chars)
                .ok()
                .filter(|n| *n > 0),
            timeout: self.timeout.filter(|t| !t.is_zero()),
            archive_root: workspace
                .filter(|_| self.archive_truncated)
                .map(Path::to_path_buf),
            archive_budget,
        }
    }
}

impl Default for ToolsConfig {
    fn default() -> ToolsConfig {
        ToolsConfig {
            max_output_chars: DEFAULT_MAX_OUTPUT_CHARS,
            timeout: Some(DEFAULT_TIMEOUT),
            enabled: BuiltinTool::ALL.to_vec(),
            edit_tools: EditTools::default(),
            descriptions: Descriptions::default(),
            archive_truncated: true,
            archive_max_file_bytes: DEFAULT_ARCHIVE_MAX_FILE_BYTES,
            archive_max_session_bytes: DEFAULT_ARCHIVE_MAX_SESSION_BYTES,
            sandbox: ToolsConfig::platform_sandbox(),
            memory: Vec::new(),
        }
    }
}

impl ToolsConfig {
    /// The sandbox of a session that asked for none: [`Sandbox::resolve`] of the default
    /// [`SandboxRequest`] (`workspace-write` where the kernel has Landlock, network off).
    ///
    /// The default request can only fail where the temp directory does not resolve; then the
    /// same request with `/tmp`, and where even that is missing, [`Sandbox::off`], which
    /// [`Sandbox::summary`] and [`Sandbox::warning`] say.
    pub fn platform_sandbox() -> Sandbox {
        let request = SandboxRequest::default();
        Sandbox::resolve(&request)
            .or_else(|_| {
                Sandbox::resolve(&SandboxRequest {
                    temp_dir: Some(PathBuf::from("/tmp")),
                    ..request
                })
            })
            .unwrap_or_else(|_| Sandbox::off())
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
    // Tools of the embedder's own, after the built-in ones.
    custom: Vec<CustomTool>,
    // Shared by clones: the model's latest plan.
    plan: PlanCell,
}

/// A tool added with [`BuiltinTools::with_tool`].
#[derive(Clone)]
struct CustomTool {
    definition: ToolDefinition,
    permission: Permission,
    tool: Arc<dyn Tool>,
}

impl std::fmt::Debug for CustomTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomTool")
            .field("name", &self.definition.name)
            .field("permission", &self.permission)
            .finish_non_exhaustive()
    }
}

/// Why a tool could not be added: its name is empty, not `[A-Za-z0-9_-]` (what model APIs
/// accept), longer than 64 characters, or already taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool name {name:?} cannot be added: {reason}")]
pub struct ToolNameError {
    /// The name asked for.
    pub name: String,
    /// Why not.
    pub reason: &'static str,
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
            custom: Vec::new(),
            plan: PlanCell::default(),
        })
    }

    /// These tools and `tool`, offered to the model as `definition`. Its calls run under the
    /// same contract as the built-in ones (the cap and archive, the timeout, interrupts,
    /// panics, one complete output each); `permission` is what approval modes consult.
    pub fn with_tool(
        mut self,
        definition: ToolDefinition,
        permission: Permission,
        tool: impl Tool + 'static,
    ) -> Result<BuiltinTools, ToolNameError> {
        let name = definition.name.clone();
        let refuse = |reason| {
            Err(ToolNameError {
                name: name.clone(),
                reason,
            })
        };
        if name.is_empty() || name.chars().count() > 64 {
            return refuse("a name has 1 to 64 characters");
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return refuse("only letters, digits, `_` and `-`");
        }
        if BuiltinTool::from_name(&name).is_some()
            || self.custom.iter().any(|c| c.definition.name == name)
        {
            return refuse("a tool of that name is already there");
        }
        self.custom.push(CustomTool {
            definition,
            permission,
            tool: Arc::new(tool),
        });
        Ok(self)
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

    /// The plan the model last set with `update_plan` (`None` before its first call).
    pub fn plan(&self) -> Option<Plan> {
        self.plan.get()
    }

    /// Sets the plan [`BuiltinTools::plan`] returns, e.g. one a resumed session rebuilt from
    /// its last `update_plan` call ([`Plan::from_arguments`]).
    pub fn restore_plan(&self, plan: Option<Plan>) {
        self.plan.set(plan);
    }

    /// Whether `tool` is offered: enabled, and allowed by [`ToolsConfig::edit_tools`].
    pub fn offers(&self, tool: BuiltinTool) -> bool {
        self.config.enabled.contains(&tool)
            && tool
                .edit_tools()
                .is_none_or(|kind| self.config.edit_tools.offers(kind))
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
        self.config
            .limits(Some(&self.root), self.archive_budget.clone())
    }

    /// The folders outside the workspace the file tools reach: the sandbox's readable ones
    /// (the user's skills) to read, the memory folders to read and write. Canonical; one that
    /// does not exist is left out.
    fn extra_roots(&self) -> Vec<ExtraRoot> {
        let canonical = |p: &PathBuf| std::fs::canonicalize(p).ok();
        self.config
            .sandbox
            .readable()
            .iter()
            .filter_map(canonical)
            .map(|root| ExtraRoot {
                root,
                writable: false,
            })
            .chain(
                self.config
                    .memory
                    .iter()
                    .filter_map(canonical)
                    .map(|root| ExtraRoot {
                        root,
                        writable: true,
                    }),
            )
            .collect()
    }

    /// A workspace tool running `run` in this session's workspace.
    fn fs_tool(&self, run: FsFn, writes: bool) -> FsTool {
        FsTool {
            ctx: FsCtx {
                workspace: Workspace {
                    root: self.root.clone(),
                    protected: self.config.sandbox.protected().to_vec(),
                    extra: self.extra_roots(),
                    writes,
                    git_read_only: self.config.sandbox.intended() != SandboxMode::Off
                        && !self.config.sandbox.git_writable(),
                },
                max_chars: usize::try_from(self.config.max_output_chars)
                    .ok()
                    .filter(|n| *n > 0),
                dry_run: false,
            },
            run,
            writes,
            // penguin's own file tools honour a read-only sandbox even where the kernel
            // cannot.
            read_only: self.config.sandbox.intended() == SandboxMode::ReadOnly,
        }
    }

    /// The diff an edit tool's call would make, computed without writing (see
    /// [`Environment::preview`]).
    async fn preview_edit(&self, call: &ToolCall) -> Option<String> {
        if self.custom.iter().any(|c| c.definition.name == call.name) {
            return None;
        }
        let run: FsFn = match BuiltinTool::from_name(&call.name).filter(|t| self.offers(*t))? {
            BuiltinTool::WriteFile => files::write_file,
            BuiltinTool::EditFile => files::edit_file,
            BuiltinTool::ApplyPatch => patch::apply_patch,
            _ => return None,
        };
        let answer = match notes::arguments(&call.name, &call.arguments) {
            Ok(args) => self.fs_tool(run, true).preview(args).await,
            Err(e) => Err(e),
        };
        Some(answer.unwrap_or_else(|e| format!("this call would fail: {e}")))
    }

    fn bind(&self, call: &ToolCall) -> Option<Arc<dyn Tool>> {
        if let Some(custom) = self.custom.iter().find(|c| c.definition.name == call.name) {
            return Some(custom.tool.clone());
        }
        let fs_tool =
            |run: FsFn, writes: bool| -> Arc<dyn Tool> { Arc::new(self.fs_tool(run, writes)) };
        if call.name == memory::MEMORY_FORGET && !self.config.memory.is_empty() {
            return Some(fs_tool(memory::memory_forget, true));
        }
        let tool = BuiltinTool::from_name(&call.name).filter(|t| self.offers(*t))?;
        let root = self.root.clone();
        let fs = |run: FsFn| fs_tool(run, tool.permission() == Permission::ReadWrite);
        Some(match tool {
            BuiltinTool::ExecCommand => Arc::new(ExecCommand {
                root,
                sandbox: if self.bypass.take(&call.tool_call_id, &call.arguments) {
                    self.config.sandbox.unconfined()
                } else {
                    self.config.sandbox.clone()
                },
                commands: self.commands.clone(),
            }),
            BuiltinTool::InputCommand => Arc::new(InputCommand {
                commands: self.commands.clone(),
            }),
            BuiltinTool::KillCommand => Arc::new(KillCommand {
                commands: self.commands.clone(),
            }),
            BuiltinTool::ReadFile => fs(files::read_file),
            BuiltinTool::ListFiles => fs(search::list_files),
            BuiltinTool::GrepFiles => fs(search::grep_files),
            BuiltinTool::ReadImage => fs(image::read_image),
            BuiltinTool::WriteFile => fs(files::write_file),
            BuiltinTool::EditFile => fs(files::edit_file),
            BuiltinTool::ApplyPatch => fs(patch::apply_patch),
            BuiltinTool::UpdatePlan => Arc::new(UpdatePlan {
                cell: self.plan.clone(),
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
        let descriptions = self.config.descriptions;
        let forget = match descriptions {
            Descriptions::Full => memory::forget_definition,
            Descriptions::Compact => memory::forget_definition_compact,
        };
        BuiltinTool::ALL
            .into_iter()
            .filter(|t| self.offers(*t))
            .map(|t| t.definition_with(descriptions))
            .chain((!self.config.memory.is_empty()).then(forget))
            .chain(self.custom.iter().map(|c| c.definition.clone()))
            .collect()
    }

    fn permission(&self, name: &str) -> Permission {
        if let Some(custom) = self.custom.iter().find(|c| c.definition.name == name) {
            return custom.permission;
        }
        BuiltinTool::from_name(name).map_or(Permission::ReadWrite, BuiltinTool::permission)
    }

    fn background(&self) -> Option<Arc<dyn BackgroundWork>> {
        Some(Arc::new(self.commands.clone()))
    }

    async fn preview(&self, call: &ToolCall) -> Option<String> {
        self.preview_edit(call).await
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
