//! Bounded reads for listings. A list of sessions needs a few records of each: the head of the
//! first file (`session_meta`, the first prompt) and the end of the last (how the last run
//! ended). Reading whole files instead made listing cost as much as every trace together, and
//! never end on a file without one.

use std::ops::ControlFlow;
use std::path::Path;

use penguin_omni_protocol::{ModelPayload, OmniMessage, Role, SessionMeta};

use crate::error::TraceError;
use crate::lines::{buffer, part_lines, Line, TraceLines};
use crate::open::{open_trace, MAX_RECORD_BYTES};
use crate::reader::{is_blank, parse_line};

/// How much of the head of a file a listing reads at most, in bytes. `session_meta` (with the
/// whole system prompt) and the first prompt come first and are almost always far shorter; a
/// reader that has what it needs stops sooner.
pub const LIST_HEAD_BYTES: u64 = 1 << 20;

/// How much of the end of a file a listing reads at most, in bytes ([`find_last_record`]).
pub const LIST_TAIL_BYTES: u64 = 1 << 20;

/// The first tail window [`find_last_record`] reads; it grows fourfold while nothing is found.
const FIRST_TAIL: u64 = 64 << 10;

/// Hands each record within the first `max_bytes` of `path` to `on_record`, with its 1-based
/// line number, until `on_record` breaks or the window ends.
///
/// A listing needs a file's first records only, and whatever the file holds further on is
/// never read. The file is opened with [`open_trace`]; lines that do not parse, are over
/// [`MAX_RECORD_BYTES`] or are cut short by the window are passed over, as the tolerant
/// reader passes over broken lines.
pub fn read_trace_head(
    path: &Path,
    max_bytes: u64,
    mut on_record: impl FnMut(usize, OmniMessage) -> ControlFlow<()>,
) -> Result<(), TraceError> {
    let mut lines = TraceLines::head(path, max_bytes)?;
    while let Some((number, line)) = lines.next_line()? {
        let Ok(bytes) = line else { continue };
        if is_blank(bytes) {
            continue;
        }
        let Ok(record) = parse_line(bytes) else {
            continue;
        };
        if on_record(number, record).is_break() {
            break;
        }
    }
    Ok(())
}

/// What `pick` gives for the last record it gives something for, looking only at the last
/// `max_bytes` of `path`: `None` when no record there answers.
///
/// The end of a file is read in windows that grow from 64 KiB up to `max_bytes`, each starting
/// at the first line that begins inside it, so a file whose last records are small (the usual
/// case) costs one small read however long it is. Lines are passed over as
/// [`read_trace_head`] passes them over.
pub fn find_last_record<T>(
    path: &Path,
    max_bytes: u64,
    mut pick: impl FnMut(&OmniMessage) -> Option<T>,
) -> Result<Option<T>, TraceError> {
    let io = |e| TraceError::io(path, e);
    let file = open_trace(path)?;
    // What the file held when it was opened: a writer appending meanwhile is not followed.
    let size = file.metadata().map_err(io)?.len();
    let mut window = FIRST_TAIL.min(max_bytes);
    loop {
        let start = size.saturating_sub(window);
        // From the byte before the window: the first line read is then the end of a line
        // that began before it (or an empty one), never one of its own.
        let from = start.saturating_sub(1);
        let limit = usize::try_from(window)
            .unwrap_or(usize::MAX)
            .min(MAX_RECORD_BYTES);
        let mut lines =
            part_lines(&file, from, Some(size), buffer(size - from), limit).map_err(io)?;
        let mut found = None;
        while let Some((number, line)) = lines.next_line().map_err(io)? {
            let Line::Text(bytes) = line else { continue };
            if (start > 0 && number == 1) || is_blank(bytes) {
                continue;
            }
            if let Some(t) = parse_line(bytes).ok().as_ref().and_then(&mut pick) {
                found = Some(t);
            }
        }
        if found.is_some() || start == 0 || window >= max_bytes {
            return Ok(found);
        }
        window = window.saturating_mul(4).min(max_bytes);
    }
}

/// What a listing shows of a session, from the head of its first file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionHead {
    /// Its `session_meta`, when the file starts with one.
    pub meta: Option<SessionMeta>,
    /// When the `session_meta` was written.
    pub created_at: Option<String>,
    /// Its title by [`session_title`]: from the first user text of its own (a subagent's does
    /// not count), with [`FORK_MARK`] after it for a fork.
    pub title: Option<String>,
    /// The same first prompt for a search: its own text, whitespace collapsed, its first
    /// [`PROMPT_CHARS`] characters (a listing keeps it for every session, so it is bounded).
    pub prompt: Option<String>,
}

/// How much of a session's first prompt [`SessionHead::prompt`] keeps.
pub const PROMPT_CHARS: usize = 2000;

/// What a fork's title ends with (see [`read_session_head`]).
pub const FORK_MARK: &str = " (fork)";

/// A session's title from its first prompt: the user's own text (the marker blocks a host
/// puts in front, such as goal mode's `[goal]`, left out), whitespace collapsed, at most 60
/// characters (cut with `…`). One rule, so the CLI, the API and the web app name a session
/// alike.
///
/// ```
/// use penguin_trace_store::session_title;
/// assert_eq!(session_title("fix   the\nparser"), "fix the parser");
/// let goal = "[goal]\nround: 1\nThis message was sent automatically…\n[/goal]\n\nShip the parser";
/// assert_eq!(session_title(goal), "Ship the parser");
/// ```
pub fn session_title(prompt: &str) -> String {
    // A goal round's first message starts with the harness's own `[goal]` block: the title is
    // the objective after it, not the harness's words.
    let own = penguin_omni_protocol::markers::strip_leading_marker_blocks(prompt);
    let prompt = if own.trim().is_empty() { prompt } else { own };
    let one = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 60 {
        format!("{}…", one.chars().take(59).collect::<String>())
    } else {
        one
    }
}

