//! Failures a person understands, end to end: `penguin run` against the stub model answering
//! HTTP 404 (a wrong base URL), 401, a context overflow, and against a port nobody listens
//! on. Each attempt's line names the cause with its hint, the run ends `failed after N
//! attempts: <cause>`, and `reconnect_attempts` makes it fail fast. Also: `context_window`
//! bounds `max_tokens`, `penguin init`'s `default_model = "demo"` is the demo chosen (not "no
//! model configured"), and what is in force is shown (`--sandbox off`, scripted tools).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::Reply;

fn bin(home: &Path, ws: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_penguin"));
    cmd.env("PENGUIN_HOME", home)
        .env("HOME", home)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("NO_COLOR")
        .current_dir(ws);
    cmd
}

/// `penguin run --yes hi` with the model `stub` at `base_url`, configured with `extra`.
fn run_stub(base_url: &str, extra: &str) -> (Output, String, String) {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\n{extra}\n"
        ),
    )
    .unwrap();
    let out = bin(home.path(), ws.path())
        .args(["run", "--yes", "hi"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

fn fails_fast(status: &'static str, message: &'static str) -> (String, String) {
    let url = stub_model::serve(move |_| Reply::Error(status, message));
    let (out, stdout, stderr) = run_stub(&url, "reconnect_attempts = 0");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[test]
fn a_wrong_base_url_path_says_so() {
    let (stdout, stderr) = fails_fast("404 Not Found", "File Not Found");
    assert!(
        stdout.contains("request failed (attempt 1): HTTP 404 File Not Found\n"),
        "{stdout}"
    );
    assert!(stdout.contains("  wrong base_url?"), "{stdout}");
    assert!(
        stdout.contains("✗ failed after 1 attempt: HTTP 404 File Not Found"),
        "{stdout}"
    );
    assert!(
        stderr.contains("✗ failed after 1 attempt: HTTP 404 File Not Found · openai-chat/m"),
        "{stderr}"
    );
    assert!(!stderr.contains("interrupted"), "{stderr}");
}

#[test]
fn a_context_overflow_says_the_prompt_is_too_large() {
    let (stdout, _) = fails_fast(
        "400 Bad Request",
        "the request exceeds the available context size, try increasing it",
    );
    assert!(
        stdout.contains("request failed (attempt 1): prompt too large for the model's context (HTTP 400: the request exceeds the available context size"),
        "{stdout}"
    );
    assert!(
        stdout.contains("set context_window in config.toml"),
        "{stdout}"
    );
}

#[test]
fn a_refused_key_names_the_variable_to_check() {
    let (stdout, stderr) = fails_fast("401 Unauthorized", "mock says no");
    assert!(
        stdout.contains("request failed (attempt 1): HTTP 401 mock says no"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the provider refused the API key"),
        "{stdout}"
    );
    assert!(
        stderr.contains("✗ failed after 1 attempt: HTTP 401 mock says no"),
        "{stderr}"
    );
}

#[test]
fn a_server_that_is_down_is_refused_not_timed_out_and_the_ladder_is_configurable() {
    // A port nobody listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let (out, stdout, stderr) = run_stub(&url, "reconnect_attempts = 1");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let cause = format!("connection refused (http://127.0.0.1:{port}/v1/chat/completions)");
    assert!(
        stdout.contains(&format!(
            "request failed (attempt 1): {cause} · retrying in 2s"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("is the server running?"), "{stdout}");
    assert_eq!(
        stdout.matches("is the server running?").count(),
        1,
        "the hint once: {stdout}"
    );
    assert!(
        stdout.contains(&format!("request failed (attempt 2): {cause}\n")),
        "{stdout}"
    );
    assert!(!stdout.contains("attempt 3"), "{stdout}");
    assert!(!stdout.contains("timeout"), "{stdout}");
    assert!(
        stdout.contains(&format!("✗ failed after 2 attempts: {cause}")),
        "{stdout}"
    );
    assert!(stderr.contains("0 tokens (0 in, 0 out)"), "{stderr}");
}

#[test]
fn the_context_window_bounds_max_tokens() {
    let (url, requests) = stub_model::serve_script(vec![stub_model::text("ok")]);
    let (out, stdout, stderr) = run_stub(
        &url,
        "context_window = 16384\nmax_output_tokens = 100000\nreconnect_attempts = 0",
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let max = requests.all()[0]["max_tokens"].as_u64().unwrap();
    assert!(
        (512..16384 - 1024).contains(&max),
        "max_tokens {max} leaves room for the prompt in 16384"
    );
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios")
        .join(format!("{name}.json"))
}

#[test]
fn what_is_in_force_is_said() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // `penguin init` writes default_model = "demo": that is the demo chosen.
    let init = bin(home.path(), ws.path()).arg("init").output().unwrap();
    assert!(init.status.success());
    let out = bin(home.path(), ws.path())
        .args(["run", "--yes", "--sandbox", "off", "hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("no model configured"), "{stderr}");
    assert!(
        stderr.contains("using the built-in demo model (offline"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: the sandbox is off: commands can change every file you can"),
        "{stderr}"
    );
    // A scenario's session line says what its tools are, and with real tools their sandbox.
    let out = bin(home.path(), ws.path())
        .args(["run", "--yes", "--provider", "scripted", "--scenario"])
        .arg(scenario("deny-one"))
        .arg("x")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("scripted tools (a scenario's: no command runs)"),
        "{stderr}"
    );
    let out = bin(home.path(), ws.path())
        .args(["run", "--yes", "--provider", "scripted", "--real-tools"])
        .arg("--scenario")
        .arg(scenario("deny-one"))
        .arg("x")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(" · sandbox: "), "{stderr}");
}
