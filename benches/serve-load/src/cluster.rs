//! The cluster workload (`--only cluster`; `cargo xtask bench cluster`): 1,000 sessions with
//! one task each (the zero-delay scripted model answering "ok"), run four times on this one
//! machine, every server keeping all 1,000 sessions loaded (`--idle-sessions`):
//!
//! - **plain**: one `penguin serve` without `--cluster` (the baseline);
//! - **1 node R1**: one node on one nats-server (`--replicas 1`), the smallest cluster;
//! - **1 node**: one node of a cluster on three nats-servers (JetStream, R3);
//! - **3 nodes**: three nodes on three nats-servers (R3). Session `i` is created on node
//!   `i % 3`, its stream read from node `i + 1` and its task sent through node `i + 2`, so a
//!   task is forwarded to its owner and a stream served from the replicated events. (A session
//!   its creator unloaded, past `idle_sessions`, has released its lease and is taken by the
//!   first node asked for it: the report says how many moved.)
//!
//! Each time: 50 clients, each taking the next session, subscribing to its stream (up to the
//! snapshot), posting its task and waiting on the stream for the task's end. Reported: tasks
//! per second; task latency (POST to `task_state` idle on the stream); event latency (an
//! OmniMessage's `timestamp`, stamped by the engine when it emitted the message, to the client
//! reading it: millisecond resolution, the same clock); trace records and events per task; CPU
//! per task of the penguin nodes and of the nats-servers; and the replication cost per
//! message, against the plain server (extra latency and extra CPU per task, over the trace
//! records and events each task replicates), and the CPU per task as a multiple of the plain
//! server's. After the tasks, on each cluster: the messages NATS receives in a minute while
//! the 1,000 sessions sit idle (per session), and the replication latency of one record and
//! one event at a time (`replication.rs`).
//!
//! A task that fails (its stream refused, or its end never seen within 30 s) is counted and
//! named in the table, the others go on, and the run ends with an error. A stream refused with
//! 404 or 503, or a POST answered 503 ("try again"), is tried again a few times first (counted
//! in a note). Without `nats-server` on the PATH the workload says so and is skipped.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::task::JoinSet;

use crate::client::{next_chunk, Conn, Error, SseReader, Target};
use crate::replication;
use crate::report::{ms, pct, Report};
use crate::server::{cpu_split_of, own_cpu, raise_open_files, subdir, Served};
use crate::workloads::{
    create, is_idle, is_task_state, launch, limited, per_second, post_task, tiny, Config, TASK,
};

/// Longest one task may take (POST to its end on the stream) before the run stops and says
/// which session it was.
const TASK_LIMIT: Duration = Duration::from_secs(30);
/// Longest the task phase of one setup may take.
const PHASE_LIMIT: Duration = Duration::from_secs(300);
/// Sessions, one task each.
const SESSIONS: usize = 1_000;
/// Clients at once.
const CLIENTS: usize = 50;
const S: &str = "cluster";

/// Runs the three setups and compares them.
pub async fn run(cfg: &Config, report: &mut Report) -> Result<(), Error> {
    if !nats_installed() {
        report.note(
            "cluster: nats-server is not installed (bash scripts/install-nats.sh): the cluster workload is skipped",
        );
        return Ok(());
    }
    raise_open_files();
    std::fs::create_dir_all(&cfg.dir).map_err(|e| format!("{}: {e}", cfg.dir.display()))?;
    report.note(format!(
        "cluster: {SESSIONS} sessions, one task each (zero-delay scripted model), {CLIENTS} clients; \
         3 nats-servers (JetStream R3) on this machine for the cluster runs, default lease (10 s)"
    ));
    let plain = setup(cfg, report, 0, 0).await?;
    let single = setup(cfg, report, 1, 1).await?;
    let one = setup(cfg, report, 1, 3).await?;
    let three = setup(cfg, report, 3, 3).await?;
    for (label, c) in [
        ("1 node R1", &single),
        ("1 node", &one),
        ("3 nodes", &three),
    ] {
        cost(report, label, &plain, c);
    }
    let failed = plain.failed + single.failed + one.failed + three.failed;
    report.note(
        "cluster: event latency is an OmniMessage's `timestamp` (stamped by the engine as it \
         emits the message, millisecond resolution) to the moment the client read it, on one \
         clock; in the cluster it includes the publish to JetStream (acknowledged by a quorum) \
         and, on 3 nodes, the delivery to the node serving the stream",
    );
    report.note(
        "cluster: replication cost per message = (task latency p50, or CPU per task of penguin \
         and nats together, minus the plain server's) / (trace records + events the task \
         replicated); what queues while a session's publish is in flight goes out in its next \
         (one message, one acknowledgement)",
    );
    if failed > 0 {
        return Err(format!(
            "cluster: {failed} tasks failed (plain {}, 1 node R1 {}, 1 node {}, 3 nodes {}); see \
             the table",
            plain.failed, single.failed, one.failed, three.failed
        ));
    }
    Ok(())
}

