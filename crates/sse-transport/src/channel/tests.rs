use super::*;
use penguin_omni_protocol::{build, StopReason, StreamEventType};

fn text(s: &str) -> EventData {
    EventData::Text(Arc::from(s))
}

fn seqs(events: &[SseEvent]) -> Vec<u64> {
    events.iter().map(|e| e.id.seq).collect()
}

fn small(max_events: usize, max_bytes: usize) -> Arc<Channel> {
    Channel::with_epoch(
        Epoch::from_u32(0xdead_beef),
        ChannelConfig {
            max_events,
            max_bytes,
            subscriber_queue: 16,
        },
    )
}

#[test]
fn ids_are_monotonic_and_unicast_consumes_a_seq() {
    let ch = small(100, 1 << 20);
    assert_eq!(ch.last_event_id().to_string(), "deadbeef-0");
    let sub = ch.subscribe();
    assert_eq!(ch.publish(text("1"), None).to_string(), "deadbeef-1");
    assert_eq!(
        ch.send_to(sub.id(), text("u"), Some(SERVER_EVENT))
            .unwrap()
            .seq,
        2
    );
    assert_eq!(ch.publish(text("3"), None).seq, 3);
    assert_eq!(ch.last_event_id().seq, 3);
    // The unicast event is not buffered.
    assert_eq!(seqs(&ch.replay_after("deadbeef-0").unwrap()), [1, 3]);
}

#[test]
fn replay_hits_and_misses_as_the_reference() {
    let ch = small(3, 1 << 20);
    for i in 1..=5 {
        ch.publish(text(&i.to_string()), None);
    }
    // Buffer holds 3..=5; last evicted is 2.
    assert_eq!(seqs(&ch.replay_after("deadbeef-2").unwrap()), [3, 4, 5]);
    assert_eq!(seqs(&ch.replay_after("deadbeef-4").unwrap()), [5]);
    assert_eq!(
        seqs(&ch.replay_after("deadbeef-5").unwrap()),
        Vec::<u64>::new()
    );
    for miss in [
        "deadbeef-1", // its successor 2 was evicted
        "deadbeef-6", // from the future
        "cafebabe-4", // another epoch
        "deadbeef",
        "-4",
        "deadbeef-x",
        "deadbeef--1",
        "",
    ] {
        assert!(ch.replay_after(miss).is_none(), "{miss:?} should miss");
    }
}

#[test]
fn byte_cap_evicts_and_an_oversized_event_is_delivered_then_dropped() {
    let ch = small(100, 10);
    let mut sub = ch.subscribe();
    let mut read = Vec::new();
    for s in ["aaaa", "bbbb", "cccc"] {
        ch.publish(text(s), None); // the third: 12 bytes > 10, evicts 1
        read.extend(std::iter::from_fn(|| sub.try_next()).map(|e| e.id.seq));
    }
    assert_eq!(seqs(&ch.replay_after("deadbeef-1").unwrap()), [2, 3]);
    assert!(ch.replay_after("deadbeef-0").is_none());
    assert_eq!(read, [1, 2, 3], "read before eviction");
    ch.publish(text("this is too long"), None);
    assert_eq!(ch.buffered(), 0);
    assert_eq!(
        seqs(&ch.replay_after("deadbeef-4").unwrap()),
        Vec::<u64>::new()
    );
    assert!(ch.replay_after("deadbeef-3").is_none());
    let got: Vec<u64> = std::iter::from_fn(|| sub.try_next())
        .map(|e| e.id.seq)
        .collect();
    assert_eq!(got, [4], "past the replay floor, yet delivered live");
}

