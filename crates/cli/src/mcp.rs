//! MCP in the CLI: `--mcp NAME=COMMAND`, and the MCP tools added to a session's tools
//! (`penguin mcp list` is in `checks.rs`).

use std::path::Path;
use std::sync::Arc;

use crate::untrusted::{errln, Untrusted};
use penguin::agent::Agent;
use penguin::engine::Environment;
use penguin::tools::mcp::{McpEnvironment, McpServerConfig};
use penguin::tools::{Sandbox, ToolsConfig};

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
    .with_warnings(Arc::new(|w| errln!("penguin: {}", Untrusted(w))));
    Arc::new(env)
}
