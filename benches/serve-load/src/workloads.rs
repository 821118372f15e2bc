//! The workloads, each against a server of its own (a fresh data root, and a scenario whose
//! requests fit it):
//!
//! - **sessions**: sessions created one by one and by 50 clients; memory per session that
//!   never ran a task (kept loaded: it has no trace to load again from); one task in each of
//!   them (ends seen on the user channel); memory once all but the idle cache are unloaded;
//!   listing the 10,000 (the first page, every page, the unpaged list); the server restarted on
//!   the same data root (first page cold, memory per unloaded session in a fresh process).
//! - **tasks**: clients, each with its own session, its stream and a keep-alive connection for
//!   requests, each sending a task and waiting on its stream for the task's end (`task_state`
//!   idle) before the next: tasks per second and latency at 10, 100 and 500 clients.
//! - **fan-out**: one task streaming 2,000 text deltas to 100 subscribers of its session, then
//!   to 10,000: every subscriber must get every event; the spread is, per event, the time
//!   between the first and the last subscriber reading it; memory per subscriber.
//! - **served** (`served.rs`): a create and a task after 100, 1,000 and 10,000 sessions served.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Barrier, Semaphore};
use tokio::task::JoinSet;

use crate::client::{next_chunk, Conn, Error, SseEvent, SseReader, Target};
use crate::report::{kib, ms, pct, Report};
use crate::server::{own_cpu, own_cpu_split, raise_open_files, subdir, Launch, Served};

/// What to run.
#[derive(Debug)]
pub struct Config {
    /// The release `penguin` binary.
    pub penguin: PathBuf,
    /// Scratch directory (data roots, workspaces, scenarios, server logs).
    pub dir: PathBuf,
    /// Subscribers of the large fan-out.
    pub subscribers: usize,
    /// Text deltas of the burst task.
    pub burst_deltas: usize,
    /// Sessions served before the served workload's last measurement.
    pub served: usize,
    /// Run one workload alone (`sessions`, `tasks`, `fanout` or `served`).
    pub only: Option<String>,
}

const TOKEN: &str = "penguin-bench-token-0123456789";
/// Sessions of the sessions workload.
const SESSIONS: usize = 10_000;
/// Of those, created one by one.
const SEQUENTIAL: usize = 1_000;
/// Clients creating the rest, and running their first tasks.
const CREATORS: usize = 50;
/// Timed tasks per concurrency level.
const TASKS_PER_LEVEL: usize = 3_000;
const LEVELS: [usize; 3] = [10, 100, 500];
/// Stream connections opened at once while subscribing.
const CONNECTING: usize = 256;
/// Longest any one phase may take.
const PHASE_LIMIT: Duration = Duration::from_secs(120);

/// Runs every workload.
pub async fn run(cfg: &Config, report: &mut Report) -> Result<(), Error> {
    let files = raise_open_files();
    report.note(format!(
        "client: open-file limit {files}, 2 tokio workers; server: `penguin serve` release, default limits, durability `commit`"
    ));
    std::fs::create_dir_all(&cfg.dir).map_err(|e| format!("{}: {e}", cfg.dir.display()))?;
    let wanted = |name: &str| cfg.only.as_deref().is_none_or(|o| o == name);
    if wanted("sessions") {
        sessions(cfg, report).await?;
    }
    if wanted("tasks") {
        tasks(cfg, report).await?;
    }
    if wanted("fanout") {
        fanout(cfg, report).await?;
    }
    if wanted("served") {
        crate::served::run(cfg, report).await?;
    }
    Ok(())
}

pub(crate) fn launch(cfg: &Config, name: &str, requests: Vec<Value>) -> Result<Launch, Error> {
    let dir = subdir(&cfg.dir, name)?;
    let scenario = dir.join("scenario.json");
    let text = json!({"llm": requests, "tools": {}, "runs": []}).to_string();
    std::fs::write(&scenario, text).map_err(|e| e.to_string())?;
    Ok(Launch {
        penguin: cfg.penguin.clone(),
        home: dir.join("home"),
        workspace: dir.join("ws"),
        scenario,
        token: TOKEN.into(),
        log: dir.join("server.log"),
        args: Vec::new(),
    })
}

