//! Checkpoints of a workspace, and rewinding it to one.
//!
//! A checkpoint is what a workspace held at one moment (a session takes one before each task):
//! every file's content, permission bits and kind, every link's target, every folder. Contents
//! go to a content-addressed [`Store`] (SHA-256; a content already stored is not stored
//! again, so a checkpoint costs only what changed since the last one), and the checkpoint
//! itself is a [`Manifest`] naming them.
//!
//! What a checkpoint leaves out, and rewinding never touches: `.git/` and `.penguin/`, what
//! the workspace's ignore files (`.gitignore`, `.ignore`, `.git/info/exclude`) exclude
//! (build output, dependencies), and any file larger than [`Limits::max_file_bytes`] or past
//! [`Limits::max_new_bytes`] of new content in one checkpoint; the manifest lists those it
//! skipped, and a rewind says it leaves them as they are.
//!
//! Rewinding ([`plan`], then [`apply`]) goes through the workspace's [`Dir`](crate::confined::Dir), the
//! same door the file tools use: no path, link or race leads it outside the workspace.
//!
//! ```
//! use penguin_tools::checkpoint::{self, Limits, Store};
//! # let ws = tempfile::tempdir().unwrap();
//! # let data = tempfile::tempdir().unwrap();
//! let store = Store::new(data.path());
//! std::fs::write(ws.path().join("a.txt"), "one").unwrap();
//! let before = checkpoint::take(ws.path(), &store, None, &Limits::default()).unwrap();
//! std::fs::write(ws.path().join("a.txt"), "two").unwrap();
//! std::fs::write(ws.path().join("new.txt"), "made").unwrap();
//! let plan = checkpoint::plan(ws.path(), &store, &before).unwrap();
//! assert_eq!(plan.restore, ["a.txt"]);
//! assert_eq!(plan.remove, ["new.txt"]);
//! checkpoint::apply(ws.path(), &store, &before, &plan).unwrap();
//! assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "one");
//! assert!(!ws.path().join("new.txt").exists());
//! ```

mod restore;
mod store;
mod walk;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use restore::{apply, plan, Plan};
pub use store::{Pruned, Store};
pub use walk::take;

/// One path of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A regular file: its content's hash in the [`Store`], its size and permission bits, and
    /// its modification time (to skip hashing it again while it is unchanged).
    File {
        /// SHA-256 of the content, hex.
        hash: String,
        /// Bytes.
        size: u64,
        /// Permission bits (`0o755`).
        mode: u32,
        /// Modification time, nanoseconds since the epoch.
        mtime_ns: i64,
    },
    /// A symbolic link and where it points (not followed).
    Link {
        /// The link's target, as stored in it.
        target: String,
    },
    /// A folder and its permission bits.
    Dir {
        /// Permission bits.
        mode: u32,
    },
}

/// A path a checkpoint left out, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Workspace-relative path.
    pub path: String,
    /// Why (`larger than 16 MiB`, `unreadable: …`).
    pub why: String,
}

/// What a workspace held when the checkpoint was taken.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// When, in milliseconds since the epoch.
    pub taken_at_ms: u64,
    /// Every path kept, workspace-relative with `/`, in order.
    pub entries: BTreeMap<String, Entry>,
    /// What was left out though not ignored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Taken as a task ended (a session's others are taken as one starts): what differs
    /// between it and the next task's first is what someone else changed in between.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_task: bool,
    /// Taken as a rewind began: what differs between the checkpoint before it and this one is
    /// someone else's change too, and it is no task's start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_rewind: bool,
    /// It kept what the workspace's ignore files exclude too ([`Limits::include_ignored`]):
    /// a rewind to it then covers those paths as well.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_ignored: bool,
}

impl Manifest {
    /// The paths that differ between `self` and `later`: content, permission bits, kind, a
    /// link's target, made or gone (modification times aside).
    pub fn changed_in(&self, later: &Manifest) -> Vec<String> {
        let same = |a: &Entry, b: &Entry| match (a, b) {
            (
                Entry::File { hash, mode, .. },
                Entry::File {
                    hash: h2, mode: m2, ..
                },
            ) => hash == h2 && mode == m2,
            (a, b) => a == b,
        };
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter(|(path, entry)| !later.entries.get(*path).is_some_and(|e| same(entry, e)))
            .map(|(path, _)| path.clone())
            .collect();
        out.extend(
            later
                .entries
                .keys()
                .filter(|path| !self.entries.contains_key(*path))
                .cloned(),
        );
        out.sort();
        out
    }
}

/// The bounds of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A larger file is left out (and left alone by a rewind). Default 16 MiB.
    pub max_file_bytes: u64,
    /// New content stored by one checkpoint at most; files past it are left out. Default
    /// 256 MiB.
    pub max_new_bytes: u64,
    /// Keep what the workspace's ignore files exclude too (build output, dependencies: large,
    /// and usually rebuilt rather than kept). Default off.
    pub include_ignored: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_file_bytes: 16 << 20,
            max_new_bytes: 256 << 20,
            include_ignored: false,
        }
    }
}

/// What penguin keeps of its own in a workspace, and git's folder: never checkpointed or
/// rewound.
const OWN_FOLDERS: [&str; 2] = [".git", ".penguin"];
