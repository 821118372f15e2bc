//! The resume workload (`cargo xtask bench resume`, and a part of `cargo xtask bench`): the
//! bigtrace session (`../shared/tools/perf/gen.py bigtrace`, written to a 28.5 MB, 42,505-record
//! trace by `penguin run --provider scripted`) resumed with one trivial scripted turn, as
//! `--jsonl` (the figure docs/performance.md tracks) and rendered (with the recap a person
//! sees), beside the reference's parse and resume of the same trace when
//! `PENGUIN_REFERENCE_BUNDLE` names its bundle. The runs alternate (penguin, penguin rendered,
//! the reference, again) so that a machine drifting over minutes moves all three alike.
//!
//! Each line gives the median and the fastest wall time and the median peak RSS, the ratios
//! against the reference with the goals of issue 44 (at most a tenth of its time, a quarter of
//! its memory), and what each penguin run left in its process group after it exited (penguin
//! is started as a group leader: nothing it starts may outlive it). The figures are also
//! written to `target/bench/resume.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Runs of each; the median and the fastest are shown.
const RUNS: usize = 9;

/// The goals of issue 44, against the reference measured beside penguin.
const TIME_GOAL: f64 = 0.10;
const MEMORY_GOAL: f64 = 0.25;

const TURN: &str = r#"{"llm": [{"stream": [{"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "text", "role": "assistant", "text": "ok", "stop_reason": "completed"}}}, {"delay_ms": 0, "message": {"type": "event_msg", "payload": {"type": "token_usage", "session": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}, "request": {"cache_read": 0, "cache_write": 0, "output": 1, "total": 1}}}}]}], "tools": {}, "runs": []}"#;

/// One run: wall seconds, peak RSS in KiB (from `/usr/bin/time`, when there is one), and the
/// processes left in its process group once it had exited.
struct Run {
    wall: f64,
    peak_kib: Option<u64>,
    left: Vec<String>,
}

/// The processes of group `pgrp`, as `name (pid)`.
fn group_members(pgrp: u32) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // state, ppid, pgrp
        if rest.split_whitespace().nth(2) == Some(pgrp.to_string().as_str()) {
            let name = head.split_once('(').map_or("?", |(_, n)| n);
            found.push(format!("{name} ({pid})"));
        }
    }
    found
}