fn step(message: Value) -> Value {
    json!({"delay_ms": 0, "message": message})
}

fn model(payload: Value) -> Value {
    step(json!({"type": "model_msg", "payload": payload}))
}

fn usage() -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": 1, "total": 1});
    step(
        json!({"type": "event_msg", "payload": {"type": "token_usage", "session": c, "request": c}}),
    )
}

/// A request answering "ok" at once.
pub(crate) fn tiny() -> Value {
    json!({"stream": [
        model(json!({"type": "text", "role": "assistant", "text": "ok", "stop_reason": "completed"})),
        usage(),
    ]})
}

/// A request streaming `n` text deltas at once.
fn burst(n: usize) -> Value {
    let part = |kind: &str, text: &str| {
        model(
            json!({"type": "partial_text", "role": "assistant", "event_type": kind,
                     "text": text, "stop_reason": "completed"}),
        )
    };
    let mut s = vec![part("start", "")];
    s.extend((0..n).map(|_| part("delta", "tok ")));
    s.push(part("stop", ""));
    s.push(model(
        json!({"type": "text", "role": "assistant", "text": "tok ".repeat(n), "stop_reason": "completed"}),
    ));
    s.push(usage());
    json!({ "stream": s })
}

pub(crate) async fn create(c: &mut Conn) -> Result<String, Error> {
    let body = c.ok("POST", "/api/sessions", Some("{}".into())).await?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("create: {e}"))?;
    v["session"]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("create: no session id in {v}"))
}

pub(crate) const TASK: &str = r#"{"input":[{"type":"text","text":"go"}]}"#;

pub(crate) async fn post_task(c: &mut Conn, id: &str) -> Result<(), Error> {
    c.ok(
        "POST",
        &format!("/api/sessions/{id}/tasks"),
        Some(TASK.into()),
    )
    .await
    .map(drop)
}

/// `n` sessions created by `workers` clients.
async fn create_many(t: &Target, n: usize, workers: usize) -> Result<Vec<String>, Error> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for _ in 0..workers.min(n) {
        let (t, next) = (t.clone(), next.clone());
        set.spawn(async move {
            let mut c = Conn::open(&t).await?;
            let mut ids = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                ids.push(create(&mut c).await?);
            }
            Ok::<_, Error>(ids)
        });
    }
    let mut all = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        all.extend(r.map_err(|e| e.to_string())??);
    }
    Ok(all)
}

pub(crate) async fn limited<T>(
    what: &str,
    f: impl std::future::Future<Output = T>,
) -> Result<T, Error> {
    tokio::time::timeout(PHASE_LIMIT, f)
        .await
        .map_err(|_| format!("{what}: did not finish within {PHASE_LIMIT:?}"))
}

pub(crate) fn is_task_state(ev: &SseEvent<'_>) -> bool {
    ev.event() == b"server_event" && ev.data_has(b"\"type\":\"task_state\"")
}

pub(crate) fn is_idle(ev: &SseEvent<'_>) -> bool {
    ev.data_has(b"\"state\":\"idle\"")
}

/// A subscription to a session's stream, past its snapshot.
pub(crate) struct Stream {
    _conn: Conn,
    pub(crate) body: Incoming,
    pub(crate) reader: SseReader,
}

impl Stream {
    /// Subscribes and reads the snapshot (up to its `task_state`).
    pub(crate) async fn open(t: &Target, path: &str) -> Result<Stream, Error> {
        let mut conn = Conn::open(t).await?;
        let resp = conn.request("GET", path, None).await?;
        if !resp.status().is_success() {
            return Err(format!("GET {path}: {}", resp.status()));
        }
        let mut s = Stream {
            _conn: conn,
            body: resp.into_body(),
            reader: SseReader::default(),
        };
        if path.ends_with("/stream") {
            s.until(is_task_state).await?;
        }
        Ok(s)
    }

