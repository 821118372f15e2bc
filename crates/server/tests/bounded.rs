//! A long-running server stays bounded: sessions run one after another release their threads
//! and trace files once idle (they are loaded again from the trace when asked for), under a low
//! open-file limit.
#![cfg(feature = "testing")]

mod support;

use std::time::{Duration, Instant};

use penguin_trace_store::Durability;
use serde_json::{json, Value};
use support::script::{step, text, usage};
use support::TOKEN;

fn scenario() -> Value {
    json!({
        "description": "one short answer",
        "llm": [{"stream": [step(0, text("ok")), step(0, usage(1, 10))]}],
        "tools": {},
        "runs": []
    })
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Trace writer threads alive (tokio's blocking pool grows and shrinks on its own, so all
/// threads together say little).
fn writer_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("trace-writer"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_sessions_run_one_after_another_under_a_low_file_limit() {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_NOFILE, 256, 256).expect("lower the open-file limit");

    let srv = support::serve_script_with(scenario(), |opts| {
        opts.idle_sessions = 8;
        // Descriptors and threads are the point, not the disk: no fsync per session.
        opts.durability = Durability::Never;
    })
    .await;
    let (base, http) = (srv.base.clone(), srv.http.clone());

    let sessions: usize = std::env::var("PENGUIN_BOUNDED_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let mut baseline = None;
    let mut ids = Vec::new();
    for i in 0..sessions {
        let created: Value = http
            .post(format!("{base}/api/sessions"))
            .bearer_auth(TOKEN)
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = created["session"]["id"].as_str().expect("an id").to_owned();
        let r = http
            .post(format!("{base}/api/sessions/{id}/tasks"))
            .bearer_auth(TOKEN)
            .json(&json!({"input": [{"type": "text", "text": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "session {i}");
        // Bounded polling until the task has settled.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut idle = false;
        while Instant::now() < deadline {
            let s: Value = http
                .get(format!("{base}/api/sessions/{id}"))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if s["session"]["state"] == "idle" {
                idle = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(idle, "session {i} never went idle");
        ids.push(id);
        if i == 100 {
            baseline = Some(count("/proc/self/fd"));
        }
    }
    // Unloads join writer threads off the async workers: give them a bounded moment.
    let fds = baseline.unwrap_or(0);
    let mut now = (usize::MAX, usize::MAX);
    for _ in 0..500 {
        now = (count("/proc/self/fd"), writer_threads());
        if now.0 <= fds + 8 && now.1 <= 8 + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        now.0 <= fds + 8 && now.1 <= 8 + 2,
        "descriptors {fds} → {}, trace writer threads {} (8 idle sessions cached)",
        now.0,
        now.1
    );
    // An unloaded session is loaded again from its trace, history intact.
    let first = &ids[0];
    let h: Value = http
        .get(format!("{base}/api/sessions/{first}/messages"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let texts: Vec<&str> = h["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["payload"]["text"].as_str())
        .collect();
    assert_eq!(texts, ["hi", "ok"]);
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_trace_lost_records_is_reported_not_clean() {
    use futures::StreamExt;
    let srv = support::serve_script_with(scenario(), |opts| {
        // The traces folder cannot be created: a file is in the way (root ignores
        // permissions).
        let agent = opts.data_root.join("default/agents/penguin");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(agent.join("traces"), "not a folder").unwrap();
    })
    .await;
    let (base, http) = (srv.base.clone(), srv.http.clone());

    let events = http
        .get(format!("{base}/api/events"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let created: Value = http
        .post(format!("{base}/api/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["session"]["id"].as_str().unwrap().to_owned();
    let r = http
        .post(format!("{base}/api/sessions/{id}/tasks"))
        .bearer_auth(TOKEN)
        .json(&json!({"input": [{"type": "text", "text": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    // The user channel says so when the task settles.
    let mut body = events.bytes_stream();
    let mut decoder = penguin_sse_transport::SseDecoder::new();
    let warning = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(chunk)) = body.next().await {
            for ev in decoder.feed(&chunk).unwrap() {
                let v: Value = serde_json::from_str(&ev.data).unwrap();
                if v["type"] == "trace_write_failed" {
                    return v;
                }
            }
        }
        panic!("the event stream ended");
    })
    .await
    .expect("a trace_write_failed event");
    assert_eq!(warning["sessionId"], id);
    assert!(warning["failedRecords"].as_u64().unwrap() > 0);
    let s: Value = http
        .get(format!("{base}/api/sessions/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        s["session"]["traceWriteFailures"].as_u64().unwrap() > 0,
        "{s}"
    );
    drop(srv);
}

/// Sessions that never run a task are unloaded like the others (their session_meta is written
/// first), so they hold no thread or file once idle, and each is loaded again when asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_never_ran_are_unloaded_and_can_be_loaded_again() {
    let srv = support::serve_script_with(scenario(), |opts| {
        opts.idle_sessions = 4;
        opts.durability = Durability::Never;
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..60 {
        ids.push(srv.create("allow-all").await);
    }
    // The cache, and the newest (still held by its request when the cache was trimmed).
    // Unloading writes each head off the async workers: wait for those writes, not for luck.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while srv.state.loaded_sessions() > 4 + 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} sessions loaded for 60 idle ones (cache 4)",
            srv.state.loaded_sessions()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let listed = srv.get("/api/sessions").await.body["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(listed, 60);
    for id in &ids {
        let r = srv.get(&format!("/api/sessions/{id}")).await;
        assert_eq!(r.status, 200, "{id}: {}", r.body);
    }
    assert_eq!(srv.task(&ids[0], "go").await.status, 202);
    srv.until_idle(&ids[0]).await;
    let texts: Vec<Value> = srv
        .messages(&ids[0])
        .await
        .into_iter()
        .filter(|m| m["payload"]["type"] == "text")
        .collect();
    assert_eq!(texts.last().unwrap()["payload"]["text"], "ok");
}
