//! Tools from Model Context Protocol servers (feature `mcp`), on the official Rust SDK.
//!
//! [`McpEnvironment`] wraps another [`Environment`] (the built-in tools) and adds the tools of
//! the configured servers as `mcp__<server>__<tool>`, with the server's JSON schema. Their
//! calls run under the same close-out contract as built-in tools (timeout, truncation,
//! interruption, exactly one complete output).
//!
//! - **Connect** is lazy and happens once, when the session calls
//!   [`Environment::connect`] before its first run: all servers in parallel, each bounded by
//!   its `connect_timeout_ms` (handshake plus tool discovery). A server that fails is a failed
//!   result and a warning; its tools are absent and the session goes on. A cancelled connect
//!   closes whatever it had opened and the next call starts over. The tool list is a snapshot:
//!   `tools/list_changed` is not followed.
//! - **Transports**: stdio (a child process in its own process group, killed with its group
//!   when the environment is dropped; optionally started under the session's sandbox),
//!   Streamable HTTP, and the legacy HTTP+SSE transport (implemented here: the SDK dropped it).
//! - **Results**: text, images, resource links and embedded resources become output text (and
//!   images); an `isError` result is a failed output carrying the server's message; a server
//!   that dies during a call gives a failed output naming it, and the next call to one of its
//!   tools restarts it. So does a stdio server that sends a message over 16 MiB: the call fails
//!   at once instead of waiting out its timeout for an answer the SDK dropped.
//! - **Names**: a tool whose name is empty, has characters or a length a model API refuses, or
//!   is taken already is left out with a warning; it is never offered.
//! - **Permission**: under `permission = "auto"` a tool annotated `readOnlyHint: true` is
//!   [`Permission::Read`], everything else [`Permission::ReadWrite`] (hints are untrusted, so
//!   the default is the restrictive side); `r` or `rw` applies to every tool of the server.

mod config;
mod connect;
mod render;
mod sse;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use penguin_engine::{CancellationToken, Environment, MessageSink, Permission, ToolCallRequest};
use penguin_omni_protocol::{McpConnectResult, McpConnectStatus, ToolDefinition};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceError;
use serde_json::Value;

use crate::call_output::ArchiveBudget;
use crate::contract::{self, Limits, Output, Tool, ToolOutcome, ToolResult};
use crate::{Sandbox, ToolsConfig};
use connect::{connect_server, lock, Connection};

pub use config::{
    resolve_servers, McpConfigError, McpFlagError, McpPermission, McpServer, McpServerConfig,
    McpTransport, DEFAULT_CONNECT_TIMEOUT,
};

/// What every MCP tool name starts with.
pub const MCP_TOOL_PREFIX: &str = "mcp__";

/// The name the model calls a server's tool by.
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    format!("{MCP_TOOL_PREFIX}{server}__{tool}")
}

/// The longest tool name every supported model API accepts (OpenAI's and Gemini's function
/// names stop at 64 characters; Anthropic's at 128).
/// The most one message from a server may take (a stdio line with its newline, or one SSE
/// event): the SDK's own cap (`DEFAULT_MAX_LINE_LENGTH`, 16 MiB).
const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

const MAX_TOOL_NAME_CHARS: usize = 64;

/// What every LLM API accepts as a tool name, `^[a-zA-Z0-9_-]{1,64}$`: one unusable name would
/// fail every request of the session.
fn usable_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME_CHARS).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Why a server's tool cannot be offered under `full` (its `mcp__<server>__<tool>` name), if
/// it cannot. The tool's own name is checked too: an empty one would still make a usable full
/// name (`mcp__evil__`), but not a tool anyone listed on purpose.
fn unusable_tool(remote: &str, full: &str) -> Option<String> {
    if remote.is_empty() {
        return Some("the name is empty".into());
    }
    if !usable_tool_name(remote) || !usable_tool_name(full) {
        return Some(format!(
            "{full:?} is not usable as a model tool name (letters, digits, _ and -, at most {MAX_TOOL_NAME_CHARS})"
        ));
    }
    None
}

/// Where warnings go (an unreachable server, a skipped entry or tool).
pub type WarnFn = Arc<dyn Fn(&str) + Send + Sync>;

/// One registered tool.
#[derive(Clone, Debug)]
struct McpTool {
    server: usize,
    remote: String,
    definition: ToolDefinition,
    permission: Permission,
}

