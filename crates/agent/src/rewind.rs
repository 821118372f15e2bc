//! Rewinding a session (`docs/rewind.md`): its workspace back to the checkpoint taken before a
//! task, and its conversation to a fork after the task before. Tasks are counted from 1 as
//! `penguin fork --at` counts them (completed tasks), and "to N" means "as before task N ran":
//! the files as right after task N-1's reply, the conversation forked at N-1.

use std::collections::BTreeSet;
use std::path::Path;

use penguin_tools::checkpoint::{self, Manifest, Plan, Store};
use penguin_trace_store::{completed_tasks, ForkError, TraceLocation};

/// Why a session cannot be rewound to a task.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewindError {
    /// Tasks count from 1.
    #[error("task numbers start at 1")]
    Zero,
    /// The session has fewer completed tasks than the one asked for.
    #[error("session {session} has {completed} completed task(s); --to takes 1 to {}", completed + 1)]
    NoSuchTask {
        /// The session.
        session: String,
        /// Its completed tasks.
        completed: usize,
    },
    /// No checkpoint was taken at that point (the session ran before checkpoints existed, or
    /// without the built-in tools, or the checkpoint failed).
    #[error("no checkpoint of the workspace from before task {task} of {session} (checkpoints are taken before each task of a session with the built-in tools)")]
    NoCheckpoint {
        /// The session.
        session: String,
        /// The task.
        task: usize,
    },
    /// The session's trace could not be read.
    #[error(transparent)]
    Trace(#[from] ForkError),
    /// The checkpoint store could not be read.
    #[error("the checkpoints: {0}")]
    Store(#[from] std::io::Error),
}

/// Where the sessions of `location` keep their checkpoints: beside the traces
/// (`<root>/<project>/agents/<agent>/checkpoints`), never in the workspace.
pub fn checkpoint_store(location: &TraceLocation) -> Store {
    Store::new(
        location
            .root
            .join(&location.project)
            .join("agents")
            .join(&location.agent)
            .join("checkpoints"),
    )
}

/// `Agent::checkpoint_before` for a session whose checkpoints are in `store` and whose trace
/// is under `traces_dir`.
pub fn checkpoint_before(
    store: &Store,
    traces_dir: &std::path::Path,
    id: &str,
    task: usize,
) -> Result<(Manifest, Vec<String>), RewindError> {
    if task == 0 {
        return Err(RewindError::Zero);
    }
    let tasks = completed_tasks(traces_dir, id)?;
    // Task N+1 is the one a session would run next: "before it" is now, after task N.
    if task > tasks.len() + 1 {
        return Err(RewindError::NoSuchTask {
            session: id.to_owned(),
            completed: tasks.len(),
        });
    }
    let after_ms = match task {
        1 => 0,
        n => timestamp_ms(&tasks[n - 2].timestamp),
    };
    let (checkpoints, damaged) = store.list(id)?;
    let since = || checkpoints.iter().filter(|m| m.taken_at_ms >= after_ms);
    // The one taken as task N began; for the task after the last, the one taken as the last
    // ended (or as a rewind left the files since).
    since()
        .find(|m| !m.after_task && !m.before_rewind)
        .or_else(|| {
            (task == tasks.len() + 1)
                .then(|| since().rfind(|m| m.after_task))
                .flatten()
        })
        .cloned()
        .map(|m| (m, damaged))
        .ok_or(RewindError::NoCheckpoint {
            session: id.to_owned(),
            task,
        })
}

/// A trace timestamp in milliseconds since the epoch (0 when it does not parse: every
/// checkpoint is after it).
fn timestamp_ms(ts: &str) -> u64 {
    chrono::DateTime::parse_from_rfc3339(ts)
        .map(|t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
        .unwrap_or(0)
}

/// A rewind of a session's files, planned: nothing is changed yet.
#[derive(Clone, Debug)]
pub struct FilesPlan {
    /// The checkpoint the files go back to.
    pub target: Manifest,
    /// Everything that differs from it now.
    pub plan: Plan,
    /// Of those, the paths changed between the session's tasks (by a person, or anything
    /// else that was not one of its tasks), from the checkpoints taken as each task ended
    /// and as the next began: kept unless asked for.
    pub yours: Vec<String>,
    /// Checkpoints that could not be read (passed over).
    pub damaged: Vec<String>,
    /// The session.
    pub session: String,
}

impl FilesPlan {
    /// The changes to make: everything, or everything but [`FilesPlan::yours`].
    pub fn changes(&self, with_yours: bool) -> Plan {
        let mut plan = self.plan.clone();
        if !with_yours {
            let yours: BTreeSet<&String> = self.yours.iter().collect();
            plan.restore.retain(|p| !yours.contains(p));
            plan.remove.retain(|p| !yours.contains(p));
        }
        plan
    }

    /// Makes the changes; the paths that failed. The files as the rewind leaves them count
    /// as the session's from then on (a checkpoint as after a task), so a later rewind does not
    /// take what this one put back for someone else's change.
    pub fn apply(
        &self,
        workspace: &Path,
        store: &Store,
        with_yours: bool,
    ) -> std::io::Result<Vec<String>> {
        // Like a task, the rewind is framed by two checkpoints: what changed before it since
        // the last task is someone else's, what it leaves counts as the session's.
        let limits = checkpoint::Limits::default();
        let mut before = checkpoint::take(workspace, store, Some(&self.target), &limits)?;
        before.before_rewind = true;
        store.save(&self.session, &before)?;
        let failed = checkpoint::apply(workspace, store, &self.target, &self.changes(with_yours))?;
        let mut after = checkpoint::take(workspace, store, Some(&before), &limits)?;
        after.after_task = true;
        store.save(&self.session, &after)?;
        Ok(failed)
    }
}

/// What putting session `id`'s `workspace` back as before task `to` changes, with the paths
/// someone else changed between its tasks apart ([`FilesPlan::yours`]).
pub fn plan_files(
    store: &Store,
    traces_dir: &Path,
    id: &str,
    to: usize,
    workspace: &Path,
) -> Result<FilesPlan, RewindError> {
    let (target, damaged) = checkpoint_before(store, traces_dir, id, to)?;
    let plan = checkpoint::plan(workspace, store, &target)?;
    let (all, _) = store.list(id)?;
    let since: Vec<&Manifest> = all
        .iter()
        .filter(|m| m.taken_at_ms >= target.taken_at_ms)
        .collect();
    let mut between = BTreeSet::new();
    for pair in since.windows(2) {
        if pair[0].after_task && !pair[1].after_task {
            between.extend(pair[0].changed_in(pair[1]));
        }
    }
    // Since the last task ended (none running: its checkpoint is the last).
    if let Some(last) = since.last().filter(|m| m.after_task) {
        let now = checkpoint::plan(workspace, store, last)?;
        between.extend(now.restore);
        between.extend(now.remove);
    }
    let yours = plan
        .restore
        .iter()
        .chain(&plan.remove)
        .filter(|p| between.contains(*p))
        .cloned()
        .collect();
    Ok(FilesPlan {
        target,
        plan,
        yours,
        damaged,
        session: id.to_owned(),
    })
}