    /// Reads until `done` says an event ends the wait (later events in its chunk are dropped:
    /// callers wait only where nothing else is sent).
    async fn until(&mut self, mut done: impl FnMut(&SseEvent<'_>) -> bool) -> Result<(), Error> {
        loop {
            let chunk = next_chunk(&mut self.body)
                .await?
                .ok_or("the stream ended")?;
            let mut finished = false;
            self.reader.feed(&chunk, |ev| {
                if !finished && done(ev) {
                    finished = true;
                }
            });
            if finished {
                return Ok(());
            }
        }
    }

    /// Reads until the running task ends.
    pub(crate) async fn task_end(&mut self) -> Result<(), Error> {
        let mut running = false;
        self.until(|ev| {
            if is_task_state(ev) {
                if !is_idle(ev) {
                    running = true;
                } else if running {
                    return true;
                }
            }
            false
        })
        .await
    }
}

pub(crate) fn per_second(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// A session whose task end is awaited: whether it was seen running, and whom to tell.
type Waiter = (bool, Option<oneshot::Sender<()>>);

/// Waits on the user channel for each session's task to end.
#[derive(Default)]
struct Waiters {
    map: Mutex<HashMap<String, Waiter>>,
}

impl Waiters {
    fn expect(&self, id: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.map
            .lock()
            .expect("waiters")
            .insert(id.to_owned(), (false, Some(tx)));
        rx
    }

    fn saw(&self, ev: &SseEvent<'_>) {
        if ev.event() != b"server_event" || !ev.data_has(b"\"type\":\"session_state\"") {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(ev.data()) else {
            return;
        };
        let (Some(id), Some(state)) = (v["sessionId"].as_str(), v["state"].as_str()) else {
            return;
        };
        let mut map = self.map.lock().expect("waiters");
        let Some(w) = map.get_mut(id) else { return };
        if state != "idle" {
            w.0 = true;
        } else if w.0 {
            if let Some(tx) = w.1.take() {
                let _ = tx.send(());
            }
            map.remove(id);
        }
    }
}

async fn sessions(cfg: &Config, report: &mut Report) -> Result<(), Error> {
    const S: &str = "sessions";
    let launch = launch(cfg, S, vec![tiny()])?;
    let srv = launch.start().await?;
    let t = srv.target.clone();
    let mut c = Conn::open(&t).await?;
    c.ok("GET", "/api/sessions?limit=1", None).await?;
    settle().await;
    let rss_empty = srv.rss_kib()?;
    report.figure("server_rss_empty_kib", rss_empty);

    let began = Instant::now();
    let mut ids = Vec::with_capacity(SESSIONS);
    for _ in 0..SEQUENTIAL {
        ids.push(create(&mut c).await?);
    }
    let one = per_second(SEQUENTIAL, began.elapsed());
    report.row(
        S,
        &format!("created one by one ({SEQUENTIAL}, one connection)"),
        format!("{one:.0} sessions/s"),
    );
    report.figure("create_sequential_per_s", one);
    let began = Instant::now();
    let cpu0 = srv.cpu()?;
    let rest = SESSIONS - SEQUENTIAL;
    ids.extend(limited("create", create_many(&t, rest, CREATORS)).await??);
    let wall = began.elapsed();
    let many = per_second(rest, wall);
    let cpu = srv.cpu()?.saturating_sub(cpu0);
    report.row(
        S,
        &format!("created by {CREATORS} clients ({rest})"),
        format!(
            "{many:.0} sessions/s, server CPU {:.0} us each",
            cpu.as_secs_f64() * 1e6 / rest as f64
        ),
    );
    report.figure("create_concurrent_per_s", many);
    settle().await;
    let rss_created = srv.rss_kib()?;
    let never = (rss_created as f64 - rss_empty as f64) / SESSIONS as f64;
    report.row(
        S,
        "memory per idle session that never ran a task (loaded)",
        format!(
            "{} ({} RSS for {SESSIONS})",
            kib(never),
            kib(rss_created as f64)
        ),
    );
    report.figure("memory_per_session_never_ran_kib", never);

    // One task in each, ends seen on the user channel.
    let waiters = Arc::new(Waiters::default());
    let mut events = Stream::open(&t, "/api/events").await?;
    let w = waiters.clone();
    let watcher = tokio::spawn(async move {
        loop {
            match next_chunk(&mut events.body).await {
                Ok(Some(chunk)) => events.reader.feed(&chunk, |ev| w.saw(ev)),
                _ => return,
            }
        }
    });
    let next = Arc::new(AtomicUsize::new(0));
    let ids = Arc::new(ids);
    let began = Instant::now();
    let cpu0 = srv.cpu()?;
    let mut set = JoinSet::new();
    for _ in 0..CREATORS {
        let (t, next, ids, waiters) = (t.clone(), next.clone(), ids.clone(), waiters.clone());
        set.spawn(async move {
            let mut c = Conn::open(&t).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else {
                    return Ok::<_, Error>(());
                };
                let done = waiters.expect(id);
                post_task(&mut c, id).await?;
                done.await.map_err(|_| "the user channel ended")?;
            }
        });
    }
    limited("first tasks", async {
        while let Some(r) = set.join_next().await {
            r.map_err(|e| e.to_string())??;
        }
        Ok::<_, Error>(())
    })
    .await??;
    let wall = began.elapsed();
    let cpu = srv.cpu()?.saturating_sub(cpu0);
    watcher.abort();
    report.row(
        S,
        &format!("first task of each, {CREATORS} clients (a trace each)"),
        format!(
            "{:.0} tasks/s, server CPU {:.2} ms each",
            per_second(SESSIONS, wall),
            cpu.as_secs_f64() * 1e3 / SESSIONS as f64
        ),
    );
    report.figure("first_task_per_s", per_second(SESSIONS, wall));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_ran = srv.rss_kib()?;
    let ran = (rss_ran as f64 - rss_empty as f64) / SESSIONS as f64;
    report.row(
        S,
        "memory per idle session after its task (all but 32 unloaded)",
        format!(
            "{} ({} RSS; threads {}, fds {})",
            kib(ran),
            kib(rss_ran as f64),
            srv.threads()?,
            srv.fds()
        ),
    );
    report.figure("memory_per_session_ran_kib", ran);

    // A fresh connection: the server closes one left idle through the tasks (each of which
    // loads its session again, so they take a while).
    let mut c = Conn::open(&t).await?;
    list(&mut c, report, "listing").await?;
    drop(c);
    srv.stop();

    // Restarted on the same data root: the list comes from the traces.
    let srv = launch.start().await?;
    let mut c = Conn::open(&srv.target).await?;
    let began = Instant::now();
    let body = c.ok("GET", "/api/sessions?limit=50", None).await?;
    let cold = began.elapsed();
    check_page(&body, 50)?;
    report.row(
        S,
        &format!("restarted: listening after / first page of {SESSIONS}"),
        format!("{} / {}", ms(srv.started_in), ms(cold)),
    );
    report.figure("restart_first_page_ms", cold.as_secs_f64() * 1e3);
    settle().await;
    let rss = srv.rss_kib()?;
    let unloaded = (rss as f64 - rss_empty as f64) / SESSIONS as f64;
    report.row(
        S,
        "restarted: memory per unloaded session (vs an empty server)",
        format!("{} ({} RSS)", kib(unloaded), kib(rss as f64)),
    );
    report.figure("memory_per_session_unloaded_kib", unloaded);
    list(&mut c, report, "restarted").await?;
    // A session loaded again from its trace.
    let mut latencies = Vec::new();
    for id in ids.iter().step_by(SESSIONS / 50).take(50) {
        let began = Instant::now();
        c.ok("GET", &format!("/api/sessions/{id}"), None).await?;
        latencies.push(began.elapsed());
    }
    latencies.sort_unstable();
    report.row(
        S,
        "restarted: GET one unloaded session (loads it), 50 of them",
        format!(
            "p50 {}, max {}",
            ms(pct(&latencies, 50.0)),
            ms(pct(&latencies, 100.0))
        ),
    );
    srv.stop();
    Ok(())
}

fn check_page(body: &[u8], expect: usize) -> Result<Value, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("list: {e}"))?;
    let n = v["sessions"].as_array().map_or(0, Vec::len);
    if n != expect {
        return Err(format!("list: {n} sessions in a page, expected {expect}"));
    }
    Ok(v)
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The first page (20 times), every page, and the unpaged list.
async fn list(c: &mut Conn, report: &mut Report, label: &str) -> Result<(), Error> {
    const S: &str = "sessions";
    let mut firsts = Vec::new();
    for _ in 0..20 {
        let began = Instant::now();
        let body = c.ok("GET", "/api/sessions?limit=50", None).await?;
        firsts.push(began.elapsed());
        check_page(&body, 50)?;
    }
    firsts.sort_unstable();
    report.row(
        S,
        &format!("{label}: first page of 50 of {SESSIONS}, 20 times"),
        format!(
            "p50 {}, max {}",
            ms(pct(&firsts, 50.0)),
            ms(pct(&firsts, 100.0))
        ),
    );
    report.figure(
        &format!("{label}_first_page_p50_ms"),
        pct(&firsts, 50.0).as_secs_f64() * 1e3,
    );
    let began = Instant::now();
    let (mut seen, mut pages, mut before) = (0, 0, None::<String>);
    loop {
        let path = match &before {
            Some(b) => format!("/api/sessions?limit=50&before={}", encode(b)),
            None => "/api/sessions?limit=50".to_owned(),
        };
        let body = c.ok("GET", &path, None).await?;
        let v: Value = serde_json::from_slice(&body).map_err(|e| format!("list: {e}"))?;
        seen += v["sessions"].as_array().map_or(0, Vec::len);
        pages += 1;
        match v["page"]["before"].as_str() {
            Some(b) if v["page"]["hasMore"].as_bool().unwrap_or(true) => before = Some(b.into()),
            _ => break,
        }
        if pages > SESSIONS {
            return Err("list: the pages do not end".into());
        }
    }
    let walk = began.elapsed();
    if seen != SESSIONS {
        return Err(format!(
            "list: {seen} sessions over {pages} pages, expected {SESSIONS}"
        ));
    }
    report.row(
        S,
        &format!("{label}: every page of 50 ({pages} pages)"),
        format!("{} in all, {} a page", ms(walk), ms(walk / pages as u32)),
    );
    let began = Instant::now();
    let body = c.ok("GET", "/api/sessions", None).await?;
    let whole = began.elapsed();
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("list: {e}"))?;
    let n = v["sessions"].as_array().map_or(0, Vec::len);
    report.row(
        S,
        &format!("{label}: unpaged list"),
        format!("{} for {n} sessions, {} KiB", ms(whole), body.len() / 1024),
    );
    Ok(())
}

