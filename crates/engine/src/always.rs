//! What an "always" answer to an approval allows from then on: every call of one tool, or, for
//! `exec_command`, the commands that start with one prefix of plain words. A host that asks a
//! person (the CLI's terminal approver, the server's approvals) offers "always" only where a
//! scope exists, and lets a later call through only when the scope covers it word by word.
//!
//! ```
//! use penguin_engine::always::Scope;
//! let scope = Scope::for_call("exec_command", r#"{"cmd": "cargo test -p x"}"#).unwrap();
//! assert_eq!(scope.describe(), "commands starting `cargo test`");
//! assert!(scope.covers("exec_command", r#"{"cmd": "cargo test --all"}"#));
//! assert!(!scope.covers("exec_command", r#"{"cmd": "cargo test; rm -rf ~"}"#));
//! // A chain grants nothing beyond the call itself.
//! assert_eq!(Scope::for_call("exec_command", r#"{"cmd": "make && make install"}"#), None);
//! ```

mod words;

pub use words::{plain_words, quoted, Word};

/// What an "always" answer allows from then on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every call of one tool (never `exec_command`: commands are scoped by prefix).
    Tool(String),
    /// `exec_command` calls whose command is one plain command (see
    /// [`plain_words`]) whose first words are these.
    Command(Vec<String>),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Tool(t) => write!(f, "{t}"),
            Scope::Command(p) => write!(f, "`{}`", shown_prefix(p)),
        }
    }
}

/// A command prefix as a person would type it.
pub fn shown_prefix(words: &[String]) -> String {
    let shown: Vec<String> = words.iter().map(|w| quoted(w)).collect();
    shown.join(" ")
}

/// The command of an `exec_command` call, as the shell will get it.
pub fn command_of(name: &str, args: &str) -> Option<String> {
    if name != "exec_command" {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(args).ok()?;
    Some(v.get("cmd")?.as_str()?.to_owned())
}

/// Programs that run their arguments as a command line of their own (`sh -c '…'`, `env X=1
/// …`, `sudo …`): the chains a quoted argument may hold are out of the reader's sight, so
/// "always" for one of them would allow every command.
const RUNS_ITS_ARGUMENTS: &[&str] = &[
    "bash", "builtin", "busybox", "chroot", "command", "dash", "doas", "env", "eval", "exec",
    "fish", "ksh", "nice", "nohup", "setsid", "sh", "ssh", "stdbuf", "su", "sudo", "time",
    "timeout", "watch", "xargs", "zsh",
];

/// The prefix "always" grants for a command: its program, plus its subcommand when the
/// second word looks like one (`cargo test`, `git status`, but `ls` for `ls -la`). `None` when
/// it grants nothing beyond this call: a command that is not one plain command, a program or
/// subcommand the shell may expand, or a program that runs its arguments as a command.
pub fn command_prefix(cmd: &str) -> Option<Vec<String>> {
    let words = plain_words(cmd)?;
    let mut words = words.into_iter();
    let program = words.next().filter(|w| !w.expands && !w.text.is_empty())?;
    let base = program.text.rsplit('/').next().unwrap_or_default();
    if RUNS_ITS_ARGUMENTS.contains(&base) {
        return None;
    }
    let sub = words.next().filter(|w| {
        !w.expands
            && w.text
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase())
            && w.text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    });
    Some(
        std::iter::once(program)
            .chain(sub)
            .map(|w| w.text)
            .collect(),
    )
}

impl Scope {
    /// What it allows, as an "always" offer says it: `every read_file call`, `commands
    /// starting `cargo test``.
    pub fn describe(&self) -> String {
        match self {
            Scope::Tool(t) => format!("every {t} call"),
            Scope::Command(p) => format!("commands starting `{}`", shown_prefix(p)),
        }
    }

    /// The scope "always" grants for a call of `name` with `args`; `None` when it grants
    /// nothing beyond this call (see [`command_prefix`]).
    pub fn for_call(name: &str, args: &str) -> Option<Scope> {
        match command_of(name, args) {
            Some(cmd) => command_prefix(&cmd).map(Scope::Command),
            None if name == "exec_command" => None,
            None => Some(Scope::Tool(name.to_owned())),
        }
    }

