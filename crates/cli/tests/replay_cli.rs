//! `penguin replay`: a real session (the stub model, the real tools, an allowed command, a
//! denied one, two tasks) replays to the same Trace; a record the engine would now write
//! differently is named; a crash mid-stream is told, not guessed at.

use std::path::Path;

#[path = "support/penguin.rs"]
mod run;
use run::{penguin, said};

#[path = "support/stub_model.rs"]
mod stub_model;

/// The trace of the session a person started (a subagent's has `"source":"subagent"`).
fn trace_file(home: &Path) -> std::path::PathBuf {
    let traces = home.join("default/agents/penguin/traces");
    let day = std::fs::read_dir(&traces)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_dir(day)
        .unwrap()
        .flatten()
        .map(|f| f.path())
        .find(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text
                .lines()
                .next()
                .unwrap_or_default()
                .contains("\"source\":\"subagent\"")
        })
        .unwrap()
}

/// `penguin replay --last --check` (keeping the scenario in `out`, when given) says the last
/// session replayed to the same Trace; `context` is shown when it does not.
fn replays_the_same(home: &Path, ws: &Path, out: Option<&Path>, context: &str) {
    let mut args = vec!["replay", "--last", "--check"];
    if let Some(out) = out {
        args.extend(["--out", out.to_str().unwrap()]);
    }
    let replayed = penguin(home, ws, &args);
    let told = said(&replayed);
    assert!(replayed.status.success(), "{told}\n{context}");
    assert!(told.contains("the same as the original"), "{told}");
}

#[test]
fn a_real_session_replays_to_the_same_trace_and_a_changed_record_is_named() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let call = |cmd: &str| {
        stub_model::tool_call(
            "exec_command",
            &serde_json::json!({ "cmd": cmd }).to_string(),
        )
    };
    let (url, _) = stub_model::serve_script(vec![
        stub_model::with_usage(call("echo made > a.txt && cat a.txt")),
        stub_model::with_usage(stub_model::text("Made it.")),
        stub_model::with_usage(call("rm a.txt")),
        stub_model::with_usage(stub_model::text("It was not removed.")),
    ]);
    run::stub_config(home.path(), &url, "");
    let run = penguin(
        home.path(),
        ws.path(),
        &["run", "--yes", "--sandbox", "off", "make a"],
    );
    assert!(run.status.success(), "{}", said(&run));
    let resume = penguin(
        home.path(),
        ws.path(),
        &[
            "resume",
            "--last",
            "--approve",
            "deny-all",
            "--sandbox",
            "off",
            "remove it",
        ],
    );
    assert!(resume.status.success(), "{}", said(&resume));

    let scenario = home.path().join("kept.json");
    replays_the_same(home.path(), ws.path(), Some(&scenario), "");
    // The kept scenario runs as any scenario does.
    let kept = penguin(
        home.path(),
        ws.path(),
        &["scenario", "run", scenario.to_str().unwrap()],
    );
    assert!(kept.status.success(), "{}", said(&kept));
    assert!(String::from_utf8_lossy(&kept.stdout).contains("It was not removed."));

    // The trace says the engine once answered the denied call otherwise: today's engine does
    // not, and the replay names that record.
    let file = trace_file(home.path());
    let original = std::fs::read_to_string(&file).unwrap();
    assert!(original.contains("Tool call denied by user."));
    std::fs::write(
        &file,
        original.replace("Tool call denied by user.", "Denied, long ago."),
    )
    .unwrap();
    let out = penguin(home.path(), ws.path(), &["replay", "--last", "--check"]);
    let told = said(&out);
    assert!(!out.status.success(), "{told}");
    let record = told
        .split("record ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_default()
        .to_owned();
    assert!(
        told.contains("differs") && told.contains("Denied, long ago."),
        "{told}"
    );
    assert!(told.contains("Tool call denied by user."), "{told}");
    assert!(record.parse::<usize>().is_ok_and(|n| n > 1), "{told}");

    // A crash mid-stream: a request that never ended.
    std::fs::write(&file, format!("{original}{{\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"request_begin\"}}}}\n")).unwrap();
    let out = penguin(home.path(), ws.path(), &["replay", "--last", "--check"]);
    let told = said(&out);
    assert!(!out.status.success(), "{told}");
    assert!(told.contains("cannot be replayed exactly"), "{told}");
}

/// The latest `session_meta` of every session's trace under `home`, oldest session first:
/// `(session_id, meta)` (a resume on another model records a new one).
fn metas(home: &Path) -> Vec<(String, serde_json::Value)> {
    let traces = home.join("default/agents/penguin/traces");
    let mut out = std::collections::BTreeMap::new();
    for day in std::fs::read_dir(&traces).unwrap().flatten() {
        for file in std::fs::read_dir(day.path()).unwrap().flatten() {
            let text = std::fs::read_to_string(file.path()).unwrap();
            for line in text.lines() {
                let record: serde_json::Value = serde_json::from_str(line).unwrap();
                if record["type"] == "session_meta" {
                    let meta = record["payload"].clone();
                    out.insert(meta["session_id"].as_str().unwrap().to_owned(), meta);
                }
            }
        }
    }
    out.into_iter().collect()
}

