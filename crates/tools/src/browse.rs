//! A workspace as a person browses it (the server's files panel): one folder's entries, one
//! file opened to be shown or downloaded, and what changed since a checkpoint with its diffs.
//!
//! Every path goes the way the file tools' paths go: checked by the same confinement
//! (`path.rs`: no `..` or absolute path out of the workspace, no link out of it, nothing in
//! penguin's own state, its data root, wherever that lies), then used only through the
//! workspace's [`confined::Dir`](crate::confined::Dir), so a link swapped in after the check
//! is refused rather than followed. A listing honours the ignore files as `list_files` does
//! and leaves out `.git` and penguin's state.
//!
//! ```
//! use penguin_tools::browse::{Browse, EntryKind};
//! # let ws = tempfile::tempdir().unwrap();
//! std::fs::write(ws.path().join(".gitignore"), "target/\n").unwrap();
//! std::fs::create_dir(ws.path().join("target")).unwrap();
//! std::fs::write(ws.path().join("a.txt"), "hello").unwrap();
//! let browse = Browse::new(ws.path(), &[]).unwrap();
//! let names: Vec<_> = browse.list("").unwrap().entries.into_iter().map(|e| e.name).collect();
//! assert_eq!(names, [".gitignore", "a.txt"]);
//! assert_eq!(browse.open("a.txt").unwrap().size, 5);
//! assert!(browse.open("../etc/passwd").is_err());
//! ```

use std::fs::{File, Metadata};
use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::{Entry, Manifest, Store};
use crate::confined::{Dir, Kind};
use crate::files::diff::{counts, unified_within, NO_FILE};
use crate::files::sniff;
use crate::path::Workspace;
use crate::search::walk::{ignored, rules_down_to};

/// The largest side of a change read to diff it (a checkpoint keeps no larger file either).
const MAX_DIFF_FILE_BYTES: u64 = 16 << 20;
/// Most lines of one change's diff shown to a person.
const MAX_DIFF_LINES: usize = 5_000;
/// Most bytes of one change's diff.
const MAX_DIFF_CHARS: usize = 512 << 10;

/// A workspace opened to be browsed.
#[derive(Clone, Debug)]
pub struct Browse {
    ws: Workspace,
}

/// Why a path cannot be listed or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrowseError {
    /// The path leads out of the workspace or into penguin's own state (by `..`, by being
    /// absolute, or through a link), or a link was swapped into it: the confinement's words.
    #[error("{0}")]
    Refused(String),
    /// Nothing is there.
    #[error("{0}: no such file or directory in the workspace")]
    NotFound(String),
    /// Something is there, but not what was asked for (a file to list, a folder or a FIFO to
    /// read).
    #[error("{path} is {what}")]
    WrongKind {
        /// The path, relative to the workspace.
        path: String,
        /// What it is, and what was expected (`a directory, not a file`).
        what: String,
    },
    /// Reading failed otherwise.
    #[error("{path}: {source}")]
    Io {
        /// The path, relative to the workspace.
        path: String,
        /// Why.
        source: io::Error,
    },
}

/// What an entry is (a link is a link, never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    /// As the API spells it: `file`, `dir`, `symlink`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        }
    }
}

/// One entry of a listed folder.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Its name in the folder.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes (a link's own size).
    pub size: u64,
    /// Its modification time, milliseconds since the epoch.
    pub mtime_ms: Option<u64>,
    /// Where a link points, as stored in it.
    pub target: Option<String>,
}

/// A folder's entries: folders first, then by name.
#[derive(Clone, Debug)]
pub struct Listing {
    /// The folder, relative to the workspace (`""`: its root).
    pub path: String,
    /// Its entries, ignored ones and penguin's state left out.
    pub entries: Vec<Listed>,
}

/// A regular file, opened through the door (the handle is what is read, so what was checked
/// is what is served).
#[derive(Debug)]
pub struct Opened {
    /// The file, relative to the workspace (links resolved).
    pub path: String,
    /// Open to read.
    pub file: File,
    /// Its size in bytes when opened.
    pub size: u64,
    /// Its modification time, milliseconds since the epoch.
    pub mtime_ms: Option<u64>,
}

/// How a path differs from a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Not in the checkpoint, here now.
    Added,
    /// In both, different.
    Modified,
    /// In the checkpoint, gone now.
    Deleted,
}

impl ChangeKind {
    /// As the API spells it: `added`, `modified`, `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        }
    }
}

