//! Pending approvals (protocol [§5.6](penguin_omni_protocol::spec#s5.6) *Approvals*): the calls
//! waiting for a human, and one call's wait. The approver a served run uses, which registers them,
//! is `approver.rs`.

use std::sync::Mutex;

use penguin_omni_protocol::{ApprovalDecision, OmniMessage};
use penguin_sse_transport::{ApprovalRequest, ServerEvent};
use tokio::sync::oneshot;

use crate::sync::lock;

struct PendingApproval {
    tool_call_id: String,
    call: OmniMessage,
    tx: oneshot::Sender<ApprovalDecision>,
    /// What the call would change, shown at its question (see `Environment::preview`).
    preview: Option<String>,
    /// What "always" would allow, when it allows more than this call.
    always: Option<String>,
    // Whether its approval_request has been published (see `Entry::published_calls`).
    announced: bool,
}

/// Calls waiting for a human, in registration order, keyed by tool_call_id only
/// ([§5.6](penguin_omni_protocol::spec#s5.6) *Approvals*).
#[derive(Default)]
pub(crate) struct Approvals {
    pending: Mutex<Vec<PendingApproval>>,
}

impl Approvals {
    pub(crate) fn register(
        &self,
        call: OmniMessage,
        id: String,
        announced: bool,
        (preview, always): (Option<String>, Option<String>),
    ) -> oneshot::Receiver<ApprovalDecision> {
        let (tx, rx) = oneshot::channel();
        let mut p = lock(&self.pending);
        if let Some(pos) = p.iter().position(|a| a.tool_call_id == id) {
            let old = p.remove(pos);
            let _ = old.tx.send(ApprovalDecision::Deny);
        }
        p.push(PendingApproval {
            tool_call_id: id,
            call,
            tx,
            preview,
            always,
            announced,
        });
        rx
    }

    pub(crate) fn resolve(&self, id: &str, decision: ApprovalDecision) -> bool {
        let mut p = lock(&self.pending);
        match p.iter().position(|a| a.tool_call_id == id) {
            Some(pos) => {
                // A receiver dropped by an interrupted run still counts as answered.
                let _ = p.remove(pos).tx.send(decision);
                true
            }
            None => false,
        }
    }

    /// The request for `id`, when one waits.
    pub(crate) fn request(&self, id: &str) -> Option<ApprovalRequest> {
        lock(&self.pending)
            .iter()
            .find(|a| a.tool_call_id == id)
            .map(PendingApproval::request)
    }

    /// The pending call `id`, when one waits.
    pub(crate) fn call(&self, id: &str) -> Option<OmniMessage> {
        lock(&self.pending)
            .iter()
            .find(|a| a.tool_call_id == id)
            .map(|a| a.call.clone())
    }

    pub(crate) fn deny_all(&self) {
        for a in lock(&self.pending).drain(..) {
            let _ = a.tx.send(ApprovalDecision::Deny);
        }
    }

    /// Denies the requests of the session's own calls. A subagent's (with an origin) may
    /// belong to a background child that outlives the task: it waits for its human.
    pub(crate) fn deny_own(&self) {
        let own: Vec<PendingApproval> = {
            let mut p = lock(&self.pending);
            let (own, kept) = p.drain(..).partition(|a| !a.call.has_origin());
            *p = kept;
            own
        };
        for a in own {
            let _ = a.tx.send(ApprovalDecision::Deny);
        }
    }

    /// Registers `call` as [`register`](Self::register) does, and returns its wait.
    pub(crate) fn wait(
        &self,
        call: OmniMessage,
        id: String,
        announced: bool,
        offer: (Option<String>, Option<String>),
    ) -> Waiting<'_> {
        let rx = self.register(call, id.clone(), announced, offer);
        Waiting {
            approvals: self,
            id,
            rx,
        }
    }

    /// Takes `id`'s request off the list when nobody waits for its answer any more.
    fn forget_abandoned(&self, id: &str) {
        lock(&self.pending).retain(|a| !(a.tool_call_id == id && a.tx.is_closed()));
    }

    /// The announced requests, in registration order.
    pub(crate) fn requests(&self) -> Vec<ApprovalRequest> {
        lock(&self.pending)
            .iter()
            .filter(|a| a.announced)
            .map(PendingApproval::request)
            .collect()
    }

    /// Marks the request for `id` announced; returns it if it was registered and not
    /// announced yet.
    pub(crate) fn announce(&self, id: &str) -> Option<ApprovalRequest> {
        let mut p = lock(&self.pending);
        let a = p
            .iter_mut()
            .find(|a| a.tool_call_id == id && !a.announced)?;
        a.announced = true;
        Some(a.request())
    }
}

