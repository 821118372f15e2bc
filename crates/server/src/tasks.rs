//! Driving tasks (protocol [§5.5](penguin_omni_protocol::spec#s5.5) *Running a task: the publish
//! pipeline*): starting a run or a compaction, pumping its frames to the session channel, settling
//! the session when it ends, follow-ups, abort and retry-now.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use penguin_engine::{CancellationToken, Compactability, EngineBusy, RunOptions, ThinkingLevel};
use penguin_omni_protocol::{ApprovalDecision, Frame, ModelPayload, OmniMessage};
use penguin_sse_transport::{PendingInput, ServerEvent, SessionStatus};

use crate::approvals::approval_request;
use crate::approver::ServerApprover;
use crate::entry::{now_iso, random_id, Entry, FollowUp};
use crate::error::ApiError;
use crate::sessions::{Sessions, USER_CHANNEL};
use crate::sync::lock;

/// A task's input as `POST /tasks` gives it.
pub(crate) struct TaskInput {
    pub(crate) messages: Vec<OmniMessage>,
    pub(crate) thinking: Option<ThinkingLevel>,
    /// The follow-up mirror's text and image count.
    pub(crate) text: String,
    pub(crate) images: u32,
    /// `goal: {budget?}`: run it in goal mode, with this token budget (`None`: unlimited).
    pub(crate) goal: Option<Option<u64>>,
}

impl Sessions {
    /// Announces the session's state on its channel and the user channel. The caller holds
    /// `entry.publish`.
    pub(crate) fn publish_state_locked(&self, entry: &Entry) {
        let (ts, state, last, has_trace) = {
            let rt = entry.rt();
            (
                rt.task_state(),
                rt.status,
                rt.last_active_at.clone(),
                rt.has_trace(),
            )
        };
        entry.status_tx.send_replace(state);
        self.channel(&entry.id)
            .publish_server_event(&ServerEvent::TaskState(ts));
        self.channel(USER_CHANNEL)
            .publish_server_event(&ServerEvent::SessionState {
                session_id: entry.id.clone(),
                state,
                last_active_at: last,
                has_trace,
            });
        if let Some(c) = &self.cfg.cluster {
            c.changed(&entry.id);
        }
    }

    /// A session without a title is named by its first prompt (the trace store's
    /// `session_title` rule, as `penguin sessions` names it). The caller holds `entry.publish`.
    fn name_by_first_prompt_locked(&self, entry: &Entry, text: &str) {
        let title = {
            let mut rt = entry.rt();
            if rt.first_prompt.is_some() || text.trim().is_empty() {
                return;
            }
            let title = penguin_trace_store::session_title(text);
            rt.first_prompt = Some(title.clone());
            if rt.title.is_some() {
                return;
            }
            title
        };
        // On the user channel only: the lists show it, and a session's own stream stays as
        // the reference's (its page reads the title with the session's state).
        self.channel(USER_CHANNEL)
            .publish_server_event(&ServerEvent::SessionTitle {
                session_id: entry.id.clone(),
                title,
            });
    }

    /// Republishes `task_state` alone (a queue changed). The caller holds `entry.publish`.
    pub(crate) fn publish_task_state_locked(&self, entry: &Entry) {
        let ts = entry.rt().task_state();
        self.channel(&entry.id)
            .publish_server_event(&ServerEvent::TaskState(ts));
        if let Some(c) = &self.cfg.cluster {
            c.changed(&entry.id);
        }
    }

    /// `POST /tasks`: starts a run, or queues a follow-up when busy and `queue_if_busy`.
    /// Returns whether the input was queued.
    pub(crate) fn submit(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        task: TaskInput,
        queue_if_busy: bool,
    ) -> Result<bool, ApiError> {
        let _p = lock(&entry.publish);
        {
            let mut rt = entry.rt();
            if rt.deleted {
                return Err(ApiError::session_not_found(&entry.id));
            }
            match rt.status {
                SessionStatus::Idle => {}
                busy if task.goal.is_some() => return Err(busy_error(busy)),
                _ if queue_if_busy => {
                    let queued = rt.follow_ups.len();
                    rt.admit_pending(queued, task.text.len())?;
                    rt.follow_ups.push_back(FollowUp {
                        mirror: PendingInput {
                            id: random_id(),
                            text: task.text,
                            images: task.images,
                            files: 0,
                        },
                        input: task.messages,
                        thinking: task.thinking,
                    });
                    drop(rt);
                    self.publish_task_state_locked(entry);
                    return Ok(true);
                }
                busy => return Err(busy_error(busy)),
            }
        }
        self.name_by_first_prompt_locked(entry, &task.text);
        match task.goal {
            Some(budget) => self.begin_goal_locked(entry, task.messages, task.thinking, budget)?,
            None => self.begin_run_locked(entry, task.messages, task.thinking)?,
        }
        Ok(false)
    }

