//! `read_file`, `write_file` and `edit_file`. Their I/O is blocking and short, so each call
//! runs on the blocking pool and hands its whole content over as one chunk.

use std::io;
use std::path::PathBuf;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::contract::{Output, Tool, ToolOutcome, ToolResult};
use crate::path::Workspace;

/// Which file tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileOp {
    Read,
    Write,
    Edit,
}

/// A file tool bound to a workspace root.
#[derive(Debug)]
pub(crate) struct FileTool {
    pub op: FileOp,
    pub workspace: Workspace,
    /// The session's sandbox is `read-only`: writes and edits are refused.
    pub read_only: bool,
}

#[async_trait]
impl Tool for FileTool {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        if self.read_only && self.op != FileOp::Read {
            return Err(
                "refused: this session's sandbox is read-only (no writes in the workspace); ask the user to change the sandbox mode if the change is needed".to_owned(),
            );
        }
        let (op, ws) = (self.op, self.workspace.clone());
        let text = tokio::task::spawn_blocking(move || match op {
            FileOp::Read => read_file(&ws, parse(args, "read_file")?),
            FileOp::Write => write_file(&ws, parse(args, "write_file")?),
            FileOp::Edit => edit_file(&ws, parse(args, "edit_file")?),
        })
        .await
        .map_err(|e| format!("the file operation did not finish: {e}"))??;
        out.emit(text).await;
        Ok(ToolOutcome::default())
    }
}

fn parse<T: DeserializeOwned>(args: Value, tool: &str) -> Result<T, String> {
    serde_json::from_value(args).map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

fn describe(path: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("{path}: no such file"),
        io::ErrorKind::PermissionDenied => format!("{path}: permission denied"),
        _ => format!("{path}: {e}"),
    }
}

/// Reads a regular UTF-8 file at a confined path.
fn read_text(ws: &Workspace, path: &str) -> Result<(PathBuf, String), String> {
    let full = ws.resolve(path)?;
    let meta = std::fs::metadata(&full).map_err(|e| describe(path, &e))?;
    if !meta.is_file() {
        return Err(format!("{path}: not a regular file"));
    }
    let bytes = std::fs::read(&full).map_err(|e| describe(path, &e))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{path}: not valid UTF-8 text"))?;
    Ok((full, text))
}

#[derive(Deserialize)]
struct ReadArgs {
    path: String,
    #[serde(default)]
    start_line: Option<u64>,
    #[serde(default)]
    end_line: Option<u64>,
}

/// The lines `start_line..=end_line` (1-based, inclusive) verbatim, line terminators
/// included, so reading a whole file returns it byte for byte. An `end_line` past the end is
/// clamped; a `start_line` past the end is an error naming the file's line count.
fn read_file(ws: &Workspace, args: ReadArgs) -> Result<String, String> {
    let (_, text) = read_text(ws, &args.path)?;
    if args.start_line.is_none() && args.end_line.is_none() {
        return Ok(text);
    }
    let start = args.start_line.unwrap_or(1);
    if start == 0 {
        return Err("start_line is 1-based and must be at least 1".to_owned());
    }
    if let Some(end) = args.end_line {
        if end < start {
            return Err(format!("end_line {end} is before start_line {start}"));
        }
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let count = lines.len() as u64;
    if start > count {
        return Err(format!(
            "start_line {start} is past the end of {} ({count} lines)",
            args.path
        ));
    }
    let end = args.end_line.map_or(count, |e| e.min(count));
    // Both bounds are <= count, which came from a usize.
    let (from, to) = ((start - 1) as usize, end as usize);
    Ok(lines[from..to].concat())
}

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

fn write_file(ws: &Workspace, args: WriteArgs) -> Result<String, String> {
    let full = ws.resolve(&args.path)?;
    match std::fs::metadata(&full) {
        Ok(meta) if meta.is_dir() => return Err(format!("{}: is a directory", args.path)),
        // A FIFO, socket or device would block the write or do something other than store
        // the content.
        Ok(meta) if !meta.is_file() => return Err(format!("{}: not a regular file", args.path)),
        _ => {}
    }
    if let Some(dir) = full.parent() {
        std::fs::create_dir_all(dir).map_err(|e| describe(&args.path, &e))?;
    }
    std::fs::write(&full, &args.content).map_err(|e| describe(&args.path, &e))?;
    Ok(format!(
        "Wrote {} bytes to {}",
        args.content.len(),
        args.path
    ))
}

#[derive(Deserialize)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

fn edit_file(ws: &Workspace, args: EditArgs) -> Result<String, String> {
    if args.old_string.is_empty() {
        return Err("old_string is empty; use write_file to create or overwrite a file".to_owned());
    }
    let (full, text) = read_text(ws, &args.path)?;
    let count = text.matches(&args.old_string).count();
    if count == 0 {
        return Err(format!("old_string not found in {}", args.path));
    }
    if count > 1 && !args.replace_all {
        return Err(format!(
            "old_string appears {count} times in {}; include more context to make it unique, or set replace_all to true",
            args.path
        ));
    }
    let edited = if args.replace_all {
        text.replace(&args.old_string, &args.new_string)
    } else {
        text.replacen(&args.old_string, &args.new_string, 1)
    };
    std::fs::write(&full, edited).map_err(|e| describe(&args.path, &e))?;
    let noun = if count == 1 {
        "occurrence"
    } else {
        "occurrences"
    };
    Ok(format!("Replaced {count} {noun} in {}", args.path))
}
