//! The `penguin` binary end to end: scripted sessions with real traces, the stream checker,
//! the trace checker, and the interactive renderer in a pseudo-terminal.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use penguin::omni_protocol::validator::validate_jsonl;
use penguin::omni_protocol::OmniMessage;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios")
        .join(format!("{name}.json"))
}

fn run_with_input(mut cmd: Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("penguin starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `penguin run --jsonl --yes` of a shared scenario inside a real session; asserts success.
fn scripted_jsonl_run(home: &Path, ws: &Path, name: &str, prompt: &str) -> Output {
    let mut cmd = bin();
    cmd.env("PENGUIN_HOME", home)
        .args([
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(scenario(name))
        .arg("--workspace")
        .arg(ws)
        .arg(prompt);
    let out = run_with_input(cmd, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn traces(home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![home.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn scripted_run_jsonl_passes_the_validator_and_writes_a_real_trace() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = scripted_jsonl_run(
        home.path(),
        ws.path(),
        "seed-two-tools",
        "Read a.txt and b.txt",
    );
    let report = validate_jsonl(&out.stdout[..]);
    assert!(report.is_ok(), "{report}");
    let first = OmniMessage::from_json(
        std::str::from_utf8(&out.stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        first.payload_type(),
        "tool_list_ready",
        "a session's first run announces its tools"
    );

    let files = traces(home.path());
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|l| OmniMessage::from_json(l).unwrap().payload_type().to_owned())
        .collect();
    assert_eq!(
        kinds[..4],
        ["session_meta", "text", "tool_list_ready", "request_begin"]
    );
    let listed = bin()
        .env("PENGUIN_HOME", home.path())
        .arg("sessions")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    let id = files[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches("_001.jsonl")
        .to_owned();
    let line = listed
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        line.contains("scripted/scenario")
            && line.contains("completed")
            && line.contains("Read a.txt and b.txt"),
        "{line}"
    );
    let check = bin()
        .args(["trace", "check"])
        .arg(&files[0])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn invalid_scenarios_fail_with_one_line_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"llm": [], "runs": [{"input": [{"type": "model_msg", "payload": {"type": "text", "role": "robot", "text": "hi"}}]}]}"#).unwrap();
    let out = bin().args(["scenario", "run"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("runs[0].input[0].payload.role"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn check_stream_and_trace_check_report_problems() {
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("s.jsonl");
    let begin = r#"{"timestamp":"2026-11-29T14:57:32.333Z","type":"event_msg","payload":{"type":"request_begin"}}"#;
    let end = r#"{"timestamp":"2026-11-29T14:57:32.334Z","type":"event_msg","payload":{"type":"request_end","status":"completed"}}"#;
    std::fs::write(&stream, format!("{begin}\n{end}\n")).unwrap();
    let out = bin().arg("check-stream").arg(&stream).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("request_end_usage"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let trace = dir.path().join("t.jsonl");
    std::fs::write(&trace, format!("{begin}\n{}", &end[..40])).unwrap();
    let out = bin().args(["trace", "check"]).arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a torn last line is only a warning: {text}"
    );
    assert!(text.contains("warning"), "{text}");
}

#[test]
fn approval_prompt_in_a_terminal_answered_no_gives_the_denial() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("util-linux `script` is required for the pseudo-terminal test");
    }
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cmdline = format!(
        "{} run --provider scripted --scenario {} --workspace {} 'list then delete'",
        env!("CARGO_BIN_EXE_penguin"),
        scenario("deny-one").display(),
        ws.path().display()
    );
    let mut cmd = Command::new("script");
    cmd.env("PENGUIN_HOME", home.path())
        .args(["-qec", &cmdline, "/dev/null"]);
    let out = run_with_input(cmd, "y\nn\n");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(
        screen.contains("$ ls") && screen.contains("Allow exec_command? [y]es / [n]o / [a]lways"),
        "{screen}"
    );
    assert!(screen.contains("exec_command denied"), "{screen}");
    assert!(
        !screen.contains("Tool call denied by user."),
        "a denial is one line: {screen}"
    );
    assert!(
        screen.contains("Listed; the delete was refused."),
        "{screen}"
    );
    let trace = std::fs::read_to_string(&traces(home.path())[0]).unwrap();
    assert!(trace.contains(r#""decision":"deny","tool_call_id":"call_2""#));
}

#[test]
fn chat_with_the_demo_model_compacts_into_a_new_trace_file_and_resumes() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut chat = Chat::start_with(home.path(), ws.path(), &[]);
    chat.type_line("hello");
    chat.until("The workspace listing has");
    chat.until(r#""type":"request_end""#);
    chat.type_line("/compact");
    chat.until(r#""type":"compaction_end""#);
    chat.type_line("again");
    chat.until("The workspace listing has");
    chat.until(r#""type":"request_end""#);
    let stream = chat.finish();
    assert!(
        stream.contains(r#""type":"compaction_begin","reason":"manual""#),
        "{stream}"
    );
    let mut files = traces(home.path());
    files.sort();
    assert_eq!(
        files.len(),
        2,
        "the compacted context closes file 001 and opens 002: {files:?}"
    );
    let second = std::fs::read_to_string(&files[1]).unwrap();
    let kinds: Vec<String> = second
        .lines()
        .map(|l| OmniMessage::from_json(l).unwrap().payload_type().to_owned())
        .collect();
    assert_eq!(kinds[..3], ["session_meta", "tool_list_ready", "text"]);
    assert!(second.lines().nth(2).unwrap().contains("[context_summary]"));
    for f in &files {
        let check = bin().args(["trace", "check"]).arg(f).output().unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
    let id = files[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_end_matches("_001.jsonl")
        .to_owned();
    let mut cmd = bin();
    cmd.env("PENGUIN_HOME", home.path())
        .args(["resume", &id, "once more", "--yes", "--jsonl"]);
    let out = run_with_input(cmd, "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(validate_jsonl(&out.stdout[..]).is_ok());
    assert_eq!(
        traces(home.path()).len(),
        2,
        "resume continues in the newest file"
    );
}

#[test]
fn the_command_policy_forbids_before_any_approval() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[policy]\nforbidden_commands = [\"rm -rf\"]\n",
    )
    .unwrap();
    let out = scripted_jsonl_run(home.path(), ws.path(), "deny-one", "list then delete");
    let stream = String::from_utf8(out.stdout).unwrap();
    assert!(validate_jsonl(stream.as_bytes()).is_ok());
    assert!(
        stream.contains(r#""decision":"allow","tool_call_id":"call_1""#),
        "ls is allowed by --yes"
    );
    assert!(
        stream.contains(r#""decision":"forbidden","tool_call_id":"call_2""#),
        "{stream}"
    );
    assert!(stream.contains(
        r#""output":"Tool call denied by policy.","tool_call_id":"call_2","stop_reason":"aborted""#
    ));
}

#[test]
fn a_failed_task_exits_non_zero_rendered_or_raw() {
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("auth.json");
    std::fs::write(&sc, r#"{"llm": [{"stream": [], "outcome": {"status": "auth", "message": "bad key"}}], "runs": []}"#).unwrap();
    for jsonl in [true, false] {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = bin();
        cmd.env("PENGUIN_HOME", home.path())
            .args(["run", "--yes", "--provider", "scripted", "--scenario"])
            .arg(&sc)
            .arg("--workspace")
            .arg(dir.path());
        if jsonl {
            cmd.arg("--jsonl");
        }
        cmd.arg("hello");
        let out = run_with_input(cmd, "");
        assert_eq!(
            out.status.code(),
            Some(1),
            "jsonl={jsonl}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        match jsonl {
            true => assert!(stdout.contains("llm request error: bad key"), "{stdout}"),
            // Rendered, the end says why the run failed, after how many attempts.
            false => assert!(
                stdout.contains("✗ failed after 1 attempt: bad key"),
                "{stdout}"
            ),
        }
    }
}

/// A chat over the interrupt scenario (a slow text stream), driven like a person: each line is
/// typed only after the output it reacts to has appeared.
struct Chat {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    seen: Vec<String>,
}

/// A copy of the interrupt scenario, in `dir`, whose first request ends `final_ms` after its
/// text stopped streaming: the time a line typed during that request has to reach it.
fn interrupt_scenario_ending_after(dir: &Path, final_ms: u64) -> PathBuf {
    let text = std::fs::read_to_string(scenario("interrupt-mid-stream")).unwrap();
    let mut sc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let last = sc["llm"][0]["stream"]
        .as_array_mut()
        .and_then(|steps| steps.last_mut())
        .expect("the first request streams");
    last["delay_ms"] = serde_json::json!(final_ms);
    let path = dir.join(format!("interrupt-mid-stream-{final_ms}.json"));
    std::fs::write(&path, sc.to_string()).unwrap();
    path
}

impl Chat {
    fn start(home: &Path, ws: &Path, scenario: &Path) -> Chat {
        let args = [
            "--provider",
            "scripted",
            "--scenario",
            scenario.to_str().unwrap(),
        ];
        Chat::start_with(home, ws, &args)
    }

    fn start_with(home: &Path, ws: &Path, args: &[&str]) -> Chat {
        let mut child = bin()
            .env("PENGUIN_HOME", home)
            .env_remove("PENGUIN_MODEL")
            .env_remove("PENGUIN_PROVIDER")
            .args(["chat", "--jsonl", "--yes", "--workspace"])
            .arg(ws)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        // A watchdog, so a broken build fails the test instead of hanging it.
        let pid = child.id();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(60));
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        });
        Chat {
            child,
            stdin,
            stdout,
            seen: Vec::new(),
        }
    }

    fn type_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn until(&mut self, needle: &str) {
        loop {
            let line = self
                .stdout
                .next()
                .unwrap_or_else(|| panic!("ended before {needle:?}: {:#?}", self.seen))
                .unwrap();
            let hit = line.contains(needle);
            self.seen.push(line);
            if hit {
                return;
            }
        }
    }

    fn finish(mut self) -> String {
        self.type_line("/quit");
        drop(self.stdin);
        self.seen.extend(self.stdout.map_while(Result::ok));
        assert!(self.child.wait().unwrap().success());
        self.seen.join("\n")
    }
}

#[test]
fn chat_lines_typed_during_a_task_steer_it_or_abort_it() {
    let ws = tempfile::tempdir().unwrap();

    let scenarios = tempfile::tempdir().unwrap();

    // Steering: typed while the model writes, it reaches the model after the current turn.
    // The turn lasts seconds after the first delta, so the line arrives within it.
    let steered = interrupt_scenario_ending_after(scenarios.path(), 5_000);
    let home = tempfile::tempdir().unwrap();
    let mut chat = Chat::start(home.path(), ws.path(), &steered);
    chat.type_line("explain the repo");
    chat.until(r#""event_type":"delta""#);
    chat.type_line("faster please");
    chat.until("Okay, switching to the new request.");
    let stream = chat.finish();
    assert!(
        stream.contains(r#""text":"[user_steering]\nfaster please\n[/user_steering]""#),
        "{stream}"
    );

    // /abort: the task ends with abort as its last message; the chat goes on. The turn would
    // last a minute: the abort always comes first.
    let aborted = interrupt_scenario_ending_after(scenarios.path(), 60_000);
    let home = tempfile::tempdir().unwrap();
    let mut chat = Chat::start(home.path(), ws.path(), &aborted);
    chat.type_line("explain the repo");
    chat.until(r#""event_type":"delta""#);
    chat.type_line("/abort");
    chat.until(r#""type":"abort","reason":"aborted by user""#);
    let stream = chat.finish();
    assert!(
        stream.lines().last().unwrap().contains(r#""type":"abort""#),
        "{stream}"
    );
}

/// Starts a scripted `penguin run --jsonl`, waits for a stdout line containing `needle`, then
/// SIGKILLs it: a crash at a known point.
fn kill_run_at(home: &Path, ws: &Path, name: &str, yes: bool, needle: &str) {
    use std::io::BufRead;
    let mut cmd = bin();
    cmd.env("PENGUIN_HOME", home)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args(["run", "--jsonl", "--provider", "scripted", "--scenario"])
        .arg(scenario(name))
        .arg("--workspace")
        .arg(ws);
    if yes {
        cmd.arg("--yes");
    }
    let mut child = cmd
        .arg("go")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // A watchdog, so a broken build fails the test instead of hanging it.
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    for line in stdout.lines().map_while(Result::ok) {
        let hit = line.contains(needle);
        seen.push(line);
        if hit {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.contains(needle)),
        "{name}: never saw {needle}: {seen:#?}"
    );
    // Records reach the trace from a writer thread: the crash comes once there is a session to
    // resume (its trace holds a complete record).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !traces(home)
        .iter()
        .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains('\n')))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{name}: no trace record was written"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn sessions_killed_mid_request_or_mid_approval_resume_and_check_clean() {
    let cases = [
        // Killed while the model streams.
        ("interrupt-mid-stream", true, "\"event_type\":\"delta\""),
        // Killed while the approval prompt waits for an answer that never comes.
        ("seed-two-tools", false, "\"type\":\"tool_call\""),
    ];
    for (name, yes, needle) in cases {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        kill_run_at(home.path(), ws.path(), name, yes, needle);
        let files = traces(home.path());
        assert_eq!(files.len(), 1, "{name}: {files:?}");
        let stem = files[0].file_stem().unwrap().to_str().unwrap().to_owned();
        let id = stem.rsplit_once('_').unwrap().0.to_owned();
        let mut resume = bin();
        resume
            .env("PENGUIN_HOME", home.path())
            .args([
                "resume",
                &id,
                "carry on",
                "--jsonl",
                "--yes",
                "--provider",
                "scripted",
                "--scenario",
            ])
            .arg(scenario(name));
        let out = run_with_input(resume, "");
        let stream = String::from_utf8_lossy(&out.stdout);
        assert!(
            stream.contains("request_begin"),
            "{name}: the resumed run did not run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for file in traces(home.path()) {
            let check = bin().args(["trace", "check"]).arg(&file).output().unwrap();
            assert!(
                check.status.success(),
                "{name}: {}\n{}",
                String::from_utf8_lossy(&check.stdout),
                String::from_utf8_lossy(&check.stderr)
            );
        }
    }
}

#[test]
fn a_trace_that_cannot_be_written_fails_the_task_and_says_so() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // The traces folder cannot be created (a file is in the way): every record is lost. Root
    // ignores permission bits, so a read-only folder would not do in CI.
    let agent = home.path().join("default/agents/penguin");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("traces"), "not a folder").unwrap();
    let mut cmd = bin();
    cmd.env("PENGUIN_HOME", home.path())
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args([
            "run",
            "--jsonl",
            "--yes",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(scenario("seed-two-tools"))
        .arg("--workspace")
        .arg(ws.path())
        .arg("go");
    let out = run_with_input(cmd, "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("could not be written"), "{stderr}");
    assert!(
        stderr.contains("write failed"),
        "the log names the failure: {stderr}"
    );
}

#[test]
fn without_a_terminal_an_unanswerable_approval_is_denied_not_awaited() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let child = bin()
        .env("PENGUIN_HOME", home.path())
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args(["run", "--workspace"])
        .arg(ws.path())
        .arg("what is here?")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A watchdog: the bug this guards against is a hang.
    let pid = child.id();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some(),
        "killed by the watchdog: {stderr}"
    );
    assert!(stderr.contains("stdin is not a terminal"), "{stderr}");
    assert!(stderr.contains("pass --approve allow-all"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("denied"), "{stdout}");
}

#[test]
fn a_blank_prompt_is_refused_before_any_model_is_asked() {
    let home = tempfile::tempdir().unwrap();
    let out = bin()
        .env("PENGUIN_HOME", home.path())
        .args(["run", "  "])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the prompt is empty"), "{stderr}");
    assert!(traces(home.path()).is_empty(), "nothing was written");
}

#[test]
fn serve_refuses_a_short_token_and_warns_when_listening_beyond_loopback() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let out = bin()
        .env("PENGUIN_HOME", home.path())
        .env("PENGUIN_TOKEN", "x")
        .args(["serve", "--port", "0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at least 16"), "{stderr}");

    let mut child = bin()
        .env("PENGUIN_HOME", home.path())
        .env("PENGUIN_TOKEN", "a-long-enough-token-0123")
        .args(["serve", "--host", "0.0.0.0", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let warning = stderr
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("warning: listening on 0.0.0.0"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(warning.is_some_and(|w| w.contains("other machines can reach")));
}

/// One plain HTTP/1.1 request; the whole answer as text.
fn http_get(addr: &str, path: &str, token: Option<&str>) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn serve_prints_the_web_apps_url_with_the_token_and_serves_the_page() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let mut child = bin()
        .env("PENGUIN_HOME", home.path())
        .env_remove("PENGUIN_TOKEN")
        .args([
            "serve",
            "--port",
            "0",
            "--provider",
            "scripted",
            "--scenario",
        ])
        .arg(scenario("seed-two-tools"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("penguin serve starts");
    // Read the printed lines on a thread, so a server that prints nothing fails the test
    // after a bound instead of hanging it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let url = loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("serve prints the web app's URL");
        if let Some(url) = line.strip_prefix("open the web app: ") {
            break url.to_owned();
        }
    };
    let (base, token) = url
        .split_once("/#token=")
        .expect("the token in the fragment");
    let addr = base.strip_prefix("http://").unwrap();
    let saved = std::fs::read_to_string(home.path().join("server-token")).unwrap();
    assert_eq!(token, saved.trim());

    let page = http_get(addr, "/", None);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains(r#"src="/assets/app.js""#), "{page}");
    let api = http_get(addr, "/api/sessions", Some(token));
    assert!(api.starts_with("HTTP/1.1 200"), "{api}");
    assert!(http_get(addr, "/api/sessions", None).starts_with("HTTP/1.1 401"));
    child.kill().unwrap();
    child.wait().unwrap();
}
