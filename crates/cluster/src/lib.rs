#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod error;
mod events;
mod index;
mod lease;
mod node_lease;
mod signing;
mod traces;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, kv, stream};

pub use error::ClusterError;
pub use events::{ClusterEvent, EventFeed, EventLog, EventPublisher, FeedItem, Replay, RETRY_FOR};
pub use index::{IndexChange, NodeInfo, Registry, SessionIndex, SessionRecord};
pub use lease::{Holder, Lease, Leases};
pub use signing::{
    ClusterSecret, Refusal, Signer, NONCE_HEADER, SIGNATURE_HEADER, SIGNATURE_WINDOW, TIME_HEADER,
};
pub use traces::{RecordsSince, ReplicatedTrace, TraceLog, TraceRecord};

/// The KV bucket of session leases.
pub const LEASE_BUCKET: &str = "penguin_leases";
/// The KV bucket of live nodes.
pub const NODE_BUCKET: &str = "penguin_nodes";
/// The KV bucket of the cluster-wide session index.
pub const SESSION_BUCKET: &str = "penguin_sessions";
/// The stream of every session's SSE events, one subject per session
/// (`penguin.events.<session>`).
pub const EVENT_STREAM: &str = "PENGUIN_EVENTS";
/// The stream of every session's trace records, one subject per session
/// (`penguin.traces.<session>`).
pub const TRACE_STREAM: &str = "PENGUIN_TRACES";
/// The header carrying a message's per-session sequence (the SSE event id, the trace record's
/// number).
pub const SEQ_HEADER: &str = "Penguin-Seq";
/// The header naming the node that published a message.
pub const NODE_HEADER: &str = "Penguin-Node";

/// How a node proves itself to NATS, besides credentials in a URL (`nats://user:password@host`,
/// `nats://token@host`). Its `Debug` names the kind and the files, never a password or token.
#[derive(Clone, Default)]
pub enum NatsAuth {
    /// Only what the URLs carry.
    #[default]
    None,
    /// A user and password.
    UserPassword {
        /// The user.
        user: String,
        /// Its password.
        password: String,
    },
    /// A token.
    Token(String),
    /// A file holding an nkey user seed (`SU…`): the node signs the server's nonce with it.
    NkeyFile(PathBuf),
    /// A `.creds` file (a user JWT and its nkey seed), as `nsc` writes them.
    CredsFile(PathBuf),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsAuth::None => f.write_str("None"),
            NatsAuth::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .finish_non_exhaustive(),
            NatsAuth::Token(_) => f.write_str("Token(<redacted>)"),
            NatsAuth::NkeyFile(p) => f.debug_tuple("NkeyFile").field(p).finish(),
            NatsAuth::CredsFile(p) => f.debug_tuple("CredsFile").field(p).finish(),
        }
    }
}

