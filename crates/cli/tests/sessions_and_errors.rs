//! Stored sessions seen from the CLI (`show`, `sessions`, id prefixes, `--last`, resuming a
//! session made with ad-hoc flags) and errors a person can act on (a missing key, a refused
//! connection, HTTP 401 and 503 from a mock server), plus `init`, `completions`,
//! `--print-system-prompt` and the exit code of an interrupted run.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

#[path = "support/stub_model.rs"]
mod stub_model;

fn bin(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_penguin"));
    cmd.env("PENGUIN_HOME", home)
        .env("HOME", home)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("OPENAI_API_KEY")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios")
        .join(format!("{name}.json"))
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A scripted run in `ws`; returns its session id (stderr names it before the task).
fn scripted_run(home: &Path, ws: &Path, name: &str, prompt: &str) -> String {
    let out = bin(home)
        .current_dir(ws)
        .args([
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(scenario(name))
        .arg(prompt)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("stderr names the session: {stderr}"))
        .to_owned()
}

#[test]
fn show_renders_a_stored_session_offline_and_ids_work_by_prefix_or_last() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let id = scripted_run(
        home.path(),
        ws.path(),
        "seed-two-tools",
        "Read a.txt and b.txt",
    );
    let elsewhere = scripted_run(home.path(), other.path(), "deny-one", "list then delete");

    let tail = &id[id.len() - 8..];
    let shown = ok(bin(home.path()).args(["show", tail]).output().unwrap());
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let redacted = shown
        .replace(&id, "SESSION")
        .replace(&ws_path.display().to_string(), "WORKSPACE");
    insta::assert_snapshot!(redacted);

    // --last picks the newest session of the current workspace, not the newest overall.
    let last = ok(bin(home.path())
        .current_dir(ws.path())
        .args(["show", "--last"])
        .output()
        .unwrap());
    assert_eq!(last, shown);
    // --jsonl gives the trace's records as stored.
    let raw = ok(bin(home.path())
        .args(["show", "--jsonl", &id])
        .output()
        .unwrap());
    assert!(
        raw.lines().next().unwrap().contains("\"session_meta\""),
        "{raw}"
    );
    assert_eq!(raw.lines().count(), {
        let agent = penguin::agent::Agent::at(home.path().to_path_buf()).unwrap();
        let s = agent.sessions().unwrap();
        let files = &s.iter().find(|s| s.id == id).unwrap().files;
        std::fs::read_to_string(&files[0]).unwrap().lines().count()
    });

    // `session-` is optional in a prefix; a prefix shared by both sessions is refused.
    let short = id.strip_prefix("session-").unwrap();
    ok(bin(home.path()).args(["show", short]).output().unwrap());
    let both = bin(home.path())
        .args(["show", "session-"])
        .output()
        .unwrap();
    assert!(!both.status.success());
    let err = String::from_utf8_lossy(&both.stderr);
    assert!(err.contains("matches 2 sessions"), "{err}");

    // `sessions`: a header, the workspace column, the current workspace first or only.
    let listed = ok(bin(home.path())
        .current_dir(ws.path())
        .arg("sessions")
        .output()
        .unwrap());
    let lines: Vec<&str> = listed.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("WORKSPACE"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with(&id) && lines[1].contains("  .  "),
        "{listed}"
    );
    assert!(lines[2].starts_with(&elsewhere), "{listed}");
    let here = ok(bin(home.path())
        .current_dir(ws.path())
        .args(["sessions", "--here"])
        .output()
        .unwrap());
    assert_eq!(here.lines().count(), 2, "{here}");
    // One page: the most recently active, and a line saying how to see the rest.
    let page = ok(bin(home.path())
        .current_dir(ws.path())
        .args(["sessions", "--limit", "1"])
        .output()
        .unwrap());
    let lines: Vec<&str> = page.lines().collect();
    assert_eq!(lines.len(), 3, "{page}");
    assert_eq!(
        lines[2], "… 1 older session not shown (--limit 2 or --all)",
        "{page}"
    );
    let all = ok(bin(home.path())
        .current_dir(ws.path())
        .args(["sessions", "--all"])
        .output()
        .unwrap());
    assert_eq!(all, listed);

    // Resuming by prefix prints a recap of the last exchange first.
    let out = bin(home.path())
        .current_dir(ws.path())
        .args([
            "resume",
            "--last",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(scenario("seed-two-tools"))
        .arg("again")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("earlier in this session:\n› Read a.txt and b.txt"),
        "{stderr}"
    );
}

/// Answers every request with `status` and a JSON error body; returns the base URL.
fn mock_server(status: &'static str) -> String {
    stub_model::serve(move |_| stub_model::Reply::Error(status, "mock says no"))
}

/// Runs penguin until a stdout line contains `needle` (then kills it), or until it exits.
fn run_until(mut cmd: Command, needle: &str) -> (String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut seen = String::new();
    for line in BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(needle) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (seen, err.join().unwrap())
}

#[test]
fn a_missing_key_is_named_before_any_request() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = bin(home.path())
        .current_dir(ws.path())
        .args(["run", "--provider", "openai", "--model", "gpt-x", "hi"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("OPENAI_API_KEY is not set"), "{err}");
    // A local server needs no key unless one is named.
    let out = bin(home.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--provider",
            "openai-chat",
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "MY_LOCAL_KEY",
            "hi",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MY_LOCAL_KEY is not set"), "{err}");
    assert!(
        penguin::agent::Agent::at(home.path().to_path_buf())
            .unwrap()
            .sessions()
            .unwrap()
            .is_empty(),
        "nothing was started"
    );
}

#[test]
fn a_refused_connection_is_named_on_the_retry_line_with_a_base_url_hint() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A port nobody listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = bin(home.path());
    cmd.current_dir(ws.path()).args([
        "run",
        "--yes",
        "--provider",
        "openai-chat",
        "--model",
        "m",
        "--base-url",
        &format!("http://127.0.0.1:{port}/v1"),
        "hi",
    ]);
    let (out, _) = run_until(cmd, "Check --base-url");
    assert!(
        out.contains(&format!(
            "request failed (attempt 1): connection refused (http://127.0.0.1:{port}/v1/chat/completions)"
        )),
        "{out}"
    );
    assert!(
        out.contains("is the server running? Check --base-url"),
        "{out}"
    );
}

#[test]
fn http_errors_are_named_and_ad_hoc_sessions_resume_as_they_were_made() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let unavailable = mock_server("503 Service Unavailable");
    let mut cmd = bin(home.path());
    cmd.current_dir(ws.path()).env("MOCK_KEY", "k").args([
        "run",
        "--yes",
        "--provider",
        "openai-chat",
        "--model",
        "local",
        "--api-key-env",
        "MOCK_KEY",
        "--base-url",
        &unavailable,
        "hi",
    ]);
    let (out, _) = run_until(cmd, "request failed (attempt 1)");
    assert!(
        out.contains("request failed (attempt 1): HTTP 503 mock says no"),
        "{out}"
    );

    let denied = mock_server("401 Unauthorized");
    let out = bin(home.path())
        .current_dir(ws.path())
        .env("MOCK_KEY", "k")
        .args([
            "run",
            "--yes",
            "--provider",
            "openai-chat",
            "--model",
            "local",
            "--api-key-env",
            "MOCK_KEY",
            "--base-url",
            &denied,
            "hi",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("request failed (attempt 1): HTTP 401 mock says no"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the provider refused the API key"),
        "{stdout}"
    );

    // The session was made with flags only; resuming it without them reaches the same server
    // (the 401 again), instead of failing as "not configured".
    let out = bin(home.path())
        .current_dir(ws.path())
        .env("MOCK_KEY", "k")
        .args(["resume", "--last", "--yes", "again"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("not configured"), "{stderr}");
    assert!(
        stdout.contains("HTTP 401 mock says no"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn ctrl_c_that_interrupts_a_run_exits_130() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut child = bin(home.path())
        .current_dir(ws.path())
        .args([
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(scenario("interrupt-mid-stream"))
        .arg("explain")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("\"event_type\":\"delta\"") {
            break;
        }
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        rest.last()
            .is_some_and(|l| l.contains("\"type\":\"abort\"")),
        "{rest:#?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(130));
}

#[test]
fn init_completions_and_the_system_prompt() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = ok(bin(home.path()).arg("init").output().unwrap());
    assert!(out.contains("config.toml"), "{out}");
    let written = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    assert!(written.contains("[models.local]"), "{written}");
    let again = bin(home.path()).arg("init").output().unwrap();
    assert!(!again.status.success(), "an existing config is kept");
    ok(bin(home.path()).args(["init", "--force"]).output().unwrap());

    let bash = ok(bin(home.path())
        .args(["completions", "bash"])
        .output()
        .unwrap());
    assert!(
        bash.contains("_penguin()") && bash.contains("sessions"),
        "{bash}"
    );

    std::fs::create_dir_all(ws.path().join(".git")).unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "Always run cargo fmt.").unwrap();
    // The user's own instructions live under the data root (here PENGUIN_HOME), out of every
    // command's reach; the old place, which a command in a workspace at home could write, is
    // not read.
    std::fs::write(home.path().join("AGENTS.md"), "Be brief.").unwrap();
    std::fs::create_dir_all(home.path().join(".penguin")).unwrap();
    std::fs::write(home.path().join(".penguin/AGENTS.md"), "Planted.").unwrap();
    let prompt = ok(bin(home.path())
        .current_dir(ws.path())
        .args(["run", "--print-system-prompt"])
        .output()
        .unwrap());
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    assert!(
        prompt.contains(&format!("- Workspace: {}", ws_path.display())),
        "{prompt}"
    );
    assert!(prompt.contains("- exec_command: "), "{prompt}");
    assert!(!prompt.contains("Planted."), "{prompt}");
    let global = prompt.find("Be brief.").expect("<data root>/AGENTS.md");
    let project = prompt
        .find("Always run cargo fmt.")
        .expect("the project's AGENTS.md");
    assert!(global < project, "nearest last: {prompt}");
}

#[test]
fn sessions_made_in_the_same_second_list_the_most_recently_active_first() {
    let home = tempfile::tempdir().unwrap();
    let agent = penguin::agent::Agent::at(home.path().to_path_buf()).unwrap();
    let day = agent.location.traces_dir().join("2026-11-30");
    std::fs::create_dir_all(&day).unwrap();
    // Same second; the suffixes order the other way round from the writes.
    let older = "session-2026-11-30-13-52-35-ffffffff";
    let newer = "session-2026-11-30-13-52-35-00000000";
    let base = std::time::SystemTime::now();
    for (id, at) in [(older, base), (newer, base + Duration::from_millis(5))] {
        let path = day.join(format!("{id}_001.jsonl"));
        std::fs::write(&path, "").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }
    let ids: Vec<String> = agent
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, [newer, older]);
}

/// `output()` of `cmd`, or a panic naming `what` if it has not ended in 60 s: a reader that
/// blocks on a planted FIFO would otherwise hang the suite.
fn output_within(mut cmd: Command, what: &str) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what} hung");
        }
    }
}

#[test]
fn a_fifo_or_a_device_named_like_a_trace_jams_no_command() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let id = scripted_run(home.path(), ws.path(), "seed-two-tools", "Read a.txt");
    let agent = penguin::agent::Agent::at(home.path().to_path_buf()).unwrap();
    let file = agent.sessions().unwrap()[0].files[0].clone();
    let name = file.file_name().unwrap().to_str().unwrap();
    let dir = file.parent().unwrap();
    // Named like newer sessions of the same day, so `--last` meets them first.
    let fifo = dir.join(name.replace(&id[id.len() - 4..], "ffff"));
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink(
        "/dev/zero",
        dir.join(name.replace(&id[id.len() - 4..], "eeee")),
    )
    .unwrap();

    let mut list = bin(home.path());
    list.arg("sessions");
    let listed = ok(output_within(list, "penguin sessions"));
    assert!(listed.contains(&id[id.len() - 8..]), "{listed}");
    let mut show = bin(home.path());
    show.current_dir(ws.path()).args(["show", "--last"]);
    let shown = ok(output_within(show, "penguin show --last"));
    assert!(shown.contains("Read a.txt"), "{shown}");
    let mut raw = bin(home.path());
    raw.args(["show", "--jsonl", &id]);
    assert!(ok(output_within(raw, "penguin show --jsonl")).contains("session_meta"));
}
