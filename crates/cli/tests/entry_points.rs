//! How penguin is entered, as a person meets it: bare `penguin` in a terminal opens a chat
//! (and without one says how it is used), `penguin run` without a prompt says what it asks,
//! bare `penguin skills` and `penguin memory` list, `memory show` with nothing saved says so,
//! and `serve`'s log written to a file carries no colour codes.

use std::process::{Command, Stdio};

#[path = "support/penguin.rs"]
mod run;
use run::{penguin, said};

#[path = "support/pty.rs"]
mod pty;
use pty::Pty;

#[test]
fn bare_penguin_in_a_terminal_opens_a_chat() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut chat = Pty::spawn(home.path(), ws.path(), "");
    chat.wait("/quit or Ctrl-D to leave");
    chat.wait_prompt_after("/quit or Ctrl-D to leave", 1);
    chat.send("/quit\r");
    chat.finish();

    // Without a terminal there is nobody to chat with: the usage, and the usage error's code.
    let out = penguin(home.path(), ws.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: penguin [COMMAND]"));
}

#[test]
fn run_without_a_prompt_says_what_it_asks() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let run = Pty::spawn(home.path(), ws.path(), "run --yes --model demo");
    run.wait("(no prompt given, so asking: Look around the workspace and tell me what it is.)");
    run.wait("✓ done");
    run.finish();
}

#[test]
fn skills_and_memory_list_by_default_and_an_empty_memory_says_so() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    for (bare, list) in [
        ("skills", ["skills", "list"]),
        ("memory", ["memory", "list"]),
    ] {
        let out = penguin(home.path(), ws.path(), &[bare]);
        assert!(out.status.success(), "{bare}: {out:?}");
        assert_eq!(out, penguin(home.path(), ws.path(), &list), "{bare}");
    }
    let out = penguin(home.path(), ws.path(), &["memory", "show"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing saved in this memory yet"),
        "{out:?}"
    );
}

#[test]
fn serves_log_redirected_to_a_file_is_plain_text() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A session, and its server settings broken: listing it logs a warning.
    let out = penguin(
        home.path(),
        ws.path(),
        &["run", "--yes", "--model", "demo", "hi"],
    );
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session ")?.split(' ').next())
        .expect("the session line names the session");
    let settings = home.path().join("default/agents/penguin/server-sessions");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(settings.join(format!("{id}.json")), "{not json").unwrap();

    let log = home.path().join("serve.log");
    let token = "t".repeat(40);
    let mut server = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args(["serve", "--port", "0", "--token", &token])
        .current_dir(ws.path())
        .env("PENGUIN_HOME", home.path())
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let url = lines
        .find_map(|l| {
            l.unwrap()
                .strip_prefix("penguin server listening on ")
                .map(str::to_owned)
        })
        .expect("the server says where it listens");
    let listed = Command::new("curl")
        .args(["-sf", "-H", &format!("Authorization: Bearer {token}")])
        .arg(format!("{url}/api/sessions"))
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(listed.status.success(), "{listed:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("ignoring") && text.contains("WARN"),
        "the warning was logged: {text}"
    );
    assert!(!text.contains('\x1b'), "no escape sequence: {text:?}");
}

/// A refused connection to a local model: the first failure says what to check, and
/// `--retries 0` gives up at once instead of climbing the ladder for a minute.
#[test]
fn retries_0_fails_at_the_first_refused_connection() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let port = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let args = [
        "run",
        "--provider",
        "openai",
        "--base-url",
        &base,
        "--model",
        "m",
        "--retries",
        "0",
        "hi",
    ];
    let out = penguin(home.path(), ws.path(), &args);
    let shown = said(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(
        shown.contains("nothing is listening at the model's address"),
        "{shown}"
    );
    assert!(shown.contains("failed after 1 attempt"), "{shown}");
    assert!(!shown.contains("retrying"), "{shown}");
}
