//! `read_file`: a text file's lines numbered like `cat -n`, a window at a time.

use serde::Deserialize;
use serde_json::Value;

use super::{hints, lines, numbered, read_text};
use crate::fs_tool::{count, parse, Answer, FsCtx};

/// Lines returned when the call gives no `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 2000;
/// Longer lines are cut to this many chars.
pub(crate) const MAX_LINE_CHARS: usize = 2000;

#[derive(Deserialize)]
struct ReadArgs {
    path: String,
    // `start_line`/`end_line` are the names of earlier versions, still accepted.
    #[serde(default, alias = "start_line")]
    offset: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    end_line: Option<i64>,
}

/// `read_file {path, offset?, limit?}`.
pub(crate) fn read_file(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: ReadArgs = parse(args, "read_file")?;
    let offset = args.offset.unwrap_or(1);
    if offset < 1 {
        return Err(format!(
            "offset is a 1-based line number and must be at least 1 (got {offset})"
        ));
    }
    let limit = match (args.limit, args.end_line) {
        (Some(limit), _) if limit < 1 => {
            return Err(format!("limit must be at least 1 (got {limit})"))
        }
        (Some(limit), _) => limit,
        (None, Some(end)) if end < offset => {
            return Err(format!("end_line {end} is before offset {offset}"))
        }
        (None, Some(end)) => end - offset + 1,
        (None, None) => DEFAULT_LIMIT as i64,
    };
    // A directory is answered with its listing rather than an error: it is what the model
    // needs next.
    let full = ctx.workspace.resolve(&args.path)?;
    if hints::is_dir(ctx, &full) {
        return Ok(hints::listing(ctx, &full).into());
    }
    let file = read_text(ctx, &args.path)?;
    let all = lines(&file.text);
    if all.is_empty() {
        return Ok(format!("{} is empty (0 bytes)", file.shown).into());
    }
    let total = all.len();
    // Both are positive and `offset` is compared with a usize before use.
    let (first, limit) = (
        usize::try_from(offset).unwrap_or(usize::MAX),
        usize::try_from(limit).unwrap_or(usize::MAX),
    );
    if first > total {
        return Err(format!(
            "offset {first} is past the end of {}, which has {}",
            file.shown,
            count(total, "line")
        ));
    }
    let budget = ctx.page_budget();
    let mut text = String::new();
    let mut last = first - 1;
    for (i, line) in all.iter().enumerate().skip(first - 1).take(limit) {
        let mut row = numbered(i + 1, &cut(line));
        if !text.is_empty() {
            row.insert(0, '\n');
        }
        // The first line always goes out: an over-long window is the cap's job, not ours.
        if !text.is_empty() && text.len() + row.len() > budget {
            break;
        }
        text.push_str(&row);
        last = i + 1;
    }
    if last < total {
        let why = if last - first + 1 < limit {
            "; the output limit ended this window"
        } else {
            ""
        };
        text.push_str(&format!(
            "\n… {} more lines (of {total}{why}); call read_file with offset={} to read on",
            total - last,
            last + 1
        ));
    }
    Ok(text.into())
}

/// `line`, cut to [`MAX_LINE_CHARS`] with a note saying how long it was.
fn cut(line: &str) -> std::borrow::Cow<'_, str> {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((at, _)) => format!(
            "{} … [line cut at {MAX_LINE_CHARS} of its {} chars]",
            &line[..at],
            line.chars().count()
        )
        .into(),
        None => line.into(),
    }
}
