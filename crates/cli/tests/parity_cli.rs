//! Issue 29's smaller parity gaps end to end, through `penguin` and the stub model:
//! `[session] max_turns` and `approval`, `--approve`, `penguin fork`, `run_subagent`'s
//! `model` and `thinking_level`, and the editable system prompt.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::{messages, Reply};

struct Home {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

/// A data root whose `config.toml` names the stub at `url` (plus `extra`), and a workspace
/// holding `notes.txt`.
fn home(url: &str, extra: &str) -> Home {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "hello\n").unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n{extra}"
        ),
    )
    .unwrap();
    Home {
        _base: base,
        home,
        ws,
    }
}

fn penguin(h: &Home, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &h.home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env("NO_COLOR", "1")
        .current_dir(&h.ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `tool` message the request after a call carries.
fn tool_answer(request: &Value) -> String {
    let tool = messages(request, "tool");
    tool.last().expect("a tool answer")["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn call(name: &str, args: Value) -> Reply {
    stub_model::tool_call(name, &args.to_string())
}

#[test]
fn approve_deny_all_denies_without_asking_and_read_only_runs_reads() {
    let (url, requests) = stub_model::serve_script(vec![
        call("exec_command", json!({"cmd": "touch made"})),
        stub_model::text("done"),
    ]);
    let h = home(&url, "");
    let out = penguin(
        &h,
        &["run", "--sandbox", "off", "--approve", "deny-all", "go"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("denied"), "{stdout}");
    assert!(!h.ws.join("made").exists());
    // Nobody was asked, so nothing is said about asking.
    assert!(!stderr.contains("nobody to ask"), "{stderr}");
    assert_eq!(requests.all().len(), 2);

    // read-only from config.toml: a read runs unasked, though stdin has no answers.
    let (url, requests) = stub_model::serve_script(vec![
        call("read_file", json!({"path": "notes.txt"})),
        stub_model::text("done"),
    ]);
    let h = home(&url, "[session]\napproval = \"read-only\"\n");
    let out = penguin(&h, &["run", "--sandbox", "off", "go"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(tool_answer(&requests.all()[1]).contains("hello"));
    assert!(
        stderr.contains(
            "approval mode read-only: stdin is not a terminal, so there is nobody to ask"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("--approve allow-all, read-only or deny-all"),
        "{stderr}"
    );
}

#[test]
fn ask_without_a_terminal_says_there_is_nobody_to_ask_and_a_wrong_mode_is_refused() {
    let (url, _) = stub_model::serve_script(vec![
        call("exec_command", json!({"cmd": "touch made"})),
        stub_model::text("done"),
    ]);
    let h = home(&url, "");
    let out = penguin(&h, &["run", "--sandbox", "off", "--approve", "ask", "go"]);
    let (stdout, stderr) = text(&out);
    assert!(
        stderr.contains(
            "approval mode always-ask: stdin is not a terminal, so there is nobody to ask"
        ),
        "{stderr}"
    );
    assert!(stdout.contains("denied"), "{stdout}");
    assert!(!h.ws.join("made").exists());

    let out = penguin(&h, &["run", "--approve", "sometimes", "go"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("is not an approval mode"), "{stderr}");
    let h = home(&url, "[session]\napproval = \"maybe\"\n");
    let out = penguin(&h, &["run", "go"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("session.approval: \"maybe\" is not an approval mode"),
        "{stderr}"
    );
}

#[test]
fn max_turns_in_config_cuts_a_task() {
    let (url, requests) =
        stub_model::serve_script(vec![call("read_file", json!({"path": "notes.txt"}))]);
    let h = home(&url, "[session]\nmax_turns = 2\n");
    let out = penguin(&h, &["run", "--yes", "--sandbox", "off", "go"]);
    let (stdout, stderr) = text(&out);
    assert!(
        stdout.contains("[reached max turns (2); stopping]"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(requests.all().len(), 2);
}

#[test]
fn fork_copies_a_session_up_to_a_task_and_the_fork_resumes_from_there() {
    let (url, requests) = stub_model::serve_script(vec![
        stub_model::text("one"),
        stub_model::text("two"),
        stub_model::text("three"),
    ]);
    let h = home(&url, "");
    for prompt in ["first", "second"] {
        let out = penguin(&h, &["run", "--yes", prompt]);
        assert!(out.status.success(), "{:?}", text(&out));
    }
    // `run` makes a session each: continue the first so it holds two tasks.
    let out = penguin(&h, &["sessions", "--all"]);
    let (listing, _) = text(&out);
    assert!(listing.contains("first"), "{listing}");
    let out = penguin(&h, &["resume", "--last", "again"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let out = penguin(&h, &["fork", "--last", "--at", "1"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let fork_id = stdout.trim().to_owned();
    assert!(fork_id.starts_with("session-"), "{stdout}");
    assert!(stderr.contains("after its task 1"), "{stderr}");
    let source = stderr.split_whitespace().nth(2).unwrap().to_owned();
    // Now the newest session is the fork: name the source.
    let out = penguin(&h, &["fork", &source, "--at", "9"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("completed task(s); --at takes 1 to 2"),
        "{stderr}"
    );
    // The fork's context is the first task only.
    let before = requests.all().len();
    let out = penguin(&h, &["resume", &fork_id, "and now?"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let request = &requests.all()[before];
    let users: Vec<&str> = messages(request, "user")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(users, ["second", "and now?"], "{request:#}");
}

#[test]
fn run_subagent_takes_a_configured_model_and_a_thinking_level() {
    // The parent asks for an unknown model, then for `other` at a high level; the child on
    // `other` answers.
    let (url, parent) = stub_model::serve_script(vec![
        call("run_subagent", json!({"prompt": "help", "model": "gpt-9"})),
        call(
            "run_subagent",
            json!({"prompt": "help", "model": "other", "thinking_level": "high"}),
        ),
        stub_model::text("done"),
    ]);
    let (other_url, child) = stub_model::serve_script(vec![stub_model::text("child answer")]);
    let extra = format!(
        "[models.other]\nprotocol = \"openai-chat\"\nbase_url = \"{other_url}\"\nmodel = \"other-model\"\napi_key_env = \"STUB_KEY\"\n"
    );
    let h = home(&url, &extra);
    let out = penguin(&h, &["run", "--yes", "--sandbox", "off", "go"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let requests = parent.all();
    let schema = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "run_subagent")
        .unwrap()["function"]["parameters"]
        .clone();
    let model_doc = schema["properties"]["model"]["description"]
        .as_str()
        .unwrap();
    assert!(
        model_doc.contains("one of stub, other, demo"),
        "{model_doc}"
    );
    assert_eq!(
        schema["properties"]["thinking_level"]["enum"],
        json!(["low", "medium", "high", "xhigh", "max"])
    );
    assert_eq!(
        tool_answer(&requests[1]),
        "[run_subagent error: no model named \"gpt-9\"; it offers: stub, other, demo]"
    );
    assert!(tool_answer(&requests[2]).contains("child answer"));
    let child_request = &child.all()[0];
    assert_eq!(child_request["model"], "other-model");
    assert_eq!(
        child_request["reasoning_effort"], "high",
        "{child_request:#}"
    );
}

#[test]
fn the_system_prompt_template_in_the_data_root_is_used_and_printed() {
    let (url, requests) = stub_model::serve_script(vec![stub_model::text("ok")]);
    let h = home(&url, "");
    let out = penguin(&h, &["run", "--print-system-prompt"]);
    let (default, stderr) = text(&out);
    assert!(default.contains("# Environment"), "{default}");
    assert!(stderr.contains("the built-in layout"), "{stderr}");
    std::fs::write(
        h.home.join("system-prompt.md"),
        "You are terse.\nWorkspace: {{CWD}}\n{{TOOLS}}\n{{SKILLS}}{{MEMORY}}{{AGENTS_MD}}",
    )
    .unwrap();
    let out = penguin(&h, &["run", "--print-system-prompt"]);
    let (printed, stderr) = text(&out);
    assert!(stderr.contains("from the template"), "{stderr}");
    assert!(
        printed.starts_with(&format!(
            "You are terse.\nWorkspace: {}\n# Tools\n",
            h.ws.display()
        )),
        "{printed}"
    );
    assert!(!printed.contains("{{"), "{printed}");
    let out = penguin(&h, &["run", "--yes", "hi"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let system = messages(&requests.all()[0], "system")[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        system.starts_with("You are terse.\nWorkspace: "),
        "{system}"
    );
}