/// Runs `program args` as the leader of a process group of its own, under `/usr/bin/time`
/// when it is installed (which then leads the group, with the program in it).
fn run_once(
    label: &str,
    program: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Result<Run, String> {
    let time = Path::new("/usr/bin/time");
    let report =
        std::env::temp_dir().join(format!("penguin-resume-bench-{}.time", std::process::id()));
    let mut cmd = if time.exists() {
        let mut c = Command::new(time);
        c.arg("-f").arg("%M").arg("-o").arg(&report).arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{label}: cannot start: {e}"))?;
    let group = child.id();
    let status = child.wait().map_err(|e| format!("{label}: {e}"))?;
    let wall = start.elapsed().as_secs_f64();
    let left = group_members(group);
    if !status.success() {
        return Err(format!("{label} failed ({status})"));
    }
    let peak_kib = std::fs::read_to_string(&report)
        .ok()
        .and_then(|t| t.trim().lines().last()?.trim().parse().ok());
    let _ = std::fs::remove_file(&report);
    Ok(Run {
        wall,
        peak_kib,
        left,
    })
}

/// The medians, the fastest run and what any run left behind.
struct Summary {
    wall: f64,
    fastest: f64,
    peak_kib: Option<u64>,
    left: Vec<String>,
    runs_leaving: usize,
}

fn summarize(runs: &[Run]) -> Summary {
    let mut walls: Vec<f64> = runs.iter().map(|r| r.wall).collect();
    walls.sort_by(f64::total_cmp);
    let mut peaks: Vec<u64> = runs.iter().filter_map(|r| r.peak_kib).collect();
    peaks.sort_unstable();
    Summary {
        wall: walls[walls.len() / 2],
        fastest: walls[0],
        peak_kib: peaks.get(peaks.len() / 2).copied(),
        left: runs.iter().flat_map(|r| r.left.iter().cloned()).collect(),
        runs_leaving: runs.iter().filter(|r| !r.left.is_empty()).count(),
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("?".to_owned(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

fn line(label: &str, s: &Summary, reference: Option<&Summary>) -> String {
    let mut out = format!(
        "{label:<30} {:>6.1} ms (fastest {:>5.1}) {:>10}",
        s.wall * 1000.0,
        s.fastest * 1000.0,
        mib(s.peak_kib)
    );
    if let Some(r) = reference {
        let time = s.wall / r.wall;
        out.push_str(&format!(
            " | {time:.3} of its time ({:.1}x faster) {}",
            r.wall / s.wall,
            if time <= TIME_GOAL {
                "goal met"
            } else {
                "GOAL MISSED"
            }
        ));
        if let (Some(a), Some(b)) = (s.peak_kib, r.peak_kib) {
            let memory = a as f64 / b as f64;
            out.push_str(&format!(
                ", {memory:.3} of its memory {}",
                if memory <= MEMORY_GOAL {
                    "goal met"
                } else {
                    "GOAL MISSED"
                }
            ));
        }
    }
    out
}

/// Runs the workload with the release binary `penguin`.
pub fn run(root: &Path, penguin: &Path) -> Result<(), String> {
    let gen = root.join("../shared/tools/perf/gen.py");
    if !gen.exists() {
        println!(
            "\n--- {} not found: the resume workload is skipped",
            gen.display()
        );
        return Ok(());
    }
    let dir = root.join("target/bench/resume");
    let _ = std::fs::remove_dir_all(&dir);
    let (home, ws) = (dir.join("home"), dir.join("ws"));
    std::fs::create_dir_all(&ws).map_err(|e| format!("{}: {e}", ws.display()))?;
    let big = dir.join("bigtrace.json");
    let file = std::fs::File::create(&big).map_err(|e| e.to_string())?;
    let made = Command::new("python3")
        .arg(&gen)
        .arg("bigtrace")
        .stdout(file)
        .status()
        .map_err(|e| format!("gen.py: {e}"))?;
    if !made.success() {
        return Err("gen.py bigtrace failed".into());
    }
    let turn = dir.join("turn.json");
    std::fs::write(&turn, TURN).map_err(|e| e.to_string())?;
    let ok = Command::new(penguin)
        .env("PENGUIN_HOME", &home)
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
        .arg("go")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("penguin run: {e}"))?
        .success();
    if !ok {
        return Err("penguin run --provider scripted bigtrace failed".into());
    }
    let trace = crate::workloads::find_trace(&home).ok_or("the bigtrace run wrote no trace")?;
    let id = trace
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.rsplit_once('_'))
        .map(|(id, _)| id.to_owned())
        .ok_or("unexpected trace file name")?;
    let pristine = std::fs::read(&trace).map_err(|e| e.to_string())?;
    // Each resume appends its turn: every run starts from the trace as the scripted run left it.
    let copy = dir.join("pristine.jsonl");
    std::fs::write(&copy, &pristine).map_err(|e| e.to_string())?;
    let restore = || std::fs::write(&trace, &pristine).map_err(|e| e.to_string());
    let turn = turn.to_str().ok_or("non-UTF-8 path")?;
    let resume = |jsonl: bool| -> Vec<&str> {
        let mut args = vec!["resume", &id, "again", "--yes", "--provider", "scripted"];
        if jsonl {
            args.push("--jsonl");
        }
        args.extend(["--scenario", turn]);
        args
    };
    let reference = std::env::var_os("PENGUIN_REFERENCE_BUNDLE")
        .map(PathBuf::from)
        .filter(|b| b.exists());
    let bench = root.join("../shared/tools/reference/resume-bench.mjs");
    let node = which("node");
    println!(
        "\n==> resume of the {:.1} MB bigtrace trace plus one scripted turn (release build; {RUNS} alternating runs each)",
        pristine.len() as f64 / 1e6
    );
    let env = [("PENGUIN_HOME", home.as_path())];
    let (mut jsonl, mut rendered, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        restore()?;
        jsonl.push(run_once(
            "penguin resume --jsonl",
            penguin,
            &resume(true),
            &env,
        )?);
        restore()?;
        rendered.push(run_once("penguin resume", penguin, &resume(false), &env)?);
        if let (Some(bundle), Some(node)) = (&reference, &node) {
            let args = [
                bench.to_str().ok_or("non-UTF-8 path")?,
                bundle.to_str().ok_or("non-UTF-8 path")?,
                copy.to_str().ok_or("non-UTF-8 path")?,
            ];
            theirs.push(run_once("reference resume", node, &args, &[])?);
        }
    }
    restore()?;
    let (ours, shown) = (summarize(&jsonl), summarize(&rendered));
    let reference_summary = (!theirs.is_empty()).then(|| summarize(&theirs));
    println!(
        "{}",
        line("penguin resume --jsonl", &ours, reference_summary.as_ref())
    );
    println!(
        "{}",
        line(
            "penguin resume (rendered, recap)",
            &shown,
            reference_summary.as_ref()
        )
    );
    if let Some(r) = &reference_summary {
        println!("{}", line("reference (node, parse + resume)", r, None));
    } else {
        println!("(set PENGUIN_REFERENCE_BUNDLE to a bundle from ../shared/tools/reference/build.sh to compare with the reference)");
    }
    for (what, s) in [("--jsonl", &ours), ("rendered", &shown)] {
        match s.runs_leaving {
            0 => println!("penguin resume {what}: nothing left in its process group after any run"),
            n => println!(
                "penguin resume {what}: {n} of {RUNS} runs LEFT PROCESSES in its process group: {}",
                s.left.join(", ")
            ),
        }
    }
    let json = format!(
        "{{\"trace_bytes\": {}, \"runs\": {RUNS}, \"penguin_jsonl\": {}, \"penguin_rendered\": {}, \"reference\": {}}}\n",
        pristine.len(),
        figures(&ours),
        figures(&shown),
        reference_summary.as_ref().map_or("null".to_owned(), figures)
    );
    let out = root.join("target/bench/resume.json");
    std::fs::write(&out, json).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("(written to {})", out.display());
    if ours.runs_leaving > 0 || shown.runs_leaving > 0 {
        return Err("penguin resume left processes behind in its process group".into());
    }
    Ok(())
}

fn figures(s: &Summary) -> String {
    format!(
        "{{\"wall_ms\": {:.2}, \"fastest_ms\": {:.2}, \"peak_kib\": {}, \"runs_leaving_processes\": {}}}",
        s.wall * 1000.0,
        s.fastest * 1000.0,
        s.peak_kib.map_or("null".to_owned(), |k| k.to_string()),
        s.runs_leaving
    )
}

/// `name` on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `cargo xtask bench resume`: a release build of the `penguin` command, then the workload.
pub fn alone(root: &Path) -> Result<(), String> {
    let mut release = super::cargo();
    release.args(["build", "--release", "-p", "penguin-cli"]);
    super::run(root, "release build", release)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    run(root, &target.join("release").join("penguin"))
}
