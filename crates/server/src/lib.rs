#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod api;
mod approvals;
mod approver;
mod auth;
mod catalog;
#[cfg(feature = "cluster")]
mod cluster;
mod entry;
mod error;
mod files;
mod history;
mod host;
mod index;
mod list;
mod listener;
pub mod marks;
mod placement;
mod requests;
mod routes;
mod routing;
mod sessions;
mod settings;
mod socket;
mod steering;
mod sync;
mod tasks;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod usage;
pub mod web;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use penguin_sse_transport::{ChannelConfig, ChannelHub, SseConfig};
use penguin_trace_store::{Durability, TraceLocation};

pub use api::ApprovalMode;
pub use auth::{
    host_allowed, resolve_token, tokens_match, Token, TokenError, MIN_TOKEN_LEN, TOKEN_FILE,
};
pub use error::ApiError;
pub use host::{
    BoxError, CreateSession, FactoryError, FilesError, GoalRefusal, HostedSession, LoadSession,
    ModelsError, OpenFile, SessionFactory, WorkspaceFiles,
};
pub use listener::{open_file_limit, raise_open_file_limit, serve_with_limits, ConnectionLimits};
pub use sessions::{valid_session_id, USER_CHANNEL};

use sessions::{RuntimeConfig, Sessions};

/// The default request-body cap: 1 MiB.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// The default time a client has to send a request body.
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How many idle sessions stay loaded by default.
pub const DEFAULT_IDLE_SESSIONS: usize = 32;

