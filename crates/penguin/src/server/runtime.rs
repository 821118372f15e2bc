//! Hosted sessions: status, the publish pipeline (§5.5), approvals (§5.6), follow-ups and
//! steering.
//!
//! Lock discipline (the channel's `connect` builds its snapshot under the channel lock, reading
//! an entry's runtime and approvals):
//! - `Entry::publish` serializes everything published to a session channel, together with the
//!   state change it announces, so `task_state` events can never overtake each other;
//! - the runtime and approval mutexes are never held while taking the channel lock, so
//!   `publish → channel` and `channel → runtime/approvals` cannot deadlock;
//! - none of these std mutexes is held across an `.await`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use penguin_engine::{
    Approver, CancellationToken, Environment, Permission, RunOptions, SteerId, Steered,
    ThinkingLevel,
};
use penguin_omni_protocol::{
    ApprovalDecision, Frame, ModelPayload, OmniMessage, Role, SessionMeta,
};
use penguin_sse_transport::{
    ApprovalRequest, ChannelHub, LiveSnapshot, PendingInput, ServerEvent, SessionStatus, TaskState,
};
use penguin_trace_store::{Durability, TraceLocation};
use serde_json::{json, Value};
use std::panic::AssertUnwindSafe;
use tokio::sync::{oneshot, watch};

use super::error::ApiError;
use super::factory::{CreateSession, SessionFactory};
use crate::session::Session;

/// The user channel's key. The server has a single user: whoever holds the token.
pub const USER_CHANNEL: &str = "user:local";

/// How a session's tool calls are approved (§5.6). Read again at every approval, so a change
/// takes effect on the next call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ApprovalMode {
    /// Every call runs.
    #[default]
    AllowAll,
    /// Every call is denied.
    DenyAll,
    /// Calls of read-only tools run; the rest are asked.
    ReadOnly,
    /// Every call is asked: `approval_request`, then `POST /approvals/:toolCallId`.
    AlwaysAsk,
}

impl ApprovalMode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::AllowAll => "allow-all",
            ApprovalMode::DenyAll => "deny-all",
            ApprovalMode::ReadOnly => "read-only",
            ApprovalMode::AlwaysAsk => "always-ask",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<ApprovalMode> {
        Some(match s {
            "allow-all" => ApprovalMode::AllowAll,
            "deny-all" => ApprovalMode::DenyAll,
            "read-only" => ApprovalMode::ReadOnly,
            "always-ask" => ApprovalMode::AlwaysAsk,
            _ => return None,
        })
    }
}

fn now_iso() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the data consistent, so a panic elsewhere must not take the
    // session down with it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct PendingApproval {
    tool_call_id: String,
    call: OmniMessage,
    tx: oneshot::Sender<ApprovalDecision>,
    // Whether its approval_request has been published (see `Entry::published_calls`).
    announced: bool,
}

/// Calls waiting for a human, in registration order, keyed by tool_call_id only (§5.6).
#[derive(Default)]
struct Approvals {
    pending: Mutex<Vec<PendingApproval>>,
}

impl Approvals {
    fn register(
        &self,
        call: OmniMessage,
        id: String,
        announced: bool,
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
            announced,
        });
        rx
    }

    fn resolve(&self, id: &str, decision: ApprovalDecision) -> bool {
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

    fn deny_all(&self) {
        for a in lock(&self.pending).drain(..) {
            let _ = a.tx.send(ApprovalDecision::Deny);
        }
    }

    /// The announced requests, in registration order.
    fn requests(&self) -> Vec<OmniMessage> {
        lock(&self.pending)
            .iter()
            .filter(|a| a.announced)
            .map(|a| a.call.clone())
            .collect()
    }

    /// Marks the request for `id` announced; returns its call if it was registered and not
    /// announced yet.
    fn announce(&self, id: &str) -> Option<OmniMessage> {
        let mut p = lock(&self.pending);
        let a = p
            .iter_mut()
            .find(|a| a.tool_call_id == id && !a.announced)?;
        a.announced = true;
        Some(a.call.clone())
    }
}

