//! Fan-out to many subscribers, and replay correctness over random reconnect points.

use std::sync::Arc;

use penguin_sse_transport::{
    Channel, ChannelConfig, Epoch, EventData, ReplayOutcome, ServerEvent, SseEvent, Subscription,
};
use proptest::prelude::*;
use tokio::sync::Semaphore;

fn data(s: String) -> EventData {
    EventData::Text(Arc::from(s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_subscribers_see_identical_sequences_and_a_stalled_one_catches_up() {
    const SUBS: usize = 500;
    const ROUNDS: u64 = 20;
    const PER_ROUND: u64 = 100;
    let ch = Channel::new(ChannelConfig::default());
    let mut stalled = ch.subscribe();
    // Each subscriber adds a permit when it has seen the last event of a round; the publisher
    // waits for all of them before the next round. One subscriber reads nothing until the end:
    // everything it missed is still in the replay buffer, so it loses nothing.
    let caught_up = Arc::new(Semaphore::new(0));
    let mut tasks = Vec::new();
    for _ in 0..SUBS {
        let mut sub = ch.subscribe();
        let caught_up = caught_up.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(ev) = sub.recv().await {
                let s = ev.id.seq;
                seen.push((s, ev.data));
                if s % PER_ROUND == 0 {
                    caught_up.add_permits(1);
                }
            }
            (seen, sub.lagged())
        }));
    }
    for _ in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            let n = ch.last_event_id().seq + 1;
            ch.publish(data(format!(r#"{{"n":{n}}}"#)), None);
        }
        caught_up.acquire_many(SUBS as u32).await.unwrap().forget();
    }
    assert_eq!(ch.subscriber_count(), SUBS + 1);
    let expected: Vec<u64> = (1..=ROUNDS * PER_ROUND).collect();
    let caught_up: Vec<u64> = std::iter::from_fn(|| stalled.try_next())
        .map(|e| e.id.seq)
        .collect();
    assert_eq!(caught_up, expected);
    assert!(!stalled.lagged());
    ch.close();
    let mut first: Option<Vec<(u64, EventData)>> = None;
    for t in tasks {
        let (seen, _) = t.await.unwrap();
        assert_eq!(seen.iter().map(|(s, _)| *s).collect::<Vec<_>>(), expected);
        match &first {
            None => first = Some(seen),
            Some(f) => assert!(f == &seen, "identical data"),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Publish(usize),
    Unicast,
    Reconnect(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            6 => (1usize..40).prop_map(Op::Publish),
            1 => Just(Op::Unicast),
            2 => any::<u64>().prop_map(Op::Reconnect),
        ],
        1..120,
    )
}

fn drain(sub: &mut Subscription) -> Vec<SseEvent> {
    std::iter::from_fn(|| sub.try_next()).collect()
}

proptest! {
    /// Whatever point a client reconnects from, it receives every broadcast event after that
    /// point exactly once and in order (replayed, then live), or `resync_required` when the
    /// buffer no longer holds the whole gap, followed by every broadcast event after connecting.
    #[test]
    fn replay_is_gap_free_and_duplicate_free(
        ops in ops(),
        max_events in 1usize..16,
        max_bytes in 20usize..400,
    ) {
        let ch = Channel::with_epoch(Epoch::from_u32(7), ChannelConfig {
            max_events,
            max_bytes,
            subscriber_queue: 10_000,
        });
        let mut unicast_to = ch.subscribe();
        let mut broadcast: Vec<u64> = Vec::new();
        // An independent model of what the buffer should hold: (seq, bytes).
        let mut model: std::collections::VecDeque<(u64, usize)> = Default::default();
        // (resume point, seqs broadcast before connecting, whole gap still buffered, subscription,
        // events read so far). Every client reads after each step, as a live browser does.
        let mut clients: Vec<(u64, usize, bool, Subscription, Vec<SseEvent>)> = Vec::new();
        for op in ops {
            for (_, _, _, sub, seen) in &mut clients {
                seen.extend(drain(sub));
            }
            match op {
                Op::Publish(size) => {
                    let seq = ch.publish(data("x".repeat(size)), None).seq;
                    broadcast.push(seq);
                    model.push_back((seq, size));
                    while model.len() > max_events
                        || model.iter().map(|(_, b)| b).sum::<usize>() > max_bytes
                    {
                        model.pop_front();
                    }
                }
                Op::Unicast => {
                    ch.send_to(unicast_to.id(), data("u".into()), None).unwrap();
                }
                Op::Reconnect(pick) => {
                    let last = pick % (ch.last_event_id().seq + 1);
                    let id = format!("{}-{last}", ch.epoch());
                    let sub = ch.connect(Some(&id), || vec![ServerEvent::Hello]);
                    let whole_gap_buffered = broadcast
                        .iter()
                        .filter(|s| **s > last)
                        .all(|s| model.iter().any(|(m, _)| m == s));
                    clients.push((last, broadcast.len(), whole_gap_buffered, sub, Vec::new()));
                }
            }
        }
        drop(drain(&mut unicast_to));
        let hello = ServerEvent::Hello.to_json();
        for (last, published_before, whole_gap_buffered, mut sub, mut events) in clients {
            events.extend(drain(&mut sub));
            let seqs: Vec<u64> = events.iter().map(|e| e.id.seq).collect();
            prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {:?}", seqs);
            let hello_at = events.iter().position(|e| e.data.as_str() == hello).unwrap();
            let live: Vec<u64> = events[hello_at + 1..].iter().map(|e| e.id.seq).collect();
            prop_assert_eq!(&live[..], &broadcast[published_before..]);
            let gap: Vec<u64> = broadcast[..published_before]
                .iter()
                .copied()
                .filter(|s| *s > last)
                .collect();
            prop_assert_eq!(
                whole_gap_buffered,
                matches!(sub.replay(), ReplayOutcome::Replayed(_)),
                "hit exactly when the whole gap is still buffered"
            );
            match sub.replay() {
                ReplayOutcome::Replayed(n) => {
                    prop_assert_eq!(n, hello_at);
                    prop_assert_eq!(&seqs[..hello_at], &gap[..]);
                }
                ReplayOutcome::ResyncRequired => {
                    prop_assert_eq!(hello_at, 1);
                    prop_assert_eq!(events[0].data.as_str(), r#"{"type":"resync_required"}"#);
                }
                ReplayOutcome::Fresh => prop_assert!(false, "a Last-Event-ID was given"),
            }
        }
    }
}
