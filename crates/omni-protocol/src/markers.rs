//! Marker blocks and transcript lines (protocol [§1.10](crate::spec#s1.10) *Marker blocks*).

use crate::message::StopReason;

/// Tags whose legacy `<tag>…</tag>` form parsers still accept.
pub const LEGACY_TAGS: &[&str] = &[
    "turn_aborted",
    "turn_retried",
    "context_summary",
    "summary",
    "use_skills",
    "handoff_from",
    "scheduled_task",
    "model_switch_from",
    "background_task_done",
];

/// `"[tag]\n" + body + "\n[/tag]"`: the only form producers write.
///
/// ```
/// assert_eq!(penguin_omni_protocol::markers::marker_block("user_steering", "go"), "[user_steering]\ngo\n[/user_steering]");
/// ```
pub fn marker_block(tag: &str, body: &str) -> String {
    format!("[{tag}]\n{body}\n[/{tag}]")
}

/// A message that pins skills `names`: a `[use_skills]` block naming them, a blank line, then
/// `text` (just the block when there is no text; `text` alone when there are no names). The one
/// spelling of the block, for every surface that pins skills.
///
/// ```
/// use penguin_omni_protocol::markers::use_skills_message;
/// assert_eq!(
///     use_skills_message(&["web-design".into()], "fix the layout"),
///     "[use_skills]\nskills: web-design\n[/use_skills]\n\nfix the layout"
/// );
/// ```
pub fn use_skills_message(names: &[String], text: &str) -> String {
    if names.is_empty() {
        return text.to_owned();
    }
    let block = marker_block("use_skills", &format!("skills: {}", names.join(", ")));
    if text.is_empty() {
        block
    } else {
        format!("{block}\n\n{text}")
    }
}

