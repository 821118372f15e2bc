//! Command sessions with real processes: commands that outlive their call, polled, written to,
//! interrupted and killed by `process_id`; background launches reported when they settle; and
//! nothing left behind after a kill or the end of the session.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::killpg;
use nix::unistd::Pid;
use penguin_engine::{CancellationToken, Environment, ToolCallRequest};
use penguin_omni_protocol::background::BackgroundTaskDone;
use penguin_omni_protocol::{build, ModelPayload, OmniMessage, StopReason};
use penguin_tools::{BuiltinTools, Sandbox, ToolsConfig};
use serde_json::{json, Value};

/// Bounded waiting for a condition that real processes bring about.
async fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..400 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Command sessions without the sandbox: these tests are about sessions (a loopback server
/// reached by another call, a trap run by Ctrl-C), which the default sandbox changes (the
/// network off but for `allow_ports`; the command under a PID namespace's init); the sandbox's
/// own tests hold it.
fn tools() -> (tempfile::TempDir, BuiltinTools) {
    let dir = tempfile::tempdir().unwrap();
    let config = ToolsConfig {
        sandbox: Sandbox::off(),
        ..ToolsConfig::default()
    };
    let tools = BuiltinTools::new(dir.path(), config).unwrap();
    (dir, tools)
}

/// Runs one call; returns the complete output and its stop reason.
async fn call(tools: &BuiltinTools, name: &str, args: Value) -> (String, StopReason) {
    let request = ToolCallRequest {
        call: build::tool_call(name, args.to_string(), "c1", StopReason::Completed, None),
        cancel: CancellationToken::new(),
        approver: None,
        thinking_level: None,
    };
    let mut sink: Vec<OmniMessage> = Vec::new();
    tools.execute(request, &mut sink).await;
    match sink.last().and_then(OmniMessage::model) {
        Some(ModelPayload::ToolCallOutput(o)) => (
            o.output.clone(),
            o.stop_reason.unwrap_or(StopReason::Completed),
        ),
        other => panic!("no complete output: {other:?}"),
    }
}

/// The `process_id` a note names.
fn process_id(output: &str) -> String {
    let at = output.find("process_id proc-").expect("a process_id") + "process_id ".len();
    output[at..at + "proc-".len() + 8].to_owned()
}

fn group_alive(pid: i32) -> bool {
    killpg(Pid::from_raw(pid), None).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_still_running_at_its_wait_is_polled_to_its_end() {
    let (dir, tools) = tools();
    // It runs until the test lets it go, so it is still running at its wait however slow the
    // machine.
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "echo first; while [ ! -e go ]; do sleep .05; done; echo second", "yield_time_ms": 2000}),
    )
    .await;
    assert_eq!(stop, StopReason::Completed, "{out}");
    assert!(out.starts_with("first\n"), "{out}");
    assert!(
        out.contains("[process running with process_id proc-"),
        "{out}"
    );
    let id = process_id(&out);
    assert_eq!(tools.commands().list().len(), 1);
    std::fs::write(dir.path().join("go"), "").unwrap();
    // A poll returns only what was not returned before, and the exit once it came.
    let (out, stop) = call(&tools, "input_command", json!({"process_id": id})).await;
    assert_eq!((out.as_str(), stop), ("second\n", StopReason::Completed));
    assert!(
        tools.commands().list().is_empty(),
        "an exited command is forgotten"
    );
    let (out, stop) = call(&tools, "input_command", json!({"process_id": id})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(out.contains("unknown process_id"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_command_writes_to_stdin_and_ctrl_c_interrupts_the_group() {
    let (_dir, tools) = tools();
    ctrl_c_reaches_the_trap(&tools).await;
}

/// The same under the default sandbox, where bubblewrap leads the command's group: Ctrl-C
/// reaches the command's trap, and what it exits with is the command's, not bubblewrap's
/// death by SIGINT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_reaches_the_trap_of_a_command_in_the_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let tools = BuiltinTools::new(dir.path(), ToolsConfig::default()).unwrap();
    let (out, _) = call(&tools, "exec_command", json!({"cmd": "true"})).await;
    assert_eq!(
        out, "[no output]",
        "the first command finds out about namespaces"
    );
    if !ToolsConfig::default().sandbox.wraps() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI installs bubblewrap (scripts/install-sandbox.sh)"
        );
        eprintln!("skipped: commands run without namespaces here");
        return;
    }
    ctrl_c_reaches_the_trap(&tools).await;
}