struct FollowUp {
    mirror: PendingInput,
    input: Vec<OmniMessage>,
    thinking: Option<ThinkingLevel>,
}

struct Runtime {
    status: SessionStatus,
    cancel: Option<CancellationToken>,
    // Kept past the end of a run: a run aborted during bootstrap wrote nothing, so these are
    // its only record (§5.5).
    pending_inputs: Vec<Frame>,
    pending_bootstrap: Vec<Frame>,
    follow_ups: VecDeque<FollowUp>,
    steering: VecDeque<(PendingInput, SteerId)>,
    approval_mode: ApprovalMode,
    title: Option<String>,
    created_at: String,
    last_active_at: String,
    has_trace: bool,
    deleted: bool,
}

impl Runtime {
    fn task_state(&self) -> TaskState {
        let list = |v: Vec<PendingInput>| (!v.is_empty()).then_some(v);
        TaskState {
            state: self.status,
            queued: Some(u32::try_from(self.follow_ups.len()).unwrap_or(u32::MAX)),
            pending_steering: list(self.steering.iter().map(|(p, _)| p.clone()).collect()),
            pending_follow_ups: list(self.follow_ups.iter().map(|f| f.mirror.clone()).collect()),
        }
    }
}

/// One hosted session.
pub(crate) struct Entry {
    pub(crate) id: String,
    meta: SessionMeta,
    session: Mutex<Session>,
    env: Arc<dyn Environment>,
    rt: Mutex<Runtime>,
    approvals: Approvals,
    publish: Mutex<()>,
    status_tx: watch::Sender<SessionStatus>,
    // Tool calls of the current run already published on the channel. The engine asks for
    // approval as soon as a call enters its queue, which can be before the drive has published
    // that call; the approval_request is held back until then, so clients always see a call
    // before its request.
    published_calls: Mutex<HashSet<String>>,
}

impl Entry {
    fn rt(&self) -> MutexGuard<'_, Runtime> {
        lock(&self.rt)
    }

    /// The session as the API shows it.
    pub(crate) fn to_json(&self) -> Value {
        let rt = self.rt();
        json!({
            "id": self.id,
            "title": rt.title,
            "approvalMode": rt.approval_mode.as_str(),
            "state": rt.status,
            "queued": rt.follow_ups.len(),
            "provider": self.meta.provider,
            "model": self.meta.model_id,
            "workspace": self.meta.workspace,
            "source": self.meta.source,
            "createdAt": rt.created_at,
            "lastActiveAt": rt.last_active_at,
            "hasTrace": rt.has_trace || rt.status != SessionStatus::Idle,
        })
    }

    /// The initial events of a stream connection (§5.3): `task_state`, then every pending
    /// approval in registration order. Runs under the channel lock.
    pub(crate) fn snapshot_events(&self) -> Vec<ServerEvent> {
        let mut out = vec![ServerEvent::TaskState(self.rt().task_state())];
        out.extend(self.approvals.requests().into_iter().map(approval_request));
        out
    }
}

/// What `/messages` needs from the runtime, captured before the trace is read.
pub(crate) struct HistorySnapshot {
    pub(crate) live: Option<LiveSnapshot>,
    pub(crate) pending: Vec<Frame>,
    pub(crate) flush: Option<penguin_trace_store::FlushHandle>,
}

/// Settings of the runtime.
pub(crate) struct RuntimeConfig {
    pub(crate) factory: Arc<dyn SessionFactory>,
    pub(crate) location: TraceLocation,
    pub(crate) durability: Durability,
    pub(crate) hub: ChannelHub,
    pub(crate) policy: crate::policy::CommandPolicy,
}

/// Every hosted session, and the channels.
pub(crate) struct Sessions {
    pub(crate) cfg: RuntimeConfig,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    // Loading a session from disk opens a trace writer: two concurrent loads of one id must not
    // both do it.
    load: tokio::sync::Mutex<()>,
}

