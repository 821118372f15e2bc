//! Nothing penguin starts outlives it: when `penguin run` or `penguin resume` exits, its
//! process group holds no process of its own making (the sandbox's probe of bubblewrap, a
//! command, a helper), and a background command the model left running is ended and named,
//! never left behind silently. A session that runs no command never starts bubblewrap at all:
//! its session line says the namespaces are checked at the first command.
//!
//! penguin is started as the leader of a process group of its own, so that what is left in
//! that group after it exits is exactly what it left behind.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use penguin::tools::sandbox::{Landlock, Namespaces};
use serde_json::{json, Value};

/// The processes of group `pgrp`, as `name (pid)`.
fn group_members(pgrp: u32) -> Vec<String> {
    let mut found = Vec::new();
    for (pid, stat) in processes() {
        let (head, rest) = stat.rsplit_once(')').unwrap_or_default();
        let name = head.split_once('(').map_or("", |(_, n)| n);
        // state, ppid, pgrp
        if rest.split_whitespace().nth(2) == Some(&pgrp.to_string()) {
            found.push(format!("{name} ({pid})"));
        }
    }
    found
}

/// Every process as its pid and `/proc/PID/stat`.
fn processes() -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            Some((
                pid,
                std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
            ))
        })
        .collect()
}

/// The live processes whose command line holds `marker`.
fn running_with(marker: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .map(|(pid, _)| pid)
        .collect()
}

fn usage(total: u64) -> Value {
    let counts = json!({"cache_read": 0, "cache_write": 0, "output": 1, "total": total});
    json!({"delay_ms": 0, "message": {"type": "event_msg", "payload": {"type": "token_usage", "session": counts, "request": counts}}})
}

fn step(payload: Value) -> Value {
    json!({"delay_ms": 0, "message": {"type": "model_msg", "payload": payload}})
}

fn answer(text: &str) -> Value {
    json!({"stream": [
        step(json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"})),
        usage(1),
    ]})
}

/// A scenario whose model runs `cmd` (in the background when asked), then answers; or only
/// answers when `cmd` is `None`.
fn scenario(dir: &Path, name: &str, cmd: Option<(&str, bool)>) -> PathBuf {
    let mut llm = Vec::new();
    if let Some((cmd, background)) = cmd {
        let args = json!({"cmd": cmd, "run_in_background": background}).to_string();
        llm.push(json!({"stream": [
            step(json!({"type": "tool_call", "role": "assistant", "name": "exec_command",
                "arguments": args, "tool_call_id": "c1", "stop_reason": "completed"})),
            usage(1),
        ]}));
    }
    llm.push(answer("done"));
    let path = dir.join(name);
    std::fs::write(
        &path,
        json!({"llm": llm, "tools": {}, "runs": []}).to_string(),
    )
    .unwrap();
    path
}

struct Setup {
    _base: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    ws: PathBuf,
}

fn setup() -> Setup {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&ws).unwrap();
    Setup {
        _base: base,
        root,
        home,
        ws,
    }
}

/// Runs penguin with `args` as the leader of a new process group; returns its output and what
/// was left in that group once it had exited.
fn penguin(s: &Setup, args: &[&str]) -> (Output, Vec<String>) {
    let child = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .current_dir(&s.ws)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = child.id();
    let out = child.wait_with_output().unwrap();
    (out, group_members(group))
}

/// Whether this machine's sandbox starts commands through bubblewrap (Landlock, and
/// bubblewrap installed); otherwise the namespaces are never tried.
fn sandboxed_with_bubblewrap() -> bool {
    matches!(Landlock::probe(), Landlock::Abi(_))
        && !matches!(Namespaces::known(), Namespaces::Unavailable(_))
}

#[test]
fn run_leaves_nothing_in_its_group_and_names_the_background_command_it_ended() {
    let s = setup();
    // Unique to this test process, so a stray `sleep` elsewhere is not mistaken for ours.
    let marker = format!("9{}.25", std::process::id());
    let cmd = format!("sleep {marker}");
    let scenario = scenario(&s.root, "background.json", Some((&cmd, true)));
    let (out, left) = penguin(
        &s,
        &[
            "run",
            "--yes",
            "--jsonl",
            "--provider",
            "scripted",
            "--real-tools",
            "--scenario",
            scenario.to_str().unwrap(),
            "start it",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(
        stdout.contains("running in background with process_id"),
        "the command was started: {stdout}"
    );
    assert!(
        left.is_empty(),
        "left in penguin's group: {left:?}\n{stderr}"
    );
    assert!(
        stderr.contains("penguin: ended background command proc-")
            && stderr.contains(&format!(", still running as penguin exits: {cmd}\n")),
        "{stderr}"
    );
    // Ended, not merely moved out of sight: it led a session of its own.
    let alive = running_with(&marker);
    assert!(alive.is_empty(), "still running: {alive:?}");
}

#[test]
fn a_session_that_runs_no_command_never_tries_bubblewrap_and_leaves_nothing() {
    let s = setup();
    let quiet = scenario(&s.root, "quiet.json", None);
    let quiet = quiet.to_str().unwrap();
    let with_bubblewrap = sandboxed_with_bubblewrap();
    let (out, left) = penguin(
        &s,
        &[
            "run",
            "--yes",
            "--provider",
            "scripted",
            "--real-tools",
            "--scenario",
            quiet,
            "hello",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(left.is_empty(), "left in penguin's group: {left:?}");
    if with_bubblewrap {
        // Said before the task, and never settled since: no command needed them.
        assert!(
            stderr.contains("; namespaces checked at the first command)"),
            "{stderr}"
        );
    }
    assert!(!stderr.contains("background"), "{stderr}");
    let id = stderr
        .split_whitespace()
        .find(|w| w.starts_with("session-"))
        .expect("the session line names the session")
        .to_owned();

    // Resumed with one more turn, and with the scenario's own tools.
    for real_tools in [true, false] {
        let mut args = vec!["resume", &id, "again", "--yes", "--provider", "scripted"];
        if real_tools {
            args.push("--real-tools");
        }
        args.extend(["--scenario", quiet]);
        let (out, left) = penguin(&s, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(left.is_empty(), "left in penguin's group: {left:?}");
        assert!(stderr.contains("earlier in this session:"), "{stderr}");
        match real_tools {
            true if with_bubblewrap => assert!(
                stderr.contains("; namespaces checked at the first command)"),
                "{stderr}"
            ),
            true => {}
            false => assert!(
                stderr.contains("scripted tools (a scenario's: no command runs)"),
                "{stderr}"
            ),
        }
    }

    // A command settles the question: the probe ran, and what it left was nothing.
    let ran = scenario(&s.root, "ran.json", Some(("true", false)));
    let (out, left) = penguin(
        &s,
        &[
            "run",
            "--yes",
            "--jsonl",
            "--provider",
            "scripted",
            "--real-tools",
            "--scenario",
            ran.to_str().unwrap(),
            "run true",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        left.is_empty(),
        "left in penguin's group: {left:?}\n{stderr}"
    );
    assert!(!stderr.contains("background"), "{stderr}");
}
