//! How a tool's answer is shown below its status line: unified diffs coloured (the edit tools
//! show theirs even when other outputs are collapsed), `update_plan` as a checklist, and a
//! note when the answer carries images.

use crate::describe::clip;
use crate::untrusted::neutralise;
use crate::untrusted::style::{BOLD, CYAN, DIM, GREEN, RED, RESET, YELLOW};

/// Most lines of an edit tool's diff shown when output is collapsed (`-v` or `/expand` show
/// the rest).
pub(crate) const DIFF_LINES: usize = 40;

/// The tools whose answer is a summary line and diffs, shown even when collapsed.
pub(crate) fn shows_diff(tool: &str) -> bool {
    matches!(tool, "write_file" | "edit_file" | "apply_patch")
}

/// What one line of a tool's output is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineKind {
    /// Anything outside a diff.
    Text,
    /// `--- a/P` or `+++ b/P` (`/dev/null` for a side that does not exist).
    FileHeader,
    /// `@@ -a,b +c,d @@`.
    Hunk,
    /// `+…` in a hunk.
    Added,
    /// `-…` in a hunk.
    Removed,
    /// ` …` in a hunk.
    Context,
    /// `\ No newline at end of file`.
    Note,
}

/// Each line of `output` with its kind. A diff starts at `--- a/P` or `--- /dev/null` right
/// above `+++ b/P` (or `+++ /dev/null`); its hunks are read by the counts of their `@@`
/// headers, so a removed line that happens to read `--- a/x` stays a removed line, and the
/// text after the last hunk is text again.
pub(crate) fn classify(output: &str) -> Vec<(LineKind, &str)> {
    let lines: Vec<&str> = output.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut in_diff = false;
    // Old and new lines still to come in the current hunk.
    let (mut old, mut new) = (0u64, 0u64);
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if old > 0 || new > 0 {
            let kind = match line.as_bytes().first() {
                Some(b' ') | None => {
                    old = old.saturating_sub(1);
                    new = new.saturating_sub(1);
                    Some(LineKind::Context)
                }
                Some(b'-') if old > 0 => {
                    old -= 1;
                    Some(LineKind::Removed)
                }
                Some(b'+') if new > 0 => {
                    new -= 1;
                    Some(LineKind::Added)
                }
                Some(b'\\') => Some(LineKind::Note),
                _ => None,
            };
            match kind {
                Some(kind) => {
                    out.push((kind, line));
                    i += 1;
                    continue;
                }
                // Not what the header promised: the diff ended early.
                None => (old, new, in_diff) = (0, 0, false),
            }
        }
        if is_file_header(line, lines.get(i + 1).copied()) {
            out.push((LineKind::FileHeader, line));
            out.push((LineKind::FileHeader, lines[i + 1]));
            in_diff = true;
            i += 2;
            continue;
        }
        let kind = match in_diff {
            true if line.starts_with('\\') => LineKind::Note,
            true => match hunk_counts(line) {
                Some((o, n)) => {
                    (old, new) = (o, n);
                    LineKind::Hunk
                }
                None => {
                    in_diff = false;
                    LineKind::Text
                }
            },
            false => LineKind::Text,
        };
        out.push((kind, line));
        i += 1;
    }
    out
}

fn is_file_header(line: &str, next: Option<&str>) -> bool {
    (line.starts_with("--- a/") || line == "--- /dev/null")
        && next.is_some_and(|n| n.starts_with("+++ b/") || n == "+++ /dev/null")
}

/// The old and new line counts of a hunk header `@@ -a[,b] +c[,d] @@…` (a count left out is 1).
fn hunk_counts(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let count = |range: &str| -> Option<u64> {
        match range.split_once(',') {
            Some((start, n)) => start.parse::<u64>().ok().and(n.parse().ok()),
            None => range.parse::<u64>().ok().map(|_| 1),
        }
    };
    Some((count(old)?, count(new)?))
}

/// `line` styled for its kind: headers bold, hunk headers cyan, added lines green, removed
/// red, context dimmed, text as it is.
pub(crate) fn paint(kind: LineKind, line: &str, color: bool) -> String {
    let style = match kind {
        _ if !color => return line.to_owned(),
        LineKind::Text => return line.to_owned(),
        LineKind::FileHeader => BOLD,
        LineKind::Hunk => CYAN,
        LineKind::Added => GREEN,
        LineKind::Removed => RED,
        LineKind::Context | LineKind::Note => DIM,
    };
    format!("{style}{line}{RESET}")
}