/// How to run the server.
#[derive(Clone)]
pub struct ServeOptions {
    /// Interface to bind (default `127.0.0.1`).
    pub host: String,
    /// Port to bind (default 7364; 0 picks a free one).
    pub port: u16,
    /// Data root: traces live under `<data_root>/<project>/agents/<agent>/traces`, the token in
    /// `<data_root>/server-token`.
    pub data_root: PathBuf,
    /// Project name of the trace location (default `default`).
    pub project: String,
    /// Agent id of the trace location (default `penguin`: the sessions `penguin run` and
    /// `penguin serve` keep, see [`ServeOptions::new`]). A server whose factory makes sessions
    /// of its own should name its own agent (or data root), or its list shows the CLI's sessions
    /// and its factory's [`SessionFactory::load`] is asked for them.
    pub agent: String,
    /// The token requests must present; `None` reads or generates `<data_root>/server-token`.
    /// [`ServeOptions::new`] fills it from `PENGUIN_TOKEN`; set it to give one of your own
    /// (16 characters at least). [`Server::token_source`] says which it was.
    pub token: Option<String>,
    /// Builds each session's model and tools.
    pub factory: Arc<dyn SessionFactory>,
    /// Replay-buffer and subscriber limits of every channel.
    pub channel: ChannelConfig,
    /// Heartbeat of SSE responses.
    pub sse: SseConfig,
    /// Trace durability of new and resumed sessions.
    pub durability: Durability,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Idle sessions kept loaded (engine, trace writer thread, open trace file); the least
    /// recently used beyond this are unloaded and loaded again from their trace when asked for.
    pub idle_sessions: usize,
    /// Concurrent connections and the time a client has to send its request headers.
    pub limits: ConnectionLimits,
    /// Time a client has to send a request body once its headers arrived.
    pub body_timeout: std::time::Duration,
    /// Host names (besides loopback ones) a request's `Host` header may name, so a
    /// DNS-rebinding page cannot reach the server under a name of its own.
    pub allowed_hosts: Vec<String>,
    /// Workspaces of sessions created over the API must lie under this directory (`None`:
    /// anywhere the factory accepts).
    pub workspace_root: Option<PathBuf>,
    /// The approval mode of a session whose creator names none (`approvalMode` absent from
    /// `POST /api/sessions`, and sessions loaded from a trace that were never given one).
    /// Default: [`read-only`](api::ApprovalMode::ReadOnly), which asks before edits and
    /// commands only.
    pub approval_mode: api::ApprovalMode,
    /// Serve as one node of this cluster (feature `cluster`): sessions are listed, owned,
    /// streamed and taken over cluster-wide (see `docs/cluster.md`). `None`: this process
    /// alone, as always.
    #[cfg(feature = "cluster")]
    pub cluster: Option<penguin_cluster::Cluster>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("data_root", &self.data_root)
            .field("project", &self.project)
            .field("agent", &self.agent)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("channel", &self.channel)
            .field("durability", &self.durability)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Defaults: `127.0.0.1:7364`, the data root of [`penguin_trace_store::data_root`], project
    /// `default` and agent `penguin` (where `penguin run` keeps its sessions), and the token
    /// from `PENGUIN_TOKEN` when set and non-empty.
    ///
    /// So by default the server hosts the CLI's own sessions: it lists them, and the first
    /// request for one asks `factory` to [load](SessionFactory::load) it from its trace. That
    /// is what the `penguin` crate's factories want (`penguin serve` is one); a factory of
    /// your own, whose sessions are not the CLI's, should set [`agent`](Self::agent) (or
    /// [`data_root`](Self::data_root)) to a place of its own:
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # fn f(factory: Arc<dyn penguin_server::SessionFactory>) {
    /// let mut opts = penguin_server::ServeOptions::new(factory);
    /// opts.agent = "my-service".into(); // traces under <data_root>/default/agents/my-service
    /// opts.port = 0; // any free port: `Server::local_addr` says which
    /// # }
    /// ```
    pub fn new(factory: Arc<dyn SessionFactory>) -> ServeOptions {
        ServeOptions {
            host: "127.0.0.1".into(),
            port: 7364,
            data_root: penguin_trace_store::data_root(),
            project: "default".into(),
            agent: "penguin".into(),
            token: std::env::var("PENGUIN_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
            factory,
            channel: ChannelConfig::default(),
            sse: SseConfig::default(),
            durability: Durability::AtCommit,
            max_body_bytes: DEFAULT_MAX_BODY,
            idle_sessions: DEFAULT_IDLE_SESSIONS,
            limits: ConnectionLimits::default(),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            allowed_hosts: Vec::new(),
            workspace_root: None,
            approval_mode: api::ApprovalMode::default(),
            #[cfg(feature = "cluster")]
            cluster: None,
        }
    }
}

/// The server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The token could not be read or generated.
    #[error("server token: {0}")]
    Token(#[from] TokenError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The accept loop failed.
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// Shared state of the routes. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    sessions: Arc<Sessions>,
    // The stream budget (ConnectionLimits::streams): each open SSE response holds a permit.
    streams: Arc<tokio::sync::Semaphore>,
    token: Arc<str>,
    sse: SseConfig,
    body: error::BodyLimits,
    allowed_hosts: Arc<[String]>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("sessions", &self.sessions.loaded().len())
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State for [`router`]: `token` is the one requests must present (see [`resolve_token`]);
    /// `opts.token`, `host` and `port` are not used here. With `ServeOptions::cluster` set
    /// (feature `cluster`) it must be called inside a Tokio runtime (the node starts its
    /// tasks).
    pub fn new(opts: &ServeOptions, token: impl Into<String>) -> AppState {
        let token: String = token.into();
        let location = TraceLocation::new(&opts.data_root, &opts.project, &opts.agent);
        #[cfg(feature = "cluster")]
        let node = opts.cluster.clone().map(|c| {
            cluster::Node::start(
                c,
                opts.channel.clone(),
                location.clone(),
                format!("{}:{}", opts.host, opts.port),
            )
        });
        #[cfg(feature = "cluster")]
        let cluster = node.clone().map(|n| -> Arc<dyn placement::Placement> { n });
        #[cfg(not(feature = "cluster"))]
        let cluster = None;
        let sessions = Arc::new(Sessions::new(RuntimeConfig {
            factory: opts.factory.clone(),
            location,
            durability: opts.durability,
            hub: ChannelHub::new(opts.channel.clone()),
            idle_cache: opts.idle_sessions,
            workspace_root: opts.workspace_root.clone(),
            cluster,
            approval_mode: opts.approval_mode,
        }));
        #[cfg(feature = "cluster")]
        if let Some(node) = &node {
            node.bind(&sessions);
        }
        AppState {
            sessions,
            streams: Arc::new(tokio::sync::Semaphore::new(opts.limits.streams())),
            token: token.into(),
            sse: opts.sse.clone(),
            body: error::BodyLimits {
                max_bytes: opts.max_body_bytes,
                timeout: opts.body_timeout,
            },
            allowed_hosts: opts.allowed_hosts.clone().into(),
        }
    }

    /// Sessions loaded in memory now (running, or idle within the cache of idle sessions).
    pub fn loaded_sessions(&self) -> usize {
        self.sessions.loaded().len()
    }

    /// Interrupts every running task (pending approvals are denied) and ends every stream, so
    /// a graceful shutdown does not wait on open SSE connections.
    pub fn shutdown(&self) {
        self.sessions.shutdown();
    }

    /// Reclaims the channels of idle sessions with no subscriber that have been quiet for
    /// `idle_after` (the reference sweeps every 60 s with 30 minutes); a client reconnecting to
    /// a reclaimed channel gets `resync_required`. Returns the reclaimed channel keys.
    pub fn sweep_channels(&self, idle_after: std::time::Duration) -> Vec<String> {
        self.sessions.sweep_channels(idle_after)
    }
}

/// How often [`serve`] sweeps idle channels.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a channel must be quiet before [`serve`] reclaims it.
pub const CHANNEL_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Builds a router from `method "path" => handler` lines and lists the routes as
/// `(method, path)`: one list, so the `api` module's route table can be checked against what is
/// served.
macro_rules! route_table {
    ($($method:ident $path:literal => $handler:expr),* $(,)?) => {
        (
            axum::Router::new()$(.route($path, axum::routing::$method($handler)))*,
            &[$((stringify!($method), $path)),*],
        )
    };
}
pub(crate) use route_table;

/// The routes behind the token check, and the list of them.
fn api_routes() -> (Router<AppState>, &'static [(&'static str, &'static str)]) {
    route_table! {
        post "/api/sessions" => routes::create_session,
        get "/api/sessions" => routes::list_sessions,
        get "/api/sessions/{id}" => routes::get_session,
        patch "/api/sessions/{id}" => routes::patch_session,
        delete "/api/sessions/{id}" => routes::delete_session,
        get "/api/sessions/{id}/messages" => routes::messages,
        get "/api/sessions/{id}/stream" => routes::stream,
        get "/api/sessions/{id}/socket" => socket::session,
        get "/api/sessions/{id}/state" => routes::state,
        get "/api/sessions/{id}/goal" => routes::goal,
        post "/api/sessions/{id}/fork" => routes::fork,
        post "/api/sessions/{id}/rewind" => routes::rewind,
        get "/api/sessions/{id}/trace" => routes::export_trace,
        post "/api/sessions/import" => routes::import_trace,
        get "/api/sessions/{id}/skills" => catalog::skills,
        post "/api/sessions/{id}/tasks" => routes::create_task,
        post "/api/sessions/{id}/steer" => routes::steer,
        delete "/api/sessions/{id}/steer/{item}" => routes::unsteer,
        delete "/api/sessions/{id}/follow-ups/{item}" => routes::remove_follow_up,
        post "/api/sessions/{id}/approvals/{call}" => routes::approve,
        post "/api/sessions/{id}/abort" => routes::abort,
        post "/api/sessions/{id}/retry-now" => routes::retry_now,
        post "/api/sessions/{id}/compact" => routes::compact,
        get "/api/sessions/{id}/processes" => routes::processes,
        post "/api/sessions/{id}/processes/{process}/kill" => routes::kill_process,
        delete "/api/sessions/{id}/processes/{process}" => routes::kill_process,
        get "/api/sessions/{id}/files" => files::list,
        get "/api/sessions/{id}/files/content" => files::content,
        get "/api/sessions/{id}/files/changes" => files::changes,
        get "/api/models" => catalog::models,
        post "/api/models" => catalog::add_model,
        post "/api/models/test" => catalog::test_model,
        post "/api/models/discover" => catalog::discover_models,
        put "/api/models/{name}" => catalog::change_model,
        delete "/api/models/{name}" => catalog::remove_model,
        get "/api/memory" => catalog::memory,
        get "/api/usage" => catalog::usage,
        get "/api/price" => catalog::price,
        post "/api/explain" => catalog::explain,
        get "/api/events" => routes::events,
        get "/api/events/socket" => socket::events,
    }
}

/// Every API route, behind the token check, and the web app's page and assets, outside it
/// (the table in [`api`] lists them all). Unknown routes answer 404 JSON (after the token
/// check, so they reveal nothing).
pub fn router(state: AppState) -> Router {
    let api = api_routes()
        .0
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        // In a cluster, a session another node owns is answered there (after the token check).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            routing::route,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            routes::auth,
        ));
    // Merged after the layer, so the token check does not wrap the page's routes.
    let app = api.merge(web::routes().0).with_state(state.clone());
    if let Some(c) = &state.sessions.cfg.cluster {
        c.serve_forwarded(app.clone());
    }
    app
}

