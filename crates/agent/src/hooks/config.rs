//! `[[hooks.EVENT]]` tables: the user's in `config.toml`, a workspace's in
//! `.penguin/hooks.toml` (the same shape), and what they become once checked.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// How long a hook may run when its table names no `timeout_ms`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `timeout_ms` accepted: a hook holds up the session while it runs.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// A decision point of a session where hooks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HookEvent {
    /// The first run of a session in this process (new or resumed).
    SessionStart,
    /// A prompt, before the model sees it: may add context or block it.
    UserPromptSubmit,
    /// A tool call, before it runs: allow, deny, ask the user, or rewrite its arguments.
    PreToolUse,
    /// A tool call's output, before the model sees it: add context or mark it failed.
    PostToolUse,
    /// Before the context is compacted by hand.
    PreCompact,
    /// The model stopped: may keep the task going, a bounded number of times.
    Stop,
    /// A subagent's task ended.
    SubagentStop,
    /// The session is being closed.
    SessionEnd,
}

impl HookEvent {
    /// Every event, in the order of a session's life.
    pub const ALL: [HookEvent; 8] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::PreCompact,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::SessionEnd,
    ];

    /// The table's name in `config.toml` (`pre_tool_use`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session_start",
            HookEvent::UserPromptSubmit => "user_prompt_submit",
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
            HookEvent::PreCompact => "pre_compact",
            HookEvent::Stop => "stop",
            HookEvent::SubagentStop => "subagent_stop",
            HookEvent::SessionEnd => "session_end",
        }
    }

    /// `hook_event_name` as Claude Code spells it, so its scripts read penguin's payloads.
    pub fn claude_name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::SessionEnd => "SessionEnd",
        }
    }

    /// Parses either spelling (`pre_tool_use`, `PreToolUse`).
    pub fn parse(s: &str) -> Option<HookEvent> {
        HookEvent::ALL
            .into_iter()
            .find(|e| e.as_str() == s || e.claude_name() == s)
    }

    /// Whether hooks of this event decide about one tool call (matchers apply).
    pub fn is_about_a_tool(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[hooks.EVENT]]` table.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    /// A regex over the tool's name, matched whole (`exec_command`, `write_file|edit_file`;
    /// Claude Code's names, `Bash`, `Write`, match their penguin tools too); absent or empty:
    /// every tool. Only for `pre_tool_use` and `post_tool_use`.
    pub matcher: Option<String>,
    /// For `exec_command`: only commands starting with these words (`git push`).
    pub command_prefix: Option<String>,
    /// Run with `sh -c`, the event's JSON on stdin.
    pub command: String,
    /// How long it may run (default 60 s, at most 600 s).
    pub timeout_ms: Option<u64>,
    /// `false` runs it outside the session's sandbox. Honoured only in the user's own
    /// `config.toml`: a workspace's hooks always run sandboxed.
    pub sandbox: Option<bool>,
}

/// `[hooks]`: one table array per event.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
    /// `[[hooks.session_start]]`.
    pub session_start: Vec<HookEntry>,
    /// `[[hooks.user_prompt_submit]]`.
    pub user_prompt_submit: Vec<HookEntry>,
    /// `[[hooks.pre_tool_use]]`.
    pub pre_tool_use: Vec<HookEntry>,
    /// `[[hooks.post_tool_use]]`.
    pub post_tool_use: Vec<HookEntry>,
    /// `[[hooks.pre_compact]]`.
    pub pre_compact: Vec<HookEntry>,
    /// `[[hooks.stop]]`.
    pub stop: Vec<HookEntry>,
    /// `[[hooks.subagent_stop]]`.
    pub subagent_stop: Vec<HookEntry>,
    /// `[[hooks.session_end]]`.
    pub session_end: Vec<HookEntry>,
    /// How many times in a row `stop` hooks may keep one task going (default 3).
    pub max_stop_continuations: Option<u32>,
}

impl HooksConfig {
    /// The tables of `event`.
    pub fn entries(&self, event: HookEvent) -> &[HookEntry] {
        match event {
            HookEvent::SessionStart => &self.session_start,
            HookEvent::UserPromptSubmit => &self.user_prompt_submit,
            HookEvent::PreToolUse => &self.pre_tool_use,
            HookEvent::PostToolUse => &self.post_tool_use,
            HookEvent::PreCompact => &self.pre_compact,
            HookEvent::Stop => &self.stop,
            HookEvent::SubagentStop => &self.subagent_stop,
            HookEvent::SessionEnd => &self.session_end,
        }
    }

    /// Every table with its event, in event order.
    pub fn all(&self) -> impl Iterator<Item = (HookEvent, &HookEntry)> {
        HookEvent::ALL
            .into_iter()
            .flat_map(move |e| self.entries(e).iter().map(move |h| (e, h)))
    }

    /// True when no hook is configured.
    pub fn is_empty(&self) -> bool {
        self.all().next().is_none()
    }
}

/// A workspace's `.penguin/hooks.toml`: `[[hooks.EVENT]]` tables, as in `config.toml`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkspaceFile {
    #[serde(default)]
    pub(crate) hooks: HooksConfig,
}

/// Where a hook was configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookOrigin {
    /// The user's own `config.toml`.
    User,
    /// A workspace's `.penguin/hooks.toml`, trusted for its content.
    Workspace,
}

impl HookOrigin {
    /// `config.toml` or `.penguin/hooks.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookOrigin::User => "config.toml",
            HookOrigin::Workspace => ".penguin/hooks.toml",
        }
    }
}

