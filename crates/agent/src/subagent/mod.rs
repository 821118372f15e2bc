//! Subagents (protocol [§4](penguin_omni_protocol::spec#s4) *Subagents and the origin chain*):
//! `run_subagent` starts a child session in the same
//! workspace; `input_subagent` and `kill_subagent` reach a child that outlived its call.
//!
//! - The child has its own session and Trace; the parent's Trace gets only the `subagent`
//!   pointer (the engine writes it when it sees the child's `session_meta` with one origin hop,
//!   which every launch sends through the tool first).
//! - Foreground (the default): for `yield_time_ms` (default 300 s) the call forwards the child's
//!   messages with the child's id prepended to `origin`, and re-emits the child's own answer
//!   text as its output deltas. A child still running when the window ends is kept as
//!   `subagent-<last 8 of its id>`; an interrupt during the window kills it.
//! - `run_in_background`: the call returns at once; the child's messages go to the host live
//!   through [`Session::on_background_message`](crate::session::Session::on_background_message)
//!   (never through the parent engine, so never into its Trace), and the end of each of its
//!   rounds comes back as a `[background_task_done]` notice through the environment's
//!   [`BackgroundWork`] listener.
//! - Approvals are inherited: the child's calls go, origin-tagged, to the approver of the call
//!   whose window is open, else (a background launch) to the launching call's approver.
//! - At most [`MAX_CHILDREN`] children are kept; a running one is never evicted. All of them
//!   die with the parent session's environment (the session ended or was unloaded).
//! - Depth limit 1: a child session is given no subagent tools.

mod child;
mod registry;
mod tools;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use penguin_engine::{BackgroundWork, Environment, MessageSink, Permission, ToolCallRequest};
use penguin_omni_protocol::ToolDefinition;
use penguin_tools::Limits;
use serde_json::json;

pub use child::{MESSAGE_BUFFER_CAP, TEXT_BUFFER_CAP};
pub use registry::MAX_CHILDREN;
pub use tools::{DEFAULT_POLL_YIELD, DEFAULT_YIELD, THINKING_LEVELS};

use crate::session::{Session, SessionError};
use registry::{Children, SubagentWork};

/// Starts a child session.
pub const RUN_SUBAGENT: &str = "run_subagent";
/// Polls a kept child, or sends it a follow-up prompt.
pub const INPUT_SUBAGENT: &str = "input_subagent";
/// Ends a kept child.
pub const KILL_SUBAGENT: &str = "kill_subagent";

/// Creates child sessions.
pub trait SubagentSpawner: Send + Sync {
    /// A new child session (same workspace, its own Trace, `source: "subagent"`, and tools
    /// without the subagent tools).
    fn spawn(&self) -> Result<Session, SessionError>;

    /// A child on the model `model` names (`run_subagent`'s `model`: one of
    /// [`models`](SubagentSpawner::models)); `None` is [`spawn`](SubagentSpawner::spawn). A
    /// name that is none of them is refused with the list. By default only `None` is taken.
    fn spawn_with(&self, model: Option<&str>) -> Result<Session, SessionError> {
        match model {
            None => self.spawn(),
            Some(name) => Err(SessionError::Config(crate::config::ConfigError::Invalid(
                format!("no model named {name:?}; subagents here run on this session's model only"),
            ))),
        }
    }

    /// The model names [`spawn_with`](SubagentSpawner::spawn_with) takes, the default first
    /// (`run_subagent`'s description lists them); empty when there is no choice.
    fn models(&self) -> Vec<String> {
        Vec::new()
    }
}

impl<F: Fn() -> Result<Session, SessionError> + Send + Sync> SubagentSpawner for F {
    fn spawn(&self) -> Result<Session, SessionError> {
        self()
    }
}

/// Wraps an Environment with the subagent tools.
pub struct SubagentEnvironment {
    inner: Arc<dyn Environment>,
    spawner: Arc<dyn SubagentSpawner>,
    children: Arc<Children>,
    work: Arc<SubagentWork>,
    limits: Limits,
}

impl fmt::Debug for SubagentEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubagentEnvironment")
            .finish_non_exhaustive()
    }
}

impl SubagentEnvironment {
    /// `inner`'s tools plus the subagent tools, spawning children with `spawner`.
    pub fn new(
        inner: Arc<dyn Environment>,
        spawner: Arc<dyn SubagentSpawner>,
    ) -> SubagentEnvironment {
        let children = Arc::new(Children::default());
        let work = Arc::new(SubagentWork {
            children: children.clone(),
            inner: inner.background(),
        });
        SubagentEnvironment {
            inner,
            spawner,
            children,
            work,
            limits: Limits::default(),
        }
    }

    /// These tools, their calls' output capped and archived by `limits` (a session's
    /// [`BuiltinTools::limits`](penguin_tools::BuiltinTools::limits), say) instead of the
    /// reference's default cap with no archive. A child's answer is output like any tool's:
    /// past the cap it goes only to the archive.
    pub fn with_limits(mut self, limits: Limits) -> SubagentEnvironment {
        self.limits = limits;
        self
    }

    /// The tools' definitions (`run_subagent`'s `model` without a list of names).
    pub fn definitions() -> Vec<ToolDefinition> {
        Self::definitions_offering(&[])
    }

