//! Session leases against a real 3-node nats-server cluster: one holder at a time, a paused
//! holder stands down before it writes, a dead holder's session is taken over within seconds.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use penguin_cluster::{Cluster, ClusterConfig, ClusterError};
use support::{nats_available, NatsCluster};

const CHILD: &str = "PENGUIN_CLUSTER_CHILD";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_never_both_hold() {
    if !nats_available("two_contenders_never_both_hold") {
        return;
    }
    let nats = NatsCluster::start(3).await;
    // Long enough that a renewal (every third of it) still lands in time when the other tests
    // of this binary load the machine: the test is about who may take a lease, not about
    // renewing under load.
    let ttl = Duration::from_secs(5);
    let a = nats.join_with_lease("a", ttl).await;
    let b = nats.join_with_lease("b", ttl).await;
    let (la, lb) = (a.leases(), b.leases());

    // Racing for fresh sessions: exactly one wins each.
    for i in 0..20 {
        let s = format!("race-{i}");
        let (ra, rb) = tokio::join!(la.acquire(&s), lb.acquire(&s));
        let winners = [ra.is_ok(), rb.is_ok()].iter().filter(|w| **w).count();
        assert_eq!(winners, 1, "session {s}: {ra:?} / {rb:?}");
        let loser = if ra.is_ok() { rb } else { ra };
        assert!(matches!(loser, Err(ClusterError::Held { .. })), "{loser:?}");
    }

    // A renewed lease is never taken, however long the other node tries.
    let held = la.acquire("kept").await.expect("a takes it");
    let renewal = held.keep_alive();
    let until = Instant::now() + la.ttl() * 2;
    while Instant::now() < until {
        match lb.acquire("kept").await {
            Err(ClusterError::Held { owner, .. }) => assert_eq!(owner, "a"),
            other => panic!("b got a renewed lease: {other:?}"),
        }
        held.check().expect("a still holds it");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = lb.holder("kept").await.unwrap().expect("held");
    assert_eq!(holder.node, "a");

    // a stops renewing: b takes it once it lapsed, and a is fenced.
    renewal.abort();
    let taken = loop {
        match lb.acquire("kept").await {
            Ok(lease) => break lease,
            Err(ClusterError::Held { .. }) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(matches!(held.check(), Err(ClusterError::Fenced { .. })));
    assert!(matches!(
        held.renew().await,
        Err(ClusterError::Fenced { .. })
    ));
    taken.verify().await.expect("b holds it");
    assert!(taken.revision() > held.revision());

    // A released lease is free at once.
    taken.release().await.unwrap();
    assert_eq!(la.holder("kept").await.unwrap(), None);
    la.acquire("kept").await.expect("free after release");
}

/// The lease holder of the process tests: run by the tests below as a child process (this
/// same test binary), it does nothing in a plain test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_lease_holder() {
    let Ok(urls) = std::env::var(CHILD) else {
        return;
    };
    let session = std::env::var("PENGUIN_CLUSTER_SESSION").unwrap();
    let mut config = ClusterConfig::new(
        urls.split(',').map(str::to_owned).collect(),
        "child",
        support::secret(),
    );
    config.lease_ttl = Duration::from_secs(2);
    let cluster = Cluster::connect(config).await.unwrap();
    let lease = cluster.leases().acquire(&session).await.unwrap();
    let renewal = lease.keep_alive();
    let trace = cluster
        .traces()
        .sink(&session, lease.clone())
        .await
        .unwrap();
    println!("HELD {}", lease.revision());
    for n in 1.. {
        if renewal.is_finished() {
            println!("STOOD_DOWN renewal: {}", renewal.await.unwrap());
            return;
        }
        trace.record(format!(r#"{{"writer":"child","n":{n}}}"#).into());
        match trace.flush().await {
            Ok(_) => println!("WROTE {n}"),
            Err(e) => {
                println!("STOOD_DOWN {e}");
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Child {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Child {
    fn start(nats: &NatsCluster, session: &str) -> Child {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_lease_holder",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, nats.urls().join(","))
            .env("PENGUIN_CLUSTER_SESSION", session)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Child { child, lines }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Lines until one contains `prefix` (within `limit`), that one last.
    fn until(&self, prefix: &str, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(prefix);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(_) => panic!("no {prefix:?} from the child within {limit:?}: {seen:?}"),
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_owner_stands_down_before_writing() {
    if !nats_available("paused_owner_stands_down_before_writing") {
        return;
    }
    let nats = NatsCluster::start(3).await;
    let b = nats.join("b").await;
    let child = Child::start(&nats, "paused");
    child.until("HELD", Duration::from_secs(30));
    child.until("WROTE 3", Duration::from_secs(10));

    kill(child.pid(), Signal::SIGSTOP).unwrap();
    // b takes the session once the paused owner's lease lapsed, and writes.
    let start = Instant::now();
    let lease = loop {
        match b.leases().acquire("paused").await {
            Ok(lease) => break lease,
            Err(ClusterError::Held { owner, .. }) => {
                assert_eq!(owner, "child");
                assert!(start.elapsed() < Duration::from_secs(10));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let _renewal = lease.keep_alive();
    // Counted once b holds the lease: a write the owner had sent before it stopped may land
    // after the SIGSTOP, but not after the lease lapsed.
    let before = b.traces().read("paused").await.unwrap().len();
    let sink = b.traces().sink("paused", lease.clone()).await.unwrap();
    for n in 1..=3 {
        sink.record(format!(r#"{{"writer":"b","n":{n}}}"#).into());
    }
    sink.flush().await.expect("b writes");

    // The owner wakes up: it stands down without writing anything more.
    kill(child.pid(), Signal::SIGCONT).unwrap();
    let lines = child.until("STOOD_DOWN", Duration::from_secs(10));
    assert!(
        !lines.iter().any(|l| l.contains("WROTE")),
        "the paused owner wrote after waking: {lines:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let records = b.traces().read("paused").await.unwrap();
    let writers: Vec<String> = records
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap()["writer"].to_string())
        .collect();
    assert_eq!(writers.len(), before + 3, "{writers:?}");
    assert!(
        writers[before..].iter().all(|w| w == "\"b\""),
        "{writers:?}"
    );
    lease.verify().await.expect("b still holds it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_owner_is_taken_over_within_seconds() {
    if !nats_available("dead_owner_is_taken_over_within_seconds") {
        return;
    }
    let nats = NatsCluster::start(3).await;
    let b = nats.join("b").await;
    let mut child = Child::start(&nats, "orphan");
    child.until("WROTE 2", Duration::from_secs(30));
    child.child.kill().unwrap();
    child.child.wait().unwrap();
    let died = Instant::now();
    let lease = loop {
        match b.leases().acquire("orphan").await {
            Ok(lease) => break lease,
            Err(ClusterError::Held { .. }) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    };
    let took = died.elapsed();
    // The lease is 2 s: taken over within it plus a few KV round trips on a loaded machine.
    assert!(took < Duration::from_secs(8), "took {took:?}");
    // The records the dead owner had acknowledged are all there, in order, and b goes on.
    let records = b.traces().read("orphan").await.unwrap();
    assert!(records.len() >= 2);
    let sink = b.traces().sink("orphan", lease).await.unwrap();
    sink.record(r#"{"writer":"b"}"#.into());
    assert_eq!(sink.flush().await.unwrap(), records.len() as u64 + 1);
}
