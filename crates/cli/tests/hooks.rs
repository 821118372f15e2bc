//! Hooks end to end (docs/hooks.md): `penguin run` against a stub OpenAI-compatible model,
//! with `[[hooks.EVENT]]` tables in `config.toml` (or a workspace's `.penguin/hooks.toml`).
//! The hooks are Claude-Code-style shell scripts (stdin JSON, exit 2 or JSON on stdout),
//! written as such a script would be. Each test checks what the model received, the stream
//! (`--jsonl`, held to the stream validator by `penguin check-stream`), the Trace, and the
//! workspace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::{messages, Reply};

/// A penguin home with the stub model and `hooks`, a workspace, a temp dir and a directory
/// outside them all.
struct Setup {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    tmp: PathBuf,
    outside: PathBuf,
    requests: stub_model::Requests,
    model_config: String,
}

impl Setup {
    /// Replaces the hooks of `config.toml`.
    fn set_hooks(&self, hooks: &str) {
        let config = format!("{}\n\n{hooks}", self.model_config);
        std::fs::write(self.home.join("config.toml"), config).unwrap();
    }
}

fn setup(replies: Vec<Reply>, hooks: &str) -> Setup {
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
    let (url, requests) = stub_model::serve_script(replies);
    let model_config = format!(
        "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\""
    );
    let s = Setup {
        _base: base,
        home,
        ws,
        tmp,
        outside,
        requests,
        model_config,
    };
    s.set_hooks(hooks);
    s
}

/// One `penguin run`: what it printed and streamed.
struct Run {
    out: Output,
    stream: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<Value> {
        self.stream
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The stream's events of type `kind`.
    fn events(&self, kind: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|m| m["payload"]["type"] == kind)
            .collect()
    }
}

/// `penguin ARGS` (with `--sandbox MODE` unless `sandbox` is empty) for this setup.
fn penguin(s: &Setup, sandbox: &str, args: &[&str]) -> Output {
    let sandbox: &[&str] = match sandbox {
        "" => &[],
        mode => &["--sandbox", mode],
    };
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "the-secret-key")
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("NO_COLOR")
        .args(args)
        .args(sandbox)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `penguin run --yes --jsonl PROMPT` in the workspace; the stream is checked by
/// `penguin check-stream` (every ordering guarantee, hooks present).
fn run(s: &Setup, sandbox: &str, prompt: &str) -> Run {
    let ws = s.ws.display().to_string();
    let out = penguin(
        s,
        sandbox,
        &["run", "--yes", "--jsonl", "--workspace", &ws, prompt],
    );
    let stream = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let file = s.tmp.join("stream.jsonl");
    std::fs::write(&file, &stream).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .arg("check-stream")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}\n{stream}\n{stderr}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    Run {
        out,
        stream,
        stderr,
    }
}

/// Every record of the session's trace files.
fn trace(s: &Setup) -> Vec<Value> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, found);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                found.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&s.home, &mut files);
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The user-role texts of a request (prompt, harness notices).
fn user_texts(request: &Value) -> Vec<String> {
    messages(request, "user")
        .into_iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn exec(cmd: &str) -> Reply {
    stub_model::tool_call("exec_command", &json!({ "cmd": cmd }).to_string())
}

/// A Claude Code PreToolUse script: refuses `rm -rf` with exit 2 and the reason on stderr.
const NO_RM: &str = r#"input=$(cat); case "$input" in *'rm -rf'*) echo "rm -rf is not allowed here; remove files one by one" >&2; exit 2;; esac; exit 0"#;

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[test]
fn a_pre_tool_use_hook_denies_rm_rf_at_the_approval_position_with_its_reason() {
    let hooks = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"Bash\"\ncommand = {}\ntimeout_ms = 10000\n",
        toml_string(NO_RM)
    );
    let replies = vec![exec("rm -rf build"), stub_model::text("ok")];
    let s = setup([replies.clone(), replies].concat(), &hooks);
    std::fs::create_dir(s.ws.join("build")).unwrap();
    let r = run(&s, "off", "clean up");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(s.ws.join("build").exists(), "the command never ran");
    let name = format!("hook:{NO_RM}");
    let decision = &r.events("approval_decision")[0]["payload"];
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["decided_by"], name.as_str());
    assert_eq!(
        decision["reason"],
        "rm -rf is not allowed here; remove files one by one"
    );
    let denial =
        format!("Tool call denied by {name}: rm -rf is not allowed here; remove files one by one");
    // The model reads the reason.
    let requests = s.requests.all();
    assert_eq!(requests.len(), 2);
    let tool = messages(&requests[1], "tool");
    assert_eq!(tool[0]["content"], denial.as_str());
    // The trace holds the decision where the stream has it: right after its call.
    let records = trace(&s);
    let at = records
        .iter()
        .position(|m| m["payload"]["type"] == "approval_decision")
        .unwrap();
    assert_eq!(
        records[at - 1]["payload"]["type"],
        "tool_call",
        "{:?}",
        records[at - 1]
    );
    assert_eq!(records[at]["payload"]["decided_by"], name.as_str());
    assert_eq!(records[at + 1]["payload"]["output"], denial.as_str());
    // Rendered: the session line counts the hooks, the denial names the hook and its reason.
    let ws = s.ws.display().to_string();
    let out = penguin(&s, "off", &["run", "--yes", "--workspace", &ws, "again"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stderr.contains("· 1 hook"), "{stderr}");
    assert!(
        stdout.contains("✗ exec_command denied by hook:")
            && stdout.contains(": rm -rf is not allowed here"),
        "{stdout}"
    );
}