/// TLS to NATS. A `tls://` URL requires it too; without a CA file the system's roots verify
/// the server.
#[derive(Clone, Debug, Default)]
pub struct NatsTls {
    /// Refuse a connection without TLS.
    pub required: bool,
    /// PEM file of the CAs the server's certificate must chain to (instead of the system's).
    pub ca_file: Option<PathBuf>,
    /// PEM files of this node's client certificate and its key, for a NATS that verifies
    /// clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// How a node joins the cluster. Its `Debug` shows the URLs without their credentials, and
/// neither the secret nor a password or token.
#[derive(Clone)]
pub struct ClusterConfig {
    /// NATS URLs (`nats://host:port`, `tls://host:port`); the client tries them in turn and
    /// reconnects to any.
    pub urls: Vec<String>,
    /// This node's name, unique in the cluster (`[a-zA-Z0-9_-]`).
    pub node: String,
    /// The secret every node of the cluster holds: what the nodes sign the messages they send
    /// each other with (see [`Signer`]).
    pub secret: ClusterSecret,
    /// NATS credentials besides those the URLs carry (give them in one place only).
    pub auth: NatsAuth,
    /// TLS to NATS.
    pub tls: NatsTls,
    /// Join a NATS that lets anyone connect without credentials. Off: such a NATS is
    /// [`ClusterError::Unauthenticated`], because anyone who reaches it reads every session's
    /// events and traces and can forge the cluster's state.
    pub allow_unauthenticated: bool,
    /// Replicas of every bucket and stream (3 in a 3-node NATS cluster, 1 on a single server).
    pub replicas: usize,
    /// How long a lease (and a node's registration) lives without a renewal.
    pub lease_ttl: Duration,
    /// Events kept per session for gap replay (as the in-process replay buffer's 10,000).
    pub events_per_session: i64,
    /// How long a JetStream request may take before the cluster counts as unavailable.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("ClusterConfig")
            .field("urls", &urls)
            .field("node", &self.node)
            .field("secret", &self.secret)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("allow_unauthenticated", &self.allow_unauthenticated)
            .field("replicas", &self.replicas)
            .field("lease_ttl", &self.lease_ttl)
            .field("events_per_session", &self.events_per_session)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl ClusterConfig {
    /// Defaults: 3 replicas, a 10 s lease (longer than a JetStream leader election after a
    /// nats-server died, so losing one does not cost the sessions' leases), 10,000 events per
    /// session, 5 s requests; NATS credentials only from the URLs, no TLS unless a URL says
    /// `tls://`, and an unauthenticated NATS refused.
    pub fn new(urls: Vec<String>, node: impl Into<String>, secret: ClusterSecret) -> ClusterConfig {
        ClusterConfig {
            urls,
            node: node.into(),
            secret,
            auth: NatsAuth::None,
            tls: NatsTls::default(),
            allow_unauthenticated: false,
            replicas: 3,
            lease_ttl: Duration::from_secs(10),
            events_per_session: 10_000,
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// A node's connection to the cluster: its buckets and streams, created when missing.
#[derive(Clone, Debug)]
pub struct Cluster {
    config: ClusterConfig,
    client: async_nats::Client,
    js: jetstream::Context,
    signer: Signer,
    leases: kv::Store,
    /// This node's own lease, whose heartbeat keeps every session it holds.
    node_lease: std::sync::Arc<node_lease::NodeLease>,
    nodes: kv::Store,
    sessions: kv::Store,
    events: stream::Stream,
    traces: stream::Stream,
}

impl Cluster {
    /// Connects to NATS and makes sure the buckets and streams exist.
    ///
    /// A NATS that cannot be reached (or refuses the credentials) is
    /// [`ClusterError::Unreachable`], naming the URLs; one that lets anyone in is
    /// [`ClusterError::Unauthenticated`] unless [`ClusterConfig::allow_unauthenticated`]; a
    /// JetStream that does not answer (not enabled, no quorum) is
    /// [`ClusterError::Unavailable`].
    pub async fn connect(config: ClusterConfig) -> Result<Cluster, ClusterError> {
        if !valid_name(&config.node) {
            return Err(ClusterError::InvalidName {
                what: "node",
                name: config.node.clone(),
            });
        }
        // Named in errors without the credentials a URL may carry.
        let url = redacted_urls(&config);
        let addrs = config
            .urls
            .iter()
            .map(|u| u.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClusterError::Unreachable {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let options = connect_options(&config, &addrs).await?;
        let client = options
            .name(format!("penguin-{}", config.node))
            .connection_timeout(config.request_timeout)
            .request_timeout(Some(config.request_timeout))
            .max_reconnects(None)
            .connect(addrs.as_slice())
            .await
            .map_err(|e| ClusterError::Unreachable {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        if !client.server_info().auth_required && !config.allow_unauthenticated {
            return Err(ClusterError::Unauthenticated { url });
        }
        // A lone nats-server refuses streams of more than one replica, and JetStream's refusal
        // looks like any other, which `setup` would try again for `RETRY_FOR`: say so at once.
        // A server routed to others names its cluster in its greeting.
        if config.replicas > 1 && client.server_info().cluster.is_none() {
            return Err(ClusterError::Replicas {
                url,
                replicas: config.replicas,
            });
        }
        let mut js = jetstream::new(client.clone());
        js.set_timeout(config.request_timeout);
        // Right after a nats-server died, JetStream answers nothing until the streams have
        // new leaders: setting up is tried again for a while, as every request of this crate is.
        let start = std::time::Instant::now();
        let (leases, nodes, sessions, events, traces) = loop {
            match setup(&js, &config).await {
                Err(ClusterError::Unavailable { reason }) if start.elapsed() < RETRY_FOR => {
                    tracing::debug!("joining the cluster, again: {reason}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                done => break done?,
            }
        };
        let node_lease = std::sync::Arc::new(node_lease::NodeLease::new(
            leases.clone(),
            config.node.clone(),
            config.lease_ttl,
        ));
        Ok(Cluster {
            node_lease,
            signer: Signer::new(config.secret.clone(), config.node.clone()),
            config,
            client,
            js,
            leases,
            nodes,
            sessions,
            events,
            traces,
        })
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// The configuration it joined with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The NATS client (for request/reply between nodes).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// What this node signs the messages it sends other nodes with, and verifies theirs (one
    /// per connection: its clones share the nonces seen).
    pub fn signer(&self) -> &Signer {
        &self.signer
    }

    /// Whether the NATS server this node is connected to asked it for credentials.
    pub fn nats_authenticated(&self) -> bool {
        self.client.server_info().auth_required
    }

    /// `Ok` while the connection to NATS is up, [`ClusterError::Unavailable`] otherwise: what a
    /// server checks before it accepts work (and answers 503 on).
    pub fn ensure_connected(&self) -> Result<(), ClusterError> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(ClusterError::Unavailable {
                reason: format!("the connection to NATS is {state}"),
            }),
        }
    }

    /// Session leases, taken as this node.
    pub fn leases(&self) -> Leases {
        Leases::new(
            self.leases.clone(),
            self.config.node.clone(),
            self.config.lease_ttl,
            self.node_lease.clone(),
        )
    }

    /// The node registry.
    pub fn registry(&self) -> Registry {
        Registry::new(self.nodes.clone(), self.config.lease_ttl)
    }

    /// The cluster-wide session index.
    pub fn index(&self) -> SessionIndex {
        SessionIndex::new(self.sessions.clone())
    }

    /// Every session's replicated SSE events.
    pub fn events(&self) -> EventLog {
        EventLog::new(
            self.js.clone(),
            self.events.clone(),
            self.config.node.clone(),
        )
    }

    /// Every session's replicated trace records.
    pub fn traces(&self) -> TraceLog {
        TraceLog::new(
            self.js.clone(),
            self.traces.clone(),
            self.config.node.clone(),
        )
    }
}

/// The client's options: credentials from the URLs or `config.auth` (one of them), TLS.
async fn connect_options(
    config: &ClusterConfig,
    addrs: &[async_nats::ServerAddr],
) -> Result<async_nats::ConnectOptions, ClusterError> {
    let bad = |reason: String| ClusterError::Credentials { reason };
    // Credentials in a URL (`nats://user:password@host`, `nats://token@host`): the client
    // does not take them from the URL by itself.
    let in_url = addrs
        .iter()
        .find_map(|a| Some((a.username()?, a.password())));
    let mut options =
        match (in_url, &config.auth) {
            (Some(_), auth) if !matches!(auth, NatsAuth::None) => return Err(bad(
                "a NATS URL carries credentials and other credentials are given too: give them \
                 in one place"
                    .into(),
            )),
            (Some((user, Some(password))), _) => {
                async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
            }
            (Some((token, None)), _) => async_nats::ConnectOptions::with_token(token.into()),
            (None, NatsAuth::None) => async_nats::ConnectOptions::new(),
            (None, NatsAuth::UserPassword { user, password }) => {
                async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            (None, NatsAuth::Token(token)) => async_nats::ConnectOptions::with_token(token.clone()),
            (None, NatsAuth::NkeyFile(path)) => {
                let seed = std::fs::read_to_string(path)
                    .map_err(|e| bad(format!("the nkey seed file {}: {e}", path.display())))?;
                let seed = seed.trim();
                if !seed.starts_with("SU") {
                    return Err(bad(format!(
                        "the nkey seed file {} holds no user seed (one starting with SU)",
                        path.display()
                    )));
                }
                async_nats::ConnectOptions::with_nkey(seed.to_owned())
            }
            (None, NatsAuth::CredsFile(path)) => {
                async_nats::ConnectOptions::with_credentials_file(path)
                    .await
                    .map_err(|e| bad(format!("the credentials file {}: {e}", path.display())))?
            }
        };
    let tls = &config.tls;
    if tls.required {
        options = options.require_tls(true);
    }
    if let Some(ca) = &tls.ca_file {
        if !ca.is_file() {
            return Err(bad(format!(
                "the TLS CA file {} is not a file",
                ca.display()
            )));
        }
        options = options.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &tls.client_cert {
        for f in [cert, key] {
            if !f.is_file() {
                return Err(bad(format!(
                    "the TLS client file {} is not a file",
                    f.display()
                )));
            }
        }
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(options)
}

/// A stream JetStream did not create: [`ClusterError::Replicas`] when it refused the replicas
/// (a server that named a cluster in its greeting but runs JetStream unclustered), which no
/// retry mends; unavailable otherwise.
fn not_created(
    config: &ClusterConfig,
    doing: &str,
    e: jetstream::context::CreateStreamError,
) -> ClusterError {
    use jetstream::context::CreateStreamErrorKind;
    match e.kind() {
        CreateStreamErrorKind::JetStream(j)
            if j.error_code() == jetstream::ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED =>
        {
            ClusterError::Replicas {
                url: redacted_urls(config),
                replicas: config.replicas,
            }
        }
        _ => ClusterError::unavailable(doing, e),
    }
}

/// The URLs, without the credentials they may carry, as errors name them.
fn redacted_urls(config: &ClusterConfig) -> String {
    config
        .urls
        .iter()
        .map(|u| redact(u))
        .collect::<Vec<_>>()
        .join(",")
}

/// The buckets and streams a node needs, created when missing.
async fn setup(
    js: &jetstream::Context,
    config: &ClusterConfig,
) -> Result<
    (
        kv::Store,
        kv::Store,
        kv::Store,
        stream::Stream,
        stream::Stream,
    ),
    ClusterError,
> {
    let bucket = |name: &str, history: i64| kv::Config {
        bucket: name.to_owned(),
        history,
        num_replicas: config.replicas,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let leases = key_value(js, config, bucket(LEASE_BUCKET, 1)).await?;
    let nodes = key_value(js, config, bucket(NODE_BUCKET, 1)).await?;
    let sessions = key_value(js, config, bucket(SESSION_BUCKET, 1)).await?;
    let events = js
        .get_or_create_stream(stream::Config {
            name: EVENT_STREAM.to_owned(),
            subjects: vec![format!("{}.>", events::PREFIX)],
            num_replicas: config.replicas,
            storage: stream::StorageType::File,
            max_messages_per_subject: config.events_per_session,
            discard: stream::DiscardPolicy::Old,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .map_err(|e| not_created(config, "creating the event stream", e))?;
    let traces = js
        .get_or_create_stream(stream::Config {
            name: TRACE_STREAM.to_owned(),
            subjects: vec![format!("{}.>", traces::PREFIX)],
            num_replicas: config.replicas,
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .map_err(|e| not_created(config, "creating the trace stream", e))?;
    Ok((leases, nodes, sessions, events, traces))
}

async fn key_value(
    js: &jetstream::Context,
    node: &ClusterConfig,
    config: kv::Config,
) -> Result<kv::Store, ClusterError> {
    if let Ok(store) = js.get_key_value(config.bucket.clone()).await {
        return Ok(store);
    }
    // The bucket's stream as `create_key_value` makes it. That call asks for the account's
    // info first, whose answer from nats-server 2.9 this client cannot parse, so the stream is
    // created directly.
    let name = config.bucket.clone();
    let stream = stream::Config {
        name: format!("KV_{name}"),
        description: Some(format!("penguin {name}")),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: config.history,
        storage: config.storage,
        allow_rollup: true,
        deny_delete: true,
        // Reads go to the stream's leader: a direct get may be answered by a replica that has
        // not applied the latest write yet, and a lease or a listing read right after another
        // node's write must see it (a test saw a removed session listed again).
        allow_direct: false,
        num_replicas: config.num_replicas,
        discard: stream::DiscardPolicy::New,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    // Another node may be creating it at the same time: then it is there to get.
    let created = js.get_or_create_stream(stream).await;
    match js.get_key_value(name.clone()).await {
        Ok(store) => Ok(store),
        Err(e) => Err(match created {
            Err(c) => not_created(node, &format!("creating bucket {name}"), c),
            Ok(_) => ClusterError::unavailable(&format!("opening bucket {name}"), e),
        }),
    }
}

/// Whether `name` can be a node name or a session id in the cluster: what subjects and keys
/// accept, as the server's session ids are (`[a-zA-Z0-9_-]`, 1 to 128 bytes).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `url` without the credentials it may carry (`nats://***@host:4222`).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
#[test]
fn credentials_are_left_out_of_a_named_url() {
    let mut config = ClusterConfig::new(
        vec!["nats://u:pass-word@h:4222".into()],
        "a",
        ClusterSecret::new(b"the-cluster-secret-0123456789abcdef".to_vec()).unwrap(),
    );
    config.auth = NatsAuth::UserPassword {
        user: "u".into(),
        password: "other-pass".into(),
    };
    let shown = format!("{config:?}");
    for hidden in ["pass-word", "other-pass", "the-cluster-secret"] {
        assert!(!shown.contains(hidden), "{shown}");
    }
    assert!(shown.contains("nats://***@h:4222"), "{shown}");
    assert_eq!(redact("nats://u:secret@h:4222"), "nats://***@h:4222");
    assert_eq!(redact("nats://tok@h"), "nats://***@h");
    assert_eq!(redact("nats://h:4222"), "nats://h:4222");
    assert_eq!(redact("h:4222"), "h:4222");
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
