//! A test harness for servers and their clients (feature `testing`): a server on a loopback
//! port through the accept loop `penguin serve` uses, a client for its API, and a reader of its
//! SSE streams. penguin-server's own tests use it with sessions of their own; a crate that
//! hosts its sessions behind the server (a [`SessionFactory`] of its own) tests them with it.
//!
//! ```no_run
//! # async fn example(factory: std::sync::Arc<dyn penguin_server::SessionFactory>) {
//! use penguin_server::testing::{serve, TestDir};
//!
//! let srv = serve(TestDir::new(), factory, |_options| {}).await;
//! let id = srv.create("allow-all").await;
//! let mut stream = srv.stream(&id, None).await;
//! assert_eq!(srv.task(&id, "hello").await.status, 202);
//! stream.until(|ev| ev.is_state("idle")).await;
//! # }
//! ```
//!
//! Everything here fails the test (panics) rather than return an error: a request or an event
//! that takes longer than [`WAIT`], an answer that is not JSON, a stream that ends early.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::{router, serve_with_limits, AppState, ServeOptions, SessionFactory};
use axum::body::Bytes;
use futures::{Stream, StreamExt};
use penguin_sse_transport::SseDecoder;
use serde_json::{json, Value};

/// The token every test server wants.
pub const TOKEN: &str = "test-token-0123456789";

/// How long any one answer, event or condition may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// A temporary directory holding a workspace (`ws/`) and, by default, the data root (`data/`).
#[derive(Debug)]
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl Default for TestDir {
    fn default() -> TestDir {
        TestDir::new()
    }
}

impl TestDir {
    /// A fresh one, with its workspace created.
    pub fn new() -> TestDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        TestDir { dir }
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `ws/`: the default workspace of its sessions.
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("ws")
    }

    /// `data/`: the server's data root.
    pub fn data_root(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// A served router. Dropping it shuts the server's sessions and streams down.
#[derive(Debug)]
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its data root.
    pub data_root: PathBuf,
    /// The default workspace of its sessions (`dir/ws`).
    pub workspace: PathBuf,
    /// A client without the token.
    pub http: reqwest::Client,
    /// Its state: sweeps, shutdown.
    pub state: AppState,
    /// Where workspace and data root live, as long as the server does.
    pub dir: TestDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.state.shutdown();
    }
}

/// Serves `factory` on a free loopback port, with the data root in `dir` unless `tweak` says
/// otherwise, through the accept loop `penguin serve` uses (`opts.limits` apply).
pub async fn serve(
    dir: TestDir,
    factory: Arc<dyn SessionFactory>,
    tweak: impl FnOnce(&mut ServeOptions),
) -> TestServer {
    let mut opts = ServeOptions::new(factory);
    opts.data_root = dir.data_root();
    opts.token = Some(TOKEN.into());
    tweak(&mut opts);
    let state = AppState::new(&opts, TOKEN);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_with_limits(
        listener,
        router(state.clone()),
        opts.limits.clone(),
        std::future::pending(),
        Duration::ZERO,
    ));
    TestServer {
        base: format!("http://{addr}"),
        addr,
        data_root: opts.data_root.clone(),
        workspace: dir.workspace(),
        http: reqwest::Client::new(),
        state,
        dir,
    }
}

/// The status and JSON body of an answer (`Null` when it has none).
#[derive(Clone, Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body; an answer with a body that is not JSON fails the test.
    pub body: Value,
}

