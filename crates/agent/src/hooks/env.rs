//! `post_tool_use` hooks around the session's tools: a call's complete output is held until
//! they answered, then goes on (marked `failed` when one blocks it), so the model never sees
//! an output its hooks have not seen. Context they add follows the turn as a notice
//! ([§2.11](penguin_omni_protocol::spec#s2.11) *Steering and notices*).
//!
//! (`subagent_stop` hooks run in the subagent itself, as its `stop` hooks:
//! [`Hooks::for_subagent`].)

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use penguin_engine::{
    BackgroundWork, CancellationToken, Environment, MessageSink, Permission, ToolCallRequest,
};
use penguin_omni_protocol::markers::marker_block;
use penguin_omni_protocol::{
    build, McpConnectResult, ModelPayload, OmniMessage, StopReason, TextSender, ToolCall,
    ToolDefinition,
};
use serde_json::{json, Value};

use super::payload::{command_of, tool_fields};
use super::{context_notice, HookEvent, Hooks};

/// Where a session's hooks are found once set: the environment is built before them.
pub(crate) type HookSlot = Arc<Mutex<Option<Hooks>>>;

/// The session's tools, with its `post_tool_use` hooks after each call.
pub struct HookedEnv {
    inner: Arc<dyn Environment>,
    hooks: HookSlot,
}

impl std::fmt::Debug for HookedEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedEnv").finish_non_exhaustive()
    }
}

impl HookedEnv {
    /// `inner`, with whatever hooks `slot` holds when a call runs.
    pub(crate) fn wrap(inner: Arc<dyn Environment>, slot: HookSlot) -> Arc<dyn Environment> {
        Arc::new(HookedEnv { inner, hooks: slot })
    }

    fn hooks(&self) -> Option<Hooks> {
        let hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        hooks.filter(|h| h.has(HookEvent::PostToolUse))
    }
}

#[async_trait]
impl Environment for HookedEnv {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let Some(hooks) = self.hooks() else {
            return self.inner.execute(request, sink).await;
        };
        let call = request.tool_call().clone();
        let mut held = Hold {
            sink,
            id: call.tool_call_id.clone(),
            output: None,
        };
        self.inner.execute(request, &mut held).await;
        let Some(output) = held.output.take() else {
            // The engine answers a call its tool left without output.
            return;
        };
        let output = post_tool_use(&hooks, &call, output).await;
        held.sink.emit(output).await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.inner.tools()
    }

    fn permission(&self, name: &str) -> Permission {
        self.inner.permission(name)
    }

    fn connect_servers(&self) -> Vec<String> {
        self.inner.connect_servers()
    }

    async fn connect(&self, cancel: &CancellationToken) -> Option<Vec<McpConnectResult>> {
        self.inner.connect(cancel).await
    }

    fn background(&self) -> Option<Arc<dyn BackgroundWork>> {
        self.inner.background()
    }

    fn unsandboxed_tools(&self) -> Vec<String> {
        self.inner.unsandboxed_tools()
    }

    fn grant_unsandboxed(&self, call: &ToolCall) -> bool {
        self.inner.grant_unsandboxed(call)
    }
}

/// Passes a tool's messages on, holding back its own complete output.
struct Hold<'a> {
    sink: &'a mut dyn MessageSink,
    id: String,
    output: Option<OmniMessage>,
}

impl Hold<'_> {
    fn is_own_output(&self, msg: &OmniMessage) -> bool {
        !msg.has_origin()
            && matches!(msg.model(), Some(ModelPayload::ToolCallOutput(o)) if o.tool_call_id == self.id)
    }
}

#[async_trait]
impl MessageSink for Hold<'_> {
    async fn emit(&mut self, msg: OmniMessage) {
        match self.is_own_output(&msg) {
            true => self.output = Some(msg),
            false => self.sink.emit(msg).await,
        }
    }

    async fn emit_closure(&mut self, msg: OmniMessage) {
        match self.is_own_output(&msg) {
            true => self.output = Some(msg),
            false => self.sink.emit_closure(msg).await,
        }
    }
}

/// Runs the `post_tool_use` hooks of `call` on `output`; the output, marked `failed` when a
/// hook blocked it (its text unchanged: it must equal what was streamed).
async fn post_tool_use(hooks: &Hooks, call: &ToolCall, mut output: OmniMessage) -> OmniMessage {
    let Some(ModelPayload::ToolCallOutput(out)) = output.model() else {
        return output;
    };
    let command = command_of(&call.name, &call.arguments);
    let mut fields = tool_fields(&call.name, &call.arguments, &call.tool_call_id);
    let success = matches!(out.stop_reason, None | Some(StopReason::Completed));
    fields.insert(
        "tool_response".into(),
        json!({
            "output": out.output,
            "success": success,
            "stop_reason": out.stop_reason.map(|r| r.as_str()),
        }),
    );
    let results = hooks
        .run(HookEvent::PostToolUse, Value::Object(fields), |h| {
            h.matches(&call.name, command.as_deref())
        })
        .await;
    let mut failed = false;
    for r in results {
        let answer = match r.answer {
            Ok(answer) => answer,
            Err(failure) => {
                hooks.failed(&r.hook, &failure);
                continue;
            }
        };
        if let Some(context) = &answer.context {
            hooks.notify(context_notice(&r.hook, context));
        }
        if let Some(reason) = answer.block.or(answer.halt) {
            failed = true;
            hooks.notify(build::user_text_from(
                marker_block(
                    "hook_feedback",
                    &format!(
                        "The user's post_tool_use hook `{}` marked the output of {} ({}) as failed:\n{reason}",
                        r.hook.command, call.name, call.tool_call_id
                    ),
                ),
                TextSender::Harness,
            ));
        }
    }
    if failed {
        if let penguin_omni_protocol::Body::Model(ModelPayload::ToolCallOutput(o)) =
            &mut output.body
        {
            o.stop_reason = Some(StopReason::Failed);
        }
    }
    output
}
