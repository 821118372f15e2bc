//! A real 3-node nats-server cluster with JetStream on loopback, for the tests.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use penguin_cluster::{Cluster, ClusterConfig, ClusterSecret};

/// The user every test nats-server lets in (with [`NATS_PASSWORD`]), as a deployment gives
/// each node credentials.
pub const NATS_USER: &str = "penguin";
/// [`NATS_USER`]'s password.
pub const NATS_PASSWORD: &str = "nats-test-password-4f2a";
/// The cluster secret of every test node.
pub const SECRET: &str = "cluster-test-secret-0123456789abcdef0123456789";

/// [`SECRET`] as the nodes hold it.
pub fn secret() -> ClusterSecret {
    ClusterSecret::new(SECRET.as_bytes().to_vec()).expect("a valid secret")
}

/// Whether `nats-server` is installed; without it a test skips, except under `CI` where it
/// fails (`scripts/install-nats.sh` installs it).
pub fn nats_available(test: &str) -> bool {
    let found = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: nats-server is not installed (scripts/install-nats.sh)"
        );
        eprintln!("SKIPPED {test}: nats-server is not installed (scripts/install-nats.sh)");
    }
    found
}

/// A loopback port nothing listens on, for a server started next. It comes from below the
/// kernel's ephemeral range (`ip_local_port_range`), because a port from `bind(0)` is one the
/// kernel also hands out as the source port of outgoing connections: between our probe and the
/// server's bind, a nats-server's route or a client of a test running alongside could take it.
/// Ports are spread by the process id and never handed out twice by one process; the probe
/// skips any another process holds.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000, ephemeral_low.max(12_000));
    let span = high - low;
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = (low + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}")
}

/// Waits until `done` answers true, polling every 50 ms; fails naming `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "{what} (waited {limit:?})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One nats-server of the cluster.
pub struct Node {
    pub name: String,
    pub port: u16,
    pub cluster_port: u16,
    pub store: PathBuf,
    /// Whether it asks clients for credentials: [`NATS_USER`]'s, or an account's user's on a
    /// [`NatsCluster::shared`] cluster.
    pub auth: bool,
    /// The user a client connects as (when `auth`).
    pub user: String,
    /// [`Node::user`]'s password.
    pub password: String,
    child: Option<Child>,
}

impl Node {
    /// Its URL with the credentials a client needs.
    pub fn url(&self) -> String {
        if self.auth {
            format!(
                "nats://{}:{}@127.0.0.1:{}",
                self.user, self.password, self.port
            )
        } else {
            self.plain_url()
        }
    }

    /// Its URL without credentials.
    pub fn plain_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// A 3-node (or n-node) nats-server cluster with JetStream, each with its own store dir;
/// killed when dropped. Or one account of the cluster a test binary shares
/// ([`NatsCluster::shared`]), which a test may not kill.
pub struct NatsCluster {
    pub nodes: Vec<Node>,
    dir: tempfile::TempDir,
    /// Whether the servers are this value's (started by it, killed when it is dropped).
    owned: bool,
}

/// Accounts in the config of the cluster a test binary shares: one per
/// [`NatsCluster::shared`], the first for the readiness probe.
const SHARED_ACCOUNTS: usize = 64;

/// The user of account `k` of the shared cluster (its password is [`NATS_PASSWORD`]).
fn shared_user(k: usize) -> String {
    format!("t{k}")
}

impl NatsCluster {
    /// Starts `n` nats-servers routed to each other, each letting in [`NATS_USER`] only, and
    /// waits until JetStream answers with `n` replicas.
    pub async fn start(n: usize) -> NatsCluster {
        NatsCluster::start_with(n, true).await
    }

