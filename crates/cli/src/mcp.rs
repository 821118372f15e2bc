//! MCP in the CLI: `--mcp NAME=COMMAND`, the MCP tools added to a session's tools, and
//! `penguin mcp list`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use penguin::agent::Agent;
use penguin::engine::{CancellationToken, Environment, Permission};
use penguin::omni_protocol::McpConnectStatus;
use penguin::tools::mcp::{McpEnvironment, McpServerConfig};
use penguin::tools::{BuiltinTools, Sandbox, ToolsConfig};

/// The agent of `config.toml`, with the `--mcp` servers added after its own.
pub(crate) fn agent(flags: &[String]) -> Result<Agent, String> {
    let mut agent = Agent::from_env().map_err(|e| e.to_string())?;
    for flag in flags {
        agent
            .config
            .mcp_servers
            .push(McpServerConfig::from_flag(flag).map_err(|e| e.to_string())?);
    }
    Ok(agent)
}

/// `tools` plus the agent's MCP servers (unchanged when there are none). Warnings about them
/// go to stderr.
pub(crate) fn with_servers(
    agent: &Agent,
    workspace: &Path,
    sandbox: &Sandbox,
    tools: Arc<dyn Environment>,
) -> Arc<dyn Environment> {
    if agent.config.mcp_servers.is_empty() {
        return tools;
    }
    let env = McpEnvironment::new(
        tools,
        &agent.config.mcp_servers,
        workspace,
        sandbox.clone(),
        ToolsConfig {
            sandbox: sandbox.clone(),
            ..ToolsConfig::default()
        },
    )
    .with_warnings(Arc::new(|w| eprintln!("penguin: {w}")));
    Arc::new(env)
}

/// `penguin mcp list`.
pub(crate) async fn list(
    flags: Vec<String>,
    workspace: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode, String> {
    let agent = agent(&flags)?;
    let workspace = crate::setup::workspace_dir(workspace)?;
    if agent.config.mcp_servers.is_empty() {
        println!(
            "no MCP servers configured: add [[mcp_servers]] to {} or pass --mcp NAME=COMMAND",
            agent.location.root.join("config.toml").display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // No built-in tools: only the servers' tools are listed.
    let none = ToolsConfig {
        enabled: Vec::new(),
        ..ToolsConfig::default()
    };
    let inner = BuiltinTools::new(&workspace, none)
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))?;
    // Servers with `sandbox = true` start confined here too.
    let sandbox = crate::setup::Confinement::resolve(&agent, &Default::default())?.sandbox;
    let env = McpEnvironment::new(
        Arc::new(inner),
        &agent.config.mcp_servers,
        &workspace,
        sandbox,
        ToolsConfig::default(),
    )
    // Each server's line says why it failed.
    .with_warnings(Arc::new(|_| {}));
    for w in env.config_warnings() {
        eprintln!("penguin: {w}");
    }
    let results = env
        .connect(&CancellationToken::new())
        .await
        .unwrap_or_default();
    let all_ok = results
        .iter()
        .all(|r| r.status == McpConnectStatus::Completed);
    if json {
        let out: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["tool_list"] =
                    serde_json::to_value(env.server_tools(&r.server)).unwrap_or_default();
                v
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    } else {
        for r in &results {
            let status = match r.status {
                McpConnectStatus::Completed => "connected",
                McpConnectStatus::Failed => "failed",
                McpConnectStatus::Aborted => "aborted",
            };
            let tools = env.server_tools(&r.server);
            let detail = match &r.error {
                Some(e) => e.clone(),
                None => format!("{} tools", tools.len()),
            };
            println!(
                "{:<16} {:<5} {:<9} {:>6} ms  {detail}",
                r.server, r.transport, status, r.duration_ms
            );
            for t in tools {
                let perm = match env.permission(&t.name) {
                    Permission::Read => "r ",
                    Permission::ReadWrite => "rw",
                };
                let first_line = t.description.lines().next().unwrap_or_default();
                println!("  {perm}  {}  {first_line}", t.name);
            }
        }
    }
    env.shutdown().await;
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
