//! Answers that help the model find its way: the nearest existing names for a path that does
//! not exist, and a directory's listing.

use std::path::{Path, PathBuf};

use crate::confined::Kind;
use crate::fs_tool::{count, FsCtx};

/// Most names suggested for a missing path.
const SUGGESTIONS: usize = 5;
/// A directory this small is listed whole when nothing in it resembles the missing name.
const SMALL_DIR: usize = 30;
/// Most entries a directory listing shows.
const LISTING: usize = 500;

/// `given: no such file or directory`, with the names in the nearest existing directory that
/// resemble the one missing (by edit distance or a shared prefix).
pub(crate) fn missing(ctx: &FsCtx, given: &str, full: &Path) -> String {
    let mut text = format!("{given}: no such file or directory");
    // The nearest existing ancestor, and the first name under it that does not exist.
    let mut wanted = full;
    let mut dir = full.parent();
    while let Some(d) = dir {
        if is_dir(ctx, d) || !d.starts_with(&ctx.workspace.root) {
            break;
        }
        wanted = d;
        dir = d.parent();
    }
    let (Some(dir), Some(name)) = (dir, wanted.file_name()) else {
        return text;
    };
    if !dir.starts_with(&ctx.workspace.root) {
        return text;
    }
    let shown_dir = ctx.display(dir);
    let prefix = if shown_dir == "." {
        String::new()
    } else {
        format!("{shown_dir}/")
    };
    let dir_name = if shown_dir == "." {
        "The workspace root".to_owned()
    } else {
        format!("{shown_dir}/")
    };
    let name = name.to_string_lossy();
    if wanted != full {
        text.push_str(&format!(" ({prefix}{name} does not exist)"));
    }
    let entries = entries(ctx, dir);
    let lower = name.to_lowercase();
    let mut near: Vec<(usize, &Entry)> = entries
        .iter()
        .filter_map(|e| {
            let other = e.name.to_lowercase();
            let distance = levenshtein(&lower, &other);
            let shared = lower
                .chars()
                .zip(other.chars())
                .take_while(|(a, b)| a == b)
                .count();
            let close = distance <= (lower.chars().count() / 3).max(2)
                || shared >= 3
                || stem(&lower) == stem(&other);
            close.then_some((distance, e))
        })
        .collect();
    near.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let show = |e: &Entry| format!("{prefix}{}{}", e.name, if e.dir { "/" } else { "" });
    if !near.is_empty() {
        let names: Vec<String> = near
            .iter()
            .take(SUGGESTIONS)
            .map(|(_, e)| show(e))
            .collect();
        text.push_str(&format!(". Did you mean: {}?", names.join(", ")));
    } else if entries.is_empty() {
        text.push_str(&format!(". {dir_name} is empty."));
    } else if entries.len() <= SMALL_DIR {
        let names: Vec<String> = entries.iter().map(show).collect();
        text.push_str(&format!(". {dir_name} holds: {}.", names.join(", ")));
    } else {
        text.push_str(&format!(
            ". Nothing in {} ({}) has a similar name; list_files or grep_files can find it.",
            if shown_dir == "." {
                "the workspace root"
            } else {
                &dir_name
            },
            count(entries.len(), "entry")
        ));
    }
    text
}

/// The answer for a directory: its entries sorted by name, directories marked with `/`.
pub(crate) fn listing(ctx: &FsCtx, full: &Path) -> String {
    let shown = ctx.display(full);
    let entries = entries(ctx, full);
    let mut text = format!(
        "{shown} is a directory ({}; directories end in /), not a file:",
        count(entries.len(), "entry")
    );
    let budget = ctx.page_budget();
    let mut shown_count = 0;
    for e in entries.iter().take(LISTING) {
        let line = format!("\n{}{}", e.name, if e.dir { "/" } else { "" });
        if text.len() + line.len() > budget {
            break;
        }
        text.push_str(&line);
        shown_count += 1;
    }
    if shown_count < entries.len() {
        text.push_str(&format!(
            "\n… {} more; list_files with a pattern narrows the listing",
            entries.len() - shown_count
        ));
    }
    text
}

#[derive(Debug)]
struct Entry {
    name: String,
    dir: bool,
}

/// Whether `full` is a folder, asked through the workspace's door (a link is not one).
pub(crate) fn is_dir(ctx: &FsCtx, full: &Path) -> bool {
    ctx.workspace
        .door(full)
        .and_then(|(dir, rel)| dir.metadata(rel))
        .is_ok_and(|m| m.is_dir())
}

/// `dir`'s entries, sorted by name, without penguin's protected paths; read through the
/// workspace's door, so a folder swapped for a link lists nothing.
fn entries(ctx: &FsCtx, dir: &Path) -> Vec<Entry> {
    let Ok(read) = ctx
        .workspace
        .door(dir)
        .and_then(|(root, rel)| root.open_dir(rel)?.entries())
    else {
        return Vec::new();
    };
    let mut out: Vec<Entry> = read
        .into_iter()
        .filter(|e| !protected(ctx, &dir.join(&e.name)))
        .map(|e| Entry {
            name: e.name.to_string_lossy().into_owned(),
            dir: e.kind == Kind::Dir,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn protected(ctx: &FsCtx, path: &Path) -> bool {
    // Where a link entry leads decides whether its name is penguin's own; nothing is read.
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
    ctx.workspace.is_hidden(&path)
}

/// A name without its last extension.
fn stem(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem,
        _ => name,
    }
}

/// The edit distance between `a` and `b`, in chars.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn edit_distance() {
        assert_eq!(super::levenshtein("main.rs", "mian.rs"), 2);
        assert_eq!(super::levenshtein("", "abc"), 3);
        assert_eq!(super::levenshtein("lib.rs", "lib.rs"), 0);
    }
}
