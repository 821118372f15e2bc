//! Skills and memory end to end: `penguin skills install|list|remove`, a session whose model
//! reads a skill with `read_file` (pinned with a `[use_skills]` block), cannot change it with a
//! command, and saves a memory note with the file tools; the next session finds the note's
//! index line in its system prompt; `penguin memory list|show|forget`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::{messages, Reply};

fn call(id: &str, name: &str, args: Value) -> Reply {
    Reply::Stream(vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ])
}

fn penguin(home: &Path, ws: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args(args)
        .current_dir(ws)
        .env("PENGUIN_HOME", home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

fn system(request: &Value) -> String {
    messages(request, "system")[0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn tool_output(request: &Value, id: &str) -> String {
    messages(request, "tool")
        .into_iter()
        .find(|m| m["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no output of {id}: {request:#}"))["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn config(home: &Path, url: &str) {
    std::fs::write(
        home.join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n"),
    )
    .unwrap();
}

#[test]
fn a_session_reads_a_skill_saves_a_memory_and_the_next_one_sees_its_index() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws, src) = (root.join("home"), root.join("ws"), root.join("src/deploy"));
    for d in [&home, &ws, &src] {
        std::fs::create_dir_all(d).unwrap();
    }
    const SKILL: &str = "---\nname: deploy\ndescription: Ship the app to staging\nversion: 3\n---\n# Deploy\nRun make ship.\n";
    std::fs::write(src.join("SKILL.md"), SKILL).unwrap();
    std::fs::create_dir_all(src.join("broken-one")).unwrap();

    // Install and list (a broken frontmatter is said by name, not fatal).
    let out = ok(&penguin(
        &home,
        &ws,
        &["skills", "install", src.to_str().unwrap()],
    ));
    assert!(out.contains("installed deploy (v3)"), "{out}");
    let skill = home.join("skills/deploy/SKILL.md");
    assert_eq!(std::fs::read_to_string(&skill).unwrap(), SKILL);
    std::fs::create_dir_all(ws.join(".agents/skills/lint")).unwrap();
    std::fs::write(ws.join(".agents/skills/lint/SKILL.md"), "no frontmatter").unwrap();
    let listed = penguin(&home, &ws, &["skills", "list"]);
    let out = ok(&listed);
    assert!(
        out.contains("deploy  v3  user  Ship the app to staging"),
        "{out}"
    );
    assert!(out.contains("lint  v1  workspace"), "{out}");
    assert!(
        String::from_utf8_lossy(&listed.stderr).contains("skill lint: no frontmatter"),
        "{listed:?}"
    );
    let json: Value =
        serde_json::from_str(&ok(&penguin(&home, &ws, &["skills", "list", "--json"]))).unwrap();
    assert_eq!(json[0]["name"], "deploy");
    assert_eq!(json[0]["scope"], "user");

    // Session 1: read the skill, try to change it with a command, save a note and its index.
    let memory = home.join("memory/user");
    let note = memory.join("prefers-tabs.md");
    let (url, requests) = stub_model::serve_script(vec![
        call("c1", "read_file", json!({ "path": skill })),
        call(
            "c2",
            "exec_command",
            json!({ "cmd": format!("cat {0}; echo evil > {0}; echo x > {1}/MEMORY.md", skill.display(), memory.display()) }),
        ),
        call(
            "c3",
            "write_file",
            json!({ "path": note, "content": "---\nname: prefers-tabs\ndescription: the user indents with tabs\nupdated_at: 2026-01-02\n---\nTabs, always.\n" }),
        ),
        call(
            "c4",
            "write_file",
            json!({ "path": memory.join("MEMORY.md"), "content": "- [Prefers tabs](prefers-tabs.md) — indent with tabs\n" }),
        ),
        stub_model::text("done"),
    ]);
    config(&home, &url);
    let prompt = "[use_skills]\nskills: deploy\n[/use_skills]\n\nship it";
    ok(&penguin(&home, &ws, &["run", "--yes", prompt]));
    let all = requests.all();
    assert_eq!(all.len(), 5, "{all:#?}");
    let sys = system(&all[0]);
    assert!(sys.contains("# Skills"), "{sys}");
    assert!(
        sys.contains(&format!(
            "- `deploy` — Ship the app to staging ({})",
            skill.display()
        )),
        "{sys}"
    );
    assert!(
        sys.contains("- `lint` (.agents/skills/lint/SKILL.md)"),
        "{sys}"
    );
    // Nothing saved yet: the short section, where notes go and nothing of empty indexes.
    assert!(
        sys.contains("# Memory\nNothing is saved yet.") && !sys.contains("Index:"),
        "{sys}"
    );
    assert!(
        sys.contains(&format!(
            "`{}` for what holds wherever you work",
            memory.display()
        )),
        "{sys}"
    );
    assert!(
        stub_model::offered_tools(&all[0]).contains(&"memory_forget".to_owned()),
        "{:?}",
        stub_model::offered_tools(&all[0])
    );
    let user = messages(&all[0], "user");
    assert!(user.last().unwrap()["content"]
        .to_string()
        .contains("[use_skills]"));
    assert!(tool_output(&all[1], "c1").contains("Run make ship."));
    // The command reads the skill, but neither it nor memory changes.
    let out = tool_output(&all[2], "c2");
    assert!(out.contains("Run make ship."), "{out}");
    assert_eq!(std::fs::read_to_string(&skill).unwrap(), SKILL);
    assert!(tool_output(&all[3], "c3").contains("prefers-tabs.md"));
    assert!(note.is_file());

    // Session 2 sees the index, not the note's body.
    let (url, requests) = stub_model::serve_script(vec![stub_model::text("hello")]);
    config(&home, &url);
    ok(&penguin(&home, &ws, &["run", "--yes", "hi"]));
    let sys = system(&requests.all()[0]);
    assert!(
        sys.contains("Index:\n- [Prefers tabs](prefers-tabs.md) — indent with tabs\n"),
        "{sys}"
    );
    assert!(!sys.contains("Tabs, always."), "{sys}");

    // The CLI's view of memory.
    let out = ok(&penguin(&home, &ws, &["memory", "list"]));
    assert!(
        out.contains("user memory:\n  prefers-tabs  2026-01-02  the user indents with tabs"),
        "{out}"
    );
    let out = ok(&penguin(
        &home,
        &ws,
        &["memory", "show", "--user", "prefers-tabs"],
    ));
    assert!(out.contains("Tabs, always."), "{out}");
    let json: Value =
        serde_json::from_str(&ok(&penguin(&home, &ws, &["memory", "list", "--json"]))).unwrap();
    assert_eq!(json[0]["key"], "user");
    assert_eq!(json[1]["kind"], "workspace");
    assert_eq!(json[1]["workspace"], ws.display().to_string());
    let out = ok(&penguin(
        &home,
        &ws,
        &["memory", "forget", "--user", "prefers-tabs"],
    ));
    assert!(out.contains("1 index line dropped"), "{out}");
    assert!(!note.exists());
    assert_eq!(
        std::fs::read_to_string(memory.join("MEMORY.md")).unwrap(),
        ""
    );
    let gone = penguin(&home, &ws, &["memory", "show", "--user", "prefers-tabs"]);
    assert!(!gone.status.success());

    // Remove the skill.
    ok(&penguin(&home, &ws, &["skills", "remove", "deploy"]));
    assert!(!home.join("skills/deploy").exists());
    assert!(!penguin(&home, &ws, &["skills", "remove", "deploy"])
        .status
        .success());
}

#[test]
fn memory_edit_opens_the_editor_on_a_note_of_the_workspace() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    for d in [&home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_penguin"))
        .args(["memory", "edit", "build"])
        .current_dir(&ws)
        .env("PENGUIN_HOME", &home)
        .env_remove("VISUAL")
        .env("EDITOR", "sh -c 'echo \"- make build\" > \"$0\"'")
        .output()
        .unwrap();
    ok(&out);
    let out = ok(&penguin(&home, &ws, &["memory", "show", "build"]));
    assert_eq!(out, "- make build\n");
}