async fn tasks(cfg: &Config, report: &mut Report) -> Result<(), Error> {
    const S: &str = "tasks";
    let per_session = TASKS_PER_LEVEL / LEVELS[0] + 1;
    let launch = launch(cfg, S, vec![tiny(); per_session])?;
    let srv = launch.start().await?;
    let t = srv.target.clone();
    for clients in LEVELS {
        let per_client = TASKS_PER_LEVEL / clients;
        let ids = limited("create", create_many(&t, clients, CREATORS)).await??;
        let ready = Arc::new(Barrier::new(clients + 1));
        let go = Arc::new(Barrier::new(clients + 1));
        let mut set = JoinSet::new();
        for id in ids {
            let (t, ready, go) = (t.clone(), ready.clone(), go.clone());
            set.spawn(async move {
                let prepared = async {
                    let mut stream =
                        Stream::open(&t, &format!("/api/sessions/{id}/stream")).await?;
                    let mut api = Conn::open(&t).await?;
                    // A first task, untimed: the session's trace and writer start.
                    post_task(&mut api, &id).await?;
                    stream.task_end().await?;
                    Ok::<_, Error>((stream, api))
                }
                .await;
                ready.wait().await;
                go.wait().await;
                let (mut stream, mut api) = prepared?;
                let mut lat = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let began = Instant::now();
                    post_task(&mut api, &id).await?;
                    stream.task_end().await?;
                    lat.push(began.elapsed());
                }
                Ok::<_, Error>(lat)
            });
        }
        limited("tasks: warm-up", ready.wait()).await?;
        let (cpu0, own0) = (srv.cpu()?, own_cpu());
        let began = Instant::now();
        go.wait().await;
        let mut lat = Vec::with_capacity(TASKS_PER_LEVEL);
        limited("tasks", async {
            while let Some(r) = set.join_next().await {
                lat.extend(r.map_err(|e| e.to_string())??);
            }
            Ok::<_, Error>(())
        })
        .await??;
        let wall = began.elapsed();
        let (cpu, own) = (
            srv.cpu()?.saturating_sub(cpu0),
            own_cpu().saturating_sub(own0),
        );
        lat.sort_unstable();
        let n = lat.len();
        let rate = per_second(n, wall);
        let slow = lat
            .iter()
            .filter(|l| **l > Duration::from_millis(100))
            .count();
        report.row(
            S,
            &format!("{clients} clients, {n} tasks (POST to task_state idle)"),
            format!(
                "{rate:.0} tasks/s, p50 {}, p90 {}, p99 {}, max {}, {slow} over 100 ms; CPU per task: server {:.2} ms, client {:.2} ms",
                ms(pct(&lat, 50.0)),
                ms(pct(&lat, 90.0)),
                ms(pct(&lat, 99.0)),
                ms(pct(&lat, 100.0)),
                cpu.as_secs_f64() * 1e3 / n as f64,
                own.as_secs_f64() * 1e3 / n as f64
            ),
        );
        report.figure(&format!("tasks_{clients}_per_s"), rate);
        report.figure(
            &format!("tasks_{clients}_p50_ms"),
            pct(&lat, 50.0).as_secs_f64() * 1e3,
        );
        report.figure(
            &format!("tasks_{clients}_p99_ms"),
            pct(&lat, 99.0).as_secs_f64() * 1e3,
        );
    }
    srv.stop();
    Ok(())
}

