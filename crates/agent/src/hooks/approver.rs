//! `pre_tool_use` hooks as part of the run's approver: their answer is the call's
//! `approval_decision`, at the position any approval has
//! ([§2.5](penguin_omni_protocol::spec#s2.5) *One turn*), naming the hook that decided.

use std::sync::Arc;

use async_trait::async_trait;
use penguin_engine::{ApprovalError, Approver, Verdict};
use penguin_omni_protocol::{ApprovalDecision, Body, ModelPayload, OmniMessage};
use penguin_tools::policy::CommandPolicy;
use serde_json::Value;

use super::answer::Permission;
use super::payload::{arguments_from, command_of, tool_fields};
use super::{context_notice, HookEvent, Hooks};

/// The run's approver with `pre_tool_use` hooks in front of it: a hook that denies (or fails)
/// decides; one that allows spares the host's question; one that asks, or none that answers,
/// leaves it to the host. A rewrite (`updatedInput`) is held to the command policy again.
pub struct HookApprover {
    hooks: Hooks,
    policy: CommandPolicy,
    host: Arc<dyn Approver>,
}

impl std::fmt::Debug for HookApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookApprover")
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

impl HookApprover {
    /// `host` behind `hooks`' `pre_tool_use` hooks (`host` itself when there are none).
    pub fn wrap(
        hooks: &Hooks,
        policy: CommandPolicy,
        host: Arc<dyn Approver>,
    ) -> Arc<dyn Approver> {
        if !hooks.has(HookEvent::PreToolUse) {
            return host;
        }
        Arc::new(HookApprover {
            hooks: hooks.clone(),
            policy,
            host,
        })
    }
}

#[async_trait]
impl Approver for HookApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        self.verdict(call).await.map(|v| v.decision)
    }

    async fn verdict(&self, call: &OmniMessage) -> Result<Verdict, ApprovalError> {
        // A child session's calls are its own session's business.
        let tc = match call.model() {
            Some(ModelPayload::ToolCall(tc)) if !call.has_origin() => tc,
            _ => return self.host.verdict(call).await,
        };
        let command = command_of(&tc.name, &tc.arguments);
        let fields = Value::Object(tool_fields(&tc.name, &tc.arguments, &tc.tool_call_id));
        let results = self
            .hooks
            .run(HookEvent::PreToolUse, fields, |h| {
                h.matches(&tc.name, command.as_deref())
            })
            .await;
        let mut asked = false;
        let mut allowed: Option<(String, Option<String>)> = None;
        let mut updated: Option<String> = None;
        for r in results {
            let answer = match r.answer {
                Ok(answer) => answer,
                Err(failure) => {
                    // Fails closed: a guard that cannot answer does not let the call through.
                    self.hooks.failed(&r.hook, &failure);
                    let reason = format!("the hook failed: {failure}");
                    return Ok(Verdict::by(
                        ApprovalDecision::Deny,
                        r.hook.name(),
                        Some(reason),
                    ));
                }
            };
            if let Some(context) = &answer.context {
                self.hooks.notify(context_notice(&r.hook, context));
            }
            let denied = answer.permission == Some(Permission::Deny)
                || answer.block.is_some()
                || answer.halt.is_some();
            if denied {
                let reason = answer.reason.or(answer.block).or(answer.halt);
                return Ok(Verdict::by(ApprovalDecision::Deny, r.hook.name(), reason));
            }
            match answer.permission {
                Some(Permission::Ask) => asked = true,
                Some(Permission::Allow) => allowed = Some((r.hook.name(), answer.reason)),
                _ => {}
            }
            if let Some(input) = &answer.updated_input {
                updated = Some(arguments_from(input, &tc.arguments));
            }
        }
        // What runs is what the user and the policy judge.
        let judged = match &updated {
            Some(arguments) => with_arguments(call, arguments),
            None => call.clone(),
        };
        if updated.is_some() && self.policy.veto(&judged).is_some() {
            return Ok(ApprovalDecision::Forbidden.into());
        }
        let verdict = match allowed {
            Some((by, reason)) if !asked => Verdict::by(ApprovalDecision::Allow, by, reason),
            _ => self.host.verdict(&judged).await?,
        };
        Ok(match verdict.decision {
            ApprovalDecision::Allow => verdict.with_updated_arguments(updated),
            _ => verdict,
        })
    }
}

fn with_arguments(call: &OmniMessage, arguments: &str) -> OmniMessage {
    let mut call = call.clone();
    if let Body::Model(ModelPayload::ToolCall(tc)) = &mut call.body {
        tc.arguments = arguments.to_owned();
    }
    call
}