/// One call's wait for a human. Dropped unanswered (the waiting call was cancelled: a killed
/// background child, an interrupted run), it takes the request off the pending list, so no
/// client is later offered a call that nobody waits for.
pub(crate) struct Waiting<'a> {
    approvals: &'a Approvals,
    id: String,
    rx: oneshot::Receiver<ApprovalDecision>,
}

impl Waiting<'_> {
    pub(crate) async fn decision(mut self) -> ApprovalDecision {
        // A sender dropped without an answer (an abort, the end of the run) denies.
        (&mut self.rx).await.unwrap_or(ApprovalDecision::Deny)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.rx.close();
        self.approvals.forget_abandoned(&self.id);
    }
}

impl PendingApproval {
    fn request(&self) -> ApprovalRequest {
        ApprovalRequest {
            origin: self.call.origin.clone(),
            tool_call: self.call.clone(),
            preview: self.preview.clone(),
            always: self.always.clone(),
        }
    }
}

pub(crate) fn approval_request(request: ApprovalRequest) -> ServerEvent {
    ServerEvent::ApprovalRequest(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApprovalMode;
    use penguin_omni_protocol::{build, StopReason};

    fn call(id: &str) -> OmniMessage {
        build::tool_call("bash", "{}", id, StopReason::Completed, None)
    }

    #[test]
    fn approvals_resolve_once_and_re_registering_denies_the_old_wait() {
        let a = Approvals::default();
        let mut old = a.register(call("c1"), "c1".into(), false, (None, None));
        assert!(a.requests().is_empty(), "not announced yet");
        assert_eq!(
            a.announce("c1")
                .and_then(|r| r.tool_call.tool_call_id().map(str::to_owned)),
            Some("c1".into())
        );
        assert!(a.announce("c1").is_none(), "announced once");
        let mut new = a.register(call("c1"), "c1".into(), true, (None, None));
        assert_eq!(old.try_recv(), Ok(ApprovalDecision::Deny));
        let mut other = a.register(call("c2"), "c2".into(), true, (None, None));
        assert_eq!(a.requests().len(), 2);
        assert!(a.resolve("c1", ApprovalDecision::Allow));
        assert!(!a.resolve("c1", ApprovalDecision::Allow), "only once");
        assert_eq!(new.try_recv(), Ok(ApprovalDecision::Allow));
        a.deny_all();
        assert_eq!(other.try_recv(), Ok(ApprovalDecision::Deny));
        assert!(a.requests().is_empty());
    }

    #[tokio::test]
    async fn an_abandoned_wait_takes_its_request_off_the_list() {
        let a = Approvals::default();
        let rx = a.register(call("c1"), "c1".into(), true, (None, None));
        let kept = a.register(call("c2"), "c2".into(), true, (None, None));
        let waiting = Waiting {
            approvals: &a,
            id: "c1".into(),
            rx,
        };
        // The waiting call is cancelled (its future dropped) before anyone answers.
        let wait = tokio::time::timeout(std::time::Duration::ZERO, waiting.decision());
        assert!(wait.await.is_err());
        let ids: Vec<_> = a
            .requests()
            .iter()
            .filter_map(|c| c.tool_call.tool_call_id().map(str::to_owned))
            .collect();
        assert_eq!(ids, ["c2"], "the other wait is untouched");
        assert!(a.resolve("c2", ApprovalDecision::Allow));
        assert_eq!(kept.await, Ok(ApprovalDecision::Allow));

        // An answered wait leaves a re-registered request of the same call alone.
        let rx = a.register(call("c3"), "c3".into(), true, (None, None));
        assert!(a.resolve("c3", ApprovalDecision::Allow));
        let _again = a.register(call("c3"), "c3".into(), true, (None, None));
        let waiting = Waiting {
            approvals: &a,
            id: "c3".into(),
            rx,
        };
        assert_eq!(waiting.decision().await, ApprovalDecision::Allow);
        assert_eq!(a.requests().len(), 1);
    }

    #[test]
    fn modes_parse_strictly() {
        for m in ApprovalMode::ALL {
            assert_eq!(ApprovalMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(ApprovalMode::parse("Allow-All"), None);
    }
}