/// A hook table that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HookConfigError {
    /// The matcher is not a regex.
    #[error("[[hooks.{event}]] #{index} in {origin}: matcher {matcher:?} is not a regex: {error}")]
    Matcher {
        /// Its event.
        event: HookEvent,
        /// Its place among its event's tables, from 1.
        index: usize,
        /// Where it was configured.
        origin: &'static str,
        /// The matcher.
        matcher: String,
        /// The regex's complaint.
        error: String,
    },
    /// The command is empty.
    #[error("[[hooks.{event}]] #{index} in {origin}: command is empty")]
    EmptyCommand {
        /// Its event.
        event: HookEvent,
        /// Its place among its event's tables, from 1.
        index: usize,
        /// Where it was configured.
        origin: &'static str,
    },
    /// The workspace's file does not parse.
    #[error("{path}: {error}")]
    Workspace {
        /// The file.
        path: String,
        /// What is wrong with it.
        error: String,
    },
}

/// One usable hook.
#[derive(Clone, Debug)]
pub struct Hook {
    /// Its event.
    pub event: HookEvent,
    /// Where it was configured.
    pub origin: HookOrigin,
    /// The command, run with `sh -c`.
    pub command: String,
    /// The matcher as written.
    pub matcher: Option<String>,
    matcher_re: Option<regex::Regex>,
    /// For `exec_command`: the command must start with these words.
    pub command_prefix: Option<String>,
    /// How long it may run.
    pub timeout: Duration,
    /// Whether it runs in the session's sandbox.
    pub sandboxed: bool,
}

impl Hook {
    /// Checks one table.
    pub fn new(
        event: HookEvent,
        index: usize,
        entry: &HookEntry,
        origin: HookOrigin,
    ) -> Result<Hook, HookConfigError> {
        if entry.command.trim().is_empty() {
            return Err(HookConfigError::EmptyCommand {
                event,
                index,
                origin: origin.as_str(),
            });
        }
        let matcher = entry.matcher.clone().filter(|m| !m.is_empty() && m != "*");
        let matcher_re = match &matcher {
            Some(m) => Some(regex::Regex::new(&format!("^(?:{m})$")).map_err(|e| {
                HookConfigError::Matcher {
                    event,
                    index,
                    origin: origin.as_str(),
                    matcher: m.clone(),
                    error: e.to_string(),
                }
            })?),
            None => None,
        };
        let timeout = entry
            .timeout_ms
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
            .min(MAX_TIMEOUT);
        Ok(Hook {
            event,
            origin,
            command: entry.command.clone(),
            matcher,
            matcher_re,
            command_prefix: entry
                .command_prefix
                .clone()
                .filter(|p| !p.trim().is_empty()),
            timeout,
            // A cloned repository never gets to run code unconfined.
            sandboxed: origin == HookOrigin::Workspace || entry.sandbox != Some(false),
        })
    }

    /// Every usable hook of `config`, in event then config order.
    pub fn all_of(config: &HooksConfig, origin: HookOrigin) -> Result<Vec<Hook>, HookConfigError> {
        let mut hooks = Vec::new();
        for event in HookEvent::ALL {
            for (i, entry) in config.entries(event).iter().enumerate() {
                hooks.push(Hook::new(event, i + 1, entry, origin)?);
            }
        }
        Ok(hooks)
    }

