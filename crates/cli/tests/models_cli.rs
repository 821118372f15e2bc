//! `penguin models` (issue 42, item 1) end to end through the binary and the stub model: a
//! model added by flags and by answering in a terminal (offered the endpoint's own list),
//! tested (latency, streaming, tool calling, vision, or the classified failure), made the
//! default and removed, with config.toml's comments and layout kept and no key ever written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "support/pty.rs"]
mod pty;
#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::{serve_listing, serve_script, text, tool_call, Reply};

const CONFIG: &str =
    "# My setup; penguin must keep this.\n\n[compaction]\nmode = \"discard\"   # mine\n";

/// The key the tests export: it must never reach config.toml.
const SECRET: &str = "sk-test-never-written-0123456789";

struct Home {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

impl Home {
    fn new() -> Home {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().canonicalize().unwrap();
        let (home, ws) = (root.join("home"), root.join("ws"));
        std::fs::create_dir(&home).unwrap();
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(home.join("config.toml"), CONFIG).unwrap();
        Home {
            _base: base,
            home,
            ws,
        }
    }

    fn config(&self) -> String {
        std::fs::read_to_string(self.home.join("config.toml")).unwrap()
    }

    fn penguin(&self, args: &[&str]) -> Output {
        run(&self.home, &self.ws, args)
    }
}

fn run(home: &Path, ws: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args(args)
        .current_dir(ws)
        .env("PENGUIN_HOME", home)
        .env("STUB_KEY", SECRET)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_model_added_by_flags_is_tested_made_default_and_removed() {
    let h = Home::new();
    let (url, requests) = serve_script(vec![
        text("Hello from the stub."),
        tool_call("ping", r#"{"text":"hi"}"#),
        text("Red."),
    ]);
    let out = h.penguin(&[
        "models",
        "add",
        "stub",
        "--protocol",
        "openai",
        "--base-url",
        &url,
        "--model",
        "stub-1",
        "--api-key-env",
        "STUB_KEY",
        "--default",
    ]);
    assert!(out.status.success(), "{}", said(&out));
    let config = h.config();
    assert!(
        config.starts_with("default_model = \"stub\"\n# My setup; penguin must keep this.\n\n[compaction]\nmode = \"discard\"   # mine\n"),
        "{config}"
    );
    assert!(config.contains(&format!(
        "[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub-1\"\napi_key_env = \"STUB_KEY\"\n"
    )));
    assert!(!config.contains(SECRET), "the key itself is never written");

    // Bare `penguin models` lists, the default marked.
    let out = h.penguin(&["models"]);
    let listed = said(&out);
    assert!(listed.contains("* stub  openai-chat  stub-1"), "{listed}");
    assert!(listed.contains("STUB_KEY (set)"), "{listed}");
    assert!(!listed.contains(SECRET));

    let out = h.penguin(&["models", "test", "stub"]);
    let report = said(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("stub: answers: Hello from the stub."),
        "{report}"
    );
    assert!(report.contains("ms to the first token"), "{report}");
    assert!(report.contains("streaming  works"), "{report}");
    assert!(
        report.contains(r#"tools      works: called ping({"text":"hi"})"#),
        "{report}"
    );
    assert!(report.contains("vision     works: Red."), "{report}");
    let sent = requests.all();
    assert_eq!(sent.len(), 3, "one request per check");
    assert_eq!(stub_model::offered_tools(&sent[1]), ["ping"]);
    assert!(
        sent[2].to_string().contains("data:image/png;base64,"),
        "the vision check sends an image"
    );

    let out = h.penguin(&["models", "default", "demo"]);
    assert!(out.status.success(), "{}", said(&out));
    assert!(said(&h.penguin(&["models", "list"])).contains("* demo"));
    let out = h.penguin(&["models", "default", "nope"]);
    assert!(!out.status.success());
    assert!(said(&out).contains("no model named \"nope\" in config.toml (configured: stub)"));

    let out = h.penguin(&["models", "remove", "stub"]);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(
        h.config(),
        format!("default_model = \"demo\"\n{CONFIG}"),
        "the user's text as it was, with the default they set"
    );
}

#[test]
fn a_failing_model_is_reported_in_the_failure_s_own_words() {
    let h = Home::new();
    let (url, _) = serve_script(vec![Reply::Error(
        "401 Unauthorized",
        "Incorrect API key provided",
    )]);
    let out = h.penguin(&[
        "models",
        "add",
        "bad",
        "--protocol",
        "openai-chat",
        "--base-url",
        &url,
        "--model",
        "m",
        "--api-key-env",
        "STUB_KEY",
    ]);
    assert!(out.status.success(), "{}", said(&out));
    let out = h.penguin(&["models", "test", "bad", "--json"]);
    assert!(!out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["failure"]["kind"], "auth", "{report}");
    assert!(
        report["failure"]["cause"].as_str().unwrap().contains("401"),
        "{report}"
    );
    assert_eq!(report["tools"]["status"], "skipped");
}

#[test]
fn without_a_terminal_a_missing_field_is_named_with_the_endpoint_s_models() {
    let h = Home::new();
    let url = serve_listing(Some(vec!["beta", "alpha"]), |_| text("hi"));
    let out = h.penguin(&[
        "models",
        "add",
        "x",
        "--protocol",
        "openai-chat",
        "--base-url",
        &url,
    ]);
    assert!(!out.status.success());
    assert!(
        said(&out).contains("--model is required; the endpoint offers: alpha, beta"),
        "{}",
        said(&out)
    );
    let out = h.penguin(&["models", "add", "--protocol", "ollama", "--model", "m"]);
    assert!(said(&out).contains("NAME is required"), "{}", said(&out));
    let out = h.penguin(&[
        "models",
        "add",
        "x",
        "--protocol",
        "openai-chat",
        "--model",
        "m",
        "--api-key-env",
        SECRET,
    ]);
    assert!(!out.status.success());
    let message = said(&out);
    assert!(
        message.contains("--api-key-env: api_key_env: expected the NAME"),
        "{message}"
    );
    assert!(
        !message.contains(SECRET),
        "a pasted key is not echoed: {message}"
    );
    assert_eq!(h.config(), CONFIG, "nothing refused was written");
}

#[test]
fn add_asks_in_a_terminal_and_offers_the_endpoint_s_models() {
    let h = Home::new();
    let url = serve_listing(Some(vec!["qwen-small", "qwen-large"]), |_| text("hi"));
    let mut t = pty::Pty::spawn(&h.home, &h.ws, "models add");
    t.wait("Name: ");
    t.send("demo\r");
    t.wait("the built-in offline model's name");
    t.send("local\r");
    t.wait("Protocol [openai-chat]: ");
    t.send("\r");
    t.wait("Base URL [https://api.openai.com/v1]: ");
    t.send(&format!("{url}\r"));
    t.wait("Key variable [OPENAI_API_KEY]: ");
    t.send("LOCAL_KEY\r");
    t.wait("2. qwen-small");
    t.wait("Model id (or its number): ");
    t.send("1\r");
    t.wait("Make it the default model? (y/N)");
    t.send("y\r");
    let screen = t.finish();
    assert!(screen.contains("added local (the default)"), "{screen}");
    let config = h.config();
    assert!(
        config.contains(&format!(
            "[models.local]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"qwen-large\"\napi_key_env = \"LOCAL_KEY\"\n"
        )),
        "{config}"
    );
    assert!(
        config.starts_with("default_model = \"local\"\n# My setup"),
        "{config}"
    );
}

/// `curl` with the token, a method and maybe a JSON body; the answer's status and body.
fn curl(token: &str, method: &str, url: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", &format!("Authorization: Bearer {token}")]);
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data", b]);
    }
    let out = cmd.arg(url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (
        code.trim().parse().unwrap(),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn penguin_serve_edits_the_same_config_toml_as_penguin_models() {
    use std::io::BufRead;
    let h = Home::new();
    let token = "t".repeat(40);
    let mut server = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args(["serve", "--port", "0", "--token", &token])
        .current_dir(&h.ws)
        .env("PENGUIN_HOME", &h.home)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
    let (status, list) = curl(
        &token,
        "POST",
        &format!("{url}/api/models"),
        Some(r#"{"name": "served", "protocol": "ollama", "model": "qwen3:4b", "default": true}"#),
    );
    let added = said(&h.penguin(&["models", "list"]));
    let (_, after_cli) = {
        // The CLI's edit, seen by the server on its next edit's read of the file.
        let out = h.penguin(&[
            "models",
            "add",
            "cli",
            "--protocol",
            "gemini",
            "--model",
            "gemini-2.5-flash",
        ]);
        assert!(out.status.success(), "{}", said(&out));
        curl(&token, "DELETE", &format!("{url}/api/models/served"), None)
    };
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(status, 201, "{list}");
    assert_eq!(list["models"][0]["name"], "served");
    assert_eq!(list["models"][0]["default"], true);
    assert!(added.contains("* served  ollama"), "{added}");
    let names: Vec<&str> = after_cli["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo", "cli"], "{after_cli}");
    assert_eq!(
        h.config(),
        format!("{CONFIG}\n[models.cli]\nprotocol = \"gemini\"\nmodel = \"gemini-2.5-flash\"\n"),
    );
}

#[test]
fn penguin_init_s_commented_file_comes_back_byte_for_byte_after_an_add_and_a_remove() {
    let h = Home::new();
    std::fs::remove_file(h.home.join("config.toml")).unwrap();
    assert!(h.penguin(&["init"]).status.success());
    let starter = h.config();
    let out = h.penguin(&[
        "models",
        "add",
        "loc",
        "--protocol",
        "ollama",
        "--model",
        "qwen3:4b",
        "--default",
    ]);
    assert!(out.status.success(), "{}", said(&out));
    let added = h.config();
    assert!(added.contains("default_model = \"loc\""), "{added}");
    assert!(said(&h.penguin(&["models"])).contains("* loc"));
    let out = h.penguin(&["models", "remove", "loc"]);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(h.config(), starter);
}
