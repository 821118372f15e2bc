//! `run_subagent`: a child session in the same workspace, streamed into the parent (§4 of the
//! reference behaviour, foreground mode).
//!
//! - The child has its own session and Trace; the parent's Trace gets only the `subagent`
//!   pointer (the engine writes it when it sees the child's `session_meta` with one origin hop).
//! - Every child message reaches the parent stream with the child's id prepended to `origin`;
//!   the first is the child's `session_meta`, the second its prompt (the child engine never
//!   echoes input).
//! - The child's own assistant text is re-emitted as the tool's output deltas, so the tool's
//!   output is the child's answer.
//! - The child inherits the parent's approver; the host sees the child's calls with their origin.
//! - Depth limit 1: a child session is given no `run_subagent`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_engine::{
    ApprovalError, Approver, Environment, MessageSink, Permission, RunOptions, ToolCallRequest,
};
use penguin_omni_protocol::{
    build, ApprovalDecision, EventPayload, ModelPayload, OmniMessage, Role, StopReason,
    StreamEventType, TextSender, ToolDefinition,
};

use crate::session::{Session, SessionError};

/// The tool's name.
pub const RUN_SUBAGENT: &str = "run_subagent";

/// Creates child sessions.
pub trait SubagentSpawner: Send + Sync {
    /// A new child session (same workspace, its own Trace, `source: "subagent"`, and tools
    /// without `run_subagent`).
    fn spawn(&self) -> Result<Session, SessionError>;
}

impl<F: Fn() -> Result<Session, SessionError> + Send + Sync> SubagentSpawner for F {
    fn spawn(&self) -> Result<Session, SessionError> {
        self()
    }
}

/// Wraps an Environment with `run_subagent`.
pub struct SubagentEnvironment {
    inner: Arc<dyn Environment>,
    spawner: Arc<dyn SubagentSpawner>,
}

impl fmt::Debug for SubagentEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubagentEnvironment")
            .finish_non_exhaustive()
    }
}

impl SubagentEnvironment {
    /// `inner`'s tools plus `run_subagent`, spawning children with `spawner`.
    pub fn new(
        inner: Arc<dyn Environment>,
        spawner: Arc<dyn SubagentSpawner>,
    ) -> SubagentEnvironment {
        SubagentEnvironment { inner, spawner }
    }

    /// The tool's definition.
    pub fn definition() -> ToolDefinition {
        ToolDefinition {
            name: RUN_SUBAGENT.into(),
            description: "Delegate a self-contained task to a subagent: a fresh session in the same workspace with the same tools (except this one). Its final answer is this tool's output.".into(),
            parameters: Some(serde_json::json!({
                "type": "object",
                "properties": {"prompt": {"type": "string", "description": "The complete task for the subagent; it sees nothing else of this conversation."}},
                "required": ["prompt"],
                "additionalProperties": false
            })),
        }
    }
}

/// The parent's approver, seeing child calls with the child's hop in their origin.
struct InheritedApprover {
    parent: Option<Arc<dyn Approver>>,
    hop: String,
}

#[async_trait]
impl Approver for InheritedApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        match &self.parent {
            Some(p) => p.approve(&call.clone().with_origin(self.hop.clone())).await,
            None => Ok(ApprovalDecision::Deny),
        }
    }
}

