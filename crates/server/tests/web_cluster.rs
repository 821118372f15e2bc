//! The web app, unchanged, against any node of a cluster: two in-process servers (nodes `a`
//! and `b`, each with a data root of its own, one shared workspace, one token) joined over a
//! real 3-node nats-server cluster with JetStream, and a headless Chromium signed in to node
//! `b` only, driving sessions that node `a` owns (see `docs/cluster.md`).
//!
//! These need Chromium and chromedriver (`scripts/install-browser.sh`) and nats-server
//! (`scripts/install-nats.sh`), so they are opt-in:
//!
//! ```sh
//! cargo test -p penguin-server --features cluster --test web_cluster -- --ignored --test-threads=1
//! ```
//!
//! Every wait is polled with a bound ([`support::WAIT`]); every step writes a screenshot under
//! `target/web-screenshots/<test>/`.

#![cfg(all(feature = "cluster", feature = "testing"))]

mod support;

#[path = "../../cluster/tests/support/mod.rs"]
mod nats;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use penguin_cluster::Cluster;
use penguin_server::web::sign_in_url;
use penguin_server::{ServeError, ServeOptions, Server};
use serde_json::{json, Value};
use support::browser::{
    assert_page_matches, request, segment, text_request, tool_call, tool_output, Browser,
};
use support::{FakeFactory, TestDir, TestServer, TOKEN, WAIT};

/// The nodes' lease: short, so nothing waits long (a graceful stop releases it anyway).
const LEASE: Duration = Duration::from_secs(3);

/// What both nodes play, request by request (a session's script starts again from request 1
/// on a node that takes it over):
///
/// 1. a streamed text, [`COUNTED`], in four deltas;
/// 2. a text and a `bash` call `call_1` (asked in an `always-ask` session);
/// 3. after its output `one\n`: [`RAN`].
fn scenario() -> Value {
    json!({
        "llm": [
            request(vec![segment("text", &["The colony ", "counts ", "forty ", "penguins."])], 100),
            request(vec![
                segment("text", &["I will run one command."]),
                tool_call("bash", "call_1", r#"{"command":"echo one"}"#),
            ], 200),
            text_request(RAN, 300),
        ],
        "tools": {"call_1": tool_output("call_1", &[(10, "one\n")])},
        "runs": []
    })
}

const COUNTED: &str = "The colony counts forty penguins.";
const RAN: &str = "Ran it: one.";

/// One node: its server (the shared harness's client for its API, over the node's own
/// port), how to stop it gracefully, and its handle on the cluster.
struct ClusterNode {
    srv: TestServer,
    cluster: Cluster,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
}

impl ClusterNode {
    /// Node `name` of `nats`, serving `scenario` in `workspace` on a free loopback port
    /// through [`Server::serve`] (so a stop is the graceful one `penguin serve` does).
    async fn start(nats: &nats::NatsCluster, name: &str, workspace: &Path) -> ClusterNode {
        let dir = TestDir::new();
        let factory = FakeFactory::new(scenario(), workspace);
        let mut opts = ServeOptions::new(Arc::new(factory));
        opts.port = 0;
        opts.data_root = dir.data_root();
        opts.token = Some(TOKEN.into());
        let mut config = nats.config(name);
        config.lease_ttl = LEASE;
        config.replicas = 3;
        let cluster = Cluster::connect(config).await.expect("joins the cluster");
        opts.cluster = Some(cluster.clone());
        let data_root = opts.data_root.clone();
        let server = Server::bind(opts).await.expect("binds");
        let addr = server.local_addr();
        let state = server.state().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        ClusterNode {
            srv: TestServer {
                base: format!("http://{addr}"),
                addr,
                data_root,
                workspace: workspace.to_path_buf(),
                http: reqwest::Client::new(),
                state,
                dir,
            },
            cluster,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// Stops the node as Ctrl-C stops `penguin serve`: runs interrupted, streams ended, the
    /// sessions' leases released (so another node takes them at once).
    async fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            tokio::time::timeout(WAIT, served)
                .await
                .expect("the node stops within WAIT")
                .expect("the serve task")
                .expect("serves until stopped");
        }
    }

    /// The node holding `id`'s lease now (a lapsed one counts as none).
    async fn lease_holder(&self, id: &str) -> Option<String> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        self.cluster
            .leases()
            .holder(id)
            .await
            .expect("reads the lease")
            .filter(|h| h.live_at(now_ms))
            .map(|h| h.node)
    }
}

