//! `cargo xtask bench`'s whole-process workloads (docs/performance.md): the perf-1000 scenario,
//! a scripted 2,500-request session written to a real trace, and the resume of that trace,
//! each timed with its peak memory; beside the reference engine when its bundle is given
//! (`PENGUIN_REFERENCE_BUNDLE`, built by `../shared/tools/reference/build.sh`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Wall seconds and peak RSS (KiB, when `/usr/bin/time` can tell) of one command.
struct Measured {
    wall: f64,
    peak_kib: Option<u64>,
}

fn measure(label: &str, mut cmd: Command, stdout: Option<&Path>) -> Result<Measured, String> {
    let time = Path::new("/usr/bin/time");
    let report = std::env::temp_dir().join(format!("penguin-bench-{}.time", std::process::id()));
    let mut cmd = if time.exists() {
        let mut t = Command::new(time);
        t.arg("-f").arg("%M").arg("-o").arg(&report);
        t.arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => t.env(k, v),
                None => t.env_remove(k),
            };
        }
        if let Some(dir) = cmd.get_current_dir() {
            t.current_dir(dir);
        }
        t
    } else {
        std::mem::replace(&mut cmd, Command::new("true"))
    };
    match stdout {
        Some(path) => {
            let file = std::fs::File::create(path).map_err(|e| format!("{label}: {e}"))?;
            cmd.stdout(file);
        }
        None => {
            cmd.stdout(Stdio::null());
        }
    }
    cmd.stderr(Stdio::null());
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{label}: cannot start: {e}"))?;
    let wall = start.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("{label} failed ({status})"));
    }
    let peak_kib = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| t.trim().lines().last()?.trim().parse().ok());
    let _ = std::fs::remove_file(&report);
    Ok(Measured { wall, peak_kib })
}

/// How many times each workload runs; the median is shown.
const RUNS: usize = 3;

/// The median wall time and the median peak memory of [`RUNS`] runs of `cmd()`; `before`
/// runs ahead of each (to restore what a run changes).
fn median_of(
    label: &str,
    cmd: impl Fn() -> Command,
    stdout: Option<&Path>,
    before: impl Fn() -> Result<(), String>,
) -> Result<Measured, String> {
    let mut walls = Vec::with_capacity(RUNS);
    let mut peaks = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        before()?;
        let m = measure(label, cmd(), stdout)?;
        walls.push(m.wall);
        peaks.extend(m.peak_kib);
    }
    walls.sort_by(f64::total_cmp);
    peaks.sort_unstable();
    Ok(Measured {
        wall: walls[RUNS / 2],
        peak_kib: peaks.get(peaks.len() / 2).copied(),
    })
}

fn show(label: &str, ours: &Measured, theirs: Option<&Measured>) {
    let mib = |m: &Measured| {
        m.peak_kib
            .map_or("?".to_owned(), |k| format!("{:.0} MiB", k as f64 / 1024.0))
    };
    let mut line = format!("{label:<34} penguin {:>7.3} s {:>8}", ours.wall, mib(ours));
    if let Some(r) = theirs {
        line.push_str(&format!(
            " | reference {:>7.3} s {:>8} | {:.1}x faster",
            r.wall,
            mib(r),
            r.wall / ours.wall.max(1e-9)
        ));
        if let (Some(a), Some(b)) = (ours.peak_kib, r.peak_kib) {
            line.push_str(&format!(", {:.2} of its memory", a as f64 / b as f64));
        }
    }
    println!("{line}");
}

const TINY: &str = r#"{"llm": [{"stream": [{"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "ok", "stop_reason": "completed"}}}, {"delay_ms": 0, "message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}}}}]}], "tools": {}, "runs": []}"#;

/// The first trace file (`.jsonl`) found beneath `dir`.
pub(crate) fn find_trace(dir: &Path) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(t) = find_trace(&p) {
                return Some(t);
            }
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            return Some(p);
        }
    }
    None
}

