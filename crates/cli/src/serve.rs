//! `penguin serve`: the HTTP server over configured models or a scenario.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use crate::args::ServeArgs;
use crate::setup::{
    pick_source, sandbox_request, session_tools, workspace_dir, Confinement, Source,
};
use crate::with_runtime;

pub(crate) fn serve(args: ServeArgs) -> Result<ExitCode, String> {
    let ServeArgs {
        host,
        port,
        model,
        sandbox,
        workspace,
        workspace_root,
        allowed_hosts,
        log_file: _,
        max_connections,
        max_streams,
        idle_sessions,
        durability,
        cluster,
        node,
        token,
    } = args;
    use penguin::hosting::{ModelFactory, ScenarioFactory};
    use penguin::server::{ServeOptions, SessionFactory};
    let agent = crate::mcp::agent(&model.mcp)?;
    let workspace = workspace_dir(workspace)?;
    let factory: Arc<dyn SessionFactory> = match pick_source(&agent, &model)? {
        Source::Scenario(..) => {
            let path = model
                .scenario
                .as_ref()
                .ok_or("--provider scripted needs --scenario FILE")?;
            Arc::new(
                ScenarioFactory::from_file(path)
                    .map_err(|e| e.to_string())?
                    .with_workspace(workspace)
                    .with_policy(agent.policy()),
            )
        }
        Source::Model(spec) => {
            // Resolved now so a strict sandbox the kernel cannot give stops the server before
            // it listens, and what it lacks is said once at startup.
            let confinement = Confinement::resolve(&agent, &sandbox)?;
            eprintln!(
                "penguin: sessions run commands under {}",
                confinement.sandbox.summary()
            );
            let tools_agent = agent.clone();
            let tools_spec = spec.clone();
            // Every configured model a request may name; one that does not resolve (a bad
            // field) is said here and not offered.
            let mut models = Vec::new();
            for (name, spec) in agent.config.named_models() {
                match spec {
                    Ok(spec) => models.push((name, spec)),
                    Err(e) => eprintln!("penguin: model {name} is not offered: {e}"),
                }
            }
            Arc::new(ModelFactory {
                spec,
                models,
                system_prompt: penguin::agent::DEFAULT_SYSTEM_PROMPT.to_owned(),
                default_workspace: workspace,
                engine: agent.engine_for(&tools_spec),
                environment: Arc::new(
                    move |ws: &Path,
                          sandbox: &penguin::tools::Sandbox,
                          extra: &[penguin::tools::mcp::McpServerConfig]| {
                        // A request's own MCP servers come after the configured ones.
                        let mut agent = tools_agent.clone();
                        agent.config.mcp_servers.extend_from_slice(extra);
                        // Each session's grants of "run this once unsandboxed" are its own
                        // (its subagents share them, as their calls are approved there too).
                        let bypass = penguin::tools::SandboxBypass::new();
                        session_tools(&agent, &tools_spec, ws, sandbox, &bypass)
                    },
                ),
                policy: agent.policy(),
                sandbox: sandbox_request(&agent, &sandbox)?,
                data_root: Some(agent.location.root.clone()),
            })
        }
    };
    let mut opts = ServeOptions::new(factory);
    opts.workspace_root = Some(match workspace_root {
        Some(root) => root
            .canonicalize()
            .map_err(|e| format!("--workspace-root {}: {e}", root.display()))?,
        None => std::env::current_dir()
            .map_err(|e| format!("cannot determine the current directory: {e}"))?,
    });
    opts.allowed_hosts = allowed_hosts;
    opts.host = host;
    opts.port = port;
    opts.data_root = agent.location.root.clone();
    opts.project = agent.location.project.clone();
    opts.agent = agent.location.agent.clone();
    opts.durability = match durability {
        Some(d) => d.parse().map_err(|e| format!("--durability: {e}"))?,
        None => agent.durability,
    };
    opts.limits.max_connections = max_connections.or(agent.config.server.max_connections);
    opts.limits.max_streams = max_streams.or(agent.config.server.max_streams);
    if let Some(n) = idle_sessions.or(agent.config.server.idle_sessions) {
        opts.idle_sessions = n;
    }
    if let Some(token) = token {
        opts.token = Some(token);
    }
    let cluster = cluster_config(&agent.config.cluster, cluster, node, opts.token.is_some())?;
    with_runtime(async move {
        #[cfg(feature = "cluster")]
        if let Some(config) = cluster {
            let nats: Vec<String> = config
                .urls
                .iter()
                .map(|u| penguin::cluster::redact(u))
                .collect();
            let nats = nats.join(",");
            let joined = penguin::cluster::Cluster::connect(config)
                .await
                .map_err(|e| format!("--cluster: {e}"))?;
            eprintln!("penguin: node {} of the cluster at {nats}", joined.node());
            opts.cluster = Some(joined);
        }
        #[cfg(not(feature = "cluster"))]
        if cluster.is_some() {
            return Err("this penguin was built without the `cluster` feature".to_owned());
        }
        penguin::server::serve(opts)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| e.to_string())
    })
}

#[cfg(feature = "cluster")]
type ClusterConfig = penguin::cluster::ClusterConfig;
#[cfg(not(feature = "cluster"))]
type ClusterConfig = ();

/// The cluster to join, from `--cluster`/`--node` over `[cluster]`; `None` without NATS URLs.
fn cluster_config(
    entry: &penguin::config::ClusterEntry,
    urls: Vec<String>,
    node: Option<String>,
    has_token: bool,
) -> Result<Option<ClusterConfig>, String> {
    let urls = if urls.is_empty() {
        entry.nats.clone()
    } else {
        urls
    };
    if urls.is_empty() {
        return Ok(None);
    }
    let node = node.or_else(|| entry.node.clone()).ok_or(
        "--cluster needs this node's name: --node NAME (or [cluster] node in config.toml)",
    )?;
    if !has_token {
        return Err(
            "a cluster's nodes must share one token: give it with --token or \
                    PENGUIN_TOKEN on every node"
                .to_owned(),
        );
    }
    #[cfg(feature = "cluster")]
    {
        let mut config = penguin::cluster::ClusterConfig::new(urls, node);
        if let Some(secs) = entry.lease_secs {
            if secs == 0 {
                return Err("[cluster] lease_secs must be at least 1".to_owned());
            }
            config.lease_ttl = std::time::Duration::from_secs(secs);
        }
        if let Some(replicas) = entry.replicas {
            config.replicas = replicas;
        }
        Ok(Some(config))
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = node;
        Ok(Some(()))
    }
}
