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
/// decides; one that asks has a person answer (the host's [`Approver::ask_person`], whatever
/// its approval mode; denied where nobody can); one that allows spares the host's question;
/// none that answers leaves it to the host. A rewrite (`updatedInput`) is held to the command policy again.
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

    async fn ask_person(
        &self,
        call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        self.host.ask_person(call).await
    }

    async fn verdict(&self, call: &OmniMessage) -> Result<Verdict, ApprovalError> {
        // A subagent's calls (origin-tagged, asked here through its parent's call) are put to
        // the same hooks: a guard that stops `rm -rf` stops it in a child too.
        let tc = match call.model() {
            Some(ModelPayload::ToolCall(tc)) => tc,
            _ => return self.host.verdict(call).await,
        };
        let command = command_of(&tc.name, &tc.arguments);
        let mut fields = tool_fields(&tc.name, &tc.arguments, &tc.tool_call_id);
        if let Some(child) = call.origin.as_ref().and_then(|o| o.first()) {
            fields.insert(
                "penguin_subagent_session".into(),
                Value::from(child.as_str()),
            );
        }
        let fields = Value::Object(fields);
        let results = self
            .hooks
            .run(HookEvent::PreToolUse, fields, |h| {
                h.matches(&tc.name, command.as_deref())
            })
            .await;
        let mut asked: Option<String> = None;
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
                Some(Permission::Ask) => asked = asked.or(Some(r.hook.name())),
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
        let verdict = match (asked, allowed) {
            // A hook's ask is a person's to answer, never the approval mode's: `--yes` must
            // not wave through what a hook wanted a human to see.
            (Some(by), _) => match self.host.ask_person(&judged).await {
                Some(decision) => Verdict::from(decision?),
                None => Verdict::by(ApprovalDecision::Deny, by, Some(NOBODY_TO_ASK.to_owned())),
            },
            (None, Some((by, reason))) => Verdict::by(ApprovalDecision::Allow, by, reason),
            (None, None) => self.host.verdict(&judged).await?,
        };
        Ok(match verdict.decision {
            ApprovalDecision::Allow => verdict.with_updated_arguments(updated),
            _ => verdict,
        })
    }
}

/// Why a call a hook asked about is denied where nobody can answer.
pub const NOBODY_TO_ASK: &str = "the hook asked for a person's approval of this call and nobody can answer here (no terminal, or the approval mode has nobody to ask)";

fn with_arguments(call: &OmniMessage, arguments: &str) -> OmniMessage {
    let mut call = call.clone();
    if let Body::Model(ModelPayload::ToolCall(tc)) = &mut call.body {
        tc.arguments = arguments.to_owned();
    }
    call
}
