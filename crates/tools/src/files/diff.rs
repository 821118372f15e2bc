//! Unified diffs of a file's change, as edit_file, write_file and apply_patch answer them:
//! 3 lines of context, git's `a/` and `b/` labels, `/dev/null` for a side that does not
//! exist. A diff past the bounds is replaced by a summary of its size.

use similar::{ChangeTag, TextDiff};

/// Most lines of one diff shown; a longer one is summarised.
const MAX_LINES: usize = 400;
/// Most chars of one diff shown.
const MAX_CHARS: usize = 12_000;

/// The label of a file that does not exist on that side of a diff.
pub(crate) const NO_FILE: &str = "/dev/null";

/// How many lines a change adds and removes.
pub(crate) fn counts(old: &str, new: &str) -> (usize, usize) {
    let diff = TextDiff::from_lines(old, new);
    diff.iter_all_changes()
        .fold((0, 0), |(add, del), c| match c.tag() {
            ChangeTag::Insert => (add + 1, del),
            ChangeTag::Delete => (add, del + 1),
            ChangeTag::Equal => (add, del),
        })
}

/// `old` → `new` as a unified diff between `from` and `to` (workspace-relative paths, or
/// [`NO_FILE`]), or a line saying how large it is when it is past the bounds; no final newline.
pub(crate) fn unified(from: &str, to: &str, old: &str, new: &str) -> String {
    let text = render(from, to, old, new);
    let lines = text.lines().count();
    if lines > MAX_LINES || text.len() > MAX_CHARS {
        let (add, del) = counts(old, new);
        return format!(
            "[diff not shown: {lines} lines, +{add} -{del}; read_file shows the result]"
        );
    }
    text.trim_end_matches('\n').to_owned()
}

/// [`unified`] within `max_lines` and `max_chars` (a person's view may show more than a
/// model's answer); `None` past them.
pub(crate) fn unified_within(
    from: &str,
    to: &str,
    old: &str,
    new: &str,
    max_lines: usize,
    max_chars: usize,
) -> Option<String> {
    let text = render(from, to, old, new);
    (text.lines().count() <= max_lines && text.len() <= max_chars)
        .then(|| text.trim_end_matches('\n').to_owned())
}

fn render(from: &str, to: &str, old: &str, new: &str) -> String {
    let label = |p: &str, side: &str| {
        if p == NO_FILE {
            NO_FILE.to_owned()
        } else {
            format!("{side}/{p}")
        }
    };
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&label(from, "a"), &label(to, "b"))
        .to_string()
}