/// Where a server's token came from (see [`Server::token_source`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// The `PENGUIN_TOKEN` environment variable (which [`ServeOptions::new`] reads).
    Environment,
    /// [`ServeOptions::token`], set by the program.
    Options,
    /// The token file `<data_root>/server-token`, read as it was.
    File(PathBuf),
    /// The token file, written with a new token by this start.
    Generated(PathBuf),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Environment => f.write_str("from PENGUIN_TOKEN"),
            TokenSource::Options => f.write_str("set by the program (ServeOptions::token)"),
            TokenSource::File(path) => write!(f, "read from {}", path.display()),
            TokenSource::Generated(path) => write!(f, "generated, saved to {}", path.display()),
        }
    }
}

// Connections the kernel queues while the accept loop is busy (capped by net.core.somaxconn):
// a burst of clients connecting at once waits here instead of being refused.
const BACKLOG: u32 = 4096;

async fn listen(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = match a {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    }))
}

/// A server bound to its address, not yet serving: [`Server::bind`], then
/// [`Server::serve`] until a future of yours completes. [`serve`] is this with Ctrl-C.
///
/// ```no_run
/// # use std::sync::Arc;
/// # async fn run(factory: Arc<dyn penguin_server::SessionFactory>) -> Result<(), penguin_server::ServeError> {
/// let mut opts = penguin_server::ServeOptions::new(factory);
/// opts.agent = "my-service".into();
/// opts.port = 0;
/// let server = penguin_server::Server::bind(opts).await?;
/// println!("listening on {}", server.local_addr());
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # drop(stop);
/// // ... hand `stop` to whoever decides; `stop.send(())` (or dropping it) ends the server.
/// server.serve(async { let _ = stopped.await; }).await?;
/// # Ok(())
/// # }
/// ```
pub struct Server {
    listener: tokio::net::TcpListener,
    local_addr: std::net::SocketAddr,
    state: AppState,
    token: Token,
    source: TokenSource,
    limits: ConnectionLimits,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("token", &self.source)
            .finish_non_exhaustive()
    }
}

