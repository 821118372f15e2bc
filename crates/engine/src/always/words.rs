//! A conservative reading of a shell command into words, for "always" approvals.
//!
//! A prefix grant must cover what the shell will run, not what a string starts with: `git
//! status` followed by a newline and `touch X` starts with `git status` but runs two programs.
//! So a command is read the way `sh -c` reads it, and any command whose meaning this small
//! reader cannot be sure of has no words at all: it is never covered by a prefix and never
//! grants one, so it is asked every time. Being wrong in that direction costs a question;
//! being wrong the other way runs a command nobody approved.

/// One word of a plain command, its quotes and backslashes removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The text the program receives.
    pub text: String,
    /// The shell may turn it into something else: an unquoted `*`, `?` or `[` (a file name
    /// pattern) or a leading `~`. Such a word is never compared with a prefix.
    pub expands: bool,
}

/// Words that, first in a command, make it something other than one program run once.
const KEYWORDS: &[&str] = &[
    "!", "[[", "]]", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for",
    "function", "if", "in", "select", "then", "time", "until", "while",
];

/// The words of `cmd` when it runs one program with literal arguments, else `None`.
///
/// Blanks are spaces and tabs (a tab separates words for the shell exactly as a space does).
/// Single quotes keep everything literal; in double quotes a backslash escapes `"` and `\`;
/// outside quotes a backslash makes the next character literal. `None`, meaning "not plain",
/// for a command holding:
///
/// - a newline, a carriage return, or any other control character (C0, DEL, C1), anywhere,
///   quoted or not: one of them can end the command, and the rest make what a person reads
///   differ from what runs;
/// - a Unicode space other than space and tab (no-break space, U+2028, U+2029, …), or a
///   zero-width or bidirectional formatting character: the shell sees one word where a person
///   sees two, or reads the characters in another order than they are shown;
/// - unquoted `;`, `&` (and `&&`), `|` (and `||`), `<`, `>`, `(`, `)`, `{`, `}`: chains,
///   pipes, background jobs, redirections, subshells, groups and brace expansion;
/// - `$` or a backquote outside single quotes: `$(…)`, `${…}`, `$'…'`, variables and command
///   substitution;
/// - a `#` starting a word (a comment: what follows would be shown but not run);
/// - a backslash or a quote left open at the end;
/// - a first word holding `=` (`VAR=value cmd` changes the program's environment) or a first
///   word that is a shell keyword (`if`, `while`, `time`, `!`, …).
pub fn plain_words(cmd: &str) -> Option<Vec<Word>> {
    if cmd.chars().any(misleading) {
        return None;
    }
    let mut words: Vec<Word> = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            ';' | '&' | '|' | '<' | '>' | '(' | ')' | '{' | '}' | '$' | '`' => return None,
            '#' if word.is_none() => return None,
            '\'' => {
                let w = word.get_or_insert_with(empty);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => w.text.push(c),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(empty);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '$' | '`' => return None,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\') => w.text.push(c),
                            '$' | '`' => return None,
                            c => {
                                w.text.push('\\');
                                w.text.push(c);
                            }
                        },
                        c => w.text.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(empty).text.push(chars.next()?),
            c => {
                let w = word.get_or_insert_with(empty);
                if matches!(c, '*' | '?' | '[') || (c == '~' && w.text.is_empty()) {
                    w.expands = true;
                }
                w.text.push(c);
            }
        }
    }
    words.extend(word);
    let first_raw = cmd.trim_start_matches([' ', '\t']);
    let first_raw = &first_raw[..first_raw.find([' ', '\t']).unwrap_or(first_raw.len())];
    if first_raw.contains('=') || words.first().is_some_and(|w| KEYWORDS.contains(&&*w.text)) {
        return None;
    }
    Some(words)
}

fn empty() -> Word {
    Word {
        text: String::new(),
        expands: false,
    }
}

/// A character that may end the command or make it read differently from how it runs.
fn misleading(c: char) -> bool {
    (c.is_control() && c != '\t')
        || (c.is_whitespace() && c != ' ' && c != '\t')
        || matches!(
            c,
            '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
        )
}

/// `word` as a person would type it back: bare when it holds only characters the shell
/// takes literally, else in single quotes.
pub fn quoted(word: &str) -> String {
    let bare = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_alphanumeric() || "-_./:@%+,=^".contains(c));
    match bare {
        true => word.to_owned(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(cmd: &str) -> Option<Vec<String>> {
        plain_words(cmd).map(|w| w.into_iter().map(|w| w.text).collect())
    }

    #[test]
    fn quotes_and_backslashes_are_removed_and_blanks_split() {
        assert_eq!(
            texts("git  status\t-s 'a;b' \"c|d\" e\\ f \"g\\\"h\" ''"),
            Some(
                ["git", "status", "-s", "a;b", "c|d", "e f", "g\"h", ""]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(texts("  "), Some(vec![]));
        assert_eq!(
            texts(r#"echo "a\nb""#),
            Some(vec!["echo".into(), r"a\nb".into()])
        );
    }

    #[test]
    fn patterns_and_tildes_are_marked() {
        let words = plain_words("ls *.rs '*.md' ~/x a~").unwrap();
        let expands: Vec<bool> = words.iter().map(|w| w.expands).collect();
        assert_eq!(expands, [false, true, false, true, false]);
    }

    #[test]
    fn anything_beyond_one_plain_command_has_no_words() {
        for cmd in [
            "a\nb",
            "a\rb",
            "a; b",
            "a & b",
            "a && b",
            "a | b",
            "a || b",
            "a > f",
            "a < f",
            "(a)",
            "{ a; }",
            "a {x,y}",
            "a $(b)",
            "a ${X}",
            "a $X",
            "a `b`",
            "a \"$(b)\"",
            "a \"`b`\"",
            "a \"\\$(b)\"",
            "a $'\\n'",
            "a 'open",
            "a \"open",
            "a \\",
            "# a",
            "a #b",
            "X=1 a",
            "PATH=/tmp a",
            "if a",
            "time a",
            "! a",
            "a\u{0}",
            "a\u{7f}",
            "a\u{9b}",
            "a\u{85}b",
            "a\u{a0}b",
            "a\u{2028}b",
            "a\u{202e}b",
            "a\u{200b}b",
        ] {
            assert_eq!(plain_words(cmd), None, "{cmd:?}");
        }
        // Quoted, the same characters are literal arguments.
        assert!(plain_words("a 'b;c|d&e>f(g)$h`i{j}#k'").is_some());
        assert!(plain_words("a \"b;c|d&e>f(g){j}#k\"").is_some());
        assert!(plain_words("a b#c \\; \\$x").is_some());
    }

    #[test]
    fn words_are_quoted_back_only_when_needed() {
        assert_eq!(quoted("status"), "status");
        assert_eq!(quoted("my prog"), "'my prog'");
        assert_eq!(quoted("it's"), r"'it'\''s'");
        assert_eq!(quoted(""), "''");
    }
}
