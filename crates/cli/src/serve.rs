//! `penguin serve`: the HTTP server over configured models or a scenario.

use std::process::ExitCode;
use std::sync::Arc;

use crate::args::{NatsArgs, ServeArgs};
use crate::setup::{launcher, workspace_dir};
use crate::with_runtime;
use penguin::launch::Source;

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
        nats,
        token,
    } = args;
    use penguin::hosting::ScenarioFactory;
    use penguin::server::{ServeOptions, SessionFactory};
    let launcher = launcher(&model, &sandbox)?;
    let agent = launcher.agent().clone();
    let workspace = workspace_dir(workspace)?;
    let factory: Arc<dyn SessionFactory> = match launcher.source().map_err(|e| e.to_string())? {
        Source::Scenario { .. } => {
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
            let confinement = launcher.confinement().map_err(|e| e.to_string())?;
            eprintln!(
                "penguin: sessions run commands under {}",
                confinement.sandbox.summary()
            );
            Arc::new(
                launcher
                    .model_factory(spec, workspace)
                    .map_err(|e| e.to_string())?,
            )
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
    // A wrong value was refused when the agent loaded.
    opts.approval_mode = agent
        .config
        .session
        .approval()
        .ok()
        .flatten()
        .unwrap_or_default();
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
    // Unsaid, the replicas follow NATS: one on a single server, with a warning.
    let replicas_given = nats.replicas.is_some() || agent.config.cluster.replicas.is_some();
    let cluster = cluster_config(
        &agent.config.cluster,
        cluster,
        node,
        *nats,
        opts.token.is_some(),
    )?;
    with_runtime(async move {
        #[cfg(feature = "cluster")]
        if let Some(config) = cluster {
            opts.cluster = Some(join(config, replicas_given).await?);
        }
        #[cfg(not(feature = "cluster"))]
        if cluster.is_some() {
            let _ = replicas_given;
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

/// Joins the cluster, refusing a NATS that lets anyone in unless `--insecure-nats` said so.
/// Replicas nobody asked for become one, with a warning, on a NATS that is a single server.
#[cfg(feature = "cluster")]
async fn join(
    mut config: ClusterConfig,
    replicas_given: bool,
) -> Result<penguin::cluster::Cluster, String> {
    use penguin::cluster::ClusterError;
    let nats: Vec<String> = config
        .urls
        .iter()
        .map(|u| penguin::cluster::redact(u))
        .collect();
    let nats = nats.join(",");
    let insecure = config.allow_unauthenticated;
    let joined = match penguin::cluster::Cluster::connect(config.clone()).await {
        Err(ClusterError::Replicas { .. }) if !replicas_given => {
            eprintln!(
                "penguin: WARNING: NATS at {nats} is a single server, so the cluster's state \
                 is kept once (one replica): a NATS cluster of three keeps it three times and \
                 outlives one of them. Pass --replicas 1 (or [cluster] replicas = 1) to say so"
            );
            config.replicas = 1;
            penguin::cluster::Cluster::connect(config).await
        }
        joined => joined,
    };
    let joined = joined.map_err(|e| match e {
        ClusterError::Unauthenticated { url } => format!(
            "--cluster: NATS at {url} lets anyone connect without credentials, so whoever \
                 can reach it reads every session's events and traces and can forge the \
                 cluster's state. Run nats-server with authorization and give this node its \
                 credentials (nats://user:password@host in --cluster or [cluster] nats; \
                 --nats-user with PENGUIN_NATS_PASSWORD; PENGUIN_NATS_TOKEN; --nats-nkey FILE; \
                 --nats-creds FILE), or pass --insecure-nats for a NATS nothing but the nodes \
                 can reach"
        ),
        e => format!("--cluster: {e}"),
    })?;
    if insecure && !joined.nats_authenticated() {
        eprintln!(
            "penguin: WARNING: NATS at {nats} asks no credentials (--insecure-nats): whoever \
             can reach it reads every session's events and traces"
        );
    }
    eprintln!("penguin: node {} of the cluster at {nats}", joined.node());
    Ok(joined)
}

/// What `[cluster]` cannot say yet comes from the environment: the secret's file, and NATS
/// passwords and tokens (kept out of the process list).
fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The cluster to join, from `--cluster`/`--node` over `[cluster]`, with the node's
/// credentials; `None` without NATS URLs.
fn cluster_config(
    entry: &penguin::config::ClusterEntry,
    urls: Vec<String>,
    node: Option<String>,
    nats: NatsArgs,
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
    // `[cluster]` says what the flags leave unsaid.
    let nats = NatsArgs {
        cluster_secret_file: nats
            .cluster_secret_file
            .or_else(|| entry.secret_file.clone()),
        insecure_nats: nats.insecure_nats || entry.insecure_nats,
        nats_user: nats.nats_user.or_else(|| entry.nats_user.clone()),
        nats_nkey: nats.nats_nkey.or_else(|| entry.nats_nkey.clone()),
        nats_creds: nats.nats_creds.or_else(|| entry.nats_creds.clone()),
        nats_tls: nats.nats_tls || entry.nats_tls,
        nats_ca: nats.nats_ca.or_else(|| entry.nats_ca.clone()),
        ..nats
    };
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
    let secret_file = nats
        .cluster_secret_file
        .clone()
        .or_else(|| env_value("PENGUIN_CLUSTER_SECRET_FILE").map(Into::into))
        .ok_or(
            "--cluster needs the cluster secret, with which the nodes authenticate each other: \
             give every node the same file of 32 bytes or more (`openssl rand -hex 32 > \
             cluster-secret && chmod 600 cluster-secret`) with --cluster-secret-file FILE or \
             PENGUIN_CLUSTER_SECRET_FILE",
        )?;
    #[cfg(feature = "cluster")]
    {
        use penguin::cluster::{ClusterSecret, NatsAuth};
        let secret = ClusterSecret::from_file(&secret_file).map_err(|e| e.to_string())?;
        let mut config = penguin::cluster::ClusterConfig::new(urls, node, secret);
        let password = env_value("PENGUIN_NATS_PASSWORD");
        let token = env_value("PENGUIN_NATS_TOKEN");
        let mut given: Vec<(&str, NatsAuth)> = Vec::new();
        if let Some(user) = nats.nats_user {
            let password = password.ok_or("--nats-user needs PENGUIN_NATS_PASSWORD")?;
            given.push(("--nats-user", NatsAuth::UserPassword { user, password }));
        } else if password.is_some() {
            return Err("PENGUIN_NATS_PASSWORD is set without --nats-user".to_owned());
        }
        if let Some(token) = token {
            given.push(("PENGUIN_NATS_TOKEN", NatsAuth::Token(token)));
        }
        if let Some(file) = nats.nats_nkey {
            given.push(("--nats-nkey", NatsAuth::NkeyFile(file)));
        }
        if let Some(file) = nats.nats_creds {
            given.push(("--nats-creds", NatsAuth::CredsFile(file)));
        }
        if given.len() > 1 {
            let names: Vec<&str> = given.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "NATS credentials are given {} ways ({}): give one",
                names.len(),
                names.join(", ")
            ));
        }
        if let Some((_, auth)) = given.pop() {
            config.auth = auth;
        }
        config.tls.required = nats.nats_tls || nats.nats_ca.is_some();
        config.tls.ca_file = nats.nats_ca;
        config.tls.client_cert = nats.nats_cert.zip(nats.nats_key);
        config.allow_unauthenticated = nats.insecure_nats;
        for url in &config.urls {
            if let Some(host) = unencrypted_remote(url, config.tls.required) {
                eprintln!(
                    "penguin: WARNING: NATS at {host} is reached without TLS: its credentials \
                     and the sessions' events cross the network readable (tls:// or --nats-tls)"
                );
            }
        }
        if let Some(secs) = entry.lease_secs {
            if secs == 0 {
                return Err("[cluster] lease_secs must be at least 1".to_owned());
            }
            config.lease_ttl = std::time::Duration::from_secs(secs);
        }
        if let Some(replicas) = nats.replicas.map(usize::from).or(entry.replicas) {
            config.replicas = replicas;
        }
        Ok(Some(config))
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (node, nats, secret_file);
        Ok(Some(()))
    }
}

/// The host of a NATS URL reached without TLS that is not this machine's loopback.
#[cfg(feature = "cluster")]
fn unencrypted_remote(url: &str, tls_required: bool) -> Option<String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("nats", url));
    if tls_required || scheme.eq_ignore_ascii_case("tls") {
        return None;
    }
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| host.to_owned())
}

#[cfg(all(test, feature = "cluster"))]
#[test]
fn only_a_remote_nats_without_tls_is_warned_about() {
    assert_eq!(
        unencrypted_remote("nats://u:p@nats.example:4222", false).as_deref(),
        Some("nats.example")
    );
    assert_eq!(
        unencrypted_remote("10.0.0.5:4222", false).as_deref(),
        Some("10.0.0.5")
    );
    assert_eq!(unencrypted_remote("nats://nats.example:4222", true), None);
    assert_eq!(unencrypted_remote("tls://nats.example:4222", false), None);
    assert_eq!(unencrypted_remote("nats://127.0.0.1:4222", false), None);
    assert_eq!(unencrypted_remote("nats://[::1]:4222", false), None);
    assert_eq!(unencrypted_remote("nats://localhost", false), None);
}
