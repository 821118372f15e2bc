//! `apply_patch`: several files added, deleted, updated or moved in one call, all or nothing.
//! Every new content is computed first; any failure (a path refused, a file missing, a hunk
//! that does not match) changes nothing. Then every new content is staged next to its target
//! and renamed into place, and the deletions follow.

mod apply;
mod parse;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::confined::Dir;
use crate::files::{describe, diff, read_text, sniff};
use crate::fs_tool::{parse as parse_args, Answer, FsCtx};
use parse::Op;

/// New files of more lines than this are summarised instead of shown as a diff.
const NEW_FILE_DIFF_LINES: usize = 200;
/// Most chars of diffs one answer shows.
const MAX_DIFF_CHARS: usize = 12_000;

#[derive(Deserialize)]
struct PatchArgs {
    // codex's models send `input`; `patch` is the name a reader would guess.
    #[serde(alias = "patch")]
    input: String,
}

/// One file's part of the change, ready to be written.
#[derive(Debug)]
enum Step {
    Write {
        full: PathBuf,
        shown: String,
        /// The text it replaces (`None`: a new file).
        old: Option<String>,
        new: String,
        /// `A` or `M`, and `M`'s source when it was moved.
        mark: char,
        from: Option<String>,
    },
    Delete {
        full: PathBuf,
        shown: String,
        /// Part of a move: not listed on its own.
        moved: bool,
    },
}

/// `apply_patch {input}`.
pub(crate) fn apply_patch(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: PatchArgs = parse_args(args, "apply_patch")?;
    let patch = parse::parse(&args.input).map_err(|e| unchanged(format!("invalid patch, {e}")))?;
    let steps = plan(ctx, &patch).map_err(unchanged)?;
    if !ctx.dry_run {
        write(ctx, &steps)?;
    }
    Ok(report(&steps).into())
}

/// Every step of the patch, checked against the files as they are now.
fn plan(ctx: &FsCtx, patch: &parse::Patch) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut touched: Vec<(PathBuf, usize)> = Vec::new();
    let mut claim = |full: &PathBuf, line: usize, shown: &str| {
        if let Some((_, first)) = touched.iter().find(|(p, _)| p == full) {
            return Err(format!(
                "line {line}: {shown} is already changed by the section at line {first}; put all changes to one file in one section"
            ));
        }
        touched.push((full.clone(), line));
        Ok(())
    };
    for change in &patch.changes {
        let at = |e: String| format!("line {}: {e}", change.line);
        match &change.op {
            Op::Add { content } => {
                let full = ctx.workspace.resolve(&change.path).map_err(at)?;
                let shown = ctx.display(&full);
                claim(&full, change.line, &shown)?;
                let old = existing(ctx, &full, &shown).map_err(at)?;
                steps.push(Step::Write {
                    full,
                    shown,
                    old,
                    new: content.clone(),
                    mark: 'A',
                    from: None,
                });
            }
            Op::Delete => {
                let full = ctx.workspace.resolve(&change.path).map_err(at)?;
                let shown = ctx.display(&full);
                claim(&full, change.line, &shown)?;
                let meta = ctx
                    .workspace
                    .door(&full)
                    .and_then(|(dir, rel)| dir.metadata(rel));
                match meta {
                    Ok(meta) if meta.is_file() => {}
                    Ok(meta) if meta.is_dir() => {
                        return Err(at(format!(
                            "{shown} is a directory; Delete File deletes files"
                        )))
                    }
                    Ok(_) => return Err(at(format!("{shown}: not a regular file"))),
                    Err(_) => {
                        return Err(at(crate::files::hints::missing(ctx, &change.path, &full)))
                    }
                }
                steps.push(Step::Delete {
                    full,
                    shown,
                    moved: false,
                });
            }
            Op::Update { move_to, hunks } => {
                let file = read_text(ctx, &change.path).map_err(at)?;
                claim(&file.full, change.line, &file.shown)?;
                let new =
                    apply::apply(&file.text, hunks).map_err(|e| format!("{}, {e}", file.shown))?;
                let Some(to) = move_to else {
                    steps.push(Step::Write {
                        full: file.full,
                        shown: file.shown,
                        old: Some(file.text),
                        new,
                        mark: 'M',
                        from: None,
                    });
                    continue;
                };
                let dest = ctx.workspace.resolve(to).map_err(at)?;
                let dest_shown = ctx.display(&dest);
                if dest != file.full {
                    claim(&dest, change.line, &dest_shown)?;
                }
                existing(ctx, &dest, &dest_shown).map_err(at)?;
                let moved = dest != file.full;
                steps.push(Step::Write {
                    full: dest,
                    shown: dest_shown,
                    old: Some(file.text),
                    new,
                    mark: 'M',
                    from: moved.then(|| file.shown.clone()),
                });
                if moved {
                    steps.push(Step::Delete {
                        full: file.full,
                        shown: file.shown,
                        moved: true,
                    });
                }
            }
        }
    }
    Ok(steps)
}

