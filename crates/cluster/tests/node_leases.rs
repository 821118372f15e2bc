//! One heartbeat per node keeps all its sessions' leases: an idle node holding many sessions
//! writes its own lease entry once a period and never a session's; a node that stops renewing
//! loses every session at once, to a contender, and is fenced for each. Against the
//! nats-server cluster the test binary shares (an account each).

mod support;

use std::time::Instant;

use futures::StreamExt;
use penguin_cluster::ClusterError;
use support::{eventually, nats_available, NatsCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_renews_one_lease_for_all_its_sessions() {
    if !nats_available("an_idle_node_renews_one_lease_for_all_its_sessions") {
        return;
    }
    let nats = NatsCluster::shared().await;
    let a = nats.join("a").await;
    let b = nats.join("b").await;
    let ttl = a.leases().ttl();
    let mut held = Vec::new();
    for i in 0..100 {
        let lease = a.leases().acquire(&format!("idle-{i}")).await.unwrap();
        let renewal = lease.keep_alive();
        held.push((lease, renewal));
    }
    // Every write to the lease bucket, for two lease lengths: a session's lease would be
    // renewed six times in that while.
    let mut writes = a.client().subscribe("$KV.penguin_leases.>").await.unwrap();
    let mut seen = Vec::new();
    let until = tokio::time::Instant::now() + ttl * 2;
    while let Ok(Some(m)) = tokio::time::timeout_at(until, writes.next()).await {
        seen.push(m.subject.to_string());
    }
    assert!(
        seen.iter().all(|s| s == "$KV.penguin_leases.node.a"),
        "only the node's own lease is written: {seen:?}"
    );
    // A heartbeat every third of the lease: about six (the window's edges may take one
    // more or one less), never one per session.
    assert!((3..=8).contains(&seen.len()), "{seen:?}");
    for i in 0..100 {
        let holder = b.leases().holder(&format!("idle-{i}")).await.unwrap();
        assert_eq!(holder.map(|h| h.node).as_deref(), Some("a"), "idle-{i}");
    }
    for (lease, _) in &held {
        lease.check().expect("a still holds every session");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_renewing_loses_every_session_at_once() {
    if !nats_available("a_node_that_stops_renewing_loses_every_session_at_once") {
        return;
    }
    let nats = NatsCluster::shared().await;
    let a = nats.join("a").await;
    let b = nats.join("b").await;
    let ttl = a.leases().ttl();
    let leases: Vec<_> = futures::future::join_all((0..30).map(|i| {
        let la = a.leases();
        async move { la.acquire(&format!("lost-{i}")).await.unwrap() }
    }))
    .await;
    // One keep-alive keeps them all.
    let renewal = leases[0].keep_alive();
    let until = Instant::now() + ttl * 2;
    while Instant::now() < until {
        for i in [0, 17, 29] {
            match b.leases().acquire(&format!("lost-{i}")).await {
                Err(ClusterError::Held { owner, .. }) => assert_eq!(owner, "a"),
                other => panic!("b took a renewed session: {other:?}"),
            }
        }
        tokio::time::sleep(ttl / 10).await;
    }
    for lease in &leases {
        lease
            .check()
            .expect("a holds every session while it renews");
    }

    // a stops renewing: its node lease lapses, and with it every session.
    renewal.abort();
    let started = Instant::now();
    eventually("b takes lost-0", ttl * 3, || async {
        b.leases().acquire("lost-0").await.is_ok()
    })
    .await;
    assert!(started.elapsed() <= ttl * 2, "{:?}", started.elapsed());
    for i in 1..30 {
        b.leases()
            .acquire(&format!("lost-{i}"))
            .await
            .unwrap_or_else(|e| panic!("lost-{i} is free once a's lease lapsed: {e}"));
    }
    for lease in &leases {
        assert!(matches!(lease.check(), Err(ClusterError::Fenced { .. })));
    }
    // a takes sessions again under a new start of its lease.
    let again = a.leases().acquire("lost-new").await.unwrap();
    again.check().expect("a fresh lease");
}
