//! A cluster of real `penguin serve` processes for the end-to-end tests of `crates/cli/tests/
//! cluster.rs`: a 3-node nats-server cluster with JetStream (the cluster crate's harness,
//! included as it is) and N `penguin serve --cluster … --node …` nodes on loopback, each with a
//! data root (`PENGUIN_HOME`) of its own, so traces move between nodes only through the
//! cluster, and one workspace every node shares.
//!
//! Every node plays a scenario of its own (a scripted model and tools; [`scenario`]): its
//! texts name the node (`"Ready from a."`) and its tool call ids start with the node's name
//! (`a_call_1`), so an event or a trace record says which node's engine produced it, and a
//! session taken over (whose script starts again on the new owner) never repeats a call id.
//!
//! The nats-servers ask for a user and password (an account's user on the nats-servers the
//! tests share, or the harness's [`nats::NATS_USER`] on a test's own), which the nodes have in
//! their `[cluster] nats` URLs, and every node holds the cluster secret
//! ([`nats::SECRET`], in a file named by `PENGUIN_CLUSTER_SECRET_FILE`), as a deployment gives
//! them.
//!
//! Besides starting and stopping things, here are the client side (an SSE reader that keeps
//! each event's id, `event:` and data, and knows which events are the snapshot a connection
//! starts with) and the checks the tests share ([`assert_contiguous`], [`assert_same_events`]).
#![allow(dead_code)]

#[path = "../../../cluster/tests/support/mod.rs"]
pub mod nats;

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// The token of every node (the cluster's nodes share one).
pub const TOKEN: &str = "penguin-cluster-e2e-token-0123456789";

/// How long any one wait may take before the test fails: generous, the machine may be loaded
/// (JetStream elections took over 10 s on a loaded 2-core CI machine).
pub const WAIT: Duration = Duration::from_secs(90);

/// Node names: the first three nodes are `a`, `b`, `c`.
pub const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Whether the tests can run: `nats-server` installed (else they skip, or fail under `CI`).
pub fn available(test: &str) -> bool {
    nats::nats_available(test)
}

// ---------------------------------------------------------------------------------------------
// Scenario

fn model(payload: Value) -> Value {
    json!({"type": "model_msg", "payload": payload})
}

fn step(delay_ms: u64, message: Value) -> Value {
    json!({"delay_ms": delay_ms, "message": message})
}

fn partial_text(event: &str, text: &str) -> Value {
    model(
        json!({"type": "partial_text", "role": "assistant", "event_type": event, "text": text, "stop_reason": "completed"}),
    )
}

fn text(text: &str) -> Value {
    model(json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"}))
}

fn usage(total: u64) -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": 1, "total": total});
    json!({"type": "event_msg", "payload": {"type": "token_usage", "session": c, "request": c}})
}

/// A streamed text: its deltas (each after `delay_ms`), then the complete text and usage.
fn streamed(deltas: &[String], delay_ms: u64, total: u64) -> Value {
    let mut s = vec![step(5, partial_text("start", ""))];
    s.extend(
        deltas
            .iter()
            .map(|d| step(delay_ms, partial_text("delta", d))),
    );
    s.push(step(5, partial_text("stop", "")));
    s.push(step(2, text(&deltas.concat())));
    s.push(step(2, usage(total)));
    json!({ "stream": s })
}

/// The tool call of node `node`'s scenario.
pub fn call_id(node: &str) -> String {
    format!("{node}_call_1")
}

/// The text of the first request of `node`'s scenario.
pub fn ready_text(node: &str) -> String {
    format!("Ready from {node}.")
}

/// Deltas of the third request (the answer after the tool): 20 of them, 25 ms apart, so a
/// client has time to move between nodes, or a nats-server to die, in the middle.
pub const DONE_DELTAS: usize = 20;

/// The text of the third request of `node`'s scenario.
pub fn done_text(node: &str) -> String {
    done_deltas(node).concat()
}

fn done_deltas(node: &str) -> Vec<String> {
    let mut d = vec![format!("Done from {node}:")];
    d.extend((1..DONE_DELTAS).map(|i| format!(" tick{i}")));
    d
}

/// The scenario node `node` plays, request by request (a session's script starts again from
/// request 1 wherever it is loaded: on its creator, and on a node taking it over):
///
/// 1. text `Ready from <node>.` (no tool: what a session taken over answers first);
/// 2. text `Reading from <node>.` and a `read_file` call `<node>_call_1` (an `always-ask`
///    session waits for its approval here: the test's "mid-task");
/// 3. after the tool's output `alpha from <node>`: `Done from <node>: tick1 … tick19` in
///    [`DONE_DELTAS`] deltas 25 ms apart;
/// 4. and on: `Reply <k> from <node>.`.
pub fn scenario(node: &str) -> Value {
    let call = call_id(node);
    let args = r#"{"path":"a.txt"}"#;
    let calling = json!({"stream": [
        step(5, partial_text("start", "")),
        step(5, partial_text("delta", &format!("Reading from {node}."))),
        step(5, partial_text("stop", "")),
        step(2, text(&format!("Reading from {node}."))),
        step(5, model(json!({"type": "tool_call", "role": "assistant", "name": "read_file",
            "arguments": args, "tool_call_id": call, "stop_reason": "completed"}))),
        step(2, usage(20)),
    ]});
    let out = |event: &str, text: &str| {
        model(
            json!({"type": "partial_tool_call_output", "role": "user", "event_type": event, "output": text, "tool_call_id": call, "stop_reason": "completed"}),
        )
    };
    let output = format!("alpha from {node}");
    let tool = json!({"stream": [
        step(5, out("start", "")),
        step(5, out("delta", &output)),
        step(5, out("stop", "")),
        step(2, model(json!({"type": "tool_call_output", "role": "user", "output": output,
            "tool_call_id": call, "stop_reason": "completed"}))),
    ]});
    let mut llm = vec![
        streamed(&[ready_text(node)], 5, 10),
        calling,
        streamed(&done_deltas(node), 25, 30),
    ];
    llm.extend((4..=16).map(|k| streamed(&[format!("Reply {k} from {node}.")], 5, 40 + k)));
    json!({
        "description": format!("penguin cluster e2e, node {node}"),
        "llm": llm,
        "tools": { call: tool },
        "runs": []
    })
}

