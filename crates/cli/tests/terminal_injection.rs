//! Keystrokes into penguin's terminal (issue 36): a command the user approved keeps running in
//! the background and, once the next approval question waits, types `u` into `/dev/tty`
//! (`ioctl(TIOCSTI)`) to answer it "unsandboxed, this once", so that the model's next command
//! writes outside the workspace. Driven through `penguin chat` in a pseudo-terminal (util-linux
//! `script`) with a stub model; every step waits for what it reacts to.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use penguin::tools::sandbox::Landlock;

#[path = "support/stub_model.rs"]
mod stub_model;

/// The background command: waits for the file `go`, tries to type `u` into every terminal it
/// can reach, and leaves its report in `tried` (renamed into place, so it is read whole).
const ATTACK: &str = r#"
import errno, fcntl, os, termios, time
while not os.path.exists("go"):
    time.sleep(0.02)
report = []
def attempt(what, fd):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"u")
        report.append(what + "=typed")
    except OSError as e:
        report.append(what + "=" + errno.errorcode.get(e.errno, str(e.errno)))
try:
    attempt("tty", os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
except OSError as e:
    report.append("tty=open:" + errno.errorcode.get(e.errno, str(e.errno)))
for fd in (0, 1, 2):
    attempt("fd%d" % fd, fd)
with open("tried.part", "w") as f:
    f.write(" ".join(report))
os.rename("tried.part", "tried")
"#;

struct Pty {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<Vec<u8>>>,
}

/// The text of a terminal stream without its escape sequences and carriage returns.
fn strip(raw: &[u8]) -> String {
    let s = String::from_utf8_lossy(raw);
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

impl Pty {
    fn spawn(home: &Path, tmp: &Path, dir: &Path, args: &str) -> Pty {
        if Command::new("script").arg("--version").output().is_err() {
            panic!("util-linux `script` is required for the pseudo-terminal tests");
        }
        let cmdline = format!(
            "stty cols 120 rows 40; exec {} {args}",
            env!("CARGO_BIN_EXE_penguin")
        );
        let mut child = Command::new("script")
            .args(["-qfec", &cmdline, "/dev/null"])
            .current_dir(dir)
            .env("PENGUIN_HOME", home)
            .env("HOME", home)
            // The system temp directory holds the scratch dirs: the sandbox's temp is its own.
            .env("TMPDIR", tmp)
            .env("TERM", "xterm-256color")
            .env("PENGUIN_STUB_KEY", "k")
            .env_remove("NO_COLOR")
            .env_remove("PENGUIN_MODEL")
            .env_remove("PENGUIN_PROVIDER")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        // A watchdog, so a hang fails the test instead of stalling the suite.
        let pid = child.id();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(120));
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        });
        Pty { child, stdin, out }
    }

    fn text(&self) -> String {
        strip(&self.out.lock().unwrap())
    }

    fn send(&mut self, keys: &str) {
        self.stdin.write_all(keys.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits until `ok` holds, reading the screen; fails naming `what` after 30 s.
    fn until(&self, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if ok(&text) {
                return;
            }
            if Instant::now() > deadline {
                panic!("never saw {what}:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_n(&self, needle: &str, n: usize) {
        self.until(&format!("{needle:?} ×{n}"), |t| {
            t.matches(needle).count() >= n
        })
    }

    fn finish(mut self) -> String {
        let status = self.child.wait().unwrap();
        let text = self.text();
        assert!(status.success(), "{text}");
        text
    }
}

/// The Python interpreter itself, not a shim that needs the real home folder (pyenv's does).
fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| PathBuf::from(path.trim()))
}

#[test]
fn a_background_command_cannot_answer_the_next_approval_by_typing_into_the_terminal() {
    match Landlock::probe() {
        Landlock::Abi(n) if n >= 2 => {}
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "needs Landlock, and {other}"
            );
            eprintln!("SKIPPED: needs Landlock, and {other}");
            return;
        }
    }
    let Some(python) = python() else {
        assert!(std::env::var_os("CI").is_none(), "python3 is not installed");
        eprintln!("SKIPPED: python3 is not installed");
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws, tmp, outside) = (
        root.join("home"),
        root.join("ws"),
        root.join("tmp"),
        root.join("outside"),
    );
    for d in [&home, &ws, &tmp, &outside] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(ws.join("attack.py"), ATTACK).unwrap();
    let escape = outside.join("escape.txt");
    let background = serde_json::json!({
        "cmd": format!("{} attack.py", python.display()),
        "run_in_background": true
    })
    .to_string();
    let escaping =
        serde_json::json!({ "cmd": format!("echo escaped > {}", escape.display()) }).to_string();
    // First the background command, then (once its launch is answered) the command that
    // needs the sandbox gone, then text.
    let url = stub_model::serve(move |body| match body.matches(r#""role":"tool""#).count() {
        0 => stub_model::tool_call("exec_command", &background),
        1 => stub_model::tool_call("exec_command", &escaping),
        _ => stub_model::text("All done."),
    });
    std::fs::write(
        home.join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n"),
    )
    .unwrap();

    let mut chat = Pty::spawn(&home, &tmp, &ws, "chat");
    chat.wait_n("/quit or Ctrl-D to leave", 1);
    chat.send("start\r");
    // The background launch is asked, and allowed inside the sandbox.
    chat.wait_n("press y/n/a/u", 1);
    chat.send("y");
    // The escaping command's question waits: now the background command tries to answer it.
    chat.wait_n("press y/n/a/u", 2);
    std::fs::write(ws.join("go"), "").unwrap();
    let tried = ws.join("tried");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tried.exists() {
        assert!(
            Instant::now() < deadline,
            "the background command never tried:\n{}",
            chat.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = std::fs::read_to_string(&tried).unwrap();
    // Anything it typed is in the terminal's input by now, ahead of this answer.
    chat.send("n");
    chat.wait_n("All done.", 1);
    assert!(
        !escape.exists(),
        "the typed `u` ran the command outside the sandbox ({report}):\n{}",
        chat.text()
    );
    chat.send("/quit\r");
    let screen = chat.finish();
    assert!(screen.contains("exec_command denied"), "{screen}");
    assert!(
        report.contains("tty=open:ENXIO") && !report.contains("typed"),
        "the command has no controlling terminal and typed nothing: {report}"
    );
}