/// The opening tag, the lines and the closing tag, joined by newlines. Unlike
/// [`marker_block`], no lines means no body line at all: the reference joins the tags and
/// lines rather than wrapping a body, so an empty transcript is `"[tag]\n[/tag]"`.
fn transcript_block(tag: &str, lines: &[String]) -> String {
    let open = format!("[{tag}]");
    let close = format!("[/{tag}]");
    std::iter::once(open.as_str())
        .chain(lines.iter().map(String::as_str))
        .chain(std::iter::once(close.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `[turn_aborted]` block of a Case B carry-over.
///
/// ```
/// use penguin_omni_protocol::markers::turn_aborted_block;
/// assert_eq!(turn_aborted_block(&[]), "[turn_aborted]\n[/turn_aborted]");
/// assert_eq!(turn_aborted_block(&["  [text]a[/text]".into()]), "[turn_aborted]\n  [text]a[/text]\n[/turn_aborted]");
/// ```
pub fn turn_aborted_block(lines: &[String]) -> String {
    transcript_block("turn_aborted", lines)
}

/// The `[turn_retried]` block of a reconnect attempt.
pub fn turn_retried_block(lines: &[String]) -> String {
    transcript_block("turn_retried", lines)
}

/// `unwrapSyntheticBlock`: when `text` is entirely one `[turn_aborted]` or `[turn_retried]`
/// block (either form), returns its inner lines. An empty body has no lines (not one empty
/// line), so merging an empty block into a new one adds nothing.
pub fn unwrap_synthetic_block(text: &str) -> Option<Vec<String>> {
    for tag in ["turn_aborted", "turn_retried"] {
        for (open, close) in [
            (format!("[{tag}]"), format!("[/{tag}]")),
            (format!("<{tag}>"), format!("</{tag}>")),
        ] {
            let Some(rest) = text.strip_prefix(&open) else {
                continue;
            };
            let rest = rest.strip_prefix('\n').unwrap_or(rest);
            // The reference's lazy `([\s\S]*?)\n?\[/tag\]\s*$`: the first closing tag that only
            // whitespace follows.
            let mut from = 0;
            while let Some(found) = rest[from..].find(&close) {
                let at = from + found;
                if rest[at + close.len()..].chars().all(char::is_whitespace) {
                    let inner = &rest[..at];
                    let inner = inner.strip_suffix('\n').unwrap_or(inner);
                    if inner.is_empty() {
                        return Some(Vec::new());
                    }
                    return Some(inner.split('\n').map(str::to_owned).collect());
                }
                from = at + close.len();
            }
        }
    }
    None
}

/// Finds the body of the first `[tag]…[/tag]` (or legacy `<tag>…</tag>`) block in `text`.
pub fn find_block<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let forms = [
        (format!("[{tag}]"), format!("[/{tag}]")),
        (format!("<{tag}>"), format!("</{tag}>")),
    ];
    let legacy = LEGACY_TAGS.contains(&tag);
    for (i, (open, close)) in forms.iter().enumerate() {
        if i == 1 && !legacy {
            break;
        }
        if let Some(start) = text.find(open.as_str()) {
            let body_start = start + open.len();
            if let Some(len) = text[body_start..].find(close.as_str()) {
                let body = &text[body_start..body_start + len];
                let body = body.strip_prefix('\n').unwrap_or(body);
                return Some(body.strip_suffix('\n').unwrap_or(body));
            }
        }
    }
    None
}

/// One line of a turn transcript, as it appears inside `[turn_aborted]` and `[turn_retried]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TranscriptLine {
    /// `  [user_input]TEXT[/user_input]`
    UserInput(String),
    /// `  [thinking]TEXT[/thinking]`
    Thinking(String),
    /// `  [text]TEXT[/text]`
    Text(String),
    /// `  [tool_call name="NAME" id="ID"]ARGS[/tool_call]`
    ToolCall {
        /// Tool name.
        name: String,
        /// Call id.
        id: String,
        /// Argument JSON.
        arguments: String,
    },
    /// `  [tool_call_output id="ID" status="STOP_REASON"]OUTPUT[/tool_call_output]`
    ToolCallOutput {
        /// Call id.
        id: String,
        /// How it ended.
        status: StopReason,
        /// Output text.
        output: String,
    },
}

impl TranscriptLine {
    /// The line, indented by two spaces.
    pub fn render(&self) -> String {
        match self {
            TranscriptLine::UserInput(t) => format!("  [user_input]{t}[/user_input]"),
            TranscriptLine::Thinking(t) => format!("  [thinking]{t}[/thinking]"),
            TranscriptLine::Text(t) => format!("  [text]{t}[/text]"),
            TranscriptLine::ToolCall {
                name,
                id,
                arguments,
            } => {
                format!("  [tool_call name=\"{name}\" id=\"{id}\"]{arguments}[/tool_call]")
            }
            TranscriptLine::ToolCallOutput { id, status, output } => {
                format!("  [tool_call_output id=\"{id}\" status=\"{status}\"]{output}[/tool_call_output]")
            }
        }
    }

    /// Parses a rendered line (leading indentation optional).
    pub fn parse(line: &str) -> Option<TranscriptLine> {
        let l = line.trim_start_matches(' ');
        let simple = |tag: &str| -> Option<String> {
            l.strip_prefix(&format!("[{tag}]"))?
                .strip_suffix(&format!("[/{tag}]"))
                .map(str::to_owned)
        };
        if let Some(t) = simple("user_input") {
            return Some(TranscriptLine::UserInput(t));
        }
        if let Some(t) = simple("thinking") {
            return Some(TranscriptLine::Thinking(t));
        }
        if let Some(t) = simple("text") {
            return Some(TranscriptLine::Text(t));
        }
        if let Some(rest) = l.strip_prefix("[tool_call name=\"") {
            let (name, rest) = rest.split_once("\" id=\"")?;
            let (id, rest) = rest.split_once("\"]")?;
            let arguments = rest.strip_suffix("[/tool_call]")?;
            return Some(TranscriptLine::ToolCall {
                name: name.into(),
                id: id.into(),
                arguments: arguments.into(),
            });
        }
        if let Some(rest) = l.strip_prefix("[tool_call_output id=\"") {
            let (id, rest) = rest.split_once("\" status=\"")?;
            let (status, rest) = rest.split_once("\"]")?;
            let output = rest.strip_suffix("[/tool_call_output]")?;
            return Some(TranscriptLine::ToolCallOutput {
                id: id.into(),
                status: status.parse().ok()?,
                output: output.into(),
            });
        }
        None
    }
}

/// A goal round's input, as `parseGoalMessage` reads it: a text that starts with a `[goal]`
/// block whose first line is `round: N` (N > 0) and whose closing tag stands on its own line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoalRound<'a> {
    /// The round number, spelled as the reference's number formatting spells it.
    pub round: String,
    /// The text after the block, leading blank lines removed.
    pub rest: &'a str,
}

