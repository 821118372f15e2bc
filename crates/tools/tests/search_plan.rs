//! grep_files, list_files and update_plan against a temporary workspace: answers, bounds,
//! .gitignore and confinement, and every error text.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod ws;

use insta::assert_snapshot;
use penguin_omni_protocol::StopReason;
use penguin_tools::{Plan, SandboxMode, SandboxRequest, StepStatus, ToolsConfig};
use serde_json::json;
use ws::Ws;

fn tree() -> Ws {
    let ws = Ws::new();
    ws.put(".gitignore", "target/\n*.log\n");
    ws.put("src/main.rs", "fn main() {\n    helper();\n}\n");
    ws.put("src/util/helper.rs", "pub fn helper() {}\n// TODO: more\n");
    ws.put("README.md", "# Demo\nCall helper() first.\n");
    ws.put("target/debug/out.rs", "fn helper() {}\n");
    ws.put("run.log", "helper ran\n");
    ws.put(".github/ci.yml", "run: helper\n");
    ws.put(".git/config", "helper = yes\n");
    ws.put("blob.bin", b"helper\0\x01");
    ws
}

#[tokio::test]
async fn grep_files_finds_lines_honouring_gitignore() {
    let ws = tree();
    let grep = |args| ws.call("grep_files", args);
    assert_snapshot!("grep_all", grep(json!({"pattern": "helper"})).await.shown());
    assert_snapshot!(
        "grep_glob_and_path",
        grep(json!({"pattern": "fn \\w+", "path": "src", "glob": "*.rs"}))
            .await
            .shown()
    );
    assert_snapshot!(
        "grep_glob_with_a_slash",
        grep(json!({"pattern": "fn", "glob": "src/*.rs"}))
            .await
            .shown()
    );
    assert_snapshot!(
        "grep_case_insensitive",
        grep(json!({"pattern": "todo|demo", "case_insensitive": true}))
            .await
            .shown()
    );
    assert_snapshot!(
        "grep_one_file",
        grep(json!({"pattern": "helper", "path": "README.md"}))
            .await
            .shown()
    );
    assert_snapshot!(
        "grep_no_match",
        grep(json!({"pattern": "nowhere"})).await.shown()
    );
    assert_snapshot!(
        "grep_bounded",
        grep(json!({"pattern": "e", "max_results": 2}))
            .await
            .shown()
    );
    for (name, args) in [
        ("grep_bad_regex", json!({"pattern": "fn("})),
        ("grep_empty_pattern", json!({"pattern": ""})),
        ("grep_bad_glob", json!({"pattern": "x", "glob": "a[b"})),
        ("grep_missing_path", json!({"pattern": "x", "path": "scr"})),
        ("grep_outside", json!({"pattern": "x", "path": ".."})),
    ] {
        let answer = grep(args).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
}

#[tokio::test]
async fn list_files_lists_by_path_honouring_gitignore() {
    let ws = tree();
    let list = |args| ws.call("list_files", args);
    assert_snapshot!("list_all", list(json!({})).await.shown());
    assert_snapshot!(
        "list_by_name",
        list(json!({"pattern": "*.rs"})).await.shown()
    );
    assert_snapshot!(
        "list_by_path",
        list(json!({"pattern": "**/*.rs", "path": "src"}))
            .await
            .shown()
    );
    assert_snapshot!(
        "list_bounded",
        list(json!({"max_results": 2})).await.shown()
    );
    assert_snapshot!(
        "list_nothing",
        list(json!({"pattern": "*.py"})).await.shown()
    );
    for (name, args) in [
        ("list_a_file", json!({"path": "README.md"})),
        ("list_missing", json!({"path": "nope"})),
        ("list_outside", json!({"path": "/"})),
    ] {
        let answer = list(args).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
}

#[tokio::test]
async fn searches_skip_penguins_protected_paths() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let data = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("token"), "secret-token\n").unwrap();
    std::fs::write(root.join("a.txt"), "secret-token? no\n").unwrap();
    let request = SandboxRequest {
        mode: Some(SandboxMode::Off),
        protected: vec![data],
        ..SandboxRequest::default()
    };
    let sandbox = penguin_tools::Sandbox::resolve(&request).expect("sandbox");
    let config = ToolsConfig {
        sandbox,
        ..ToolsConfig::default()
    };
    let tools = penguin_tools::BuiltinTools::new(&root, config).unwrap();
    let ws = Ws::with_tools(dir, tools);
    let out = ws
        .call("grep_files", json!({"pattern": "secret"}))
        .await
        .text;
    assert_eq!(out, "a.txt:1:secret-token? no");
    let out = ws.call("list_files", json!({})).await.text;
    assert_eq!(out, "a.txt\n[1 file under the workspace root]");
    let answer = ws
        .call("grep_files", json!({"pattern": "x", "path": "data"}))
        .await;
    assert!(
        answer.text.contains("penguin's own state"),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn update_plan_keeps_the_latest_plan_and_renders_a_checklist() {
    let ws = Ws::new();
    assert_eq!(ws.tools.plan(), None);
    let args = json!({"explanation": "Starting.", "plan": [
        {"step": "Read the code", "status": "completed"},
        {"step": "Write the fix", "status": "in_progress"},
        {"step": "Run the tests", "status": "pending"}
    ]});
    let answer = ws.call("update_plan", args.clone()).await;
    assert_snapshot!("plan_updated", answer.shown());
    let plan = ws.tools.plan().expect("a plan");
    assert_eq!(plan, Plan::from_arguments(args).unwrap());
    assert_eq!(plan.plan[1].status, StepStatus::InProgress);
    assert_snapshot!("plan_json", serde_json::to_string_pretty(&plan).unwrap());
    // Clones share it; a failed update keeps the last good plan.
    let clone = ws.tools.clone();
    for (name, args) in [
        (
            "plan_two_in_progress",
            json!({"plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]}),
        ),
        (
            "plan_bad_status",
            json!({"plan": [{"step": "a", "status": "done"}]}),
        ),
        (
            "plan_empty_step",
            json!({"plan": [{"step": "  ", "status": "pending"}]}),
        ),
        ("plan_missing", json!({"explanation": "x"})),
        (
            "plan_too_many_steps",
            json!({"plan": vec![json!({"step": "s", "status": "pending"}); 51]}),
        ),
        (
            "plan_step_too_long",
            json!({"plan": [{"step": "x".repeat(501), "status": "pending"}]}),
        ),
    ] {
        let answer = ws.call("update_plan", args).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
    assert_eq!(clone.plan(), Some(plan));
    let answer = ws.call("update_plan", json!({"plan": []})).await;
    assert_snapshot!("plan_cleared", answer.shown());
    ws.tools.restore_plan(None);
    assert_eq!(clone.plan(), None);
}
