//! The workspace tools end to end, one test per tool: `penguin run` against a stub
//! OpenAI-compatible model that calls the tool, then answers `done`. Each test checks the
//! call the model made, the answer the tool gave as the model gets it in the next request (the
//! `tool` message), what the person sees on stdout, and what changed in the workspace.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::{messages, offered_tools};

/// One `penguin run` of a scripted call.
struct Run {
    _base: tempfile::TempDir,
    ws: PathBuf,
    stdout: String,
    stderr: String,
    /// The requests the model received: the prompt's, then the one after the call.
    requests: Vec<Value>,
}

impl Run {
    /// The tools offered in the first request.
    fn offered(&self) -> Vec<String> {
        offered_tools(&self.requests[0])
    }

    /// The call as the next request repeats it: name and arguments.
    fn call(&self) -> (String, Value) {
        let assistant = messages(&self.requests[1], "assistant");
        let call = &assistant.last().expect("the call's turn")["tool_calls"][0];
        assert_eq!(call["id"], "call_1", "{call}");
        let args = call["function"]["arguments"].as_str().unwrap();
        (
            call["function"]["name"].as_str().unwrap().to_owned(),
            serde_json::from_str(args).unwrap(),
        )
    }

    /// The tool's answer as the next request carries it.
    fn answer(&self) -> String {
        let tool = messages(&self.requests[1], "tool");
        assert_eq!(tool.len(), 1, "{:#}", self.requests[1]);
        assert_eq!(tool[0]["tool_call_id"], "call_1");
        tool[0]["content"].as_str().unwrap().to_owned()
    }

    fn file(&self, path: &str) -> String {
        std::fs::read_to_string(self.ws.join(path)).unwrap()
    }
}

/// `penguin run` in a workspace holding `files`, with a model (`[models.stub]` plus
/// `model_extra`, then `config_extra`) that calls `tool` with `args` once, then says `done`.
fn run_with(
    files: &[(&str, &[u8])],
    model_extra: &str,
    config_extra: &str,
    tool: &str,
    args: Value,
) -> Run {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&ws).unwrap();
    for (path, content) in files {
        let path = ws.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let (url, requests) = stub_model::serve_script(vec![
        stub_model::tool_call(tool, &args.to_string()),
        stub_model::text("done"),
    ]);
    std::fs::write(
        home.join("config.toml"),
        format!(
            "default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n{model_extra}\n{config_extra}"
        ),
    )
    .unwrap();
    let out = penguin(&home, &ws, "use the tool");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let requests = requests.all();
    assert_eq!(requests.len(), 2, "{stdout}\n{stderr}");
    Run {
        _base: base,
        ws,
        stdout,
        stderr,
        requests,
    }
}

fn run(files: &[(&str, &[u8])], tool: &str, args: Value) -> Run {
    run_with(files, "", "", tool, args)
}