#[test]
fn a_task_runs_again_live_on_another_model_after_the_recorded_history() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let read = stub_model::tool_call("read_file", r#"{"path": "notes.txt"}"#);
    let (first_url, first) = stub_model::serve_script(vec![
        stub_model::with_usage(read),
        stub_model::with_usage(stub_model::text("The notes say hello.")),
        stub_model::with_usage(stub_model::text("Answer two, from the first model.")),
    ]);
    let (other_url, other) = stub_model::serve_script(vec![
        stub_model::with_usage(stub_model::text("Answer two, from the other model.")),
        stub_model::with_usage(stub_model::text("Answer one, reworded.")),
    ]);
    std::fs::write(ws.path().join("notes.txt"), "hello\n").unwrap();
    let model = |name: &str, url: &str| {
        format!("[models.{name}]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"{name}-model\"\napi_key_env = \"PENGUIN_STUB_KEY\"\n")
    };
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "default_model = \"first\"\n{}{}",
            model("first", &first_url),
            model("other", &other_url)
        ),
    )
    .unwrap();
    let ok = |out: std::process::Output| {
        assert!(out.status.success(), "{}", said(&out));
        out
    };
    ok(penguin(
        home.path(),
        ws.path(),
        &["run", "-y", "read the notes"],
    ));
    ok(penguin(
        home.path(),
        ws.path(),
        &["resume", "--last", "second question"],
    ));
    let original = metas(home.path())[0].0.clone();
    // The notes change: the recorded read is history, never read again.
    std::fs::write(ws.path().join("notes.txt"), "changed\n").unwrap();

    let out = ok(penguin(
        home.path(),
        ws.path(),
        &["replay", &original, "--from", "2", "--model", "other", "-y"],
    ));
    let told = said(&out);
    assert!(told.contains("Answer two, from the other model."), "{told}");
    assert!(
        told.contains(&format!("runs task 2 of {original} again")),
        "{told}"
    );
    let asked = other.all();
    assert_eq!(asked.len(), 1, "one request, to the other model");
    let body = asked[0].to_string();
    assert!(body.contains("read the notes") && body.contains("The notes say hello."));
    assert!(
        body.contains("1\\thello") && !body.contains("\\tchanged"),
        "{body}"
    );
    let users = stub_model::messages(&asked[0], "user");
    assert_eq!(
        users.last().unwrap()["content"],
        "second question",
        "{body}"
    );
    assert_eq!(first.all().len(), 3, "the first model is not asked again");

    // From task 1 with another prompt: no history, the same workspace, linked all the same.
    let out = ok(penguin(
        home.path(),
        tempfile::tempdir().unwrap().path(),
        &[
            "replay",
            &original,
            "--from",
            "1",
            "--model",
            "other",
            "--prompt",
            "reword it",
            "-y",
        ],
    ));
    assert!(
        said(&out).contains("Answer one, reworded."),
        "{}",
        said(&out)
    );
    let asked = other.all();
    let users = stub_model::messages(&asked[1], "user");
    assert_eq!(users.len(), 1, "{}", asked[1]);
    assert_eq!(users[0]["content"], "reword it");

    let metas = metas(home.path());
    let replays: Vec<_> = metas.iter().filter(|(id, _)| *id != original).collect();
    assert_eq!(replays.len(), 2, "{metas:?}");
    for (_, meta) in replays {
        assert_eq!(meta["forked_from"], original.as_str(), "{meta}");
        assert_eq!(meta["model_id"], "other-model", "{meta}");
        assert_eq!(
            meta["workspace"],
            ws.path().canonicalize().unwrap().to_str().unwrap(),
            "{meta}"
        );
    }

    let out = penguin(
        home.path(),
        ws.path(),
        &["replay", &original, "--from", "3"],
    );
    assert!(!out.status.success());
    assert!(
        said(&out).contains("no task after its task 2"),
        "{}",
        said(&out)
    );
}

