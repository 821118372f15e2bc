//! The sandbox through the `penguin` command: `[sandbox]` and `--sandbox` reach the tools, the
//! session line shows the effective sandbox, and a model's command is confined by the kernel.
//!
//! The model is a stub OpenAI-compatible server on loopback that asks for one `exec_command`
//! and then answers with text.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use penguin::tools::sandbox::Landlock;

#[path = "support/stub_model.rs"]
mod stub_model;

fn landlock(test: &str) -> bool {
    match Landlock::probe() {
        Landlock::Abi(n) if n >= 2 => true,
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: needs Landlock ABI 2, and {other}"
            );
            eprintln!("SKIPPED {test}: needs Landlock ABI 2, and {other}");
            false
        }
    }
}

/// A tool call running `cmd` first, then (once the request carries the tool's output) a text.
fn stub_model(cmd: String) -> String {
    let args = serde_json::json!({ "cmd": cmd }).to_string();
    stub_model::serve(move |body| match stub_model::has_tool_output(body) {
        true => stub_model::text("done"),
        false => stub_model::tool_call("exec_command", &args),
    })
}

/// A penguin home configured for the stub, a workspace, a temp dir and a directory outside
/// them all.
struct Setup {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    tmp: PathBuf,
    outside: PathBuf,
}

fn setup(cmd_for: impl FnOnce(&Path) -> String, sandbox_section: &str) -> Setup {
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
    let url = stub_model(cmd_for(&outside));
    std::fs::write(
        home.join("config.toml"),
        format!(
            "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n{sandbox_section}"
        ),
    )
    .unwrap();
    Setup {
        _base: base,
        home,
        ws,
        tmp,
        outside,
    }
}

fn penguin(s: &Setup, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        // The system temp directory holds the scratch dirs: the sandbox's temp is its own.
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .arg("run")
        .arg("--yes")
        .arg("--workspace")
        .arg(&s.ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_models_command_is_confined_and_the_session_line_says_how() {
    if !landlock("cli") {
        return;
    }
    let s = setup(
        |outside| {
            format!(
                "echo in > inside.txt; echo x > {}/escape.txt",
                outside.display()
            )
        },
        "",
    );
    let out = penguin(&s, &["--jsonl", "write outside"]);
    let stream = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stream}");
    assert!(s.ws.join("inside.txt").exists(), "{stream}");
    assert!(!s.outside.join("escape.txt").exists(), "{stream}");
    // Refused by the read-only mount of the namespaces (or by Landlock without them).
    assert!(
        stream.contains("Read-only file system") || stream.contains("Permission denied"),
        "{stream}"
    );
    assert!(stream.contains("[sandbox: "), "{stream}");
    assert!(stream.contains("mode workspace-write"), "{stream}");

    // Rendered: the session line names the effective sandbox.
    let out = penguin(&s, &["--sandbox", "read-only", "again"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("· sandbox: read-only, network off (Landlock ABI "),
        "the network is off by default: {err}"
    );

    // --sandbox off: today's behaviour.
    let out = penguin(&s, &["--sandbox", "off", "--jsonl", "once more"]);
    assert!(out.status.success());
    assert!(s.outside.join("escape.txt").exists());
}

#[test]
fn the_config_section_is_used_and_errors_name_the_field() {
    if !landlock("cli config") {
        return;
    }
    let s = setup(
        |_| "echo x > kept.txt".to_owned(),
        "[sandbox]\nmode = \"read-only\"\nnetwork = false\n",
    );
    let out = penguin(&s, &["hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sandbox: read-only, network off (Landlock ABI "),
        "{err}"
    );
    assert!(!s.ws.join("kept.txt").exists(), "read-only: {err}");

    std::fs::write(s.home.join("config.toml"), "[sandbox]\nmode = \"jail\"\n").unwrap();
    let out = penguin(&s, &["hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("sandbox.mode: unknown sandbox mode \"jail\""),
        "{err}"
    );
}

/// penguin run from `$HOME`: its data root (`~/.penguin/data`) lies inside the workspace. A
/// command can neither read the server token nor rewrite the config that sandboxes it, and
/// penguin's secrets are not in its environment.
#[test]
fn a_command_cannot_reach_penguins_token_config_or_secrets() {
    if !landlock("cli data root") {
        return;
    }
    let data_of = |outside: &Path| outside.parent().unwrap().join("ws/.penguin/data");
    let mut s = setup(
        |outside| {
            let data = data_of(outside).display().to_string();
            format!(
                "cat {data}/server-token; printf '[sandbox]\\nmode = \"off\"\\n' >> {data}/config.toml; env"
            )
        },
        "",
    );
    let data = data_of(&s.outside);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::rename(s.home.join("config.toml"), data.join("config.toml")).unwrap();
    std::fs::write(data.join("server-token"), "tok-file-secret").unwrap();
    s.home = data.clone();
    let config = std::fs::read_to_string(data.join("config.toml")).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "sk-provider-secret")
        .env("PENGUIN_TOKEN", "tok-env-secret")
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args(["run", "--yes", "--jsonl", "--workspace"])
        .arg(&s.ws)
        .arg("take over")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stream = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stream}");
    assert!(stream.contains("PATH="), "the command ran `env`: {stream}");
    for secret in ["tok-file-secret", "sk-provider-secret", "tok-env-secret"] {
        assert!(
            !stream.contains(secret),
            "{secret} reached the command: {stream}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(data.join("config.toml")).unwrap(),
        config
    );
    let out = penguin(&s, &["again"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sandbox: workspace-write, network off"),
        "{err}"
    );
}
