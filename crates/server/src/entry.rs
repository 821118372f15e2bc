//! One hosted session's state: its engine, what it is doing, what waits for it, and the bookkeeping
//! the publish pipeline does on every frame (protocol [§5.5](penguin_omni_protocol::spec#s5.5)
//! *Running a task: the publish pipeline*).
//!
//! Lock discipline (the channel's `connect` builds its snapshot under the channel lock, reading
//! an entry's runtime and approvals):
//! - `Entry::publish` serializes everything published to a session channel, together with the
//!   state change it announces, so `task_state` events can never overtake each other;
//! - the runtime and approval mutexes are never held while taking the channel lock, so
//!   `publish → channel` and `channel → runtime/approvals` cannot deadlock;
//! - none of these std mutexes is held across an `.await`.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use penguin_engine::{CancellationToken, Environment, SteerId, ThinkingLevel};
use penguin_omni_protocol::{Frame, ModelPayload, OmniMessage, Role, SessionMeta};
use penguin_sse_transport::{PendingInput, ServerEvent, SessionStatus, TaskState};
use tokio::sync::watch;

use axum::http::StatusCode;

use crate::api::{ApprovalMode, SessionInfo};
use crate::approvals::{approval_request, Approvals};
use crate::error::ApiError;
use crate::host::HostedSession;
use crate::sync::lock;

pub(crate) fn now_iso() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