/// Parses a goal round's input; `None` for any other text.
///
/// ```
/// use penguin_omni_protocol::markers::parse_goal_message;
/// let g = parse_goal_message("[goal]\nround: 2\nrules\n[/goal]\n\nship it").unwrap();
/// assert_eq!((g.round.as_str(), g.rest), ("2", "ship it"));
/// assert_eq!(parse_goal_message("[goal]\nround: 0\nx\n[/goal]"), None);
/// assert_eq!(parse_goal_message("[goal]\nround: 1\n[/goal] trailing"), None);
/// ```
pub fn parse_goal_message(text: &str) -> Option<GoalRound<'_>> {
    const CLOSE: &str = "\n[/goal]";
    let after = text.strip_prefix("[goal]\nround: ")?;
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let round = js_integer_string(&after[..digits])?;
    let body = after[digits..].strip_prefix('\n')?;
    // The reference's lazy `[\s\S]*?\n\[/goal\](?:\n|$)`: the first closing tag that ends
    // the text or its line.
    let mut from = 0;
    let rest = loop {
        let at = from + body[from..].find(CLOSE)?;
        let tail = &body[at + CLOSE.len()..];
        if tail.is_empty() || tail.starts_with('\n') {
            break tail;
        }
        from = at + 1;
    };
    Some(GoalRound {
        round,
        rest: rest.trim_start_matches('\n'),
    })
}

/// `Number(digits)` as JavaScript prints it back, or `None` unless it is a positive integer
/// (the reference rejects 0 and numbers too large to be finite).
fn js_integer_string(digits: &str) -> Option<String> {
    let n: f64 = digits.parse().ok()?;
    if !n.is_finite() || n <= 0.0 {
        return None;
    }
    if n < 1e21 {
        return Some(format!("{n}"));
    }
    // JavaScript switches to exponent notation at 1e21 and always signs the exponent.
    Some(format!("{n:e}").replacen('e', "e+", 1))
}

/// `downgradeGoalInput`: a goal round's input reused after its goal run ended becomes a
/// one-line past-tense note plus the round's body, so the model does not act on a dead goal's
/// protocol. Any other text comes back unchanged.
///
/// ```
/// use penguin_omni_protocol::markers::downgrade_goal_input;
/// assert_eq!(
///     downgrade_goal_input("[goal]\nround: 1\nrules\n[/goal]\n\nmake tests pass"),
///     "[goal round 1 of an ended goal run \u{2014} protocol omitted; do not act on it]\nmake tests pass"
/// );
/// assert_eq!(downgrade_goal_input("plain"), "plain");
/// ```
pub fn downgrade_goal_input(text: &str) -> std::borrow::Cow<'_, str> {
    match parse_goal_message(text) {
        Some(g) => format!(
            "[goal round {} of an ended goal run \u{2014} protocol omitted; do not act on it]\n{}",
            g.round, g.rest
        )
        .into(),
        None => text.into(),
    }
}

/// The blocks a host prefixes to a user's message (the reference's `TITLE_NOISE_TAGS`): a skill
/// invocation, a handoff, scheduled-task or model-switch origin note, a goal round, a
/// background report.
pub const PREFIX_TAGS: &[&str] = &[
    "use_skills",
    "handoff_from",
    "scheduled_task",
    "model_switch_from",
    "goal",
    "background_task_done",
];