/// What one subscriber read of the burst: its events, and when each chunk of them arrived
/// (ns since the post; the spread is worked out afterwards, not while reading).
struct Read {
    events: usize,
    resync: bool,
    /// (index of the chunk's first event, events in it, when it was read)
    chunks: Vec<(u32, u32, u64)>,
}

async fn read_burst(mut s: Stream, t0: Instant) -> Result<Read, Error> {
    let (mut events, mut running, mut resync, mut done) = (0usize, false, false, false);
    let mut chunks = Vec::new();
    while !done {
        let chunk = next_chunk(&mut s.body).await?.ok_or("the stream ended")?;
        let at = t0.elapsed().as_nanos() as u64;
        let before = events;
        s.reader.feed(&chunk, |ev| {
            if done {
                return;
            }
            events += 1;
            if ev.event() == b"server_event" {
                if ev.data_has(b"resync_required") {
                    resync = true;
                }
                if is_task_state(ev) {
                    if !is_idle(ev) {
                        running = true;
                    } else if running {
                        done = true;
                    }
                }
            }
        });
        if events > before {
            chunks.push((before as u32, (events - before) as u32, at));
        }
    }
    Ok(Read {
        events,
        resync,
        chunks,
    })
}

/// Per event index, when the first and the last subscriber read it.
fn first_last(reads: &[&Read], events: usize) -> (Vec<u64>, Vec<u64>) {
    let (mut first, mut last) = (vec![u64::MAX; events], vec![0u64; events]);
    for r in reads {
        for &(from, n, at) in &r.chunks {
            let from = from as usize;
            let to = (from + n as usize).min(events);
            for i in from..to {
                first[i] = first[i].min(at);
                last[i] = last[i].max(at);
            }
        }
    }
    (first, last)
}