/// How long [`Server::serve`] waits for open connections once its shutdown future completed.
pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

impl Server {
    /// Resolves the token (see [`resolve_token`]) and binds `opts.host:opts.port`; port 0 takes
    /// a free one, which [`Server::local_addr`] reports. Prints nothing.
    pub async fn bind(opts: ServeOptions) -> Result<Server, ServeError> {
        let token = resolve_token(opts.token.as_deref(), &opts.data_root)?;
        let source = match (&token.path, token.generated) {
            (Some(path), true) => TokenSource::Generated(path.clone()),
            (Some(path), false) => TokenSource::File(path.clone()),
            // An explicit token: the variable's when it holds the same one.
            (None, _) => match std::env::var("PENGUIN_TOKEN") {
                Ok(t) if t.trim() == token.value => TokenSource::Environment,
                _ => TokenSource::Options,
            },
        };
        if let Err(e) = raise_open_file_limit() {
            tracing::warn!("[server] cannot raise the open-file limit: {e}");
        }
        let addr = format!("{}:{}", opts.host, opts.port);
        let listener = listen(&addr).await.map_err(|source| ServeError::Bind {
            addr: addr.clone(),
            source,
        })?;
        let local_addr = listener.local_addr()?;
        let state = AppState::new(&opts, token.value.clone());
        Ok(Server {
            listener,
            local_addr,
            state,
            token,
            source,
            limits: opts.limits,
        })
    }

