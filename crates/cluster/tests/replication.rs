//! Replicated events, trace records, the registry and the session index against a real
//! 3-node nats-server cluster, one nats-server killed on the way; and the errors a server maps.

mod support;

use std::time::Duration;

use futures::StreamExt;
use penguin_cluster::{Cluster, ClusterConfig, ClusterError, FeedItem, Replay};
use support::{eventually, nats_available, NatsCluster};

fn event(n: u64) -> bytes::Bytes {
    format!(r#"{{"type":"event_msg","payload":{{"type":"n","n":{n}}}}}"#).into()
}

async fn live(node: &Cluster) -> Vec<String> {
    let live = node.registry().live().await.unwrap();
    live.into_iter().map(|n| n.node).collect()
}

async fn listed(node: &Cluster) -> Vec<String> {
    let all = node.index().list().await.unwrap();
    all.into_iter().map(|r| r.session).collect()
}

fn seqs(replay: Replay) -> Vec<u64> {
    match replay {
        Replay::Events(events) => events.iter().map(|e| e.seq).collect(),
        Replay::ResyncRequired => panic!("resync where events were due"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_replay_from_any_node_with_a_nats_server_killed() {
    if !nats_available("events_replay_from_any_node_with_a_nats_server_killed") {
        return;
    }
    let mut nats = NatsCluster::start(3).await;
    let a = nats.join_durable("a").await;
    let b = nats.join_durable("b").await;
    let lease = a.leases().acquire("s1").await.unwrap();
    let _renewal = lease.keep_alive();
    let mut publisher = a.events().publisher("s1", lease.clone()).await.unwrap();
    // A follower on b from the start, and one that joins at id 5.
    let mut live = b.events().follow("s1", Some(0)).await.unwrap();
    for n in 1..=10 {
        assert_eq!(publisher.publish(event(n)).await.unwrap(), n);
    }
    let mut late = b.events().follow("s1", Some(5)).await.unwrap();

    // One of the three nats-servers dies: publishing and reading go on.
    nats.kill(0);
    for n in 11..=20 {
        let id = tokio::time::timeout(Duration::from_secs(60), publisher.publish(event(n)))
            .await
            .expect("published within the timeout")
            .unwrap();
        assert_eq!(id, n);
    }
    for (feed, from) in [(&mut live, 1), (&mut late, 6)] {
        for want in from..=20 {
            let item = tokio::time::timeout(Duration::from_secs(60), feed.next())
                .await
                .expect("the next event")
                .unwrap()
                .unwrap();
            match item {
                FeedItem::Event(e) => {
                    assert_eq!(e.seq, want);
                    assert_eq!(e.data, event(want));
                }
                FeedItem::Resync => panic!("resync"),
            }
        }
    }

    // The gap, exactly, from either node; nothing after the last id; an id from the future
    // asks for a resync.
    let c = nats.join_durable("c").await;
    assert_eq!(
        seqs(c.events().replay("s1", 0).await.unwrap()),
        (1..=20).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(b.events().replay("s1", 17).await.unwrap()),
        vec![18, 19, 20]
    );
    assert_eq!(
        seqs(b.events().replay("s1", 20).await.unwrap()),
        Vec::<u64>::new()
    );
    assert_eq!(
        b.events().replay("s1", 21).await.unwrap(),
        Replay::ResyncRequired
    );
    assert_eq!(c.events().last_seq("s1").await.unwrap(), 20);

    // A second writer cannot fork the ids: the old publisher is fenced by the stream itself.
    drop(_renewal);
    lease.release().await.unwrap();
    let taken = c.leases().acquire("s1").await.unwrap();
    let mut next = c.events().publisher("s1", taken).await.unwrap();
    assert_eq!(next.publish(event(21)).await.unwrap(), 21);
    assert!(matches!(
        publisher.publish(event(99)).await,
        Err(ClusterError::Fenced { .. })
    ));
    assert_eq!(b.events().last_seq("s1").await.unwrap(), 21);

    // The server comes back and catches up.
    nats.restart(0);
    nats.wait_ready(3).await;
    assert_eq!(
        seqs(a.events().replay("s1", 19).await.unwrap()),
        vec![20, 21]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_past_the_retention_window_asks_for_a_resync() {
    if !nats_available("a_gap_past_the_retention_window_asks_for_a_resync") {
        return;
    }
    let nats = NatsCluster::start(3).await;
    let mut config = nats.config("a");
    config.events_per_session = 5;
    let a = Cluster::connect(config).await.unwrap();
    let lease = a.leases().acquire("s2").await.unwrap();
    let mut publisher = a.events().publisher("s2", lease).await.unwrap();
    for n in 1..=12 {
        publisher.publish(event(n)).await.unwrap();
    }
    let b = nats.join("b").await;
    // 8..=12 are kept: after 7 is exactly the window, after 6 is not.
    assert_eq!(
        seqs(b.events().replay("s2", 7).await.unwrap()),
        vec![8, 9, 10, 11, 12]
    );
    assert_eq!(
        b.events().replay("s2", 6).await.unwrap(),
        Replay::ResyncRequired
    );
    let mut feed = b.events().follow("s2", Some(2)).await.unwrap();
    assert_eq!(feed.next().await.unwrap().unwrap(), FeedItem::Resync);
    assert!(feed.next().await.is_none());
    // A fresh follower (no id) gets only what comes next.
    let mut fresh = b.events().follow("s2", None).await.unwrap();
    publisher.publish(event(13)).await.unwrap();
    match fresh.next().await.unwrap().unwrap() {
        FeedItem::Event(e) => assert_eq!(e.seq, 13),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_records_replicate_and_check_clean() {
    if !nats_available("trace_records_replicate_and_check_clean") {
        return;
    }
    let mut nats = NatsCluster::start(3).await;
    let a = nats.join_durable("a").await;
    let lease = a.leases().acquire("t1").await.unwrap();
    let _renewal = lease.keep_alive();
    let sink = a.traces().sink("t1", lease.clone()).await.unwrap();
    let fixture = include_str!("fixtures/seed-two-tools.trace.jsonl");
    let lines: Vec<&str> = fixture.lines().collect();
    let half = lines.len() / 2;
    for line in &lines[..half] {
        sink.record(bytes::Bytes::copy_from_slice(line.as_bytes()));
    }
    assert_eq!(sink.flush().await.unwrap(), half as u64);
    assert_eq!(sink.written(), half as u64);
    // A nats-server dies between two halves: every record is still acknowledged.
    nats.kill(1);
    for line in &lines[half..] {
        sink.record(bytes::Bytes::copy_from_slice(line.as_bytes()));
    }
    let written = tokio::time::timeout(Duration::from_secs(30), sink.flush())
        .await
        .expect("flushed")
        .unwrap();
    assert_eq!(written, lines.len() as u64);
    assert_eq!(sink.failed_writes(), 0);

    // Read back from another node: the same lines, which `penguin trace check` accepts.
    let b = nats.join("b").await;
    let back = b.traces().read("t1").await.unwrap();
    let back: Vec<&str> = back
        .iter()
        .map(|r| std::str::from_utf8(r).unwrap())
        .collect();
    assert_eq!(back, lines);
    assert_eq!(b.traces().len("t1").await.unwrap(), lines.len() as u64);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t1.jsonl");
    std::fs::write(&path, back.join("\n") + "\n").unwrap();
    let problems = penguin_trace_store::check_trace(&path);
    assert!(
        problems
            .iter()
            .all(|p| p.severity != penguin_trace_store::Severity::Error),
        "{problems:?}"
    );
    // A fenced sink writes nothing and says why.
    lease.release().await.unwrap();
    sink.record("{}".into());
    assert!(matches!(
        sink.flush().await,
        Err(ClusterError::Fenced { .. })
    ));
    assert_eq!(b.traces().len("t1").await.unwrap(), lines.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_lists_every_session_and_the_live_nodes() {
    if !nats_available("every_node_lists_every_session_and_the_live_nodes") {
        return;
    }
    let nats = NatsCluster::start(3).await;
    // b's heartbeat must land within every 5 s while the other tests load the machine.
    let a = nats.join_with_lease("a", Duration::from_secs(5)).await;
    let b = nats.join_with_lease("b", Duration::from_secs(5)).await;
    a.registry()
        .announce("a", "http://127.0.0.1:7001")
        .await
        .unwrap();
    let beat = b.registry().heartbeat("b", "http://127.0.0.1:7002");
    eventually("b announced itself", Duration::from_secs(30), || async {
        live(&a).await == ["a", "b"]
    })
    .await;
    a.index()
        .put("s-a", Some("a"), serde_json::json!({"title": "one"}))
        .await
        .unwrap();
    b.index()
        .put("s-b", Some("b"), serde_json::json!({"title": "two"}))
        .await
        .unwrap();
    // Reads go to the bucket's leader, so they see the other node's write at once, except
    // across a change of leader under load: nats-server 2.9's new leader may answer before it
    // has applied the newest writes (docs/cluster.md). A listing converges then.
    for node in [&a, &b] {
        eventually("both sessions listed", Duration::from_secs(10), || async {
            listed(node).await == ["s-a", "s-b"]
        })
        .await;
    }
    let rec = a.index().get("s-b").await.unwrap().unwrap();
    assert_eq!(rec.owner.as_deref(), Some("b"));
    assert_eq!(rec.meta["title"], "two");
    b.index().remove("s-a").await.unwrap();
    eventually("the removal listed", Duration::from_secs(10), || async {
        listed(&a).await == ["s-b"]
    })
    .await;
    // a stops beating: after the lease it is no longer live, b still is.
    tokio::time::sleep(a.config().lease_ttl + Duration::from_millis(300)).await;
    assert_eq!(live(&b).await, ["b"]);
    beat.abort();
    assert_eq!(
        a.registry().node("a").await.unwrap().unwrap().http,
        "http://127.0.0.1:7001"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_and_lost_nats_are_clear_errors() {
    // Nothing listens on the port: the error names the URL.
    let port = support::free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let mut config = ClusterConfig::new(vec![url.clone()], "a", support::secret());
    config.request_timeout = Duration::from_secs(2);
    let err = Cluster::connect(config).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&url), "{err}");
    assert_eq!(err.http_status(), 503);
    let err = Cluster::connect(ClusterConfig::new(
        vec![url],
        "no spaces",
        support::secret(),
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, ClusterError::InvalidName { .. }), "{err}");

    if !nats_available("unreachable_and_lost_nats_are_clear_errors") {
        return;
    }
    // One nats-server, lost while serving: typed errors (503), then it recovers.
    let mut nats = NatsCluster::start(1).await;
    let mut config = nats.config("a");
    config.request_timeout = Duration::from_secs(2);
    // The lease must outlive the outage for the publisher to go on afterwards; on a loaded
    // machine a restart plus JetStream's recovery and the client's reconnect took over 8 s.
    config.lease_ttl = Duration::from_secs(60);
    let a = Cluster::connect(config).await.unwrap();
    a.ensure_connected().unwrap();
    let lease = a.leases().acquire("s").await.unwrap();
    let mut events = a.events().publisher("s", lease.clone()).await.unwrap();
    events.publish(event(1)).await.unwrap();
    nats.kill(0);
    eventually(
        "the client noticed the loss",
        Duration::from_secs(10),
        || async { a.ensure_connected().is_err() },
    )
    .await;
    let lost = a.ensure_connected().unwrap_err();
    assert_eq!(lost.http_status(), 503, "{lost}");
    // A publish is not acknowledged while NATS is gone (it keeps trying for RETRY_FOR, then
    // is Unavailable).
    let publish = tokio::time::timeout(Duration::from_secs(1), events.publish(event(2))).await;
    assert!(!matches!(publish, Ok(Ok(_))), "{publish:?}");
    let err = a.index().list().await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");

    nats.restart(0);
    nats.wait_ready(1).await;
    eventually(
        "the client reconnected",
        Duration::from_secs(20),
        || async { a.ensure_connected().is_ok() },
    )
    .await;
    // The publish given up on may still have reached NATS after the reconnect (the client
    // buffers), but it was never acknowledged; publishing it again stores it exactly once
    // (its message id), and the publisher goes on (the lease outlived the outage).
    assert!(a.events().last_seq("s").await.unwrap() <= 2);
    lease.renew().await.unwrap();
    assert_eq!(events.publish(event(2)).await.unwrap(), 2);
    assert_eq!(events.publish(event(3)).await.unwrap(), 3);
    assert_eq!(
        seqs(a.events().replay("s", 0).await.unwrap()),
        vec![1, 2, 3]
    );
}

#[tokio::test]
async fn credentials_in_the_url_are_used_and_never_named() {
    if !nats_available("credentials_in_the_url_are_used_and_never_named") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let mut server = std::process::Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir.path())
        .args(["--user", "penguin", "--pass", "s3cret-pass"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("nats.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Ready when it answers the protocol to these credentials, not merely when its port is open.
    let ready = || {
        async_nats::ConnectOptions::with_user_and_password("penguin".into(), "s3cret-pass".into())
            .connect(format!("127.0.0.1:{port}"))
    };
    while ready().await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nats-server did not answer: {}",
            std::fs::read_to_string(dir.path().join("nats.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = |url: String| {
        let mut c = ClusterConfig::new(vec![url], "a", support::secret());
        c.replicas = 1;
        c.request_timeout = Duration::from_secs(10);
        c
    };
    let with = format!("nats://penguin:s3cret-pass@127.0.0.1:{port}");
    let joined = Cluster::connect(config(with)).await;
    let wrong = format!("nats://penguin:wrong-pass@127.0.0.1:{port}");
    let refused = Cluster::connect(config(wrong)).await;
    let exited = server.try_wait().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    if let Err(e) = joined {
        let log = std::fs::read_to_string(dir.path().join("nats.log")).unwrap_or_default();
        panic!("the URL's credentials are used: {e:?}; nats-server exited: {exited:?}; its log:\n{log}");
    }
    let err = refused.expect_err("a wrong password is refused");
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("nats://***@127.0.0.1:{port}")),
        "{text}"
    );
    assert!(!text.contains("wrong-pass"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sessions_records_read_on_from_a_position() {
    if !nats_available("every_sessions_records_read_on_from_a_position") {
        return;
    }
    let nats = NatsCluster::start(1).await;
    let a = nats.join("a").await;
    let write = |session: &'static str, lines: &'static [&'static str]| {
        let a = &a;
        async move {
            let lease = a.leases().acquire(session).await.unwrap();
            let sink = a.traces().sink(session, lease.clone()).await.unwrap();
            for line in lines {
                sink.record(bytes::Bytes::from_static(line.as_bytes()));
            }
            sink.flush().await.unwrap();
            lease.release().await.unwrap();
        }
    };
    let read = |since: penguin_cluster::RecordsSince| {
        since
            .records
            .into_iter()
            .map(|(s, r)| format!("{s}:{}", std::str::from_utf8(&r.line).unwrap()))
            .collect::<Vec<_>>()
    };
    write("u1", &[r#"{"n":1}"#, r#"{"n":2}"#]).await;
    write("u2", &[r#"{"n":3}"#]).await;
    let all = a.traces().read_since(0).await.unwrap();
    let next = all.next;
    assert_eq!(
        read(all),
        [r#"u1:{"n":1}"#, r#"u1:{"n":2}"#, r#"u2:{"n":3}"#]
    );
    write("u1", &[r#"{"n":4}"#]).await;
    let more = a.traces().read_since(next).await.unwrap();
    let end = more.next;
    assert!(end > next);
    assert_eq!(read(more), [r#"u1:{"n":4}"#]);
    // A deleted session's records are gone from every read, and a read with nothing after
    // its position (here: only purged records) ends at once where it was.
    a.traces().purge("u1").await.unwrap();
    assert_eq!(
        read(a.traces().read_since(0).await.unwrap()),
        [r#"u2:{"n":3}"#]
    );
    let none = tokio::time::timeout(Duration::from_secs(10), a.traces().read_since(next))
        .await
        .expect("a read past the last record ends");
    assert_eq!(
        none.unwrap(),
        penguin_cluster::RecordsSince {
            records: Vec::new(),
            next
        }
    );
}
