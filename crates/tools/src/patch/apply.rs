//! An update's hunks applied to a file's text in memory. Lines are found with codex's
//! tolerance ladder: exactly, then ignoring trailing whitespace, then ignoring whitespace at
//! both ends; each hunk is looked for after the previous one.

use super::parse::{Hunk, Line};
use crate::files::{lines, numbered};
use crate::fs_tool::{clip, count};

/// Most places named when a hunk's lines are not found.
const CANDIDATES: usize = 3;

/// `text` with `hunks` applied, ending with a newline, in the file's own line ending (`\r\n`
/// when it has any); or why hunk N (1-based) does not apply.
pub(crate) fn apply(text: &str, hunks: &[Hunk]) -> Result<String, String> {
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let file: Vec<String> = lines(text).into_iter().map(str::to_owned).collect();
    // (where, how many lines go, the lines that come), in file order.
    let mut edits: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut cursor = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let which = format!("hunk {} (patch line {})", n + 1, hunk.line);
        for context in &hunk.context {
            let Some(at) = seek(&file, &[context.as_str()], cursor, false) else {
                return Err(format!(
                    "{which}: its context line \"@@ {}\" is not in the file{}",
                    clip(context, 120),
                    after(cursor)
                ));
            };
            cursor = at + 1;
        }
        let mut lines = &hunk.lines[..];
        if hunk.old().is_empty() {
            // Pure additions go after their context, or at the end without one.
            let at = if hunk.context.is_empty() || hunk.end_of_file {
                file.len()
            } else {
                cursor
            };
            edits.push((at, 0, replacement(&file, at, lines)));
            cursor = at;
            continue;
        }
        let mut found = seek(&file, &old_of(lines), cursor, hunk.end_of_file);
        // A trailing empty context line often stands for the file's final newline.
        if found.is_none() && lines.last() == Some(&Line::Context(String::new())) {
            lines = &lines[..lines.len() - 1];
            found = seek(&file, &old_of(lines), cursor, hunk.end_of_file);
        }
        let Some(at) = found else {
            return Err(not_found(&which, &file, &hunk.old(), cursor));
        };
        let len = old_of(lines).len();
        edits.push((at, len, replacement(&file, at, lines)));
        cursor = at + len;
    }
    let mut out: Vec<&str> = Vec::with_capacity(file.len());
    let mut next = 0;
    for &(at, remove, ref add) in &edits {
        out.extend(file[next..at].iter().map(String::as_str));
        out.extend(add.iter().map(String::as_str));
        next = at + remove;
    }
    out.extend(file[next..].iter().map(String::as_str));
    let mut text = out.join(eol);
    if !text.is_empty() {
        text.push_str(eol);
    }
    Ok(text)
}

/// The lines a hunk's `lines` need in the file.
fn old_of(lines: &[Line]) -> Vec<&str> {
    (lines.iter())
        .filter_map(|l| match l {
            Line::Context(t) | Line::Removed(t) => Some(t.as_str()),
            Line::Added(_) => None,
        })
        .collect()
}

/// What replaces the matched lines from `at` on: added lines from the patch, and context
/// lines as the file has them, so whitespace the ladder forgave is kept.
fn replacement(file: &[String], at: usize, lines: &[Line]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = at;
    for line in lines {
        match line {
            Line::Context(t) => {
                out.push(file.get(i).cloned().unwrap_or_else(|| t.clone()));
                i += 1;
            }
            Line::Removed(_) => i += 1,
            Line::Added(t) => out.push(t.clone()),
        }
    }
    out
}

/// Where `pattern` starts in `file` at or after `from`: exactly, then ignoring trailing
/// whitespace, then ignoring whitespace at both ends. With `eof`, a match that ends the file
/// is tried first.
fn seek(file: &[String], pattern: &[&str], from: usize, eof: bool) -> Option<usize> {
    if pattern.len() > file.len() {
        return None;
    }
    let last = file.len() - pattern.len();
    let ladder: [fn(&str) -> &str; 3] = [|s| s, str::trim_end, str::trim];
    let fits = |i: usize, norm: fn(&str) -> &str| {
        pattern
            .iter()
            .zip(&file[i..])
            .all(|(p, f)| norm(p) == norm(f))
    };
    for norm in ladder {
        if eof && last >= from && fits(last, norm) {
            return Some(last);
        }
        if let Some(i) = (from..=last).find(|i| fits(*i, norm)) {
            return Some(i);
        }
    }
    None
}

fn after(cursor: usize) -> String {
    if cursor == 0 {
        String::new()
    } else {
        format!(" after line {cursor}, where the previous hunk or context ends")
    }
}

/// Why a hunk's old lines (context and removed) are not in `file`, with the places that
/// hold its first line.
fn not_found(which: &str, file: &[String], old: &[&str], cursor: usize) -> String {
    let shown: String = old
        .iter()
        .take(8)
        .map(|l| format!("\n  {}", clip(l, 160)))
        .collect();
    let more = if old.len() > 8 {
        format!("\n  … {} more", count(old.len() - 8, "line"))
    } else {
        String::new()
    };
    let mut text = format!(
        "{which}: its context and removed lines are not in the file{}:{shown}{more}",
        after(cursor)
    );
    let first = old.iter().map(|l| l.trim()).find(|l| !l.is_empty());
    let places: Vec<usize> = first
        .map(|f| {
            (0..file.len())
                .filter(|i| file[*i].trim() == f)
                .take(CANDIDATES)
                .collect()
        })
        .unwrap_or_default();
    if places.is_empty() {
        text.push_str(
            "\nNo line of the file is its first line; read_file shows what the file holds now.",
        );
    } else {
        text.push_str("\nIts first line is at:");
        for i in places {
            text.push_str(&format!("\n{}", numbered(i + 1, &clip(&file[i], 160))));
        }
        text.push_str("\nthe lines after it differ; read_file there and copy them exactly.");
    }
    text
}
