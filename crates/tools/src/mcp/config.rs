//! `[[mcp_servers]]` entries and their validation into servers ready to connect.
//!
//! An invalid entry never breaks a session: it becomes a warning and is skipped, so one typo
//! in a hand-edited config costs one server, not the agent (the reference's stance).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The connect budget (handshake plus tool discovery) of a server that sets none.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(10_000);

/// One `[[mcp_servers]]` entry as written in `config.toml` or sent to `POST /api/sessions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Letters, digits, `_` and `-`: it becomes the tool prefix `mcp__<name>__`.
    pub name: String,
    /// `stdio`, `http` (Streamable HTTP) or `sse` (legacy HTTP+SSE). Inferred when absent:
    /// `command` means stdio, `url` means http; `sse` is always explicit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// stdio: the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: variables set for the server on top of a minimal inherited set (`PATH`, `HOME`,
    /// `USER`, `LOGNAME`, `SHELL`, `TERM`, `LANG`); nothing else of penguin's environment
    /// (API keys included) reaches it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: the working directory (default: the session's workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// http and sse: the endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http and sse: headers sent with every request (e.g. `Authorization`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `auto` (default: each tool's `readOnlyHint`), `r` or `rw` for every tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<String>,
    /// Connect budget in ms (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    /// Per-call timeout in ms for this server's tools (default: the tools' timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Output cap in chars for this server's tools (default: the tools' cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_length: Option<u64>,
    /// stdio: start the server under the session's command sandbox.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandbox: bool,
}

/// How a server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A local process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra variables.
        env: BTreeMap<String, String>,
        /// Working directory; `None`: the workspace.
        cwd: Option<PathBuf>,
        /// Start it confined by the session's sandbox.
        sandbox: bool,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// Headers of every request.
        headers: BTreeMap<String, String>,
    },
    /// The legacy HTTP+SSE transport.
    Sse {
        /// The SSE endpoint.
        url: String,
        /// Headers of every request, the SSE stream's included.
        headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// `stdio`, `http` or `sse`, as `mcp_connect_end` reports it.
    pub fn kind(&self) -> &'static str {
        match self {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
            McpTransport::Sse { .. } => "sse",
        }
    }
}

/// The permission every tool of a server gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum McpPermission {
    /// Each tool's own `readOnlyHint`: only an explicit `true` makes it read-only.
    #[default]
    Auto,
    /// Every tool reads only.
    Read,
    /// Every tool may write.
    ReadWrite,
}

/// A validated server, ready to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServer {
    /// Its name (the tool prefix).
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// Budget of connect plus tool discovery.
    pub connect_timeout: Duration,
    /// Per-call timeout of its tools; `None`: the tools' default.
    pub timeout: Option<Duration>,
    /// Output cap of its tools; `None`: the tools' default.
    pub max_output_chars: Option<usize>,
    /// Permission of its tools.
    pub permission: McpPermission,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Why an `[[mcp_servers]]` entry is not a server penguin can connect to. Each variant names
/// the key and the value at fault; the texts are the warnings a session shows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpConfigError {
    /// `name` is empty or has characters other than letters, digits, `_` and `-`.
    #[error("invalid server name {name:?} (letters, digits, \"_\" and \"-\" only)")]
    InvalidName {
        /// The name given.
        name: String,
    },
    /// `transport` is none of `stdio`, `http` and `sse`.
    #[error("unknown transport {transport:?} (expected \"stdio\", \"http\" or \"sse\")")]
    UnknownTransport {
        /// The transport given.
        transport: String,
    },
    /// No `transport`, and neither `command` nor `url` to infer it from.
    #[error("cannot infer the transport: set \"transport\", or give \"command\" or \"url\"")]
    NoTransport,
    /// A stdio entry without a `command`, or with a blank one.
    #[error("the stdio transport needs a non-empty \"command\"")]
    MissingCommand,
    /// An http or sse entry without a `url`.
    #[error("the {transport} transport needs a \"url\"")]
    MissingUrl {
        /// `http` or `sse`.
        transport: &'static str,
    },
    /// `url` does not parse.
    #[error("\"url\" is not a valid URL ({source}): {url:?}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// Why it does not parse.
        source: <reqwest::Url as std::str::FromStr>::Err,
    },
    /// `url` has a scheme other than http and https.
    #[error("\"url\" must use http or https, not {scheme:?}")]
    UnsupportedScheme {
        /// The URL's scheme.
        scheme: String,
    },
    /// A key of `headers` is not a valid HTTP header name.
    #[error("invalid header name {name:?}")]
    InvalidHeaderName {
        /// The header name.
        name: String,
    },
    /// A value of `headers` is not a valid HTTP header value.
    #[error("invalid value for header {name:?}")]
    InvalidHeaderValue {
        /// The header whose value it is.
        name: String,
    },
    /// `command` or `sandbox` on an http or sse entry.
    #[error("\"command\" and \"sandbox\" apply to stdio servers, not {transport}")]
    StdioOnly {
        /// `http` or `sse`.
        transport: &'static str,
    },
    /// `permission` is none of `auto`, `r` and `rw`.
    #[error("\"permission\" must be \"auto\", \"r\" or \"rw\", not {permission:?}")]
    InvalidPermission {
        /// The permission given.
        permission: String,
    },
    /// A budget or cap is 0.
    #[error("\"{key}\" must be a positive number")]
    NotPositive {
        /// `connect_timeout_ms`, `timeout_ms` or `max_output_length`.
        key: &'static str,
    },
}