/// `output`'s lines, [`neutralise`]d, each indented and painted for its kind (`/expand`).
pub(crate) fn painted(output: &str, color: bool) -> Vec<String> {
    classify(&neutralise(output))
        .into_iter()
        .map(|(kind, line)| format!("    {}", paint(kind, line.trim_end(), color)))
        .collect()
}

/// What is shown of a tool's answer below its status line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Body {
    /// Lines shown, styled and indented.
    pub(crate) lines: Vec<String>,
    /// Lines of the output left out.
    pub(crate) hidden: usize,
}

/// The lines below a tool's status line (which shows the output's first line): every other
/// line with `verbose`; else an edit tool's diffs (at most [`DIFF_LINES`]) and a plan's
/// checklist when the call completed; else nothing. The output is [`neutralise`]d first, so
/// the only styles in the lines are the ones added here.
pub(crate) fn body(tool: &str, output: &str, completed: bool, verbose: bool, color: bool) -> Body {
    let output = neutralise(output);
    let rest = output.split_once('\n').map_or("", |(_, rest)| rest);
    let total = rest.lines().count();
    if completed && !verbose && tool == "update_plan" {
        if let Some(lines) = checklist(rest, color) {
            return Body { lines, hidden: 0 };
        }
    }
    let max = match (verbose, completed && shows_diff(tool)) {
        (true, _) => usize::MAX,
        (false, true) => DIFF_LINES,
        (false, false) => 0,
    };
    let lines = classify(rest)
        .into_iter()
        .take(max)
        .map(|(kind, line)| match kind {
            // Text around the diffs is dimmed, as every line of a verbose tool output.
            LineKind::Text if color => format!("    {DIM}{}{RESET}", line.trim_end()),
            _ => format!("    {}", paint(kind, line.trim_end(), color)),
        })
        .collect::<Vec<_>>();
    Body {
        hidden: total - lines.len(),
        lines,
    }
}

/// A plan's lines (`update_plan`'s answer after `Plan updated`: the explanation, then `[x]`,
/// `[~]` and `[ ]` steps) as a checklist: done steps green, the one in progress bold yellow,
/// the explanation dimmed. `None` when the lines are not a plan.
pub(crate) fn checklist(lines: &str, color: bool) -> Option<Vec<String>> {
    let lines = &*neutralise(lines);
    let style = |code: &'static str| if color { code } else { "" };
    let (dim, bold, green, yellow, reset) = (
        style(DIM),
        style(BOLD),
        style(GREEN),
        style(YELLOW),
        style(RESET),
    );
    let mut out = Vec::new();
    let mut steps = 0;
    for line in lines.lines() {
        let shown = match line.get(..4) {
            Some("[x] ") => format!("{green}[x]{reset} {dim}{}{reset}", &line[4..]),
            Some("[~] ") => format!("{bold}{yellow}[~] {}{reset}", &line[4..]),
            Some("[ ] ") => line.to_owned(),
            _ if steps == 0 => format!("{dim}{line}{reset}"),
            _ => return None,
        };
        if line.starts_with('[') {
            steps += 1;
        }
        out.push(format!("    {shown}"));
    }
    (steps > 0 || lines.trim() == "(no steps)").then_some(out)
}

/// What an `update_plan` call line says of its arguments (`{explanation?, plan: [{step,
/// status}]}`): the explanation, the number of steps and how many are done. `None` when they
/// are not a plan.
pub(crate) fn plan_summary(arguments: &str) -> Option<String> {
    let args: serde_json::Value = serde_json::from_str(arguments).ok()?;
    let plan = args.get("plan")?.as_array()?;
    let done = plan
        .iter()
        .filter(|s| s.get("status").and_then(|s| s.as_str()) == Some("completed"))
        .count();
    let counts = match plan.len() {
        1 => format!("1 step, {done} done"),
        n => format!("{n} steps, {done} done"),
    };
    Some(match args.get("explanation").and_then(|e| e.as_str()) {
        Some(e) if !e.trim().is_empty() => format!("{} ({counts})", clip(e.trim(), 80)),
        _ => format!("({counts})"),
    })
}