    /// Whether this scope allows a call of `name` with `args`: for a command, its parsed
    /// words, compared word by word (never its text, which may say more than its words).
    pub fn covers(&self, name: &str, args: &str) -> bool {
        match self {
            Scope::Tool(t) => t == name && name != "exec_command",
            Scope::Command(prefix) => command_of(name, args)
                .and_then(|cmd| plain_words(&cmd))
                .is_some_and(|words| {
                    words.len() >= prefix.len()
                        && words
                            .iter()
                            .zip(prefix)
                            .all(|(w, p)| !w.expands && w.text == *p)
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn command_prefixes_take_the_subcommand_but_not_flags_or_paths() {
        assert_eq!(command_prefix("ls -la"), Some(words("ls")));
        assert_eq!(command_prefix("git  status"), Some(words("git status")));
        assert_eq!(command_prefix("python3 x.py"), Some(words("python3")));
        assert_eq!(command_prefix("cargo test | tail"), None);
        assert_eq!(
            command_prefix("'my prog' run").map(|p| shown_prefix(&p)),
            Some("'my prog' run".into())
        );
    }

    /// What `a` grants for a command, and whether an earlier `a` on `git status` covers it.
    /// Every row that is not one plain `git status …` command must neither grant a prefix
    /// wider than its own words nor be covered.
    #[test]
    fn tricky_commands_neither_outrun_nor_slip_under_a_prefix() {
        let git_status = Scope::Command(words("git status"));
        #[rustfmt::skip]
        let table: &[(&str, Option<&str>, bool)] = &[
            // command,                          prefix `a` grants,   covered by `git status`
            ("git status",                        Some("git status"), true),
            ("git status -s",                     Some("git status"), true),
            ("git  status",                       Some("git status"), true),
            // A tab separates words for the shell exactly as a space does.
            ("git\tstatus",                       Some("git status"), true),
            ("git \"status\"",                    Some("git status"), true),
            ("'git' status --short",              Some("git status"), true),
            // Quoted, operators are literal arguments: still one `git status`.
            ("git status 'a;b'",                  Some("git status"), true),
            ("git status \"a|b&c>d\"",             Some("git status"), true),
            ("git status a\\;b",                   Some("git status"), true),
            ("git statusx",                       Some("git statusx"), false),
            ("git",                               Some("git"),        false),
            ("/usr/bin/git status",               Some("/usr/bin/git status"), false),
            ("git stat* ",                        Some("git"),        false),
            ("git status\ntouch X",               None,               false),
            ("git status\r\ntouch X",             None,               false),
            ("git status\rtouch X",               None,               false),
            ("git status;touch X",                None,               false),
            ("git status ; touch X",              None,               false),
            ("git status #\ntouch X",             None,               false),
            ("git status # touch X",              None,               false),
            ("git status\\\ntouch X",              None,               false),
            ("git status $(touch X)",             None,               false),
            ("git status \"$(touch X)\"",         None,               false),
            ("git status `touch X`",              None,               false),
            ("git status ${X}",                   None,               false),
            ("git status $X",                     None,               false),
            ("git status $'\\n'",                  None,               false),
            ("git status > ~/.bashrc",            None,               false),
            ("git status >>~/.bashrc",            None,               false),
            ("git status < /etc/passwd",          None,               false),
            ("git status|sh",                     None,               false),
            ("git status || touch X",             None,               false),
            ("git status&touch X",                None,               false),
            ("git status && touch X",             None,               false),
            ("git status &",                      None,               false),
            ("(git status)",                      None,               false),
            ("{ git status; }",                   None,               false),
            ("git status {a,b}",                  None,               false),
            ("GIT_DIR=/x git status",             None,               false),
            ("git status 'unterminated",          None,               false),
            ("git status \"unterminated",         None,               false),
            ("git status \\",                      None,               false),
            ("git status\u{2028}touch X",          None,               false),
            ("git status\u{2029}touch X",          None,               false),
            ("git status\u{85}touch X",            None,               false),
            ("git\u{a0}status",                    None,               false),
            ("git status\u{0}touch X",             None,               false),
            ("git status\u{1b}[2K",                None,               false),
            ("git status\u{9b}2K",                 None,               false),
            ("git status \u{202e}X hcuot",         None,               false),
            ("git status\u{200b}",                 None,               false),
            ("time git status",                   None,               false),
            ("! git status",                      None,               false),
            ("sh -c 'git status; touch X'",       None,               false),
            ("bash -c 'git status'",              None,               false),
            ("env git status",                    None,               false),
            ("xargs git status",                  None,               false),
        ];
        assert!(table.len() >= 25);
        for (cmd, prefix, covered) in table {
            let args = serde_json::json!({ "cmd": cmd }).to_string();
            let granted = match Scope::for_call("exec_command", &args) {
                Some(Scope::Command(p)) => Some(shown_prefix(&p)),
                other => other.map(|s| s.to_string()),
            };
            assert_eq!(granted.as_deref(), *prefix, "`a` on {cmd:?}");
            assert_eq!(
                git_status.covers("exec_command", &args),
                *covered,
                "`git status` covering {cmd:?}"
            );
        }
    }
}