/// `stripLeadingMarkerBlocks`: the user's own text of a message that starts with blocks a host
/// prefixed ([`PREFIX_TAGS`], either form), each removed with the blank lines after it.
///
/// ```
/// use penguin_omni_protocol::markers::strip_leading_marker_blocks;
/// let text = "[use_skills]\nskills: web-design\n[/use_skills]\n\nfix the layout";
/// assert_eq!(strip_leading_marker_blocks(text), "fix the layout");
/// assert_eq!(strip_leading_marker_blocks("say [use_skills]x[/use_skills]"), "say [use_skills]x[/use_skills]");
/// ```
pub fn strip_leading_marker_blocks(text: &str) -> &str {
    let mut out = text;
    loop {
        let before = out;
        for tag in PREFIX_TAGS {
            // As `matchDualForm`: the first square block anywhere, else the first angle one;
            // only a match at the very start is stripped.
            let square = first_block(out, &format!("[{tag}]"), &format!("[/{tag}]"));
            let found =
                square.or_else(|| first_block(out, &format!("<{tag}>"), &format!("</{tag}>")));
            if let Some((0, end)) = found {
                out = out[end..].trim_start_matches('\n');
            }
        }
        if out == before {
            return out;
        }
    }
}

/// The first `open … close` (shortest body) in `text`: its start and end.
fn first_block(text: &str, open: &str, close: &str) -> Option<(usize, usize)> {
    let start = text.find(open)?;
    let body = start + open.len();
    let end = body + text[body..].find(close)? + close.len();
    Some((start, end))
}

/// `[attached image: <path|url>]`
pub fn attached_image_line(path_or_url: &str) -> String {
    format!("[attached image: {path_or_url}]")
}

/// `[attached file: <path>]`
pub fn attached_file_line(path: &str) -> String {
    format!("[attached file: {path}]")
}

const SUMMARY_TAGS: [&str; 4] = ["[summary]", "[/summary]", "<summary>", "</summary>"];

fn strip_summary_tags(s: &str) -> String {
    let mut out = s.to_owned();
    for tag in SUMMARY_TAGS {
        out = out.replace(tag, "");
    }
    out
}

/// Non-overlapping `open…close` pairs, each closed by the nearest `close` (a lazy match).
/// Returns `(block_start, block_end, content_start, content_end)`.
fn pairs(text: &str, open: &str, close: &str) -> Vec<(usize, usize, usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(o) = text[from..].find(open) {
        let content_start = from + o + open.len();
        let Some(c) = text[content_start..].find(close) else {
            break;
        };
        let content_end = content_start + c;
        let block_end = content_end + close.len();
        out.push((from + o, block_end, content_start, content_end));
        from = block_end;
    }
    out
}

