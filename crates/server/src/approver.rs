//! The approver a served run uses (protocol [§5.6](penguin_omni_protocol::spec#s5.6) *Approvals*):
//! the session's approval mode, read at every call; a call the mode leaves to a human is registered
//! with the session's pending approvals, announced on its channel once the call itself was
//! published, and waited for.

use std::sync::Arc;

use async_trait::async_trait;
use penguin_engine::always::Scope;
use penguin_engine::{ApprovalError, Approver, Permission};
use penguin_omni_protocol::{ApprovalDecision, ModelPayload, OmniMessage};

use crate::api::ApprovalMode;
use crate::approvals::approval_request;
use crate::entry::Entry;
use crate::sessions::Sessions;
use crate::sync::lock;

/// The approver of one run: the session's mode, read at every call
/// ([§5.6](penguin_omni_protocol::spec#s5.6) *Approvals*).
pub(crate) struct ServerApprover {
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) entry: Arc<Entry>,
}

#[async_trait]
impl Approver for ServerApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        let mode = self.entry.rt().approval_mode;
        match mode {
            ApprovalMode::AllowAll => return Ok(ApprovalDecision::Allow),
            ApprovalMode::DenyAll => return Ok(ApprovalDecision::Deny),
            ApprovalMode::ReadOnly => {
                let name = match call.model() {
                    Some(ModelPayload::ToolCall(tc)) => tc.name.as_str(),
                    _ => "",
                };
                if self.entry.env.permission(name) == Permission::Read {
                    return Ok(ApprovalDecision::Allow);
                }
            }
            ApprovalMode::AlwaysAsk => {}
        }
        self.ask(call, true).await
    }

    async fn ask_person(
        &self,
        call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        // A hook asked: the session's clients answer whatever the mode, unless it denies
        // everything (the user's answer given beforehand). A served session always has
        // someone to ask: a client may come and answer at any time.
        if self.entry.rt().approval_mode == ApprovalMode::DenyAll {
            return Some(Ok(ApprovalDecision::Deny));
        }
        Some(self.ask(call, false).await)
    }
}

impl ServerApprover {
    /// Registers `call` with the session's pending approvals and waits for a client's answer;
    /// `always` lets an earlier "always" answer allow it unasked.
    async fn ask(
        &self,
        call: &OmniMessage,
        always: bool,
    ) -> Result<ApprovalDecision, ApprovalError> {
        let id = call
            .tool_call_id()
            .ok_or(ApprovalError::MissingToolCallId)?
            .to_owned();
        let scope = match call.model() {
            Some(ModelPayload::ToolCall(tc)) => {
                if always
                    && self
                        .entry
                        .rt()
                        .always
                        .iter()
                        .any(|s| s.covers(&tc.name, &tc.arguments))
                {
                    return Ok(ApprovalDecision::Allow);
                }
                Scope::for_call(&tc.name, &tc.arguments)
            }
            _ => None,
        };
        // Computed before the request is registered, so every client offered it sees it.
        let preview = match call.model() {
            Some(ModelPayload::ToolCall(tc)) => self.entry.env.preview(tc).await,
            _ => None,
        };
        let waiting = {
            // Registered and announced under the publish lock, so an abort (which denies under
            // the same lock) cannot slip in between.
            let _p = lock(&self.entry.publish);
            // A subagent's call (with an origin) is not on this session's own stream order
            // the same way; announce it at once.
            let shown = call.has_origin() || lock(&self.entry.published_calls).contains(&id);
            let offer = (preview, scope.map(|s| s.describe()));
            let waiting = self
                .entry
                .approvals
                .wait(call.clone(), id.clone(), shown, offer);
            if let Some(request) = shown.then(|| self.entry.approvals.request(&id)).flatten() {
                self.sessions
                    .channel(&self.entry.id)
                    .publish_server_event(&approval_request(request));
            }
            waiting
        };
        // No timeout: a human may take as long as they like.
        Ok(waiting.decision().await)
    }
}
