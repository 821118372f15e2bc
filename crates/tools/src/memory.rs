//! Memory folders: where an agent keeps its notes between sessions, beneath penguin's data
//! root (so no command reaches them). The file tools read and write inside the folders a
//! session is given ([`crate::ToolsConfig::memory`]), and `memory_forget` deletes a note and
//! drops its line from the folder's `MEMORY.md`: the one change the file tools cannot make.
//!
//! What the folders are (the user scope, one per workspace), what enters the context and the
//! rules of what is saved are the facade's (`penguin::memory`); this module only keeps writes
//! inside the folders.

use std::io;
use std::path::{Path, PathBuf};

use penguin_omni_protocol::ToolDefinition;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::confined::Dir;
use crate::fs_tool::{parse, Answer, FsCtx};

/// Each memory folder's index: one line per note, the only file that enters the context.
pub const MEMORY_INDEX: &str = "MEMORY.md";

/// The tool that deletes a note.
pub const MEMORY_FORGET: &str = "memory_forget";

/// `memory_forget`'s definition.
pub fn forget_definition() -> ToolDefinition {
    ToolDefinition {
        name: MEMORY_FORGET.to_owned(),
        description: "Delete a memory note that proved wrong or stale: the topic file (a path in \
                      one of your memory folders) is removed and its lines are dropped from that \
                      folder's MEMORY.md. Notes are written and edited with the file tools."
            .to_owned(),
        parameters: Some(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The note's path: a .md file in a memory folder (not MEMORY.md)."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        })),
    }
}

/// `memory_forget`'s compact definition, for a model with a small context window (the built-in
/// tools' compact descriptions).
pub fn forget_definition_compact() -> ToolDefinition {
    ToolDefinition {
        name: MEMORY_FORGET.to_owned(),
        description: "Delete a memory note and its line in MEMORY.md.".to_owned(),
        parameters: Some(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": false
        })),
    }
}

/// What [`forget`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forgotten {
    /// The note's file.
    pub file: PathBuf,
    /// Lines dropped from the folder's `MEMORY.md`.
    pub index_lines: usize,
}

/// The file name of the note `name` (`prefers-pnpm` or `prefers-pnpm.md`), or why it names
/// none: a plain Markdown file name, no path, no leading dot, not the index.
pub fn note_file_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.is_empty() {
        return Err("a note's name is empty".to_owned());
    }
    if name.contains('/') || name.contains('\\') || name.contains('\0') {
        return Err(format!("{name:?} is a path, not a note's name"));
    }
    if name.starts_with('.') {
        return Err(format!("{name:?} is not a note (it starts with a dot)"));
    }
    let file = if name.ends_with(".md") {
        name.to_owned()
    } else {
        format!("{name}.md")
    };
    if file == MEMORY_INDEX {
        return Err(format!(
            "{MEMORY_INDEX} is the folder's index, not a note; edit it instead"
        ));
    }
    Ok(file)
}

/// Deletes the note `name` in the memory folder `dir` and drops the lines of `dir`'s
/// `MEMORY.md` that link to it (`](name.md)`), so the index never lists a note that is gone.
/// The note must be a regular file directly in `dir`.
pub fn forget(dir: &Path, name: &str) -> Result<Forgotten, String> {
    let file_name = note_file_name(name)?;
    let file = dir.join(&file_name);
    let folder = Dir::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    match folder.metadata(&file_name) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => {
            return Err(format!(
                "{}: not a note (not a regular file)",
                file.display()
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("{}: no such note", file.display()))
        }
        Err(e) => return Err(format!("{}: {e}", file.display())),
    }
    folder
        .remove_file(&file_name)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let index_lines = prune_index(&folder, &file_name)
        .map_err(|e| format!("{} deleted, but {MEMORY_INDEX}: {e}", file.display()))?;
    Ok(Forgotten { file, index_lines })
}

/// Drops the index lines linking to `file_name`; how many. The index is replaced, never
/// written through a link standing at its name.
fn prune_index(dir: &Dir, file_name: &str) -> io::Result<usize> {
    let text = match dir.read(MEMORY_INDEX, 16 << 20) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let links = [format!("]({file_name})"), format!("](./{file_name})")];
    let mut dropped = 0;
    let kept: Vec<&str> = text
        .split_inclusive('\n')
        .filter(|line| {
            let hit = links.iter().any(|l| line.contains(l.as_str()));
            dropped += usize::from(hit);
            !hit
        })
        .collect();
    if dropped > 0 {
        dir.stage(MEMORY_INDEX, kept.concat().as_bytes())?
            .commit()?;
    }
    Ok(dropped)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForgetArgs {
    path: String,
}

/// `memory_forget {path}`.
pub(crate) fn memory_forget(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: ForgetArgs = parse(args, MEMORY_FORGET)?;
    let full = ctx.workspace.resolve(&args.path)?;
    let dir = full.parent().unwrap_or(Path::new("/"));
    if !ctx
        .workspace
        .extra
        .iter()
        .any(|e| e.writable && dir.starts_with(&e.root))
    {
        return Err(format!(
            "{}: not a note in one of your memory folders",
            args.path
        ));
    }
    let name = full
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let gone = forget(dir, &name)?;
    Ok(match gone.index_lines {
        0 => format!(
            "Deleted {} (no line of {MEMORY_INDEX} linked to it)",
            gone.file.display()
        ),
        n => format!(
            "Deleted {} and dropped {n} line{} from {MEMORY_INDEX}",
            gone.file.display(),
            if n == 1 { "" } else { "s" }
        ),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_names_are_plain_markdown_files_but_the_index() {
        assert_eq!(note_file_name("prefers-pnpm").unwrap(), "prefers-pnpm.md");
        assert_eq!(note_file_name(" a.md ").unwrap(), "a.md");
        for bad in ["", "../x", "a/b", ".workspace", "MEMORY.md", "MEMORY"] {
            assert!(note_file_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn forgetting_deletes_the_note_and_its_index_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.md"), "---\nname: a\n---\nA").unwrap();
        std::fs::write(d.join("b.md"), "B").unwrap();
        std::fs::write(
            d.join(MEMORY_INDEX),
            "- [A](a.md) — first\n- [B](b.md) — second\n- [A again](./a.md)\n",
        )
        .unwrap();
        let gone = forget(d, "a").unwrap();
        assert_eq!(gone.index_lines, 2);
        assert!(!d.join("a.md").exists() && d.join("b.md").exists());
        assert_eq!(
            std::fs::read_to_string(d.join(MEMORY_INDEX)).unwrap(),
            "- [B](b.md) — second\n"
        );
        assert!(forget(d, "a").unwrap_err().contains("no such note"));
        // No index: the note goes all the same.
        std::fs::remove_file(d.join(MEMORY_INDEX)).unwrap();
        assert_eq!(forget(d, "b.md").unwrap().index_lines, 0);
        // A link or a directory is not a note.
        std::fs::create_dir(d.join("sub.md")).unwrap();
        assert!(forget(d, "sub").is_err());
        std::os::unix::fs::symlink("/etc/hostname", d.join("l.md")).unwrap();
        assert!(forget(d, "l").is_err());
        assert!(d.join("l.md").symlink_metadata().is_ok());
    }
}
