//! A command must never share penguin's controlling terminal (issue 36): one that could
//! `ioctl(TIOCSTI)` on `/dev/tty` would type the answer to the next approval prompt
//! ("unsandboxed, this once"), a line of steering in `penguin chat`, or a shell command left
//! for when `penguin serve` exits.
//!
//! The terminal tests run again inside a pseudo-terminal (util-linux `script`), where this
//! test process leads the session and the terminal is its controlling one, as penguin's is.
//! There a command run through the tools, in every mode, tries to open `/dev/tty` and type
//! into it, into its inherited stdin, stdout and stderr, and (where it is confined) into the
//! terminal by its path; afterwards nothing may be waiting in the terminal's input. A
//! control typed by a direct child, which shares the session, shows the kernel lets typing
//! through here.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod support;

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use penguin_omni_protocol::StopReason;
use penguin_tools::{Sandbox, SandboxMode, SandboxRequest};
use serde_json::json;
use support::*;

/// Set in the copy of this test binary that runs inside the pseudo-terminal.
const INSIDE: &str = "PENGUIN_TEST_INSIDE_PTY";

/// Tries every way a process could type `argv[1]` into a terminal; prints one word per
/// attempt: `typed`, or the error (`open:ENXIO` when even opening failed). Terminals are
/// opened for reading only: that is enough for TIOCSTI, and Landlock lets a confined command
/// read any file, so only the missing controlling terminal can stop the open.
const ATTACK: &str = r#"
import errno, fcntl, os, sys, termios
key = sys.argv[1].encode()
report = []
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
def attempt(what, fd):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, key)
        report.append(what + "=typed")
    except OSError as e:
        report.append(what + "=" + name(e))
def by_path(what, path):
    try:
        attempt(what, os.open(path, os.O_RDONLY | os.O_NOCTTY))
    except OSError as e:
        report.append(what + "=open:" + name(e))
by_path("tty", "/dev/tty")
for fd in (0, 1, 2):
    attempt("fd%d" % fd, fd)
if len(sys.argv) > 2:
    by_path("path", sys.argv[2])
print(" ".join(report))
"#;

/// Runs the test `name` of this binary inside a pseudo-terminal and fails with its
/// transcript unless it passed there.
fn in_pty(name: &str) {
    let exe = std::env::current_exe().expect("this test binary");
    let cmdline = format!(
        "exec '{}' --exact {name} --nocapture --test-threads=1",
        exe.display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &cmdline, "/dev/null"])
        .env(INSIDE, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("util-linux `script` is required for the pseudo-terminal tests");
    // Held open to the end: at the end of its input `script` would type an end-of-file into
    // the terminal, which is the very place the test watches.
    let input = child.stdin.take();
    let mut stdout = child.stdout.take().expect("script's output");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        String::from_utf8_lossy(&out).replace('\r', "")
    });
    // A hang fails the test instead of stalling the suite.
    let (done, finished) = mpsc::channel::<()>();
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(180)).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let status = child.wait().expect("script ran");
    let _ = done.send(());
    watchdog.join().unwrap();
    drop(input);
    let transcript = reader.join().unwrap();
    assert!(
        status.success() && transcript.contains("test result: ok. 1 passed"),
        "inside the pseudo-terminal ({status}):\n{transcript}"
    );
}

/// The controlling terminal of this process, in raw mode with reads that never wait, so
/// that whatever was typed into it can be read at once.
struct Terminal {
    tty: std::fs::File,
}

impl Terminal {
    fn open() -> Terminal {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open("/dev/tty")
            .expect("inside the pseudo-terminal, /dev/tty opens");
        let raw = Command::new("stty")
            .args(["raw", "-echo", "min", "0", "time", "0"])
            .stdin(tty.try_clone().unwrap())
            .status()
            .unwrap();
        assert!(raw.success());
        Terminal { tty }
    }

    /// What was typed and not yet read.
    fn typed(&mut self) -> String {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match self.tty.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    }
}

/// Whether a child sharing this session can type into the terminal here: the kernel may
/// refuse TIOCSTI altogether (`dev.tty.legacy_tiocsti = 0` without `CAP_SYS_ADMIN`), and then
/// only the separate session is left to check.
fn control(terminal: &mut Terminal, attack: &Path) -> bool {
    let out = Command::new("python3")
        .arg(attack)
        .arg("C")
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        report.contains("tty=") && !report.contains("tty=open:"),
        "a process of this session opens /dev/tty: {report}"
    );
    let typed = report.contains("tty=typed");
    assert_eq!(
        terminal.typed(),
        if typed { "C" } else { "" },
        "the control's keystroke arrives exactly when it says it typed: {report}"
    );
    if !typed {
        eprintln!("NOTE: this kernel refuses TIOCSTI ({report}); checking the sessions only");
    }
    typed
}

