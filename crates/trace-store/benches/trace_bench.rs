//! Throughput of each durability policy and the cost of resuming a 100,000-record trace.
//!
//! Run with `cargo bench -p penguin-trace-store` (plain `std::time::Instant`, no harness).
//! Files go under the target directory, not `/tmp`, which is often a tmpfs where fsync is free.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use penguin_omni_protocol::{build, ApprovalDecision, Frame, OmniMessage, StopReason, TokenCounts};
use penguin_trace_store::{read_trace, resume_trace, Durability, ReadMode, Writer, WriterConfig};

/// One committed turn with a tool call: 9 records, one of them a commit point.
fn turn(n: u64) -> Vec<OmniMessage> {
    let id = format!("call_{n}");
    vec![
        build::user_text(format!("please look at file {n}")),
        build::request_begin(),
        build::thinking("Let me read it.".repeat(4), StopReason::Completed, None),
        build::assistant_text("Reading the file now.", StopReason::Completed),
        build::tool_call(
            "read_file",
            format!("{{\"path\":\"src/{n}.rs\"}}"),
            id.clone(),
            StopReason::Completed,
            None,
        ),
        build::approval_decision(ApprovalDecision::Allow, id.clone()),
        build::token_usage(
            TokenCounts::new(1000 * n, 200, 50),
            TokenCounts::new(1000, 200, 50),
        ),
        build::request_end(StopReason::Completed, Default::default()),
        build::tool_call_output("x".repeat(1024), id, StopReason::Completed),
    ]
}

fn bench_policy(dir: &Path, durability: Durability, records: usize) {
    let frames: Vec<Frame> = (0..).flat_map(turn).take(records).map(Frame::new).collect();
    let w = Writer::open(
        WriterConfig::new(dir, format!("bench-{durability:?}"))
            .date_dir("bench")
            .durability(durability),
    )
    .expect("writer");
    let _ = std::fs::remove_file(w.current_path());
    let start = Instant::now();
    let mut worst_record = Duration::ZERO;
    for f in &frames {
        let t = Instant::now();
        w.record(f);
        worst_record = worst_record.max(t.elapsed());
    }
    let queued = start.elapsed();
    w.flush().expect("flush");
    let total = start.elapsed();
    let bytes = std::fs::metadata(w.current_path())
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "{:<12} {records:>6} records {:>7.1} MB  {:>9.0} records/s on disk  (record() calls: {:>9.0}/s, slowest {:?}; failed {})",
        format!("{durability:?}"),
        bytes as f64 / 1e6,
        records as f64 / total.as_secs_f64(),
        records as f64 / queued.as_secs_f64(),
        worst_record,
        w.failed_writes(),
    );
}

fn vm_hwm_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn bench_resume(dir: &Path, records: usize) {
    let path = dir.join("resume-100k.jsonl");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        for m in (0..).flat_map(turn).take(records) {
            out.write_all(m.to_json().as_bytes()).expect("write");
            out.write_all(b"\n").expect("write");
        }
        out.flush().expect("flush");
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    // Writing 5 to clear_refs resets the peak-RSS counter (Linux), so the peak below is the
    // resume's own, not the generator's.
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = vm_hwm_kb();
    let start = Instant::now();
    let read = read_trace(&path, ReadMode::Tolerant).expect("read");
    let parsed = start.elapsed();
    let resumed = resume_trace(&read.messages);
    let total = start.elapsed();
    let after = vm_hwm_kb();
    println!(
        "resume: {records} records, {:.1} MB: read+parse {parsed:?}, resume {:?}, total {total:?}; history {} messages, {} turns",
        size as f64 / 1e6,
        total - parsed,
        resumed.history.len(),
        resumed.session_turns,
    );
    match (before, after) {
        (Some(b), Some(a)) => println!(
            "resume: peak RSS (VmHWM) {:.1} MB{} (before reading: {:.1} MB)",
            a as f64 / 1024.0,
            if reset {
                ""
            } else {
                ", process lifetime: clear_refs unavailable"
            },
            b as f64 / 1024.0
        ),
        _ => println!("resume: peak RSS unavailable (no /proc/self/status)"),
    }
    let _ = std::fs::remove_file(&path);
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trace-bench");
    std::fs::create_dir_all(&dir).expect("bench dir");
    // Resume first: its peak RSS should not include the write benchmarks' buffers.
    bench_resume(&dir, 100_000);
    bench_policy(&dir, Durability::Never, 50_000);
    bench_policy(&dir, Durability::AtCommit, 50_000);
    bench_policy(&dir, Durability::EveryRecord, 5_000);
    let _ = std::fs::remove_dir_all(&dir);
}