/// The summary in a compaction reply (the extraction ladder of [§2.12](crate::spec#s2.12)
/// *Compaction*). Empty means unusable.
///
/// 1. The first `[summary]…[/summary]` pair, then the first `<summary>…</summary>` pair, whose
///    content is non-empty once stray summary tags are removed and it is trimmed.
/// 2. Otherwise the whole text with every summary block and stray tag removed, trimmed (so text
///    without tags comes back whole).
///
/// ```
/// use penguin_omni_protocol::markers::extract_summary;
/// assert_eq!(extract_summary("Sure.\n[summary]\nthe gist\n[/summary]"), "the gist");
/// assert_eq!(extract_summary("[summary] [/summary]<summary>old</summary>"), "old");
/// assert_eq!(extract_summary("  no tags at all "), "no tags at all");
/// assert_eq!(extract_summary("[summary][/summary]"), "");
/// ```
pub fn extract_summary(text: &str) -> String {
    let forms = [("[summary]", "[/summary]"), ("<summary>", "</summary>")];
    for (open, close) in forms {
        for (_, _, cs, ce) in pairs(text, open, close) {
            let s = strip_summary_tags(&text[cs..ce]);
            let s = s.trim();
            if !s.is_empty() {
                return s.to_owned();
            }
        }
    }
    let mut rest = text.to_owned();
    for (open, close) in forms {
        let mut kept = String::with_capacity(rest.len());
        let mut at = 0;
        for (bs, be, _, _) in pairs(&rest, open, close) {
            kept.push_str(&rest[at..bs]);
            at = be;
        }
        kept.push_str(&rest[at..]);
        rest = kept;
    }
    strip_summary_tags(&rest).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwraps_both_forms_and_rejects_trailing_text() {
        let block = turn_aborted_block(&[
            "  [user_input]hi[/user_input]".into(),
            "  [text]x[/text]".into(),
        ]);
        assert_eq!(unwrap_synthetic_block(&block).unwrap().len(), 2);
        assert_eq!(
            unwrap_synthetic_block("<turn_retried>\n  [text]a[/text]\n</turn_retried>\n").unwrap(),
            vec!["  [text]a[/text]"]
        );
        assert_eq!(
            unwrap_synthetic_block("[turn_aborted]\nx\n[/turn_aborted] and more"),
            None
        );
        assert_eq!(unwrap_synthetic_block("hello"), None);
    }

    #[test]
    fn empty_blocks_have_no_body_line_and_unwrap_to_no_lines() {
        assert_eq!(turn_retried_block(&[]), "[turn_retried]\n[/turn_retried]");
        for empty in [
            "[turn_aborted]\n[/turn_aborted]",
            "[turn_aborted][/turn_aborted]",
            "[turn_aborted]\n\n[/turn_aborted]",
            "<turn_retried></turn_retried>",
        ] {
            assert_eq!(unwrap_synthetic_block(empty), Some(vec![]), "{empty:?}");
        }
        // One blank line inside is a body of its own, kept as the reference keeps it.
        assert_eq!(
            unwrap_synthetic_block("[turn_aborted]\n\n\n[/turn_aborted]"),
            Some(vec![String::new(), String::new()])
        );
    }

    #[test]
    fn goal_rounds_parse_like_the_reference() {
        let g = parse_goal_message("[goal]\nround: 007\n[/goal] not yet\n[/goal]").unwrap();
        assert_eq!((g.round.as_str(), g.rest), ("7", ""));
        let g = parse_goal_message("[goal]\nround: 3\n\n[/goal]\n\n\nbody\n").unwrap();
        assert_eq!(g.rest, "body\n");
        for not_goal in [
            "[goal]\nround: 1\n[/goal]",
            "[goal]\nround: x\n\n[/goal]",
            "[goal]\nround: 1 \n\n[/goal]",
            " [goal]\nround: 1\n\n[/goal]",
            "[goal]\nround: 1\nbody [/goal]",
        ] {
            assert_eq!(parse_goal_message(not_goal), None, "{not_goal:?}");
        }
        assert_eq!(
            parse_goal_message("[goal]\nround: 1000000000000000000000\n\n[/goal]")
                .unwrap()
                .round,
            "1e+21"
        );
        assert_eq!(
            parse_goal_message("[goal]\nround: 12345678901234567890\n\n[/goal]")
                .unwrap()
                .round,
            "12345678901234567000"
        );
    }

    #[test]
    fn transcript_lines_round_trip() {
        let lines = [
            TranscriptLine::UserInput("explain".into()),
            TranscriptLine::Thinking("hmm".into()),
            TranscriptLine::Text("I will".into()),
            TranscriptLine::ToolCall {
                name: "read_file".into(),
                id: "call_a".into(),
                arguments: "{\"path\":\"a\"}".into(),
            },
            TranscriptLine::ToolCallOutput {
                id: "call_a".into(),
                status: StopReason::Aborted,
                output: "x".into(),
            },
        ];
        for l in lines {
            assert_eq!(TranscriptLine::parse(&l.render()), Some(l));
        }
        assert_eq!(
            TranscriptLine::UserInput("explain the repo".into()).render(),
            "  [user_input]explain the repo[/user_input]"
        );
    }

    #[test]
    fn finds_blocks() {
        assert_eq!(
            find_block("pre [summary]the gist[/summary] post", "summary"),
            Some("the gist")
        );
        assert_eq!(
            find_block("<summary>\nold\n</summary>", "summary"),
            Some("old")
        );
        assert_eq!(
            find_block("<user_steering>x</user_steering>", "user_steering"),
            None
        );
    }
}
