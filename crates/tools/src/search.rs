//! `grep_files` and `list_files`: ripgrep's walker (`ignore`: `.gitignore`, `.ignore` and
//! `.git/info/exclude` honoured, in a git repository or not) over a directory of the
//! workspace, in name order, without following symlinks, skipping `.git` and penguin's
//! protected paths.

mod grep;
mod list;

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use ignore::{Walk, WalkBuilder};

pub(crate) use grep::grep_files;
pub(crate) use list::list_files;

use crate::fs_tool::FsCtx;

/// Files larger than this are not searched.
const MAX_SEARCH_FILE_BYTES: u64 = 16 << 20;

/// The directory (or file) a search starts from: `path` resolved in the workspace, the root
/// by default; an error when it does not exist.
fn start(ctx: &FsCtx, path: Option<&str>) -> Result<PathBuf, String> {
    let given = path.unwrap_or(".");
    let full = ctx.workspace.resolve(given)?;
    if !full.exists() {
        return Err(crate::files::hints::missing(ctx, given, &full));
    }
    Ok(full)
}

/// The walk over `from`, ignore files honoured.
fn walk(ctx: &FsCtx, from: &Path) -> Walk {
    let workspace = ctx.workspace.clone();
    WalkBuilder::new(from)
        .hidden(false)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .max_filesize(Some(MAX_SEARCH_FILE_BYTES))
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| e.file_name() != ".git" && !workspace.is_hidden(e.path()))
        .build()
}

/// A glob filter: a pattern without `/` matches file names at any depth (`*.rs`); one with
/// `/` matches the path relative to where the search starts (`src/**/*.rs`), `*` staying
/// within one directory.
#[derive(Debug)]
struct Glob {
    matcher: GlobMatcher,
    by_name: bool,
}

impl Glob {
    fn new(pattern: &str) -> Result<Glob, String> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("glob {pattern:?} is not valid: {e}"))?;
        Ok(Glob {
            matcher: glob.compile_matcher(),
            by_name: !pattern.contains('/'),
        })
    }

    /// `file` (under `from`) matches.
    fn matches(&self, from: &Path, file: &Path) -> bool {
        if self.by_name {
            return file
                .file_name()
                .is_some_and(|n| self.matcher.is_match(Path::new(n)));
        }
        self.matcher
            .is_match(file.strip_prefix(from).unwrap_or(file))
    }
}