    /// The tools' definitions, `run_subagent`'s `model` naming `models` (the default first).
    pub fn definitions_offering(models: &[String]) -> Vec<ToolDefinition> {
        let model = match models {
            [] => "A configured model to run the subagent on (a model name of this penguin's config.toml). Omit it to use this session's model.".to_owned(),
            [default] => format!("The model to run the subagent on: only {default} (this session's) is offered; omit it."),
            [default, ..] => format!("The model to run the subagent on, by name: one of {}. Omit it to use this session's model ({default}).", models.join(", ")),
        };
        let subagent_id =
            json!({"type": "string", "description": "The subagent_id returned by run_subagent."});
        vec![
            ToolDefinition {
                name: RUN_SUBAGENT.into(),
                description: "Delegate a self-contained task to a subagent: a fresh session in the same workspace with the same tools (except these subagent tools), optionally on another configured model (`model`) and at another thinking level (`thinking_level`). Its final answer is this tool's output. If it is still working when yield_time_ms elapses, you get the output so far and a subagent_id, and it keeps running (drive it with input_subagent).".into(),
                parameters: Some(json!({
                    "type": "object",
                    "properties": {
                        "prompt": {"type": "string", "description": "The complete task for the subagent: include all context it needs and the exact final output you expect back; it sees nothing else of this conversation."},
                        "model": {"type": "string", "description": model},
                        "thinking_level": {"type": "string", "enum": tools::THINKING_LEVELS, "description": "Thinking level for the subagent. Omit to inherit this session's level. Lower it for cheap mechanical subtasks; raise it for hard analysis or design subtasks."},
                        "yield_time_ms": {"type": "number", "description": "How long to wait for the subagent before returning. Defaults to 300000; minimum 250, capped below the tool timeout."},
                        "run_in_background": {"type": "boolean", "description": "Start the subagent in the background: return a subagent_id at once. When it finishes, its answer arrives as an automatic user message; no polling needed. Good for parallel subtasks; interact via input_subagent, stop via kill_subagent.", "default": false}
                    },
                    "required": ["prompt"],
                    "additionalProperties": false
                })),
            },
            ToolDefinition {
                name: INPUT_SUBAGENT.into(),
                description: "Interact with a subagent started by run_subagent that is still kept: poll for new output, or, once it is idle, send a follow-up prompt to continue the same subagent session. Its pending tool approvals are asked while this call waits.".into(),
                parameters: Some(json!({
                    "type": "object",
                    "properties": {
                        "subagent_id": subagent_id,
                        "prompt": {"type": "string", "description": "A follow-up task, delivered as a new user message on the same session; only accepted when the subagent is idle. Empty (the default) only polls for new output and status."},
                        "yield_time_ms": {"type": "number", "description": "How long to wait for new output or completion. Follow-up prompts default to 300000, empty polls to 10000; minimum 250, capped below the tool timeout."}
                    },
                    "required": ["subagent_id"],
                    "additionalProperties": false
                })),
            },
            ToolDefinition {
                name: KILL_SUBAGENT.into(),
                description: "Terminate a subagent started by run_subagent: aborts its run (denying its pending approvals), returns its answer text not yet delivered, and removes it. Also removes an idle subagent, freeing its slot.".into(),
                parameters: Some(json!({
                    "type": "object",
                    "properties": {"subagent_id": subagent_id},
                    "required": ["subagent_id"],
                    "additionalProperties": false
                })),
            },
        ]
    }
}

#[async_trait]
impl Environment for SubagentEnvironment {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        match request.tool_call().name.as_str() {
            RUN_SUBAGENT => {
                let spawner = self.spawner.as_ref();
                tools::run_subagent(&self.children, spawner, request, &self.limits, sink).await
            }
            INPUT_SUBAGENT => {
                tools::input_subagent(&self.children, request, &self.limits, sink).await
            }
            KILL_SUBAGENT => {
                tools::kill_subagent(&self.children, request, &self.limits, sink).await
            }
            _ => self.inner.execute(request, sink).await,
        }
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = self.inner.tools();
        tools.extend(SubagentEnvironment::definitions_offering(
            &self.spawner.models(),
        ));
        tools
    }

    fn permission(&self, name: &str) -> Permission {
        match name {
            // The child's own calls are approved one by one; starting or prompting it reads
            // nothing itself.
            RUN_SUBAGENT | INPUT_SUBAGENT => Permission::Read,
            // Throws away the child's work in progress.
            KILL_SUBAGENT => Permission::ReadWrite,
            _ => self.inner.permission(name),
        }
    }

    fn connect_servers(&self) -> Vec<String> {
        self.inner.connect_servers()
    }

    async fn connect(
        &self,
        cancel: &penguin_engine::CancellationToken,
    ) -> Option<Vec<penguin_omni_protocol::McpConnectResult>> {
        self.inner.connect(cancel).await
    }

    fn background(&self) -> Option<Arc<dyn BackgroundWork>> {
        Some(self.work.clone())
    }

    fn unsandboxed_tools(&self) -> Vec<String> {
        self.inner.unsandboxed_tools()
    }

    fn grant_unsandboxed(&self, call: &penguin_omni_protocol::ToolCall) -> bool {
        self.inner.grant_unsandboxed(call)
    }

    async fn preview(&self, call: &penguin_omni_protocol::ToolCall) -> Option<String> {
        self.inner.preview(call).await
    }
}