#[test]
fn a_pre_tool_use_hook_rewrites_the_arguments_and_the_call_runs_as_rewritten() {
    let rewrite = r#"cat >/dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "permissionDecisionReason": "made safe", "updatedInput": {"command": "echo rewritten > out.txt"}}}'"#;
    let hooks = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"exec_command\"\ncommand_prefix = \"echo\"\ncommand = {}\n",
        toml_string(rewrite)
    );
    let s = setup(
        vec![exec("echo original > out.txt"), stub_model::text("ok")],
        &hooks,
    );
    let r = run(&s, "off", "write it");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert_eq!(
        std::fs::read_to_string(s.ws.join("out.txt")).unwrap(),
        "rewritten\n"
    );
    let decision = &r.events("approval_decision")[0]["payload"];
    assert_eq!(decision["decision"], "allow");
    assert_eq!(
        decision["updated_arguments"],
        r#"{"cmd":"echo rewritten > out.txt"}"#
    );
    // The model's own call is what the stream keeps.
    let call = &r.events("tool_call")[0]["payload"];
    assert_eq!(call["arguments"], r#"{"cmd":"echo original > out.txt"}"#);
    assert_eq!(decision["decided_by"], format!("hook:{rewrite}").as_str());
}

#[test]
fn post_tool_use_formats_after_write_file_and_adds_context_the_model_reads() {
    // A Claude Code PostToolUse formatter: reads tool_input.file_path, "formats" the file,
    // tells the model.
    let fmt = r#"f=$(sed -n 's/.*"file_path":"\([^"]*\)".*/\1/p'); tr a-z A-Z < "$f" > "$f.tmp" && mv "$f.tmp" "$f"; printf '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "formatted %s"}}' "$f""#;
    let hooks = format!(
        "[[hooks.post_tool_use]]\nmatcher = \"Write|Edit\"\ncommand = {}\n",
        toml_string(fmt)
    );
    let args = json!({"path": "a.txt", "content": "hello\n"}).to_string();
    let replies = vec![
        stub_model::tool_call("write_file", &args),
        stub_model::text("ok"),
    ];
    let s = setup([replies.clone(), replies].concat(), &hooks);
    let r = run(&s, "off", "write a.txt");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a.txt")).unwrap(),
        "HELLO\n"
    );
    let requests = s.requests.all();
    let texts = user_texts(&requests[1]).join("\n");
    assert!(texts.contains("[hook_context]"), "{texts}");
    assert!(texts.contains("formatted a.txt"), "{texts}");
    // Delivered as a harness notice: streamed and written, after the call's output.
    let notice = r
        .lines()
        .into_iter()
        .position(|m| {
            m["payload"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("[hook_context]"))
        })
        .unwrap();
    let output = r
        .lines()
        .into_iter()
        .position(|m| m["payload"]["type"] == "tool_call_output")
        .unwrap();
    assert!(output < notice);
    assert_eq!(r.lines()[notice]["payload"]["sender"], "harness");
    // Rendered: what the hook said, as a line after the call's.
    let ws = s.ws.display().to_string();
    let out = penguin(&s, "off", &["run", "--yes", "--workspace", &ws, "again"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (call, said) = (
        stdout.find("✓ write_file").unwrap(),
        stdout.find("↳ hook context: formatted a.txt").unwrap(),
    );
    assert!(call < said, "{stdout}");
}

#[test]
fn a_post_tool_use_block_marks_the_output_failed_and_tells_the_model_why() {
    let hooks = "[[hooks.post_tool_use]]\ncommand = \"echo '{\\\"decision\\\": \\\"block\\\", \\\"reason\\\": \\\"tests fail\\\"}'\"\n";
    let s = setup(vec![exec("echo hi"), stub_model::text("ok")], hooks);
    let r = run(&s, "off", "go");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    let out = r
        .lines()
        .into_iter()
        .find(|m| m["payload"]["type"] == "tool_call_output")
        .unwrap();
    assert_eq!(out["payload"]["stop_reason"], "failed", "{out}");
    let texts = user_texts(&s.requests.all()[1]).join("\n");
    assert!(
        texts.contains("[hook_feedback]") && texts.contains("tests fail"),
        "{texts}"
    );
}

#[test]
fn user_prompt_submit_adds_the_git_branch_and_can_block_a_prompt() {
    // Claude Code's "add the branch to every prompt": plain stdout is context.
    let hooks = r#"
[[hooks.user_prompt_submit]]
command = "echo \"current git branch: $(git -C \"$CLAUDE_PROJECT_DIR\" branch --show-current)\""

[[hooks.user_prompt_submit]]
command = "if grep -q secret; then echo 'prompts must not mention secrets' >&2; exit 2; fi"
"#;
    let s = setup(vec![stub_model::text("ok")], hooks);
    let git = Command::new("git")
        .args(["init", "-q", "-b", "feature-x"])
        .current_dir(&s.ws)
        .status()
        .unwrap();
    assert!(git.success());
    let r = run(&s, "off", "what branch?");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    let first = &s.requests.all()[0];
    let texts = user_texts(first).join("\n");
    // The prompt first, then the hook's context.
    let (prompt, branch) = (
        texts.find("what branch?").unwrap(),
        texts.find("current git branch: feature-x").unwrap(),
    );
    assert!(prompt < branch, "{texts}");
    // Model-visible only: the context is in the input the Trace holds, never streamed.
    assert!(!r.stream.contains("current git branch"));
    assert!(trace(&s).iter().any(|m| m["payload"]["text"]
        .as_str()
        .is_some_and(|t| t.contains("feature-x"))));

    let r = run(&s, "off", "print the secret");
    assert!(!r.out.status.success());
    assert_eq!(s.requests.all().len(), 1, "the model never saw it");
    let abort = &r.events("abort")[0]["payload"]["reason"];
    assert!(
        abort
            .as_str()
            .unwrap()
            .contains("prompts must not mention secrets"),
        "{abort}"
    );
    assert!(!trace(&s).iter().any(|m| m["payload"]["text"]
        .as_str()
        .is_some_and(|t| t.contains("print the secret"))));
}

#[test]
fn a_stop_hook_keeps_the_task_going_until_a_file_exists() {
    let hooks = r#"
[[hooks.stop]]
command = "cat > /dev/null; [ -f done.txt ] || echo '{\"decision\": \"block\", \"reason\": \"done.txt does not exist yet\"}'"
"#;
    let args = json!({"path": "done.txt", "content": "x"}).to_string();
    let s = setup(
        vec![
            stub_model::text("finished?"),
            stub_model::tool_call("write_file", &args),
            stub_model::text("now finished"),
        ],
        hooks,
    );
    let r = run(&s, "off", "make done.txt");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    let requests = s.requests.all();
    assert_eq!(requests.len(), 3, "{}", r.stream);
    let texts = user_texts(&requests[1]).join("\n");
    assert!(
        texts.contains("[hook_stop]") && texts.contains("done.txt does not exist yet"),
        "{texts}"
    );
    assert!(s.ws.join("done.txt").exists());
    // The reason is streamed and written as a harness notice.
    assert!(r.stream.contains("[hook_stop]"));
}

#[test]
fn a_stop_hook_that_always_blocks_is_bounded() {
    let hooks = r#"
[hooks]
max_stop_continuations = 2

[[hooks.stop]]
command = "echo '{\"decision\": \"block\", \"reason\": \"again\"}'"
"#;
    let s = setup(vec![stub_model::text("ok")], hooks);
    let r = run(&s, "off", "go");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert_eq!(
        s.requests.all().len(),
        3,
        "the first run and two continuations"
    );
    assert!(r.stderr.contains("max_stop_continuations"), "{}", r.stderr);
}

#[test]
fn session_start_adds_context_once_and_session_end_runs_as_penguin_exits() {
    let hooks = r#"
[[hooks.session_start]]
command = "cat > /dev/null; echo '{\"hookSpecificOutput\": {\"hookEventName\": \"SessionStart\", \"additionalContext\": \"the build is make\"}}'"

[[hooks.session_end]]
command = "cat > ended.json"
"#;
    let s = setup(vec![stub_model::text("ok")], hooks);
    let r = run(&s, "workspace-write", "hi");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    let texts = user_texts(&s.requests.all()[0]).join("\n");
    assert!(texts.contains("the build is make"), "{texts}");
    let ended: Value =
        serde_json::from_str(&std::fs::read_to_string(s.ws.join("ended.json")).unwrap()).unwrap();
    assert_eq!(ended["hook_event_name"], "SessionEnd");
    assert_eq!(ended["reason"], "exit");
    assert_eq!(ended["cwd"], s.ws.display().to_string());
    assert!(ended["session_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
}

#[test]
fn a_pre_tool_use_hook_that_hangs_crashes_or_floods_fails_closed_and_says_so_once() {
    for (name, hook, why) in [
        ("hangs", "sleep 30", "timed out after 300 ms"),
        ("crashes", "kill -SEGV $$", "killed by signal 11"),
        (
            "exits 1",
            "echo broken >&2; exit 1",
            "exited with code 1: broken",
        ),
        (
            "prints 10 MB",
            "yes '{' | head -c 10485760",
            "answered what is not a hook answer",
        ),
    ] {
        let hooks = format!(
            "[[hooks.pre_tool_use]]\ncommand = {}\ntimeout_ms = 300\n",
            toml_string(hook)
        );
        let s = setup(
            vec![
                exec("echo ran > ran.txt"),
                exec("echo ran > ran.txt"),
                stub_model::text("ok"),
            ],
            &hooks,
        );
        let r = run(&s, "off", "go");
        assert!(r.out.status.success(), "{name}: {}\n{}", r.stream, r.stderr);
        assert!(!s.ws.join("ran.txt").exists(), "{name}: denied");
        let decisions = r.events("approval_decision");
        assert_eq!(decisions.len(), 2, "{name}");
        for d in &decisions {
            assert_eq!(d["payload"]["decision"], "deny", "{name}");
            let reason = d["payload"]["reason"].as_str().unwrap();
            assert!(reason.contains(why), "{name}: {reason}");
        }
        assert_eq!(
            r.stderr.matches("failed:").count(),
            1,
            "{name}: said once per session: {}",
            r.stderr
        );
        assert!(r.stderr.contains("fails closed"), "{name}: {}", r.stderr);
    }
}

#[test]
fn other_events_fail_open() {
    let hooks = "[[hooks.post_tool_use]]\ncommand = \"kill -SEGV $$\"\n\n[[hooks.user_prompt_submit]]\ncommand = \"sleep 30\"\ntimeout_ms = 200\n";
    let s = setup(
        vec![exec("echo ran > ran.txt"), stub_model::text("ok")],
        hooks,
    );
    let r = run(&s, "off", "go");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(s.ws.join("ran.txt").exists());
    assert!(r.stderr.contains("fails open"), "{}", r.stderr);
    assert_eq!(r.stderr.matches("failed:").count(), 2, "{}", r.stderr);
}

#[test]
fn a_hook_is_confined_like_a_command_and_gets_no_secret() {
    if !matches!(
        penguin::tools::sandbox::Landlock::probe(),
        penguin::tools::sandbox::Landlock::Abi(n) if n >= 2
    ) {
        assert!(std::env::var_os("CI").is_none(), "needs Landlock");
        eprintln!("SKIPPED: needs Landlock ABI 2");
        return;
    }
    let s = setup(vec![stub_model::text("ok")], "");
    let escape = s.outside.join("escaped.txt");
    s.set_hooks(&format!(
        "[[hooks.session_start]]\ncommand = {}\n",
        toml_string(&format!(
            "echo x > {}; echo \"key=${{STUB_KEY:-none}}\" > inside.txt",
            escape.display()
        ))
    ));
    let r = run(&s, "workspace-write", "hi");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    // The model's key is in penguin's environment, never in a hook's.
    assert_eq!(
        std::fs::read_to_string(s.ws.join("inside.txt")).unwrap(),
        "key=none\n"
    );
    assert!(!escape.exists(), "a hook writes only where a command may");
    // The user's own config may let a hook out; then it writes where it likes.
    s.set_hooks(&format!(
        "[[hooks.session_start]]\nsandbox = false\ncommand = {}\n",
        toml_string(&format!("echo x > {}", escape.display()))
    ));
    let r = run(&s, "workspace-write", "again");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(escape.exists());
}

#[test]
fn an_untrusted_workspace_hook_runs_only_once_approved() {
    let s = setup(vec![stub_model::text("ok")], "");
    std::fs::create_dir(s.ws.join(".penguin")).unwrap();
    std::fs::write(
        s.ws.join(".penguin/hooks.toml"),
        "[[hooks.session_start]]\ncommand = \"touch ran-by-the-repository\"\nsandbox = false\n",
    )
    .unwrap();
    let r = run(&s, "off", "hi");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(
        !s.ws.join("ran-by-the-repository").exists(),
        "not run before trust"
    );
    assert!(r.stderr.contains("penguin hooks trust"), "{}", r.stderr);

    let ws = s.ws.display().to_string();
    let list = penguin(&s, "", &["hooks", "list", "--workspace", &ws]);
    assert!(String::from_utf8_lossy(&list.stdout).contains("no hooks"));
    let trusted = penguin(&s, "", &["hooks", "trust", "--yes", "--workspace", &ws]);
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let list = penguin(&s, "", &["hooks", "list", "--workspace", &ws]);
    let listed = String::from_utf8_lossy(&list.stdout);
    // A workspace's hook is sandboxed whatever it says.
    assert!(
        listed.contains("session_start `touch ran-by-the-repository`")
            && listed.contains("sandboxed · .penguin/hooks.toml"),
        "{listed}"
    );

    let r = run(&s, "off", "again");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(
        s.ws.join("ran-by-the-repository").exists(),
        "run once trusted"
    );
    // A changed file is a new content: not trusted again.
    std::fs::write(
        s.ws.join(".penguin/hooks.toml"),
        "[[hooks.session_start]]\ncommand = \"touch changed\"\n",
    )
    .unwrap();
    let r = run(&s, "off", "once more");
    assert!(!s.ws.join("changed").exists());
    assert!(r.stderr.contains("not trusted"), "{}", r.stderr);
}

#[test]
fn hooks_test_feeds_a_sample_payload_and_prints_each_answer() {
    let hooks = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = {}\n\n[[hooks.user_prompt_submit]]\ncommand = \"echo more context\"\n",
        toml_string(NO_RM)
    );
    let s = setup(vec![stub_model::text("ok")], &hooks);
    let ws = s.ws.display().to_string();
    let out = penguin(
        &s,
        "off",
        &[
            "hooks",
            "test",
            "pre_tool_use",
            "--input",
            r#"{"cmd":"rm -rf /"}"#,
            "--workspace",
            &ws,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("block: rm -rf is not allowed here"),
        "{stdout}"
    );
    let out = penguin(
        &s,
        "off",
        &["hooks", "test", "UserPromptSubmit", "--workspace", &ws],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("context: more context"));
    let out = penguin(&s, "off", &["hooks", "test", "nope", "--workspace", &ws]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown event"));
}

#[test]
fn a_subagent_stop_hook_keeps_the_child_going_until_its_work_is_done() {
    let hooks = r#"
[[hooks.subagent_stop]]
command = "cat > subagent_stop.json; [ -f tests-ran ] || { echo 'the child did not run the tests' >&2; exit 2; }"
"#;
    // The parent launches a child (same stub model); the child answers, is sent back to work
    // by the hook, runs the tests, answers again; then the parent ends.
    let s = setup(
        vec![
            stub_model::tool_call("run_subagent", &json!({"prompt": "help"}).to_string()),
            stub_model::text("child done"),
            exec("touch tests-ran"),
            stub_model::text("tests ran"),
            stub_model::text("ok"),
        ],
        hooks,
    );
    let r = run(&s, "off", "delegate");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(s.ws.join("tests-ran").exists(), "the child went on");
    let requests = s.requests.all();
    assert_eq!(requests.len(), 5, "{}", r.stream);
    // The child's next input is the hook's reason.
    let texts = user_texts(&requests[2]).join("\n");
    assert!(
        texts.contains("[hook_stop]") && texts.contains("the child did not run the tests"),
        "{texts}"
    );
    let payload: Value =
        serde_json::from_str(&std::fs::read_to_string(s.ws.join("subagent_stop.json")).unwrap())
            .unwrap();
    assert_eq!(payload["hook_event_name"], "SubagentStop");
    assert_eq!(payload["stop_hook_active"], true);
    assert_eq!(payload["subagent_output"], "tests ran", "{payload}");
    // The parent gets the child's whole answer once its work is done.
    let tool = messages(&requests[4], "tool");
    let output = tool[0]["content"].as_str().unwrap();
    assert!(
        output.contains("child done") && output.contains("tests ran"),
        "{output}"
    );
}

#[test]
fn a_subagent_stop_hook_that_always_blocks_is_bounded() {
    let hooks = r#"
[hooks]
max_stop_continuations = 1

[[hooks.subagent_stop]]
command = "echo '{\"decision\": \"block\", \"reason\": \"again\"}'"
"#;
    let s = setup(
        vec![
            stub_model::tool_call("run_subagent", &json!({"prompt": "help"}).to_string()),
            stub_model::text("child"),
            stub_model::text("child again"),
            stub_model::text("ok"),
        ],
        hooks,
    );
    let r = run(&s, "off", "delegate");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert_eq!(
        s.requests.all().len(),
        4,
        "the child's run and one continuation, then the parent's second request"
    );
    assert!(r.stderr.contains("max_stop_continuations"), "{}", r.stderr);
}

#[test]
fn a_subagents_own_calls_meet_the_parents_pre_tool_use_hooks() {
    let hooks = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"Bash\"\ncommand = {}\n",
        toml_string(NO_RM)
    );
    let s = setup(
        vec![
            stub_model::tool_call("run_subagent", &json!({"prompt": "clean up"}).to_string()),
            exec("rm -rf build"),
            stub_model::text("could not"),
            stub_model::text("ok"),
        ],
        &hooks,
    );
    std::fs::create_dir(s.ws.join("build")).unwrap();
    let r = run(&s, "off", "delegate");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(s.ws.join("build").exists(), "the child's rm -rf never ran");
    let name = format!("hook:{NO_RM}");
    let requests = s.requests.all();
    assert_eq!(requests.len(), 4, "{}", r.stream);
    // The child's model reads the hook's reason.
    let tool = messages(&requests[2], "tool");
    assert_eq!(
        tool[0]["content"],
        format!("Tool call denied by {name}: rm -rf is not allowed here; remove files one by one")
    );
    // The child's decision names the hook, on the parent's stream under the child's origin.
    let decision = r
        .events("approval_decision")
        .into_iter()
        .find(|d| d["origin"].as_array().is_some_and(|o| !o.is_empty()))
        .expect("the child's approval_decision");
    assert_eq!(decision["payload"]["decision"], "deny");
    assert_eq!(decision["payload"]["decided_by"], name.as_str());
}

#[test]
fn a_hooks_ask_reaches_a_person_even_under_yes_and_is_denied_where_nobody_can_answer() {
    let ask = r#"cat >/dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "check this one"}}'"#;
    let hooks = format!("[[hooks.pre_tool_use]]\ncommand = {}\n", toml_string(ask));
    let replies = vec![exec("echo ran > ran.txt"), stub_model::text("ok")];
    let s = setup([replies.clone(), replies].concat(), &hooks);
    // `--yes` without a terminal: nobody can answer, so the call is denied, saying so.
    let r = run(&s, "off", "go");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert!(!s.ws.join("ran.txt").exists(), "not allowed by --yes");
    let decision = &r.events("approval_decision")[0]["payload"];
    assert_eq!(decision["decision"], "deny");
    assert_eq!(decision["decided_by"], format!("hook:{ask}").as_str());
    let reason = decision["reason"].as_str().unwrap();
    assert!(
        reason.contains("the hook asked") && reason.contains("nobody can answer"),
        "{reason}"
    );
    // Where someone answers (here, stdin's lines), the person decides.
    let mut child = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args([
            "run",
            "--approve",
            "always-ask",
            "--sandbox",
            "off",
            "--workspace",
        ])
        .arg(&s.ws)
        .arg("go")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(child.stdin.take().unwrap(), "y").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("ran.txt")).unwrap(),
        "ran\n",
        "the person allowed it"
    );
}

#[test]
fn pre_compact_runs_before_a_compaction_asked_for_in_chat() {
    let hooks = r#"
[[hooks.pre_compact]]
command = "cat > pre_compact.json"
"#;
    let s = setup(
        vec![
            stub_model::text("hello to you"),
            stub_model::text("[summary]we said hello[/summary]"),
        ],
        hooks,
    );
    let mut chat = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args([
            "chat",
            "--jsonl",
            "--yes",
            "--sandbox",
            "off",
            "--workspace",
        ])
        .arg(&s.ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(chat.stdout.take().unwrap()));
    let mut until = |needle: &str| loop {
        let line = lines.next().expect("chat ended early").unwrap();
        if line.contains(needle) {
            return;
        }
    };
    use std::io::Write;
    writeln!(stdin, "hello").unwrap();
    until("\"request_end\"");
    writeln!(stdin, "/compact").unwrap();
    until("\"compaction_end\"");
    drop(stdin);
    assert!(chat.wait().unwrap().success());
    let payload: Value =
        serde_json::from_str(&std::fs::read_to_string(s.ws.join("pre_compact.json")).unwrap())
            .unwrap();
    assert_eq!(payload["hook_event_name"], "PreCompact");
    assert_eq!(payload["trigger"], "manual");
    assert_eq!(
        s.requests.all().len(),
        2,
        "the conversation, then its summary"
    );
}

#[test]
fn an_interrupt_while_a_prompt_hook_runs_ends_the_run_at_once_and_keeps_the_prompt() {
    let s = setup(vec![stub_model::text("ok")], "");
    let ready = s.tmp.join("ready");
    assert!(Command::new("mkfifo")
        .arg(&ready)
        .status()
        .unwrap()
        .success());
    s.set_hooks(&format!(
        "[[hooks.user_prompt_submit]]\ncommand = {}\n",
        toml_string(&format!("echo > {}; sleep 30", ready.display()))
    ));
    let started = std::time::Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args(["run", "--yes", "--jsonl", "--sandbox", "off", "--workspace"])
        .arg(&s.ws)
        .arg("a prompt to keep")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The hook runs once it writes to the FIFO; then the user presses Ctrl-C.
    std::fs::read(&ready).unwrap();
    let interrupt = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupt.success());
    let out = child.wait_with_output().unwrap();
    let stream = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stream}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "not the hook's 30 s"
    );
    assert!(stream.contains("\"abort\""), "{stream}");
    assert!(s.requests.all().is_empty(), "the model was never asked");
    // The prompt is written, and kept for the next run as any interrupted prompt is.
    assert!(trace(&s)
        .iter()
        .any(|m| m["payload"]["text"] == "a prompt to keep"));
}