#[test]
fn connect_orders_replay_then_initial_then_live() {
    let ch = small(100, 1 << 20);
    ch.publish(text("1"), None);
    ch.publish(text("2"), None);
    let mut sub = ch.connect(Some("deadbeef-1"), || vec![ServerEvent::Hello]);
    assert_eq!(sub.replay(), ReplayOutcome::Replayed(1));
    ch.publish(text("live"), None);
    let got: Vec<SseEvent> = std::iter::from_fn(|| sub.try_next()).collect();
    assert_eq!(seqs(&got), [2, 3, 4]);
    assert_eq!(got[1].event, Some(SERVER_EVENT));
    assert_eq!(got[1].data.as_str(), r#"{"type":"hello"}"#);
    assert_eq!(got[2].data.as_str(), "live");

    let mut miss = ch.connect(Some("00000000-1"), Vec::new);
    assert_eq!(miss.replay(), ReplayOutcome::ResyncRequired);
    let first = miss.try_next().unwrap();
    assert_eq!(first.data.as_str(), r#"{"type":"resync_required"}"#);
    assert_eq!(first.id.seq, 5);

    let mut fresh = ch.connect(None, || vec![ServerEvent::Hello]);
    assert_eq!(fresh.replay(), ReplayOutcome::Fresh);
    assert_eq!(fresh.try_next().unwrap().id.seq, 6);
    assert!(fresh.try_next().is_none());
}

#[test]
fn a_subscriber_behind_reads_everything_still_buffered() {
    let ch = small(1000, 1 << 20);
    let mut slow = ch.subscribe();
    for i in 0..600 {
        ch.publish(text(&i.to_string()), None);
    }
    let got: Vec<u64> = std::iter::from_fn(|| slow.try_next())
        .map(|e| e.id.seq)
        .collect();
    assert_eq!(got, (1..=600).collect::<Vec<_>>());
    assert!(!slow.lagged());
}

#[test]
fn a_subscriber_that_falls_out_of_the_buffer_is_told_to_resync_and_reads_on() {
    let ch = small(10, 1 << 20);
    let mut slow = ch.subscribe();
    let mut fast = ch.subscribe();
    let mut fast_seen = Vec::new();
    ch.send_to(slow.id(), text("hello"), Some(SERVER_EVENT)); // seq 1
    for i in 0..40 {
        ch.publish(text(&i.to_string()), None); // seqs 2..=41
        fast_seen.extend(std::iter::from_fn(|| fast.try_next()).map(|e| e.id.seq));
    }
    assert_eq!(fast_seen, (2..=41).collect::<Vec<_>>());
    // What was sent to it alone first, then resync (a new seq), then only newer events.
    let first = slow.try_next().unwrap();
    assert_eq!((first.id.seq, first.data.as_str()), (1, "hello"));
    let resync = slow.try_next().unwrap();
    assert_eq!(resync.id.seq, 42);
    assert_eq!(resync.data.as_str(), r#"{"type":"resync_required"}"#);
    assert!(slow.try_next().is_none());
    ch.publish(text("after"), None);
    assert_eq!(slow.try_next().unwrap().id.seq, 43);
    assert!(!slow.lagged(), "resynced, not disconnected");
    assert_eq!(ch.subscriber_count(), 2);
}

#[test]
fn too_many_unread_unicast_events_disconnect_only_that_subscriber() {
    let ch = small(1000, 1 << 20);
    let mut slow = ch.subscribe();
    let mut other = ch.subscribe();
    for _ in 0..16 {
        assert!(ch.send_to(slow.id(), text("u"), None).is_some());
    }
    assert_eq!(ch.send_to(slow.id(), text("u"), None), None);
    assert!(
        slow.try_next().is_none(),
        "a disconnected stream ends at once"
    );
    assert!(slow.lagged());
    ch.publish(text("x"), None);
    assert_eq!(other.try_next().unwrap().id.seq, 18);
    assert_eq!(ch.subscriber_count(), 1);
}

#[test]
fn dropping_a_subscription_unsubscribes() {
    let ch = small(10, 1 << 20);
    let a = ch.subscribe();
    let _b = ch.subscribe();
    assert_eq!(ch.subscriber_count(), 2);
    drop(a);
    assert_eq!(ch.subscriber_count(), 1);
}

#[test]
fn live_snapshot_pairs_cursor_with_fragments() {
    let ch = small(100, 1 << 20);
    let ok = StopReason::Completed;
    ch.publish_message(&Frame::new(build::partial_text(
        StreamEventType::Start,
        "a",
        ok,
    )));
    ch.publish_message(&Frame::new(build::partial_text(
        StreamEventType::Delta,
        "b",
        ok,
    )));
    let snap = ch.live_snapshot();
    assert_eq!(snap.cursor.seq, 2);
    assert_eq!(snap.fragments[0].model().unwrap().content(), Some("ab"));
    ch.publish_message(&Frame::new(build::partial_text(
        StreamEventType::Stop,
        "",
        ok,
    )));
    assert!(ch.live_snapshot().fragments.is_empty());
    ch.publish_message(&Frame::new(build::partial_text(
        StreamEventType::Start,
        "z",
        ok,
    )));
    ch.clear_live_tail();
    assert!(ch.live_snapshot().fragments.is_empty());
}

#[test]
fn a_continuing_channel_numbers_after_its_predecessor_and_shows_broadcasts_to_its_observer() {
    let epoch = Epoch::from_u32(0xabcd);
    let ch = Channel::continuing(epoch, 41, ChannelConfig::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    assert!(ch.observe(Box::new(move |ev| kept.lock().unwrap().push(ev.id.seq))));
    assert!(!ch.observe(Box::new(|_| {})), "one observer per channel");
    // The predecessor's last id replays nothing and is no miss.
    assert_eq!(ch.replay_after("0000abcd-41").map(|v| v.len()), Some(0));
    assert_eq!(ch.publish(text("a"), None).seq, 42);
    let sub = ch.connect(Some("0000abcd-42"), || vec![ServerEvent::Hello]);
    assert_eq!(
        ch.publish(text("b"), None).seq,
        44,
        "the unicast hello took 43"
    );
    drop(sub);
    assert_eq!(*seen.lock().unwrap(), [42, 44], "broadcasts only, in order");
}

#[test]
fn a_mirror_keeps_its_sources_ids_and_gives_unicast_events_the_id_before_them() {
    let epoch = Epoch::from_u32(7);
    let ch = Channel::mirror(epoch, 10, ChannelConfig::default());
    assert_eq!(ch.publish(text("11"), None).seq, 11);
    assert_eq!(ch.publish(text("12"), None).seq, 12);
    let mut sub = ch.connect(Some("00000007-10"), || vec![ServerEvent::Hello]);
    assert_eq!(ch.publish(text("13"), None).seq, 13, "the hello took no id");
    let ids: Vec<u64> = std::iter::from_fn(|| sub.try_next())
        .map(|e| e.id.seq)
        .collect();
    assert_eq!(
        ids,
        [11, 12, 12, 13],
        "replay, hello under the id before it, live"
    );
    let mut missed = ch.connect(Some("00000007-3"), Vec::new);
    let resync = missed.try_next().unwrap();
    assert_eq!((resync.id.seq, resync.event), (13, Some(SERVER_EVENT)));
}

fn drain(sub: &mut Subscription) -> Vec<(u64, String)> {
    std::iter::from_fn(|| sub.try_next())
        .map(|e| (e.id.seq, e.data.as_str().to_owned()))
        .collect()
}

fn hello() -> Vec<ServerEvent> {
    vec![ServerEvent::Hello]
}

#[test]
fn a_shared_mirror_places_a_snapshot_at_the_sources_event_it_describes() {
    let epoch = Epoch::from_u32(7);
    let ch = Channel::mirror(epoch, 10, ChannelConfig::default());
    for i in 11..=13 {
        ch.publish(text(&i.to_string()), None);
    }
    let hello = EventData::from(&ServerEvent::Hello).as_str().to_owned();
    // Fresh, the snapshot describing event 12: then 13 and what follows; 11 and 12 not sent.
    let mut fresh = ch.connect_mirror(None, Some(12), self::hello).unwrap();
    assert_eq!(fresh.replay(), ReplayOutcome::Fresh);
    ch.publish(text("14"), None);
    assert_eq!(
        drain(&mut fresh),
        [(12, hello.clone()), (13, "13".into()), (14, "14".into())]
    );
    // Back from 11 with the snapshot at 13: 12 and 13 first, then the snapshot, then 14.
    let mut back = ch
        .connect_mirror(Some("00000007-11"), Some(13), self::hello)
        .unwrap();
    assert_eq!(back.replay(), ReplayOutcome::Replayed(2));
    assert_eq!(
        drain(&mut back),
        [
            (12, "12".into()),
            (13, "13".into()),
            (13, hello.clone()),
            (14, "14".into())
        ]
    );
    // No `at`: the snapshot describes the channel's newest event.
    let mut newest = ch
        .connect_mirror(Some("00000007-14"), None, self::hello)
        .unwrap();
    assert_eq!(drain(&mut newest), [(14, hello.clone())]);
    // Another epoch, or an id after `at`: resync_required, then the snapshot.
    for miss in ["cafebabe-12", "00000007-14"] {
        let mut sub = ch
            .connect_mirror(Some(miss), Some(13), self::hello)
            .unwrap();
        assert_eq!(sub.replay(), ReplayOutcome::ResyncRequired, "{miss}");
        let got = drain(&mut sub);
        assert_eq!(got[0].0, 13);
        assert!(got[0].1.contains("resync_required"), "{miss}: {got:?}");
        assert_eq!(got[1], (13, hello.clone()));
        assert_eq!(got[2], (14, "14".into()));
    }
}

#[test]
fn a_shared_mirror_sends_a_subscriber_elsewhere_when_it_cannot_serve_it_in_order() {
    let epoch = Epoch::from_u32(7);
    let config = ChannelConfig {
        max_events: 2,
        ..ChannelConfig::default()
    };
    let ch = Channel::mirror(epoch, 10, config);
    // Started at 10: what came before is not here.
    assert!(ch
        .connect_mirror(Some("00000007-9"), Some(10), Vec::new)
        .is_none());
    assert!(ch.connect_mirror(None, Some(9), Vec::new).is_none());
    for i in 11..=14 {
        ch.publish(text(&i.to_string()), None);
    }
    // 11 and 12 were evicted: a replay from 11 cannot be served here.
    assert!(ch
        .connect_mirror(Some("00000007-11"), Some(14), Vec::new)
        .is_none());
    assert!(ch
        .connect_mirror(Some("00000007-12"), Some(14), Vec::new)
        .is_some());
    // The snapshot describes event 16, which has not arrived: a replay from 13 would have to
    // wait for 15 and 16 before the snapshot.
    assert!(ch
        .connect_mirror(Some("00000007-13"), Some(16), Vec::new)
        .is_none());
    // A fresh one is fine: 15 and 16 are in its snapshot, and skipped when they come.
    let mut fresh = ch.connect_mirror(None, Some(16), self::hello).unwrap();
    for i in 15..=17 {
        ch.publish(text(&i.to_string()), None);
    }
    let got: Vec<u64> = drain(&mut fresh).into_iter().map(|e| e.0).collect();
    assert_eq!(got, [16, 17]);
    // Closed: nobody is served here any more.
    ch.close();
    assert!(ch.connect_mirror(None, None, Vec::new).is_none());
}

#[test]
fn a_mirror_closes_only_when_nobody_reads_it() {
    let ch = Channel::mirror(Epoch::from_u32(7), 0, ChannelConfig::default());
    let sub = ch.connect_mirror(None, None, Vec::new).unwrap();
    assert!(!ch.close_if_unwatched());
    drop(sub);
    assert!(ch.close_if_unwatched());
    assert!(ch.connect_mirror(None, None, Vec::new).is_none());
}

#[test]
fn a_relayed_event_keeps_its_id_and_must_be_the_next() {
    let source = Channel::with_epoch(Epoch::from_u32(7), ChannelConfig::default());
    let mirror = Channel::mirror(Epoch::from_u32(7), 0, ChannelConfig::default());
    let mut sub = mirror.connect_mirror(None, None, Vec::new).unwrap();
    let first = SseEvent::new(source.publish(text("a"), None), None, text("a"));
    let second = SseEvent::new(source.publish(text("b"), None), None, text("b"));
    assert!(!mirror.relay(&second), "1 comes first");
    assert!(mirror.relay(&first));
    assert!(mirror.relay(&second));
    assert!(!mirror.relay(&second), "not twice");
    let other = SseEvent::new(
        EventId {
            epoch: Epoch::from_u32(8),
            seq: 3,
        },
        None,
        text("c"),
    );
    assert!(!mirror.relay(&other), "another epoch");
    assert_eq!(drain(&mut sub), [(1, "a".into()), (2, "b".into())]);
    assert_eq!(mirror.last_event_id().seq, 2);
}
