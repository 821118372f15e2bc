//! Keystrokes into penguin's terminal (issue 36): a command the user approved keeps running in
//! the background and, once the next approval question waits, types `u` into `/dev/tty`
//! (`ioctl(TIOCSTI)`) to answer it "unsandboxed, this once", so that the model's next command
//! writes outside the workspace. Driven through `penguin chat` in a pseudo-terminal (util-linux
//! `script`) with a stub model; every step waits for what it reacts to.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use penguin::tools::sandbox::Landlock;

#[path = "support/stub_model.rs"]
mod stub_model;

#[path = "support/pty.rs"]
mod pty;
use pty::Pty;

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

    let mut chat = Pty::spawn_with(&home, &ws, "chat", Some(&tmp));
    chat.wait_n("/quit or Ctrl-D to leave", 1);
    chat.send("start\r");
    // The background launch is asked, and allowed inside the sandbox.
    chat.wait_n("press y/n/a/u", 1);
    chat.send("y");
    // The escaping command's question waits (a redirection: no "always" for it): now the
    // background command tries to answer it.
    chat.wait_n("press y/n/u", 1);
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
