//! Checkpoints of the workspace as each task starts and as it ends
//! ([`Session::enable_checkpoints`]), so a rewind can put the files back as they were and tell
//! the session's changes from those made between its tasks (`crate::rewind`,
//! `docs/rewind.md`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::stream::{BoxStream, StreamExt};
use penguin_omni_protocol::Frame;
use penguin_tools::checkpoint::{self, Limits, Manifest, Store};

use super::Session;

/// A session's checkpoints: where they go, and the last one taken by this load (which spares
/// hashing unchanged files again).
#[derive(Clone, Debug)]
pub(super) struct Checkpoints {
    store: Store,
    limits: Limits,
    last: Arc<Mutex<Option<Manifest>>>,
}

impl Checkpoints {
    /// Where they are kept.
    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    /// The workspace as it is now, kept as one of session `id`'s checkpoints. A failure is
    /// logged and the task runs: a missing checkpoint costs a rewind, not the work.
    fn take(&self, id: &str, workspace: &Path, after_task: bool) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let taken = checkpoint::take(workspace, &self.store, last.as_ref(), &self.limits).and_then(
            |mut m| {
                m.after_task = after_task;
                self.store.save(id, &m).map(|_| m)
            },
        );
        match taken {
            Ok(m) => *last = Some(m),
            Err(e) => tracing::warn!(
                "[session] {id}: no checkpoint of {} {} this task: {e}",
                workspace.display(),
                if after_task { "after" } else { "before" }
            ),
        }
    }
}

impl Session {
    /// Takes a checkpoint of the workspace in `store` before each task, and another as it
    /// ends, from now on, as `config.toml`'s `[checkpoints]` defaults have them. A session
    /// whose tools do not touch the workspace (a scenario's scripted ones) needs none.
    pub fn enable_checkpoints(&mut self, store: Store) {
        self.enable_checkpoints_as(store, &crate::config::CheckpointsEntry::default());
    }

    /// [`Session::enable_checkpoints`] as `[checkpoints]` says (none when it turns them
    /// off). The store is kept within its bound as it is opened (off the caller's thread: it
    /// reads every session's checkpoints).
    pub fn enable_checkpoints_as(
        &mut self,
        store: Store,
        config: &crate::config::CheckpointsEntry,
    ) {
        if !config.enabled() {
            return;
        }
        let (pruning, id, bound) = (store.clone(), self.id.clone(), config.store_max_bytes());
        let _ = std::thread::Builder::new()
            .name("penguin-checkpoint-prune".into())
            .spawn(move || match pruning.prune(bound, &id) {
                Ok(p) if !p.sessions.is_empty() || p.objects > 0 => tracing::info!(
                    "[session] checkpoints pruned: {} session(s) dropped ({}), {} content(s), {} bytes",
                    p.sessions.len(),
                    p.sessions.join(", "),
                    p.objects,
                    p.bytes
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!("[session] pruning the checkpoints: {e}"),
            });
        self.checkpoints = Some(Checkpoints {
            store,
            limits: config.limits(),
            last: Arc::default(),
        });
    }

    /// The checkpoint before a task.
    pub(super) fn take_checkpoint(&mut self) {
        if let Some(cp) = &self.checkpoints {
            cp.take(&self.id, Path::new(&self.session_meta.workspace), false);
        }
    }

    /// A task's stream, ending once the checkpoint after the task is taken: what changed
    /// between it and the next task's is someone else's doing, which a rewind keeps.
    pub(super) fn checkpoint_after(
        &self,
        stream: BoxStream<'static, Frame>,
    ) -> BoxStream<'static, Frame> {
        let Some(cp) = self.checkpoints.clone() else {
            return stream;
        };
        let (id, workspace) = (self.id.clone(), PathBuf::from(&self.session_meta.workspace));
        let after = futures::stream::once(async move {
            let _ = tokio::task::spawn_blocking(move || cp.take(&id, &workspace, true)).await;
        })
        .filter_map(|()| async { None });
        stream.chain(after).boxed()
    }

    /// Its workspace's files as before task `to` (see `crate::rewind`): the plan, and with
    /// `apply` the paths that failed once it was carried out (the paths changed between its
    /// tasks, `yours`, only `with_yours`). `None` when it keeps no checkpoints.
    pub fn rewind_files(
        &self,
        to: usize,
        apply: bool,
        with_yours: bool,
    ) -> Option<Result<(crate::rewind::FilesPlan, Vec<String>), String>> {
        let cp = self.checkpoints.as_ref()?;
        let workspace = Path::new(&self.session_meta.workspace);
        let rewind = || -> Result<(crate::rewind::FilesPlan, Vec<String>), String> {
            // What the writer holds is on disk before the trace is read for its tasks.
            self.writer.flush().map_err(|e| format!("the trace: {e}"))?;
            let plan =
                crate::rewind::plan_files(&cp.store, &self.traces_dir(), &self.id, to, workspace)
                    .map_err(|e| e.to_string())?;
            let failed = match apply {
                true => plan
                    .apply(workspace, &cp.store, with_yours)
                    .map_err(|e| e.to_string())?,
                false => Vec::new(),
            };
            Ok((plan, failed))
        };
        Some(rewind())
    }
}
