//! `read_file`, `write_file` and `edit_file`, and what `apply_patch` shares with them: reading
//! a workspace file as text (with the reasons a file is not), the hints for a path that does
//! not exist, unified diffs, and atomic writes.

pub(crate) mod diff;
mod edit;
pub(crate) mod hints;
mod read;
pub(crate) mod sniff;
mod write;

use std::io;
use std::path::PathBuf;

pub(crate) use edit::edit_file;
pub(crate) use read::read_file;
pub(crate) use write::write_file;

use crate::fs_tool::{size, FsCtx};

/// The most a text tool reads into memory: past it, searching or paging with a command is
/// the better way in.
const MAX_TEXT_BYTES: u64 = 64 << 20;

/// A workspace file read as UTF-8 text.
#[derive(Debug)]
pub(crate) struct TextFile {
    /// The resolved path, for I/O.
    pub full: PathBuf,
    /// The path as the model sees it (workspace-relative).
    pub shown: String,
    pub text: String,
}

/// An I/O error about `shown` as the model should read it.
pub(crate) fn describe(shown: &str, e: &io::Error) -> String {
    if let Some(why) = crate::confined::explain(e) {
        return format!("{shown}: {why}");
    }
    match e.kind() {
        io::ErrorKind::NotFound => format!("{shown}: no such file"),
        io::ErrorKind::PermissionDenied => format!("{shown}: permission denied"),
        _ => format!("{shown}: {e}"),
    }
}

/// Reads `given` as text: it must exist (or the error names the nearest existing names), be
/// a regular file of at most [`MAX_TEXT_BYTES`], and hold UTF-8 text (or the error says what
/// it holds instead).
pub(crate) fn read_text(ctx: &FsCtx, given: &str) -> Result<TextFile, String> {
    let full = ctx.workspace.resolve(given)?;
    let shown = ctx.display(&full);
    let (dir, rel) = ctx
        .workspace
        .door(&full)
        .map_err(|e| describe(&shown, &e))?;
    let meta = match dir.metadata(&rel) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(hints::missing(ctx, given, &full))
        }
        Err(e) => return Err(describe(&shown, &e)),
    };
    if meta.is_dir() {
        return Err(format!(
            "{shown} is a directory, not a file; list_files or read_file shows what it holds"
        ));
    }
    if !meta.is_file() {
        return Err(format!("{shown}: {}", crate::confined::not_regular(&meta)));
    }
    // Checked again on the descriptor by `read`: the name may be another file by now.
    let bytes = match dir.read(&rel, MAX_TEXT_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => {
            return Err(format!(
                "{shown} is {}, more than the {} a file tool reads; search it with grep_files or page it with exec_command (sed -n '100,200p', head, tail)",
                size(meta.len().max(MAX_TEXT_BYTES + 1)),
                size(MAX_TEXT_BYTES)
            ))
        }
        Err(e) => return Err(describe(&shown, &e)),
    };
    if let Some(what) = sniff::binary(&bytes) {
        return Err(sniff::refusal(&shown, &what, bytes.len()));
    }
    // `binary` found no invalid UTF-8, so this conversion cannot fail.
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown}: not UTF-8 text"))?;
    Ok(TextFile { full, shown, text })
}

/// Replaces (or creates) the workspace file `full` with `content` in one rename beneath its
/// root's handle, creating its folders. A dry run (see [`FsCtx::dry_run`]) checks the path
/// and writes nothing.
pub(crate) fn write_whole(ctx: &FsCtx, full: &std::path::Path, content: &[u8]) -> io::Result<()> {
    let (dir, rel) = ctx.workspace.door(full)?;
    if ctx.dry_run {
        return Ok(());
    }
    dir.write(rel, content)
}

/// `text`'s lines without their terminators (`\n` or `\r\n`); a final newline ends the last
/// line rather than starting an empty one.
pub(crate) fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n')
        .map(|l| {
            let l = l.strip_suffix('\n').unwrap_or(l);
            l.strip_suffix('\r').unwrap_or(l)
        })
        .collect()
}

/// Line `n` (1-based) as `cat -n` shows it: the number right-aligned in six columns, a tab,
/// the text.
pub(crate) fn numbered(n: usize, line: &str) -> String {
    format!("{n:>6}\t{line}")
}
