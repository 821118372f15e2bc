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

/// Per-event latency at 1,000 subscribers: events published every 2 ms, each subscriber's
/// response stream read by its own task; the delay from publish to the chunk carrying the
/// event. Returns (p50, p99, max) in ms and the peak RSS of the whole fan-out.
async fn latency() -> (f64, f64, f64) {
    const EVENTS: usize = 200;
    let ch: Arc<Channel> = Channel::with_epoch(Epoch::from_u32(1), ChannelConfig::default());
    let sent: Arc<std::sync::Mutex<Vec<Option<Instant>>>> =
        Arc::new(std::sync::Mutex::new(vec![None; EVENTS + 1]));
    let mut readers = Vec::new();
    for _ in 0..SUBSCRIBERS {
        let mut body = into_response(open_stream(&ch, None, Vec::new, &SseConfig::default()))
            .into_body()
            .into_data_stream();
        let sent = sent.clone();
        readers.push(tokio::spawn(async move {
            let mut delays = Vec::with_capacity(EVENTS);
            while delays.len() < EVENTS {
                let Some(Ok(chunk)) = body.next().await else {
                    break;
                };
                let now = Instant::now();
                let text = String::from_utf8_lossy(&chunk);
                for line in text.lines().filter_map(|l| l.strip_prefix("id: 00000001-")) {
                    if let Some(at) = line
                        .parse::<usize>()
                        .ok()
                        .and_then(|n| sent.lock().unwrap()[n])
                    {
                        delays.push(now.duration_since(at).as_secs_f64() * 1000.0);
                    }
                }
            }
            delays
        }));
    }
    for _ in 0..EVENTS {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let mut sent = sent.lock().unwrap();
        let id = ch.last_event_id().seq as usize + 1;
        sent[id] = Some(Instant::now());
        ch.publish(payload(SMALL_BYTES), None);
    }
    let mut all = Vec::new();
    for r in readers {
        all.extend(r.await.expect("reader"));
    }
    all.sort_by(f64::total_cmp);
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    (at(0.5), at(0.99), all[all.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--latency") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (p50, p99, max) = rt.block_on(latency());
        println!("{p50:.3} {p99:.3} {max:.3} {}", peak_rss_kb());
        return;
    }
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
    let out = Command::new(&me)
        .arg("--latency")
        .output()
        .expect("run the latency variant");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() != 4 {
        eprintln!("latency: failed: {}", String::from_utf8_lossy(&out.stderr));
        std::process::exit(1);
    }
    println!(
        "latency {SUBSCRIBERS} subscribers, an event every 2 ms: p50 {} ms, p99 {} ms, max {} ms, peak RSS {} MiB",
        f[0],
        f[1],
        f[2],
        f[3].parse::<u64>().unwrap_or(0) >> 10
    );
}