/// One path changed since a checkpoint.
#[derive(Clone, Debug)]
pub struct Change {
    /// Relative to the workspace.
    pub path: String,
    /// How.
    pub kind: ChangeKind,
    /// Lines added and removed (0 for a binary file).
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// The unified diff (`a/`, `b/` labels, `/dev/null` for a side that does not exist);
    /// `None` with [`Change::note`] saying why (binary, too large).
    pub diff: Option<String>,
    /// Why there is no diff.
    pub note: Option<String>,
}

fn mtime_ms(meta: &Metadata) -> Option<u64> {
    let t = meta.modified().ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(d.as_millis()).ok()
}

impl Browse {
    /// The workspace at `root`, with `protected` (penguin's data root, wherever it is) never
    /// shown or read. Both are made canonical here, so every alias of them is judged alike.
    pub fn new(root: &Path, protected: &[PathBuf]) -> io::Result<Browse> {
        Ok(Browse {
            ws: Workspace {
                root: std::fs::canonicalize(root)?,
                protected: protected
                    .iter()
                    .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
                    .collect(),
                ..Workspace::default()
            },
        })
    }

    /// The workspace's canonical root.
    pub fn root(&self) -> &Path {
        &self.ws.root
    }

    /// `given` checked, its door, and how it reads relative to the workspace.
    fn door(&self, given: &str) -> Result<(Dir, PathBuf, String), BrowseError> {
        let given = if given.is_empty() { "." } else { given };
        let full = self.ws.resolve(given).map_err(BrowseError::Refused)?;
        let shown = full
            .strip_prefix(&self.ws.root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (dir, rel) = self.ws.door(&full).map_err(|source| BrowseError::Io {
            path: shown.clone(),
            source,
        })?;
        Ok((dir, rel, shown))
    }

    fn failed(shown: &str, e: io::Error) -> BrowseError {
        if let Some(why) = crate::confined::explain(&e) {
            return BrowseError::Refused(format!("{shown}: {why}"));
        }
        match e.kind() {
            io::ErrorKind::NotFound => BrowseError::NotFound(shown.to_owned()),
            _ => BrowseError::Io {
                path: shown.to_owned(),
                source: e,
            },
        }
    }

    /// The entries of the folder `path` (relative to the workspace, or absolute within it;
    /// `""` is its root).
    pub fn list(&self, path: &str) -> Result<Listing, BrowseError> {
        let (root, rel, shown) = self.door(path)?;
        let meta = root.metadata(&rel).map_err(|e| Self::failed(&shown, e))?;
        if !meta.is_dir() {
            return Err(BrowseError::WrongKind {
                path: shown,
                what: format!("{}, not a directory", what(&meta)),
            });
        }
        let rules = rules_down_to(&root, &rel).map_err(|e| Self::failed(&shown, e))?;
        let dir = root.open_dir(&rel).map_err(|e| Self::failed(&shown, e))?;
        let at = self.ws.root.join(&rel);
        let mut entries = Vec::new();
        for entry in dir.entries().map_err(|e| Self::failed(&shown, e))? {
            let path = at.join(&entry.name);
            if entry.name == ".git"
                || self.ws.is_hidden(&path)
                || ignored(&rules, &path, entry.kind == Kind::Dir)
            {
                continue;
            }
            // Gone since the folder was read: not there to show.
            let Ok(meta) = dir.metadata(&entry.name) else {
                continue;
            };
            let kind = match entry.kind {
                Kind::File => EntryKind::File,
                Kind::Dir => EntryKind::Dir,
                Kind::Link => EntryKind::Symlink,
                Kind::Other => EntryKind::Other,
            };
            entries.push(Listed {
                name: entry.name.to_string_lossy().into_owned(),
                kind,
                size: meta.len(),
                mtime_ms: mtime_ms(&meta),
                target: (kind == EntryKind::Symlink)
                    .then(|| dir.read_link(&entry.name).ok())
                    .flatten()
                    .map(|t| t.to_string_lossy().into_owned()),
            });
        }
        entries.sort_by(|a, b| {
            (a.kind != EntryKind::Dir, &a.name).cmp(&(b.kind != EntryKind::Dir, &b.name))
        });
        Ok(Listing {
            path: shown,
            entries,
        })
    }

    /// The regular file `path`, open to read: a folder, FIFO, socket or device is refused
    /// without blocking.
    pub fn open(&self, path: &str) -> Result<Opened, BrowseError> {
        let (root, rel, shown) = self.door(path)?;
        let meta = root.metadata(&rel).map_err(|e| Self::failed(&shown, e))?;
        if !meta.is_file() {
            return Err(BrowseError::WrongKind {
                path: shown,
                what: format!("{}, not a file", what(&meta)),
            });
        }
        let file = root.open_file(&rel).map_err(|e| match e.kind() {
            // Swapped for something else since it was looked at.
            io::ErrorKind::InvalidInput => BrowseError::WrongKind {
                path: shown.clone(),
                what: e.to_string(),
            },
            _ => Self::failed(&shown, e),
        })?;
        let meta = file.metadata().map_err(|e| Self::failed(&shown, e))?;
        Ok(Opened {
            path: shown,
            size: meta.len(),
            mtime_ms: mtime_ms(&meta),
            file,
        })
    }

    /// How each of `paths` (relative to the workspace) differs now from the checkpoint
    /// `since` (whose contents are in `store`), with its diff. Folders are left out (their
    /// files say what changed), and so is penguin's own state; a path that a link now leads
    /// through is read as gone (the door follows no link).
    pub fn changes(&self, store: &Store, since: &Manifest, paths: &[String]) -> Vec<Change> {
        paths
            .iter()
            // penguin's own state is no change of the session's, even where a checkpoint
            // kept it (a data root inside the workspace).
            .filter(|path| !self.ws.is_hidden(&self.ws.root.join(path)))
            .filter_map(|path| {
                let old = since
                    .entries
                    .get(path)
                    .and_then(|e| self.old_side(store, e));
                let new = self.new_side(path);
                let kind = match (&old, &new) {
                    (None, None) => return None,
                    (None, Some(_)) => ChangeKind::Added,
                    (Some(_), None) => ChangeKind::Deleted,
                    (Some(_), Some(_)) => ChangeKind::Modified,
                };
                Some(diff(path, kind, old, new))
            })
            .collect()
    }

    /// A checkpoint's side of a change: a file's bytes, a link as the text of its target.
    fn old_side(&self, store: &Store, entry: &Entry) -> Option<Side> {
        match entry {
            Entry::File { hash, .. } => Some(
                store
                    .get(hash)
                    .map(Side::Bytes)
                    .unwrap_or_else(|e| Side::Unreadable(e.to_string())),
            ),
            Entry::Link { target } => Some(Side::Link(target.clone())),
            Entry::Dir { .. } => None,
        }
    }

    /// The workspace's side of a change, read through the door.
    fn new_side(&self, path: &str) -> Option<Side> {
        let (root, rel) = self.ws.door(&self.ws.root.join(path)).ok()?;
        let meta = root.metadata(&rel).ok()?;
        let t = meta.file_type();
        if t.is_symlink() {
            return root
                .read_link(&rel)
                .ok()
                .map(|t| Side::Link(t.to_string_lossy().into_owned()));
        }
        if !t.is_file() {
            return None;
        }
        Some(match root.read(&rel, MAX_DIFF_FILE_BYTES) {
            Ok(bytes) => Side::Bytes(bytes),
            Err(e) => Side::Unreadable(e.to_string()),
        })
    }
}

/// One side of a change.
enum Side {
    Bytes(Vec<u8>),
    Link(String),
    Unreadable(String),
}

impl Side {
    /// As text to diff, or why it cannot be.
    fn text(&self) -> Result<String, String> {
        match self {
            Side::Bytes(b) => match sniff::binary(b) {
                Some(why) => Err(format!("binary ({why})")),
                None => Ok(String::from_utf8_lossy(b).into_owned()),
            },
            Side::Link(target) => Ok(format!("symbolic link to {target}\n")),
            Side::Unreadable(why) => Err(format!("not read: {why}")),
        }
    }
}

fn diff(path: &str, kind: ChangeKind, old: Option<Side>, new: Option<Side>) -> Change {
    let text = |s: &Option<Side>| s.as_ref().map_or(Ok(String::new()), Side::text);
    let (from, to) = match kind {
        ChangeKind::Added => (NO_FILE, path),
        ChangeKind::Deleted => (path, NO_FILE),
        ChangeKind::Modified => (path, path),
    };
    let mut change = Change {
        path: path.to_owned(),
        kind,
        added: 0,
        removed: 0,
        diff: None,
        note: None,
    };
    match (text(&old), text(&new)) {
        (Ok(old), Ok(new)) => {
            (change.added, change.removed) = counts(&old, &new);
            change.diff = unified_within(from, to, &old, &new, MAX_DIFF_LINES, MAX_DIFF_CHARS);
            if change.diff.is_none() {
                change.note = Some(format!(
                    "diff not shown: more than {MAX_DIFF_LINES} lines or {} KiB",
                    MAX_DIFF_CHARS >> 10
                ));
            }
        }
        (Err(why), _) | (_, Err(why)) => change.note = Some(why),
    }
    change
}

/// What `meta` is, in words with an article.
fn what(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a file"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a device"
    }
}
