//! What the workspace tools share: a tool is a blocking function of its arguments run on the
//! blocking pool (file I/O is short and synchronous), with the workspace, the output budget and
//! the session's read-only flag around it. Each answer is handed over as one chunk.

use std::path::Path;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::contract::{Output, Tool, ToolOutcome, ToolResult};
use crate::path::Workspace;

/// What one call of a workspace tool works with.
#[derive(Clone, Debug)]
pub(crate) struct FsCtx {
    pub workspace: Workspace,
    /// The session's output cap in chars: tools that page (read, search, list) stop before it
    /// so their own "read on" note is not the part the cap cuts.
    pub max_chars: Option<usize>,
    /// Everything but the writing: an edit tool answers with the diff it would make and
    /// leaves the workspace as it is (the preview shown at a call's approval).
    pub dry_run: bool,
}

impl FsCtx {
    /// `full` (a resolved path) as the model should see it: relative to the workspace root.
    pub(crate) fn display(&self, full: &Path) -> String {
        match full.strip_prefix(&self.workspace.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => full.to_string_lossy().into_owned(),
        }
    }

    /// `full` as a place in a sentence: `src/` or `the workspace root`.
    pub(crate) fn place(&self, full: &Path) -> String {
        match self.display(full) {
            root if root == "." => "the workspace root".to_owned(),
            dir if full.is_dir() => format!("{dir}/"),
            file => file,
        }
    }

    /// The chars a paging tool may fill before its closing note, leaving room for the note.
    pub(crate) fn page_budget(&self) -> usize {
        self.max_chars
            .map_or(usize::MAX, |m| m.saturating_sub(300).max(200))
    }
}

/// A tool's answer: its text and, for `read_image`, `data:` URLs.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    pub text: String,
    pub images: Vec<String>,
}

impl From<String> for Answer {
    fn from(text: String) -> Answer {
        Answer {
            text,
            images: Vec::new(),
        }
    }
}

/// One tool's body: its arguments in, its answer or its error text out.
pub(crate) type FsFn = fn(&FsCtx, Value) -> Result<Answer, String>;

/// A workspace tool bound to its body.
#[derive(Debug)]
pub(crate) struct FsTool {
    pub ctx: FsCtx,
    pub run: FsFn,
    /// It changes files: refused when the session's sandbox is read-only.
    pub writes: bool,
    pub read_only: bool,
}

impl FsTool {
    /// Runs the body on the blocking pool, for real or as a dry run.
    async fn answer(&self, args: Value, dry_run: bool) -> Result<Answer, String> {
        if self.writes && self.read_only {
            return Err(
                "refused: this session's sandbox is read-only (no writes in the workspace); ask the user to change the sandbox mode if the change is needed".to_owned(),
            );
        }
        let (mut ctx, run) = (self.ctx.clone(), self.run);
        ctx.dry_run = dry_run;
        tokio::task::spawn_blocking(move || run(&ctx, args))
            .await
            .map_err(|e| format!("the file operation did not finish: {e}"))?
    }

    /// The answer a call with `args` would get, computed without writing anything: for an
    /// edit tool, the diff it would make; `Err` is why the call would fail.
    pub(crate) async fn preview(&self, args: Value) -> Result<String, String> {
        self.answer(args, true).await.map(|a| a.text)
    }
}

#[async_trait]
impl Tool for FsTool {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let answer = self.answer(args, false).await?;
        out.emit(answer.text).await;
        Ok(ToolOutcome {
            images: answer.images,
            ..ToolOutcome::default()
        })
    }
}

/// The arguments of `tool`, or the error the model reads.
pub(crate) fn parse<T: DeserializeOwned>(args: Value, tool: &str) -> Result<T, String> {
    serde_json::from_value(args).map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

/// A byte count as a person reads it: `812 bytes`, `3.4 KiB`, `12.0 MiB`.
pub(crate) fn size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    // Display only: the precision lost above 2^53 bytes does not matter.
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    }
}

/// `n word` or `n words` (`entries`, `matches`: English plurals of the words used here).
pub(crate) fn count(n: usize, word: &str) -> String {
    if n == 1 {
        return format!("1 {word}");
    }
    match word.strip_suffix('y') {
        Some(stem) => format!("{n} {stem}ies"),
        None if word.ends_with("ch") || word.ends_with('s') || word.ends_with('x') => {
            format!("{n} {word}es")
        }
        None => format!("{n} {word}s"),
    }
}

/// `s` cut to at most `max` chars, with `…` where it was cut.
pub(crate) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}