/// A script expression: how many assistant messages on the page read `text`.
fn shown_count(text: &str) -> String {
    format!(
        "[...document.querySelectorAll('#transcript .msg.assistant .body')].filter(e => e.textContent === {}).length",
        json!(text)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium (scripts/install-browser.sh) and nats-server (scripts/install-nats.sh), then --ignored"]
async fn a_page_on_one_node_drives_a_session_another_node_owns_and_survives_its_stop() {
    if !nats::nats_available("web_cluster") {
        return;
    }
    let nats = nats::NatsCluster::start(3).await;
    let shared = TestDir::new();
    let mut a = ClusterNode::start(&nats, "a", &shared.workspace()).await;
    let mut b = ClusterNode::start(&nats, "b", &shared.workspace()).await;

    // Signed in to b only: its list loads (empty), and the page is never reloaded from here
    // on (the marker would go), so everything after arrives live.
    let mut br = Browser::start("cluster-page-on-node-b").await;
    br.goto(&sign_in_url(b.srv.addr, TOKEN)).await;
    br.until(
        "b's session list",
        "return document.getElementById('app').dataset.loaded === 'true'",
    )
    .await;
    br.js("window.penguinNoReload = true; return true").await;
    br.shot("b-empty-list").await;

    // A session created over a's API (a owns it) shows up in b's list: b's /api/events
    // relays what a announced.
    let id = a.srv.create("always-ask").await;
    assert_eq!(a.lease_holder(&id).await.as_deref(), Some("a"));
    let row = format!("li[data-session=\"{id}\"]");
    br.until(
        "a's session in b's list",
        &format!("return !!document.querySelector('{row}')"),
    )
    .await;
    br.shot("a-session-in-b-list").await;

    // Opened on b: its page loads through b (forwarded to a).
    br.click(&format!("{row} .title a")).await;
    br.until(
        "the session's page on b",
        &format!(
            "return location.pathname === '/sessions/{id}' && document.getElementById('app').dataset.history === 'loaded'"
        ),
    )
    .await;
    let meta = br.text_of(".session-meta").await;
    assert!(!meta.contains("null"), "the session header reads {meta:?}");
    br.shot("session-open-on-b").await;

    // A prompt from b's composer runs on a, and its answer streams into b's page.
    br.send("How many penguins?").await;
    br.until(
        "a's answer on b's page",
        &format!(
            "return document.getElementById('app').dataset.state === 'idle' && {} === 1",
            shown_count(COUNTED)
        ),
    )
    .await;
    br.shot("answer-streamed-from-a").await;
    assert_eq!(a.lease_holder(&id).await.as_deref(), Some("a"));

    // A tool call asks on b's page; allowing it there reaches a's engine.
    br.send("Run the command").await;
    br.card_status("call_1", "awaiting approval").await;
    br.until(
        "the approvals bar",
        "return !!document.querySelector('.approvals .approval-row[data-call-id=call_1]')",
    )
    .await;
    br.shot("call-asks-on-b").await;
    br.click(".card[data-call-id=call_1] button[data-action=allow]")
        .await;
    br.card_status("call_1", "done").await;
    br.until(
        "the answer after the tool",
        &format!(
            "return document.getElementById('app').dataset.state === 'idle' && document.body.innerText.includes({})",
            json!(RAN)
        ),
    )
    .await;
    br.until(
        "the approvals bar to empty",
        "return document.querySelector('.approvals').hidden",
    )
    .await;
    br.shot("allowed-from-b").await;

    // Both nodes give the same history (a's own, and b's forwarded to a), and b's page shows
    // exactly it.
    let history = a.srv.until_history(&id, |m| texts(m, RAN) == 1).await;
    assert_eq!(b.srv.messages(&id).await, history);
    let decision = history.iter().find(|m| {
        m["payload"]["type"] == "approval_decision" && m["payload"]["tool_call_id"] == "call_1"
    });
    assert_eq!(
        decision.map(|m| m["payload"]["decision"].clone()),
        Some(json!("allow"))
    );
    let output = history.iter().find(|m| {
        m["payload"]["type"] == "tool_call_output" && m["payload"]["tool_call_id"] == "call_1"
    });
    assert_eq!(
        output.map(|m| m["payload"]["output"].clone()),
        Some(json!("one\n"))
    );
    assert_eq!(a.lease_holder(&id).await.as_deref(), Some("a"));
    assert_page_matches(&mut br, &history).await;

    // a stops gracefully: it hands the session over (its lease released at once).
    a.shut_down().await;
    assert_eq!(
        a.lease_holder(&id).await,
        None,
        "a released the lease as it stopped"
    );

    // The next prompt from the same page runs on b (its script starts again: request 1),
    // and the page shows it.
    let sent = Instant::now();
    br.send("Count them again").await;
    br.until(
        "b's answer on its page",
        &format!(
            "return document.getElementById('app').dataset.state === 'idle' && {} === 2",
            shown_count(COUNTED)
        ),
    )
    .await;
    let took = sent.elapsed();
    br.shot("answer-from-b-after-a-stopped").await;
    assert_eq!(b.lease_holder(&id).await.as_deref(), Some("b"));
    eprintln!("web_cluster: the prompt after a's stop was answered on b in {took:?}");
    let history = b.srv.until_history(&id, |m| texts(m, COUNTED) == 2).await;
    assert_page_matches(&mut br, &history).await;
    assert_eq!(
        br.js("return window.penguinNoReload === true").await,
        json!(true),
        "the page was reloaded: what it shows did not all arrive live"
    );
    br.close().await;
    b.shut_down().await;
}

/// How many complete texts `text` `history` holds.
fn texts(history: &[Value], text: &str) -> usize {
    history
        .iter()
        .filter(|m| m["payload"]["type"] == "text" && m["payload"]["text"] == text)
        .count()
}