#[async_trait]
impl Environment for SubagentEnvironment {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let call = request.tool_call().clone();
        if call.name != RUN_SUBAGENT {
            return self.inner.execute(request, sink).await;
        }
        let id = call.tool_call_id.clone();
        sink.emit(build::partial_tool_call_output(
            StreamEventType::Start,
            "",
            &id,
            StopReason::Completed,
        ))
        .await;
        let prompt = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("prompt").and_then(|p| p.as_str()).map(str::to_owned))
            .filter(|p| !p.trim().is_empty());
        let Some(prompt) = prompt else {
            let note = "[run_subagent error: the arguments need a non-empty \"prompt\" string]";
            return close(sink, &id, "", note, StopReason::Failed).await;
        };
        let mut child = match self.spawner.spawn() {
            Ok(c) => c,
            Err(e) => {
                return close(
                    sink,
                    &id,
                    "",
                    &format!("[subagent error: {e}]"),
                    StopReason::Failed,
                )
                .await
            }
        };
        let hop = child.id().to_owned();
        sink.emit(child.meta().clone().with_origin(hop.clone()))
            .await;
        let input = build::user_text_from(prompt, TextSender::ParentAgent);
        sink.emit(input.clone().with_origin(hop.clone())).await;
        let approver: Arc<dyn Approver> = Arc::new(InheritedApprover {
            parent: request.approver.clone(),
            hop: hop.clone(),
        });
        let options = RunOptions {
            approver: Some(approver),
            cancel: request.cancel.child_token(),
            thinking_level: request.thinking_level,
        };
        let mut stream = match child.run(vec![input], options) {
            Ok(s) => s,
            Err(e) => {
                return close(
                    sink,
                    &id,
                    "",
                    &format!("[subagent error: {e}]"),
                    StopReason::Failed,
                )
                .await
            }
        };
        let mut answer = String::new();
        let mut segments = 0usize;
        let mut aborted: Option<String> = None;
        while let Some(frame) = stream.next().await {
            let msg = frame.message();
            let direct = !msg.has_origin();
            if direct {
                match &msg.body {
                    penguin_omni_protocol::Body::Model(ModelPayload::PartialText(t))
                        if t.role == Role::Assistant =>
                    {
                        match t.event_type {
                            StreamEventType::Start if segments > 0 && !answer.is_empty() => {
                                // Separate the child's answers across turns so the output reads
                                // as text; emitted as a delta so deltas still equal the output.
                                answer.push_str("\n\n");
                                sink.emit(build::partial_tool_call_output(
                                    StreamEventType::Delta,
                                    "\n\n",
                                    &id,
                                    StopReason::Completed,
                                ))
                                .await;
                            }
                            StreamEventType::Delta if !t.text.is_empty() => {
                                answer.push_str(&t.text);
                                sink.emit(build::partial_tool_call_output(
                                    StreamEventType::Delta,
                                    &t.text,
                                    &id,
                                    StopReason::Completed,
                                ))
                                .await;
                            }
                            StreamEventType::Stop => segments += 1,
                            _ => {}
                        }
                    }
                    penguin_omni_protocol::Body::Event(EventPayload::Abort { reason }) => {
                        aborted = Some(reason.clone().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            sink.emit(msg.clone().with_origin(hop.clone())).await;
        }
        // Flushing waits for the disk (fsync); keep that off the runtime's workers.
        let writer = child.writer().clone();
        match tokio::task::spawn_blocking(move || writer.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("subagent {hop}: trace flush failed: {e}"),
            Err(e) => tracing::warn!("subagent {hop}: trace flush task failed: {e}"),
        }
        let (note, status) = match aborted {
            Some(_) if request.cancel.is_cancelled() => (
                "[interrupted: tool aborted by user]".to_owned(),
                StopReason::Aborted,
            ),
            Some(reason) => (format!("[subagent aborted: {reason}]"), StopReason::Failed),
            None if answer.is_empty() => (
                "[subagent finished without a text answer]".to_owned(),
                StopReason::Completed,
            ),
            None => (String::new(), StopReason::Completed),
        };
        close(sink, &id, &answer, &note, status).await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = self.inner.tools();
        tools.push(SubagentEnvironment::definition());
        tools
    }

    fn permission(&self, name: &str) -> Permission {
        if name == RUN_SUBAGENT {
            // The child's own calls are approved one by one; spawning reads nothing itself.
            Permission::Read
        } else {
            self.inner.permission(name)
        }
    }

    fn background(&self) -> Option<Arc<dyn penguin_engine::BackgroundWork>> {
        self.inner.background()
    }
}

/// Ends the output: the note delta, stop, then the complete output (content + "\n" + note).
async fn close(
    sink: &mut dyn MessageSink,
    id: &str,
    content: &str,
    note: &str,
    status: StopReason,
) {
    let mut output = content.to_owned();
    if !note.is_empty() {
        let delta = if content.is_empty() {
            note.to_owned()
        } else {
            format!("\n{note}")
        };
        output.push_str(&delta);
        sink.emit(build::partial_tool_call_output(
            StreamEventType::Delta,
            delta,
            id,
            StopReason::Completed,
        ))
        .await;
    }
    sink.emit(build::partial_tool_call_output(
        StreamEventType::Stop,
        "",
        id,
        status,
    ))
    .await;
    sink.emit(build::tool_call_output(output, id, status)).await;
}
