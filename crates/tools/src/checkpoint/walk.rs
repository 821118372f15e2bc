//! Taking a checkpoint: the workspace walked as git would list it (ignored paths, `.git/` and
//! `.penguin/` left out, links not followed), each file read through the workspace's door.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::store::{hash, Store};
use super::{Entry, Limits, Manifest, Skipped, OWN_FOLDERS};
use crate::confined::Dir;

/// What `workspace` holds now, its new contents put in `store`. `previous` (the session's last
/// checkpoint) spares hashing a file again whose size and modification time are unchanged.
pub fn take(
    workspace: &Path,
    store: &Store,
    previous: Option<&Manifest>,
    limits: &Limits,
) -> io::Result<Manifest> {
    let dir = Dir::open(workspace)?;
    let mut manifest = Manifest {
        taken_at_ms: now_ms(),
        include_ignored: limits.include_ignored,
        ..Manifest::default()
    };
    let mut new_bytes = 0u64;
    for (rel, meta) in listing(workspace, store, limits.include_ignored)? {
        let kind = meta.file_type();
        let entry = if kind.is_dir() {
            Entry::Dir {
                mode: meta.permissions().mode() & 0o7777,
            }
        } else if kind.is_symlink() {
            match dir.read_link(&rel) {
                Ok(target) => Entry::Link {
                    target: target.to_string_lossy().into_owned(),
                },
                Err(e) => {
                    manifest
                        .skipped
                        .push(skip(&rel, format!("unreadable link: {e}")));
                    continue;
                }
            }
        } else if kind.is_file() {
            let (size, mtime_ns) = (meta.len(), mtime_ns(&meta));
            let mode = meta.permissions().mode() & 0o7777;
            let unchanged = previous.and_then(|p| match p.entries.get(&rel) {
                Some(Entry::File {
                    hash,
                    size: s,
                    mtime_ns: m,
                    ..
                }) if *s == size && *m == mtime_ns && store.has(hash) => Some(hash.clone()),
                _ => None,
            });
            let hash = match unchanged {
                Some(hash) => hash,
                None if size > limits.max_file_bytes => {
                    let why = format!("larger than {} MiB", limits.max_file_bytes >> 20);
                    manifest.skipped.push(skip(&rel, why));
                    continue;
                }
                None if new_bytes + size > limits.max_new_bytes => {
                    let why = format!(
                        "this checkpoint's new content reached its bound of {} MiB",
                        limits.max_new_bytes >> 20
                    );
                    manifest.skipped.push(skip(&rel, why));
                    continue;
                }
                None => match dir.read(&rel, limits.max_file_bytes) {
                    Ok(bytes) => {
                        let h = hash(&bytes);
                        if !store.has(&h) {
                            store.put(&h, &bytes)?;
                            new_bytes += bytes.len() as u64;
                        }
                        h
                    }
                    Err(e) => {
                        manifest
                            .skipped
                            .push(skip(&rel, format!("unreadable: {e}")));
                        continue;
                    }
                },
            };
            Entry::File {
                hash,
                size,
                mode,
                mtime_ns,
            }
        } else {
            // A FIFO, socket or device: nothing a checkpoint can hold.
            continue;
        };
        manifest.entries.insert(rel, entry);
    }
    Ok(manifest)
}

/// Every path of `workspace` a checkpoint covers, with what it is (links not followed), in
/// no particular order: what the ignore files exclude only `with_ignored`. The same listing
/// decides what a rewind may remove. The store itself is never listed, should it lie in the
/// workspace.
pub(super) fn listing(
    workspace: &Path,
    store: &Store,
    with_ignored: bool,
) -> io::Result<Vec<(String, std::fs::Metadata)>> {
    let own = store.root().canonicalize().ok();
    let mut walk = ignore::WalkBuilder::new(workspace);
    walk.standard_filters(!with_ignored)
        .hidden(false)
        .follow_links(false)
        .require_git(false)
        .git_global(false)
        .parents(false)
        .filter_entry(move |e| {
            let name = e.file_name().to_string_lossy();
            let dir = e.file_type().is_some_and(|t| t.is_dir());
            !(dir
                && (name == ".git"
                    || (e.depth() == 1 && OWN_FOLDERS.contains(&&*name))
                    || own.as_deref() == Some(e.path())))
        });
    let mut out = Vec::new();
    for item in walk.build() {
        // A folder that cannot be read, or an entry gone since it was listed (a command may
        // be at work), is not in the listing: a checkpoint skips it, a rewind leaves it.
        let Ok(entry) = item else { continue };
        if entry.depth() == 0 {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(workspace) else {
            continue;
        };
        // A name that is not UTF-8 cannot be written in the manifest faithfully: left alone.
        let Some(rel) = rel.to_str() else { continue };
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        out.push((rel.to_owned(), meta));
    }
    Ok(out)
}

fn skip(rel: &str, why: String) -> Skipped {
    Skipped {
        path: rel.to_owned(),
        why,
    }
}

fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(meta.mtime_nsec())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
