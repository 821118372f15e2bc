//! The queue under generated schedules: per-producer order kept, nothing lost or duplicated,
//! end-of-stream only after the last producer is gone.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use penguin_merge_queue::{merge_queue, merge_queue_with_hook, TryNextError};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Push(usize),
    Drop(usize),
    Pull,
}

fn schedule() -> impl Strategy<Value = (usize, Vec<Step>)> {
    (1usize..6).prop_flat_map(|n| {
        let step = prop_oneof![
            4 => (0..n).prop_map(Step::Push),
            1 => (0..n).prop_map(Step::Drop),
            3 => Just(Step::Pull),
        ];
        (Just(n), proptest::collection::vec(step, 0..120))
    })
}

proptest! {
    #[test]
    fn order_and_completeness((n, steps) in schedule()) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook_seen = seen.clone();
        let (first, mut consumer) = merge_queue_with_hook(move |item: &(usize, usize)| hook_seen.lock().unwrap().push(*item));
        let mut producers: Vec<Option<_>> = (1..n).map(|_| Some(first.clone())).collect();
        producers.insert(0, Some(first));
        let mut counters = vec![0usize; n];
        let mut pulled = Vec::new();
        for step in steps {
            match step {
                Step::Push(p) => if let Some(prod) = &producers[p] {
                    prod.push((p, counters[p]));
                    counters[p] += 1;
                },
                Step::Drop(p) => { producers[p] = None; }
                Step::Pull => match consumer.try_next() {
                    Ok(item) => pulled.push(item),
                    Err(TryNextError::Closed) => prop_assert!(producers.iter().all(Option::is_none), "end-of-stream while a producer lives"),
                    Err(TryNextError::Empty) => prop_assert!(producers.iter().any(Option::is_some)),
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                },
            }
        }
        // Drain: with producers still alive the queue must not report the end.
        while let Ok(item) = consumer.try_next() { pulled.push(item); }
        let alive = producers.iter().any(Option::is_some);
        prop_assert_eq!(consumer.try_next(), Err(if alive { TryNextError::Empty } else { TryNextError::Closed }));
        drop(producers);
        prop_assert_eq!(consumer.try_next(), Err(TryNextError::Closed));

        // The hook saw exactly the consumer's order; per-producer order kept; nothing lost.
        prop_assert_eq!(&*seen.lock().unwrap(), &pulled);
        for (p, count) in counters.iter().enumerate() {
            let mine: Vec<usize> = pulled.iter().filter(|(q, _)| *q == p).map(|(_, i)| *i).collect();
            prop_assert_eq!(mine, (0..*count).collect::<Vec<_>>());
        }
    }
}

#[tokio::test]
async fn concurrent_tasks_end_only_after_last_producer() {
    let (producer, consumer) = merge_queue::<(usize, usize)>();
    let mut handles = Vec::new();
    for p in 0..8 {
        let prod = producer.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..500 {
                prod.push((p, i));
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    drop(producer);
    let all: Vec<_> = consumer.collect().await;
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(all.len(), 8 * 500);
    for p in 0..8 {
        let mine: Vec<usize> = all
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(mine, (0..500).collect::<Vec<_>>());
    }
}

#[tokio::test]
async fn waiting_consumer_wakes_on_push_and_on_last_drop() {
    let (producer, mut consumer) = merge_queue::<u8>();
    let waiter = tokio::spawn(async move {
        let first = consumer.next().await;
        let end = consumer.next().await;
        (first, end)
    });
    tokio::task::yield_now().await;
    producer.push(7);
    tokio::task::yield_now().await;
    drop(producer);
    assert_eq!(waiter.await.unwrap(), (Some(7), None));
}

#[test]
fn push_after_consumer_drop_runs_hook_but_reports_false() {
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    let (producer, consumer) = merge_queue_with_hook(move |_: &u8| *c.lock().unwrap() += 1);
    assert!(producer.push(1));
    drop(consumer);
    assert!(!producer.push(2));
    assert!(!producer.is_consumer_alive());
    assert_eq!(*count.lock().unwrap(), 2);
}