fn nats_installed() -> bool {
    Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What one setup measured.
#[derive(Debug, Default)]
struct Measured {
    /// Task latencies, sorted.
    tasks: Vec<Duration>,
    /// Event latencies (ms), sorted.
    events: Vec<u64>,
    /// Tasks per second.
    rate: f64,
    /// Trace records per session (one task each).
    records: f64,
    /// Events published per task (snapshots left out).
    published: f64,
    /// Tasks that failed (refused, or never ended on the stream).
    failed: usize,
    /// CPU per task: penguin nodes, nats-servers.
    cpu_penguin: Duration,
    cpu_nats: Duration,
}

/// How long the sessions sit idle while NATS's traffic is counted.
const IDLE: Duration = Duration::from_secs(20);
/// How long after the last task the count starts: the streams closed with their tasks, a
/// server stops following one within 5 s of its last client (each follower asks the stream
/// about a silence of 3 s before that), and JetStream removes the follower's consumer 30 s
/// after its last pull (on a clustered JetStream, a few routed messages each): the aftermath
/// of the tasks, not idle traffic.
const SETTLE: Duration = Duration::from_secs(40);

/// One setup: `nodes` 0 is the plain server, else that many cluster nodes on `servers`
/// nats-servers (as many replicas, up to 3).
async fn setup(
    cfg: &Config,
    report: &mut Report,
    nodes: usize,
    servers: usize,
) -> Result<Measured, Error> {
    let label = match (nodes, servers) {
        (0, _) => "plain".to_owned(),
        (1, 1) => "1 node R1".to_owned(),
        (1, _) => "1 node".to_owned(),
        (n, _) => format!("{n} nodes"),
    };
    let name = format!("cluster-{}", label.replace(' ', "-"));
    let dir = subdir(&cfg.dir, &name)?;
    let nats = if nodes == 0 {
        None
    } else {
        Some(Nats::start(&dir.join("nats"), servers).await?)
    };
    let (mut served, mut homes) = (Vec::new(), Vec::<PathBuf>::new());
    for i in 0..nodes.max(1) {
        let mut l = launch(cfg, &format!("{name}/node{i}"), vec![tiny()])?;
        // One workspace for every node (a cluster's nodes share one).
        l.workspace = dir.join("ws");
        // Every session stays loaded (and, on a node, held) after its task: the idle
        // traffic below is that of all of them.
        l.args = vec!["--idle-sessions".into(), SESSIONS.to_string()];
        if let Some(n) = &nats {
            l.args.extend([
                "--cluster".into(),
                n.urls.join(","),
                "--node".into(),
                format!("n{i}"),
                "--cluster-secret-file".into(),
                n.secret_file.display().to_string(),
                "--replicas".into(),
                servers.min(3).to_string(),
            ]);
        }
        let s = l.start().await?;
        wait_answers(&s.target).await?;
        served.push(s);
        homes.push(l.home);
    }
    let targets: Vec<Target> = served.iter().map(|s| s.target.clone()).collect();

    // The sessions, each created on node i % n.
    let began = Instant::now();
    let ids = limited("cluster: create", create_on(&targets)).await??;
    let created = per_second(SESSIONS, began.elapsed());
    report.row(
        S,
        &format!("{label}: {SESSIONS} sessions created by {CLIENTS} clients"),
        format!("{created:.0} sessions/s"),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    let cpu = |served: &[Served], nats: &Option<Nats>| {
        let p: Duration = served.iter().map(|s| s.cpu().unwrap_or_default()).sum();
        (p, nats.as_ref().map_or(Duration::ZERO, Nats::cpu))
    };
    let (p0, n0) = cpu(&served, &nats);
    let msgs0 = match &nats {
        Some(n) => n.in_msgs().await?,
        None => 0,
    };
    let own0 = own_cpu();
    let began = Instant::now();
    let (results, failed) = tokio::time::timeout(PHASE_LIMIT, run_tasks(&targets, ids))
        .await
        .map_err(|_| {
            format!("cluster, {label}: the tasks did not finish within {PHASE_LIMIT:?}")
        })??;
    let wall = began.elapsed();
    let (p1, n1) = cpu(&served, &nats);
    let own = own_cpu().saturating_sub(own0);
    let msgs = match &nats {
        Some(n) => n.in_msgs().await?.saturating_sub(msgs0),
        None => 0,
    };

    let done = results.len();
    if nats.is_some() {
        let per_task = msgs as f64 / done.max(1) as f64;
        report.row(
            S,
            &format!("{label}: NATS messages per task"),
            format!("{per_task:.1} into the nats-servers (routes between servers included)"),
        );
        report.figure(
            &format!("cluster_{}_nats_msgs_per_task", label.replace(' ', "_")),
            per_task,
        );
    }
    let mut m = Measured {
        rate: per_second(done, wall),
        failed: failed.len(),
        cpu_penguin: p1.saturating_sub(p0) / done.max(1) as u32,
        cpu_nats: n1.saturating_sub(n0) / done.max(1) as u32,
        ..Measured::default()
    };
    let (mut published, mut retried, mut refused) = (0, 0, 0);
    let mut first_refusal = None;
    for r in results {
        m.tasks.push(r.latency);
        m.events.extend(r.event_ms);
        published += r.published;
        retried += r.refusals.len();
        refused += usize::from(!r.refusals.is_empty());
        if first_refusal.is_none() {
            first_refusal = r.refusals.into_iter().next();
        }
    }
    if let Some(first) = first_refusal {
        report.note(format!(
            "cluster, {label}: {refused} of {SESSIONS} tasks had their stream refused (404 or 503) or their POST answered 503, and were tried again ({retried} retries); the first: {first}"
        ));
    }
    m.tasks.sort_unstable();
    m.events.sort_unstable();
    m.published = published as f64 / done.max(1) as f64;
    if let Some(first) = failed.first() {
        report.row(
            S,
            &format!("{label}: FAILED tasks"),
            format!("{} of {SESSIONS}; the first: {first}", failed.len()),
        );
    }
    // Let the last records reach the files before they are counted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A session's trace may be on two nodes (the one that created it, and one that took it
    // over after the creator unloaded it and released its lease): its fullest copy counts.
    let mut traces = HashMap::new();
    let mut copies = HashMap::new();
    for h in &homes {
        let mut here = HashMap::new();
        trace_lines(h, &mut here);
        for (name, lines) in here {
            *copies.entry(name.clone()).or_insert(0) += 1;
            let n = traces.entry(name).or_insert(0);
            *n = lines.max(*n);
        }
    }
    m.records = traces.values().sum::<usize>() as f64 / SESSIONS as f64;
    let moved = copies.values().filter(|&&c| c > 1).count();
    if moved > 0 {
        report.note(format!(
            "cluster, {label}: {moved} of {SESSIONS} sessions have a trace on more than one node \
             (taken over by another node after their creator unloaded them)"
        ));
    }
    if let Some(n) = &nats {
        idle_traffic(report, &label, n).await?;
        let l = replication::probe(&n.urls, servers.min(3), &n.secret_file).await?;
        let key = label.replace(' ', "_");
        for (what, sorted) in [("record", &l.records), ("event", &l.events)] {
            report.row(
                S,
                &format!("{label}: replication latency of one {what} at a time"),
                format!(
                    "p50 {}, p99 {} (queued to acknowledged, {} {what}s)",
                    ms(pct(sorted, 50.0)),
                    ms(pct(sorted, 99.0)),
                    sorted.len()
                ),
            );
            for p in [50.0, 99.0] {
                report.figure(
                    &format!("cluster_{key}_{what}_p{p}_ms"),
                    pct(sorted, p).as_secs_f64() * 1e3,
                );
            }
        }
    }
    for s in served {
        s.stop();
    }
    drop(nats);

    let t = &m.tasks;
    report.row(
        S,
        &format!("{label}: one task each (POST to task_state idle)"),
        format!(
            "{:.0} tasks/s, p50 {}, p99 {}, max {}; CPU per task: penguin {:.2} ms, nats {:.2} ms, client {:.2} ms",
            m.rate,
            ms(pct(t, 50.0)),
            ms(pct(t, 99.0)),
            ms(pct(t, 100.0)),
            m.cpu_penguin.as_secs_f64() * 1e3,
            m.cpu_nats.as_secs_f64() * 1e3,
            own.as_secs_f64() * 1e3 / SESSIONS as f64,
        ),
    );
    let e = &m.events;
    report.row(
        S,
        &format!("{label}: event latency, engine to SSE client"),
        format!(
            "p50 {} ms, p99 {} ms, max {} ms ({} events)",
            pct(e, 50.0),
            pct(e, 99.0),
            pct(e, 100.0),
            e.len()
        ),
    );
    report.row(
        S,
        &format!("{label}: per session with one task"),
        format!(
            "{:.1} trace records, {:.1} events published (snapshots left out)",
            m.records, m.published
        ),
    );
    let key = label.replace(' ', "_");
    report.figure(&format!("cluster_{key}_tasks_per_s"), m.rate);
    report.figure(
        &format!("cluster_{key}_task_p50_ms"),
        pct(t, 50.0).as_secs_f64() * 1e3,
    );
    report.figure(
        &format!("cluster_{key}_task_p99_ms"),
        pct(t, 99.0).as_secs_f64() * 1e3,
    );
    report.figure(&format!("cluster_{key}_event_p99_ms"), pct(e, 99.0));
    report.figure(&format!("cluster_{key}_records_per_task"), m.records);
    report.figure(&format!("cluster_{key}_events_per_task"), m.published);
    Ok(m)
}

/// The messages NATS receives while every session sits idle, over [`IDLE`] from [`SETTLE`]
/// after the last task.
async fn idle_traffic(report: &mut Report, label: &str, nats: &Nats) -> Result<(), Error> {
    tokio::time::sleep(SETTLE).await;
    let before = nats.in_msgs().await?;
    tokio::time::sleep(IDLE).await;
    let per_minute =
        nats.in_msgs().await?.saturating_sub(before) as f64 * 60.0 / IDLE.as_secs_f64();
    let per_session = per_minute / SESSIONS as f64;
    report.row(
        S,
        &format!("{label}: NATS traffic while the {SESSIONS} sessions are idle"),
        format!(
            "{per_minute:.0} messages a minute into the nats-servers ({per_session:.2} per session \
             per minute; routes between servers included)"
        ),
    );
    let key = label.replace(' ', "_");
    report.figure(&format!("cluster_{key}_idle_msgs_per_min"), per_minute);
    report.figure(
        &format!("cluster_{key}_idle_msgs_per_session_per_min"),
        per_session,
    );
    Ok(())
}

/// The replication cost of `c` against the plain server.
fn cost(report: &mut Report, label: &str, plain: &Measured, c: &Measured) {
    let messages = (c.records + c.published).max(1.0);
    let p50 = |m: &Measured| pct(&m.tasks, 50.0).as_secs_f64() * 1e3;
    let extra_ms = p50(c) - p50(plain);
    let cpu = |m: &Measured| (m.cpu_penguin + m.cpu_nats).as_secs_f64() * 1e6;
    let extra_us = cpu(c) - cpu(plain);
    report.row(
        S,
        &format!("{label}: replication cost per message (vs plain)"),
        format!(
            "{:.3} ms latency, {:.0} us CPU ({:.1} records + {:.1} events a task; task p50 {:+.2} ms, CPU {:+.2} ms)",
            extra_ms / messages,
            extra_us / messages,
            c.records,
            c.published,
            extra_ms,
            extra_us / 1e3
        ),
    );
    let ratio = cpu(c) / cpu(plain).max(1.0);
    report.row(
        S,
        &format!("{label}: CPU per task against the plain server"),
        format!(
            "{ratio:.2}x ({:.2} ms penguin + {:.2} ms nats, plain {:.2} ms)",
            c.cpu_penguin.as_secs_f64() * 1e3,
            c.cpu_nats.as_secs_f64() * 1e3,
            cpu(plain) / 1e3
        ),
    );
    let key = label.replace(' ', "_");
    report.figure(&format!("cluster_{key}_cpu_vs_plain"), ratio);
    report.figure(
        &format!("cluster_{key}_cost_per_message_ms"),
        extra_ms / messages,
    );
    report.figure(
        &format!("cluster_{key}_cpu_per_message_us"),
        extra_us / messages,
    );
}

/// Waits until a node answers `GET /api/sessions` (a cluster node joins NATS first).
async fn wait_answers(t: &Target) -> Result<(), Error> {
    let began = Instant::now();
    loop {
        let ok = match Conn::open(t).await {
            Ok(mut c) => c.ok("GET", "/api/sessions?limit=1", None).await.is_ok(),
            Err(_) => false,
        };
        if ok {
            return Ok(());
        }
        if began.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "{}: no answer to GET /api/sessions in 60 s",
                t.addr
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`SESSIONS`] sessions, session `i` created on node `i % n`, by [`CLIENTS`] clients.
async fn create_on(targets: &[Target]) -> Result<Vec<(usize, String)>, Error> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for _ in 0..CLIENTS {
        let (targets, next) = (targets.to_vec(), next.clone());
        set.spawn(async move {
            let mut conns = Vec::new();
            for t in &targets {
                conns.push(Conn::open(t).await?);
            }
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= SESSIONS {
                    return Ok::<_, Error>(out);
                }
                let n = conns.len();
                out.push((i, create(&mut conns[i % n]).await?));
            }
        });
    }
    let mut all = Vec::with_capacity(SESSIONS);
    while let Some(r) = set.join_next().await {
        all.extend(r.map_err(|e| e.to_string())??);
    }
    all.sort_unstable();
    Ok(all)
}

/// What one session's task measured.
struct TaskRead {
    latency: Duration,
    event_ms: Vec<u64>,
    published: usize,
    /// Why its stream was refused (404 or 503) and opened again, or its POST answered 503
    /// and was sent again, each time.
    refusals: Vec<String>,
}

/// Every session's task: its stream from node `i + 1`, its POST through node `i + 2`. A
/// task that fails is counted (with why) and the others go on.
async fn run_tasks(
    targets: &[Target],
    ids: Vec<(usize, String)>,
) -> Result<(Vec<TaskRead>, Vec<Error>), Error> {
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let mut set = JoinSet::new();
    for _ in 0..CLIENTS {
        let (targets, ids, next) = (targets.to_vec(), ids.clone(), next.clone());
        set.spawn(async move {
            let n = targets.len();
            let mut api = Vec::new();
            for t in &targets {
                api.push(Conn::open(t).await?);
            }
            let (mut out, mut failed) = (Vec::new(), Vec::new());
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some((i, id)) = ids.get(k) else {
                    return Ok::<_, Error>((out, failed));
                };
                let read = &targets[(i + 1) % n];
                let via = (i + 2) % n;
                match one_task(read, &mut api[via], id).await {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        failed.push(e);
                        // The connection may be gone with the failure.
                        api[via] = Conn::open(&targets[via]).await?;
                    }
                }
            }
        });
    }
    let (mut all, mut failed) = (Vec::with_capacity(SESSIONS), Vec::new());
    while let Some(r) = set.join_next().await {
        let (ok, bad) = r.map_err(|e| e.to_string())??;
        all.extend(ok);
        failed.extend(bad);
    }
    Ok((all, failed))
}