/// Runs the workloads; `penguin` is the release binary.
pub fn run(root: &Path, penguin: &Path) -> Result<(), String> {
    let gen = root.join("../shared/tools/perf/gen.py");
    if !gen.exists() {
        println!(
            "\n--- {} not found: whole-process workloads skipped",
            gen.display()
        );
        return Ok(());
    }
    let dir = root.join("target/bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let generate = |kind: &str, args: &[&str]| -> Result<PathBuf, String> {
        let out = dir.join(format!("{kind}.json"));
        let file = std::fs::File::create(&out).map_err(|e| e.to_string())?;
        let ok = Command::new("python3")
            .arg(&gen)
            .args(args)
            .stdout(file)
            .status()
            .map_err(|e| format!("gen.py: {e}"))?
            .success();
        if ok {
            Ok(out)
        } else {
            Err(format!("gen.py {args:?} failed"))
        }
    };
    let perf = generate("perf-1000", &["perf", "1000"])?;
    let big = generate("bigtrace", &["bigtrace"])?;
    let tiny = dir.join("tiny.json");
    std::fs::write(&tiny, TINY).map_err(|e| e.to_string())?;
    let reference = std::env::var_os("PENGUIN_REFERENCE_BUNDLE")
        .map(PathBuf::from)
        .filter(|b| b.exists());
    let driver = root.join("../shared/tools/reference");
    println!("\n==> workloads (release build; the median of {RUNS} runs each)");

    let ready = || Ok(());
    let scenario = || {
        let mut c = Command::new(penguin);
        c.args(["scenario", "run"])
            .arg(&perf)
            .arg("--trace")
            .arg(dir.join("perf.trace.jsonl"));
        c
    };
    let ours = median_of(
        "perf-1000",
        scenario,
        Some(&dir.join("perf.stream.jsonl")),
        ready,
    )?;
    let theirs = match &reference {
        Some(bundle) => {
            let node = || {
                let mut c = Command::new("node");
                c.arg(driver.join("driver.mjs"))
                    .arg(bundle)
                    .arg(&perf)
                    .arg("--trace")
                    .arg(dir.join("ref.trace.jsonl"));
                c
            };
            Some(median_of(
                "reference perf-1000",
                node,
                Some(&dir.join("ref.stream.jsonl")),
                ready,
            )?)
        }
        None => None,
    };
    show("scenario run perf-1000", &ours, theirs.as_ref());

    let home = dir.join("home");
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).map_err(|e| e.to_string())?;
    let mut run = Command::new(penguin);
    run.env("PENGUIN_HOME", &home)
        .args([
            "run",
            "--yes",
            "--jsonl",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(&big)
        .arg("--workspace")
        .arg(&ws)
        .arg("go");
    // One run: each writes a session of its own, and the first one's trace is resumed below.
    let ours = measure("run bigtrace", run, None)?;
    show("run --provider scripted bigtrace", &ours, None);

    let trace = find_trace(&home).ok_or("the bigtrace run wrote no trace")?;
    let id = trace
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.rsplit_once('_'))
        .map(|(id, _)| id.to_owned())
        .ok_or("unexpected trace file name")?;
    let pristine = std::fs::read(&trace).map_err(|e| e.to_string())?;
    // A resume appends its turn: every run starts from the trace as the bigtrace run left it.
    let restore = || std::fs::write(&trace, &pristine).map_err(|e| e.to_string());
    let resume = || {
        let mut c = Command::new(penguin);
        c.env("PENGUIN_HOME", &home)
            .args([
                "resume",
                &id,
                "again",
                "--yes",
                "--jsonl",
                "--provider",
                "scripted",
                "--scenario",
            ])
            .arg(&tiny);
        c
    };
    let ours = median_of("resume bigtrace", resume, None, restore)?;
    restore()?;
    let theirs = match &reference {
        Some(bundle) => {
            let node = || {
                let mut c = Command::new("node");
                c.arg(driver.join("resume-bench.mjs"))
                    .arg(bundle)
                    .arg(&trace);
                c
            };
            Some(median_of("reference resume", node, None, ready)?)
        }
        None => None,
    };
    show(
        &format!("resume ({} MB trace)", pristine.len() / 1_000_000),
        &ours,
        theirs.as_ref(),
    );
    if reference.is_none() {
        println!("(set PENGUIN_REFERENCE_BUNDLE to a bundle from ../shared/tools/reference/build.sh to compare with the reference)");
    }
    Ok(())
}