    /// As [`start`](Self::start), but the servers let anyone in (`auth` false).
    pub async fn start_with(n: usize, auth: bool) -> NatsCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let nodes = (0..n)
            .map(|i| Node {
                name: format!("n{i}"),
                port: free_port(),
                cluster_port: free_port(),
                store: dir.path().join(format!("n{i}")),
                auth,
                user: NATS_USER.into(),
                password: NATS_PASSWORD.into(),
                child: None,
            })
            .collect();
        let mut cluster = NatsCluster {
            nodes,
            dir,
            owned: true,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        cluster.wait_ready(n).await;
        cluster
    }

    /// An account of its own on the 3-node cluster this test binary shares, started by the
    /// first test that asks: a JetStream account is a namespace, so the cluster's streams and
    /// buckets of one test are not another's, and the servers start once instead of once per
    /// test. For the tests that leave the servers alone; one that kills, pauses or restarts a
    /// server starts a cluster of its own.
    pub async fn shared() -> NatsCluster {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static SERVERS: tokio::sync::OnceCell<NatsCluster> = tokio::sync::OnceCell::const_new();
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let servers = SERVERS.get_or_init(NatsCluster::start_shared).await;
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            k < SHARED_ACCOUNTS,
            "more than {SHARED_ACCOUNTS} shared accounts taken"
        );
        let nodes = servers
            .nodes
            .iter()
            .map(|n| Node {
                name: n.name.clone(),
                port: n.port,
                cluster_port: n.cluster_port,
                store: n.store.clone(),
                auth: true,
                user: shared_user(k),
                password: NATS_PASSWORD.into(),
                child: None,
            })
            .collect();
        NatsCluster {
            nodes,
            dir: tempfile::tempdir().expect("temp dir"),
            owned: false,
        }
    }