/// Subscribes to `id`'s stream on `read`, posts its task through `api`, reads to its end.
async fn one_task(read: &Target, api: &mut Conn, id: &str) -> Result<TaskRead, Error> {
    let api_addr = api.addr();
    let path = format!("/api/sessions/{id}/stream");
    // A stream refused with 404 or 503 is opened again (a few times): the run goes on, and
    // the report says how often it happened.
    let mut refusals = Vec::new();
    let (_conn, mut body) = loop {
        let mut conn = Conn::open(read).await?;
        let resp = conn.request("GET", &path, None).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        if status.is_success() {
            // The connection is kept with its body while the stream is read.
            break (conn, body);
        }
        let mut text = Vec::new();
        while let Some(chunk) = next_chunk(&mut body).await? {
            text.extend_from_slice(&chunk);
        }
        let refused = format!(
            "GET {path} on {}: {status}: {}",
            read.addr,
            String::from_utf8_lossy(&text)
        );
        if (status.as_u16() == 404 || status.as_u16() == 503) && refusals.len() < 10 {
            refusals.push(refused);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        return Err(refused);
    };
    let mut reader = SseReader::default();
    // Up to the snapshot's task_state.
    let mut subscribed = false;
    while !subscribed {
        let chunk = next_chunk(&mut body).await?.ok_or("the stream ended")?;
        reader.feed(&chunk, |ev| subscribed |= is_task_state(ev));
    }
    let began = Instant::now();
    post_task_retrying(api, id, &mut refusals).await?;
    let (mut running, mut done) = (false, false);
    let mut event_ms = Vec::new();
    let mut published = 0;
    // What the stream carried, to say what a task that never ends got.
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + TASK_LIMIT;
    while !done {
        let chunk = match tokio::time::timeout_at(deadline, next_chunk(&mut body)).await {
            Ok(chunk) => chunk?.ok_or("the stream ended")?,
            Err(_) => {
                return Err(format!(
                    "the task of {id} did not end within {TASK_LIMIT:?} on the stream from {} \
                     (POST through {}); the stream carried: {seen:?}",
                    read.addr, api_addr
                ))
            }
        };
        let now = ms_of_day(now_ms());
        reader.feed(&chunk, |ev| {
            if done {
                return;
            }
            published += 1;
            if seen.len() < 40 {
                let data = String::from_utf8_lossy(ev.data());
                seen.push(data.chars().take(100).collect());
            }
            if ev.event().is_empty() {
                if let Some(at) = timestamp_ms_of_day(ev.data()) {
                    event_ms.push((now + DAY - at) % DAY);
                }
            } else if is_task_state(ev) {
                if !is_idle(ev) {
                    running = true;
                } else if running {
                    done = true;
                }
            }
        });
    }
    Ok(TaskRead {
        latency: began.elapsed(),
        event_ms,
        published,
        refusals,
    })
}

/// `POST /api/sessions/{id}/tasks`, again (a few times) while it answers 503 (a node taking
/// the session, or NATS electing leaders, says "try again"); each refusal is added to
/// `refusals`.
async fn post_task_retrying(
    api: &mut Conn,
    id: &str,
    refusals: &mut Vec<String>,
) -> Result<(), Error> {
    let path = format!("/api/sessions/{id}/tasks");
    for _ in 0..10 {
        let (status, body) = api.call("POST", &path, Some(TASK.into())).await?;
        if status.is_success() {
            return Ok(());
        }
        let refused = format!("POST {path}: {status}: {}", String::from_utf8_lossy(&body));
        if status.as_u16() != 503 {
            return Err(refused);
        }
        refusals.push(refused);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    post_task(api, id).await
}

const DAY: u64 = 86_400_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms_of_day(ms: u64) -> u64 {
    ms % DAY
}

/// The milliseconds of the day of an OmniMessage's `"timestamp":"YYYY-MM-DDTHH:MM:SS.mmmZ"`.
fn timestamp_ms_of_day(data: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"timestamp\":\"";
    let at = memchr::memmem::find(data, KEY)? + KEY.len();
    let t = data.get(at..at + 24)?;
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        std::str::from_utf8(t.get(r)?).ok()?.parse().ok()
    };
    if t[10] != b'T' || t[23] != b'Z' {
        return None;
    }
    Some(((num(11..13)? * 60 + num(14..16)?) * 60 + num(17..19)?) * 1000 + num(20..23)?)
}

/// The lines of every trace file under `dir`, by file name.
fn trace_lines(dir: &Path, out: &mut HashMap<String, usize>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            trace_lines(&p, out);
        } else if p.extension().is_some_and(|x| x == "jsonl")
            && p.to_string_lossy().contains("/traces/")
        {
            let n = std::fs::read(&p).map_or(0, |b| memchr::memchr_iter(b'\n', &b).count());
            let name = p.file_name().map(|f| f.to_string_lossy().into_owned());
            *out.entry(name.unwrap_or_default()).or_insert(0) += n;
        }
    }
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// `n` nats-servers with JetStream, routed to each other; killed when dropped.
struct Nats {
    children: Vec<Child>,
    /// Each server's monitoring endpoint.
    monitors: Vec<Target>,
    /// With the bench user's password, as a node is given them.
    urls: Vec<String>,
    /// The cluster secret the nodes share.
    secret_file: PathBuf,
}

