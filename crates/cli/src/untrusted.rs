//! Text penguin did not write, made harmless to show on a terminal.
//!
//! Model text and reasoning, tool names and arguments, command and tool output, diffs, errors
//! a server or a provider sent, session titles, file names, MCP descriptions, stored traces:
//! any of it can hold bytes a terminal acts on instead of showing. OSC 52 writes the user's
//! clipboard, OSC 0 the window title, SGR 8 hides text, cursor movement and a lone carriage
//! return overwrite earlier lines (a forged "allowed" line). [`neutralise`] is the one place
//! that decides what is shown instead: every such character is written out visibly, in the
//! Rust escape syntax, so a person sees that it was there and what it was.
//!
//! | character | shown as |
//! |---|---|
//! | newline, tab | themselves |
//! | carriage return right before a newline | dropped (the newline alone ends the line the same way) |
//! | any other C0 control and DEL: ESC, BEL, NUL, a lone CR, backspace, … | `\x1b`, `\x07`, `\x00`, `\x0d`, `\x08`, `\x7f` |
//! | C1 controls (U+0080–U+009F, the 8-bit CSI U+009B and OSC U+009D among them) | `\u{9b}`, `\u{9d}`, … |
//! | bidirectional formatting (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which reorder what is shown | `\u{202e}`, … |
//!
//! (tracing-subscriber's own escaping of log fields uses the same syntax.)
//!
//! How the rule is kept: the printing API lets nothing else through. Every line the CLI prints
//! goes through [`outln!`]/[`errln!`] (plain `println!`/`eprintln!` are denied in this crate by
//! clippy's `print_stdout`/`print_stderr`), the [`Renderer`](crate::render::Renderer), or the
//! console's `note`/`ask`, and each of them passes its text through [`guard`]: neutralised,
//! except penguin's own [`style`] codes. A call site that forgets to neutralise what it
//! interpolates can so at worst let one of penguin's colours through; the call sites that show
//! untrusted text also neutralise it themselves, so even those are shown escaped rather than
//! applied. JSON lines (`--jsonl`, `show --jsonl`, `mcp list --json`) get [`json_line`]: the
//! same characters, as JSON `\u` escapes, so the line stays the same JSON.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;

/// penguin's own styles: the only escape sequences [`guard`] lets through.
pub mod style {
    /// Every style off.
    pub const RESET: &str = "\x1b[0m";
    /// Bold.
    pub const BOLD: &str = "\x1b[1m";
    /// Dimmed: penguin's notes, thinking.
    pub const DIM: &str = "\x1b[2m";
    /// Italic (markdown emphasis).
    pub const ITALIC: &str = "\x1b[3m";
    /// Underlined (markdown's top heading).
    pub const UNDERLINE: &str = "\x1b[4m";
    /// Red: failures, removed lines.
    pub const RED: &str = "\x1b[31m";
    /// Green: success, added lines.
    pub const GREEN: &str = "\x1b[32m";
    /// Yellow: warnings, denials.
    pub const YELLOW: &str = "\x1b[33m";
    /// Cyan: code, hunk headers.
    pub const CYAN: &str = "\x1b[36m";

    /// All of the above.
    pub(crate) const ALL: [&str; 9] = [
        RESET, BOLD, DIM, ITALIC, UNDERLINE, RED, GREEN, YELLOW, CYAN,
    ];
}

/// Whether a terminal may act on `c` rather than show it (or show the text around it in
/// another order than it is stored): see the module's table.
pub fn is_hazard(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Whether `text` may hold a hazard, by its bytes alone: every hazard's UTF-8 encoding starts
/// with a control byte or with 0xC2, 0xD8 or 0xE2, and most text (ASCII above all) has none, so
/// a JSON stream of tens of megabytes is not decoded character by character.
fn may_hold_hazard(text: &str) -> bool {
    text.bytes()
        .any(|b| (b < 0x20 && b != b'\n' && b != b'\t') || matches!(b, 0x7f | 0xc2 | 0xd8 | 0xe2))
        && text.chars().any(is_hazard)
}

/// `text` with every hazard shown visibly escaped (see the module's table); borrowed when
/// there is none. The one function that decides how text penguin did not write is shown.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    escape(text, &[])
}

/// [`neutralise`]d text for `format!`: `format!("{}", Untrusted(&reply))`.
#[derive(Clone, Copy, Debug)]
pub struct Untrusted<'a>(pub &'a str);

impl std::fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&neutralise(self.0))
    }
}