/// Why an `--mcp NAME=COMMAND [ARGS...]` flag is not a stdio entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpFlagError {
    /// No `=` between the name and the command.
    #[error("--mcp {spec:?}: expected NAME=COMMAND [ARGS...]")]
    MissingName {
        /// The flag's value.
        spec: String,
    },
    /// Nothing but whitespace after `=`.
    #[error("--mcp {spec:?}: the command is empty")]
    EmptyCommand {
        /// The flag's value.
        spec: String,
    },
}

fn positive(v: Option<u64>, key: &'static str) -> Result<Option<u64>, McpConfigError> {
    match v {
        Some(0) => Err(McpConfigError::NotPositive { key }),
        other => Ok(other),
    }
}

impl McpServerConfig {
    /// Validates the entry.
    pub fn resolve(&self) -> Result<McpServer, McpConfigError> {
        if !valid_name(&self.name) {
            return Err(McpConfigError::InvalidName {
                name: self.name.clone(),
            });
        }
        let kind = match self.transport.as_deref() {
            Some("stdio") => "stdio",
            Some("http") => "http",
            Some("sse") => "sse",
            Some(other) => {
                return Err(McpConfigError::UnknownTransport {
                    transport: other.to_owned(),
                })
            }
            None if self.command.is_some() => "stdio",
            None if self.url.is_some() => "http",
            None => return Err(McpConfigError::NoTransport),
        };
        let transport = if kind == "stdio" {
            let command = self
                .command
                .clone()
                .filter(|c| !c.trim().is_empty())
                .ok_or(McpConfigError::MissingCommand)?;
            McpTransport::Stdio {
                command,
                args: self.args.clone(),
                env: self.env.clone(),
                cwd: self.cwd.clone(),
                sandbox: self.sandbox,
            }
        } else {
            let url = self
                .url
                .clone()
                .ok_or(McpConfigError::MissingUrl { transport: kind })?;
            let parsed = match reqwest::Url::parse(&url) {
                Ok(parsed) => parsed,
                Err(source) => return Err(McpConfigError::InvalidUrl { url, source }),
            };
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(McpConfigError::UnsupportedScheme {
                    scheme: parsed.scheme().to_owned(),
                });
            }
            for (k, v) in &self.headers {
                http::HeaderName::try_from(k.as_str())
                    .map_err(|_| McpConfigError::InvalidHeaderName { name: k.clone() })?;
                http::HeaderValue::try_from(v.as_str())
                    .map_err(|_| McpConfigError::InvalidHeaderValue { name: k.clone() })?;
            }
            let headers = self.headers.clone();
            if kind == "http" {
                McpTransport::Http { url, headers }
            } else {
                McpTransport::Sse { url, headers }
            }
        };
        if kind != "stdio" && (self.sandbox || self.command.is_some()) {
            return Err(McpConfigError::StdioOnly { transport: kind });
        }
        let permission = match self.permission.as_deref() {
            None | Some("auto") => McpPermission::Auto,
            Some("r") => McpPermission::Read,
            Some("rw") => McpPermission::ReadWrite,
            Some(other) => {
                return Err(McpConfigError::InvalidPermission {
                    permission: other.to_owned(),
                })
            }
        };
        Ok(McpServer {
            name: self.name.clone(),
            transport,
            connect_timeout: positive(self.connect_timeout_ms, "connect_timeout_ms")?
                .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_millis),
            timeout: positive(self.timeout_ms, "timeout_ms")?.map(Duration::from_millis),
            max_output_chars: positive(self.max_output_length, "max_output_length")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            permission,
        })
    }

    /// A stdio entry from `NAME=COMMAND [ARGS...]` (the `--mcp` flag): the command line is
    /// split on whitespace, with no quoting.
    pub fn from_flag(spec: &str) -> Result<McpServerConfig, McpFlagError> {
        let (name, command) = spec
            .split_once('=')
            .ok_or_else(|| McpFlagError::MissingName {
                spec: spec.to_owned(),
            })?;
        let mut words = command.split_whitespace().map(str::to_owned);
        let program = words.next().ok_or_else(|| McpFlagError::EmptyCommand {
            spec: spec.to_owned(),
        })?;
        Ok(McpServerConfig {
            name: name.trim().to_owned(),
            command: Some(program),
            args: words.collect(),
            ..McpServerConfig::default()
        })
    }
}