    /// The name a decision of this hook carries (`approval_decision.decided_by`).
    pub fn name(&self) -> String {
        format!("hook:{}", self.command)
    }

    /// Whether it runs for a call of `tool` (with `command`, for `exec_command`).
    pub fn matches(&self, tool: &str, command: Option<&str>) -> bool {
        let named = match &self.matcher_re {
            None => true,
            Some(re) => {
                re.is_match(tool) || claude_alias(tool).is_some_and(|alias| re.is_match(alias))
            }
        };
        named
            && match (&self.command_prefix, command) {
                (None, _) => true,
                (Some(prefix), Some(cmd)) => starts_with_words(cmd, prefix),
                (Some(_), None) => false,
            }
    }
}

/// Claude Code's name of a penguin tool, so its matchers (`Bash`, `Write|Edit`) work as
/// written.
pub fn claude_alias(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "exec_command" => "Bash",
        "write_file" => "Write",
        "edit_file" | "apply_patch" => "Edit",
        "read_file" => "Read",
        "grep_files" => "Grep",
        "list_files" => "LS",
        "update_plan" => "TodoWrite",
        "run_subagent" => "Task",
        _ => return None,
    })
}

/// `cmd` begins with the words of `prefix` (`git push` covers `git  push -f`, not
/// `git pushy`).
fn starts_with_words(cmd: &str, prefix: &str) -> bool {
    let mut words = cmd.split_whitespace();
    prefix.split_whitespace().all(|p| words.next() == Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(matcher: Option<&str>, prefix: Option<&str>) -> Hook {
        let entry = HookEntry {
            matcher: matcher.map(str::to_owned),
            command_prefix: prefix.map(str::to_owned),
            command: "true".into(),
            ..HookEntry::default()
        };
        Hook::new(HookEvent::PreToolUse, 1, &entry, HookOrigin::User).unwrap()
    }

    #[test]
    fn matchers_match_whole_names_penguins_or_claude_codes() {
        let h = hook(Some("exec_command"), None);
        assert!(h.matches("exec_command", Some("ls")));
        assert!(!h.matches("exec_command_2", None), "matched whole");
        assert!(hook(Some("Bash"), None).matches("exec_command", Some("ls")));
        assert!(hook(Some("Write|Edit"), None).matches("edit_file", None));
        assert!(hook(None, None).matches("anything", None));
        assert!(hook(Some("*"), None).matches("anything", None));
    }

    #[test]
    fn a_command_prefix_compares_words() {
        let h = hook(Some("exec_command"), Some("git push"));
        assert!(h.matches("exec_command", Some("git   push -f origin")));
        assert!(!h.matches("exec_command", Some("git pushy")));
        assert!(!h.matches("exec_command", Some("echo git push")));
        assert!(!h.matches("read_file", None));
    }

    #[test]
    fn bad_tables_are_refused_by_name_and_workspaces_never_run_unsandboxed() {
        let bad = HookEntry {
            matcher: Some("(".into()),
            command: "x".into(),
            ..HookEntry::default()
        };
        let e = Hook::new(HookEvent::PostToolUse, 2, &bad, HookOrigin::User).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("[[hooks.post_tool_use]] #2 in config.toml: matcher \"(\""),
            "{e}"
        );
        let empty = HookEntry::default();
        assert!(matches!(
            Hook::new(HookEvent::Stop, 1, &empty, HookOrigin::User),
            Err(HookConfigError::EmptyCommand { .. })
        ));
        let out = HookEntry {
            command: "x".into(),
            sandbox: Some(false),
            ..HookEntry::default()
        };
        assert!(
            !Hook::new(HookEvent::Stop, 1, &out, HookOrigin::User)
                .unwrap()
                .sandboxed
        );
        assert!(
            Hook::new(HookEvent::Stop, 1, &out, HookOrigin::Workspace)
                .unwrap()
                .sandboxed
        );
    }

    #[test]
    fn the_issues_shape_parses() {
        let text = r#"
[[hooks.pre_tool_use]]
matcher = "exec_command"        # a regex over the tool name; absent: every tool
command = "no-rm-hook --strict" # run with sh -c, the event's JSON on stdin
timeout_ms = 10000              # optional
"#;
        let file: WorkspaceFile = toml::from_str(text).unwrap();
        let hooks = Hook::all_of(&file.hooks, HookOrigin::User).unwrap();
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0].timeout, Duration::from_millis(10000));
        assert_eq!(hooks[0].name(), "hook:no-rm-hook --strict");
    }
}