    /// `POST /compact`: compacts an idle session's context as its own task
    /// ([§5.5](penguin_omni_protocol::spec#s5.5) *Running a task*).
    pub(crate) fn compact(self: &Arc<Self>, entry: &Arc<Entry>) -> Result<(), ApiError> {
        let _p = lock(&entry.publish);
        {
            let rt = entry.rt();
            if rt.deleted {
                return Err(ApiError::session_not_found(&entry.id));
            }
            match rt.status {
                SessionStatus::Idle => {}
                busy => return Err(busy_error(busy)),
            }
        }
        let availability = entry.session().engine().compactability();
        if availability != Compactability::Ok {
            let message = match availability {
                Compactability::Unsupported => {
                    "compaction is not configured for this session's model"
                }
                Compactability::JustCompacted => {
                    "the context was just compacted; nothing has run since"
                }
                _ => "nothing has run in this context yet",
            };
            return Err(ApiError::conflict(availability.code(), message));
        }
        let cancel = CancellationToken::new();
        {
            let mut rt = entry.rt();
            rt.status = SessionStatus::Compacting;
            rt.cancel = Some(cancel.clone());
            rt.last_active_at = now_iso();
        }
        self.publish_state_locked(entry);
        let started = entry.session().compact(cancel);
        self.drive(entry, started)
    }

    /// Starts a run. The caller holds `entry.publish` and has checked the session is idle.
    fn begin_run_locked(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        input: Vec<OmniMessage>,
        thinking: Option<ThinkingLevel>,
    ) -> Result<(), ApiError> {
        let frames: Vec<Frame> = input.iter().cloned().map(Frame::new).collect();
        entry.rt().pending_inputs.extend(frames.iter().cloned());
        let options = self.mark_running_locked(entry, thinking, false);
        // The engine never echoes its input: the server is the one that shows it.
        let channel = self.channel(&entry.id);
        for f in &frames {
            channel.publish_message(f);
        }
        self.publish_state_locked(entry);
        let started = entry.session().run(input, options);
        self.drive(entry, started)
    }

    /// The session's state as a task (or a goal) starts, and the options it runs with: its
    /// cancel token and the server's approver. The caller holds `entry.publish`.
    fn mark_running_locked(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        thinking: Option<ThinkingLevel>,
        goal: bool,
    ) -> RunOptions {
        let cancel = CancellationToken::new();
        {
            let mut rt = entry.rt();
            rt.status = SessionStatus::Running;
            rt.cancel = Some(cancel.clone());
            rt.pending_bootstrap.clear();
            rt.last_active_at = now_iso();
            rt.has_trace = true;
            rt.goal_run = goal;
        }
        lock(&entry.published_calls).clear();
        RunOptions::new(Arc::new(ServerApprover {
            sessions: self.clone(),
            entry: entry.clone(),
        }))
        .with_cancel(cancel)
        .with_thinking_level(thinking)
    }

    /// Starts a goal: as a run, except that the goal loop streams each round's input itself
    /// (so none is published or held here), and the session's goal state is published as it
    /// changes. A refused objective puts the session back to idle with a 400.
    fn begin_goal_locked(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        input: Vec<OmniMessage>,
        thinking: Option<ThinkingLevel>,
        budget: Option<u64>,
    ) -> Result<(), ApiError> {
        let options = self.mark_running_locked(entry, thinking, true);
        let started = entry.session().run_goal(input, budget, options);
        let started = match started {
            Ok(stream) => Ok(stream),
            Err(crate::host::GoalRefusal::Busy(busy)) => Err(busy),
            Err(refused) => {
                {
                    let mut rt = entry.rt();
                    rt.status = SessionStatus::Idle;
                    rt.cancel = None;
                    rt.goal_run = false;
                }
                return Err(match refused {
                    crate::host::GoalRefusal::Unsupported => {
                        ApiError::bad_request("goal_unsupported", refused.to_string())
                    }
                    other => ApiError::field("input", &other.to_string()),
                });
            }
        };
        self.publish_state_locked(entry);
        self.publish_goal_locked(entry);
        self.drive(entry, started)
    }

    /// Publishes `goal_state` when the session's goal changed since it was last published.
    /// The caller holds `entry.publish`.
    pub(crate) fn publish_goal_locked(&self, entry: &Entry) {
        let Some(goal) = entry.session().goal() else {
            return;
        };
        {
            let mut rt = entry.rt();
            if rt.published_goal.as_ref() == Some(&goal) {
                return;
            }
            rt.published_goal = Some(goal.clone());
        }
        self.channel(&entry.id)
            .publish_server_event(&ServerEvent::GoalState { goal });
    }