async fn fanout(cfg: &Config, report: &mut Report) -> Result<(), Error> {
    let launch = launch(cfg, "fanout", vec![burst(cfg.burst_deltas)])?;
    let srv = launch.start().await?;
    broadcast(&srv, cfg, 100, report).await?;
    broadcast(&srv, cfg, cfg.subscribers, report).await?;
    srv.stop();
    Ok(())
}

/// One burst task to `n` subscribers of its session.
async fn broadcast(srv: &Served, cfg: &Config, n: usize, report: &mut Report) -> Result<(), Error> {
    const S: &str = "fan-out";
    let t = srv.target.clone();
    let mut api = Conn::open(&t).await?;
    let id = create(&mut api).await?;
    settle().await;
    let (rss0, fds0) = (srv.rss_kib()?, srv.fds());
    let path = format!("/api/sessions/{id}/stream");
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let mut set = JoinSet::new();
    let began = Instant::now();
    for _ in 0..n {
        let (t, path, gate) = (t.clone(), path.clone(), gate.clone());
        set.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|e| e.to_string())?;
            tokio::time::timeout(Duration::from_secs(30), Stream::open(&t, &path))
                .await
                .map_err(|_| "subscribing took over 30 s".to_owned())?
        });
    }
    let mut streams = Vec::with_capacity(n);
    let (mut failed, mut why) = (0, None);
    while let Some(r) = set.join_next().await {
        match r.map_err(|e| e.to_string())? {
            Ok(s) => streams.push(s),
            Err(e) => {
                failed += 1;
                why.get_or_insert(e);
            }
        }
    }
    let subscribed = began.elapsed();
    let m = streams.len();
    if m == 0 {
        return Err(format!("no subscriber connected: {why:?}"));
    }
    settle().await;
    let (rss1, fds1) = (srv.rss_kib()?, srv.fds());
    let per_sub = (rss1 as f64 - rss0 as f64) / m as f64;
    let label = if failed == 0 {
        format!("{m} subscribers")
    } else {
        format!(
            "{m} subscribers ({failed} of {n} failed: {})",
            why.unwrap_or_default()
        )
    };
    report.row(
        S,
        &format!("{label}: subscribed in"),
        format!("{}, server fds {fds0} -> {fds1}", ms(subscribed)),
    );
    report.row(
        S,
        &format!("{label}: memory per subscriber"),
        format!(
            "{} ({} -> {} RSS)",
            kib(per_sub),
            kib(rss0 as f64),
            kib(rss1 as f64)
        ),
    );
    report.figure(&format!("fanout_{n}_connected"), m);
    report.figure(&format!("fanout_{n}_memory_per_subscriber_kib"), per_sub);

    let t0 = Instant::now();
    let mut readers = JoinSet::new();
    for s in streams {
        readers.spawn(read_burst(s, t0));
    }
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (pid, sampling) = (srv.pid(), sampling.clone());
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(Ordering::Relaxed) {
                peak = peak.max(crate::server::rss_of(pid).unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        })
    };
    let (cpu0, own0) = (srv.cpu_split()?, own_cpu_split());
    let posted = t0.elapsed().as_nanos() as u64;
    post_task(&mut api, &id).await?;
    let mut reads = Vec::with_capacity(m);
    limited("burst", async {
        while let Some(r) = readers.join_next().await {
            reads.push(r.map_err(|e| e.to_string())?);
        }
        Ok::<_, Error>(())
    })
    .await??;
    let (cpu1, own1) = (srv.cpu_split()?, own_cpu_split());
    let cpu = (cpu1.0.saturating_sub(cpu0.0), cpu1.1.saturating_sub(cpu0.1));
    let own = (own1.0.saturating_sub(own0.0), own1.1.saturating_sub(own0.1));
    sampling.store(false, Ordering::Relaxed);
    let peak = sampler
        .await
        .map_err(|e| e.to_string())?
        .max(srv.rss_kib()?);
    let errors: Vec<&Error> = reads.iter().filter_map(|r| r.as_ref().err()).collect();
    let ok: Vec<&Read> = reads.iter().filter_map(|r| r.as_ref().ok()).collect();
    let expected = ok.iter().map(|r| r.events).max().unwrap_or(0);
    let complete = ok
        .iter()
        .filter(|r| r.events == expected && !r.resync)
        .count();
    let resynced = ok.iter().filter(|r| r.resync).count();
    let (firsts, lasts) = first_last(&ok, expected);
    let mut spreads: Vec<u64> = firsts
        .iter()
        .zip(&lasts)
        .map(|(f, l)| l.saturating_sub(*f))
        .collect();
    spreads.sort_unstable();
    let first = firsts.first().map_or(0, |f| f.saturating_sub(posted));
    let end = lasts.iter().max().map_or(0, |l| l.saturating_sub(posted));
    let d = Duration::from_nanos;
    let delivered = ok.iter().map(|r| r.events).sum::<usize>();
    report.row(
        S,
        &format!(
            "{label}: a task of {} deltas ({expected} events)",
            cfg.burst_deltas
        ),
        format!(
            "{complete} of {m} got every event, {resynced} resync_required, {} errors{}",
            errors.len(),
            errors.first().map_or(String::new(), |e| format!(" ({e})"))
        ),
    );
    report.row(
        S,
        &format!("{label}: spread per event, first to last subscriber"),
        format!(
            "p50 {}, p99 {}, max {}",
            ms(d(pct(&spreads, 50.0))),
            ms(d(pct(&spreads, 99.0))),
            ms(d(pct(&spreads, 100.0)))
        ),
    );
    report.row(
        S,
        &format!("{label}: POST to first event / to last event at the last subscriber"),
        format!(
            "{} / {}, {:.2} M events/s delivered; CPU (user+system) server {:.2}+{:.2} s, client {:.2}+{:.2} s",
            ms(d(first)),
            ms(d(end)),
            delivered as f64 / d(end.max(1)).as_secs_f64() / 1e6,
            cpu.0.as_secs_f64(),
            cpu.1.as_secs_f64(),
            own.0.as_secs_f64(),
            own.1.as_secs_f64()
        ),
    );
    report.figure(&format!("fanout_{n}_complete"), complete);
    report.figure(
        &format!("fanout_{n}_spread_p50_ms"),
        d(pct(&spreads, 50.0)).as_secs_f64() * 1e3,
    );
    report.figure(
        &format!("fanout_{n}_spread_p99_ms"),
        d(pct(&spreads, 99.0)).as_secs_f64() * 1e3,
    );
    report.figure(
        &format!("fanout_{n}_last_event_ms"),
        d(end).as_secs_f64() * 1e3,
    );
    report.figure(&format!("fanout_{n}_peak_rss_kib"), peak);
    drop(reads);
    settle().await;
    report.row(
        S,
        &format!("{label}: server RSS peak in the burst / once all closed"),
        format!(
            "{} / {}, fds {}",
            kib(peak as f64),
            kib(srv.rss_kib()? as f64),
            srv.fds()
        ),
    );
    Ok(())
}