async fn ctrl_c_reaches_the_trap(tools: &BuiltinTools) {
    let tools = tools.clone();
    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": "read line; echo \"got $line\"; trap 'echo interrupted; exit 0' INT; while :; do sleep 0.05; done", "yield_time_ms": 250}),
    )
    .await;
    let id = process_id(&out);
    let (out, _) = call(
        &tools,
        "input_command",
        json!({"process_id": id, "chars": "hello\n", "yield_time_ms": 2000}),
    )
    .await;
    assert!(out.starts_with("got hello\n"), "{out}");
    let (out, stop) = call(
        &tools,
        "input_command",
        json!({"process_id": id, "chars": "\u{3}", "yield_time_ms": 5000}),
    )
    .await;
    assert_eq!(
        (out.as_str(), stop),
        ("interrupted\n", StopReason::Completed)
    );
    let (out, stop) = call(
        &tools,
        "input_command",
        json!({"process_id": "proc-00000000", "chars": "x\u{3}"}),
    )
    .await;
    assert_eq!(stop, StopReason::Failed, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_server_answers_while_the_session_works_and_kill_ends_it() {
    let (dir, tools) = tools();
    std::fs::write(dir.path().join("index.html"), "hello from the server").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": format!("exec python3 -m http.server {port} --bind 127.0.0.1"), "run_in_background": true}),
    )
    .await;
    assert_eq!(stop, StopReason::Completed);
    assert!(
        out.contains("[command running in background with process_id proc-"),
        "{out}"
    );
    let id = process_id(&out);
    // Meanwhile other calls run, and one of them reaches the server.
    let mut page = String::new();
    for _ in 0..200 {
        let (out, _) = call(
            &tools,
            "exec_command",
            json!({"cmd": format!("python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/').read().decode())\"")}),
        )
        .await;
        if out.contains("hello from the server") {
            page = out;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(page.contains("hello from the server"), "never served");
    let listed = tools.commands().list();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].running && listed[0].label.contains("http.server"));
    let pid = listed[0].pid.expect("a command has a pid");
    let (out, _) = call(&tools, "kill_command", json!({"process_id": id})).await;
    assert!(out.contains(&format!("[process {id} killed")), "{out}");
    eventually("the server's group is gone", || !group_alive(pid)).await;
    assert!(tools.commands().list().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_launch_reports_when_it_settles_and_a_kill_reports_nothing() {
    let (_dir, tools) = tools();
    let reports: Arc<Mutex<Vec<BackgroundTaskDone>>> = Arc::default();
    let sink = reports.clone();
    tools
        .commands()
        .set_listener(Arc::new(move |r| sink.lock().unwrap().push(r)));
    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": "echo building; exit 3", "run_in_background": true}),
    )
    .await;
    let id = process_id(&out);
    eventually("the report arrives", || !reports.lock().unwrap().is_empty()).await;
    let report = reports.lock().unwrap()[0].clone();
    assert_eq!(report.id, id);
    assert!(!report.completed);
    assert_eq!(report.detail, "exit code 3");
    assert_eq!(report.output, "building\n");
    assert!(report
        .text()
        .contains("Background command failed: `echo building; exit 3`"));

    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 30", "run_in_background": true}),
    )
    .await;
    let id = process_id(&out);
    let (out, _) = call(&tools, "kill_command", json!({"process_id": id})).await;
    assert!(out.contains("killed"), "{out}");
    assert!(
        tools.commands().list().iter().all(|p| p.id != id),
        "a killed command is forgotten"
    );
    // Give a report, if one were (wrongly) armed, every chance to arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        reports.lock().unwrap().len(),
        1,
        "a killed command reports nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_ends_a_process_that_traps_term_and_its_grandchildren() {
    let (_dir, tools) = tools();
    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": "trap '' TERM; sleep 300 & sleep 300 & wait", "run_in_background": true}),
    )
    .await;
    let id = process_id(&out);
    let pid = tools.commands().list()[0].pid.expect("a pid");
    assert!(group_alive(pid));
    call(&tools, "kill_command", json!({"process_id": id})).await;
    // SIGTERM is ignored; SIGKILL follows after the grace period and takes the group.
    eventually("the whole group is gone", || !group_alive(pid)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_the_session_leaves_no_process_behind() {
    let (_dir, tools) = tools();
    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 300 & sleep 300", "yield_time_ms": 250}),
    )
    .await;
    assert!(out.contains("process_id"), "{out}");
    let pid = tools.commands().list()[0].pid.expect("a pid");
    assert!(group_alive(pid));
    drop(tools);
    eventually("the group is gone with the session", || !group_alive(pid)).await;
}

/// The pipes this process holds open, as `pipe:[inode]` link targets.
fn open_pipes() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.display().to_string())
        .filter(|t| t.starts_with("pipe:"))
        .collect()
}

#[tokio::test]
async fn a_finished_background_command_keeps_no_pipe_while_the_session_lists_it() {
    let (_dir, tools) = tools();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    tools
        .commands()
        .set_listener(Arc::new(move |r| sink.lock().unwrap().push(r)));
    // The command names the pipes of its own stdin, stdout and stderr.
    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": "readlink /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2", "run_in_background": true}),
    )
    .await;
    let id = process_id(&out);
    eventually("the report arrives", || !reports.lock().unwrap().is_empty()).await;
    let report = reports.lock().unwrap()[0].clone();
    let its_pipes: Vec<&str> = report.output.lines().collect();
    assert_eq!(its_pipes.len(), 3, "{}", report.output);
    assert!(
        tools.commands().list().iter().any(|t| t.id == id),
        "still listed"
    );
    let held: Vec<String> = open_pipes()
        .into_iter()
        .filter(|p| its_pipes.contains(&p.as_str()))
        .collect();
    assert!(held.is_empty(), "penguin still holds {held:?}");
}

/// A background command as a listing shows it to a person: when it started, its latest lines
/// (whoever collected them), and the port it listens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_background_command_shows_its_latest_lines_and_its_port() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "CI has python3");
        return;
    }
    let (_dir, tools) = tools();
    let server = "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print('listening on', s.getsockname()[1], flush=True); time.sleep(60)";
    let (out, _) = call(
        &tools,
        "exec_command",
        json!({"cmd": format!("echo starting; python3 -c \"{server}\""), "run_in_background": true}),
    )
    .await;
    let id = process_id(&out);
    let listed = || {
        tools
            .commands()
            .list()
            .into_iter()
            .find(|t| t.id == id)
            .unwrap()
    };
    eventually("the port is listed", || !listed().ports.is_empty()).await;
    let task = listed();
    let recent = task.recent.clone().unwrap_or_default();
    assert!(recent.starts_with("starting\nlistening on "), "{recent}");
    let port: u16 = recent.rsplit(' ').next().unwrap().trim().parse().unwrap();
    assert_eq!(task.ports, [port]);
    assert!(task.started_at_ms.is_some());
    assert!(tools.commands().kill(&id));
}
