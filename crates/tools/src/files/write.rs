//! `write_file`: a whole file's content, written atomically; the answer says whether the file
//! was created or overwritten, with the diff.

use serde::Deserialize;
use serde_json::Value;

use super::{describe, diff, sniff, write_whole};
use crate::fs_tool::{count, parse, size, Answer, FsCtx};

/// A new file of more lines than this is summarised instead of shown as a diff.
const NEW_FILE_DIFF_LINES: usize = 200;

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

/// `write_file {path, content}`.
pub(crate) fn write_file(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: WriteArgs = parse(args, "write_file")?;
    let full = ctx.workspace.resolve(&args.path)?;
    let shown = ctx.display(&full);
    let (dir, rel) = ctx
        .workspace
        .door(&full)
        .map_err(|e| describe(&shown, &e))?;
    let before = match dir.metadata(&rel) {
        Ok(meta) if meta.is_dir() => return Err(format!("{shown} is a directory")),
        // A FIFO, socket or device would block the write or do something other than store
        // the content.
        Ok(meta) if !meta.is_file() => {
            return Err(format!("{shown}: {}", crate::confined::not_regular(&meta)))
        }
        Ok(_) => Some(dir.read(&rel, u64::MAX).map_err(|e| describe(&shown, &e))?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(describe(&shown, &e)),
    };
    write_whole(ctx, &full, args.content.as_bytes()).map_err(|e| describe(&shown, &e))?;
    let new = &args.content;
    let lines = count(new.lines().count(), "line");
    let text = match before {
        None if new.lines().count() > NEW_FILE_DIFF_LINES => {
            format!("Created {shown} ({lines}, {})", size(new.len() as u64))
        }
        None => format!(
            "Created {shown} ({lines})\n{}",
            diff::unified(diff::NO_FILE, &shown, "", new)
        ),
        Some(old) if old == new.as_bytes() => {
            format!("Overwrote {shown} with the same content ({lines}): nothing changed")
        }
        Some(old) => match sniff::binary(&old) {
            None => format!(
                "Overwrote {shown} ({} → {lines})\n{}",
                String::from_utf8_lossy(&old).lines().count(),
                diff::unified(&shown, &shown, &String::from_utf8_lossy(&old), new)
            ),
            Some(what) => format!(
                "Overwrote {shown}, which held binary data ({what}; {}), with {lines} of text",
                size(old.len() as u64)
            ),
        },
    };
    Ok(text.into())
}
