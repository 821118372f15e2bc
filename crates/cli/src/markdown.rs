//! Markdown for the terminal, rendered as the text streams in: headings, lists, quotes, rules,
//! code blocks, `code`, **bold** and *emphasis*.
//!
//! A line's kind is decided from its first few characters (held back until they decide), and
//! inline markers switch styles as they arrive, so text still appears word by word. Styles
//! never outlive their line: a marker the model forgets to close cannot color the rest of the
//! reply.
//!
//! It styles the text it is given as it is: its caller neutralises text it did not write
//! (`crate::untrusted`) before pushing it, so the only escape codes out are these styles.

use crate::untrusted::style::{BOLD, DIM, ITALIC, RESET, UNDERLINE};

const CODE: &str = crate::untrusted::style::CYAN;

/// One streamed markdown text.
#[derive(Debug, Default)]
pub struct Markdown {
    /// The line's start, held until it tells what kind of line this is.
    head: String,
    /// The line's kind is known and its body is streaming.
    in_body: bool,
    /// Inside a ``` block.
    fence: bool,
    /// The body is a code block line (no inline markers).
    code_line: bool,
    heading: Option<usize>,
    quote: bool,
    bold: bool,
    italic: bool,
    code: bool,
    /// A `*` waiting for the next character to say what it is.
    star: bool,
    prev: Option<char>,
}

impl Markdown {
    /// A renderer at the start of a text.
    pub fn new() -> Markdown {
        Markdown::default()
    }

