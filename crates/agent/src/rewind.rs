//! Rewinding a session (`docs/rewind.md`): its workspace back to the checkpoint taken before a
//! task, and its conversation to a fork after the task before. Tasks are counted from 1 as
//! `penguin fork --at` counts them (completed tasks), and "to N" means "as before task N ran":
//! the files as right after task N-1's reply, the conversation forked at N-1.

use penguin_tools::checkpoint::{Manifest, Store};
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
    checkpoints
        .into_iter()
        .find(|m| m.taken_at_ms >= after_ms)
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
