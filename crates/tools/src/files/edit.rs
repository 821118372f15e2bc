//! `edit_file`: one exact replacement (or every one, when asked), written atomically and
//! answered with its diff; a text that matches zero or several times is explained instead.

use serde::Deserialize;
use serde_json::Value;

use super::{describe, diff, lines, numbered, read_text, write_whole};
use crate::fs_tool::{clip, count, parse, Answer, FsCtx};

/// Most candidate places named when the text is not found.
const CANDIDATES: usize = 5;

#[derive(Deserialize)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// `edit_file {path, old_string, new_string, replace_all?}`.
pub(crate) fn edit_file(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: EditArgs = parse(args, "edit_file")?;
    if args.old_string.is_empty() {
        return Err(
            "old_string is empty; to create a file or replace all of it use write_file".to_owned(),
        );
    }
    if args.old_string == args.new_string {
        return Err("old_string and new_string are the same; nothing would change".to_owned());
    }
    let file = read_text(ctx, &args.path)?;
    let (mut old, mut new) = (args.old_string, args.new_string);
    // A model writes `\n`; a CRLF file needs `\r\n` for the same text to match.
    if !file.text.contains(&old) && old.contains('\n') && file.text.contains("\r\n") {
        old = old.replace("\r\n", "\n").replace('\n', "\r\n");
        new = new.replace("\r\n", "\n").replace('\n', "\r\n");
    }
    let at: Vec<usize> = file.text.match_indices(&old).map(|(i, _)| i).collect();
    if at.is_empty() {
        return Err(not_found(&file.shown, &file.text, &old));
    }
    if at.len() > 1 && !args.replace_all {
        let mut line_numbers: Vec<usize> = at.iter().map(|i| line_of(&file.text, *i)).collect();
        line_numbers.dedup();
        let shared = if line_numbers.len() < at.len() {
            " (some lines hold more than one)"
        } else {
            ""
        };
        let line_numbers: Vec<String> = line_numbers.iter().map(usize::to_string).collect();
        return Err(format!(
            "old_string occurs {} times in {}, on {} {}{shared}; include more of the surrounding lines in old_string so that it matches once, or set replace_all to true to replace every occurrence. Nothing was changed.",
            at.len(),
            file.shown,
            if line_numbers.len() == 1 { "line" } else { "lines" },
            line_numbers.join(", ")
        ));
    }
    let edited = if args.replace_all {
        file.text.replace(&old, &new)
    } else {
        file.text.replacen(&old, &new, 1)
    };
    write_whole(ctx, &file.full, edited.as_bytes()).map_err(|e| describe(&file.shown, &e))?;
    Ok(format!(
        "Edited {}: replaced {}\n{}",
        file.shown,
        count(at.len(), "occurrence"),
        diff::unified(&file.shown, &file.shown, &file.text, &edited)
    )
    .into())
}

/// The 1-based line on which byte `at` of `text` lies.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Why `old` is not in `text`, pointing at the nearest candidates: the same lines with other
/// whitespace, the lines that hold its first line, or the lines most like its first line.
fn not_found(shown: &str, text: &str, old: &str) -> String {
    let file = lines(text);
    let wanted = lines(old);
    let mut answer = format!("old_string was not found in {shown}.");
    let end = ". Nothing was changed.";
    let show = |from: usize, to: usize| -> String {
        (from..to)
            .map(|i| format!("\n{}", numbered(i + 1, &clip(file[i], 200))))
            .collect()
    };
    let fits = |i: usize, eq: &dyn Fn(&str, &str) -> bool| {
        wanted.iter().enumerate().all(|(k, w)| eq(file[i + k], w))
    };
    if wanted.len() <= file.len() {
        let starts = 0..=file.len() - wanted.len();
        let loose = starts
            .clone()
            .find(|i| fits(*i, &|a, b| a.trim_end() == b.trim_end()))
            .or_else(|| {
                starts
                    .clone()
                    .find(|i| fits(*i, &|a, b| a.trim() == b.trim()))
            });
        if let Some(i) = loose {
            answer.push_str(&format!(
                " It matches lines {}-{} if whitespace is ignored; the file has there:{}\nCopy those lines exactly (indentation and trailing spaces included) into old_string",
                i + 1,
                i + wanted.len(),
                show(i, i + wanted.len())
            ));
            return answer + end;
        }
    }
    let Some(first) = wanted.iter().map(|l| l.trim()).find(|l| !l.is_empty()) else {
        return answer + " old_string holds only whitespace" + end;
    };
    let holding: Vec<usize> = (0..file.len())
        .filter(|i| file[*i].contains(first))
        .collect();
    if !holding.is_empty() {
        let places: Vec<String> = holding
            .iter()
            .take(CANDIDATES)
            .map(|i| show(*i, i + 1))
            .collect();
        let numbers: Vec<String> = holding.iter().map(|i| (i + 1).to_string()).collect();
        answer.push_str(&format!(
            " Its first line ({:?}) is on {} {}, but the lines after it differ:{}\nread_file around there and copy the text exactly",
            clip(first, 80),
            if holding.len() == 1 { "line" } else { "lines" },
            numbers.join(", "),
            places.concat()
        ));
        return answer + end;
    }
    let trimmed: Vec<&str> = file.iter().map(|l| l.trim()).collect();
    let close = similar::get_close_matches(first, &trimmed, CANDIDATES, 0.6);
    if close.is_empty() {
        answer.push_str(
            " No line of the file resembles its first line; read_file shows what the file holds",
        );
        return answer + end;
    }
    let mut places: Vec<usize> = close
        .iter()
        .filter_map(|c| trimmed.iter().position(|t| t == c))
        .collect();
    places.sort_unstable();
    places.dedup();
    answer.push_str(&format!(
        " The lines most like its first line ({:?}) are:{}\nread_file around there and copy the text exactly",
        clip(first, 80),
        places.iter().map(|i| show(*i, i + 1)).collect::<String>()
    ));
    answer + end
}