// ---------------------------------------------------------------------------------------------
// The cluster

/// How to start a [`TestCluster`].
#[derive(Clone, Debug)]
pub struct Options {
    /// `penguin serve` nodes (named `a`, `b`, `c`, …).
    pub nodes: usize,
    /// `[cluster] lease_secs`: 3 keeps failover fast; the test that kills a nats-server uses
    /// a lease longer than a JetStream election (10 s, the default), as the cluster crate's
    /// tests do.
    pub lease_secs: u64,
    /// Whether the nodes join the cluster. Without (`--cluster` and `[cluster]` left out),
    /// each is a plain `penguin serve`: the harness's own check against the server as it
    /// was before the cluster.
    pub cluster: bool,
    /// Whether the test kills or restarts nats-servers, and so needs three of its own.
    /// Otherwise its nodes get an account of their own on the nats-servers the test binary
    /// shares ([`nats::NatsCluster::shared`]): their streams and buckets are theirs alone.
    pub own_nats: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nodes: 3,
            lease_secs: 3,
            cluster: true,
            own_nats: false,
        }
    }
}

/// One `penguin serve` node.
#[derive(Debug)]
pub struct Node {
    /// Its `--node` name.
    pub name: String,
    /// Its HTTP port on 127.0.0.1.
    pub port: u16,
    /// Its data root (`PENGUIN_HOME`): its `config.toml`, its traces.
    pub home: PathBuf,
    /// The scenario file it plays.
    pub scenario: PathBuf,
    /// Its stdout and stderr.
    pub log: PathBuf,
    child: Option<Child>,
}

impl Node {
    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().expect("the node is running").id() as i32)
    }
}

/// The tests of one binary run one cluster at a time: six processes each, failover timed in
/// seconds, on a machine of two cores.
fn one_at_a_time() -> Arc<tokio::sync::Mutex<()>> {
    static LOCK: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    LOCK.get_or_init(Default::default).clone()
}

