//! Merge-queue throughput: items per second through one consumer from 1, 4 and 16 producers,
//! with and without an enqueue hook. Run with `cargo bench -p penguin-merge-queue`.

use std::time::Instant;

use futures::StreamExt;
use penguin_merge_queue::{merge_queue, merge_queue_with_hook};

const ITEMS: usize = 2_000_000;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    for producers in [1usize, 4, 16] {
        for hooked in [false, true] {
            let start = Instant::now();
            let received = rt.block_on(async {
                let (producer, consumer) = if hooked {
                    let mut seen = 0u64;
                    merge_queue_with_hook(move |x: &u64| seen = seen.wrapping_add(*x))
                } else {
                    merge_queue()
                };
                let per = ITEMS / producers;
                for _ in 0..producers {
                    let p = producer.clone();
                    tokio::spawn(async move {
                        for i in 0..per as u64 {
                            p.push(i);
                            if i % 1024 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                    });
                }
                drop(producer);
                consumer.fold(0usize, |n, _| async move { n + 1 }).await
            });
            let secs = start.elapsed().as_secs_f64();
            println!(
                "merge-queue: {producers:>2} producer(s){}: {received} items in {secs:.3}s = {:.1} M items/s",
                if hooked { " + hook" } else { "" },
                received as f64 / secs / 1e6
            );
        }
    }
}
