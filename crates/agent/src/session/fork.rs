//! Forking a session at a task boundary: [`Session::fork`], a copy of its trace up to the end
//! of one of its completed tasks, as a new session (`penguin_trace_store::fork_session`).

use std::path::PathBuf;

use penguin_trace_store::{fork_session, ForkError, ForkPoint, Forked};

use super::Session;

impl Session {
    /// A new session whose trace is this one's up to the end of the task `at` names (the
    /// whole session with [`ForkPoint::End`], the N-th completed task with
    /// [`ForkPoint::Task`], or the task whose final reply is a history `tracePosition` with
    /// [`ForkPoint::Position`]); see [`penguin_trace_store::fork_session`]. The new session
    /// starts unloaded: resume it by its id ([`Forked::session_id`]) like any stored one.
    /// Refused while a task runs ([`ForkError::Running`]).
    pub fn fork(&self, at: ForkPoint) -> Result<Forked, ForkError> {
        if self.engine.is_running() {
            return Err(ForkError::Running(self.id.clone()));
        }
        // What the writer holds is on disk before it is copied.
        if let Err(e) = self.writer.flush() {
            tracing::warn!("[session] syncing {} before a fork: {e}", self.id);
        }
        fork_session(&self.traces_dir(), &self.id, at)
    }

    /// `<root>/<project>/agents/<agent>/traces`: the writer's file is `<date>/<id>_NNN.jsonl`
    /// below it.
    pub(super) fn traces_dir(&self) -> PathBuf {
        let path = self.writer.current_path();
        path.parent()
            .and_then(|date| date.parent())
            .map(PathBuf::from)
            .unwrap_or_default()
    }
}
