//! `grep_files`: a regular expression searched through the workspace's files, answered as
//! `path:line:text`.

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use serde::Deserialize;
use serde_json::Value;

use std::ops::ControlFlow;

use super::walk::walk;
use super::{start, Glob, MAX_SEARCH_FILE_BYTES};
use crate::confined::Kind;
use crate::fs_tool::{clip, count, parse, Answer, FsCtx};

/// Matches returned when the call gives no `max_results`.
const DEFAULT_MAX: usize = 200;
/// Most matches any call returns.
const MAX_MAX: usize = 2000;
/// Longer matching lines are cut to this many chars.
const LINE_CHARS: usize = 300;

#[derive(Deserialize)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default, alias = "include")]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    max_results: Option<usize>,
}

/// `grep_files {pattern, path?, glob?, case_insensitive?, max_results?}`.
pub(crate) fn grep_files(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: GrepArgs = parse(args, "grep_files")?;
    if args.pattern.is_empty() {
        return Err("pattern is empty".to_owned());
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .build(&args.pattern)
        .map_err(|e| {
            format!(
                "pattern {:?} is not a valid regular expression: {e}",
                args.pattern
            )
        })?;
    let glob = args.glob.as_deref().map(Glob::new).transpose()?;
    let max = args.max_results.unwrap_or(DEFAULT_MAX).clamp(1, MAX_MAX);
    let from = start(ctx, args.path.as_deref())?;
    let budget = ctx.page_budget();
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let (mut text, mut matches, mut files, mut full) = (String::new(), 0, 0, false);
    let walked = walk(ctx, &from, |entry| {
        if entry.kind != Kind::File {
            return ControlFlow::Continue(());
        }
        if glob
            .as_ref()
            .is_some_and(|g| !g.matches(&from, &entry.path))
        {
            return ControlFlow::Continue(());
        }
        // Opened beneath its folder's handle and checked on the descriptor: a link or FIFO
        // swapped in since the listing is refused here, without blocking. A file that cannot
        // be read is skipped, as ripgrep does.
        let Ok(file) = entry.dir.open_file(entry.name) else {
            return ControlFlow::Continue(());
        };
        if file
            .metadata()
            .map_or(true, |m| m.len() > MAX_SEARCH_FILE_BYTES)
        {
            return ControlFlow::Continue(());
        }
        files += 1;
        let shown = ctx.display(&entry.path);
        let sink = Lossy(|line_no, line: &str| {
            let row = format!(
                "{shown}:{line_no}:{}\n",
                clip(line.trim_end_matches(['\n', '\r']), LINE_CHARS)
            );
            if matches >= max || text.len() + row.len() > budget {
                full = true;
                return Ok(false);
            }
            text.push_str(&row);
            matches += 1;
            Ok(true)
        });
        let _ = searcher.search_file(&matcher, &file, sink);
        if full {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    walked.map_err(|e| crate::files::describe(&ctx.display(&from), &e))?;
    let shown = ctx.place(&from);
    if matches == 0 {
        return Ok(format!(
            "No matches for {:?} in {shown} ({} searched)",
            args.pattern,
            count(files, "file")
        )
        .into());
    }
    if full {
        text.push_str(&format!(
            "[stopped at {}; narrow the pattern, the path or the glob{}]",
            count(matches, "match"),
            if matches >= max && max < MAX_MAX {
                ", or raise max_results"
            } else {
                ""
            }
        ));
    }
    Ok(text.trim_end_matches('\n').to_owned().into())
}