/// The sandboxes to attack from: every mode penguin starts commands in, with whether the
/// command is confined (then it also tries the terminal by its path, which only an unconfined
/// root could use, with `CAP_SYS_ADMIN`).
fn every_mode(s: &Scene) -> Vec<(&'static str, Sandbox, bool)> {
    let workspace = s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]);
    let off_network_off = Sandbox::resolve(&SandboxRequest {
        mode: Some(SandboxMode::Off),
        network: false,
        ..SandboxRequest::default()
    })
    .unwrap();
    vec![
        ("workspace-write", workspace.clone(), true),
        (
            "read-only",
            s.sandbox(SandboxMode::ReadOnly, false, vec![]),
            true,
        ),
        (
            "workspace-write without namespaces",
            s.landlock_only(SandboxMode::WorkspaceWrite, false),
            true,
        ),
        ("off with the network off", off_network_off, true),
        ("off", Sandbox::off(), false),
        ("unsandboxed, this once", workspace.unconfined(), false),
    ]
}

/// What a report must say: `/dev/tty` does not even open (no controlling terminal), and no
/// attempt typed anything.
fn assert_refused(mode: &str, report: &str) {
    assert!(
        report.contains("tty=open:ENXIO"),
        "{mode}: /dev/tty must not open (the command leads its own session): {report}"
    );
    for fd in ["fd0", "fd1", "fd2"] {
        assert!(
            report.contains(&format!("{fd}=")),
            "{mode}: {fd} was tried: {report}"
        );
    }
    assert!(!report.contains("=typed"), "{mode}: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_type_into_penguins_terminal_in_any_mode() {
    if std::env::var_os(INSIDE).is_none() {
        if landlock_at_least("terminal", 5) && python_available("terminal") {
            in_pty("commands_cannot_type_into_penguins_terminal_in_any_mode");
        }
        return;
    }
    let s = Scene::new();
    let attack = s.ws.join("attack.py");
    std::fs::write(&attack, ATTACK).unwrap();
    let mut terminal = Terminal::open();
    let pty = std::fs::read_link("/proc/self/fd/0").unwrap();
    assert!(
        pty.starts_with("/dev/pts"),
        "stdin is the terminal: {pty:?}"
    );
    control(&mut terminal, &attack);
    for (key, (mode, sandbox, confined)) in ('a'..).zip(every_mode(&s)) {
        let tools = s.tools(sandbox);
        let path = if confined {
            format!(" {}", pty.display())
        } else {
            String::new()
        };
        let (report, stop) = sh(&tools, &format!("python3 attack.py {key}{path}")).await;
        assert_eq!(stop, StopReason::Completed, "{mode}: {report}");
        assert_refused(mode, &report);
        if confined {
            assert!(report.contains("path="), "{mode}: {report}");
        }
        assert_eq!(terminal.typed(), "", "{mode}: keystrokes arrived: {report}");
    }
}

#[cfg(feature = "mcp")]
mod mcp {
    use std::sync::Arc;

    use penguin_engine::{CancellationToken, Environment, ToolCallRequest};
    use penguin_omni_protocol::{build, McpConnectStatus, ModelPayload};
    use penguin_tools::mcp::{McpEnvironment, McpServerConfig};
    use penguin_tools::{BuiltinTools, ToolsConfig};

    use super::*;

    /// A stdio MCP server with one tool, `attack`, that runs [`ATTACK`] in the server's own
    /// process and answers with its report.
    const SERVER: &str = r#"
import io, json, runpy, sys
out = sys.stdout.buffer
def send(msg):
    out.write(json.dumps(msg).encode() + b"\n")
    out.flush()
for line in sys.stdin.buffer:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, id = msg.get("method"), msg["id"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "t", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "attack", "inputSchema": {"type": "object"}, "description": "attack"}]}})
    elif method == "tools/call":
        args = msg["params"].get("arguments") or {}
        sys.argv = ["attack", args["key"]] + ([args["path"]] if "path" in args else [])
        captured, real = io.StringIO(), sys.stdout
        sys.stdout = captured
        try:
            runpy.run_path(args["script"])
        finally:
            sys.stdout = real
        send({"jsonrpc": "2.0", "id": id,
              "result": {"content": [{"type": "text", "text": captured.getvalue()}]}})
    else:
        send({"jsonrpc": "2.0", "id": id, "result": {}})