// The first prompt as a search sees it: the text `session_title` is cut from, uncut up to the
// bound.
fn prompt_text(prompt: &str) -> String {
    let own = penguin_omni_protocol::markers::strip_leading_marker_blocks(prompt);
    let prompt = if own.trim().is_empty() { prompt } else { own };
    let mut out = String::new();
    let mut chars = 0;
    for word in prompt.split_whitespace() {
        for c in (chars > 0).then_some(' ').into_iter().chain(word.chars()) {
            if chars == PROMPT_CHARS {
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

/// Reads the [`SessionHead`] of `path` within its first [`LIST_HEAD_BYTES`], stopping as soon
/// as it has both the `session_meta` and the first prompt.
pub fn read_session_head(path: &Path) -> Result<SessionHead, TraceError> {
    let mut head = SessionHead::default();
    read_trace_head(path, LIST_HEAD_BYTES, |_, m| {
        if head.meta.is_none() {
            if let Some(meta) = m.session_meta() {
                head.meta = Some(meta.clone());
                head.created_at = Some(m.timestamp.as_str().to_owned());
            }
        }
        if head.title.is_none() && !m.has_origin() {
            if let Some(ModelPayload::Text(t)) = m.model() {
                if t.role == Role::User {
                    head.title = Some(session_title(&t.text));
                    head.prompt = Some(prompt_text(&t.text));
                }
            }
        }
        // A fork has its source's first prompt: the title says which is which.
        if let (Some(title), Some(meta)) = (&mut head.title, &head.meta) {
            if meta.forked_from.is_some() && !title.ends_with(FORK_MARK) {
                title.push_str(FORK_MARK);
            }
        }
        match head.meta.is_some() && head.title.is_some() {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        }
    })?;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::build;

    #[test]
    fn the_search_prompt_is_the_titles_text_uncut_and_bounded() {
        assert_eq!(prompt_text("fix   the\nparser"), "fix the parser");
        let goal = "[goal]\nround: 1\n[/goal]\n\nShip  the parser";
        assert_eq!(prompt_text(goal), "Ship the parser");
        let long = "word ".repeat(1000);
        let kept = prompt_text(&long);
        assert_eq!(kept.chars().count(), PROMPT_CHARS);
        assert!(long.starts_with(&kept));
    }

    fn texts(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn the_last_answer_is_found_in_the_smallest_window_that_holds_it() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let path = file.path();
        let mark = |i: usize| build::user_text(format!("mark {i}")).to_json();
        let filler = build::assistant_text(
            "y".repeat(1000),
            penguin_omni_protocol::StopReason::Completed,
        )
        .to_json();
        let pick = |m: &OmniMessage| {
            m.to_json()
                .split("mark ")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .and_then(|n| n.parse::<usize>().ok())
        };
        // Marks far apart: the last one is found, not one before it.
        let mut lines = vec![mark(0)];
        lines.extend(std::iter::repeat_n(filler.clone(), 200));
        lines.push(mark(1));
        lines.extend(std::iter::repeat_n(filler.clone(), 3));
        std::fs::write(path, texts(&lines)).unwrap();
        assert_eq!(
            find_last_record(path, LIST_TAIL_BYTES, pick).unwrap(),
            Some(1)
        );
        // Only beyond the first window: the window grows to it.
        let mut lines = vec![mark(7)];
        lines.extend(std::iter::repeat_n(filler.clone(), 150));
        std::fs::write(path, texts(&lines)).unwrap();
        assert_eq!(
            find_last_record(path, LIST_TAIL_BYTES, pick).unwrap(),
            Some(7)
        );
        // Beyond the bound: not read.
        assert_eq!(find_last_record(path, 100 << 10, pick).unwrap(), None);
        // A window that starts inside a record never parses a piece of it.
        std::fs::write(path, texts(&[mark(3), mark(4)])).unwrap();
        let second = mark(4).len() as u64 + 1;
        for max in 1..=second + 3 {
            let want = (max >= second).then_some(4);
            assert_eq!(find_last_record(path, max, pick).unwrap(), want, "{max}");
        }
    }

    #[test]
    fn the_head_stops_where_the_reader_does_and_where_the_window_does() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let path = file.path();
        let lines: Vec<String> = (0..10)
            .map(|i| build::user_text(format!("r{i}")).to_json())
            .collect();
        let mut text = texts(&lines);
        text.insert_str(lines[0].len() + 1, "{broken\n\n");
        std::fs::write(path, &text).unwrap();
        let mut seen = Vec::new();
        read_trace_head(path, LIST_HEAD_BYTES, |n, _| {
            seen.push(n);
            match seen.len() {
                3 => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        })
        .unwrap();
        assert_eq!(seen, [1, 4, 5]);
        // A window ending inside the third record hands out the two before it only.
        let cut = (lines[0].len() + 1 + "{broken\n\n".len() + lines[1].len() + 1 + 5) as u64;
        let mut seen = Vec::new();
        read_trace_head(path, cut, |n, _| {
            seen.push(n);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(seen, [1, 4]);
    }
}