/// The note after the status line of an answer that carries `n` images.
pub(crate) fn images_note(n: usize) -> Option<String> {
    match n {
        0 => None,
        1 => Some("[image attached]".into()),
        n => Some(format!("[{n} images attached]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Escape codes as readable tags, for snapshots.
    fn tags(s: &str) -> String {
        [
            (DIM, "<dim>"),
            (BOLD, "<bold>"),
            (RED, "<red>"),
            (GREEN, "<green>"),
            (YELLOW, "<yellow>"),
            (CYAN, "<cyan>"),
            (RESET, "</>"),
        ]
        .iter()
        .fold(s.to_owned(), |s, (code, tag)| s.replace(code, tag))
    }

    const PATCHED: &str = "Success. Updated the following files:
A docs/new.md
M src/app.py
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+# New
+text
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 keep
--- a/comment
+++ b/comment
 tail
\\ No newline at end of file
[output truncated]";

    #[test]
    fn diff_blocks_are_found_by_their_headers_and_hunk_counts() {
        let kinds: Vec<LineKind> = classify(PATCHED).into_iter().map(|(k, _)| k).collect();
        use LineKind::*;
        assert_eq!(
            kinds,
            [
                Text, Text, Text, FileHeader, FileHeader, Hunk, Added, Added, FileHeader,
                FileHeader, Hunk, Context, Removed, Added, Context, Note, Text
            ]
        );
        // Not a diff: `---` without `+++ b/` under it, or a hunk header alone.
        let plain = "--- a/x\nnot a header\n@@ -1 +1 @@\n-x";
        assert!(classify(plain).iter().all(|(k, _)| *k == Text));
        assert_eq!(hunk_counts("@@ -3 +3,2 @@ fn main"), Some((1, 2)));
        assert_eq!(hunk_counts("@@ -x +3 @@"), None);
    }

    #[test]
    fn an_edit_tools_diff_is_coloured() {
        let shown = body("apply_patch", PATCHED, true, false, true);
        insta::assert_snapshot!(tags(&shown.lines.join("\n")));
        assert_eq!(shown.hidden, 0);
        // No colour: the same lines, plain.
        let plain = body("apply_patch", PATCHED, true, false, false);
        assert_eq!(plain.lines[5], "    +# New");
        assert!(!plain.lines.concat().contains('\x1b'));
    }

    #[test]
    fn collapsed_output_shows_a_diff_up_to_its_limit_and_other_tools_nothing() {
        let long: String = std::iter::once(
            "Created big.txt (50 lines)\n--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,50 @@\n"
                .to_owned(),
        )
        .chain((0..50).map(|i| format!("+line {i}\n")))
        .collect();
        let shown = body("write_file", &long, true, false, false);
        assert_eq!(shown.lines.len(), DIFF_LINES);
        assert_eq!(shown.hidden, 53 - DIFF_LINES);
        assert_eq!(body("write_file", &long, true, true, false).hidden, 0);
        // A failed edit, or another tool: collapsed as before.
        let failed = body("edit_file", "[tool error] x\nmore", false, false, false);
        assert_eq!((failed.lines.len(), failed.hidden), (0, 1));
        let other = body("exec_command", &long, true, false, false);
        assert_eq!((other.lines.len(), other.hidden), (0, 53));
    }

    #[test]
    fn a_plan_is_a_checklist() {
        let output =
            "Plan updated\nStarting.\n[x] Read the code\n[~] Write the fix\n[ ] Run the tests";
        let shown = body("update_plan", output, true, false, true);
        insta::assert_snapshot!(tags(&shown.lines.join("\n")));
        let plain = body("update_plan", output, true, false, false);
        assert_eq!(
            plain.lines,
            [
                "    Starting.",
                "    [x] Read the code",
                "    [~] Write the fix",
                "    [ ] Run the tests"
            ]
        );
        assert_eq!(
            body(
                "update_plan",
                "Plan updated\n(no steps)",
                true,
                false,
                false
            )
            .lines,
            ["    (no steps)"]
        );
        // An error is not a plan.
        let failed = body(
            "update_plan",
            "[tool error] two\nsteps",
            false,
            false,
            false,
        );
        assert!(failed.lines.is_empty());
        assert_eq!(checklist("[x] a\nstray", false), None);
    }

    #[test]
    fn a_plan_call_is_summarised_from_its_arguments() {
        let args = r#"{"explanation":"Starting.","plan":[{"step":"Read","status":"completed"},{"step":"Fix","status":"in_progress"},{"step":"Test","status":"pending"}]}"#;
        assert_eq!(
            plan_summary(args).as_deref(),
            Some("Starting. (3 steps, 1 done)")
        );
        assert_eq!(
            plan_summary(r#"{"plan":[{"step":"a","status":"pending"}]}"#).as_deref(),
            Some("(1 step, 0 done)")
        );
        assert_eq!(plan_summary(r#"{"plan":"x"}"#), None);
        assert_eq!(plan_summary("not json"), None);
    }

    #[test]
    fn images_are_noted() {
        assert_eq!(images_note(0), None);
        assert_eq!(images_note(1).as_deref(), Some("[image attached]"));
        assert_eq!(images_note(3).as_deref(), Some("[3 images attached]"));
    }
}