/// A 3-node nats-server cluster and N `penguin serve` nodes on it; everything is killed when
/// dropped (and the nodes' logs printed when a test failed).
pub struct TestCluster {
    /// The nats-servers.
    pub nats: nats::NatsCluster,
    /// The penguin nodes, in the order of [`NAMES`].
    pub nodes: Vec<Node>,
    /// The workspace every node's sessions share.
    pub workspace: PathBuf,
    /// HTTP client (no overall timeout: streams stay open; each API call has its own).
    pub http: reqwest::Client,
    lease_secs: u64,
    clustered: bool,
    /// The file holding the cluster secret every node is given.
    pub secret_file: PathBuf,
    dir: tempfile::TempDir,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

/// Writes the cluster secret of the tests ([`nats::SECRET`]) into `dir`, readable by its owner
/// only; its path.
pub fn write_secret(dir: &Path) -> PathBuf {
    let path = dir.join("cluster-secret");
    std::fs::write(&path, format!("{}\n", nats::SECRET)).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path
}

/// `penguin serve` on 127.0.0.1:`port` playing node `name`'s scenario, with a data root, a
/// scenario and a workspace of its own under `dir` and the harness's token, its output to
/// `dir/<name>.log`: for the tests that start a node by hand (its cluster flags are theirs).
pub fn serve_command(dir: &Path, name: &str, port: u16) -> (Command, PathBuf) {
    let home = dir.join(format!("home-{name}"));
    let workspace = dir.join(format!("workspace-{name}"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    let scenario = dir.join(format!("scenario-{name}.json"));
    std::fs::write(&scenario, scenario_text(name)).unwrap();
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_penguin"));
    cmd.arg("serve")
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--provider", "scripted", "--scenario"])
        .arg(&scenario)
        .arg("--workspace")
        .arg(&workspace)
        .arg("--workspace-root")
        .arg(&workspace)
        .current_dir(&workspace)
        .env("PENGUIN_HOME", &home)
        .env("PENGUIN_TOKEN", TOKEN)
        .env_remove("PENGUIN_CLUSTER_SECRET_FILE")
        .env_remove("PENGUIN_NATS_PASSWORD")
        .env_remove("PENGUIN_NATS_TOKEN")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    (cmd, log)
}

impl TestCluster {
    /// Three nats-servers (R3) and three nodes with a 3 s lease.
    pub async fn start() -> TestCluster {
        TestCluster::start_with(Options::default()).await
    }

    /// Three nats-servers (R3) and `opts.nodes` nodes; returns once every node answers
    /// `GET /api/sessions`.
    pub async fn start_with(opts: Options) -> TestCluster {
        let turn = one_at_a_time().lock_owned().await;
        let nats = if opts.own_nats {
            nats::NatsCluster::start(3).await
        } else {
            nats::NatsCluster::shared().await
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let workspace = dir.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("a.txt"), "alpha\n").unwrap();
        let workspace = workspace.canonicalize().unwrap();
        let urls = nats.urls();
        let secret_file = write_secret(dir.path());
        let mut nodes = Vec::new();
        for name in NAMES.iter().take(opts.nodes) {
            let home = dir.path().join(format!("home-{name}"));
            std::fs::create_dir_all(&home).unwrap();
            let nats_list = urls
                .iter()
                .map(|u| format!("{u:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            if opts.cluster {
                std::fs::write(
                    home.join("config.toml"),
                    format!(
                        "[cluster]\nnats = [{nats_list}]\nnode = \"{name}\"\nlease_secs = {}\nreplicas = 3\n",
                        opts.lease_secs
                    ),
                )
                .unwrap();
            }
            let scenario = dir.path().join(format!("scenario-{name}.json"));
            std::fs::write(&scenario, scenario_text(name)).unwrap();
            nodes.push(Node {
                name: (*name).to_owned(),
                port: nats::free_port(),
                log: dir.path().join(format!("node-{name}.log")),
                home,
                scenario,
                child: None,
            });
        }
        let mut cluster = TestCluster {
            nats,
            nodes,
            workspace,
            http: reqwest::Client::new(),
            lease_secs: opts.lease_secs,
            clustered: opts.cluster,
            secret_file,
            dir,
            _turn: turn,
        };
        for i in 0..cluster.nodes.len() {
            cluster.spawn(i);
        }
        for i in 0..cluster.nodes.len() {
            cluster.wait_ready(i).await;
        }
        cluster
    }

    /// The lease length the nodes were started with.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }

    fn spawn(&mut self, i: usize) {
        let urls = self.nats.urls().join(",");
        let node = &self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("node log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_penguin"));
        cmd.arg("serve")
            .args(["--host", "127.0.0.1", "--port", &node.port.to_string()])
            .args(["--provider", "scripted", "--scenario"])
            .arg(&node.scenario)
            .arg("--workspace")
            .arg(&self.workspace)
            .arg("--workspace-root")
            .arg(&self.workspace);
        if self.clustered {
            cmd.args(["--cluster", &urls, "--node", &node.name]);
        }
        let child = cmd
            .current_dir(&self.workspace)
            .env("PENGUIN_HOME", &node.home)
            .env("PENGUIN_TOKEN", TOKEN)
            .env("PENGUIN_CLUSTER_SECRET_FILE", &self.secret_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("node log"))
            .stderr(log)
            .spawn()
            .expect("penguin serve starts");
        self.nodes[i].child = Some(child);
    }

    /// Waits until node `i` answers `GET /api/sessions` with the token.
    async fn wait_ready(&mut self, i: usize) {
        let deadline = Instant::now() + WAIT;
        let url = format!("{}/api/sessions?limit=1", self.nodes[i].base());
        loop {
            let answer = self
                .http
                .get(&url)
                .bearer_auth(TOKEN)
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            if answer.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            if let Some(status) = self.nodes[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "node {} exited while starting ({status}):\n{}",
                    self.nodes[i].name,
                    self.log_tail(i)
                );
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not answer GET /api/sessions within {WAIT:?}:\n{}",
                self.nodes[i].name,
                self.log_tail(i)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last few KiB of node `i`'s log.
    pub fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
        let from = text.len().saturating_sub(6000);
        let from = (from..text.len())
            .find(|&k| text.is_char_boundary(k))
            .unwrap_or(text.len());
        text[from..].to_owned()
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name:?}"))
    }

    // -----------------------------------------------------------------------------------------
    // Failures

    /// SIGKILLs node `i` and reaps it.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOPs node `i`.
    pub fn pause_node(&self, i: usize) {
        kill(self.nodes[i].pid(), Signal::SIGSTOP).expect("SIGSTOP");
    }

    /// SIGCONTs node `i`.
    pub fn resume_node(&self, i: usize) {
        kill(self.nodes[i].pid(), Signal::SIGCONT).expect("SIGCONT");
    }

    /// Starts node `i` again (same port, data root and scenario) and waits until it answers.
    pub async fn restart_node(&mut self, i: usize) {
        self.kill_node(i);
        self.spawn(i);
        self.wait_ready(i).await;
    }

    /// SIGKILLs nats-server `i`.
    pub fn kill_nats(&mut self, i: usize) {
        self.nats.kill(i);
    }

    /// SIGKILLs every nats-server: the nodes have no NATS at all.
    pub fn kill_all_nats(&mut self) {
        for i in 0..self.nats.nodes.len() {
            self.nats.kill(i);
        }
    }

    /// Starts nats-server `i` again on its ports and store dir (JetStream keeps its data).
    pub fn restart_nats(&mut self, i: usize) {
        self.nats.restart(i);
    }

    /// Starts every nats-server again on its ports and store dir (JetStream keeps its data)
    /// and waits until JetStream takes an R3 stream again.
    pub async fn restart_all_nats(&mut self) {
        for i in 0..self.nats.nodes.len() {
            self.nats.restart(i);
        }
        self.nats.wait_ready(self.nats.nodes.len().min(3)).await;
    }

    /// Stops node `i` gracefully (SIGINT, as Ctrl-C) and waits until it exited; fails the
    /// test when it has not within `wait`. Returns how it exited.
    pub async fn stop_node(&mut self, i: usize, wait: Duration) -> std::process::ExitStatus {
        kill(self.nodes[i].pid(), Signal::SIGINT).expect("SIGINT");
        let deadline = Instant::now() + wait;
        loop {
            let exited = self.nodes[i]
                .child
                .as_mut()
                .expect("the node is running")
                .try_wait()
                .expect("the node's status");
            if let Some(status) = exited {
                self.nodes[i].child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not exit within {wait:?} of SIGINT:\n{}",
                self.nodes[i].name,
                self.log_tail(i)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // -----------------------------------------------------------------------------------------
    // HTTP

    /// Node `i`'s URL of `path`.
    pub fn url(&self, i: usize, path: &str) -> String {
        format!("{}{path}", self.nodes[i].base())
    }

    /// One request to node `i`: its status and its body (JSON, or the text as a JSON string,
    /// or null when empty). A request that fails at the connection is status 0.
    pub async fn call(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut req = self
            .http
            .request(method, self.url(i, path))
            .bearer_auth(TOKEN)
            .timeout(WAIT);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        match req.send().await {
            Ok(res) => {
                let status = res.status().as_u16();
                let text = res.text().await.unwrap_or_default();
                let v = if text.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_str(&text).unwrap_or(Value::String(text))
                };
                (status, v)
            }
            Err(e) => (0, Value::String(e.to_string())),
        }
    }

    /// [`TestCluster::call`] again until `done(status)` (a node may answer 503, or fail to
    /// connect, while it takes a session over or NATS elects leaders); fails the test after
    /// [`WAIT`].
    pub async fn call_until(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<Value>,
        done: impl Fn(u16) -> bool,
    ) -> (u16, Value) {
        let deadline = Instant::now() + WAIT;
        loop {
            let (status, v) = self.call(i, method, path, body.clone()).await;
            if done(status) {
                return (status, v);
            }
            assert!(
                Instant::now() < deadline,
                "{method} {path} on node {}: still {status} after {WAIT:?}: {v}",
                self.nodes[i].name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `POST /api/sessions {"approvalMode": "always-ask"}` on node `i`: the new session's id.
    pub async fn create_session(&self, i: usize) -> String {
        let (status, v) = self
            .call(
                i,
                "POST",
                "/api/sessions",
                Some(json!({"approvalMode": "always-ask"})),
            )
            .await;
        assert_eq!(
            status, 201,
            "create a session on {}: {v}",
            self.nodes[i].name
        );
        v["session"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {v}"))
            .to_owned()
    }

    /// The ids `GET /api/sessions` lists on node `i`.
    pub async fn list(&self, i: usize) -> Vec<String> {
        let (status, v) = self.call(i, "GET", "/api/sessions", None).await;
        assert_eq!(status, 200, "list on {}: {v}", self.nodes[i].name);
        v["sessions"]
            .as_array()
            .unwrap_or_else(|| panic!("no sessions in {v}"))
            .iter()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect()
    }

    /// Waits until node `i` lists session `id`.
    pub async fn wait_listed(&self, i: usize, id: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            if self.list(i).await.iter().any(|s| s == id) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} does not list {id} after {WAIT:?}",
                self.nodes[i].name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `POST /api/sessions/{id}/tasks` on node `i` (again while it answers 503 or cannot be
    /// reached): 202.
    pub async fn post_task(&self, i: usize, id: &str, input: &str) {
        let body = json!({"input": [{"type": "text", "text": input}]});
        let (status, v) = self
            .call_until(
                i,
                "POST",
                &format!("/api/sessions/{id}/tasks"),
                Some(body),
                |s| s != 0 && s != 503,
            )
            .await;
        assert_eq!(status, 202, "task on {}: {v}", self.nodes[i].name);
    }

    /// `POST /api/sessions/{id}/approvals/{call} {"decision": "allow"}` on node `i`: the status
    /// (again while it answers 503 or cannot be reached).
    pub async fn approve(&self, i: usize, id: &str, call: &str) -> u16 {
        self.call_until(
            i,
            "POST",
            &format!("/api/sessions/{id}/approvals/{call}"),
            Some(json!({"decision": "allow"})),
            |s| s != 0 && s != 503,
        )
        .await
        .0
    }

    /// `GET /api/sessions/{id}/state` on node `i`: the snapshot events.
    pub async fn state(&self, i: usize, id: &str) -> Vec<Value> {
        let (status, v) = self
            .call_until(i, "GET", &format!("/api/sessions/{id}/state"), None, |s| {
                s != 0 && s != 503
            })
            .await;
        assert_eq!(status, 200, "state on {}: {v}", self.nodes[i].name);
        v.as_array()
            .unwrap_or_else(|| panic!("/state is not an array: {v}"))
            .clone()
    }

    /// Opens session `id`'s stream on node `i` (with `Last-Event-ID: last` when given), again
    /// while the node answers 503 or cannot be reached (a takeover in progress).
    pub async fn stream(&self, i: usize, id: &str, last: Option<&str>) -> Sse {
        let deadline = Instant::now() + WAIT;
        let url = self.url(i, &format!("/api/sessions/{id}/stream"));
        loop {
            let mut req = self.http.get(&url).bearer_auth(TOKEN);
            if let Some(l) = last {
                req = req.header("Last-Event-ID", l);
            }
            let why = match tokio::time::timeout(WAIT, req.send()).await {
                Ok(Ok(res)) if res.status().is_success() => {
                    return Sse::new(res, self.nodes[i].name.clone(), last);
                }
                Ok(Ok(res)) if res.status().as_u16() == 503 => {
                    format!("503: {}", res.text().await.unwrap_or_default())
                }
                Ok(Ok(res)) => panic!(
                    "GET {url}: {}: {}",
                    res.status(),
                    res.text().await.unwrap_or_default()
                ),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer".to_owned(),
            };
            assert!(
                Instant::now() < deadline,
                "GET {url} (Last-Event-ID {last:?}) did not open within {WAIT:?}: {why}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Opens node `i`'s user channel, `GET /api/events` (sessions created, titled, running,
    /// idle: `event: server_event`), which starts with `hello`.
    pub async fn user_events(&self, i: usize) -> Sse {
        let url = self.url(i, "/api/events");
        let res = tokio::time::timeout(WAIT, self.http.get(&url).bearer_auth(TOKEN).send())
            .await
            .unwrap_or_else(|_| panic!("GET {url} did not answer within {WAIT:?}"))
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert!(
            res.status().is_success(),
            "GET {url}: {}: {}",
            res.status(),
            res.text().await.unwrap_or_default()
        );
        Sse::new(res, self.nodes[i].name.clone(), None)
    }

    /// Every event of session `id` from its first, as node `i` replays them
    /// (`Last-Event-ID: <epoch>-0`), up to the snapshot that ends the replay.
    pub async fn replay_all(&self, i: usize, id: &str, epoch: &str) -> Vec<Ev> {
        let mut s = self.stream(i, id, Some(&format!("{epoch}-0"))).await;
        let evs = s.until(|e| e.snapshot).await;
        evs.into_iter().filter(|e| !e.snapshot).collect()
    }

    /// Reads `sse` until the running task ends (a `task_state` idle after one that is not),
    /// approving every tool call it asks for through node `approve_via` (each once: a
    /// reconnect's snapshot repeats a pending one). Returns the events read.
    pub async fn drive(&self, sse: &mut Sse, id: &str, approve_via: usize) -> Vec<Ev> {
        self.drive_from(sse, id, approve_via, false).await
    }

    /// [`TestCluster::drive`] on a stream that joins a task already `running` (a reconnect
    /// mid-task): then the next `task_state` idle ends it.
    pub async fn drive_from(
        &self,
        sse: &mut Sse,
        id: &str,
        approve_via: usize,
        mut running: bool,
    ) -> Vec<Ev> {
        let mut approved = HashSet::new();
        let mut out = Vec::new();
        loop {
            let ev = sse.next().await;
            out.push(ev.clone());
            if ev.kind() == "approval_request" {
                let call = ev.json()["toolCall"]["payload"]["tool_call_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no tool_call_id in {}", ev.data))
                    .to_owned();
                if approved.insert(call.clone()) {
                    let status = self.approve(approve_via, id, &call).await;
                    assert_eq!(
                        status, 204,
                        "approving {call} through {}",
                        self.nodes[approve_via].name
                    );
                }
            }
            if ev.kind() == "task_state" {
                if ev.json()["state"] != "idle" {
                    running = true;
                } else if running {
                    return out;
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Traces

    /// Session `id`'s trace files in node `i`'s data root (`<root>/<project>/agents/<agent>/
    /// traces/<date>/<id>_NNN.jsonl`), in order.
    pub fn trace_files(&self, i: usize, id: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        find_traces(&self.nodes[i].home, id, &mut out);
        out.sort();
        out
    }

    /// Everything node `i` has written of session `id`'s trace, its files one after another.
    pub fn trace_text(&self, i: usize, id: &str) -> String {
        self.trace_files(i, id)
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap_or_default())
            .collect()
    }

    /// `penguin trace check` on session `id`'s trace in node `i`'s data root, which must exist
    /// and pass (warnings allowed: a crash boundary is one); returns what it printed.
    pub fn trace_check(&self, i: usize, id: &str) -> String {
        let files = self.trace_files(i, id);
        assert!(
            !files.is_empty(),
            "node {} has no trace of {id} under {}",
            self.nodes[i].name,
            self.nodes[i].home.display()
        );
        let out = Command::new(env!("CARGO_BIN_EXE_penguin"))
            .args(["trace", "check"])
            .args(&files)
            .env("PENGUIN_HOME", &self.nodes[i].home)
            .output()
            .expect("penguin trace check runs");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "penguin trace check failed on node {}'s trace of {id}:\n{printed}\n--- trace:\n{}",
            self.nodes[i].name,
            self.trace_text(i, id)
        );
        printed
    }

    // -----------------------------------------------------------------------------------------
    // The cluster's own view (straight from NATS)

    /// A NATS connection of an observer (`Cluster::connect` as node `observer`; it takes no
    /// lease and publishes nothing).
    pub async fn observer(&self) -> penguin_cluster::Cluster {
        penguin_cluster::Cluster::connect(self.nats.config("observer"))
            .await
            .expect("the observer joins the cluster")
    }

    /// The node holding session `id`'s live lease, if any. Asked again for up to 30 s while
    /// JetStream does not answer (a leader election after a nats-server died).
    pub async fn lease_holder(&self, id: &str) -> Option<String> {
        let leases = self.observer().await.leases();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match leases.holder(id).await {
                Ok(holder) => return holder.map(|h| h.node),
                Err(e) if Instant::now() < deadline => {
                    eprintln!("reading the lease, again: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("read the lease: {e}"),
            }
        }
    }

    /// Waits until `node` holds session `id`'s lease.
    pub async fn wait_holder(&self, id: &str, node: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let holder = self.lease_holder(id).await;
            if holder.as_deref() == Some(node) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{node} does not hold {id}'s lease after {WAIT:?} (holder: {holder:?})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Who published each of session `id`'s trace records (`Penguin-Node`), with the record's
    /// number and its line, in stream order (a message holding several gives each).
    pub async fn trace_writers(&self, id: &str) -> Vec<Written> {
        self.writers(
            penguin_cluster::TRACE_STREAM,
            &format!("penguin.traces.{id}"),
        )
        .await
    }

    /// Who published each of session `id`'s events, with its id's sequence and its data.
    pub async fn event_writers(&self, id: &str) -> Vec<Written> {
        self.writers(
            penguin_cluster::EVENT_STREAM,
            &format!("penguin.events.{id}"),
        )
        .await
    }

    async fn writers(&self, stream: &str, subject: &str) -> Vec<Written> {
        use async_nats::jetstream::consumer::{pull, DeliverPolicy};
        let obs = self.observer().await;
        let read = async {
            // Right after a nats-server died, JetStream may take a while to answer (a leader
            // election): asked again, as the cluster layer itself does, for up to 30 s.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let consumer = loop {
                let made = async {
                    let stream = obs
                        .jetstream()
                        .get_stream(stream)
                        .await
                        .map_err(|e| e.to_string())?;
                    stream
                        .create_consumer(pull::OrderedConfig {
                            filter_subject: subject.to_owned(),
                            deliver_policy: DeliverPolicy::All,
                            ..Default::default()
                        })
                        .await
                        .map_err(|e| e.to_string())
                }
                .await;
                match made {
                    Ok(c) => break c,
                    Err(e) if std::time::Instant::now() < deadline => {
                        eprintln!("an ordered consumer, again: {e}");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => panic!("an ordered consumer: {e}"),
                }
            };
            let mut messages = consumer.messages().await.expect("its messages");
            let mut out = Vec::new();
            // An empty subject sends nothing: a short wait for the first message says so.
            let first = tokio::time::timeout(Duration::from_secs(3), messages.next()).await;
            let Ok(Some(first)) = first else {
                return out;
            };
            let mut next = Some(first);
            while let Some(m) = next.take() {
                let m = m.expect("a message");
                let header = |name: &str| {
                    m.headers
                        .as_ref()
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_owned())
                        .unwrap_or_default()
                };
                // A message may hold several records (or events), one a line; `Penguin-Seq`
                // numbers its last.
                let last: u64 = header(penguin_cluster::SEQ_HEADER).parse().unwrap_or(0);
                let count: u64 = header("Penguin-Count").parse().unwrap_or(1);
                let payload = String::from_utf8_lossy(&m.payload).into_owned();
                let items: Vec<&str> = if count == 1 {
                    vec![payload.as_str()]
                } else {
                    payload.split('\n').collect()
                };
                assert_eq!(items.len() as u64, count, "{subject}: {payload}");
                for (k, item) in items.into_iter().enumerate() {
                    out.push(Written {
                        node: header(penguin_cluster::NODE_HEADER),
                        seq: last + 1 - count + k as u64,
                        payload: item.to_owned(),
                    });
                }
                let pending = m.info().map(|i| i.pending).unwrap_or(0);
                if pending > 0 {
                    next = messages.next().await;
                }
            }
            out
        };
        tokio::time::timeout(WAIT, read)
            .await
            .unwrap_or_else(|_| panic!("reading {subject} from NATS took over {WAIT:?}"))
    }
}

/// One record or event of a session in NATS (a message may hold several).
#[derive(Clone, Debug)]
pub struct Written {
    /// The node that published it (`Penguin-Node`).
    pub node: String,
    /// Its per-session sequence (`Penguin-Seq`).
    pub seq: u64,
    /// Its payload.
    pub payload: String,
}

fn find_traces(dir: &Path, id: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{id}_");
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            find_traces(&p, id, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".jsonl"))
        {
            out.push(p);
        }
    }
}

fn scenario_text(node: &str) -> String {
    serde_json::to_string_pretty(&scenario(node)).expect("a scenario")
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for i in 0..self.nodes.len() {
                eprintln!(
                    "----- node {} (port {}) log tail -----\n{}",
                    self.nodes[i].name,
                    self.nodes[i].port,
                    self.log_tail(i)
                );
            }
            eprintln!("(node data roots were under {})", self.dir.path().display());
        }
        for i in 0..self.nodes.len() {
            self.kill_node(i);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SSE

/// One SSE event as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Ev {
    /// `<epoch>-<seq>`.
    pub id: String,
    /// `server_event` for the server's own events; none for OmniMessages.
    pub event: Option<String>,
    /// The data (JSON).
    pub data: String,
    /// One of the snapshot events a connection sends after its replay (a `task_state`, pending
    /// `approval_request`s): it reuses the id of the event before it (the first event of a
    /// connection without `Last-Event-ID`, or one whose id repeats the one before it).
    pub snapshot: bool,
    /// The node it was read from.
    pub node: String,
}

impl Ev {
    /// The data, parsed.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event {} data is not JSON ({e}): {}", self.id, self.data))
    }

    /// A `server_event` (task state, approval request, …), not an OmniMessage.
    pub fn is_server(&self) -> bool {
        self.event.as_deref() == Some("server_event")
    }

    /// The server event's `type`, or the OmniMessage's payload type.
    pub fn kind(&self) -> String {
        let v = self.json();
        let k = if self.is_server() {
            v["type"].as_str()
        } else {
            v["payload"]["type"].as_str().or_else(|| v["type"].as_str())
        };
        k.unwrap_or("").to_owned()
    }

    /// The epoch part of the id.
    pub fn epoch(&self) -> &str {
        self.id
            .rsplit_once('-')
            .unwrap_or_else(|| panic!("event id {:?} is not <epoch>-<seq>", self.id))
            .0
    }

    /// The sequence part of the id.
    pub fn seq(&self) -> u64 {
        seq_of(&self.id).unwrap_or_else(|| panic!("event id {:?} is not <epoch>-<seq>", self.id))
    }

    /// A `task_state` in `state`.
    pub fn is_state(&self, state: &str) -> bool {
        self.is_server() && self.kind() == "task_state" && self.json()["state"] == state
    }

    /// A complete assistant `text` message's text.
    pub fn text(&self) -> Option<String> {
        if self.is_server() || self.kind() != "text" {
            return None;
        }
        let v = self.json();
        (v["payload"]["role"] == "assistant")
            .then(|| v["payload"]["text"].as_str().map(str::to_owned))
            .flatten()
    }

    /// A `partial_text` delta's text.
    pub fn delta(&self) -> Option<String> {
        if self.is_server() || self.kind() != "partial_text" {
            return None;
        }
        let v = self.json();
        (v["payload"]["event_type"] == "delta")
            .then(|| v["payload"]["text"].as_str().map(str::to_owned))
            .flatten()
    }
}

fn seq_of(id: &str) -> Option<u64> {
    id.rsplit_once('-')?.1.parse().ok()
}

/// A response body as chunks of bytes (copied out of reqwest's `Bytes`).
type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>;

/// An open SSE stream of one session on one node, read event by event; every event read is
/// kept in `seen`.
pub struct Sse {
    body: ByteStream,
    buf: Vec<u8>,
    ready: VecDeque<Ev>,
    /// The node it reads from.
    pub node: String,
    /// The `Last-Event-ID` it was opened with.
    pub opened_after: Option<String>,
    prev_seq: Option<u64>,
    ended: bool,
    /// Every event returned so far, in order.
    pub seen: Vec<Ev>,
}

impl Sse {
    fn new(res: reqwest::Response, node: String, last: Option<&str>) -> Sse {
        Sse {
            body: Box::pin(res.bytes_stream().map(|c| c.map(|b| b.to_vec()))),
            buf: Vec::new(),
            ready: VecDeque::new(),
            node,
            opened_after: last.map(str::to_owned),
            prev_seq: None,
            ended: false,
            seen: Vec::new(),
        }
    }

    /// The next event, `None` once the stream ended (closed, or its node died); fails the
    /// test when none comes within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Ev> {
        let got = tokio::time::timeout(wait, self.read_one()).await;
        let ev = got.unwrap_or_else(|_| {
            panic!(
                "no event from node {} within {wait:?}; the last ones read: {:#?}",
                self.node,
                self.seen.iter().rev().take(5).collect::<Vec<_>>()
            )
        })?;
        self.seen.push(ev.clone());
        Some(ev)
    }

    /// The next event; fails the test when the stream ends or nothing comes within [`WAIT`].
    pub async fn next(&mut self) -> Ev {
        match self.next_within(WAIT).await {
            Some(ev) => ev,
            None => panic!(
                "the stream from node {} ended; the last events read: {:#?}",
                self.node,
                self.seen.iter().rev().take(5).collect::<Vec<_>>()
            ),
        }
    }

    /// Events up to and including the first one matching `pred`.
    pub async fn until(&mut self, pred: impl Fn(&Ev) -> bool) -> Vec<Ev> {
        let mut out = Vec::new();
        loop {
            let ev = self.next().await;
            let done = pred(&ev);
            out.push(ev);
            if done {
                return out;
            }
        }
    }

    /// Events up to and including the first one matching `pred`; fails the test when none
    /// came within `wait` (or the stream ended).
    pub async fn until_within(&mut self, wait: Duration, pred: impl Fn(&Ev) -> bool) -> Vec<Ev> {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the awaited event did not come from node {} within {wait:?}; read meanwhile: {:#?}",
                self.node,
                out
            );
            let Some(ev) = self.next_within(left).await else {
                panic!(
                    "the stream from node {} ended before the awaited event; read meanwhile: {out:#?}",
                    self.node
                );
            };
            let done = pred(&ev);
            out.push(ev);
            if done {
                return out;
            }
        }
    }

    /// Reads what is left until the stream ends (its node died); fails the test if it does
    /// not end within `wait`. Returns the events read meanwhile.
    pub async fn until_end(&mut self, wait: Duration) -> Vec<Ev> {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the stream from node {} did not end within {wait:?}",
                self.node
            );
            match self.next_within(left).await {
                Some(ev) => out.push(ev),
                None => return out,
            }
        }
    }

    /// The id of the last event read (what a reconnect sends as `Last-Event-ID`).
    pub fn last_id(&self) -> Option<String> {
        self.seen.last().map(|e| e.id.clone())
    }

    async fn read_one(&mut self) -> Option<Ev> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                return Some(ev);
            }
            if self.ended {
                return None;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    self.buf.extend_from_slice(&chunk);
                    self.parse();
                }
                Some(Err(_)) | None => self.ended = true,
            }
        }
    }

    /// Cuts complete events (blank-line terminated) out of the buffer; comments (heartbeats)
    /// and blocks without data are skipped.
    fn parse(&mut self) {
        loop {
            let text = &self.buf[..];
            let Some((end, sep)) = find_blank_line(text) else {
                return;
            };
            let block = String::from_utf8_lossy(&text[..end]).into_owned();
            self.buf.drain(..end + sep);
            let (mut id, mut event, mut data) = (None, None, Vec::new());
            for line in block.lines() {
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => id = Some(value.to_owned()),
                    "event" => event = Some(value.to_owned()),
                    "data" => data.push(value.to_owned()),
                    _ => {}
                }
            }
            if data.is_empty() {
                continue;
            }
            let id = id.unwrap_or_default();
            let seq = seq_of(&id);
            let snapshot = match (self.prev_seq, &self.opened_after) {
                (Some(prev), _) => seq == Some(prev),
                (None, Some(after)) => seq == seq_of(after),
                (None, None) => true,
            };
            self.prev_seq = seq;
            self.ready.push_back(Ev {
                id,
                event,
                data: data.join("\n"),
                snapshot,
                node: self.node.clone(),
            });
        }
    }
}

/// Where the first event of `b` ends: the index of its blank line and the separator's length.
fn find_blank_line(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"\n\n") {
            return Some((i, 2));
        }
        if b[i..].starts_with(b"\r\n\r\n") {
            return Some((i, 4));
        }
        i += 1;
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Checks

/// The kinds of `evs`, in order.
pub fn kinds(evs: &[Ev]) -> Vec<String> {
    evs.iter().map(Ev::kind).collect()
}

/// Checks the events one client read, over one connection or several (each reconnect sending
/// the last id it had read as `Last-Event-ID`), joined in the order read:
///
/// - every id has one epoch, and no `resync_required` came;
/// - the events published to the session (not the snapshot) have ids 1 apart: no gap, no
///   duplicate, across every reconnect;
/// - a snapshot event (a `task_state` or an `approval_request`) reuses the id of the event
///   before it, and only snapshot events repeat an id.
///
/// Returns the published events (the snapshot ones left out), in order.
pub fn assert_contiguous(evs: &[Ev]) -> Vec<Ev> {
    assert!(!evs.is_empty(), "no events to check");
    let epoch = evs[0].epoch().to_owned();
    let mut base: Option<u64> = None;
    let mut published = Vec::new();
    let show = |at: usize| {
        evs[at.saturating_sub(3)..(at + 2).min(evs.len())]
            .iter()
            .map(|e| format!("{} [{}] {} {}", e.id, e.node, e.kind(), short(&e.data)))
            .collect::<Vec<_>>()
            .join("\n  ")
    };
    for (at, e) in evs.iter().enumerate() {
        assert_eq!(
            e.epoch(),
            epoch,
            "another epoch at event {at}:\n  {}",
            show(at)
        );
        assert_ne!(
            e.kind(),
            "resync_required",
            "resync_required at event {at}: events were lost:\n  {}",
            show(at)
        );
        let seq = e.seq();
        if e.snapshot {
            let k = e.kind();
            assert!(
                e.is_server() && (k == "task_state" || k == "approval_request"),
                "event {at} repeats the id before it but is no snapshot event (a duplicate):\n  {}",
                show(at)
            );
            if let Some(b) = base {
                assert_eq!(
                    seq,
                    b,
                    "snapshot event {at} does not reuse the id before it:\n  {}",
                    show(at)
                );
            }
        } else {
            if let Some(b) = base {
                assert_eq!(
                    seq,
                    b + 1,
                    "event {at}: {} where {epoch}-{} was due (a gap or a duplicate):\n  {}",
                    e.id,
                    b + 1,
                    show(at)
                );
            }
            published.push(e.clone());
        }
        base = Some(seq);
    }
    published
}

/// `published` (events a client read live, snapshots left out) are, id for id, the events
/// `replay` (a full replay from some node) holds: same `event:`, same data.
pub fn assert_same_events(published: &[Ev], replay: &[Ev]) {
    for (k, r) in replay.iter().enumerate() {
        assert_eq!(
            r.seq(),
            k as u64 + 1,
            "a full replay from node {} is not 1, 2, 3, …: {} at position {k}",
            r.node,
            r.id
        );
    }
    for e in published {
        let r = replay
            .get(e.seq() as usize - 1)
            .unwrap_or_else(|| panic!("{} (read from {}) is not in the replay", e.id, e.node));
        assert_eq!(
            (&r.id, &r.event, &r.data),
            (&e.id, &e.event, &e.data),
            "event {} read from {} differs in the replay from {}",
            e.id,
            e.node,
            r.node
        );
    }
}

/// The complete assistant texts among `evs`.
pub fn texts(evs: &[Ev]) -> Vec<String> {
    evs.iter().filter_map(Ev::text).collect()
}

fn short(s: &str) -> String {
    if s.len() <= 120 {
        return s.to_owned();
    }
    let mut end = 120;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