/// What a file to be written over holds now: nothing when it does not exist, an error when
/// it is a directory or a special file. Its binary content counts as no text.
fn existing(ctx: &FsCtx, full: &Path, shown: &str) -> Result<Option<String>, String> {
    let (dir, rel) = ctx.workspace.door(full).map_err(|e| describe(shown, &e))?;
    match dir.metadata(&rel) {
        Err(_) => Ok(None),
        Ok(meta) if meta.is_dir() => Err(format!("{shown} is a directory")),
        Ok(meta) if !meta.is_file() => Err(format!("{shown}: not a regular file")),
        Ok(_) => {
            let bytes = dir.read(&rel, u64::MAX).map_err(|e| describe(shown, &e))?;
            Ok(sniff::binary(&bytes)
                .is_none()
                .then(|| String::from_utf8_lossy(&bytes).into_owned()))
        }
    }
}

/// Stages every write, then renames them into place and deletes; a failure while staging
/// removes what was staged, so the workspace is as before. Every step goes through the
/// workspace's door.
fn write(ctx: &FsCtx, steps: &[Step]) -> Result<(), String> {
    let mut created: Vec<(Dir, Vec<PathBuf>)> = Vec::new();
    let mut staged = Vec::new();
    for step in steps {
        let Step::Write {
            full, shown, new, ..
        } = step
        else {
            continue;
        };
        let result = ctx.workspace.door(full).and_then(|(dir, rel)| {
            let made = match rel.parent() {
                Some(parent) => dir.create_dirs(parent)?,
                None => Vec::new(),
            };
            let staging = dir.stage(&rel, new.as_bytes());
            created.push((dir, made));
            staging
        });
        match result {
            Ok(s) => staged.push(s),
            Err(e) => {
                drop(staged);
                for (dir, made) in created.iter().rev() {
                    dir.remove_dirs(made);
                }
                return Err(unchanged(describe(shown, &e)));
            }
        }
    }
    // Renames and unlinks within one directory tree do not fail short of a concurrent
    // change; if one does, the answer says what was already done.
    let mut done = Vec::new();
    let writes = steps.iter().filter(|s| matches!(s, Step::Write { .. }));
    for (s, step) in staged.into_iter().zip(writes) {
        let Step::Write { shown, .. } = step else {
            continue;
        };
        s.commit()
            .map_err(|e| partial(&done, describe(shown, &e)))?;
        done.push(shown.clone());
    }
    for step in steps {
        if let Step::Delete { full, shown, .. } = step {
            ctx.workspace
                .door(full)
                .and_then(|(dir, rel)| dir.remove_file(rel))
                .map_err(|e| partial(&done, describe(shown, &e)))?;
            done.push(shown.clone());
        }
    }
    Ok(())
}

/// `error`, then the sentence saying the workspace is as it was.
fn unchanged(error: String) -> String {
    let stop = if error.ends_with(['.', '?', '!']) {
        ""
    } else {
        "."
    };
    format!("{error}{stop} Nothing was changed.")
}

fn partial(done: &[String], error: String) -> String {
    format!(
        "{error}; the patch is applied only in part: {} already changed",
        if done.is_empty() {
            "nothing".to_owned()
        } else {
            done.join(", ")
        }
    )
}

/// codex's answer (`Success. Updated the following files:` and `A|M|D path` lines), then
/// each file's diff.
fn report(steps: &[Step]) -> String {
    let mut text = "Success. Updated the following files:".to_owned();
    for step in steps {
        match step {
            Step::Write {
                shown,
                mark,
                from: Some(from),
                ..
            } => text.push_str(&format!("\n{mark} {shown} (moved from {from})")),
            Step::Write { shown, mark, .. } => text.push_str(&format!("\n{mark} {shown}")),
            Step::Delete {
                shown,
                moved: false,
                ..
            } => text.push_str(&format!("\nD {shown}")),
            Step::Delete { .. } => {}
        }
    }
    let mut diffs = String::new();
    for step in steps {
        let Step::Write {
            shown,
            old,
            new,
            from,
            ..
        } = step
        else {
            continue;
        };
        let part = match old {
            None if new.lines().count() > NEW_FILE_DIFF_LINES => format!(
                "[{shown}: a new file of {} lines, not shown]",
                new.lines().count()
            ),
            None => diff::unified(diff::NO_FILE, shown, "", new),
            Some(old) => diff::unified(from.as_deref().unwrap_or(shown), shown, old, new),
        };
        if diffs.len() + part.len() > MAX_DIFF_CHARS {
            diffs.push_str("\n[more diffs not shown; read_file shows the results]");
            break;
        }
        diffs.push('\n');
        diffs.push_str(&part);
    }
    text.push_str(&diffs);
    text
}