#[test]
fn pre_compact_runs_before_an_automatic_compaction_too() {
    // One turn is the context's limit: the engine compacts on its own after the first.
    let hooks = r#"
[compaction]
max_session_turns = 1

[[hooks.pre_compact]]
command = "cat > pre_compact.json"
"#;
    let s = setup(
        vec![
            stub_model::text("hello to you"),
            stub_model::text("[summary]we said hello[/summary]"),
        ],
        hooks,
    );
    let r = run(&s, "off", "hello");
    assert!(r.out.status.success(), "{}\n{}", r.stream, r.stderr);
    assert_eq!(r.events("compaction_begin").len(), 1, "{}", r.stream);
    assert_eq!(
        r.events("compaction_begin")[0]["payload"]["reason"],
        "turns"
    );
    let payload: Value =
        serde_json::from_str(&std::fs::read_to_string(s.ws.join("pre_compact.json")).unwrap())
            .unwrap();
    assert_eq!(payload["hook_event_name"], "PreCompact");
    assert_eq!(payload["trigger"], "auto");
}

/// `curl` with the server's token: the answer's body.
fn api(url: &str, token: &str, method: &str, path: &str, body: &str) -> Value {
    let out = Command::new("curl")
        .args([
            "-sf",
            "-X",
            method,
            "-H",
            &format!("Authorization: Bearer {token}"),
        ])
        .args(["-H", "Content-Type: application/json", "--data", body])
        .arg(format!("{url}{path}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{method} {path}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[test]
fn session_end_runs_when_penguin_serve_unloads_deletes_or_shuts_down_a_session() {
    let s = setup(vec![stub_model::text("ok")], "");
    // The unload's end runs beside the request that caused it: the hook says when it ran.
    let unloaded = s.ws.join("unloaded.fifo");
    assert!(Command::new("mkfifo")
        .arg(&unloaded)
        .status()
        .unwrap()
        .success());
    let hook = format!(
        r#"r=$(cat); printf '%s\n' "$r" >> ended.jsonl; case "$r" in *'"reason":"unload"'*) echo > {};; esac"#,
        unloaded.display()
    );
    s.set_hooks(&format!(
        "[[hooks.session_end]]\ncommand = {}\n",
        toml_string(&hook)
    ));
    let token = "t".repeat(40);
    let mut server = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args([
            "serve",
            "--port",
            "0",
            "--token",
            &token,
            "--sandbox",
            "off",
        ])
        .args(["--idle-sessions", "0", "--workspace"])
        .arg(&s.ws)
        .current_dir(&s.ws)
        .env("PENGUIN_HOME", &s.home)
        .env("STUB_KEY", "k")
        .env("TMPDIR", &s.tmp)
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(server.stdout.take().unwrap()));
    let url = lines
        .find_map(|l| {
            l.unwrap()
                .strip_prefix("penguin server listening on ")
                .map(str::to_owned)
        })
        .expect("the server says where it listens");
    let ended = || -> Vec<Value> {
        std::fs::read_to_string(s.ws.join("ended.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let first = api(&url, &token, "POST", "/api/sessions", "{}")["session"]["id"].clone();
    // No idle session is kept: making a second one unloads the first.
    let (tx, rx) = std::sync::mpsc::channel();
    let fifo = unloaded.clone();
    std::thread::spawn(move || tx.send(std::fs::read(fifo).is_ok()));
    let second = api(&url, &token, "POST", "/api/sessions", "{}")["session"]["id"].clone();
    assert_eq!(
        rx.recv_timeout(std::time::Duration::from_secs(60)),
        Ok(true),
        "the unloaded session's end ran"
    );
    let said = ended();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["hook_event_name"], "SessionEnd");
    assert_eq!(said[0]["session_id"], first);
    assert_eq!(said[0]["reason"], "unload");
    // A deletion answers once the session's end ran.
    let path = format!("/api/sessions/{}", second.as_str().unwrap());
    api(&url, &token, "DELETE", &path, "");
    let said = ended();
    assert_eq!(said.len(), 2, "{said:?}");
    assert_eq!(said[1]["session_id"], second);
    assert_eq!(said[1]["reason"], "delete");
    // At shutdown, every session still loaded ends, once.
    let third = api(&url, &token, "POST", "/api/sessions", "{}")["session"]["id"].clone();
    let interrupt = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupt.success());
    assert!(server.wait().unwrap().success());
    let said = ended();
    assert_eq!(said.len(), 3, "{said:?}");
    assert_eq!(said[2]["session_id"], third);
    assert_eq!(said[2]["reason"], "exit");
}
