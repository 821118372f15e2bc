//! What `penguin scenario run` on perf-1000 costs, part by part, beside the floor of each part:
//! the least any engine built on `serde_json` spends reading that file and writing its stream
//! (docs/performance.md, "Why perf-1000 cannot be 10x faster").
//!
//! Run with `cargo bench -p penguin-harness --bench scenario_floor` (plain `std::time::Instant`, no
//! harness; `cargo xtask bench` runs it too). It generates perf-1000 with
//! `../shared/tools/perf/gen.py` and says so and stops when that is not there.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use penguin_agent::scenario::{run_scenario_streaming, MemoryTrace, Scenario};
use penguin_omni_protocol::Frame;
use serde::de::IgnoredAny;
use serde::Deserialize;

/// The least a run needs of a step: its delay and its message's fields, no exactness check.
#[derive(Deserialize)]
struct LeastStep<'a> {
    #[serde(rename = "delay_ms")]
    _delay_ms: u64,
    #[serde(borrow, rename = "message")]
    _message: LeastMessage<'a>,
}

#[derive(Deserialize)]
struct LeastMessage<'a> {
    #[serde(rename = "type", borrow)]
    _kind: &'a str,
    #[serde(borrow, rename = "payload")]
    _payload: LeastPayload<'a>,
}

/// Every field a scripted payload of perf-1000 has: the short ones borrowed, the contents
/// owned (as any message that outlives the file's text must own them).
#[derive(Deserialize)]
#[allow(dead_code)]
struct LeastPayload<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    role: Option<&'a str>,
    #[serde(borrow)]
    event_type: Option<&'a str>,
    #[serde(borrow)]
    stop_reason: Option<&'a str>,
    thinking: Option<String>,
    text: Option<String>,
    output: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
struct LeastScript<'a> {
    #[serde(borrow, rename = "stream")]
    _stream: Vec<LeastStep<'a>>,
    #[serde(rename = "outcome")]
    _outcome: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct LeastScenario<'a> {
    #[serde(borrow, rename = "llm")]
    _llm: Vec<LeastScript<'a>>,
    #[serde(borrow, rename = "tools")]
    _tools: HashMap<String, LeastScript<'a>>,
    #[serde(rename = "runs")]
    _runs: IgnoredAny,
}

/// The median of three timings of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    median_of_runs(|| {
        let start = Instant::now();
        f();
        start.elapsed()
    })
}

/// The median of three runs of `f`, each timing itself.
fn median_of_runs(mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..3).map(|_| f()).collect();
    times.sort();
    times[1]
}

fn generate(dir: &Path) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gen = root.join("../shared/tools/perf/gen.py");
    if !gen.exists() {
        println!("scenario_floor: {} not found, skipped", gen.display());
        return None;
    }
    std::fs::create_dir_all(dir).ok()?;
    let out = dir.join("perf-1000.json");
    let file = std::fs::File::create(&out).ok()?;
    let ok = std::process::Command::new("python3")
        .arg(&gen)
        .args(["perf", "1000"])
        .stdout(file)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("scenario_floor: gen.py failed, skipped");
        return None;
    }
    Some(out)
}

fn ms(d: Duration) -> String {
    format!("{:7.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/scenario-floor");
    let Some(path) = generate(&dir) else {
        return;
    };

    let read = median(|| {
        std::hint::black_box(std::fs::read_to_string(&path).expect("read"));
    });
    let text = std::fs::read_to_string(&path).expect("read");
    let syntax = median(|| {
        let _: IgnoredAny = serde_json::from_str(&text).expect("perf-1000 is JSON");
    });
    let least = median(|| {
        let parsed: LeastScenario<'_> = serde_json::from_str(&text).expect("perf-1000 parses");
        std::hint::black_box(parsed);
    });
    let ours_read = median(|| {
        std::hint::black_box(Scenario::from_file(&path).expect("perf-1000 is a scenario"));
    });

    // The run, keeping every frame so that serializing them can be timed on its own after.
    let mut frames: Vec<Frame> = Vec::new();
    let scenario = Scenario::from_file(&path).expect("perf-1000 is a scenario");
    let start = Instant::now();
    run_scenario_streaming(scenario, Arc::new(MemoryTrace::default()), &mut |f| {
        frames.push(f)
    })
    .expect("a runtime");
    let ours_run = start.elapsed();
    // Each message is serialized in the run just as it is made, its data in the cache: time a
    // second pass over each batch, the first having brought it in.
    let serialize = median_of_runs(|| {
        let mut spent = Duration::ZERO;
        for batch in frames.chunks(256) {
            let warm: usize = batch.iter().map(|f| f.message().to_json().len()).sum();
            let start = Instant::now();
            let bytes: usize = batch.iter().map(|f| f.message().to_json().len()).sum();
            spent += start.elapsed();
            std::hint::black_box((warm, bytes));
        }
        spent
    });
    // Into a new file, 64 KiB at a time, as the stream is written (the file a run's stdout goes
    // to is made, and an old one's pages dropped, before it starts).
    let out = dir.join("stream.jsonl");
    let stream: Vec<u8> = frames
        .iter()
        .flat_map(|f| f.json().bytes().chain(std::iter::once(b'\n')))
        .collect();
    let write = median_of_runs(|| {
        let _ = std::fs::remove_file(&out);
        let start = Instant::now();
        let mut file = std::fs::File::create(&out).expect("create");
        for chunk in stream.chunks(64 << 10) {
            file.write_all(chunk).expect("write");
        }
        drop(file);
        start.elapsed()
    });

    println!(
        "scenario_floor: perf-1000 ({} MB, {} streamed messages), medians of 3",
        text.len() / 1_000_000,
        frames.len()
    );
    println!("  the floor, one thread each:");
    println!("    read the file                          {}", ms(read));
    println!("    check its JSON syntax (IgnoredAny)     {}", ms(syntax));
    println!("    parse the least a run needs            {}", ms(least));
    println!(
        "    serialize every streamed message       {}",
        ms(serialize)
    );
    println!("    write the stream                       {}", ms(write));
    // Reading and parsing split over both cores; then serializing on the run's thread while
    // the other writes.
    let floor = (read + least) / 2 + serialize.max(write);
    println!(
        "    → at best {} on two cores, before any engine work",
        ms(floor).trim_start()
    );
    println!("  penguin:");
    println!(
        "    read and check the scenario (2 threads) {}",
        ms(ours_read)
    );
    println!(
        "    run it (engine + serialization)        {}",
        ms(ours_run)
    );
}
