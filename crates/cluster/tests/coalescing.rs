//! Records and events queued together are stored together: fewer messages than records, the
//! same order, every follower and reader seeing them one by one under their own numbers; and a
//! message JetStream refuses fails its records and everything queued after it, as one refused
//! record always did. Against the nats-server cluster the test binary shares (an account each).

mod support;

use bytes::Bytes;
use futures::StreamExt;
use penguin_cluster::{Cluster, ClusterError, FeedItem, Replay, EVENT_STREAM, TRACE_STREAM};
use support::{nats_available, NatsCluster};

fn line(n: u64) -> Bytes {
    format!(r#"{{"type":"record","n":{n}}}"#).into()
}

/// Messages stored in `stream` (the account is this test's own, so they are its).
async fn messages(node: &Cluster, stream: &str) -> u64 {
    let mut stream = node.jetstream().get_stream(stream).await.unwrap();
    stream.info().await.unwrap().state.messages
}

/// A foreign writer's message on `subject`, numbered `seq`, unconditional: what a node that
/// took the session over would have appended.
async fn foreign(node: &Cluster, subject: String, seq: u64) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(penguin_cluster::SEQ_HEADER, seq.to_string().as_str());
    headers.insert(penguin_cluster::NODE_HEADER, "other");
    node.jetstream()
        .publish_with_headers(subject, headers, line(seq))
        .await
        .unwrap()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_records_is_stored_in_order_in_few_messages() {
    if !nats_available("a_burst_of_records_is_stored_in_order_in_few_messages") {
        return;
    }
    let nats = NatsCluster::shared().await;
    let a = nats.join_durable("a").await;
    let lease = a.leases().acquire("burst").await.unwrap();
    let sink = a.traces().sink("burst", lease).await.unwrap();
    // Two files (a rotation in the middle): a message never holds records of two.
    for n in 1..=600 {
        sink.record_in(1, line(n));
    }
    for n in 601..=1000 {
        sink.record_in(2, line(n));
    }
    assert_eq!(sink.flush().await.unwrap(), 1000);
    assert_eq!(sink.written(), 1000);
    assert_eq!(sink.failed_writes(), 0);
    let stored = messages(&a, TRACE_STREAM).await;
    assert!(
        stored < 100,
        "1,000 records queued at once took {stored} messages"
    );

    let b = nats.join_durable("b").await;
    let back = b.traces().read_records("burst").await.unwrap();
    assert_eq!(back.len(), 1000);
    for (k, r) in back.iter().enumerate() {
        let n = k as u64 + 1;
        assert_eq!(r.line, line(n), "record {n}");
        assert_eq!(r.file, if n <= 600 { 1 } else { 2 }, "record {n}");
    }
    assert_eq!(b.traces().len("burst").await.unwrap(), 1000);

    // A sink taking the session over continues the numbering after the last message.
    let again = a.leases().acquire("burst").await.unwrap();
    let next = a.traces().sink("burst", again).await.unwrap();
    next.record_in(2, line(1001));
    assert_eq!(next.flush().await.unwrap(), 1001);
    assert_eq!(b.traces().read("burst").await.unwrap()[1000], line(1001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_message_fails_its_records_and_everything_after() {
    if !nats_available("a_refused_message_fails_its_records_and_everything_after") {
        return;
    }
    let nats = NatsCluster::shared().await;
    let a = nats.join_durable("a").await;
    let lease = a.leases().acquire("refused").await.unwrap();
    let sink = a.traces().sink("refused", lease).await.unwrap();
    for n in 1..=3 {
        sink.record(line(n));
    }
    assert_eq!(sink.flush().await.unwrap(), 3);

    // Another writer appends record 4: every later message of this sink is refused.
    foreign(&a, "penguin.traces.refused".into(), 4).await;
    for n in 4..=23 {
        sink.record(line(n));
    }
    assert!(matches!(
        sink.flush().await,
        Err(ClusterError::Fenced { .. })
    ));
    assert_eq!(sink.failed_writes(), 20, "the whole queued burst failed");
    assert_eq!(sink.written(), 3);
    // And nothing queued afterwards is tried.
    for n in 24..=28 {
        sink.record(line(n));
    }
    assert!(sink.flush().await.is_err());
    assert_eq!(sink.failed_writes(), 25);

    let back = a.traces().read("refused").await.unwrap();
    assert_eq!(back, (1..=4).map(line).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_events_is_followed_one_by_one_under_its_ids() {
    if !nats_available("a_burst_of_events_is_followed_one_by_one_under_its_ids") {
        return;
    }
    let nats = NatsCluster::shared().await;
    let a = nats.join_durable("a").await;
    let b = nats.join_durable("b").await;
    let lease = a.leases().acquire("deltas").await.unwrap();
    let mut publisher = a.events().publisher("deltas", lease).await.unwrap();
    let mut from_start = b.events().follow("deltas", Some(0)).await.unwrap();

    // The deltas of one answer, a server event between them, more deltas: one message holds
    // events of both names.
    let name = |n: u64| (n == 101).then(|| "server_event".to_owned());
    let events: Vec<(Option<String>, Bytes)> = (1..=300).map(|n| (name(n), line(n))).collect();
    assert_eq!(publisher.publish_all(&events).await.unwrap(), 300);
    assert_eq!(publisher.last_seq(), 300);
    let stored = messages(&a, EVENT_STREAM).await;
    assert!(
        stored <= 2,
        "300 events published at once took {stored} messages"
    );

    for n in 1..=300 {
        match from_start.next().await.unwrap().unwrap() {
            FeedItem::Event(e) => {
                assert_eq!((e.seq, e.event, e.data), (n, name(n), line(n)));
            }
            other => panic!("{other:?} where event {n} was due"),
        }
    }
    // Replays and followers starting inside a message get exactly what follows the id.
    let Replay::Events(tail) = b.events().replay("deltas", 150).await.unwrap() else {
        panic!("resync where events were due");
    };
    let tail: Vec<u64> = tail.iter().map(|e| e.seq).collect();
    assert_eq!(tail, (151..=300).collect::<Vec<_>>());
    let mut inside = b.events().follow("deltas", Some(42)).await.unwrap();
    match inside.next().await.unwrap().unwrap() {
        FeedItem::Event(e) => assert_eq!((e.seq, e.data), (43, line(43))),
        other => panic!("{other:?}"),
    }
    // A live follower sees the next burst as it comes.
    let more: Vec<(Option<String>, Bytes)> = (301..=310).map(|n| (None, line(n))).collect();
    publisher.publish_all(&more).await.unwrap();
    for n in 301..=310 {
        match from_start.next().await.unwrap().unwrap() {
            FeedItem::Event(e) => assert_eq!((e.seq, e.data), (n, line(n))),
            other => panic!("{other:?} where event {n} was due"),
        }
    }

    // A refused message fails the rest of the burst: nothing of it is stored.
    foreign(&a, "penguin.events.deltas".into(), 311).await;
    let refused: Vec<(Option<String>, Bytes)> = (311..=320).map(|n| (None, line(n))).collect();
    assert!(matches!(
        publisher.publish_all(&refused).await,
        Err(ClusterError::Fenced { .. })
    ));
    assert_eq!(publisher.last_seq(), 310);
    assert_eq!(b.events().last_seq("deltas").await.unwrap(), 311);
}
