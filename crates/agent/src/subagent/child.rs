//! One managed child session: its rounds (the first from `run_subagent`, follow-ups from
//! `input_subagent`), what it produced that nobody has collected yet, and the approvals it
//! waits for.
//!
//! What a round produces goes to one of three places:
//! - its messages, origin-tagged: to the host live (a background launch), or into a buffer the
//!   next collect window forwards (4096 messages, the oldest dropped: only the display loses
//!   them, the child's own Trace keeps everything);
//! - its own answer text: into a text buffer (1 MiB, the oldest dropped with a marker) that
//!   becomes the output of whichever call collects it, or the tail of the completion report;
//! - its approval requests: into a queue that a sink answers one at a time: the approver of the
//!   call whose window is open, else the standing approver of a background launch. With
//!   neither, the child waits for the next window.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use penguin_engine::{
    ApprovalError, Approver, BackgroundForward, BackgroundListener, CancellationToken, DenyAll,
    Frame, RunOptions, ThinkingLevel, Verdict,
};
use penguin_omni_protocol::background::{
    report_label, report_tail, BackgroundKind, BackgroundTaskDone,
};
use penguin_omni_protocol::{
    ApprovalDecision, Body, EventPayload, ModelPayload, OmniMessage, Role, StopReason,
    StreamEventType,
};
use penguin_tools::CappedText;
use tokio::sync::{oneshot, Notify};

use crate::session::Session;

/// Messages a child keeps for the next collect window.
pub const MESSAGE_BUFFER_CAP: usize = 4096;
/// Bytes of uncollected answer text a child keeps.
pub const TEXT_BUFFER_CAP: usize = 1024 * 1024;
/// Chars of answer text a completion report carries.
const REPORT_OUTPUT_CAP: usize = 4000;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where a session's children report to; shared with every child, so a child winding down
/// never keeps the registry (whose end kills them all) alive.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) listener: Mutex<Option<BackgroundListener>>,
    pub(crate) forward: Mutex<Option<BackgroundForward>>,
}

/// How a round ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exit {
    pub(crate) completed: bool,
    pub(crate) note: Option<String>,
}

impl Exit {
    pub(crate) fn status(&self) -> StopReason {
        if self.completed {
            StopReason::Completed
        } else {
            StopReason::Failed
        }
    }

    fn failed(note: String) -> Exit {
        Exit {
            completed: false,
            note: Some(note),
        }
    }
}

struct PendingApproval {
    call: OmniMessage,
    // The whole verdict: a parent's hook that decided is named in the child's stream too.
    answer: Mutex<Option<oneshot::Sender<Verdict>>>,
    // Cancelled once answered, so a consultation still asking a human stops asking.
    settled: CancellationToken,
}

struct State {
    running: bool,
    exit: Option<Exit>,
    killed: bool,
    messages: VecDeque<OmniMessage>,
    text: CappedText,
    approvals: VecDeque<Arc<PendingApproval>>,
    window: Option<(u64, Arc<dyn Approver>)>,
    windows: u64,
    standing: Option<Arc<dyn Approver>>,
    asking: bool,
    live: bool,
    // The subagent id a completion report names, while the report is armed.
    report: Option<String>,
}

/// One child session and what it owes its parent.
pub(crate) struct Child {
    hop: String,
    label: String,
    meta: OmniMessage,
    // The child's own: only a kill (or the parent going away) ends it, never a parent's
    // interrupt of a later turn.
    cancel: CancellationToken,
    hooks: Arc<Hooks>,
    // One wake-up for everything a collect window waits on: a message, text, an approval
    // request, the end of a round.
    wake: Notify,
    session: Mutex<Option<Session>>,
    /// `run_subagent`'s `thinking_level`, for every round.
    thinking: std::sync::OnceLock<ThinkingLevel>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child")
            .field("hop", &self.hop)
            .finish_non_exhaustive()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(session) = lock(&self.session).take() {
            release(session);
        }
    }
}

/// Drops a session off the async workers: dropping one joins its trace writer thread.
fn release(session: Session) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(move || drop(session));
        }
        Err(_) => drop(session),
    }
}

