//! SIGKILL a process that is appending from several threads, many times, and check that every
//! crash costs at most the record being written, that no record is interleaved with another,
//! and that the torn tail is healed by the next writer.
//!
//! The child is this test binary itself, re-executed with `CHILD_ENV` set and filtered to the
//! ignored `crash_child` test.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use penguin_omni_protocol::{build, Body, ModelPayload, OmniMessage, StopReason, TokenCounts};
use penguin_trace_store::{
    parse_trace_lines, resume_trace, Durability, ReadMode, Writer, WriterConfig,
};

const CHILD_ENV: &str = "PENGUIN_TRACE_CRASH_CHILD";
const SID: &str = "session-2026-07-18-03-10-22-c0ffee00";
const DATE: &str = "2026-07-18";
const ITERATIONS: u32 = 20;
/// Kills per file: later kills land on a file whose tail an earlier kill may have torn.
const KILLS_PER_FILE: u32 = 4;

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `<id>|<checksum of body>|<body>`: a record cut or mixed with another fails the checksum.
fn tagged(id: &str, len: usize) -> String {
    let unit = format!("{id};");
    let body = unit.repeat(len / unit.len() + 1);
    format!("{id}|{:016x}|{body}", fnv(body.as_bytes()))
}

fn verify_tagged(s: &str) -> Result<String, String> {
    let mut parts = s.splitn(3, '|');
    let (Some(id), Some(sum), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("not a tagged payload: {:.80}", s));
    };
    if format!("{:016x}", fnv(body.as_bytes())) != sum {
        return Err(format!("checksum mismatch for {id}"));
    }
    Ok(id.to_owned())
}

struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng(t ^ u64::from(std::process::id()) << 32 | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
#[ignore = "the child process of sigkill_while_appending; run by that test"]
fn crash_child() {
    // `cargo test -- --ignored` reaches this entry point too; without the parent's
    // instructions there is nothing to run.
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        eprintln!("crash_child only runs as the child of sigkill_while_appending");
        return;
    };
    let (dir, rest) = spec.split_once('#').expect("dir#index#iteration");
    let (index, iteration) = rest.split_once('#').expect("dir#index#iteration");
    let w = Writer::open(
        WriterConfig::new(dir, SID)
            .date_dir(DATE)
            .start_index(index.parse().unwrap())
            .durability(Durability::AtCommit),
    )
    .unwrap();
    let prefix = format!("i{iteration}");
    let (call_tx, call_rx) = mpsc::channel::<String>();
    let call_rx = Arc::new(Mutex::new(call_rx));

    let mut threads = Vec::new();
    for t in 0..2 {
        let (w, rx) = (w.clone(), call_rx.clone());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
            loop {
                let id = rx.lock().unwrap().recv().unwrap();
                std::thread::sleep(Duration::from_micros(rng.below(3000)));
                // Every fifth output is 1-3 MB: long enough for a kill to land mid-write.
                let len = if rng.below(5) == 0 {
                    (1 << 20) + rng.below(2 << 20) as usize
                } else {
                    rng.below(2000) as usize
                };
                w.record_message(build::tool_call_output(
                    tagged(&id, len),
                    id,
                    StopReason::Completed,
                ));
            }
        }));
    }
    {
        let (w, prefix) = (w.clone(), prefix.clone());
        threads.push(std::thread::spawn(move || {
            for n in 0.. {
                w.record_message(build::user_text(tagged(&format!("{prefix}-steer{n}"), 200)));
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
    }
    for n in 0u64.. {
        w.record_message(build::user_text(tagged(
            &format!("{prefix}-prompt{n}"),
            100,
        )));
        w.record_message(build::request_begin());
        w.record_message(build::assistant_text(
            tagged(&format!("{prefix}-text{n}"), 300),
            StopReason::Completed,
        ));
        for k in 0..2 {
            let id = format!("{prefix}-call{n}x{k}");
            w.record_message(build::tool_call(
                "t",
                "{}",
                id.clone(),
                StopReason::Completed,
                None,
            ));
            call_tx.send(id).unwrap();
        }
        w.record_message(build::token_usage(
            TokenCounts::new(0, n, 1),
            TokenCounts::new(0, 1, 1),
        ));
        w.record_message(build::request_end(
            StopReason::Completed,
            Default::default(),
        ));
        std::thread::sleep(Duration::from_millis(2));
    }
    unreachable!("the parent kills this process");
}

fn payload_text(m: &OmniMessage) -> Option<&str> {
    match &m.body {
        Body::Model(ModelPayload::Text(t)) => Some(&t.text),
        Body::Model(ModelPayload::ToolCallOutput(o)) => Some(&o.output),
        _ => None,
    }
}

fn check_pairing(msgs: &[OmniMessage], context: &str) {
    let r = resume_trace(msgs);
    let all: Vec<&OmniMessage> = r.history.iter().chain(&r.carry_over).collect();
    let mut seen_calls = HashSet::new();
    let mut answered = HashSet::new();
    for m in &all {
        match m.model() {
            Some(ModelPayload::ToolCall(tc)) => {
                assert!(
                    seen_calls.insert(tc.tool_call_id.clone()),
                    "{context}: call twice"
                );
            }
            Some(ModelPayload::ToolCallOutput(o)) => {
                assert!(
                    seen_calls.contains(&o.tool_call_id),
                    "{context}: output before its call {}",
                    o.tool_call_id
                );
                assert!(
                    answered.insert(o.tool_call_id.clone()),
                    "{context}: {} answered twice",
                    o.tool_call_id
                );
            }
            _ => {}
        }
    }
    assert_eq!(
        seen_calls, answered,
        "{context}: every committed call answered"
    );
}

fn file_of(dir: &Path, index: u32) -> PathBuf {
    dir.join(DATE).join(format!("{SID}_{index:03}.jsonl"))
}

#[test]
fn sigkill_while_appending() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng::seeded();
    let started = Instant::now();
    let mut mid_write_kills = 0;
    let mut simulated_tears = 0;
    for iteration in 0..ITERATIONS {
        let index = 1 + iteration / KILLS_PER_FILE;
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--ignored", "--test-threads=1"])
            .env(
                CHILD_ENV,
                format!("{}#{index}#{iteration}", dir.path().display()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(80 + rng.below(320)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let path = file_of(dir.path(), index);
        let context = format!("iteration {iteration}, {}", path.display());
        let mut bytes = std::fs::read(&path).unwrap_or_default();
        // A kill rarely lands inside the one write(2) of a record, so half of the clean kills
        // are followed by cutting the last record short, as a power loss or a short write
        // would; the next child must heal that tail.
        let last_kill_of_file = iteration % KILLS_PER_FILE == KILLS_PER_FILE - 1;
        if bytes.ends_with(b"\n") && bytes.len() > 2 && !last_kill_of_file && rng.below(2) == 0 {
            let start = bytes[..bytes.len() - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            let cut = start + 1 + rng.below((bytes.len() - 2 - start) as u64) as usize;
            bytes.truncate(cut);
            std::fs::write(&path, &bytes).unwrap();
            simulated_tears += 1;
        }
        let read = parse_trace_lines(&bytes, ReadMode::Tolerant, &path).unwrap();
        // Healing cuts a torn tail off before the next append: a fragment never ends up in the
        // middle of the file, so only the very last line may be broken.
        let skipped: Vec<usize> = read.skipped.iter().map(|s| s.line).collect();
        assert!(
            skipped.is_empty(),
            "{context}: malformed middle lines {skipped:?}"
        );
        if read.torn_tail.is_some() {
            mid_write_kills += 1;
        }

        let mut ids = HashSet::new();
        for m in &read.messages {
            if let Some(text) = payload_text(m) {
                let id = verify_tagged(text).unwrap_or_else(|e| panic!("{context}: {e}"));
                assert!(ids.insert(id.clone()), "{context}: {id} recorded twice");
            }
        }
        check_pairing(&read.messages, &context);
    }
    eprintln!(
        "{ITERATIONS} kills, {mid_write_kills} torn tails ({simulated_tears} cut by the test), {:.1?}",
        started.elapsed()
    );
}
