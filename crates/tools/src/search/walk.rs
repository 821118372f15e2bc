//! The walk `grep_files` and `list_files` share: a folder's tree through the workspace's door
//! (`confined::Dir` handles, one per folder, none reached through a link), in name order,
//! honouring `.gitignore`, `.ignore` and `.git/info/exclude` as ripgrep does (in a git
//! repository or not), skipping `.git` and penguin's protected paths.
//!
//! It reads folders by handle rather than by name, so a folder swapped for a link while the
//! walk runs lists and searches nothing outside: the next open beneath it fails.

use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use crate::confined::{Dir, Kind};
use crate::fs_tool::FsCtx;

/// The most bytes an ignore file may have to be read.
const MAX_IGNORE_FILE_BYTES: u64 = 1 << 20;

/// One entry the walk reached.
#[derive(Debug)]
pub(super) struct Found<'a> {
    /// Its full path (for display and matching; never opened by it).
    pub path: PathBuf,
    /// What it is (a link is a link).
    pub kind: Kind,
    /// Its folder's handle and its name there: how to open it.
    pub dir: &'a Dir,
    pub name: &'a OsString,
}

/// The ignore rules of one folder: `.ignore` first, then `.gitignore`, then (at a
/// repository's root) `.git/info/exclude`; deeper folders are asked before shallower ones.
pub(crate) struct Rules {
    layers: Vec<Gitignore>,
}

impl Rules {
    fn of(dir: &Dir, at: &Path) -> Rules {
        let mut layers = Vec::new();
        for name in [".ignore", ".gitignore", ".git/info/exclude"] {
            let Ok(bytes) = dir.read(name, MAX_IGNORE_FILE_BYTES) else {
                continue;
            };
            let mut builder = GitignoreBuilder::new(at);
            for line in String::from_utf8_lossy(&bytes).lines() {
                // A pattern that does not parse is skipped, as git does.
                let _ = builder.add_line(Some(at.join(name)), line);
            }
            if let Ok(rules) = builder.build() {
                layers.push(rules);
            }
        }
        Rules { layers }
    }

    pub(crate) fn decide(&self, path: &Path, is_dir: bool) -> Option<bool> {
        self.layers
            .iter()
            .find_map(|rules| match rules.matched(path, is_dir) {
                Match::None => None,
                Match::Ignore(_) => Some(true),
                Match::Whitelist(_) => Some(false),
            })
    }
}

/// The rules of the folders from `root` (at `root.path()`) down to its folder `rel`,
/// outermost first: all that applies to `rel`'s entries.
pub(crate) fn rules_down_to(root: &Dir, rel: &Path) -> std::io::Result<Vec<Rules>> {
    let mut stack = Vec::new();
    let mut at = PathBuf::new();
    let mut path = root.path().to_path_buf();
    stack.push(Rules::of(root, &path));
    for name in rel.iter() {
        at.push(name);
        path.push(name);
        stack.push(Rules::of(&root.open_dir(&at)?, &path));
    }
    Ok(stack)
}

/// Whether the innermost rule of `stack` (outermost first) that matches `path` ignores it.
pub(crate) fn ignored(stack: &[Rules], path: &Path, is_dir: bool) -> bool {
    stack
        .iter()
        .rev()
        .find_map(|rules| rules.decide(path, is_dir))
        .unwrap_or(false)
}

/// Calls `visit` for every entry beneath `from` (a folder or a file of the workspace,
/// canonical), depth first, each folder's entries in name order; `visit` may stop the walk.
pub(super) fn walk(
    ctx: &FsCtx,
    from: &Path,
    mut visit: impl FnMut(Found<'_>) -> ControlFlow<()>,
) -> std::io::Result<()> {
    let (root, rel) = ctx.workspace.door(from)?;
    let meta = root.metadata(&rel)?;
    if !meta.is_dir() {
        let (parent, name) = match (rel.parent(), rel.file_name()) {
            (Some(p), Some(n)) => (root.open_dir(p)?, n.to_owned()),
            _ => return Ok(()),
        };
        let kind = if meta.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        let _ = visit(Found {
            path: from.to_path_buf(),
            kind,
            dir: &parent,
            name: &name,
        });
        return Ok(());
    }
    // The rules of the folders from the workspace root down to `from` apply too.
    let mut stack = rules_down_to(&root, &rel)?;
    let dir = root.open_dir(&rel)?;
    // The innermost folder's rules are on top; `from` itself was pushed last.
    let own = stack.pop().unwrap_or(Rules { layers: Vec::new() });
    let _ = descend(ctx, &dir, from, own, &mut stack, &mut visit);
    Ok(())
}

fn descend(
    ctx: &FsCtx,
    dir: &Dir,
    at: &Path,
    own: Rules,
    stack: &mut Vec<Rules>,
    visit: &mut impl FnMut(Found<'_>) -> ControlFlow<()>,
) -> ControlFlow<()> {
    stack.push(own);
    let mut entries = dir.entries().unwrap_or_default();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for entry in entries {
        let path = at.join(&entry.name);
        if entry.name == ".git" || ctx.workspace.is_hidden(&path) {
            continue;
        }
        let is_dir = entry.kind == Kind::Dir;
        if ignored(stack, &path, is_dir) {
            continue;
        }
        crate::path::checked(&path);
        if is_dir {
            // A folder swapped for a link since it was listed: its open fails, nothing
            // beneath it is reached.
            let Ok(sub) = dir.open_dir(&entry.name) else {
                continue;
            };
            let rules = Rules::of(&sub, &path);
            if descend(ctx, &sub, &path, rules, stack, visit).is_break() {
                stack.pop();
                return ControlFlow::Break(());
            }
        } else {
            visit(Found {
                path,
                kind: entry.kind,
                dir,
                name: &entry.name,
            })?;
        }
    }
    stack.pop();
    ControlFlow::Continue(())
}