pub(crate) fn random_id() -> String {
    let b: [u8; 16] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Steering inputs, and separately follow-ups, a session may hold at once.
pub(crate) const MAX_PENDING_INPUTS: usize = 32;

/// Bytes of text all pending inputs of a session may hold together.
pub(crate) const MAX_PENDING_BYTES: usize = 1024 * 1024;

pub(crate) struct FollowUp {
    pub(crate) mirror: PendingInput,
    pub(crate) input: Vec<OmniMessage>,
    pub(crate) thinking: Option<ThinkingLevel>,
}

pub(crate) struct Runtime {
    pub(crate) status: SessionStatus,
    pub(crate) cancel: Option<CancellationToken>,
    // Kept past the end of a run: a run aborted during bootstrap wrote nothing, so these are
    // its only record (protocol §5.5, settling).
    pub(crate) pending_inputs: Vec<Frame>,
    pub(crate) pending_bootstrap: Vec<Frame>,
    pub(crate) follow_ups: VecDeque<FollowUp>,
    pub(crate) steering: VecDeque<(PendingInput, SteerId)>,
    pub(crate) approval_mode: ApprovalMode,
    pub(crate) title: Option<String>,
    /// The session's first prompt by the one title rule: its title until one is given.
    pub(crate) first_prompt: Option<String>,
    /// The configured name of its model (see `Settings::model_name`).
    pub(crate) model_name: Option<String>,
    /// Its marks (see `Settings::archived`, `Settings::pinned`).
    pub(crate) archived: bool,
    pub(crate) pinned: bool,
    /// What `allow_always` answers allowed: later calls they cover run unasked (this load).
    pub(crate) always: Vec<penguin_engine::always::Scope>,
    /// The running task is a goal (its state is published as it changes).
    pub(crate) goal_run: bool,
    /// The goal state last published as `goal_state`.
    pub(crate) published_goal: Option<serde_json::Value>,
    /// The model's latest plan, and the `update_plan` calls whose outputs have not come yet.
    pub(crate) plan: Option<serde_json::Value>,
    pub(crate) plan_calls: std::collections::HashMap<String, serde_json::Value>,
    pub(crate) created_at: String,
    pub(crate) last_active_at: String,
    pub(crate) has_trace: bool,
    pub(crate) deleted: bool,
}

impl Runtime {
    pub(crate) fn new(approval_mode: ApprovalMode, title: Option<String>, has_trace: bool) -> Self {
        let now = now_iso();
        Runtime {
            status: SessionStatus::Idle,
            cancel: None,
            pending_inputs: Vec::new(),
            pending_bootstrap: Vec::new(),
            follow_ups: VecDeque::new(),
            steering: VecDeque::new(),
            approval_mode,
            title,
            first_prompt: None,
            model_name: None,
            archived: false,
            pinned: false,
            always: Vec::new(),
            goal_run: false,
            published_goal: None,
            plan: None,
            plan_calls: Default::default(),
            created_at: now.clone(),
            last_active_at: now,
            has_trace,
            deleted: false,
        }
    }

    pub(crate) fn task_state(&self) -> TaskState {
        let list = |v: Vec<PendingInput>| (!v.is_empty()).then_some(v);
        TaskState {
            state: self.status,
            queued: Some(u32::try_from(self.follow_ups.len()).unwrap_or(u32::MAX)),
            pending_steering: list(self.steering.iter().map(|(p, _)| p.clone()).collect()),
            pending_follow_ups: list(self.follow_ups.iter().map(|f| f.mirror.clone()).collect()),
        }
    }

    /// Refuses one more pending input (steering or follow-up) of `bytes` when the session
    /// already holds the most it may: each one is republished in every `task_state`.
    pub(crate) fn admit_pending(&self, queue_len: usize, bytes: usize) -> Result<(), ApiError> {
        if queue_len >= MAX_PENDING_INPUTS {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_pending",
                format!(
                    "this session already holds {MAX_PENDING_INPUTS} pending inputs of this kind; wait for the task to take them, or recall some"
                ),
            ));
        }
        let held: usize = self
            .steering
            .iter()
            .map(|(p, _)| p.text.len())
            .chain(self.follow_ups.iter().map(|f| f.mirror.text.len()))
            .sum();
        if held + bytes > MAX_PENDING_BYTES {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "pending_too_large",
                format!(
                    "pending inputs of this session would exceed {} KiB ({held} bytes held, {bytes} more asked)",
                    MAX_PENDING_BYTES / 1024
                ),
            ));
        }
        Ok(())
    }

    /// Whether the session has written (or is writing) anything.
    pub(crate) fn has_trace(&self) -> bool {
        self.has_trace || self.status != SessionStatus::Idle
    }

    /// Parent-level bookkeeping of one drive message ([§5.5](penguin_omni_protocol::spec#s5.5)
    /// *Running a task*, pumping step 1). Returns true when it was a delivered steering message
    /// (the mirror shifted).
    pub(crate) fn observe(&mut self, msg: &OmniMessage) -> bool {
        if msg.has_origin() {
            return false;
        }
        match msg.payload_type() {
            "tool_list_ready" | "mcp_connect_begin" | "mcp_connect_end" => {
                self.pending_bootstrap.push(Frame::new(msg.clone()));
                false
            }
            "request_begin" => {
                // The engine has written the input and the bootstrap records by now.
                self.pending_inputs.clear();
                self.pending_bootstrap.clear();
                false
            }
            _ => match msg.model() {
                Some(ModelPayload::Text(t))
                    if t.role == Role::User && t.text.starts_with("[user_steering]") =>
                {
                    self.steering.pop_front().is_some()
                }
                Some(p) => {
                    plan_of(&mut self.plan_calls, &mut self.plan, p);
                    false
                }
                _ => false,
            },
        }
    }
}

/// Follows the model's plan: an `update_plan` call's arguments become the plan once its
/// output completes (a refused or failed update leaves the plan as it was).
pub(crate) fn plan_of(
    calls: &mut std::collections::HashMap<String, serde_json::Value>,
    plan: &mut Option<serde_json::Value>,
    p: &ModelPayload,
) {
    match p {
        ModelPayload::ToolCall(tc) if tc.name == "update_plan" => {
            if let Ok(args) = serde_json::from_str::<serde_json::Value>(&tc.arguments) {
                calls.insert(tc.tool_call_id.clone(), args);
            }
        }
        ModelPayload::ToolCallOutput(out) => {
            if let Some(args) = calls.remove(&out.tool_call_id) {
                // A refused update (bad arguments) fails its call.
                let completed = out
                    .stop_reason
                    .is_none_or(|s| s == penguin_omni_protocol::StopReason::Completed);
                if completed {
                    *plan = Some(args);
                }
            }
        }
        _ => {}
    }
}