/// `penguin run` in a pseudo-terminal (util-linux `script`), with `NO_COLOR` set or not: what
/// the terminal received, escape sequences included.
fn penguin_in_a_terminal(home: &Path, ws: &Path, no_color: bool) -> String {
    let cmdline = format!(
        "stty cols 120 rows 40; exec {} run --yes --sandbox off --workspace {} 'edit it'",
        env!("CARGO_BIN_EXE_penguin"),
        ws.display()
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qfec", &cmdline, "/dev/null"])
        .env("PENGUIN_HOME", home)
        .env("TERM", "xterm-256color")
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("NO_COLOR");
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    // The terminal's input stays open (and empty) until the run is over.
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("util-linux `script` is required for the pseudo-terminal test");
    let stdin = child.stdin.take();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn penguin(home: &Path, ws: &Path, prompt: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .env("PENGUIN_HOME", home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("NO_COLOR")
        .args(["run", "--yes", "--sandbox", "off", "--workspace"])
        .arg(ws)
        .arg(prompt)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A 2×1 PNG (a red and a green pixel).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x7b, 0x40, 0xe8,
    0xdd, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0x00, 0x04,
    0xff, 0x01, 0x07, 0x00, 0x01, 0xff, 0xe2, 0x23, 0x9e, 0x59, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4zwAE/wEHAAH/4iOeWQAAAABJRU5ErkJggg==";

#[test]
fn read_file() {
    let args = json!({"path": "src/lib.rs", "offset": 2, "limit": 1});
    let r = run(
        &[("src/lib.rs", b"fn a() {}\nfn b() {}\nfn c() {}\n")],
        "read_file",
        args.clone(),
    );
    assert_eq!(r.call(), ("read_file".into(), args.clone()));
    assert_eq!(
        r.answer(),
        "     2\tfn b() {}\n… 1 more lines (of 3); call read_file with offset=3 to read on"
    );
    assert_eq!(
        r.stdout,
        format!("⚙ read_file {args}\n  ✓ read_file:      2\tfn b() {{}} (+1 lines)\ndone\n")
    );
}

#[test]
fn edit_file() {
    let args = json!({"path": "f.txt", "old_string": "b", "new_string": "B"});
    let r = run(&[("f.txt", b"a\nb\nc\n")], "edit_file", args.clone());
    // An OpenAI-compatible chat model edits with the classic tools.
    let offered = r.offered();
    assert!(offered.contains(&"edit_file".to_owned()), "{offered:?}");
    assert!(offered.contains(&"write_file".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"apply_patch".to_owned()), "{offered:?}");
    assert_eq!(r.call(), ("edit_file".into(), args.clone()));
    let diff = "--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c";
    assert_eq!(
        r.answer(),
        format!("Edited f.txt: replaced 1 occurrence\n{diff}")
    );
    // The diff is shown under the call, uncoloured off a terminal.
    assert_eq!(
        r.stdout,
        format!("⚙ edit_file {args}\n  ✓ edit_file: Edited f.txt: replaced 1 occurrence\n    --- a/f.txt\n    +++ b/f.txt\n    @@ -1,3 +1,3 @@\n     a\n    -b\n    +B\n     c\ndone\n")
    );
    assert_eq!(r.file("f.txt"), "a\nB\nc\n");
}

#[test]
fn write_file() {
    let args = json!({"path": "notes/todo.md", "content": "one\ntwo\n"});
    let r = run(&[], "write_file", args.clone());
    assert_eq!(r.call(), ("write_file".into(), args));
    assert_eq!(
        r.answer(),
        "Created notes/todo.md (2 lines)\n--- /dev/null\n+++ b/notes/todo.md\n@@ -0,0 +1,2 @@\n+one\n+two"
    );
    assert!(
        r.stdout.contains(
            "  ✓ write_file: Created notes/todo.md (2 lines)\n    --- /dev/null\n    +++ b/notes/todo.md\n    @@ -0,0 +1,2 @@\n    +one\n    +two\ndone\n"
        ),
        "{}",
        r.stdout
    );
    assert_eq!(r.file("notes/todo.md"), "one\ntwo\n");
}

#[test]
fn apply_patch() {
    let patch = "*** Begin Patch\n*** Update File: src/app.py\n@@ def f():\n-    return 1\n+    return 10\n*** Add File: README.md\n+# App\n*** End Patch";
    let args = json!({"input": patch});
    let r = run_with(
        &[("src/app.py", b"def f():\n    return 1\n")],
        "",
        "[tools]\nedit = \"apply_patch\"\n",
        "apply_patch",
        args.clone(),
    );
    // `[tools] edit` chose the patch tool alone.
    let offered = r.offered();
    assert!(offered.contains(&"apply_patch".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"edit_file".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"write_file".to_owned()), "{offered:?}");
    assert_eq!(r.call(), ("apply_patch".into(), args));
    let answer = "Success. Updated the following files:\nM src/app.py\nA README.md\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 10\n--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+# App";
    assert_eq!(r.answer(), answer);
    let shown: String = answer
        .lines()
        .skip(1)
        .map(|l| format!("    {l}\n"))
        .collect();
    assert!(
        r.stdout.contains(&format!(
            "  ✓ apply_patch: Success. Updated the following files:\n{shown}done\n"
        )),
        "{}",
        r.stdout
    );
    assert_eq!(r.file("src/app.py"), "def f():\n    return 10\n");
    assert_eq!(r.file("README.md"), "# App\n");
}

#[test]
fn grep_files() {
    let args = json!({"pattern": "fn \\w+\\(", "glob": "*.rs"});
    let r = run(
        &[
            ("src/a.rs", b"fn main() {}\n// fn not_me\n"),
            ("src/b.rs", b"pub fn helper() -> u8 { 1 }\n"),
            ("notes.txt", b"fn elsewhere()\n"),
        ],
        "grep_files",
        args.clone(),
    );
    assert_eq!(r.call(), ("grep_files".into(), args.clone()));
    assert_eq!(
        r.answer(),
        "src/a.rs:1:fn main() {}\nsrc/b.rs:1:pub fn helper() -> u8 { 1 }"
    );
    assert_eq!(
        r.stdout,
        format!(
            "⚙ grep_files {args}\n  ✓ grep_files: src/a.rs:1:fn main() {{}} (+1 lines)\ndone\n"
        )
    );
}

#[test]
fn list_files() {
    let args = json!({"pattern": "*.rs"});
    let r = run(
        &[
            ("src/main.rs", b"" as &[u8]),
            ("src/util/mod.rs", b""),
            ("Cargo.toml", b""),
        ],
        "list_files",
        args.clone(),
    );
    assert_eq!(r.call(), ("list_files".into(), args));
    assert_eq!(
        r.answer(),
        "src/main.rs\nsrc/util/mod.rs\n[2 files matching \"*.rs\" under the workspace root]"
    );
    assert_eq!(
        r.stdout,
        "⚙ list_files {\"pattern\":\"*.rs\"}\n  ✓ list_files: src/main.rs (+2 lines)\ndone\n"
    );
}

#[test]
fn update_plan() {
    let args = json!({
        "explanation": "Starting.",
        "plan": [
            {"step": "Read the code", "status": "completed"},
            {"step": "Write the fix", "status": "in_progress"},
            {"step": "Run the tests", "status": "pending"}
        ]
    });
    let r = run(&[], "update_plan", args.clone());
    assert_eq!(r.call(), ("update_plan".into(), args));
    assert_eq!(
        r.answer(),
        "Plan updated\nStarting.\n[x] Read the code\n[~] Write the fix\n[ ] Run the tests"
    );
    // A checklist, not the call's JSON.
    assert_eq!(
        r.stdout,
        "⚙ update_plan Starting. (3 steps, 1 done)\n  ✓ update_plan: Plan updated\n    Starting.\n    [x] Read the code\n    [~] Write the fix\n    [ ] Run the tests\ndone\n"
    );
}

#[test]
fn read_image() {
    let args = json!({"path": "img/dot.png"});
    let r = run(&[("img/dot.png", PNG)], "read_image", args.clone());
    assert!(r.offered().contains(&"read_image".to_owned()));
    assert_eq!(r.call(), ("read_image".into(), args));
    let text = "Image img/dot.png: PNG, 2×1 pixels, 70 bytes (attached to this result)";
    assert_eq!(r.answer(), text);
    // The image itself rides in the user turn after the tool message.
    let user = messages(&r.requests[1], "user");
    let image = &user.last().unwrap()["content"][0];
    assert_eq!(image["type"], "image_url", "{image}");
    assert_eq!(
        image["image_url"]["url"],
        format!("data:image/png;base64,{PNG_BASE64}")
    );
    assert_eq!(
        r.stdout,
        format!(
            "⚙ read_image {{\"path\":\"img/dot.png\"}}\n  ✓ read_image: {text} [image attached]\ndone\n"
        )
    );
}

#[test]
fn read_image_is_not_offered_to_a_model_without_vision() {
    let r = run_with(
        &[("img/dot.png", PNG)],
        "vision = false",
        "",
        "read_image",
        json!({"path": "img/dot.png"}),
    );
    let offered = r.offered();
    assert!(!offered.contains(&"read_image".to_owned()), "{offered:?}");
    assert!(offered.contains(&"read_file".to_owned()), "{offered:?}");
    assert_eq!(r.answer(), "Unknown tool: read_image");
    assert!(messages(&r.requests[1], "user")
        .iter()
        .all(|m| !m["content"].to_string().contains("image_url")));
    assert!(r.stderr.contains("session "), "{}", r.stderr);
}

#[test]
fn a_diff_is_coloured_on_a_terminal_unless_no_color_is_set() {
    let base = tempfile::tempdir().unwrap();
    let (home, ws) = (base.path().join("home"), base.path().join("ws"));
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let args = json!({"path": "f.txt", "old_string": "b", "new_string": "B"}).to_string();
    let url = stub_model::serve(move |body| match stub_model::has_tool_output(body) {
        true => stub_model::text("done"),
        false => stub_model::tool_call("edit_file", &args),
    });
    std::fs::write(
        home.join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n"),
    )
    .unwrap();

    std::fs::write(ws.join("f.txt"), "a\nb\nc\n").unwrap();
    let coloured = penguin_in_a_terminal(&home, &ws, false);
    for line in [
        "\x1b[1m--- a/f.txt\x1b[0m",
        "\x1b[1m+++ b/f.txt\x1b[0m",
        "\x1b[36m@@ -1,3 +1,3 @@\x1b[0m",
        "\x1b[31m-b\x1b[0m",
        "\x1b[32m+B\x1b[0m",
    ] {
        assert!(coloured.contains(line), "{line:?} in {coloured:?}");
    }

    std::fs::write(ws.join("f.txt"), "a\nb\nc\n").unwrap();
    let plain = penguin_in_a_terminal(&home, &ws, true);
    assert!(plain.contains("    -b\r\n    +B\r\n"), "{plain:?}");
    // (The status line below the output keeps its dim spinner: it is not output.)
    for code in ["\x1b[1m", "\x1b[31m", "\x1b[32m", "\x1b[36m"] {
        assert!(!plain.contains(code), "{code:?} in {plain:?}");
    }
}