    /// The shared cluster's servers: 3, with [`SHARED_ACCOUNTS`] accounts. A static is never
    /// dropped, so a watchdog kills them (and removes their stores) once this process is gone,
    /// however it ends.
    async fn start_shared() -> NatsCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut conf = String::from("accounts {\n");
        for k in 0..SHARED_ACCOUNTS {
            conf.push_str(&format!(
                "  T{k}: {{ jetstream: enabled, users: [{{ user: \"{}\", password: \"{NATS_PASSWORD}\" }}] }}\n",
                shared_user(k)
            ));
        }
        conf.push_str("}\n");
        std::fs::write(dir.path().join("accounts.conf"), conf).expect("nats config");
        let nodes = (0..3)
            .map(|i| Node {
                name: format!("n{i}"),
                port: free_port(),
                cluster_port: free_port(),
                store: dir.path().join(format!("n{i}")),
                auth: true,
                user: shared_user(0),
                password: NATS_PASSWORD.into(),
                child: None,
            })
            .collect();
        let mut cluster = NatsCluster {
            nodes,
            dir,
            owned: true,
        };
        for i in 0..3 {
            cluster.spawn(i);
        }
        let pids: Vec<String> = cluster
            .nodes
            .iter()
            .filter_map(|n| Some(n.child.as_ref()?.id().to_string()))
            .collect();
        let watchdog = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; kill -9 {} 2>/dev/null; rm -rf '{}'",
            std::process::id(),
            pids.join(" "),
            cluster.dir.path().display()
        );
        // Never waited for: the watchdog's job is to outlive this process.
        #[allow(clippy::zombie_processes)]
        let _watchdog = Command::new("sh")
            .arg("-c")
            .arg(watchdog)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the shared nats-servers' watchdog starts");
        cluster.wait_ready(3).await;
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let routes: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, n)| format!("nats://127.0.0.1:{}", n.cluster_port))
            .collect();
        let node = &self.nodes[i];
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", node.name)))
            .expect("log file");
        let mut cmd = Command::new("nats-server");
        cmd.args(["-a", "127.0.0.1", "-p"])
            .arg(node.port.to_string())
            .args(["-n", &node.name, "-js", "-sd"])
            .arg(&node.store);
        let accounts = self.dir.path().join("accounts.conf");
        if accounts.exists() {
            cmd.arg("-c").arg(accounts);
        } else if node.auth {
            cmd.args(["--user", NATS_USER, "--pass", NATS_PASSWORD]);
        }
        // A single server runs JetStream on its own; a clustered one waits for its peers.
        if !routes.is_empty() {
            cmd.args(["--cluster_name", "penguin-test", "-cluster"])
                .arg(format!("nats://127.0.0.1:{}", node.cluster_port))
                .arg("-routes")
                .arg(routes.join(","));
        }
        cmd.stdout(Stdio::null()).stderr(log);
        let child = cmd.spawn().expect("nats-server starts");
        self.nodes[i].child = Some(child);
    }

    /// Every server's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The config of a penguin node `name` that knows every server (with their credentials)
    /// and holds the cluster's [`SECRET`].
    pub fn config(&self, name: &str) -> ClusterConfig {
        let mut config = ClusterConfig::new(self.urls(), name, secret());
        config.allow_unauthenticated = !self.nodes.iter().any(|n| n.auth);
        config.replicas = self.nodes.len().min(3);
        config.lease_ttl = Duration::from_secs(2);
        config
    }

    /// Waits until a JetStream stream with `replicas` replicas can be created.
    pub async fn wait_ready(&self, replicas: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let attempt = async {
                let addrs: Vec<async_nats::ServerAddr> =
                    self.urls().iter().map(|u| u.parse().unwrap()).collect();
                let options = if self.nodes.iter().any(|n| n.auth) {
                    async_nats::ConnectOptions::with_user_and_password(
                        self.nodes[0].user.clone(),
                        self.nodes[0].password.clone(),
                    )
                } else {
                    async_nats::ConnectOptions::new()
                };
                let client = options.connect(addrs.as_slice()).await.ok()?;
                let js = async_nats::jetstream::new(client);
                let name = format!("READY_{}", std::process::id());
                js.get_or_create_stream(async_nats::jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![format!("ready.{}", std::process::id())],
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await
                .ok()?;
                js.delete_stream(&name).await.ok()?;
                Some(())
            };
            if tokio::time::timeout(Duration::from_secs(10), attempt)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "JetStream not ready: see the logs in {}",
                self.dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A penguin node `name` with the default lease (10 s, longer than a leader election),
    /// for tests that kill a nats-server.
    pub async fn join_durable(&self, name: &str) -> Cluster {
        self.join_with_lease(
            name,
            ClusterConfig::new(Vec::new(), name, secret()).lease_ttl,
        )
        .await
    }

    /// A penguin node `name` with a lease of `ttl`.
    pub async fn join_with_lease(&self, name: &str, ttl: Duration) -> Cluster {
        let mut config = self.config(name);
        config.lease_ttl = ttl;
        Cluster::connect(config).await.expect("joins the cluster")
    }

    /// A penguin node `name` connected to the cluster, with a 2 s lease.
    pub async fn join(&self, name: &str) -> Cluster {
        Cluster::connect(self.config(name))
            .await
            .expect("joins the cluster")
    }

    /// SIGKILLs server `i`.
    pub fn kill(&mut self, i: usize) {
        assert!(
            self.owned,
            "the shared cluster's servers are every test's: start a cluster of its own to kill one"
        );
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts server `i` again on its ports and store.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    fn pid(&self, i: usize) -> Pid {
        assert!(
            self.owned,
            "the shared cluster's servers are every test's: start a cluster of its own to stop one"
        );
        Pid::from_raw(self.nodes[i].child.as_ref().expect("running").id() as i32)
    }

    /// SIGSTOPs server `i`.
    pub fn pause(&self, i: usize) {
        kill(self.pid(i), Signal::SIGSTOP).expect("SIGSTOP");
    }

    /// SIGCONTs server `i`.
    pub fn resume(&self, i: usize) {
        kill(self.pid(i), Signal::SIGCONT).expect("SIGCONT");
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        for i in 0..self.nodes.len() {
            if let Some(child) = self.nodes[i].child.as_ref() {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            }
            self.kill(i);
        }
    }
}