    /// Renders the next piece of text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        let mut out = String::new();
        for ch in text.chars() {
            self.char(ch, &mut out);
        }
        out
    }

    /// Renders what was held back and closes every style (the text has ended).
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if !self.in_body && !self.head.is_empty() {
            let head = std::mem::take(&mut self.head);
            let _ = self.line_from_head(&head, &mut out);
        }
        if self.star {
            self.star = false;
            out.push('*');
        }
        if self.styled() {
            out.push_str(RESET);
        }
        let fence = self.fence;
        *self = Markdown::default();
        self.fence = fence;
        out
    }

    fn styled(&self) -> bool {
        self.bold
            || self.italic
            || self.code
            || self.heading.is_some()
            || self.quote
            || self.code_line
    }

    fn style(&self) -> String {
        let mut s = String::from(RESET);
        if self.code_line {
            s.push_str(CODE);
            return s;
        }
        if let Some(level) = self.heading {
            s.push_str(BOLD);
            if level == 1 {
                s.push_str(UNDERLINE);
            }
        }
        if self.quote {
            s.push_str(DIM);
        }
        if self.bold {
            s.push_str(BOLD);
        }
        if self.italic {
            s.push_str(ITALIC);
        }
        if self.code {
            s.push_str(CODE);
        }
        s
    }

    fn char(&mut self, ch: char, out: &mut String) {
        if ch == '\n' {
            if self.in_body {
                self.end_line(out);
            } else {
                let head = std::mem::take(&mut self.head);
                self.whole_line(&head, out);
            }
            return;
        }
        if self.in_body {
            self.inline(ch, out);
            return;
        }
        self.head.push(ch);
        if let Some(decided) = self.decide() {
            let head = std::mem::take(&mut self.head);
            self.start_body(decided, &head, out);
        }
    }

    /// What the held line start is, when it can be told before the line ends.
    fn decide(&self) -> Option<Kind> {
        let head = self.head.as_str();
        let t = head.trim_start();
        let indent = head.len() - t.len();
        if t.is_empty() {
            return (indent > 8).then_some(Kind::Paragraph);
        }
        if "```".starts_with(t) || t.starts_with("```") {
            // A fence line is decided at its end.
            return None;
        }
        if self.fence {
            return Some(Kind::Code);
        }
        if t.chars().all(|c| c == '#') {
            return (t.len() > 6).then_some(Kind::Paragraph);
        }
        if t.starts_with('#') {
            let level = t.chars().take_while(|&c| c == '#').count();
            return Some(if t[level..].starts_with(' ') {
                Kind::Heading(level)
            } else {
                Kind::Paragraph
            });
        }
        let first = t.chars().next().unwrap_or(' ');
        if matches!(first, '-' | '*' | '_' | '+') {
            // `---` is a rule, `- x` an item, `**x` bold text: wait while it can still be a rule.
            if t.chars().all(|c| c == first || c == ' ') && t.len() < 40 {
                if t.len() >= 2 && t.as_bytes()[1] == b' ' && first != '_' {
                    let rest = &t[2..];
                    if rest.is_empty() || rest.chars().all(|c| c == first || c == ' ') {
                        return None;
                    }
                    return Some(Kind::Item(2));
                }
                return None;
            }
            if t.len() >= 2 && t.as_bytes()[1] == b' ' && first != '_' {
                return Some(Kind::Item(2));
            }
            return Some(Kind::Paragraph);
        }
        if first == '>' {
            // The space after `>` belongs to the marker.
            return (t.len() >= 2).then_some(Kind::Quote);
        }
        if first.is_ascii_digit() {
            let digits = t.chars().take_while(char::is_ascii_digit).count();
            let rest = &t[digits..];
            return match rest {
                "" | "." | ")" if digits < 4 => None,
                r if (r.starts_with(". ") || r.starts_with(") ")) && digits < 4 => {
                    Some(Kind::Numbered(digits + 2))
                }
                _ => Some(Kind::Paragraph),
            };
        }
        Some(Kind::Paragraph)
    }

    fn start_body(&mut self, kind: Kind, head: &str, out: &mut String) {
        self.in_body = true;
        self.prev = None;
        let t = head.trim_start();
        let indent = &head[..head.len() - t.len()];
        match kind {
            Kind::Code => {
                self.code_line = true;
                out.push_str(&self.style());
                out.push_str("  ");
                out.push_str(head);
            }
            Kind::Heading(level) => {
                self.heading = Some(level);
                out.push_str(&self.style());
                let text = t[level..].trim_start();
                self.feed(text, out);
            }
            Kind::Item(marker) => {
                out.push_str(indent);
                out.push_str("• ");
                self.feed(&t[marker..], out);
            }
            Kind::Numbered(marker) => {
                out.push_str(indent);
                out.push_str(&t[..marker]);
                self.feed(&t[marker..], out);
            }
            Kind::Quote => {
                self.quote = true;
                out.push_str(&self.style());
                out.push_str("│ ");
                let rest = t[1..].strip_prefix(' ').unwrap_or(&t[1..]);
                self.feed(rest, out);
            }
            Kind::Paragraph => self.feed(head, out),
        }
    }

    fn feed(&mut self, text: &str, out: &mut String) {
        for ch in text.chars() {
            self.inline(ch, out);
        }
    }

    /// A line that ended before its kind was decided: fences, rules, blank lines, short text.
    fn whole_line(&mut self, head: &str, out: &mut String) {
        if self.line_from_head(head, out) {
            self.end_line(out);
        }
    }

    /// Renders a line known whole; false when it shows nothing at all (a closing fence).
    fn line_from_head(&mut self, head: &str, out: &mut String) -> bool {
        let t = head.trim();
        if let Some(lang) = t.strip_prefix("```") {
            self.fence = !self.fence;
            if self.fence {
                out.push_str(DIM);
                out.push_str("  ");
                out.push_str(lang.trim());
                out.push_str(RESET);
            }
            return self.fence;
        }
        if self.fence {
            self.start_body(Kind::Code, head, out);
            return true;
        }
        let first = t.chars().next().unwrap_or(' ');
        let rule = t.len() >= 3
            && matches!(first, '-' | '*' | '_')
            && t.chars().all(|c| c == first || c == ' ');
        if rule {
            out.push_str(DIM);
            out.push_str(&"─".repeat(40));
            out.push_str(RESET);
            return true;
        }
        if t.is_empty() {
            return true;
        }
        // Short lines (`1.`, `-`, `##`) as they are.
        let kind = self.decide_final(head);
        self.start_body(kind, head, out);
        true
    }

    fn decide_final(&self, head: &str) -> Kind {
        let t = head.trim_start();
        if let Some(level) = t
            .strip_prefix('#')
            .map(|r| 1 + r.chars().take_while(|&c| c == '#').count())
        {
            if level <= 6 && t[level..].starts_with(' ') {
                return Kind::Heading(level);
            }
        }
        Kind::Paragraph
    }

    fn end_line(&mut self, out: &mut String) {
        if self.star {
            self.star = false;
            out.push('*');
        }
        if self.styled() {
            out.push_str(RESET);
        }
        out.push('\n');
        let fence = self.fence;
        *self = Markdown::default();
        self.fence = fence;
    }

    fn inline(&mut self, ch: char, out: &mut String) {
        if self.code_line {
            out.push(ch);
            return;
        }
        if self.code {
            if ch == '`' {
                self.code = false;
                out.push_str(&self.style());
            } else {
                out.push(ch);
            }
            self.prev = Some(ch);
            return;
        }
        if self.star {
            self.star = false;
            if ch == '*' {
                self.bold = !self.bold;
                out.push_str(&self.style());
                self.prev = Some('*');
                return;
            }
            let before_space = self.prev.is_none_or(char::is_whitespace);
            if !self.italic && before_space && !ch.is_whitespace() {
                self.italic = true;
                out.push_str(&self.style());
            } else if self.italic && !self.prev.is_none_or(char::is_whitespace) {
                self.italic = false;
                out.push_str(&self.style());
            } else {
                out.push('*');
            }
            self.prev = Some('*');
        }
        match ch {
            '*' => self.star = true,
            '`' => {
                self.code = true;
                out.push_str(&self.style());
                self.prev = Some(ch);
            }
            _ => {
                out.push(ch);
                self.prev = Some(ch);
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Paragraph,
    Heading(usize),
    /// Marker length of `- `.
    Item(usize),
    /// Marker length of `12. `.
    Numbered(usize),
    Quote,
    Code,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Escapes as tags, so snapshots show the styling a person sees.
    fn visible(s: &str) -> String {
        s.replace(RESET, "«/»")
            .replace(BOLD, "«b»")
            .replace(DIM, "«dim»")
            .replace(ITALIC, "«i»")
            .replace(UNDERLINE, "«u»")
            .replace(CODE, "«code»")
    }

    const SAMPLE: &str = "# Plan\n\nHere is **what** I will do, with *care* and `cargo test`:\n\n- read `a.txt`\n- change *one* line\n  - nested item\n1. first\n2. second\n\n> a quote\n\n```rust\nfn main() { let x = 2 * 3; }\n```\n---\nSnake_case_names and 2 * 3 stay as they are; **unclosed bold\nends with its line.\n";

    #[test]
    fn markdown_renders_headings_lists_quotes_code_and_emphasis() {
        let mut md = Markdown::new();
        let mut out = md.push(SAMPLE);
        out.push_str(&md.finish());
        insta::assert_snapshot!(visible(&out));
    }

    #[test]
    fn streaming_in_any_pieces_renders_the_same() {
        let mut whole = Markdown::new();
        let expected = whole.push(SAMPLE) + &whole.finish();
        for size in [1, 2, 3, 7] {
            let mut md = Markdown::new();
            let chars: Vec<char> = SAMPLE.chars().collect();
            let mut out = String::new();
            for piece in chars.chunks(size) {
                out.push_str(&md.push(&piece.iter().collect::<String>()));
            }
            out.push_str(&md.finish());
            assert_eq!(visible(&out), visible(&expected), "pieces of {size}");
        }
    }

    #[test]
    fn text_without_a_final_newline_is_flushed_by_finish() {
        let mut md = Markdown::new();
        let mut out = md.push("12");
        assert_eq!(out, "", "`12` may still become a numbered item");
        out.push_str(&md.finish());
        assert_eq!(out, "12");
        let mut md = Markdown::new();
        assert_eq!(md.push("Hello there"), "Hello there");
    }
}
