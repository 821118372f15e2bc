//! Rewinding a workspace to a checkpoint: first what would change ([`plan`], shown to the
//! person before anything is touched), then the change ([`apply`]), every step through the
//! workspace's door.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::store::{hash, Store};
use super::walk::listing;
use super::{Entry, Manifest, Skipped};
use crate::confined::Dir;

/// What rewinding to a checkpoint changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Paths put back as the checkpoint has them: changed, deleted or of another kind now.
    pub restore: Vec<String>,
    /// Paths made since (not in the checkpoint), removed.
    pub remove: Vec<String>,
    /// Paths the checkpoint left out (too large, unreadable): left as they are.
    pub left_alone: Vec<Skipped>,
}

impl Plan {
    /// Whether the workspace already is as the checkpoint has it.
    pub fn is_empty(&self) -> bool {
        self.restore.is_empty() && self.remove.is_empty()
    }
}

/// What is there now at a path, as far as a rewind cares.
enum Now {
    File { size: u64, mode: u32 },
    Link,
    Dir { mode: u32 },
}

/// What rewinding `workspace` to `target` (a checkpoint in `store`) would change; nothing is
/// changed.
pub fn plan(workspace: &Path, store: &Store, target: &Manifest) -> io::Result<Plan> {
    let dir = Dir::open(workspace)?;
    let now: BTreeMap<String, Now> = listing(workspace, store, target.include_ignored)?
        .into_iter()
        .filter_map(|(rel, meta)| {
            let t = meta.file_type();
            let mode = meta.permissions().mode() & 0o7777;
            let now = if t.is_dir() {
                Now::Dir { mode }
            } else if t.is_symlink() {
                Now::Link
            } else if t.is_file() {
                Now::File {
                    size: meta.len(),
                    mode,
                }
            } else {
                return None;
            };
            Some((rel, now))
        })
        .collect();
    let left_alone = target.skipped.clone();
    let skipped = |rel: &str| left_alone.iter().any(|s| s.path == rel);
    let mut plan = Plan {
        left_alone: left_alone.clone(),
        ..Plan::default()
    };
    for (rel, want) in &target.entries {
        let same = match (want, now.get(rel)) {
            (Entry::Dir { mode }, Some(Now::Dir { mode: m })) => mode == m,
            (Entry::Link { target }, Some(Now::Link)) => dir
                .read_link(rel)
                .is_ok_and(|t| t.to_string_lossy() == target.as_str()),
            (
                Entry::File {
                    hash: h,
                    size,
                    mode,
                    ..
                },
                Some(Now::File { size: s, mode: m }),
            ) => size == s && mode == m && dir.read(rel, *size).is_ok_and(|b| hash(&b) == *h),
            _ => false,
        };
        if !same {
            plan.restore.push(rel.clone());
        }
    }
    // The folders holding the store, should it lie in the workspace, stay.
    let store_rel = store.root().canonicalize().ok().and_then(|r| {
        Some(
            r.strip_prefix(workspace.canonicalize().ok()?)
                .ok()?
                .to_owned(),
        )
    });
    let holds_store = |rel: &str| store_rel.as_ref().is_some_and(|s| s.starts_with(rel));
    for rel in now.keys() {
        if !target.entries.contains_key(rel) && !skipped(rel) && !holds_store(rel) {
            plan.remove.push(rel.clone());
        }
    }
    Ok(plan)
}

/// Rewinds `workspace` to `target` as `plan` (made by [`plan`] against the same checkpoint)
/// says. Every path is tried; the ones that failed are returned, each with why.
pub fn apply(
    workspace: &Path,
    store: &Store,
    target: &Manifest,
    plan: &Plan,
) -> io::Result<Vec<String>> {
    let dir = Dir::open(workspace)?;
    let mut failed = Vec::new();
    let mut note = |rel: &str, e: io::Error| failed.push(format!("{rel}: {e}"));
    // What is in the way goes first, deepest first, so a folder is empty when its turn
    // comes: what was made since, and what is now of another kind than the checkpoint's.
    let mut gone: Vec<&String> = plan.remove.iter().collect();
    for rel in &plan.restore {
        let kind_now = dir.metadata(rel).ok().map(|m| m.file_type());
        let same_kind = match (target.entries.get(rel), kind_now) {
            (Some(Entry::Dir { .. }), Some(t)) => t.is_dir(),
            (Some(Entry::File { .. }), Some(t)) => t.is_file(),
            (_, None) => true,
            _ => false,
        };
        if !same_kind {
            gone.push(rel);
        }
    }
    gone.sort_by(|a, b| b.cmp(a));
    for rel in gone {
        let is_dir = dir.metadata(rel).is_ok_and(|m| m.is_dir());
        let done = if is_dir {
            dir.remove_dir(rel)
        } else {
            dir.remove_file(rel)
        };
        match done {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => note(rel, e),
        }
    }
    // Then folders (parents before children), files and links; folders' own modes last, so
    // a read-only folder does not refuse what goes into it.
    let mut dir_modes = Vec::new();
    for rel in &plan.restore {
        let result = match target.entries.get(rel) {
            Some(Entry::Dir { mode }) => {
                dir_modes.push((rel, *mode));
                dir.create_dirs(rel).map(|_| ())
            }
            Some(Entry::File { hash, mode, .. }) => store
                .get(hash)
                .and_then(|bytes| dir.write(rel, &bytes))
                .and_then(|()| dir.set_mode(rel, *mode)),
            Some(Entry::Link { target }) => {
                let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
                dir.create_dirs(parent)
                    .and_then(|_| match dir.remove_file(rel) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                        _ => Ok(()),
                    })
                    .and_then(|()| dir.symlink(rel, target))
            }
            None => Ok(()),
        };
        if let Err(e) = result {
            note(rel, e);
        }
    }
    dir_modes.sort_by(|a, b| b.0.cmp(a.0));
    for (rel, mode) in dir_modes {
        if let Err(e) = dir.set_mode(rel, mode) {
            note(rel, e);
        }
    }
    Ok(failed)
}