impl Child {
    pub(crate) fn new(session: Session, prompt: &str, hooks: Arc<Hooks>) -> Arc<Child> {
        let hop = session.id().to_owned();
        let meta = session.meta().clone().with_origin(hop.clone());
        Arc::new(Child {
            hop,
            label: report_label(prompt),
            meta,
            cancel: CancellationToken::new(),
            hooks,
            wake: Notify::new(),
            session: Mutex::new(Some(session)),
            thinking: std::sync::OnceLock::new(),
            state: Mutex::new(State {
                running: false,
                exit: None,
                killed: false,
                messages: VecDeque::new(),
                text: CappedText::new(TEXT_BUFFER_CAP, "earlier subagent output"),
                approvals: VecDeque::new(),
                window: None,
                windows: 0,
                standing: None,
                asking: false,
                live: false,
                report: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The child session id: the origin hop of its messages.
    pub(crate) fn hop(&self) -> &str {
        &self.hop
    }

    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The child's `session_meta`, origin-tagged: the first message of its stream, from which
    /// the parent engine writes the `subagent` pointer.
    pub(crate) fn meta(&self) -> OmniMessage {
        self.meta.clone()
    }

    pub(crate) fn running(&self) -> bool {
        self.state().running
    }

    pub(crate) fn exit(&self) -> Option<Exit> {
        self.state().exit.clone()
    }

    /// Approval requests not answered yet.
    pub(crate) fn pending_approvals(&self) -> usize {
        self.state().approvals.len()
    }

    /// `[subagent is waiting for approval of N tool call(s); poll to review]`, when it is.
    pub(crate) fn approval_hint(&self) -> String {
        match self.pending_approvals() {
            0 => String::new(),
            n => format!(" [subagent is waiting for approval of {n} tool call(s); poll to review]"),
        }
    }

    pub(crate) fn has_pending(&self) -> bool {
        let st = self.state();
        !st.messages.is_empty() || !st.text.is_empty()
    }

    pub(crate) fn drain_messages(&self) -> Vec<OmniMessage> {
        self.state().messages.drain(..).collect()
    }

    pub(crate) fn drain_text(&self) -> String {
        self.state().text.drain()
    }

    /// A future that completes at the next wake-up; enable it before checking what to wait
    /// for, so nothing arriving in between is missed.
    pub(crate) fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }

    /// Sends every later message to the host as it comes (a background launch), after what is
    /// already buffered, in order.
    pub(crate) fn go_live(&self) {
        let backlog: Vec<OmniMessage> = {
            let mut st = self.state();
            st.live = true;
            st.messages.drain(..).collect()
        };
        for msg in backlog {
            self.deliver(msg);
        }
    }

    /// Arms the completion report: the end of every round sends one, named `id`, until
    /// disarmed or killed.
    pub(crate) fn arm_report(&self, id: String) {
        self.state().report = Some(id);
    }

    pub(crate) fn disarm_report(&self) {
        self.state().report = None;
    }

    /// Whether this child reports its rounds (it was launched in the background).
    pub(crate) fn reports(&self) -> bool {
        self.state().report.is_some()
    }

    /// The approver a background round asks when no window is open.
    pub(crate) fn set_standing(self: &Arc<Self>, approver: Option<Arc<dyn Approver>>) {
        self.state().standing = approver;
        self.ask();
    }

    /// Lets the open window's approver answer queued requests until the guard drops.
    pub(crate) fn attach_window(self: &Arc<Self>, approver: Arc<dyn Approver>) -> WindowGuard {
        let epoch = {
            let mut st = self.state();
            st.windows += 1;
            st.window = Some((st.windows, approver));
            st.windows
        };
        self.ask();
        WindowGuard {
            child: Arc::downgrade(self),
            epoch,
        }
    }

    /// Claims the next round: refused while one runs or after a kill.
    pub(crate) fn claim_round(&self) -> Result<(), String> {
        let mut st = self.state();
        if st.killed {
            return Err("subagent session disposed".into());
        }
        if st.running {
            return Err("subagent is still running".into());
        }
        st.running = true;
        st.exit = None;
        Ok(())
    }

    /// Pins the thinking level of every round of this child (`run_subagent`'s
    /// `thinking_level`); the first pin holds.
    pub(crate) fn pin_thinking(&self, level: ThinkingLevel) {
        let _ = self.thinking.set(level);
    }

    /// The pinned thinking level, when one was chosen at launch.
    pub(crate) fn thinking(&self) -> Option<ThinkingLevel> {
        self.thinking.get().copied()
    }

    /// Runs a claimed round with `input` (the prompt, without origin). `approver` absent: the
    /// child's calls are denied, as a parent without an approver would deny its own.
    pub(crate) fn launch(
        self: &Arc<Self>,
        input: OmniMessage,
        approver: bool,
        thinking_level: Option<ThinkingLevel>,
    ) {
        let approver: Arc<dyn Approver> = if approver {
            Arc::new(ChildApprover(Arc::downgrade(self)))
        } else {
            Arc::new(DenyAll)
        };
        let options = RunOptions::new(approver)
            .with_cancel(self.cancel.clone())
            .with_thinking_level(thinking_level);
        let started = match lock(&self.session).as_mut() {
            Some(session) => session.run(vec![input], options).map_err(|e| e.to_string()),
            None => Err("subagent session disposed".into()),
        };
        match started {
            Ok(stream) => {
                tokio::spawn(self.clone().pump(stream));
            }
            Err(e) => self.end_round(Exit::failed(format!("[subagent error: {e}]"))),
        }
    }

    async fn pump(self: Arc<Self>, mut stream: BoxStream<'static, Frame>) {
        let mut wrote = false;
        let mut aborted: Option<String> = None;
        while let Some(frame) = stream.next().await {
            let msg = frame.message();
            // The child's own layer (its grandchildren carry an origin already).
            if !msg.has_origin() {
                match &msg.body {
                    Body::Model(ModelPayload::PartialText(t)) if t.role == Role::Assistant => {
                        match t.event_type {
                            // Answers of separate turns read as paragraphs.
                            StreamEventType::Start if wrote => self.push_text("\n\n"),
                            StreamEventType::Delta if !t.text.is_empty() => {
                                wrote = true;
                                self.push_text(&t.text);
                            }
                            _ => {}
                        }
                    }
                    Body::Event(EventPayload::Abort { reason }) => {
                        aborted = Some(reason.clone().unwrap_or_else(|| "aborted".into()));
                    }
                    _ => {}
                }
            }
            self.deliver(msg.clone().with_origin(self.hop.clone()));
            self.wake.notify_waiters();
        }
        // A report or a poll may be read as soon as the round ends: its Trace is on disk
        // first. Flushing waits for the disk (fsync), so off the workers.
        let writer = lock(&self.session).as_ref().map(|s| s.writer().clone());
        if let Some(writer) = writer {
            match tokio::task::spawn_blocking(move || writer.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("subagent {}: trace flush failed: {e}", self.hop),
                Err(e) => tracing::warn!("subagent {}: trace flush task failed: {e}", self.hop),
            }
        }
        let exit = match aborted {
            Some(reason) => Exit::failed(format!("[subagent aborted: {reason}]")),
            None if !wrote => Exit {
                completed: true,
                note: Some("[subagent finished without a text answer]".into()),
            },
            None => Exit {
                completed: true,
                note: None,
            },
        };
        self.end_round(exit);
    }

    fn end_round(&self, exit: Exit) {
        let (report, released, leftover) = {
            let mut st = self.state();
            st.running = false;
            st.exit = Some(exit.clone());
            // The standing approver belongs to a round: holding it past its end would keep
            // the host's session alive through this child.
            st.standing = None;
            let report = if st.killed { None } else { st.report.clone() };
            let released = if st.killed {
                lock(&self.session).take()
            } else {
                None
            };
            (report, released, std::mem::take(&mut st.approvals))
        };
        // Requests of an interrupted run that nobody will wait for any more.
        for req in leftover {
            settle(&req, ApprovalDecision::Deny.into());
        }
        if let Some(session) = released {
            release(session);
        }
        self.wake.notify_waiters();
        let Some(id) = report else {
            return;
        };
        let listener = lock(&self.hooks.listener).clone();
        if let Some(listener) = listener {
            listener(BackgroundTaskDone {
                kind: BackgroundKind::Subagent,
                id,
                label: self.label.clone(),
                completed: exit.completed,
                detail: exit.note.unwrap_or_default(),
                output: report_tail(&self.drain_text(), REPORT_OUTPUT_CAP),
            });
        }
    }

    fn push_text(&self, text: &str) {
        self.state().text.push(text);
    }

    fn deliver(&self, msg: OmniMessage) {
        let forward = {
            let mut st = self.state();
            let forward = if st.live {
                lock(&self.hooks.forward).clone()
            } else {
                None
            };
            if forward.is_none() {
                st.messages.push_back(msg);
                if st.messages.len() > MESSAGE_BUFFER_CAP {
                    st.messages.pop_front();
                }
                return;
            }
            forward
        };
        if let Some(forward) = forward {
            forward(msg);
        }
    }

    /// Ends the child: aborts its round, denies what it waits for, and releases its session
    /// (now, or when the aborted round has wound down). A killed child reports nothing.
    pub(crate) fn kill(&self) {
        let (released, pending) = {
            let mut st = self.state();
            if st.killed {
                return;
            }
            st.killed = true;
            st.report = None;
            st.standing = None;
            st.window = None;
            let released = if st.running {
                None
            } else {
                lock(&self.session).take()
            };
            (released, std::mem::take(&mut st.approvals))
        };
        self.cancel.cancel();
        for req in pending {
            settle(&req, ApprovalDecision::Deny.into());
        }
        if let Some(session) = released {
            release(session);
        }
        self.wake.notify_waiters();
    }

    fn queue_approval(self: &Arc<Self>, call: OmniMessage) -> Option<oneshot::Receiver<Verdict>> {
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.state();
            if st.killed {
                return None;
            }
            st.approvals.push_back(Arc::new(PendingApproval {
                call,
                answer: Mutex::new(Some(tx)),
                settled: CancellationToken::new(),
            }));
        }
        self.wake.notify_waiters();
        self.ask();
        Some(rx)
    }

    fn answer(&self, req: &Arc<PendingApproval>, decision: Verdict) {
        self.state().approvals.retain(|r| !Arc::ptr_eq(r, req));
        settle(req, decision);
        self.wake.notify_waiters();
    }

    /// Starts asking, one request at a time, when there is a request and someone to ask.
    fn ask(self: &Arc<Self>) {
        {
            let mut st = self.state();
            if st.asking
                || st.approvals.is_empty()
                || (st.window.is_none() && st.standing.is_none())
            {
                return;
            }
            st.asking = true;
        }
        tokio::spawn(self.clone().ask_each());
    }

    async fn ask_each(self: Arc<Self>) {
        loop {
            let next = {
                let mut st = self.state();
                let sink = st
                    .window
                    .as_ref()
                    .map(|(_, a)| a.clone())
                    .or_else(|| st.standing.clone());
                match (st.approvals.front().cloned(), sink) {
                    (Some(req), Some(sink)) => (req, sink),
                    _ => {
                        st.asking = false;
                        return;
                    }
                }
            };
            let (req, sink) = next;
            // Once asked, a request is answered by whoever was asked, even after that
            // window closed: a late decision still counts, and nobody is asked twice.
            let decision = tokio::select! {
                d = sink.verdict(&req.call) => d.unwrap_or_else(|e| {
                    tracing::warn!("subagent {}: approval failed, denying: {e}", self.hop);
                    ApprovalDecision::Deny.into()
                }),
                () = req.settled.cancelled() => continue,
            };
            self.answer(&req, decision);
        }
    }
}

fn settle(req: &PendingApproval, decision: Verdict) {
    if let Some(tx) = lock(&req.answer).take() {
        let _ = tx.send(decision);
    }
    req.settled.cancel();
}

/// Detaches a window's approver when the window ends (unless a later window replaced it).
pub(crate) struct WindowGuard {
    child: Weak<Child>,
    epoch: u64,
}

impl Drop for WindowGuard {
    fn drop(&mut self) {
        if let Some(child) = self.child.upgrade() {
            let mut st = child.state();
            if st.window.as_ref().is_some_and(|(e, _)| *e == self.epoch) {
                st.window = None;
            }
        }
    }
}

/// The child's approver: queues each call, origin-tagged, for the parent's sinks.
struct ChildApprover(Weak<Child>);

#[async_trait]
impl Approver for ChildApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        self.verdict(call).await.map(|v| v.decision)
    }

    async fn verdict(&self, call: &OmniMessage) -> Result<Verdict, ApprovalError> {
        let rx = match self.0.upgrade() {
            Some(child) => child.queue_approval(call.clone().with_origin(child.hop.clone())),
            None => None,
        };
        let denied = || Verdict::from(ApprovalDecision::Deny);
        Ok(match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| denied()),
            None => denied(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_buffer_names_subagent_output_when_it_drops() {
        let mut b = CappedText::new(4, "earlier subagent output");
        b.push("ab");
        b.push("cdéf");
        assert_eq!(
            b.drain(),
            "[... 3 bytes of earlier subagent output dropped ...]\ndéf"
        );
        assert!(b.is_empty());
    }
}
