//! The environment a command starts with: built from an allowlist, never inherited whole.
//!
//! penguin's own environment holds what a command must never see: provider keys
//! (`OPENAI_API_KEY`, …), the server's `PENGUIN_TOKEN`, cloud credentials. A command (or MCP
//! server) gets the core variables a shell and its tools need, plus the names the user lists
//! (`[sandbox] inherit_env`), as codex's `shell_environment_policy` does.

use std::ffi::OsString;

/// What every command inherits: enough for a shell, a locale and a terminal, nothing secret.
pub const CORE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
];

/// Never inherited, whatever the configuration names: penguin's own server token.
const NEVER: &[&str] = &["PENGUIN_TOKEN"];

/// The variables commands inherit from penguin's environment: [`CORE_ENV`] plus extra names,
/// each an exact name or a prefix ending in `*` (`CARGO_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    extra: Vec<String>,
}

impl EnvPolicy {
    /// The core set plus `extra` names (e.g. `["CARGO_HOME", "PIP_*"]`).
    pub fn new(extra: Vec<String>) -> EnvPolicy {
        EnvPolicy { extra }
    }

    /// The extra names beyond [`CORE_ENV`].
    pub fn extra(&self) -> &[String] {
        &self.extra
    }

    /// Whether a variable of this name is passed on.
    pub fn allows(&self, name: &str) -> bool {
        let matches = |pattern: &str| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        };
        !NEVER.contains(&name)
            && (CORE_ENV.iter().any(|p| matches(p)) || self.extra.iter().any(|p| matches(p)))
    }

    /// The allowed variables of `vars` (penguin's environment, in practice).
    pub fn filter(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        vars.into_iter()
            .filter(|(k, _)| k.to_str().is_some_and(|k| self.allows(k)))
            .collect()
    }

    /// Clears `command`'s environment and gives it the allowed part of penguin's.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command.env_clear().envs(self.filter(std::env::vars_os()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(OsString, OsString)> {
        names.iter().map(|n| (n.into(), "v".into())).collect()
    }

    fn names(kept: Vec<(OsString, OsString)>) -> Vec<String> {
        kept.into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect()
    }

    #[test]
    fn secrets_are_dropped_and_the_core_kept() {
        let all = vars(&[
            "PATH",
            "HOME",
            "LC_ALL",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "PENGUIN_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
        ]);
        assert_eq!(
            names(EnvPolicy::default().filter(all)),
            ["PATH", "HOME", "LC_ALL"]
        );
    }

    #[test]
    fn configured_names_and_prefixes_are_added_but_never_the_token() {
        let policy = EnvPolicy::new(vec![
            "CARGO_*".into(),
            "GITHUB_USER".into(),
            "PENGUIN_TOKEN".into(),
            "PENGUIN_*".into(),
        ]);
        let all = vars(&[
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "GITHUB_USER",
            "GITHUB_TOKEN",
            "PENGUIN_TOKEN",
            "PENGUIN_HOME",
        ]);
        assert_eq!(
            names(policy.filter(all)),
            [
                "CARGO_HOME",
                "CARGO_TARGET_DIR",
                "GITHUB_USER",
                "PENGUIN_HOME"
            ]
        );
    }
}
