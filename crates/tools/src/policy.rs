//! The command policy: commands the session never runs, whatever the approver says.
//!
//! A vetoed call is answered `forbidden` without asking the host (protocol
//! [§2.14](penguin_omni_protocol::spec#s2.14) *The session layer*), so the engine records
//! `approval_decision(forbidden)` and the synthetic `Tool call denied by policy.` output.

use std::sync::Arc;

use async_trait::async_trait;
use penguin_engine::{ApprovalError, Approver, Verdict};
use penguin_omni_protocol::{ApprovalDecision, ModelPayload, OmniMessage};

/// Forbidden command fragments for `exec_command`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandPolicy {
    forbidden: Vec<String>,
}

impl CommandPolicy {
    /// A policy forbidding every command that contains one of `fragments` (compared with runs
    /// of whitespace collapsed, so `rm  -rf /` matches `rm -rf /`).
    pub fn forbidding(fragments: impl IntoIterator<Item = impl Into<String>>) -> CommandPolicy {
        CommandPolicy {
            forbidden: fragments
                .into_iter()
                .map(|f| squash(&f.into()))
                .filter(|f| !f.is_empty())
                .collect(),
        }
    }

    /// True when the policy forbids nothing.
    pub fn is_empty(&self) -> bool {
        self.forbidden.is_empty()
    }

    /// The fragment that forbids this call, if any.
    pub fn veto(&self, call: &OmniMessage) -> Option<&str> {
        let Some(ModelPayload::ToolCall(c)) = call.model() else {
            return None;
        };
        if c.name != "exec_command" {
            return None;
        }
        let args: serde_json::Value = serde_json::from_str(&c.arguments).ok()?;
        let cmd = squash(args.get("cmd")?.as_str()?);
        self.forbidden
            .iter()
            .find(|f| cmd.contains(f.as_str()))
            .map(String::as_str)
    }

    /// Wraps `approver` with this policy: a vetoed command is `forbidden` before `approver`
    /// is asked.
    pub fn wrap(&self, approver: Arc<dyn Approver>) -> Arc<dyn Approver> {
        if self.is_empty() {
            return approver;
        }
        Arc::new(PolicyApprover {
            policy: self.clone(),
            host: approver,
        })
    }
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

struct PolicyApprover {
    policy: CommandPolicy,
    host: Arc<dyn Approver>,
}

#[async_trait]
impl Approver for PolicyApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        if self.policy.veto(call).is_some() {
            return Ok(ApprovalDecision::Forbidden);
        }
        self.host.approve(call).await
    }

    async fn verdict(&self, call: &OmniMessage) -> Result<Verdict, ApprovalError> {
        if self.policy.veto(call).is_some() {
            return Ok(ApprovalDecision::Forbidden.into());
        }
        // The host's whole answer: a hook behind the policy keeps its name and reason.
        self.host.verdict(call).await
    }

    async fn ask_person(
        &self,
        call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        if self.policy.veto(call).is_some() {
            return Some(Ok(ApprovalDecision::Forbidden));
        }
        self.host.ask_person(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    struct Yes;

    #[async_trait]
    impl Approver for Yes {
        async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
            Ok(ApprovalDecision::Allow)
        }
    }

    fn exec(cmd: &str) -> OmniMessage {
        build::tool_call(
            "exec_command",
            serde_json::json!({ "cmd": cmd }).to_string(),
            "c",
            StopReason::Completed,
            None,
        )
    }

    #[tokio::test]
    async fn vetoes_forbidden_commands_before_asking() {
        let policy = CommandPolicy::forbidding(["rm -rf /", "git push --force"]);
        let approver = policy.wrap(Arc::new(Yes));
        assert_eq!(
            approver.approve(&exec("sudo rm   -rf /")).await,
            Ok(ApprovalDecision::Forbidden)
        );
        assert_eq!(
            approver
                .approve(&exec("git push --force origin main"))
                .await,
            Ok(ApprovalDecision::Forbidden)
        );
        assert_eq!(
            approver.approve(&exec("ls -la")).await,
            Ok(ApprovalDecision::Allow)
        );
        let read = build::tool_call(
            "read_file",
            r#"{"path":"rm -rf /"}"#,
            "r",
            StopReason::Completed,
            None,
        );
        assert_eq!(
            approver.approve(&read).await,
            Ok(ApprovalDecision::Allow),
            "only commands are policed"
        );
        let yes: Arc<dyn Approver> = Arc::new(Yes);
        assert!(
            Arc::ptr_eq(&CommandPolicy::default().wrap(yes.clone()), &yes),
            "an empty policy changes nothing"
        );
    }
}