    /// The address bound: the port the OS chose for port 0.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }

    /// `http://HOST:PORT`, the base of every route.
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// The token requests must present (`Authorization: Bearer …`).
    pub fn token(&self) -> &str {
        &self.token.value
    }

    /// Where the token came from.
    pub fn token_source(&self) -> &TokenSource {
        &self.source
    }

    /// The web app's URL with the token in its fragment ([`web::sign_in_url`]).
    pub fn sign_in_url(&self) -> String {
        web::sign_in_url(self.local_addr, &self.token.value)
    }

    /// The routes' shared state (sessions, sweeps), e.g. to shut sessions down yourself.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` completes: then every running task is interrupted (pending
    /// approvals denied) and every stream ended ([`AppState::shutdown`]), no connection is
    /// accepted any more, and open ones get [`DRAIN`] to finish. Idle channels are swept every
    /// [`SWEEP_EVERY`] meanwhile.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let Server {
            listener,
            state,
            limits,
            ..
        } = self;
        let app = router(state.clone());
        let sweeper = {
            let state = state.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(SWEEP_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    state.sweep_channels(CHANNEL_IDLE_AFTER);
                }
            })
        };
        let stop = async {
            shutdown.await;
            state.shutdown();
        };
        serve_with_limits(listener, app, limits, stop, DRAIN).await;
        sweeper.abort();
        if let Some(c) = &state.sessions.cfg.cluster {
            // The interrupted runs' last records are stored before their leases go, so
            // another node takes the sessions over at once instead of a lease later.
            c.leave(&state.sessions.loaded()).await;
        }
        state.sessions.end_all().await;
        Ok(())
    }
}

/// Binds `host:port`, prints the address, the web app's URL with the token in its fragment
/// (see [`web::sign_in_url`]) and where the token came from, and serves until Ctrl-C.
///
/// To stop on a signal of your own, or to learn the port bound for port 0 without reading
/// stdout, use [`Server::bind`] and [`Server::serve`]; for your own accept loop, [`router`]
/// with [`AppState::new`] (and [`serve_with_limits`]).
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    let server = Server::bind(opts).await?;
    let local = server.local_addr();
    println!("penguin server listening on http://{local}");
    println!("open the web app: {}", server.sign_in_url());
    if !local.ip().is_loopback() {
        eprintln!(
            "warning: listening on {}, which other machines can reach; anyone with the token can run commands in this session's workspaces",
            local.ip()
        );
    }
    match server.token_source() {
        TokenSource::Generated(path) => println!(
            "generated an access token (saved to {}): {}",
            path.display(),
            server.token()
        ),
        source => println!("access token: {source}"),
    }
    server
        .serve(async {
            // Without a Ctrl-C handler the server simply runs until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The routes of the `api` module's table, `(METHOD, path)`: its rows' first cells.
    fn documented() -> BTreeSet<(String, String)> {
        include_str!("api.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .filter_map(|row| row.split_once('`'))
            .map(|(route, _)| {
                let (method, path) = route.split_once(' ').expect("`METHOD /path`");
                (method.to_owned(), path.to_owned())
            })
            .collect()
    }

    #[test]
    fn the_api_docs_route_table_is_every_route_the_router_serves() {
        let served: BTreeSet<(String, String)> = super::api_routes()
            .1
            .iter()
            .chain(super::web::routes::<()>().1)
            .map(|(method, path)| (method.to_uppercase(), (*path).to_owned()))
            .collect();
        let documented = documented();
        assert!(
            documented.len() > 20,
            "the table was not found: {documented:?}"
        );
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty() && unserved.is_empty(),
            "served but not in the api module's table: {undocumented:?}; \
             in the table but not served: {unserved:?}"
        );
    }
}