/// A valid session id is a single path segment of ASCII letters, digits, `-` and `_`: it is
/// used in trace file names, so nothing that could walk out of the traces directory passes.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Sessions {
    pub(crate) fn new(cfg: RuntimeConfig) -> Sessions {
        Sessions {
            cfg,
            entries: Mutex::new(HashMap::new()),
            load: tokio::sync::Mutex::new(()),
        }
    }

    /// Where a session's approval mode and title are kept, so a restart keeps them.
    fn settings_path(&self, id: &str) -> PathBuf {
        let loc = &self.cfg.location;
        loc.root
            .join(&loc.project)
            .join("agents")
            .join(&loc.agent)
            .join("server-sessions")
            .join(format!("{id}.json"))
    }

    /// Writes the session's settings (best effort: a failure is logged, the session goes on).
    fn save_settings(&self, entry: &Entry) {
        let body = {
            let rt = entry.rt();
            serde_json::json!({"approvalMode": rt.approval_mode.as_str(), "title": rt.title})
        };
        let path = self.settings_path(&entry.id);
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, body.to_string())?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            tracing::warn!(
                "[server] cannot save the settings of session {}: {e}",
                entry.id
            );
        }
    }

    fn load_settings(&self, id: &str) -> (ApprovalMode, Option<String>) {
        let saved: Option<serde_json::Value> = std::fs::read_to_string(self.settings_path(id))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let mode = saved
            .as_ref()
            .and_then(|v| v["approvalMode"].as_str())
            .and_then(ApprovalMode::parse)
            .unwrap_or_default();
        let title = saved
            .as_ref()
            .and_then(|v| v["title"].as_str())
            .map(str::to_owned);
        (mode, title)
    }

    fn insert(
        &self,
        mut session: Session,
        env: Arc<dyn Environment>,
        has_trace: bool,
    ) -> Arc<Entry> {
        session.set_command_policy(self.cfg.policy.clone());
        let (approval_mode, title) = self.load_settings(session.id());
        let meta = session
            .meta()
            .session_meta()
            .cloned()
            .unwrap_or_else(|| SessionMeta {
                session_id: session.id().to_owned(),
                provider: String::new(),
                model_id: String::new(),
                model_context_window: penguin_omni_protocol::ContextWindow::Other("unknown".into()),
                system_prompt: String::new(),
                agent_state: String::new(),
                workspace: String::new(),
                source: None,
            });
        let now = now_iso();
        let entry = Arc::new(Entry {
            id: session.id().to_owned(),
            meta,
            session: Mutex::new(session),
            env,
            rt: Mutex::new(Runtime {
                status: SessionStatus::Idle,
                cancel: None,
                pending_inputs: Vec::new(),
                pending_bootstrap: Vec::new(),
                follow_ups: VecDeque::new(),
                steering: VecDeque::new(),
                approval_mode,
                title,
                created_at: now.clone(),
                last_active_at: now,
                has_trace,
                deleted: false,
            }),
            approvals: Approvals::default(),
            publish: Mutex::new(()),
            status_tx: watch::Sender::new(SessionStatus::Idle),
            published_calls: Mutex::new(HashSet::new()),
        });
        lock(&self.entries).insert(entry.id.clone(), entry.clone());
        entry
    }

    /// `POST /api/sessions`.
    pub(crate) fn create(
        &self,
        provider: Option<String>,
        model: Option<String>,
        workspace: Option<PathBuf>,
        mode: Option<ApprovalMode>,
    ) -> Result<Arc<Entry>, ApiError> {
        let req = CreateSession {
            provider,
            model,
            workspace,
            location: self.cfg.location.clone(),
            durability: self.cfg.durability,
        };
        let mut parts = self
            .cfg
            .factory
            .create(&req)
            .map_err(|m| ApiError::bad_request("invalid_request", m))?;
        parts.spec.location = self.cfg.location.clone();
        let env = parts.env.clone();
        let session = Session::create(parts.spec, parts.llm, parts.env)
            .map_err(|e| ApiError::internal(format!("cannot create the session: {e}")))?;
        if let Some(spec) = &parts.compaction_model {
            session.enable_compaction(spec);
        }
        let entry = self.insert(session, env, false);
        if let Some(mode) = mode {
            entry.rt().approval_mode = mode;
            self.save_settings(&entry);
        }
        self.cfg
            .hub
            .get(USER_CHANNEL)
            .publish_server_event(&ServerEvent::SessionCreated {
                project_id: self.cfg.location.project.clone(),
                agent_id: self.cfg.location.agent.clone(),
                session_id: entry.id.clone(),
                source: "api".into(),
            });
        Ok(entry)
    }

    /// A hosted session, loading it from its trace when this process has not seen it yet.
    pub(crate) async fn get(&self, id: &str) -> Result<Arc<Entry>, ApiError> {
        if !valid_session_id(id) {
            return Err(ApiError::bad_request(
                "invalid_session_id",
                format!("{id:?} is not a session id (letters, digits, '-' and '_' only)"),
            ));
        }
        if let Some(e) = lock(&self.entries).get(id) {
            return Ok(e.clone());
        }
        let _loading = self.load.lock().await;
        if let Some(e) = lock(&self.entries).get(id) {
            return Ok(e.clone());
        }
        let traces = self.cfg.location.traces_dir();
        let found = penguin_trace_store::find_latest_trace_file(&traces, id)
            .map_err(|e| ApiError::internal(format!("cannot look for session {id}: {e}")))?;
        if found.is_none() {
            return Err(ApiError::session_not_found(id));
        }
        let (resumed, writer) = Session::load(&self.cfg.location, id, self.cfg.durability)
            .map_err(|e| match e {
                crate::session::SessionError::WorkspaceMissing(w) => ApiError::conflict(
                    "workspace_missing",
                    format!("the workspace {w} of session {id} no longer exists"),
                ),
                other => ApiError::conflict("session_unrecoverable", other.to_string()),
            })?;
        let meta = resumed
            .meta
            .clone()
            .ok_or_else(|| ApiError::conflict("session_unrecoverable", "no session_meta"))?;
        let parts = self
            .cfg
            .factory
            .resume(&meta, &resumed)
            .map_err(|m| ApiError::conflict("session_unrecoverable", m))?;
        let env = parts.env.clone();
        let session = Session::resume(resumed, writer, parts.engine, parts.llm, parts.env)
            .map_err(|e| ApiError::conflict("session_unrecoverable", e.to_string()))?;
        if let Some(spec) = &parts.compaction_model {
            session.enable_compaction(spec);
        }
        Ok(self.insert(session, env, true))
    }

    /// Hosted sessions, newest id first.
    pub(crate) fn loaded(&self) -> Vec<Arc<Entry>> {
        let mut v: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        v.sort_by(|a, b| b.id.cmp(&a.id));
        v
    }

    /// Whether this process hosts `id`.
    pub(crate) fn is_loaded(&self, id: &str) -> bool {
        lock(&self.entries).contains_key(id)
    }

    fn publish_state_locked(&self, entry: &Entry) {
        let (ts, state, last, has_trace) = {
            let rt = entry.rt();
            (
                rt.task_state(),
                rt.status,
                rt.last_active_at.clone(),
                rt.has_trace || rt.status != SessionStatus::Idle,
            )
        };
        entry.status_tx.send_replace(state);
        self.cfg
            .hub
            .get(&entry.id)
            .publish_server_event(&ServerEvent::TaskState(ts));
        self.cfg
            .hub
            .get(USER_CHANNEL)
            .publish_server_event(&ServerEvent::SessionState {
                session_id: entry.id.clone(),
                state,
                last_active_at: last,
                has_trace,
            });
    }

    /// `POST /tasks`: starts a run, or queues a follow-up when busy and `queue_if_busy`.
    /// Returns whether the input was queued.
    pub(crate) fn submit(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        input: Vec<OmniMessage>,
        thinking: Option<ThinkingLevel>,
        queue_if_busy: bool,
        text: String,
        images: u32,
    ) -> Result<bool, ApiError> {
        let _p = lock(&entry.publish);
        {
            let mut rt = entry.rt();
            if rt.deleted {
                return Err(ApiError::session_not_found(&entry.id));
            }
            match rt.status {
                SessionStatus::Idle => {}
                _ if queue_if_busy => {
                    rt.follow_ups.push_back(FollowUp {
                        mirror: PendingInput {
                            id: random_id(),
                            text,
                            images,
                            files: 0,
                        },
                        input,
                        thinking,
                    });
                    drop(rt);
                    let ts = entry.rt().task_state();
                    self.cfg
                        .hub
                        .get(&entry.id)
                        .publish_server_event(&ServerEvent::TaskState(ts));
                    return Ok(true);
                }
                busy => return Err(busy_error(busy)),
            }
        }
        self.begin_run_locked(entry, input, thinking)?;
        Ok(false)
    }

    /// `POST /compact`: compacts an idle session's context as its own task (§5.5).
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
        let availability = lock(&entry.session).engine().compactability();
        if availability != penguin_engine::Compactability::Ok {
            let message = match availability {
                penguin_engine::Compactability::Unsupported => {
                    "compaction is not configured for this session's model"
                }
                penguin_engine::Compactability::JustCompacted => {
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
        let started = lock(&entry.session).compact(cancel);
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
        let cancel = CancellationToken::new();
        {
            let mut rt = entry.rt();
            rt.status = SessionStatus::Running;
            rt.cancel = Some(cancel.clone());
            rt.pending_inputs.extend(frames.iter().cloned());
            rt.pending_bootstrap.clear();
            rt.last_active_at = now_iso();
            rt.has_trace = true;
        }
        lock(&entry.published_calls).clear();
        // The engine never echoes its input: the server is the one that shows it.
        let channel = self.cfg.hub.get(&entry.id);
        for f in &frames {
            channel.publish_message(f);
        }
        self.publish_state_locked(entry);
        let approver = Arc::new(ServerApprover {
            sessions: self.clone(),
            entry: entry.clone(),
        });
        let options = RunOptions {
            approver: Some(approver),
            cancel,
            thinking_level: thinking,
        };
        let started = lock(&entry.session).run(input, options);
        self.drive(entry, started)
    }

    /// Pumps a started task (a run or a compaction) to the channel and settles the session
    /// when it ends; a refused start puts the session back to idle.
    fn drive(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        started: Result<BoxStream<'static, Frame>, penguin_engine::EngineBusy>,
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
                    sessions.settle(&entry);
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

    /// Publishes every frame of a run (§5.5 drive).
    async fn pump(&self, entry: &Entry, mut stream: BoxStream<'static, Frame>) {
        while let Some(frame) = stream.next().await {
            let _p = lock(&entry.publish);
            let steering_delivered = {
                let mut rt = entry.rt();
                observe(&mut rt, frame.message())
            };
            let channel = self.cfg.hub.get(&entry.id);
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
                let ts = entry.rt().task_state();
                self.cfg
                    .hub
                    .get(&entry.id)
                    .publish_server_event(&ServerEvent::TaskState(ts));
            }
        }
    }

    /// The end of a run (§5.5 drive `finally`): clear the live tail, deny what is still
    /// pending, go idle, announce it, and start the next follow-up.
    fn settle(self: &Arc<Self>, entry: &Arc<Entry>) {
        {
            let _p = lock(&entry.publish);
            self.cfg.hub.get(&entry.id).clear_live_tail();
            entry.approvals.deny_all();
            {
                let mut rt = entry.rt();
                rt.status = SessionStatus::Idle;
                rt.cancel = None;
                rt.steering.clear();
                rt.last_active_at = now_iso();
            }
            self.publish_state_locked(entry);
        }
        self.start_next_follow_up(entry);
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
        if let Some(f) = next {
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

    /// `POST /steer`.
    pub(crate) fn steer(&self, entry: &Entry, text: String) -> Result<String, ApiError> {
        let _p = lock(&entry.publish);
        if entry.rt().status != SessionStatus::Running {
            return Err(ApiError::conflict(
                "not_running",
                "no task is running in this session",
            ));
        }
        let steered = lock(&entry.session)
            .engine()
            .steer(vec![penguin_omni_protocol::build::user_text(text.clone())]);
        match steered {
            Steered::Queued(steer_id) => {
                let id = random_id();
                let ts = {
                    let mut rt = entry.rt();
                    rt.steering.push_back((
                        PendingInput {
                            id: id.clone(),
                            text,
                            images: 0,
                            files: 0,
                        },
                        steer_id,
                    ));
                    rt.task_state()
                };
                self.cfg
                    .hub
                    .get(&entry.id)
                    .publish_server_event(&ServerEvent::TaskState(ts));
                Ok(id)
            }
            Steered::Empty => Err(ApiError::field("text", "non-blank text")),
            Steered::NotRunning => Err(ApiError::conflict(
                "not_running",
                "no task is running in this session",
            )),
        }
    }

    /// `DELETE /steer/:steerId`: recalls a steering input not delivered yet.
    pub(crate) fn unsteer(&self, entry: &Entry, id: &str) -> Result<PendingInput, ApiError> {
        let _p = lock(&entry.publish);
        let not_pending = || {
            ApiError::conflict(
                "not_pending",
                format!("steering {id:?} is not pending (already delivered, or unknown)"),
            )
        };
        let (mirror, steer_id) = {
            let rt = entry.rt();
            let (p, s) = rt
                .steering
                .iter()
                .find(|(p, _)| p.id == id)
                .ok_or_else(not_pending)?;
            (p.clone(), *s)
        };
        if !lock(&entry.session).engine().unsteer(steer_id) {
            return Err(not_pending());
        }
        let ts = {
            let mut rt = entry.rt();
            rt.steering.retain(|(p, _)| p.id != id);
            rt.task_state()
        };
        self.cfg
            .hub
            .get(&entry.id)
            .publish_server_event(&ServerEvent::TaskState(ts));
        Ok(mirror)
    }

    /// `DELETE /follow-ups/:id`: removes a queued follow-up; returns its mirror and thinking
    /// level.
    pub(crate) fn remove_follow_up(
        &self,
        entry: &Entry,
        id: &str,
    ) -> Result<(PendingInput, Option<ThinkingLevel>), ApiError> {
        let _p = lock(&entry.publish);
        let (removed, ts) = {
            let mut rt = entry.rt();
            let pos = rt
                .follow_ups
                .iter()
                .position(|f| f.mirror.id == id)
                .ok_or_else(|| {
                    ApiError::conflict(
                        "not_pending",
                        format!("follow-up {id:?} is not queued (already started, or unknown)"),
                    )
                })?;
            let f = rt.follow_ups.remove(pos);
            (f, rt.task_state())
        };
        self.cfg
            .hub
            .get(&entry.id)
            .publish_server_event(&ServerEvent::TaskState(ts));
        let f = removed.ok_or_else(|| ApiError::internal("follow-up vanished under its lock"))?;
        Ok((f.mirror, f.thinking))
    }

    /// `POST /retry-now`: whether a reconnect wait was cut short.
    pub(crate) fn retry_now(&self, entry: &Entry) -> bool {
        if entry.rt().status == SessionStatus::Idle {
            return false;
        }
        lock(&entry.session).engine().skip_reconnect_wait()
    }

    /// `POST /approvals/:toolCallId`.
    pub(crate) fn decide(&self, entry: &Entry, id: &str, decision: ApprovalDecision) -> bool {
        entry.approvals.resolve(id, decision)
    }

    /// `PATCH`: new mode and/or title.
    pub(crate) fn update(&self, entry: &Entry, mode: Option<ApprovalMode>, title: Option<String>) {
        let _p = lock(&entry.publish);
        {
            let mut rt = entry.rt();
            if rt.deleted {
                // Being deleted: writing its settings back would resurrect them.
                return;
            }
            if let Some(m) = mode {
                rt.approval_mode = m;
            }
            if let Some(t) = &title {
                rt.title = Some(t.clone());
            }
        }
        self.save_settings(entry);
        if let Some(title) = title {
            let ev = ServerEvent::SessionTitle {
                session_id: entry.id.clone(),
                title,
            };
            self.cfg.hub.get(&entry.id).publish_server_event(&ev);
            self.cfg.hub.get(USER_CHANNEL).publish_server_event(&ev);
        }
    }

    /// `DELETE`: interrupts a running task, waits (bounded) for it to settle, forgets the
    /// session, closes its channel and removes its trace files.
    pub(crate) async fn delete(&self, entry: &Arc<Entry>) -> Result<(), ApiError> {
        {
            let _p = lock(&entry.publish);
            let mut rt = entry.rt();
            rt.deleted = true;
            rt.follow_ups.clear();
        }
        self.abort(entry);
        let mut rx = entry.status_tx.subscribe();
        // The watch guard is released at once: it must not live across the next await.
        let settled = tokio::time::timeout(
            Duration::from_secs(10),
            rx.wait_for(|s| *s == SessionStatus::Idle),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        if !settled {
            // Still running: the session stays as it was, so the client can retry.
            entry.rt().deleted = false;
            return Err(ApiError::conflict(
                "session_deleting",
                "the session's task did not stop within 10 s; try again",
            ));
        }
        // Hold the loader off while the session leaves memory and disk, so a concurrent request
        // cannot load it back from files that are being removed.
        let _loading = self.load.lock().await;
        let writer = lock(&entry.session).writer().clone();
        let flushed = tokio::task::spawn_blocking(move || writer.flush()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!("[server] flushing {} before delete: {e}", entry.id);
        }
        lock(&self.entries).remove(&entry.id);
        self.cfg.hub.reclaim(&entry.id);
        for f in super::history::trace_files(&self.cfg.location.traces_dir(), &entry.id)
            .map_err(|e| ApiError::internal(format!("cannot list the session's traces: {e}")))?
        {
            std::fs::remove_file(&f.path).map_err(|e| {
                ApiError::internal(format!("cannot remove {}: {e}", f.path.display()))
            })?;
        }
        let _ = std::fs::remove_file(self.settings_path(&entry.id));
        Ok(())
    }

    /// What `/messages` captures before reading the trace: the live tail (only while a task
    /// runs), the pending holds, and a flush of the trace writer.
    pub(crate) fn history_snapshot(&self, entry: &Entry) -> HistorySnapshot {
        let _p = lock(&entry.publish);
        let (running, pending) = {
            let rt = entry.rt();
            let pending: Vec<Frame> = rt
                .pending_inputs
                .iter()
                .chain(rt.pending_bootstrap.iter())
                .cloned()
                .collect();
            (rt.status != SessionStatus::Idle, pending)
        };
        let live = running.then(|| self.cfg.hub.get(&entry.id).live_snapshot());
        // Everything published so far was recorded (queued to the writer) before it was
        // published; the flush makes it readable.
        let flush = Some(lock(&entry.session).writer().flush_handle());
        HistorySnapshot {
            live,
            pending,
            flush,
        }
    }

    /// Reclaims channels nobody listens to whose session is idle and that have been quiet
    /// for `idle_after` (§5.1 ChannelHub sweep). Returns the reclaimed keys.
    pub(crate) fn sweep_channels(&self, idle_after: Duration) -> Vec<String> {
        self.cfg
            .hub
            .sweep(std::time::Instant::now(), idle_after, |key| {
                lock(&self.entries)
                    .get(key)
                    .is_some_and(|e| e.rt().status != SessionStatus::Idle)
            })
    }

    /// Interrupts every task and ends every stream (server shutdown).
    pub(crate) fn shutdown(&self) {
        for e in self.loaded() {
            self.abort(&e);
            self.cfg.hub.reclaim(&e.id);
        }
        self.cfg.hub.reclaim(USER_CHANNEL);
    }
}

/// Parent-level bookkeeping of one drive message (§5.5 step 1). Returns true when it was a
/// delivered steering message (the mirror shifted).
fn observe(rt: &mut Runtime, msg: &OmniMessage) -> bool {
    if msg.has_origin() {
        return false;
    }
    match msg.payload_type() {
        "tool_list_ready" | "mcp_connect_begin" | "mcp_connect_end" => {
            rt.pending_bootstrap.push(Frame::new(msg.clone()));
            false
        }
        "request_begin" => {
            // The engine has written the input and the bootstrap records by now.
            rt.pending_inputs.clear();
            rt.pending_bootstrap.clear();
            false
        }
        _ => match msg.model() {
            Some(ModelPayload::Text(t))
                if t.role == Role::User && t.text.starts_with("[user_steering]") =>
            {
                rt.steering.pop_front().is_some()
            }
            _ => false,
        },
    }
}

fn approval_request(call: OmniMessage) -> ServerEvent {
    ServerEvent::ApprovalRequest(ApprovalRequest {
        origin: call.origin.clone(),
        tool_call: call,
    })
}

fn random_id() -> String {
    let b: [u8; 16] = rand::random();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The approver of one run: the session's mode, read at every call (§5.6).
struct ServerApprover {
    sessions: Arc<Sessions>,
    entry: Arc<Entry>,
}

#[async_trait]
impl Approver for ServerApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, String> {
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
        let id = call
            .tool_call_id()
            .ok_or_else(|| "a tool call without tool_call_id cannot be approved".to_string())?
            .to_owned();
        let rx = {
            // Registered and announced under the publish lock, so an abort (which denies under
            // the same lock) cannot slip in between.
            let _p = lock(&self.entry.publish);
            // A subagent's call (with an origin) is not on this session's own stream order
            // the same way; announce it at once.
            let shown = call.has_origin() || lock(&self.entry.published_calls).contains(&id);
            let rx = self.entry.approvals.register(call.clone(), id, shown);
            if shown {
                self.sessions
                    .cfg
                    .hub
                    .get(&self.entry.id)
                    .publish_server_event(&approval_request(call.clone()));
            }
            rx
        };
        // No timeout: a human may take as long as they like; an abort or the end of the run
        // denies.
        Ok(rx.await.unwrap_or(ApprovalDecision::Deny))
    }
}

/// The 409 a busy session answers new input with (§5.4).
fn busy_error(status: SessionStatus) -> ApiError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    fn call(id: &str) -> OmniMessage {
        build::tool_call("bash", "{}", id, StopReason::Completed, None)
    }

    #[test]
    fn approvals_resolve_once_and_re_registering_denies_the_old_wait() {
        let a = Approvals::default();
        let mut old = a.register(call("c1"), "c1".into(), false);
        assert!(a.requests().is_empty(), "not announced yet");
        assert_eq!(
            a.announce("c1")
                .and_then(|c| c.tool_call_id().map(str::to_owned)),
            Some("c1".into())
        );
        assert!(a.announce("c1").is_none(), "announced once");
        let mut new = a.register(call("c1"), "c1".into(), true);
        assert_eq!(old.try_recv(), Ok(ApprovalDecision::Deny));
        let mut other = a.register(call("c2"), "c2".into(), true);
        assert_eq!(a.requests().len(), 2);
        assert!(a.resolve("c1", ApprovalDecision::Allow));
        assert!(!a.resolve("c1", ApprovalDecision::Allow), "only once");
        assert_eq!(new.try_recv(), Ok(ApprovalDecision::Allow));
        a.deny_all();
        assert_eq!(other.try_recv(), Ok(ApprovalDecision::Deny));
        assert!(a.requests().is_empty());
    }

    #[test]
    fn modes_and_ids_parse_strictly() {
        for m in [
            ApprovalMode::AllowAll,
            ApprovalMode::DenyAll,
            ApprovalMode::ReadOnly,
            ApprovalMode::AlwaysAsk,
        ] {
            assert_eq!(ApprovalMode::parse(m.as_str()), Some(m));
        }
        assert_eq!(ApprovalMode::parse("Allow-All"), None);
        assert!(valid_session_id("session-2026-01-01-00-00-00-0123abcd"));
        for bad in ["", "..", "a/b", "a\\b", "a.b", "%2e%2e", &"x".repeat(129)] {
            assert!(!valid_session_id(bad), "{bad:?}");
        }
    }
}
