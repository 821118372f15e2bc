//! The registry of hosted sessions: creating, loading from the Trace, listing, deleting.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use penguin_sse_transport::{Channel, ChannelHub, LiveSnapshot, ServerEvent, SessionStatus};
use penguin_trace_store::{Durability, TraceLocation};

use crate::api::ApprovalMode;
use crate::entry::{Entry, Runtime};
use crate::error::ApiError;
use crate::history::TraceFile;
use crate::host::{CreateSession, FactoryError, HostedSession, LoadSession, SessionFactory};
use crate::index::{Indexed, SessionIndex};
use crate::placement::Placement;
use crate::settings::{Settings, SettingsStore};
use crate::sync::lock;
use penguin_omni_protocol::Frame;

/// The user channel's key. The server has a single user: whoever holds the token.
pub const USER_CHANNEL: &str = "user:local";

/// A valid session id is a single path segment of ASCII letters, digits, `-` and `_`: it is
/// used in trace file names, so nothing that could walk out of the traces directory passes.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What `/messages` needs from the runtime, captured before the trace is read.
pub(crate) struct HistorySnapshot {
    pub(crate) live: Option<LiveSnapshot>,
    pub(crate) pending: Vec<Frame>,
    pub(crate) flush: penguin_trace_store::FlushHandle,
}

/// What a `PATCH` changes; `None` leaves it as it is.
#[derive(Debug, Default)]
pub(crate) struct Patch {
    pub(crate) mode: Option<ApprovalMode>,
    pub(crate) title: Option<String>,
    pub(crate) archived: Option<bool>,
    pub(crate) pinned: Option<bool>,
}

impl Patch {
    fn apply(&self, s: &mut Settings) {
        if let Some(m) = self.mode {
            s.approval_mode = Some(m);
        }
        if let Some(t) = &self.title {
            s.title = Some(t.clone());
        }
        if let Some(a) = self.archived {
            s.archived = a;
        }
        if let Some(p) = self.pinned {
            s.pinned = p;
        }
    }
}

/// Settings of the runtime.
pub(crate) struct RuntimeConfig {
    pub(crate) factory: Arc<dyn SessionFactory>,
    pub(crate) location: TraceLocation,
    pub(crate) durability: Durability,
    pub(crate) hub: ChannelHub,
    /// Idle sessions kept loaded; the least recently used beyond this are unloaded.
    pub(crate) idle_cache: usize,
    /// Where API-created sessions' workspaces must lie.
    pub(crate) workspace_root: Option<std::path::PathBuf>,
    /// The cluster this server is a node of, if any.
    pub(crate) cluster: Option<Arc<dyn Placement>>,
    /// The approval mode of a session whose creator named none.
    pub(crate) approval_mode: ApprovalMode,
}

/// Every hosted session, and the channels.
pub(crate) struct Sessions {
    pub(crate) cfg: RuntimeConfig,
    pub(crate) settings: SettingsStore,
    /// The sessions on disk: ask it, never scan the traces directory per request.
    pub(crate) index: SessionIndex,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    clock: AtomicU64,
    // Loading a session from disk opens a trace writer: two concurrent loads of one id must not
    // both do it. One lock per id, so loads of different sessions run side by side.
    loading: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The ends of unloaded sessions still running ([`HostedSession::end`]): shutdown waits
    /// for them.
    ending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Sessions {
    pub(crate) fn new(cfg: RuntimeConfig) -> Sessions {
        Sessions {
            settings: SettingsStore::new(&cfg.location),
            index: SessionIndex::new(cfg.location.traces_dir()),
            cfg,
            entries: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            loading: Mutex::new(HashMap::new()),
            ending: Mutex::new(Vec::new()),
        }
    }

    /// The channel of a session (or of [`USER_CHANNEL`]).
    pub(crate) fn channel(&self, key: &str) -> Arc<Channel> {
        self.cfg.hub.get(key)
    }

    fn insert(self: &Arc<Self>, session: Box<dyn HostedSession>, has_trace: bool) -> Arc<Entry> {
        let Settings {
            approval_mode,
            title,
            model_name,
            archived,
            pinned,
            ..
        } = self.settings.load(session.id());
        let approval_mode = approval_mode.unwrap_or(self.cfg.approval_mode);
        let mut rt = Runtime::new(approval_mode, title, has_trace);
        rt.model_name = model_name;
        rt.archived = archived;
        rt.pinned = pinned;
        let entry = Arc::new(Entry::new(session, rt));
        self.touch(&entry);
        // Weak both ways: the hook lives inside the session the entry holds.
        let (sessions, weak) = (Arc::downgrade(self), Arc::downgrade(&entry));
        entry.session().on_notice(Arc::new(move || {
            let (Some(sessions), Some(entry)) = (sessions.upgrade(), weak.upgrade()) else {
                return;
            };
            sessions.start_notices(&entry);
        }));
        let (sessions, weak) = (Arc::downgrade(self), Arc::downgrade(&entry));
        entry.session().on_background_message(Arc::new(move |msg| {
            let (Some(sessions), Some(entry)) = (sessions.upgrade(), weak.upgrade()) else {
                return;
            };
            sessions.publish_background(&entry, msg);
        }));
        // Its files are this process's to write from now on: looked up without a directory
        // read, found as its writer creates them.
        self.index
            .host(&entry.id, &entry.session().writer().current_path());
        lock(&self.entries).insert(entry.id.clone(), entry.clone());
        self.unload_idle();
        entry
    }

    fn touch(&self, entry: &Entry) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        entry.touched.store(now, Ordering::Relaxed);
    }