#[derive(Default)]
struct State {
    /// `Some` once a connect attempt completed.
    results: Option<Vec<McpConnectResult>>,
    tools: Vec<McpTool>,
    by_name: HashMap<String, usize>,
}

struct Shared {
    servers: Vec<McpServer>,
    warnings: Vec<String>,
    workspace: PathBuf,
    sandbox: Sandbox,
    config: ToolsConfig,
    archive_budget: Arc<ArchiveBudget>,
    warn: WarnFn,
    state: Mutex<State>,
    /// One slot per server: its live connection, behind a lock that serializes restarts.
    conns: Vec<tokio::sync::Mutex<Option<Arc<Connection>>>>,
    /// Single-flight connect.
    connecting: tokio::sync::Mutex<()>,
}

impl Shared {
    /// The server's connection, restarting it when it died since the last call.
    async fn connection(&self, index: usize) -> Result<Arc<Connection>, String> {
        let server = &self.servers[index];
        let mut slot = self.conns[index].lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| c.alive()) {
            return Ok(conn.clone());
        }
        if let Some(old) = slot.take() {
            (self.warn)(&format!(
                "MCP server \"{}\" is gone{}; restarting it",
                server.name,
                old.gone_detail()
            ));
        }
        let (conn, _tools) = connect_server(server, &self.workspace, &self.sandbox)
            .await
            .map_err(|e| format!("MCP server \"{}\" could not be restarted: {e}", server.name))?;
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn limits(&self, server: &McpServer) -> Limits {
        let session = self
            .config
            .limits(Some(&self.workspace), self.archive_budget.clone());
        Limits {
            max_output_chars: server.max_output_chars.or(session.max_output_chars),
            timeout: server
                .timeout
                .or(self.config.timeout)
                .filter(|t| !t.is_zero()),
            ..session
        }
    }

    async fn connect_all(&self) -> Vec<(McpConnectResult, Vec<McpTool>)> {
        let attempts = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, server)| async move {
                let started = Instant::now();
                let outcome = connect_server(server, &self.workspace, &self.sandbox).await;
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let mut result = McpConnectResult {
                    server: server.name.clone(),
                    transport: server.transport.kind().to_owned(),
                    status: McpConnectStatus::Completed,
                    duration_ms: ms,
                    tools: None,
                    error: None,
                };
                match outcome {
                    Ok((conn, tools)) => {
                        *self.conns[i].lock().await = Some(Arc::new(conn));
                        let tools = self.register(i, &tools);
                        result.tools = Some(Value::from(tools.len()));
                        (result, tools)
                    }
                    Err(e) => {
                        (self.warn)(&format!("MCP server \"{}\" unavailable: {e}", server.name));
                        result.status = McpConnectStatus::Failed;
                        result.error = Some(e);
                        (result, Vec::new())
                    }
                }
            });
        futures::future::join_all(attempts).await
    }

    /// The server's tools that can be offered, in its order.
    fn register(&self, index: usize, listed: &[Value]) -> Vec<McpTool> {
        let server = &self.servers[index];
        let mut out: Vec<McpTool> = Vec::new();
        for tool in listed {
            let Some(remote) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let name = mcp_tool_name(&server.name, remote);
            if let Some(why) = unusable_tool(remote, &name) {
                (self.warn)(&format!(
                    "MCP server \"{}\" tool {remote:?} skipped: {why}",
                    server.name
                ));
                continue;
            }
            if out.iter().any(|t| t.definition.name == name) {
                (self.warn)(&format!(
                    "MCP server \"{}\" listed tool \"{remote}\" twice; keeping the first",
                    server.name
                ));
                continue;
            }
            let description = tool
                .get("description")
                .or_else(|| tool.get("title"))
                .and_then(Value::as_str)
                .map_or_else(
                    || format!("MCP tool \"{remote}\" of server \"{}\".", server.name),
                    str::to_owned,
                );
            let read_only = tool
                .pointer("/annotations/readOnlyHint")
                .and_then(Value::as_bool)
                == Some(true);
            let permission = match server.permission {
                McpPermission::Read => Permission::Read,
                McpPermission::ReadWrite => Permission::ReadWrite,
                McpPermission::Auto if read_only => Permission::Read,
                McpPermission::Auto => Permission::ReadWrite,
            };
            out.push(McpTool {
                server: index,
                remote: remote.to_owned(),
                definition: ToolDefinition {
                    name,
                    description,
                    parameters: tool.get("inputSchema").cloned(),
                },
                permission,
            });
        }
        out
    }
}

