//! `grep_files` and `list_files`: a walk over a directory of the workspace through its door
//! (`walk.rs`: `.gitignore`, `.ignore` and `.git/info/exclude` honoured, in a git repository
//! or not, in name order, following no link, skipping `.git` and penguin's protected paths).

mod grep;
mod list;
pub(crate) mod walk;

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

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
    let exists = ctx
        .workspace
        .door(&full)
        .and_then(|(dir, rel)| dir.metadata(rel))
        .is_ok();
    if !exists {
        return Err(crate::files::hints::missing(ctx, given, &full));
    }
    Ok(full)
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
