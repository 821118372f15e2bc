//! A server over one of the facade's factories on a loopback port, a client for its API, and
//! a reader of its SSE streams (penguin-server's own tests have a fuller harness).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use penguin_llm_providers::sse::SseDecoder;
use penguin_server::{router, serve_with_limits, AppState, ServeOptions, SessionFactory};
use serde_json::{json, Value};

/// The token every test server wants.
pub const TOKEN: &str = "test-token-0123456789";

/// How long any one answer or event may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// A served router. Dropping it shuts its sessions and streams down.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// A client without the token.
    pub http: reqwest::Client,
    state: AppState,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.state.shutdown();
    }
}

/// Serves `factory` with its data root at `data_root` on a free loopback port, through the
/// accept loop `penguin serve` uses; `dir`, when given, lives as long as the server.
pub fn serve(
    factory: impl SessionFactory + 'static,
    data_root: &Path,
    dir: Option<tempfile::TempDir>,
) -> impl Future<Output = TestServer> {
    let mut opts = ServeOptions::new(Arc::new(factory));
    opts.data_root = data_root.to_path_buf();
    opts.token = Some(TOKEN.into());
    async move {
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
            http: penguin_llm_providers::http::client_builder()
                .build()
                .unwrap(),
            state,
            _dir: dir,
        }
    }
}

/// The status and JSON body of an answer (`Null` when it has none).
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body; an answer with a body that is not JSON fails the test.
    pub body: Value,
}

impl TestServer {
    /// The directory the server was given to keep.
    pub fn dir(&self) -> &Path {
        self._dir
            .as_ref()
            .expect("a server with a directory")
            .path()
    }

    /// `method path` with the token and, when given, a JSON body.
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let res = within(req.send()).await.unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        let body = match text.is_empty() {
            true => Value::Null,
            false => serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("non-JSON body {text:?}: {e}")),
        };
        Reply { status, body }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// A new session in approval `mode`; its id.
    pub async fn create(&self, mode: &str) -> String {
        let r = self
            .post("/api/sessions", json!({"approvalMode": mode}))
            .await;
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

    /// `GET /api/sessions/{id}/messages`, the whole body.
    pub async fn history(&self, id: &str) -> Value {
        let r = self.get(&format!("/api/sessions/{id}/messages")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    }

    /// Polls (bounded) until the session is idle and `done` holds for its history.
    pub async fn history_until(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        for _ in 0..400 {
            let h = self.history(id).await;
            let msgs = h["messages"].as_array().cloned().unwrap_or_default();
            let s = self.get(&format!("/api/sessions/{id}")).await.body;
            if s["session"]["state"] == "idle" && done(&msgs) {
                return msgs;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for the history");
    }

    /// The session's SSE stream.
    pub async fn stream(&self, id: &str) -> Sse {
        let res = within(
            self.http
                .get(format!("{}/api/sessions/{id}/stream", self.base))
                .bearer_auth(TOKEN)
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(res.status().as_u16(), 200);
        Sse {
            body: res.bytes_stream().map(|c| c.map(|b| b.to_vec())).boxed(),
            decoder: SseDecoder::new(),
            ready: Default::default(),
            seen: Vec::new(),
        }
    }
}

/// One SSE event: its `event:` name and its data.
#[derive(Clone, Debug, PartialEq)]
pub struct Ev {
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

    /// A `server_event`, not an OmniMessage.
    pub fn is_server(&self) -> bool {
        self.event.as_deref() == Some("server_event")
    }

    /// The `type` of a server event, or the payload type of an OmniMessage.
    pub fn kind(&self) -> String {
        let v = self.json();
        match self.is_server() {
            true => v["type"].as_str().unwrap().to_owned(),
            false => v["payload"]["type"].as_str().unwrap().to_owned(),
        }
    }

    /// A `task_state` event in `state`.
    pub fn is_state(&self, state: &str) -> bool {
        self.kind() == "task_state" && self.json()["state"] == state
    }
}

/// The kinds of `evs`, in order.
pub fn kinds(evs: &[Ev]) -> Vec<String> {
    evs.iter().map(Ev::kind).collect()
}

/// An open SSE stream, read event by event; every event read is kept in `seen`.
pub struct Sse {
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    decoder: SseDecoder,
    ready: std::collections::VecDeque<Ev>,
    /// Every event returned so far, in order.
    pub seen: Vec<Ev>,
}

impl Sse {
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

/// Lowers this process's soft limit of open files to 256 (the hard one stays): the server
/// must work within a small descriptor budget.
pub fn low_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("read the open-file limit");
    setrlimit(Resource::RLIMIT_NOFILE, 256.min(hard), hard).expect("lower the open-file limit");
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