#[test]
fn a_session_with_a_subagent_and_a_background_command_replays_to_the_same_trace() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let (url, requests) = stub_model::serve_script(vec![
        // The session asks a subagent; the subagent answers; the session goes on.
        stub_model::with_usage(stub_model::tool_call(
            "run_subagent",
            r#"{"prompt": "Say three."}"#,
        )),
        stub_model::with_usage(stub_model::text("three")),
        stub_model::with_usage(stub_model::text("The subagent said three.")),
        // A background command, whose end arrives as a notice.
        stub_model::with_usage(stub_model::tool_call(
            "exec_command",
            r#"{"cmd": "echo done > b.txt", "run_in_background": true}"#,
        )),
        stub_model::with_usage(stub_model::text("Started it.")),
        stub_model::with_usage(stub_model::text("It finished.")),
    ]);

    run::stub_config(home.path(), &url, "");
    let run = penguin(
        home.path(),
        ws.path(),
        &["run", "-y", "--sandbox", "off", "ask a subagent"],
    );
    assert!(run.status.success(), "{}", said(&run));
    // A chat, so the command's end reaches the model whenever it comes (mid-task, or as a
    // task of its own once the chat is idle); it stays open until the model has answered it.
    let mut chat = run::command(
        home.path(),
        ws.path(),
        &["resume", "--last", "-y", "--sandbox", "off"],
    )
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let mut input = chat.stdin.take().unwrap();
    use std::io::Write as _;
    input.write_all(b"run it in the background\n").unwrap();
    // Once a request carries the notice, it was taken: the chat finishes that task before
    // it reads the end of its input.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !requests
        .all()
        .iter()
        .any(|r| r.to_string().contains("[background_task_done]"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the notice never reached the model"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(input);
    assert!(chat.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("b.txt")).unwrap(),
        "done\n"
    );
    let trace = std::fs::read_to_string(trace_file(home.path())).unwrap();
    for kept in [
        "\"type\":\"subagent\"",
        "\"output\":\"three\"",
        "[background_task_done]",
    ] {
        assert!(trace.contains(kept), "{kept}: {trace}");
    }
    let kept = home.path().join("kept.json");
    replays_the_same(home.path(), ws.path(), Some(&kept), &trace);
}

#[test]
fn a_hooks_decisions_replay_as_the_hook_made_them() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let (url, _) = stub_model::serve_script(vec![
        stub_model::with_usage(stub_model::tool_call(
            "exec_command",
            r#"{"cmd": "rm -rf build"}"#,
        )),
        stub_model::with_usage(stub_model::text("The hook said no.")),
    ]);
    // A hook of the user's own that refuses every command, with its reason on stderr.
    run::stub_config(home.path(), &url, "\n[[hooks.pre_tool_use]]\nmatcher = \"exec_command\"\ncommand = \"echo 'no commands here' >&2; exit 2\"\n");
    let run = penguin(
        home.path(),
        ws.path(),
        &["run", "-y", "--sandbox", "off", "clean up"],
    );
    assert!(run.status.success(), "{}", said(&run));
    let trace = std::fs::read_to_string(trace_file(home.path())).unwrap();
    assert!(
        trace.contains("\"decided_by\":\"hook:") && trace.contains("no commands here"),
        "{trace}"
    );
    replays_the_same(home.path(), ws.path(), None, &trace);
}

/// A session whose context was compacted mid-task (the size a request reached set it off) and
/// a goal run the model completed through a real command replay to the same Trace: the
/// compaction's settings and the goal's file come back from what their records say.
#[test]
fn a_compacted_session_and_a_goal_run_replay_to_the_same_trace() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let call = |cmd: &str| {
        stub_model::tool_call(
            "exec_command",
            &serde_json::json!({ "cmd": cmd }).to_string(),
        )
    };
    let (url, _) = stub_model::serve_script(vec![
        // The task's first request reaches 1,100 tokens, over the 1,000 configured.
        stub_model::with_usage(call("echo made > a.txt")),
        // The compaction's request.
        stub_model::text("[summary]a.txt was made.[/summary]"),
        stub_model::text("Made it."),
        // The goal's one round sets its status through a command.
        call("sed -i 's/^status: active$/status: complete/' .penguin/scratchpad/*/GOAL.yaml"),
        stub_model::text("Complete."),
    ]);
    run::stub_config(
        home.path(),
        &url,
        "[compaction]\nmax_context_length = 1000\nprompt = \"Summarize, briefly.\"\n",
    );
    let run = penguin(
        home.path(),
        ws.path(),
        &["run", "--yes", "--sandbox", "off", "make a"],
    );
    assert!(run.status.success(), "{}", said(&run));
    // The compaction started a second file: the session's files, whichever is listed first.
    let day = trace_file(home.path()).parent().unwrap().to_path_buf();
    let trace: String = std::fs::read_dir(day)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert!(trace.contains("\"compaction_end\""), "{trace}");
    replays_the_same(home.path(), ws.path(), None, &trace);

    let goal = penguin(
        home.path(),
        ws.path(),
        &[
            "run",
            "--yes",
            "--sandbox",
            "off",
            "--goal",
            "make it complete",
        ],
    );
    assert!(goal.status.success(), "{}", said(&goal));
    let scenario = home.path().join("goal.json");
    replays_the_same(home.path(), ws.path(), Some(&scenario), "");
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&scenario).unwrap()).unwrap();
    let goal = &kept["runs"][0]["goal"];
    assert!(
        goal["file"].as_str().unwrap().ends_with("GOAL.yaml"),
        "{goal}"
    );
    assert!(
        goal["writes"].to_string().contains("status: complete"),
        "{goal}"
    );
}
