//! `list_files`: the workspace's files under a directory, matching a glob, sorted by path.

use serde::Deserialize;
use serde_json::Value;

use std::ops::ControlFlow;

use super::walk::walk;
use super::{start, Glob};
use crate::confined::Kind;
use crate::fs_tool::{count, parse, Answer, FsCtx};

/// Files returned when the call gives no `max_results`.
const DEFAULT_MAX: usize = 500;
/// Most files any call returns.
const MAX_MAX: usize = 5000;
/// Past this many files the rest are no longer counted.
const COUNT_LIMIT: usize = 100_000;

#[derive(Deserialize)]
struct ListArgs {
    #[serde(default, alias = "glob")]
    pattern: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    max_results: Option<usize>,
}

/// `list_files {pattern?, path?, max_results?}`.
pub(crate) fn list_files(ctx: &FsCtx, args: Value) -> Result<Answer, String> {
    let args: ListArgs = parse(args, "list_files")?;
    let glob = args.pattern.as_deref().map(Glob::new).transpose()?;
    let max = args.max_results.unwrap_or(DEFAULT_MAX).clamp(1, MAX_MAX);
    let from = start(ctx, args.path.as_deref())?;
    let shown = ctx.place(&from);
    if !crate::files::hints::is_dir(ctx, &from) {
        let shown = ctx.display(&from);
        return Err(format!(
            "{shown} is a file; list_files lists the files under a directory (read_file reads this one)"
        ));
    }
    let budget = ctx.page_budget();
    let (mut text, mut listed, mut more) = (String::new(), 0, 0);
    let walked = walk(ctx, &from, |entry| {
        let is_file = matches!(entry.kind, Kind::File | Kind::Link);
        if !is_file
            || glob
                .as_ref()
                .is_some_and(|g| !g.matches(&from, &entry.path))
        {
            return ControlFlow::Continue(());
        }
        let row = format!("{}\n", ctx.display(&entry.path));
        if listed < max && more == 0 && text.len() + row.len() <= budget {
            text.push_str(&row);
            listed += 1;
        } else {
            more += 1;
            if more >= COUNT_LIMIT {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    walked.map_err(|e| crate::files::describe(&ctx.display(&from), &e))?;
    let what = match &args.pattern {
        Some(p) => format!("matching {p:?} "),
        None => String::new(),
    };
    if listed == 0 {
        return Ok(format!(
            "No files {what}under {shown} (files .gitignore excludes are not listed)"
        )
        .into());
    }
    if more > 0 {
        let n = if more >= COUNT_LIMIT {
            format!("more than {COUNT_LIMIT}")
        } else {
            more.to_string()
        };
        text.push_str(&format!(
            "[… {n} more {}; narrow the pattern or the path]",
            if more == 1 { "file" } else { "files" }
        ));
    } else {
        text.push_str(&format!("[{} {what}under {shown}]", count(listed, "file")));
    }
    Ok(text.into())
}