impl Nats {
    /// Starts them (fresh stores under `dir`) and waits until each says it is healthy with
    /// JetStream (`/healthz` on its monitoring port).
    async fn start(dir: &Path, n: usize) -> Result<Nats, Error> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| Ok((free_port()?, free_port()?, free_port()?)))
            .collect::<Result<_, Error>>()?;
        // A cluster runs on an authenticated NATS with a shared secret (serve refuses
        // anything less), so the bench measures that.
        let password = format!("bench-{}-{:x}", std::process::id(), own_cpu().as_nanos());
        let secret_file = dir.join("cluster-secret");
        std::fs::write(&secret_file, format!("{password}{password}{password}"))
            .map_err(|e| format!("{}: {e}", secret_file.display()))?;
        let mut nats = Nats {
            children: Vec::new(),
            monitors: ports
                .iter()
                .map(|(_, _, m)| Target {
                    addr: SocketAddr::from(([127, 0, 0, 1], *m)),
                    auth: String::new(),
                })
                .collect(),
            urls: ports
                .iter()
                .map(|(p, _, _)| format!("nats://bench:{password}@127.0.0.1:{p}"))
                .collect(),
            secret_file,
        };
        for (i, (port, cluster, monitor)) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c, _))| format!("nats://127.0.0.1:{c}"))
                .collect();
            let log = std::fs::File::create(dir.join(format!("n{i}.log")))
                .map_err(|e| format!("nats log: {e}"))?;
            let mut command = Command::new("nats-server");
            command
                .args(["-a", "127.0.0.1", "-p", &port.to_string()])
                .args([
                    "-m",
                    &monitor.to_string(),
                    "-n",
                    &format!("n{i}"),
                    "-js",
                    "-sd",
                ])
                .arg(dir.join(format!("n{i}")))
                .args(["--user", "bench", "--pass", &password]);
            // A lone server runs JetStream unclustered (one replica).
            if n > 1 {
                command
                    .args(["--cluster_name", "penguin-bench", "-cluster"])
                    .arg(format!("nats://127.0.0.1:{cluster}"))
                    .arg("-routes")
                    .arg(routes.join(","));
            }
            let child = command
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("nats-server: {e}"))?;
            nats.children.push(child);
        }
        let began = Instant::now();
        for (_, _, monitor) in &ports {
            let t = Target {
                addr: SocketAddr::from(([127, 0, 0, 1], *monitor)),
                auth: String::new(),
            };
            loop {
                let healthy = match Conn::open(&t).await {
                    Ok(mut c) => c.ok("GET", "/healthz", None).await.is_ok(),
                    Err(_) => false,
                };
                if healthy {
                    break;
                }
                if began.elapsed() > Duration::from_secs(60) {
                    return Err(format!(
                        "the nats-servers were not healthy within 60 s; see {}",
                        dir.display()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(nats)
    }

    /// Messages the servers received so far (`in_msgs` of each one's `/varz`): clients' and
    /// routed ones.
    async fn in_msgs(&self) -> Result<u64, Error> {
        let mut total = 0;
        for t in &self.monitors {
            let body = Conn::open(t).await?.ok("GET", "/varz", None).await?;
            let varz: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| format!("/varz: {e}"))?;
            total += varz["in_msgs"].as_u64().ok_or("/varz without in_msgs")?;
        }
        Ok(total)
    }

    /// CPU time (user + system) of every server so far.
    fn cpu(&self) -> Duration {
        self.children
            .iter()
            .map(|c| cpu_split_of(c.id()).map_or(Duration::ZERO, |(u, s)| u + s))
            .sum()
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_as_milliseconds_of_the_day() {
        let data = br#"{"timestamp":"2026-12-01T20:12:30.246Z","type":"model_msg"}"#;
        assert_eq!(
            timestamp_ms_of_day(data),
            Some(((20 * 60 + 12) * 60 + 30) * 1000 + 246)
        );
        assert_eq!(timestamp_ms_of_day(br#"{"type":"x"}"#), None);
    }
}