    /// Pumps a started task (a run or a compaction) to the channel and settles the session
    /// when it ends; a refused start puts the session back to idle.
    fn drive(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        started: Result<BoxStream<'static, Frame>, EngineBusy>,
    ) -> Result<(), ApiError> {
        match started {
            Ok(stream) => {
                let (sessions, entry) = (self.clone(), entry.clone());
                tokio::spawn(async move {
                    // Whatever happens while pumping, the session must settle back to idle
                    // (or it would refuse every later task).
                    let pumped = AssertUnwindSafe(sessions.pump(&entry, stream))
                        .catch_unwind()
                        .await;
                    if pumped.is_err() {
                        tracing::error!(
                            "[server] the drive of session {} panicked; settling it",
                            entry.id
                        );
                    }
                    // Everything the task recorded has been tried before it counts as ended,
                    // so a lost record is known when the session settles.
                    let writer = entry.session().writer().clone();
                    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || writer.flush()).await {
                        tracing::warn!("[server] session {}: trace flush failed: {e}", entry.id);
                    }
                    sessions.settle(&entry);
                    drop(entry);
                    sessions.unload_idle();
                });
                Ok(())
            }
            Err(busy) => {
                {
                    let mut rt = entry.rt();
                    rt.status = SessionStatus::Idle;
                    rt.cancel = None;
                }
                self.publish_state_locked(entry);
                Err(ApiError::conflict("task_in_progress", busy.to_string()))
            }
        }
    }

    /// Publishes every frame of a run ([§5.5](penguin_omni_protocol::spec#s5.5) *Running a task*,
    /// pumping).
    async fn pump(&self, entry: &Entry, mut stream: BoxStream<'static, Frame>) {
        while let Some(frame) = stream.next().await {
            let _p = lock(&entry.publish);
            let steering_delivered = entry.rt().observe(frame.message());
            let channel = self.channel(&entry.id);
            channel.publish_message(&frame);
            if let Some(ModelPayload::ToolCall(tc)) = frame.message().model() {
                if !frame.message().has_origin() {
                    lock(&entry.published_calls).insert(tc.tool_call_id.clone());
                }
                if let Some(call) = entry.approvals.announce(&tc.tool_call_id) {
                    channel.publish_server_event(&approval_request(call));
                }
            }
            if steering_delivered {
                self.publish_task_state_locked(entry);
            }
            // A goal's state moves at its round boundaries and its end: complete messages.
            if entry.rt().goal_run && !frame.message().is_partial() {
                self.publish_goal_locked(entry);
            }
        }
    }

    /// Publishes a live message of the session's background work (a background subagent's
    /// stream) on its channel: no run carries it, and the Trace never holds it.
    pub(crate) fn publish_background(&self, entry: &Entry, msg: OmniMessage) {
        let _p = lock(&entry.publish);
        if entry.rt().deleted {
            return;
        }
        self.channel(&entry.id).publish_message(&Frame::new(msg));
    }

    /// The end of a run ([§5.5](penguin_omni_protocol::spec#s5.5) *Running a task*, settling):
    /// clear the live tail, deny what of the run is still pending, go idle, announce it, and start
    /// the next follow-up.
    fn settle(self: &Arc<Self>, entry: &Arc<Entry>) {
        {
            let _p = lock(&entry.publish);
            self.channel(&entry.id).clear_live_tail();
            self.report_trace_failures_locked(entry);
            entry.approvals.deny_own();
            {
                let mut rt = entry.rt();
                rt.status = SessionStatus::Idle;
                rt.cancel = None;
                rt.steering.clear();
                rt.last_active_at = now_iso();
            }
            if std::mem::take(&mut entry.rt().goal_run) {
                self.publish_goal_locked(entry);
            }
            self.publish_state_locked(entry);
        }
        self.start_next_follow_up(entry);
    }

    /// Says so (log, session channel, user channel) when the task lost trace records: the
    /// stream alone would look like a clean completion.
    fn report_trace_failures_locked(&self, entry: &Entry) {
        let failed = entry.session().writer().failed_writes();
        let before = entry.reported_failures.swap(failed, Ordering::Relaxed);
        if failed <= before {
            return;
        }
        let message = format!(
            "{} trace record(s) of this session could not be written (see the server log); its history and a resume will miss them",
            failed - before
        );
        tracing::error!("[server] session {}: {message}", entry.id);
        let ev = ServerEvent::TraceWriteFailed {
            session_id: entry.id.clone(),
            failed_records: failed,
            message,
        };
        self.channel(&entry.id).publish_server_event(&ev);
        self.channel(USER_CHANNEL).publish_server_event(&ev);
    }

    /// Starts a task carrying the background notices an idle session holds
    /// ([§2.11](penguin_omni_protocol::spec#s2.11) *Steering and notices*): the model reacts to the
    /// report with nobody asking. A running task delivers them itself.
    pub(crate) fn start_notices(self: &Arc<Self>, entry: &Arc<Entry>) {
        let _p = lock(&entry.publish);
        self.start_notices_locked(entry);
    }

    /// [`start_notices`](Self::start_notices); the caller holds `entry.publish`.
    fn start_notices_locked(self: &Arc<Self>, entry: &Arc<Entry>) {
        {
            let rt = entry.rt();
            if rt.status != SessionStatus::Idle || rt.deleted || !rt.follow_ups.is_empty() {
                return;
            }
        }
        let notices = entry.session().engine().take_notices();
        if notices.is_empty() {
            return;
        }
        if let Err(e) = self.begin_run_locked(entry, notices, None) {
            tracing::warn!(
                "[server] session {}: could not start a task for a background notice: {}",
                entry.id,
                e.message
            );
        }
    }

    fn start_next_follow_up(self: &Arc<Self>, entry: &Arc<Entry>) {
        let _p = lock(&entry.publish);
        let next = {
            let mut rt = entry.rt();
            if rt.status != SessionStatus::Idle || rt.deleted {
                return;
            }
            rt.follow_ups.pop_front()
        };
        let Some(f) = next else {
            // Nothing the user queued: a notice that came as the task ended goes next.
            self.start_notices_locked(entry);
            return;
        };
        let kept = FollowUp {
            mirror: f.mirror.clone(),
            input: f.input.clone(),
            thinking: f.thinking,
        };
        if let Err(e) = self.begin_run_locked(entry, f.input, f.thinking) {
            // Keep it at the head of the queue: the next settle starts it.
            entry.rt().follow_ups.push_front(kept);
            tracing::warn!(
                "[server] follow-up of session {} could not start yet: {}",
                entry.id,
                e.message
            );
        }
    }

    /// `POST /abort`: true when a run was interrupted. Pending approvals are denied first, so
    /// the engine sees the interrupt when their await returns and records no decision for them.
    pub(crate) fn abort(&self, entry: &Entry) -> bool {
        let _p = lock(&entry.publish);
        let cancel = entry.rt().cancel.clone();
        match cancel {
            Some(c) => {
                entry.approvals.deny_all();
                c.cancel();
                true
            }
            None => false,
        }
    }

    /// `POST /retry-now`: whether a reconnect wait was cut short.
    pub(crate) fn retry_now(&self, entry: &Entry) -> bool {
        if entry.rt().status == SessionStatus::Idle {
            return false;
        }
        entry.session().engine().skip_reconnect_wait()
    }

    /// `POST /approvals/:toolCallId`.
    pub(crate) fn decide(&self, entry: &Entry, id: &str, decision: ApprovalDecision) -> bool {
        entry.approvals.resolve(id, decision)
    }

    /// Lets the pending call `id` run outside the sandbox once it is allowed (nothing to grant
    /// when no call `id` is pending: deciding it then answers not found).
    /// `allow_always` for the pending call `id`: from now on the calls its scope covers run
    /// unasked (a call whose "always" grants nothing more is allowed once).
    pub(crate) fn allow_always(&self, entry: &Entry, id: &str) {
        let Some(call) = entry.approvals.call(id) else {
            return;
        };
        if let Some(ModelPayload::ToolCall(tc)) = call.model() {
            if let Some(scope) = penguin_engine::always::Scope::for_call(&tc.name, &tc.arguments) {
                let mut rt = entry.rt();
                if !rt.always.contains(&scope) {
                    rt.always.push(scope);
                }
            }
        }
    }

    pub(crate) fn grant_unsandboxed(&self, entry: &Entry, id: &str) -> Result<(), ApiError> {
        let Some(call) = entry.approvals.call(id) else {
            return Ok(());
        };
        match call.model() {
            Some(ModelPayload::ToolCall(tc)) if entry.env.grant_unsandboxed(tc) => Ok(()),
            _ => Err(ApiError::conflict(
                "not_sandboxed",
                format!("tool call {id:?} cannot run outside a sandbox: the session's commands run unsandboxed, or it is not a command"),
            )),
        }
    }
}

/// The 409 a busy session answers new input with ([§5.4](penguin_omni_protocol::spec#s5.4) *Session
/// state and concurrency*).
pub(crate) fn busy_error(status: SessionStatus) -> ApiError {
    match status {
        SessionStatus::Compacting => ApiError::conflict(
            "compacting",
            "This Session is compacting its context; not accepting new input.",
        ),
        _ => ApiError::conflict(
            "task_in_progress",
            "This Session already has a Task in progress.",
        ),
    }
}