/// Validates a whole list: invalid entries and repeated names become warnings and are
/// skipped; the rest keep their order.
pub fn resolve_servers(entries: &[McpServerConfig]) -> (Vec<McpServer>, Vec<String>) {
    let mut servers: Vec<McpServer> = Vec::new();
    let mut warnings = Vec::new();
    for entry in entries {
        match entry.resolve() {
            Ok(s) if servers.iter().any(|o| o.name == s.name) => warnings.push(format!(
                "MCP server \"{}\" skipped: duplicate server name",
                s.name
            )),
            Ok(s) => servers.push(s),
            Err(e) => warnings.push(format!("MCP server \"{}\" skipped: {e}", entry.name)),
        }
    }
    (servers, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(toml: serde_json::Value) -> McpServerConfig {
        serde_json::from_value(toml).unwrap()
    }

    #[test]
    fn transport_is_inferred_from_command_or_url() {
        let s = entry(serde_json::json!({"name": "fs", "command": "npx", "args": ["-y", "x"]}))
            .resolve()
            .unwrap();
        assert_eq!(s.transport.kind(), "stdio");
        assert_eq!(s.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        let s = entry(serde_json::json!({"name": "web", "url": "http://127.0.0.1:1/mcp"}))
            .resolve()
            .unwrap();
        assert_eq!(s.transport.kind(), "http");
        let s = entry(serde_json::json!({"name": "old", "transport": "sse", "url": "https://h/sse", "permission": "r"}))
            .resolve()
            .unwrap();
        assert_eq!(s.transport.kind(), "sse");
        assert_eq!(s.permission, McpPermission::Read);
    }

    #[test]
    fn invalid_entries_are_warnings_and_the_rest_is_kept_in_order() {
        let entries = vec![
            entry(serde_json::json!({"name": "a b", "command": "x"})),
            entry(serde_json::json!({"name": "ok", "command": "x"})),
            entry(serde_json::json!({"name": "ok", "command": "y"})),
            entry(serde_json::json!({"name": "u", "url": "ftp://h"})),
            entry(serde_json::json!({"name": "p", "command": "x", "permission": "w"})),
            entry(serde_json::json!({"name": "t", "command": "x", "connect_timeout_ms": 0})),
            entry(serde_json::json!({"name": "n"})),
            entry(serde_json::json!({"name": "z", "url": "http://h/", "sandbox": true})),
            entry(serde_json::json!({"name": "last", "url": "http://h/mcp"})),
        ];
        let (servers, warnings) = resolve_servers(&entries);
        let names: Vec<_> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ok", "last"]);
        assert_eq!(warnings.len(), 7, "{warnings:#?}");
        assert!(warnings[0].contains("invalid server name"));
        assert!(warnings[1].contains("duplicate"));
        assert!(warnings[2].contains("http or https"));
        assert!(warnings[3].contains("permission"));
        assert!(warnings[4].contains("positive"));
        assert!(warnings[5].contains("infer"));
        assert!(warnings[6].contains("stdio servers"));
    }

    #[test]
    fn errors_name_the_key_and_the_value() {
        let err = |v: serde_json::Value| entry(v).resolve().unwrap_err();
        assert_eq!(
            err(serde_json::json!({"name": "p", "command": "x", "permission": "w"})),
            McpConfigError::InvalidPermission {
                permission: "w".into()
            }
        );
        assert_eq!(
            err(serde_json::json!({"name": "t", "command": "x", "timeout_ms": 0})),
            McpConfigError::NotPositive { key: "timeout_ms" }
        );
        assert_eq!(
            err(serde_json::json!({"name": "s", "transport": "sse"})),
            McpConfigError::MissingUrl { transport: "sse" }
        );
        let bad_url = err(serde_json::json!({"name": "u", "url": "not a url"}));
        assert!(
            matches!(&bad_url, McpConfigError::InvalidUrl { url, .. } if url == "not a url"),
            "{bad_url:?}"
        );
        assert_eq!(
            bad_url.to_string(),
            "\"url\" is not a valid URL (relative URL without a base): \"not a url\""
        );
        assert_eq!(
            err(serde_json::json!({"name": "h", "url": "http://h/", "headers": {"a b": "x"}}))
                .to_string(),
            "invalid header name \"a b\""
        );
    }

    #[test]
    fn the_flag_form_is_a_stdio_entry() {
        let e = McpServerConfig::from_flag("fs=npx -y server .").unwrap();
        assert_eq!(e.name, "fs");
        assert_eq!(e.command.as_deref(), Some("npx"));
        assert_eq!(e.args, ["-y", "server", "."]);
        assert_eq!(
            McpServerConfig::from_flag("fs"),
            Err(McpFlagError::MissingName { spec: "fs".into() })
        );
        let empty = McpServerConfig::from_flag("fs=  ").unwrap_err();
        assert_eq!(
            empty,
            McpFlagError::EmptyCommand {
                spec: "fs=  ".into()
            }
        );
        assert_eq!(empty.to_string(), "--mcp \"fs=  \": the command is empty");
    }
}