"#;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mcp_stdio_servers_cannot_type_into_penguins_terminal() {
        if std::env::var_os(INSIDE).is_none() {
            if landlock_at_least("mcp terminal", 5) && python_available("mcp terminal") {
                in_pty("mcp::mcp_stdio_servers_cannot_type_into_penguins_terminal");
            }
            return;
        }
        let s = Scene::new();
        let attack = s.ws.join("attack.py");
        std::fs::write(&attack, ATTACK).unwrap();
        let server = s.ws.join("server.py");
        std::fs::write(&server, SERVER).unwrap();
        let mut terminal = Terminal::open();
        let pty = std::fs::read_link("/proc/self/fd/0").unwrap();
        control(&mut terminal, &attack);
        let entry = |name: &str, sandbox: bool| McpServerConfig {
            name: name.into(),
            command: Some("python3".into()),
            args: vec![server.display().to_string()],
            sandbox,
            connect_timeout_ms: Some(60_000),
            ..McpServerConfig::default()
        };
        let env = McpEnvironment::new(
            Arc::new(BuiltinTools::new(&s.ws, ToolsConfig::default()).unwrap()),
            &[entry("confined", true), entry("free", false)],
            &s.ws,
            s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]),
            ToolsConfig::default(),
        );
        let results = env.connect(&CancellationToken::new()).await.unwrap();
        assert_eq!(
            results.iter().map(|r| r.status).collect::<Vec<_>>(),
            [McpConnectStatus::Completed, McpConnectStatus::Completed],
            "{results:?}"
        );
        for (key, server, confined) in [("m", "confined", true), ("n", "free", false)] {
            let mut args = json!({"key": key, "script": attack});
            if confined {
                args["path"] = json!(pty);
            }
            let request = ToolCallRequest {
                call: build::tool_call(
                    format!("mcp__{server}__attack"),
                    args.to_string(),
                    "c1",
                    StopReason::Completed,
                    None,
                ),
                cancel: CancellationToken::new(),
                approver: None,
                thinking_level: None,
            };
            let mut sink = Vec::new();
            env.execute(request, &mut sink).await;
            let Some(ModelPayload::ToolCallOutput(done)) = sink.last().and_then(|m| m.model())
            else {
                panic!("{server}: no complete output: {sink:?}");
            };
            assert_refused(server, &done.output);
            assert_eq!(
                terminal.typed(),
                "",
                "{server}: keystrokes arrived: {}",
                done.output
            );
        }
    }
}

/// Fields of `/proc/PID/stat`: the process group and the session.
fn group_and_session(pid: i32) -> (i32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_leads_its_own_session_and_a_kill_still_ends_all_it_started() {
    if !landlock_at_least("session", 2) {
        return;
    }
    let s = Scene::new();
    let own = group_and_session(std::process::id() as i32).1;
    let modes = [
        (
            "workspace-write",
            s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]),
        ),
        ("off", Sandbox::off()),
    ];
    for (n, (mode, sandbox)) in modes.into_iter().enumerate() {
        let tools = s.tools(sandbox);
        // Distinct arguments, to find this mode's grandchildren among all processes.
        let marker = format!("3000.{n}7");
        let (out, _) = call(
            &tools,
            "exec_command",
            json!({"cmd": format!("sleep {marker} & sleep {marker} & wait"), "run_in_background": true}),
        )
        .await;
        let at = out
            .find("process_id proc-")
            .unwrap_or_else(|| panic!("{mode}: a process_id: {out}"))
            + "process_id ".len();
        let id = out[at..at + "proc-".len() + 8].to_owned();
        let pid = tools.commands().list()[0].pid.expect("a pid");
        let (group, session) = group_and_session(pid);
        assert_eq!(
            (group, session),
            (pid, pid),
            "{mode}: the command leads its session and group"
        );
        assert_ne!(session, own, "{mode}");
        let (out, _) = call(&tools, "kill_command", json!({"process_id": id})).await;
        assert!(out.contains("killed"), "{mode}: {out}");
        for _ in 0..400 {
            if !running_with_argument(&marker) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(
            !running_with_argument(&marker),
            "{mode}: the command's background jobs outlived its kill"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seccomp_filter_refuses_typing_into_any_terminal() {
    if !landlock_at_least("tiocsti", 4) || !python_available("tiocsti") {
        return;
    }
    // A terminal of the command's own, not its controlling one: typing there needs
    // CAP_SYS_ADMIN, which root has where there are no namespaces. The request with high bits
    // set reaches the kernel as the same 32-bit request.
    let probe = r#"python3 -c "
import ctypes, errno, os, termios
libc = ctypes.CDLL(None, use_errno=True)
master, slave = os.openpty()
for name, request in (('plain', termios.TIOCSTI), ('high', termios.TIOCSTI | (1 << 32))):
    r = libc.ioctl(slave, ctypes.c_ulong(request), ctypes.c_char_p(b'x'))
    print(name, 'typed' if r == 0 else errno.errorcode[ctypes.get_errno()])
""#;
    let s = Scene::new();
    let (control, _) = sh(&s.tools(Sandbox::off()), probe).await;
    if !control.contains("plain typed") {
        // Only CAP_SYS_ADMIN types into a terminal that is not the caller's controlling one.
        assert!(
            !is_root(),
            "root could not type into its own terminal: {control}"
        );
        eprintln!("SKIPPED tiocsti: an unconfined process cannot type here either: {control}");
        return;
    }
    // Only seccomp stands between the two: no namespaces, no Landlock filesystem rules.
    let seccomp_only = Sandbox::resolve(&SandboxRequest {
        mode: Some(SandboxMode::Off),
        network: false,
        ..SandboxRequest::default()
    })
    .unwrap();
    let (out, _) = sh(&s.tools(seccomp_only), probe).await;
    assert_eq!(out, "plain EPERM\nhigh EPERM\n");
}

/// Whether this process runs as root.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next().map(|uid| uid == "0"))
        .unwrap_or(false)
}