/// `text` [`neutralise`]d, except penguin's own [`style`] codes: what every printing function
/// of the CLI applies to a line that mixes penguin's styling with other text.
pub fn guard(text: &str) -> Cow<'_, str> {
    escape(text, &style::ALL)
}

fn escape<'a>(text: &'a str, allowed: &[&str]) -> Cow<'a, str> {
    if !may_hold_hazard(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some((i, c)) = rest.char_indices().find(|(_, c)| is_hazard(*c)) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let kept = match c {
            '\x1b' => allowed.iter().find(|s| tail.starts_with(**s)).copied(),
            '\r' if tail.starts_with("\r\n") => Some(""),
            _ => None,
        };
        match kept {
            Some(s) => {
                out.push_str(s);
                rest = &tail[s.len().max(1)..];
            }
            None => {
                let _ = match c as u32 {
                    n @ (0..=0x1f | 0x7f) => write!(out, "\\x{n:02x}"),
                    n => write!(out, "\\u{{{n:x}}}"),
                };
                rest = &tail[c.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A JSON text with every hazard written as a JSON `\u` escape: inside a string it is the
/// same string, and a hazard outside one (a corrupt line) is shown harmlessly all the same.
pub fn json_line(json: &str) -> Cow<'_, str> {
    if !may_hold_hazard(json) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match is_hazard(c) {
            true => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            false => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Writes `text`, [`guard`]ed, to stdout or stderr: what [`outln!`] and friends expand to.
/// A closed stdout (`penguin sessions | head -1`) is not an error worth a panic.
pub fn print(to_stderr: bool, text: &str, newline: bool) {
    let text = guard(text);
    let nl: &[u8] = if newline { b"\n" } else { b"" };
    if to_stderr {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.write_all(nl);
        let _ = err.flush();
    } else {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.write_all(nl);
        if !newline {
            let _ = out.flush();
        }
    }
}

/// penguin's status line on stderr when no terminal of `crate::term` owns the screen: back to
/// the line's start and erase it, then `text` dimmed; `None` only erases. The erasing is
/// penguin's own cursor control, which [`guard`] would rightly show as text, so it is written
/// here, next to the rule, and `text` is guarded like every other line.
pub fn status_line(text: Option<&str>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(b"\r\x1b[2K");
    if let Some(text) = text {
        let _ = write!(err, "{}{}{}", style::DIM, guard(text), style::RESET);
    }
    let _ = err.flush();
}

/// `println!` for the CLI: the line goes through [`guard`].
macro_rules! outln {
    () => { $crate::untrusted::print(false, "", true) };
    ($($arg:tt)*) => { $crate::untrusted::print(false, &format!($($arg)*), true) };
}

/// `print!` for the CLI: the text goes through [`guard`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::untrusted::print(false, &format!($($arg)*), false) };
}

/// `eprintln!` for the CLI: the line goes through [`guard`].
macro_rules! errln {
    () => { $crate::untrusted::print(true, "", true) };
    ($($arg:tt)*) => { $crate::untrusted::print(true, &format!($($arg)*), true) };
}

/// `eprint!` for the CLI: the text goes through [`guard`].
macro_rules! err {
    ($($arg:tt)*) => { $crate::untrusted::print(true, &format!($($arg)*), false) };
}

pub(crate) use {err, errln, out, outln};

/// The log's writer: tracing-subscriber escapes ESC, BEL, backspace, form feed, DEL and C1
/// controls in what it formats, but not a carriage return or the other C0 controls, which a
/// warning quoting a server's reply may hold. Every ESC that reaches this writer is the
/// subscriber's own colour, so only the other hazards are escaped here.
#[derive(Debug)]
pub struct LogWriter<W>(pub W);

impl<W: std::io::Write> std::io::Write for LogWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let shown = match text.chars().any(|c| c != '\x1b' && is_hazard(c)) {
            false => text,
            true => Cow::Owned(
                text.split('\x1b')
                    .map(neutralise)
                    .collect::<Vec<_>>()
                    .join("\x1b"),
            ),
        };
        self.0.write_all(shown.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sequences_are_shown_not_obeyed() {
        for (attack, shown) in [
            // OSC 52: writes the clipboard.
            ("\x1b]52;c;cm0gLXJmIH4=\x07", r"\x1b]52;c;cm0gLXJmIH4=\x07"),
            // OSC 0: sets the window title (ST-terminated here).
            ("\x1b]0;pwned\x1b\\", r"\x1b]0;pwned\x1b\"),
            // SGR 8: hidden text.
            ("a\x1b[8msecret\x1b[28m", r"a\x1b[8msecret\x1b[28m"),
            // Cursor up and erase line: rewrites an earlier line.
            ("\x1b[1A\x1b[2K✓ allowed", r"\x1b[1A\x1b[2K✓ allowed"),
            // 8-bit CSI and OSC.
            ("\u{9b}1A\u{9d}0;t\u{9c}", r"\u{9b}1A\u{9d}0;t\u{9c}"),
            ("ding\x07", r"ding\x07"),
            // A lone CR returns to the start of the line and overwrites it.
            ("rm -rf ~\rls -la   ", r"rm -rf ~\x0dls -la   "),
            (
                "nul\0 del\x7f bs\x08 so\x0e",
                r"nul\x00 del\x7f bs\x08 so\x0e",
            ),
            ("a\u{202e}gnp.exe", r"a\u{202e}gnp.exe"),
        ] {
            assert_eq!(neutralise(attack), shown, "{attack:?}");
            assert!(!neutralise(attack).chars().any(is_hazard));
            assert_eq!(guard(attack), shown, "penguin's styles are not in it");
            assert_eq!(format!("{}", Untrusted(attack)), shown);
        }
    }

    #[test]
    fn the_byte_test_sees_every_hazard() {
        let hazards = (0..=0x10ffff)
            .filter_map(char::from_u32)
            .filter(|c| is_hazard(*c));
        for c in hazards {
            assert!(may_hold_hazard(&format!("ab{c}cd")), "{:x}", c as u32);
        }
        assert!(!may_hold_hazard("héllo → ✓ 日本\n\t"));
    }

    #[test]
    fn text_lines_and_tabs_stay_as_they_are() {
        let plain = "fn main() {\n\tprintln!(\"héllo → ✓\");\n}\n";
        assert!(matches!(neutralise(plain), Cow::Borrowed(_)));
        assert_eq!(neutralise("a\r\nb\r\n"), "a\nb\n");
        assert_eq!(neutralise("a\r"), r"a\x0d");
        // The escaped form is itself plain: neutralising twice changes nothing more.
        let once = neutralise("\x1b[31m\r\u{9b}").into_owned();
        assert_eq!(neutralise(&once), once);
    }

    #[test]
    fn the_guard_keeps_penguins_styles_and_nothing_else() {
        let line = format!(
            "{}⚙ exec_command{} \x1b[8mx\x1b]0;t\x07",
            style::BOLD,
            style::RESET
        );
        assert_eq!(
            guard(&line),
            format!(
                r"{}⚙ exec_command{} \x1b[8mx\x1b]0;t\x07",
                style::BOLD,
                style::RESET
            )
        );
        // A model's copy of one of penguin's styles, neutralised first, shows as text.
        let reply = format!("{}{}", Untrusted(style::RED), style::RESET);
        assert_eq!(guard(&reply), format!(r"\x1b[31m{}", style::RESET));
    }

    #[test]
    fn json_lines_stay_the_same_json() {
        let line = serde_json::json!({"text": "a\u{9b}1A\u{7f}\u{202e}b", "n": 1}).to_string();
        assert!(line.contains('\u{9b}'), "serde_json leaves C1 and DEL raw");
        let safe = json_line(&line);
        assert!(!safe.chars().any(is_hazard), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["text"], "a\u{9b}1A\u{7f}\u{202e}b");
        assert!(matches!(json_line("{\"a\":\"\\u001b\"}"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_log_keeps_its_colours_and_shows_the_rest() {
        let make = || LogWriter(Vec::new());
        let shared = std::sync::Arc::new(std::sync::Mutex::new(make()));
        let sink = shared.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(true)
            .with_writer(move || LockedVec(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!("the server said \x1b]52;c;eA==\x07 then\rforged \u{9b}2K");
        });
        let logged = String::from_utf8(shared.lock().unwrap().0.clone()).unwrap();
        assert!(
            logged.contains(r"\x1b]52;c;eA==\x07 then\x0dforged \u{9b}2K"),
            "{logged:?}"
        );
        assert!(
            logged.contains("\x1b["),
            "the subscriber's colours remain: {logged:?}"
        );
        assert!(!logged.contains('\r') && !logged.contains('\x07'));
    }

    /// A writer into the shared [`LogWriter`], one per event as the subscriber wants.
    struct LockedVec(std::sync::Arc<std::sync::Mutex<LogWriter<Vec<u8>>>>);

    impl std::io::Write for LockedVec {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
