//! SSE fan-out: 1,000 subscribers of one channel, served by penguin's framing (each event
//! encoded once, shared `Bytes`, small queued events batched into one chunk) and by axum's
//! `Sse` (each subscriber encodes each event into its own buffer).
//!
//! Each variant runs in its own process so its peak memory (VmHWM) is its own. Run with
//! `cargo bench -p penguin-sse-transport --bench fanout`.

use std::convert::Infallible;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use axum::response::sse::{Event, Sse};
use axum::response::IntoResponse;
use futures::StreamExt;
use penguin_sse_transport::{
    into_response, open_stream, Channel, ChannelConfig, Epoch, EventData, EventId, SseConfig,
    SseEvent,
};

const SUBSCRIBERS: usize = 1_000;
const SMALL_EVENTS: usize = 500;
const SMALL_BYTES: usize = 300;
const LARGE_EVENTS: usize = 4;
const LARGE_BYTES: usize = 2 << 20;

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn payload(n: usize) -> EventData {
    EventData::Text(format!("{{\"t\":\"{}\"}}", "x".repeat(n)).into())
}

async fn variant(axum_sse: bool) -> (f64, usize) {
    let config = ChannelConfig {
        max_events: 10_000,
        max_bytes: 64 << 20,
        // Every reader keeps up eventually; none may be dropped as a laggard here.
        subscriber_queue: 100_000,
    };
    let ch: Arc<Channel> = Channel::with_epoch(Epoch::from_u32(1), config);
    // What every subscriber must receive: the same bytes in both variants.
    let plan: Vec<EventData> = (0..SMALL_EVENTS)
        .flat_map(|i| {
            let mut v = vec![payload(SMALL_BYTES)];
            if i % (SMALL_EVENTS / LARGE_EVENTS) == 0 {
                v.push(payload(LARGE_BYTES));
            }
            v
        })
        .collect();
    let expected: usize = plan
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let id = EventId {
                epoch: Epoch::from_u32(1),
                seq: i as u64 + 1,
            };
            SseEvent::new(id, None, d.clone()).wire().len()
        })
        .sum();
    let bodies: Vec<axum::body::Body> = (0..SUBSCRIBERS)
        .map(|_| {
            if axum_sse {
                let events = ch.subscribe().map(|ev| {
                    Ok::<_, Infallible>(
                        Event::default()
                            .data(ev.data.as_str())
                            .id(ev.id.to_string()),
                    )
                });
                Sse::new(events).into_response().into_body()
            } else {
                into_response(open_stream(&ch, None, Vec::new, &SseConfig::default())).into_body()
            }
        })
        .collect();
    let start = Instant::now();
    let readers: Vec<_> = bodies
        .into_iter()
        .map(|b| {
            tokio::spawn(async move {
                let mut body = b.into_data_stream();
                let mut got = 0;
                while got < expected {
                    match body.next().await {
                        Some(Ok(chunk)) => got += chunk.len(),
                        _ => break,
                    }
                }
                got
            })
        })
        .collect();
    for data in plan {
        ch.publish(data, None);
        tokio::task::yield_now().await;
    }
    let mut total = 0;
    for r in readers {
        let got = r.await.expect("reader");
        assert_eq!(got, expected, "a subscriber missed bytes");
        total += got;
    }
    (start.elapsed().as_secs_f64(), total)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--variant") {
        let axum_sse = args.get(pos + 1).map(String::as_str) == Some("axum");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (secs, bytes) = rt.block_on(variant(axum_sse));
        println!("{secs:.3} {bytes} {}", peak_rss_kb());
        return;
    }
    let me = std::env::current_exe().expect("own path");
    println!(
        "fanout: {SUBSCRIBERS} subscribers, {SMALL_EVENTS} events of {SMALL_BYTES} B and {LARGE_EVENTS} of {} MiB",
        LARGE_BYTES >> 20
    );
    for name in ["penguin", "axum"] {
        let out = Command::new(&me)
            .args(["--variant", name])
            .output()
            .expect("run variant");
        let text = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = text.split_whitespace().collect();
        if f.len() != 3 {
            eprintln!(
                "fanout {name}: failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::process::exit(1);
        }
        println!(
            "fanout {name:>8}: {:>7} s for all deliveries, {:>6} MiB delivered, peak RSS {:>5} MiB",
            f[0],
            f[1].parse::<u64>().unwrap_or(0) >> 20,
            f[2].parse::<u64>().unwrap_or(0) >> 10
        );
    }
}