impl TestServer {
    /// Shuts the server down and keeps its directory, for a restarted server to use its data
    /// root.
    pub fn stop(mut self) -> TestDir {
        std::mem::take(&mut self.dir)
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `req` as it is (no token added), bounded by [`WAIT`].
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        let res = within(req.send()).await.unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("non-JSON body {text:?}: {e}"))
        };
        Reply { status, body }
    }

    /// `method path` with the token and, when given, a JSON body.
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        self.send(req).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// `PATCH path` with a JSON body.
    pub async fn patch(&self, path: &str, body: Value) -> Reply {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Reply {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// `POST /api/sessions` with `body`.
    pub async fn create_with(&self, body: Value) -> Reply {
        self.post("/api/sessions", body).await
    }

    /// A new session in approval `mode`; its id.
    pub async fn create(&self, mode: &str) -> String {
        let r = self.create_with(json!({"approvalMode": mode})).await;
        assert_eq!(r.status, 201, "{}", r.body);
        r.body["session"]["id"].as_str().unwrap().to_owned()
    }

    /// `POST /api/sessions/{id}/tasks` with one user text.
    pub async fn task(&self, id: &str, text: &str) -> Reply {
        self.post(
            &format!("/api/sessions/{id}/tasks"),
            json!({"input": [{"type": "text", "text": text}]}),
        )
        .await
    }

    /// `POST /api/sessions/{id}/approvals/{call}` with `decision`.
    pub async fn decide(&self, id: &str, call: &str, decision: &str) -> Reply {
        self.post(
            &format!("/api/sessions/{id}/approvals/{call}"),
            json!({"decision": decision}),
        )
        .await
    }

    /// `GET /api/sessions/{id}`'s `session`.
    pub async fn session(&self, id: &str) -> Value {
        let r = self.get(&format!("/api/sessions/{id}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["session"].clone()
    }

    /// `GET /api/sessions/{id}/messages`, the whole body.
    pub async fn history(&self, id: &str) -> Value {
        let r = self.get(&format!("/api/sessions/{id}/messages")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// The messages of [`TestServer::history`].
    pub async fn messages(&self, id: &str) -> Vec<Value> {
        self.history(id).await["messages"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Polls (bounded) until the session is idle.
    pub async fn until_idle(&self, id: &str) {
        self.until_history(id, |_| true).await;
    }

    /// Polls (bounded) until the session is idle and `done` holds for its history.
    pub async fn until_history(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let msgs = self.messages(id).await;
            if self.session(id).await["state"] == "idle" && done(&msgs) {
                return msgs;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for session {id}: {msgs:#?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The session's SSE stream, resuming after `last_event_id` when given.
    pub async fn stream(&self, id: &str, last_event_id: Option<&str>) -> Sse {
        self.sse(&format!("/api/sessions/{id}/stream"), last_event_id)
            .await
    }

    /// Opens the SSE stream at `path` (with the token), checking its status and content type.
    pub async fn sse(&self, path: &str, last_event_id: Option<&str>) -> Sse {
        let mut req = self.http.get(self.url(path)).bearer_auth(TOKEN);
        if let Some(l) = last_event_id {
            req = req.header("last-event-id", l);
        }
        let res = within(req.send()).await.unwrap();
        assert_eq!(res.status().as_u16(), 200);
        assert_eq!(
            res.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse::new(res)
    }
}

/// One SSE event: its id, its `event:` name, its data.
#[derive(Clone, Debug, PartialEq)]
pub struct Ev {
    /// `<epoch>-<seq>`, empty when the event had none.
    pub id: String,
    /// `server_event` for the server's own events; none for OmniMessages.
    pub event: Option<String>,
    /// The JSON text.
    pub data: String,
}

impl Ev {
    /// The data, parsed.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }

    /// A `server_event` (task state, approval request, ...), not an OmniMessage.
    pub fn is_server(&self) -> bool {
        self.event.as_deref() == Some("server_event")
    }

    /// The `type` of a server event, or the payload type of an OmniMessage.
    pub fn kind(&self) -> String {
        let v = self.json();
        match self.is_server() {
            true => v["type"].as_str().unwrap().to_owned(),
            // A session_meta (the head of a child's trace) has no payload type: its own type.
            false => v["payload"]["type"]
                .as_str()
                .or_else(|| v["type"].as_str())
                .unwrap()
                .to_owned(),
        }
    }

    /// A `task_state` event in `state`.
    pub fn is_state(&self, state: &str) -> bool {
        self.is_server() && self.kind() == "task_state" && self.json()["state"] == state
    }

    /// An OmniMessage whose payload text is `text`.
    pub fn says(&self, text: &str) -> bool {
        !self.is_server() && self.json()["payload"]["text"] == text
    }

    /// The sequence number of the id.
    pub fn seq(&self) -> u64 {
        self.id.rsplit_once('-').unwrap().1.parse().unwrap()
    }
}

/// The kinds of `evs`, in order.
pub fn kinds(evs: &[Ev]) -> Vec<String> {
    evs.iter().map(Ev::kind).collect()
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// An open SSE stream, read event by event; every event read is kept in `seen`.
pub struct Sse {
    body: ByteStream,
    decoder: SseDecoder,
    ready: std::collections::VecDeque<Ev>,
    /// Every event returned so far, in order.
    pub seen: Vec<Ev>,
}

impl std::fmt::Debug for Sse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sse")
            .field("ready", &self.ready)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl Sse {
    /// Reads `res`'s body as SSE.
    pub fn new(res: reqwest::Response) -> Sse {
        Sse {
            body: Box::pin(res.bytes_stream()),
            decoder: SseDecoder::new(),
            ready: Default::default(),
            seen: Vec::new(),
        }
    }

    /// The next event (heartbeat comments skipped); fails the test after [`WAIT`].
    pub async fn next(&mut self) -> Ev {
        let ev = within(async {
            loop {
                if let Some(ev) = self.ready.pop_front() {
                    return ev;
                }
                match self.body.next().await {
                    Some(Ok(chunk)) => {
                        let events = self.decoder.feed(&chunk).expect("valid SSE");
                        self.ready.extend(events.into_iter().map(|e| Ev {
                            id: e.id.unwrap_or_default(),
                            event: e.event,
                            data: e.data,
                        }));
                    }
                    Some(Err(e)) => panic!("stream failed: {e}"),
                    None => panic!("stream ended"),
                }
            }
        })
        .await;
        self.seen.push(ev.clone());
        ev
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
}

/// `f`, failing the test when it takes longer than [`WAIT`].
pub async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .expect("timed out waiting for the server")
}

/// Lowers this process's soft limit of open files to `limit` (the hard one stays): the
/// server must work within a small descriptor budget.
pub fn low_open_file_limit(limit: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("read the open-file limit");
    setrlimit(Resource::RLIMIT_NOFILE, limit.min(hard), hard).expect("lower the open-file limit");
}

/// Every file under `dir`.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}
