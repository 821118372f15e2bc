//! A checkpoint of the workspace before each task ([`Session::enable_checkpoints`]), so a
//! rewind can put the files back as they were (`crate::rewind`, `docs/rewind.md`).

use std::path::Path;

use penguin_tools::checkpoint::{self, Limits, Manifest, Plan, Store};

use super::Session;

/// A session's checkpoints: where they go, and the last one taken by this load (which spares
/// hashing unchanged files again).
#[derive(Debug)]
pub(super) struct Checkpoints {
    store: Store,
    last: Option<Manifest>,
}

impl Session {
    /// Takes a checkpoint of the workspace in `store` before each task from now on. A session
    /// whose tools do not touch the workspace (a scenario's scripted ones) needs none.
    pub fn enable_checkpoints(&mut self, store: Store) {
        self.checkpoints = Some(Checkpoints { store, last: None });
    }

    /// The workspace as it is now, kept as this session's next checkpoint. A failure is
    /// logged and the task runs: a missing checkpoint costs a rewind, not the work.
    pub(super) fn take_checkpoint(&mut self) {
        let Some(cp) = &mut self.checkpoints else {
            return;
        };
        let workspace = Path::new(&self.session_meta.workspace);
        let taken = checkpoint::take(workspace, &cp.store, cp.last.as_ref(), &Limits::default())
            .and_then(|m| cp.store.save(&self.id, &m).map(|_| m));
        match taken {
            Ok(m) => cp.last = Some(m),
            Err(e) => tracing::warn!(
                "[session] {}: no checkpoint of {} before this task: {e}",
                self.id,
                workspace.display()
            ),
        }
    }

    /// Its workspace's files as before task `to` (see `crate::rewind`): the plan, and with
    /// `apply` the paths that failed once it was carried out. `None` when it keeps no
    /// checkpoints.
    pub fn rewind_files(
        &self,
        to: usize,
        apply: bool,
    ) -> Option<Result<(Plan, Vec<String>), String>> {
        let cp = self.checkpoints.as_ref()?;
        let workspace = Path::new(&self.session_meta.workspace);
        let rewind = || -> Result<(Plan, Vec<String>), String> {
            // What the writer holds is on disk before the trace is read for its tasks.
            self.writer.flush().map_err(|e| format!("the trace: {e}"))?;
            let (target, _damaged) =
                crate::rewind::checkpoint_before(&cp.store, &self.traces_dir(), &self.id, to)
                    .map_err(|e| e.to_string())?;
            let plan =
                checkpoint::plan(workspace, &cp.store, &target).map_err(|e| e.to_string())?;
            let failed = match apply {
                true => checkpoint::apply(workspace, &cp.store, &target, &plan)
                    .map_err(|e| e.to_string())?,
                false => Vec::new(),
            };
            Ok((plan, failed))
        };
        Some(rewind())
    }
}