    /// Unloads the least recently used idle sessions beyond the cache, so threads and open
    /// trace files stay bounded by the running sessions plus the cache. A later request loads
    /// an unloaded session again from its trace.
    ///
    /// Only sessions nobody else holds are unloaded: under the registry lock no request can
    /// take a new reference, so a session cannot be in use and unloaded at once (two engines
    /// on one trace).
    pub(crate) fn unload_idle(self: &Arc<Self>) {
        let (unloaded, never_ran): (Vec<Arc<Entry>>, Vec<Arc<Entry>>) = {
            let mut entries = lock(&self.entries);
            let mut idle: Vec<(u64, String)> = entries
                .values()
                .filter(|e| Arc::strong_count(e) == 1 && e.unloadable())
                .map(|e| (e.touched.load(Ordering::Relaxed), e.id.clone()))
                .collect();
            if idle.len() <= self.cfg.idle_cache {
                return;
            }
            idle.sort_unstable();
            let excess = idle.len() - self.cfg.idle_cache;
            let chosen: Vec<Arc<Entry>> = idle
                .into_iter()
                .take(excess)
                .filter_map(|(_, id)| entries.get(&id).cloned())
                .collect();
            // A session that never ran has no trace to be loaded from: it stays listed and
            // loaded until its session_meta is on disk (below), then goes.
            let (never_ran, traced): (Vec<_>, Vec<_>) =
                chosen.into_iter().partition(|e| !e.rt().has_trace);
            for e in &traced {
                entries.remove(&e.id);
            }
            (traced, never_ran)
        };
        let now = std::time::SystemTime::now();
        for e in &unloaded {
            self.forget_unloaded(e, now);
            let end = e.session().end("unload");
            self.end_later(end);
        }
        let me = self.clone();
        let release = move || {
            let mut gone: Vec<String> = unloaded.iter().map(|e| e.id.clone()).collect();
            for e in never_ran {
                e.session().writer().record_session_meta(e.meta.clone());
                if let Err(err) = e.session().writer().flush() {
                    tracing::warn!(
                        "[server] {} stays loaded: its trace cannot be written: {err}",
                        e.id
                    );
                    continue;
                }
                e.rt().has_trace = true;
                let mut entries = lock(&me.entries);
                // Only if nothing took it up meanwhile (a request holds it, a task started).
                if Arc::strong_count(&e) == 2 && e.unloadable() {
                    entries.remove(&e.id);
                    drop(entries);
                    me.forget_unloaded(&e, std::time::SystemTime::now());
                    let end = e.session().end("unload");
                    me.end_later(end);
                    gone.push(e.id.clone());
                }
            }
            // Dropping a session joins its trace writer thread (its last records written),
            // and only then may another node take it.
            drop(unloaded);
            if let Some(c) = &me.cfg.cluster {
                for id in gone {
                    c.unloaded(&id);
                }
            }
        };
        // Writing and joining threads: not on the async workers.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(release);
            }
            Err(_) => release(),
        }
    }

    /// Runs an unloaded session's end on its own, so the unload never waits for the user's
    /// programs; shutdown waits for it ([`Sessions::end_all`]).
    fn end_later(&self, end: futures::future::BoxFuture<'static, ()>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // Hooks run on the runtime's processes: without one there is nothing to run them.
            tracing::warn!("[server] a session unloaded outside the runtime: its end is not run");
            return;
        };
        let task = rt.spawn(end);
        let mut ending = lock(&self.ending);
        ending.retain(|t| !t.is_finished());
        ending.push(task);
    }

    /// Ends every loaded session (`exit`) and waits for the ends of unloaded ones: the last
    /// thing a server does (after [`Sessions::shutdown`] interrupted their tasks).
    pub(crate) async fn end_all(&self) {
        let ends: Vec<_> = self
            .loaded()
            .iter()
            .map(|e| e.session().end("exit"))
            .collect();
        let unloaded: Vec<_> = lock(&self.ending).drain(..).collect();
        futures::future::join_all(ends).await;
        for task in unloaded {
            let _ = task.await;
        }
    }

    // What goes with an unloaded session: its replay buffer (unless someone still listens: a
    // reconnect after the unload misses and resyncs from the trace), and the index learns the
    // file it was last written to and when, so loading it again reads no directory.
    fn forget_unloaded(&self, e: &Entry, when: std::time::SystemTime) {
        self.index
            .writing(&e.id, &e.session().writer().current_path());
        self.index.unhost(&e.id);
        self.index.written(&e.id, when);
        if self
            .cfg
            .hub
            .existing(&e.id)
            .is_some_and(|c| c.subscriber_count() == 0)
        {
            self.cfg.hub.reclaim(&e.id);
        }
    }

    /// `POST /api/sessions`.
    pub(crate) fn create(
        self: &Arc<Self>,
        req: crate::api::CreateSessionRequest,
    ) -> Result<Arc<Entry>, ApiError> {
        let workspace = match (req.workspace, &self.cfg.workspace_root) {
            (Some(w), Some(root)) => Some(confined_workspace(root, &w)?),
            (w, _) => w.map(Into::into),
        };
        let create = CreateSession {
            provider: req.provider,
            model: req.model.clone(),
            workspace,
            sandbox: req.sandbox.clone(),
            mcp_servers: req.mcp_servers.clone(),
            location: self.cfg.location.clone(),
            durability: self.cfg.durability,
        };
        let session = self.cfg.factory.create(&create).map_err(|e| match e {
            e @ FactoryError::InvalidRequest { .. } => {
                ApiError::bad_request("invalid_request", e.to_string())
            }
            FactoryError::WorkspaceMissing(w) => ApiError::conflict(
                "workspace_missing",
                format!("the workspace {w} no longer exists"),
            ),
            e @ FactoryError::Unrecoverable(_) => {
                ApiError::conflict("session_unrecoverable", e.to_string())
            }
            FactoryError::Internal(e) => {
                ApiError::internal(format!("cannot create the session: {e}"))
            }
        })?;
        let entry = self.insert(session, false);
        if let Some(mode) = req.approval_mode {
            entry.rt().approval_mode = mode;
        }
        // The name it was asked for, else the factory's default: kept, since the trace holds
        // only the provider and the model id.
        let model_name = req.model.clone().or_else(|| {
            let models = self.cfg.factory.models();
            models.into_iter().find(|m| m.default).map(|m| m.name)
        });
        entry.rt().model_name = model_name.clone();
        if req.approval_mode.is_some()
            || req.sandbox.is_some()
            || !req.mcp_servers.is_empty()
            || model_name.is_some()
        {
            let settings = Settings {
                approval_mode: req.approval_mode,
                model_name,
                title: None,
                sandbox: req.sandbox,
                mcp_servers: req.mcp_servers,
                archived: false,
                pinned: false,
            };
            self.settings.save(&entry.id, &settings);
        }
        self.channel(USER_CHANNEL)
            .publish_server_event(&ServerEvent::SessionCreated {
                project_id: self.cfg.location.project.clone(),
                agent_id: self.cfg.location.agent.clone(),
                session_id: entry.id.clone(),
                source: "api".into(),
            });
        Ok(entry)
    }

    /// A hosted session, loading it from its trace when this process has not seen it yet.
    pub(crate) async fn get(self: &Arc<Self>, id: &str) -> Result<Arc<Entry>, ApiError> {
        if !valid_session_id(id) {
            return Err(ApiError::bad_request(
                "invalid_session_id",
                format!("{id:?} is not a session id (letters, digits, '-' and '_' only)"),
            ));
        }
        if let Some(e) = self.loaded_entry(id) {
            return Ok(e);
        }
        let _loading = self.load_lock(id).lock_owned().await;
        if let Some(e) = self.loaded_entry(id) {
            return Ok(e);
        }
        if let Some(c) = &self.cfg.cluster {
            // Its trace files are the cluster's records, written here as this node takes it.
            c.claim(id).await?;
        }
        let loaded = self.load(id).await;
        if let (Err(_), Some(c)) = (&loaded, &self.cfg.cluster) {
            c.unloaded(id);
        }
        loaded
    }

    async fn load(self: &Arc<Self>, id: &str) -> Result<Arc<Entry>, ApiError> {
        let files = self.trace_files(id).await?;
        let Some(newest) = files.last().map(|f| f.path.clone()) else {
            return Err(ApiError::session_not_found(id));
        };
        let kept = self.settings.load(id);
        // The index just found the newest file: the factory's resume opens it instead of
        // reading every date directory, a cost that grew with the sessions on disk.
        let location = match files.last().and_then(located) {
            Some(latest) => self.cfg.location.clone().with_known_trace(id, latest),
            None => self.cfg.location.clone(),
        };
        let req = LoadSession {
            location,
            session_id: id.to_owned(),
            sandbox: kept.sandbox,
            mcp_servers: kept.mcp_servers,
            durability: self.cfg.durability,
        };
        // What was stored with the session is no request of this client's: a stored request
        // that is invalid now leaves the session unrecoverable.
        // Loading reads the trace and builds the session's tools: off the async workers.
        let factory = self.cfg.factory.clone();
        let cluster = self.cfg.cluster.clone();
        let (me, owned) = (self.clone(), id.to_owned());
        let loaded = tokio::task::spawn_blocking(move || {
            let session = factory.load(&req);
            if let (Ok(s), Some(c)) = (&session, cluster) {
                c.attach(s.as_ref());
            }
            let first_prompt = me.index.head(&owned).and_then(|h| h.title.clone());
            (session, plan_in(&newest), first_prompt)
        })
        .await
        .map_err(|e| ApiError::internal(format!("loading session {id} failed: {e}")))?;
        let (loaded, plan, first_prompt) = loaded;
        let session = loaded.map_err(|e| match e {
            FactoryError::WorkspaceMissing(w) => ApiError::conflict(
                "workspace_missing",
                format!("the workspace {w} of session {id} no longer exists"),
            ),
            e @ (FactoryError::InvalidRequest { .. } | FactoryError::Unrecoverable(_)) => {
                ApiError::conflict("session_unrecoverable", e.to_string())
            }
            FactoryError::Internal(e) => {
                ApiError::internal(format!("cannot load session {id}: {e}"))
            }
        })?;
        let entry = self.insert(session, true);
        {
            let mut rt = entry.rt();
            rt.first_prompt = first_prompt;
            rt.plan = plan;
        }
        Ok(entry)
    }

    /// The lock that keeps two loads (or a load and a delete) of `id` apart.
    fn load_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.loading);
        // Locks nobody holds or waits for are dropped, so the map stays as small as the loads
        // in flight.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// The trace files of `id`, from the index, off the async workers.
    pub(crate) async fn trace_files(
        self: &Arc<Self>,
        id: &str,
    ) -> Result<Vec<TraceFile>, ApiError> {
        let (me, owned) = (self.clone(), id.to_owned());
        tokio::task::spawn_blocking(move || me.index.files(&owned))
            .await
            .map_err(|e| ApiError::internal(format!("the trace index failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("cannot look for session {id}: {e}")))
    }

    /// Writes a new session's head (`session_meta`) before it ever runs, so it exists in its
    /// trace from the start (a cluster node stores it before anyone may take the session).
    pub(crate) async fn store_head(&self, entry: &Arc<Entry>) -> Result<(), ApiError> {
        let e = entry.clone();
        tokio::task::spawn_blocking(move || {
            let session = e.session();
            session.writer().record_session_meta(e.meta.clone());
            session.writer().flush()
        })
        .await
        .map_err(|e| ApiError::internal(format!("storing the session failed: {e}")))?
        .map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "cluster_unavailable",
                format!("the session's head could not be stored: {e}"),
            )
        })?;
        entry.rt().has_trace = true;
        Ok(())
    }

    /// A loaded session, without counting it as used.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn loaded_entry_quiet(&self, id: &str) -> Option<Arc<Entry>> {
        lock(&self.entries).get(id).cloned()
    }

    /// Drops `id` from this process at once, writing nothing more for it: another node took
    /// it over (its lease was lost). Its running task is interrupted.
    pub(crate) fn evict(&self, id: &str) {
        let Some(e) = lock(&self.entries).remove(id) else {
            return;
        };
        e.rt().deleted = true;
        self.abort(&e);
        if let Some(background) = e.env.background() {
            background.kill_all();
        }
        self.cfg.hub.reclaim(id);
        self.index.unhost(id);
    }

    fn loaded_entry(&self, id: &str) -> Option<Arc<Entry>> {
        let e = lock(&self.entries).get(id).cloned()?;
        self.touch(&e);
        Some(e)
    }

    /// Hosted sessions, newest id first.
    pub(crate) fn loaded(&self) -> Vec<Arc<Entry>> {
        let mut v: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        v.sort_by(|a, b| b.id.cmp(&a.id));
        v
    }

    /// `PATCH`: what `patch` names changes, the rest stays.
    pub(crate) fn update(&self, entry: &Entry, patch: Patch) {
        let _p = lock(&entry.publish);
        {
            let mut rt = entry.rt();
            if rt.deleted {
                // Being deleted: writing its settings back would resurrect them.
                return;
            }
            if let Some(m) = patch.mode {
                rt.approval_mode = m;
            }
            if let Some(t) = &patch.title {
                rt.title = Some(t.clone());
            }
            if let Some(a) = patch.archived {
                rt.archived = a;
            }
            if let Some(p) = patch.pinned {
                rt.pinned = p;
            }
        }
        // Only what was patched is written: the CLI may have marked the file meanwhile.
        if let Err(e) = self.settings.change(&entry.id, |s| patch.apply(s)) {
            tracing::warn!(
                "[server] cannot save the settings of session {}: {e}",
                entry.id
            );
        }
        if let Some(c) = &self.cfg.cluster {
            c.changed(&entry.id);
        }
        if patch.archived.is_some() || patch.pinned.is_some() {
            let (archived, pinned) = {
                let rt = entry.rt();
                (rt.archived, rt.pinned)
            };
            self.publish_marks(&entry.id, archived, pinned);
        }
        if let Some(title) = patch.title {
            self.publish_title(&entry.id, title);
        }
    }

    fn publish_marks(&self, id: &str, archived: bool, pinned: bool) {
        let ev = ServerEvent::SessionMarked {
            session_id: id.to_owned(),
            archived,
            pinned,
        };
        self.channel(USER_CHANNEL).publish_server_event(&ev);
    }

    fn publish_title(&self, id: &str, title: String) {
        let ev = ServerEvent::SessionTitle {
            session_id: id.to_owned(),
            title,
        };
        self.channel(id).publish_server_event(&ev);
        self.channel(USER_CHANNEL).publish_server_event(&ev);
    }

    /// `PATCH` of a session this process has not loaded: its settings are changed on disk and
    /// it stays unloaded (its row as the index has it is returned). Archiving must not need a session that can load (its workspace may
    /// be gone: that is when people archive), nor cost one. `None` when it is loaded (or
    /// loading), or on a cluster node, where the owner writes the index: patch its entry.
    pub(crate) async fn patch_stored(
        self: &Arc<Self>,
        id: &str,
        patch: &Patch,
    ) -> Result<Option<Indexed>, ApiError> {
        if self.cfg.cluster.is_some() || !valid_session_id(id) || self.loaded_entry(id).is_some() {
            return Ok(None);
        }
        // A load that starts meanwhile reads the settings after they are written.
        let _loading = self.load_lock(id).lock_owned().await;
        if self.loaded_entry(id).is_some() {
            return Ok(None);
        }
        let (me, owned) = (self.clone(), id.to_owned());
        let stored = tokio::task::spawn_blocking(move || me.index.indexed(&owned))
            .await
            .map_err(|e| ApiError::internal(format!("the trace index failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("cannot look for session {id}: {e}")))?
            .ok_or_else(|| ApiError::session_not_found(id))?;
        let mut marks = (false, false);
        self.settings
            .change(id, |s| {
                patch.apply(s);
                marks = (s.archived, s.pinned);
            })
            .map_err(|e| ApiError::internal(format!("cannot save session {id}'s settings: {e}")))?;
        if patch.archived.is_some() || patch.pinned.is_some() {
            self.publish_marks(id, marks.0, marks.1);
        }
        if let Some(title) = patch.title.clone() {
            self.publish_title(id, title);
        }
        Ok(Some(stored))
    }

    /// `DELETE`: interrupts a running task, waits (bounded) for it to settle, forgets the
    /// session, closes its channel and removes its trace files.
    pub(crate) async fn delete(self: &Arc<Self>, entry: &Arc<Entry>) -> Result<(), ApiError> {
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
        let _loading = self.load_lock(&entry.id).lock_owned().await;
        let writer = entry.session().writer().clone();
        let flushed = tokio::task::spawn_blocking(move || writer.flush()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!("[server] flushing {} before delete: {e}", entry.id);
        }
        lock(&self.entries).remove(&entry.id);
        // Now, not when the last reference goes: a running background subagent holds its
        // launching task's approver, and with it this entry.
        if let Some(background) = entry.env.background() {
            background.kill_all();
        }
        // Before the answer: a client that deleted a session sees its end hooks done.
        let end = entry.session().end("delete");
        end.await;
        self.cfg.hub.reclaim(&entry.id);
        // Every file goes, the one its writer started since the last lookup too.
        self.index
            .writing(&entry.id, &entry.session().writer().current_path());
        for f in self.trace_files(&entry.id).await? {
            std::fs::remove_file(&f.path).map_err(|e| {
                ApiError::internal(format!("cannot remove {}: {e}", f.path.display()))
            })?;
        }
        self.index.remove(&entry.id);
        self.settings.remove(&entry.id);
        if let Some(c) = &self.cfg.cluster {
            c.deleted(&entry.id).await?;
        }
        Ok(())
    }

    /// Forks `entry`'s trace at `at` into a new session (idle sources only: a running trace is
    /// still growing), which keeps the source's approval mode and its title marked `(fork)`.
    /// Returns the new session's id.
    pub(crate) async fn fork(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        at: penguin_trace_store::ForkPoint,
    ) -> Result<String, ApiError> {
        use penguin_trace_store::ForkError;
        let (mode, title) = {
            let rt = entry.rt();
            if rt.status != SessionStatus::Idle {
                return Err(ApiError::conflict(
                    "task_in_progress",
                    ForkError::Running(entry.id.clone()).to_string(),
                ));
            }
            let title = rt.title.clone().or_else(|| rt.first_prompt.clone());
            (rt.approval_mode, title)
        };
        let writer = entry.session().writer().clone();
        let traces = self.cfg.location.traces_dir();
        let id = entry.id.clone();
        let me = self.clone();
        let forked = tokio::task::spawn_blocking(move || {
            writer.flush().map_err(|e| {
                ApiError::internal(format!(
                    "cannot write session {id}'s trace before forking: {e}"
                ))
            })?;
            let forked =
                penguin_trace_store::fork_session(&traces, &id, at).map_err(|err| match err {
                    ForkError::NotFound(_) => ApiError::session_not_found(&id),
                    ForkError::InvalidPoint(_) => {
                        ApiError::bad_request("invalid_fork_position", err.to_string())
                    }
                    other => ApiError::internal(format!("cannot fork session {id}: {other}")),
                })?;
            // Known at once: the fork is opened right after, by its id.
            me.index.wrote(&forked.session_id, &forked.files);
            Ok(forked)
        })
        .await
        .map_err(|e| ApiError::internal(format!("the fork failed: {e}")))??;
        self.settings.save(
            &forked.session_id,
            &Settings {
                approval_mode: Some(mode),
                title: title.map(|t| match t.ends_with(penguin_trace_store::FORK_MARK) {
                    true => t,
                    false => format!("{t}{}", penguin_trace_store::FORK_MARK),
                }),
                // A fork is a new session in the list: neither archived nor pinned.
                archived: false,
                pinned: false,
                ..self.settings.load(&entry.id)
            },
        );
        Ok(forked.session_id)
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
        let live = running.then(|| self.channel(&entry.id).live_snapshot());
        // Everything published so far was recorded (queued to the writer) before it was
        // published; the flush makes it readable.
        let session = entry.session();
        let writer = session.writer();
        let flush = writer.flush_handle();
        // A compaction moves the writer to a new file: the index looks for that one.
        self.index.writing(&entry.id, &writer.current_path());
        HistorySnapshot {
            live,
            pending,
            flush,
        }
    }

    /// Reclaims channels nobody listens to whose session is idle and that have been quiet for
    /// `idle_after` ([§5.1](penguin_omni_protocol::spec#s5.1), the channel hub's sweep). Returns
    /// the reclaimed keys.
    pub(crate) fn sweep_channels(&self, idle_after: Duration) -> Vec<String> {
        self.cfg
            .hub
            .sweep(std::time::Instant::now(), idle_after, |key| {
                // A cluster node's channel of a loaded session carries its ids on to the
                // cluster: it goes only with the session.
                lock(&self.entries).get(key).is_some_and(|e| {
                    self.cfg.cluster.is_some() || e.rt().status != SessionStatus::Idle
                })
            })
    }

    /// Interrupts every task and ends every stream (server shutdown).
    pub(crate) fn shutdown(&self) {
        for e in self.loaded() {
            self.abort(&e);
            match &self.cfg.cluster {
                // Its interrupted run's last events still go to the cluster on this channel;
                // the node reclaims it once the run settled (`Placement::leave`).
                Some(_) => {}
                None => {
                    self.cfg.hub.reclaim(&e.id);
                }
            }
        }
        if let Some(c) = &self.cfg.cluster {
            c.shutdown();
        }
        self.cfg.hub.reclaim(USER_CHANNEL);
    }
}

/// A file of the index as the trace store locates one (`<date>/<id>_<NNN>.jsonl`).
fn located(file: &TraceFile) -> Option<penguin_trace_store::LocatedTrace> {
    let date_dir = file.path.parent()?.file_name()?.to_str()?.to_owned();
    Some(penguin_trace_store::LocatedTrace {
        path: file.path.clone(),
        date_dir,
        index: file.index,
    })
}

/// The latest plan in a session's current trace file (an older context's plan is stale).
fn plan_in(path: &std::path::Path) -> Option<serde_json::Value> {
    let mut calls = HashMap::new();
    let mut plan = None;
    let read = penguin_trace_store::read_trace_each(
        path,
        penguin_trace_store::ReadMode::Tolerant,
        |_, m| {
            if let (false, Some(p)) = (m.has_origin(), m.model()) {
                crate::entry::plan_of(&mut calls, &mut plan, p);
            }
        },
    );
    read.ok().and(plan)
}

/// `workspace` resolved (symlinks and `..` included) and checked to lie under `root`.
fn confined_workspace(
    root: &std::path::Path,
    workspace: &str,
) -> Result<std::path::PathBuf, ApiError> {
    let refuse = |why: &str| {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "workspace: {workspace} {why}; workspaces must lie under {} (penguin serve --workspace-root)",
                root.display()
            ),
        )
    };
    let path = std::path::Path::new(workspace);
    let path = if path.is_relative() {
        root.join(path)
    } else {
        path.to_path_buf()
    };
    let real = path
        .canonicalize()
        .map_err(|_| refuse("is not an existing directory"))?;
    let root = root
        .canonicalize()
        .map_err(|e| ApiError::internal(format!("the workspace root {}: {e}", root.display())))?;
    if real.starts_with(&root) && real.is_dir() {
        Ok(real)
    } else {
        Err(refuse("is outside the workspace root"))
    }
}

#[cfg(test)]
mod tests {
    use super::valid_session_id;

    #[test]
    fn session_ids_are_one_safe_path_segment() {
        assert!(valid_session_id("session-2026-01-01-00-00-00-0123abcd"));
        for bad in ["", "..", "a/b", "a\\b", "a.b", "%2e%2e", &"x".repeat(129)] {
            assert!(!valid_session_id(bad), "{bad:?}");
        }
    }
}