/// One hosted session.
pub(crate) struct Entry {
    pub(crate) id: String,
    pub(crate) meta: SessionMeta,
    pub(crate) session: Mutex<Box<dyn HostedSession>>,
    pub(crate) env: Arc<dyn Environment>,
    pub(crate) rt: Mutex<Runtime>,
    pub(crate) approvals: Approvals,
    pub(crate) publish: Mutex<()>,
    pub(crate) status_tx: watch::Sender<SessionStatus>,
    // Tool calls of the current run already published on the channel. The engine asks for
    // approval as soon as a call enters its queue, which can be before the drive has published
    // that call; the approval_request is held back until then, so clients always see a call
    // before its request.
    pub(crate) published_calls: Mutex<HashSet<String>>,
    // When a request last used it (the registry's logical clock): idle sessions are unloaded
    // least recently used first.
    pub(crate) touched: AtomicU64,
    // Trace write failures already announced, so each loss is announced once.
    pub(crate) reported_failures: AtomicU64,
}

impl Entry {
    pub(crate) fn new(session: Box<dyn HostedSession>, rt: Runtime) -> Entry {
        Entry {
            id: session.id().to_owned(),
            meta: session.meta().clone(),
            env: session.environment(),
            session: Mutex::new(session),
            rt: Mutex::new(rt),
            approvals: Approvals::default(),
            publish: Mutex::new(()),
            status_tx: watch::Sender::new(SessionStatus::Idle),
            published_calls: Mutex::new(HashSet::new()),
            touched: AtomicU64::new(0),
            reported_failures: AtomicU64::new(0),
        }
    }

    pub(crate) fn rt(&self) -> MutexGuard<'_, Runtime> {
        lock(&self.rt)
    }

    pub(crate) fn session(&self) -> MutexGuard<'_, Box<dyn HostedSession>> {
        lock(&self.session)
    }

    /// Whether the session can leave memory without losing anything: it has a trace to be
    /// loaded again from, and nothing runs, waits or is queued in it.
    pub(crate) fn unloadable(&self) -> bool {
        let idle = {
            let rt = self.rt();
            // A session that never ran has no trace yet: unloading writes its session_meta
            // first (`Sessions::unload_idle`), so it can be loaded again.
            rt.status == SessionStatus::Idle
                && !rt.deleted
                && rt.follow_ups.is_empty()
                && rt.pending_inputs.is_empty()
        };
        // Unloading ends a session's background work: a dev server keeps its session loaded.
        idle && self.approvals.requests().is_empty()
            && self
                .env
                .background()
                .is_none_or(|b| b.tasks().iter().all(|t| !t.running))
    }

    /// The session as the API shows it.
    pub(crate) fn info(&self) -> SessionInfo {
        let (failures, sandbox) = {
            let session = self.session();
            (session.writer().failed_writes(), session.sandbox())
        };
        let rt = self.rt();
        SessionInfo {
            id: self.id.clone(),
            title: rt.title.clone().or_else(|| rt.first_prompt.clone()),
            approval_mode: rt.approval_mode,
            state: rt.status,
            queued: rt.follow_ups.len(),
            provider: Some(self.meta.provider.clone()),
            model: Some(self.meta.model_id.clone()),
            model_name: rt.model_name.clone(),
            workspace: Some(self.meta.workspace.clone()),
            source: self.meta.source.clone(),
            created_at: Some(rt.created_at.clone()),
            last_active_at: Some(rt.last_active_at.clone()),
            has_trace: rt.has_trace(),
            trace_write_failures: failures,
            sandbox,
            plan: rt.plan.clone(),
            archived: rt.archived,
            pinned: rt.pinned,
        }
    }

    /// The initial events of a stream connection ([§5.3](penguin_omni_protocol::spec#s5.3) *Server
    /// events*): `task_state`, then every pending approval in registration order. Runs under the
    /// channel lock.
    pub(crate) fn snapshot_events(&self) -> Vec<ServerEvent> {
        let mut out = vec![ServerEvent::TaskState(self.rt().task_state())];
        out.extend(self.approvals.requests().into_iter().map(approval_request));
        out
    }
}