/// Built-in (or any other) tools plus the tools of MCP servers.
#[derive(Clone)]
pub struct McpEnvironment {
    inner: Arc<dyn Environment>,
    shared: Arc<Shared>,
}

impl fmt::Debug for McpEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpEnvironment")
            .field("servers", &self.shared.servers)
            .finish_non_exhaustive()
    }
}

impl McpEnvironment {
    /// `inner`'s tools plus the servers of `entries` (invalid entries are skipped with a
    /// warning at connect). stdio servers start in `workspace` unless they set `cwd`; those
    /// with `sandbox = true` start under `sandbox`. `config` gives the default timeout and
    /// output cap of MCP tools and whether truncated output is archived.
    pub fn new(
        inner: Arc<dyn Environment>,
        entries: &[McpServerConfig],
        workspace: &Path,
        sandbox: Sandbox,
        config: ToolsConfig,
    ) -> McpEnvironment {
        let (servers, warnings) = resolve_servers(entries);
        let conns = servers
            .iter()
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        McpEnvironment {
            inner,
            shared: Arc::new(Shared {
                servers,
                warnings,
                workspace: std::fs::canonicalize(workspace)
                    .unwrap_or_else(|_| workspace.to_path_buf()),
                sandbox,
                archive_budget: Arc::new(ArchiveBudget::new(
                    config.archive_max_file_bytes,
                    config.archive_max_session_bytes,
                )),
                config,
                warn: Arc::new(|w| tracing::warn!("{w}")),
                state: Mutex::new(State::default()),
                conns,
                connecting: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Sends warnings to `warn` instead of the `tracing` log. Call before sharing.
    pub fn with_warnings(mut self, warn: WarnFn) -> McpEnvironment {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.warn = warn;
        }
        self
    }

    /// The validated servers, in config order.
    pub fn servers(&self) -> &[McpServer] {
        &self.shared.servers
    }

    /// Why entries were skipped.
    pub fn config_warnings(&self) -> &[String] {
        &self.shared.warnings
    }

    /// The tools of one server, once connected.
    pub fn server_tools(&self, server: &str) -> Vec<ToolDefinition> {
        let Some(index) = self.shared.servers.iter().position(|s| s.name == server) else {
            return Vec::new();
        };
        lock(&self.shared.state)
            .tools
            .iter()
            .filter(|t| t.server == index)
            .map(|t| t.definition.clone())
            .collect()
    }

    /// Closes every connection (stdio servers are killed with their process group).
    pub async fn shutdown(&self) {
        for slot in &self.shared.conns {
            if let Some(conn) = slot.lock().await.take() {
                drop(conn);
            }
        }
    }
}

#[async_trait]
impl Environment for McpEnvironment {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let call = request.tool_call().clone();
        if !call.name.starts_with(MCP_TOOL_PREFIX) {
            return self.inner.execute(request, sink).await;
        }
        let tool = {
            let state = lock(&self.shared.state);
            state
                .by_name
                .get(&call.name)
                .map(|i| state.tools[*i].clone())
        };
        let Some(tool) = tool else {
            let limits = Limits {
                max_output_chars: None,
                timeout: None,
                archive_root: None,
                archive_budget: self.shared.archive_budget.clone(),
            };
            return contract::execute(None, &call, &request.cancel, &limits, sink).await;
        };
        let limits = self.shared.limits(&self.shared.servers[tool.server]);
        let bound = McpCall {
            shared: self.shared.clone(),
            tool,
        };
        contract::execute(Some(&bound), &call, &request.cancel, &limits, sink).await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = self.inner.tools();
        tools.extend(
            lock(&self.shared.state)
                .tools
                .iter()
                .map(|t| t.definition.clone()),
        );
        tools
    }

    fn permission(&self, name: &str) -> Permission {
        if !name.starts_with(MCP_TOOL_PREFIX) {
            return self.inner.permission(name);
        }
        let state = lock(&self.shared.state);
        state
            .by_name
            .get(name)
            .map_or(Permission::ReadWrite, |i| state.tools[*i].permission)
    }

    fn connect_servers(&self) -> Vec<String> {
        self.shared.servers.iter().map(|s| s.name.clone()).collect()
    }

    fn background(&self) -> Option<Arc<dyn penguin_engine::BackgroundWork>> {
        self.inner.background()
    }

    async fn preview(&self, call: &penguin_omni_protocol::ToolCall) -> Option<String> {
        self.inner.preview(call).await
    }

    async fn connect(&self, cancel: &CancellationToken) -> Option<Vec<McpConnectResult>> {
        let _single = tokio::select! {
            g = self.shared.connecting.lock() => g,
            () = cancel.cancelled() => return None,
        };
        if let Some(done) = lock(&self.shared.state).results.clone() {
            return Some(done);
        }
        for w in &self.shared.warnings {
            (self.shared.warn)(w);
        }
        let settled = tokio::select! {
            s = self.shared.connect_all() => s,
            () = cancel.cancelled() => {
                // Dropping the attempts closed what they had opened; nothing is kept.
                for slot in &self.shared.conns {
                    slot.lock().await.take();
                }
                return None;
            }
        };
        let mut clashes = Vec::new();
        let results = {
            let mut state = lock(&self.shared.state);
            let mut results = Vec::new();
            for (mut result, tools) in settled {
                let mut kept = 0;
                for tool in tools {
                    // Server names may hold `__` too: `a` + `b__c` and `a__b` + `c` are one
                    // name. The first server in config order keeps it.
                    if let Some(first) = state.by_name.get(&tool.definition.name) {
                        let servers = &self.shared.servers;
                        clashes.push(format!(
                            "MCP server \"{}\" tool \"{}\" skipped: its name {:?} is taken by tool \"{}\" of server \"{}\"",
                            servers[tool.server].name,
                            tool.remote,
                            tool.definition.name,
                            state.tools[*first].remote,
                            servers[state.tools[*first].server].name,
                        ));
                        continue;
                    }
                    let at = state.tools.len();
                    state.by_name.insert(tool.definition.name.clone(), at);
                    state.tools.push(tool);
                    kept += 1;
                }
                if result.tools.is_some() {
                    result.tools = Some(Value::from(kept));
                }
                results.push(result);
            }
            state.results = Some(results.clone());
            results
        };
        for w in &clashes {
            (self.shared.warn)(w);
        }
        Some(results)
    }

    /// An MCP server runs as configured: only the inner tools' commands can be granted.
    fn unsandboxed_tools(&self) -> Vec<String> {
        self.inner.unsandboxed_tools()
    }

    fn grant_unsandboxed(&self, call: &penguin_omni_protocol::ToolCall) -> bool {
        !call.name.starts_with(MCP_TOOL_PREFIX) && self.inner.grant_unsandboxed(call)
    }
}

/// One call of one MCP tool, as the contract runs it.
struct McpCall {
    shared: Arc<Shared>,
    tool: McpTool,
}

#[async_trait]
impl Tool for McpCall {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let server = &self.shared.servers[self.tool.server];
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            _ => return Err("the arguments must be a JSON object".into()),
        };
        let conn = self.shared.connection(self.tool.server).await?;
        let params = CallToolRequestParams::new(self.tool.remote.clone()).with_arguments(arguments);
        let answer = tokio::select! {
            biased;
            // The SDK would drop an oversized answer and leave the call waiting.
            reason = conn.broken() => {
                conn.dead.store(true, Ordering::Relaxed);
                return Err(format!(
                    "MCP server \"{}\" {reason}; the connection is closed and the next call restarts it",
                    server.name
                ));
            }
            answer = conn.service.peer().call_tool(params) => answer,
        };
        let result = match answer {
            Ok(r) => r,
            Err(e) => {
                let gone = matches!(
                    e,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) || !conn.alive();
                if gone {
                    conn.dead.store(true, Ordering::Relaxed);
                    return Err(format!(
                        "MCP server \"{}\" exited during the call{}; the next call restarts it",
                        server.name,
                        conn.gone_detail()
                    ));
                }
                return Err(format!("MCP server \"{}\": {e}", server.name));
            }
        };
        let rendered = render::render(&serde_json::to_value(&result).unwrap_or(Value::Null));
        let text = if rendered.text.is_empty() && rendered.is_error && rendered.images.is_empty() {
            format!(
                "[MCP server \"{}\" reported an error with no message]",
                server.name
            )
        } else {
            rendered.text
        };
        out.emit(text).await;
        Ok(ToolOutcome {
            note: None,
            stop: rendered
                .is_error
                .then_some(penguin_omni_protocol::StopReason::Failed),
            images: rendered.images,
        })
    }
}
