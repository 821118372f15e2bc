//! The built-in tools against a real temporary workspace: outputs, the protocol §2.16 stream
//! discipline, limits, process-tree cleanup and path confinement.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

use penguin_engine::{CancellationToken, Environment, Permission, ToolCallRequest};
use penguin_omni_protocol::{build, ModelPayload, OmniMessage, StopReason, StreamEventType};
use penguin_tools::{BuiltinTool, BuiltinTools, Sandbox, ToolsConfig, ARCHIVE_DIR};
use serde_json::{json, Value};

const ID: &str = "call_7";

/// For the tests that watch a command's processes from outside by the pids it wrote: under
/// the default sandbox's PID namespace `$$` and `$!` are the namespace's numbers, not this
/// process's (the sandbox's tests hold what it confines).
fn unsandboxed() -> ToolsConfig {
    ToolsConfig {
        sandbox: Sandbox::off(),
        ..ToolsConfig::default()
    }
}

fn workspace(config: ToolsConfig) -> (tempfile::TempDir, BuiltinTools) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tools = BuiltinTools::new(dir.path(), config).expect("workspace");
    (dir, tools)
}

async fn call_raw(
    tools: &BuiltinTools,
    name: &str,
    arguments: &str,
    cancel: CancellationToken,
) -> Vec<OmniMessage> {
    let request = ToolCallRequest {
        call: build::tool_call(name, arguments, ID, StopReason::Completed, None),
        cancel,
        approver: None,
        thinking_level: None,
    };
    let mut sink = Vec::new();
    tools.execute(request, &mut sink).await;
    sink
}

/// Runs one call and checks its discipline; returns the complete output and stop reason.
async fn call(tools: &BuiltinTools, name: &str, args: Value) -> (String, StopReason) {
    let msgs = call_raw(tools, name, &args.to_string(), CancellationToken::new()).await;
    check(&msgs)
}

/// start → delta* → stop → exactly one complete output, all for [`ID`]; the deltas
/// concatenate to the non-empty complete output and the stop fragment carries its reason.
fn check(msgs: &[OmniMessage]) -> (String, StopReason) {
    assert!(msgs.len() >= 3, "too few messages: {msgs:?}");
    let partial = |m: &OmniMessage| match m.model() {
        Some(ModelPayload::PartialToolCallOutput(p)) => {
            assert_eq!(p.tool_call_id, ID);
            p.clone()
        }
        other => panic!("expected partial_tool_call_output, got {other:?}"),
    };
    assert_eq!(partial(&msgs[0]).event_type, StreamEventType::Start);
    let (last, body) = msgs.split_last().unwrap();
    let (stop, deltas) = body.split_last().unwrap();
    let stop = partial(stop);
    assert_eq!(stop.event_type, StreamEventType::Stop);
    let streamed: String = deltas[1..]
        .iter()
        .map(|m| {
            let p = partial(m);
            assert_eq!(p.event_type, StreamEventType::Delta);
            p.output
        })
        .collect();
    let Some(ModelPayload::ToolCallOutput(done)) = last.model() else {
        panic!("expected the complete tool_call_output last, got {last:?}");
    };
    assert_eq!(done.tool_call_id, ID);
    assert!(!done.output.is_empty(), "the output is never empty");
    assert_eq!(
        streamed, done.output,
        "deltas must concatenate to the output"
    );
    assert_eq!(stop.stop_reason, done.stop_reason);
    (done.output.clone(), done.stop_reason.expect("stop_reason"))
}

/// Polls until `cond` holds, failing the test after `limit`.
async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Gone, or a zombie waiting for its (new) parent to reap it: either way no longer running.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

fn read_pid(dir: &Path, name: &str) -> Option<u32> {
    std::fs::read_to_string(dir.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[tokio::test]
async fn exec_streams_output_and_completes() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let msgs = call_raw(
        &tools,
        "exec_command",
        &json!({"cmd": "echo hello; echo oops >&2"}).to_string(),
        CancellationToken::new(),
    )
    .await;
    let (out, stop) = check(&msgs);
    assert_eq!(stop, StopReason::Completed);
    assert!(out.contains("hello\n") && out.contains("oops\n"), "{out:?}");
    assert_eq!(out.len(), "hello\noops\n".len(), "no notes: {out:?}");
}

#[tokio::test]
async fn exec_runs_in_the_workspace() {
    let (dir, tools) = workspace(ToolsConfig::default());
    let (out, _) = call(&tools, "exec_command", json!({"cmd": "pwd"})).await;
    let root = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(out.trim_end(), root.to_str().unwrap());
}

#[tokio::test]
async fn exec_non_zero_exit_is_failed_with_an_exit_code_note() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let (out, stop) = call(&tools, "exec_command", json!({"cmd": "echo x; exit 3"})).await;
    assert_eq!(out, "x\n\n[exit code: 3]");
    assert_eq!(stop, StopReason::Failed);

    let (out, stop) = call(&tools, "exec_command", json!({"cmd": "exit 4"})).await;
    assert_eq!((out.as_str(), stop), ("[exit code: 4]", StopReason::Failed));
}

#[tokio::test]
async fn exec_without_output_says_so() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let (out, stop) = call(&tools, "exec_command", json!({"cmd": "true"})).await;
    assert_eq!((out.as_str(), stop), ("[no output]", StopReason::Completed));
}

#[tokio::test]
async fn exec_output_is_capped_and_archived() {
    let (dir, tools) = workspace(ToolsConfig {
        max_output_chars: 10,
        ..ToolsConfig::default()
    });
    let (out, stop) = call(&tools, "exec_command", json!({"cmd": "seq 1 1000"})).await;
    assert_eq!(stop, StopReason::Completed);
    let (head, notes) = out.split_at(10);
    assert_eq!(head, "1\n2\n3\n4\n5\n");
    let mut notes = notes.strip_prefix('\n').unwrap().lines();
    assert_eq!(notes.next(), Some("[output truncated: exceeded 10 chars]"));
    let archived = notes.next().unwrap();
    let rel = archived
        .strip_prefix("[output archived: ")
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{archived}"));
    assert!(rel.starts_with(ARCHIVE_DIR));
    let full: String = (1..=1000).map(|n| format!("{n}\n")).collect();
    assert_eq!(std::fs::read_to_string(dir.path().join(rel)).unwrap(), full);
    assert_eq!(notes.next(), None);

    // The archive is inside the workspace, so the model can read it back (with a cap that
    // lets the answer through).
    let tools = BuiltinTools::new(dir.path(), ToolsConfig::default()).unwrap();
    let (back, _) = call(&tools, "read_file", json!({"path": rel, "offset": 999})).await;
    assert_eq!(back, "   999\t999\n  1000\t1000");
}

#[tokio::test]
async fn exec_output_is_not_capped_when_the_cap_is_off() {
    let (_dir, tools) = workspace(ToolsConfig {
        max_output_chars: 0,
        archive_truncated: false,
        ..ToolsConfig::default()
    });
    let (out, _) = call(&tools, "exec_command", json!({"cmd": "seq 1 20000"})).await;
    let full: String = (1..=20000).map(|n| format!("{n}\n")).collect();
    assert_eq!(out, full);
}

#[tokio::test]
async fn exec_times_out_and_kills_the_command() {
    // As long as a timeout can be and still end the call: from 1250 ms on, the call hands the
    // command back (a process_id) a second before it. Time enough for a busy machine to start
    // the shell and print; the command itself would run for a minute.
    let (dir, tools) = workspace(ToolsConfig {
        timeout: Some(Duration::from_millis(1200)),
        ..unsandboxed()
    });
    let started = Instant::now();
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 60 & echo $! > bg.pid; echo begun; wait"}),
    )
    .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1200) && elapsed < Duration::from_secs(30),
        "{elapsed:?}"
    );
    assert_eq!(out, "begun\n\n[tool timeout: exceeded 1200ms]");
    assert_eq!(stop, StopReason::Failed);
    let bg = read_pid(dir.path(), "bg.pid").expect("bg pid");
    wait_for(
        "the timed-out command to die",
        Duration::from_secs(5),
        || is_dead(bg),
    )
    .await;
}

#[tokio::test]
async fn exec_timeout_ms_shortens_but_never_extends_the_configured_timeout() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let started = Instant::now();
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 60", "timeout_ms": 300}),
    )
    .await;
    // Far below the sleep: the command was stopped, not waited for.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        (out.as_str(), stop),
        ("[tool timeout: exceeded 300ms]", StopReason::Failed)
    );
    // The model cannot lift the operator's limit.
    let (_dir, tools) = workspace(ToolsConfig {
        timeout: Some(Duration::from_millis(300)),
        ..ToolsConfig::default()
    });
    let started = Instant::now();
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 60", "timeout_ms": 600_000}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        (out.as_str(), stop),
        ("[tool timeout: exceeded 300ms]", StopReason::Failed)
    );
}

#[tokio::test]
async fn abort_kills_the_whole_process_tree() {
    let (dir, tools) = workspace(unsandboxed());
    let cancel = CancellationToken::new();
    let args = json!({
        "cmd": "sleep 30 & echo $! > bg.pid; echo $$ > sh.pid; echo started; sleep 30; wait"
    })
    .to_string();
    let running = {
        let cancel = cancel.clone();
        let tools = tools.clone();
        tokio::spawn(async move { call_raw(&tools, "exec_command", &args, cancel).await })
    };
    let root = dir.path().to_path_buf();
    wait_for("the command to start", Duration::from_secs(10), || {
        read_pid(&root, "bg.pid").is_some() && read_pid(&root, "sh.pid").is_some()
    })
    .await;
    let (bg, sh) = (
        read_pid(&root, "bg.pid").unwrap(),
        read_pid(&root, "sh.pid").unwrap(),
    );
    assert!(!is_dead(bg) && !is_dead(sh));

    let started = Instant::now();
    cancel.cancel();
    let msgs = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the call ends promptly after the interrupt")
        .expect("no panic");
    assert!(started.elapsed() < Duration::from_secs(2));
    let (out, stop) = check(&msgs);
    assert_eq!(stop, StopReason::Aborted);
    assert!(
        out.ends_with("\n[interrupted: tool aborted by user]"),
        "{out:?}"
    );

    wait_for("the process tree to die", Duration::from_secs(5), || {
        is_dead(bg) && is_dead(sh)
    })
    .await;
}

#[tokio::test]
async fn a_background_job_holding_the_pipe_does_not_hang_the_call() {
    let (dir, tools) = workspace(unsandboxed());
    let started = Instant::now();
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 30 & echo $! > bg.pid; echo done"}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((out.as_str(), stop), ("done\n", StopReason::Completed));
    let bg = read_pid(dir.path(), "bg.pid").expect("bg pid");
    wait_for("the background job to die", Duration::from_secs(5), || {
        is_dead(bg)
    })
    .await;
}

#[tokio::test]
async fn an_already_cancelled_call_is_aborted() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let cancel = CancellationToken::new();
    cancel.cancel();
    let args = json!({"cmd": "sleep 5"}).to_string();
    let (out, stop) = check(&call_raw(&tools, "exec_command", &args, cancel).await);
    assert_eq!(
        (out.as_str(), stop),
        ("[interrupted: tool aborted by user]", StopReason::Aborted)
    );
}

#[tokio::test]
async fn unknown_and_disabled_tools_fail() {
    let (_dir, tools) = workspace(ToolsConfig {
        enabled: vec![BuiltinTool::ReadFile],
        ..ToolsConfig::default()
    });
    let msgs = call_raw(&tools, "nope", "{}", CancellationToken::new()).await;
    assert_eq!(msgs.len(), 4, "start, delta, stop, complete");
    assert_eq!(
        check(&msgs),
        ("Unknown tool: nope".to_owned(), StopReason::Failed)
    );
    let (out, _) = call(&tools, "exec_command", json!({"cmd": "true"})).await;
    assert_eq!(out, "Unknown tool: exec_command");
}

#[tokio::test]
async fn unparseable_arguments_get_the_reference_texts() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let msgs = call_raw(&tools, "read_file", "", CancellationToken::new()).await;
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        check(&msgs),
        (
            "Tool call \"read_file\" failed: the arguments field is empty. Re-issue the call with a complete JSON object."
                .to_owned(),
            StopReason::Failed
        )
    );
    let msgs = call_raw(&tools, "read_file", "{\"path\": ", CancellationToken::new()).await;
    assert_eq!(msgs.len(), 4);
    let (out, stop) = check(&msgs);
    assert_eq!(stop, StopReason::Failed);
    let err = serde_json::from_str::<Value>("{\"path\": ")
        .unwrap_err()
        .to_string();
    assert_eq!(
        out,
        format!("Tool call \"read_file\" failed: the arguments are not valid JSON ({err}). Re-issue the call with one complete, valid JSON object.")
    );
}

#[tokio::test]
async fn arguments_of_the_wrong_shape_are_a_tool_error() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let (out, stop) = call(&tools, "read_file", json!({"file": "x"})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(
        out.starts_with("[tool error] invalid arguments for read_file: missing field `path`"),
        "{out}"
    );
}

#[tokio::test]
async fn definitions_and_permissions() {
    let (_dir, tools) = workspace(ToolsConfig::default());
    let names: Vec<String> = tools.tools().into_iter().map(|d| d.name).collect();
    assert_eq!(
        names,
        [
            "exec_command",
            "input_command",
            "kill_command",
            "read_file",
            "list_files",
            "grep_files",
            "read_image",
            "write_file",
            "edit_file",
            "apply_patch",
            "update_plan"
        ]
    );
    for def in tools.tools() {
        let params = def.parameters.expect("schema");
        assert_eq!(params["type"], "object");
        assert!(params["required"].is_array());
    }
    assert_eq!(tools.permission("read_file"), Permission::Read);
    assert_eq!(tools.permission("write_file"), Permission::ReadWrite);
    assert_eq!(tools.permission("exec_command"), Permission::ReadWrite);
    assert_eq!(tools.permission("edit_file"), Permission::ReadWrite);
    assert_eq!(tools.permission("apply_patch"), Permission::ReadWrite);
    for read in ["list_files", "grep_files", "read_image", "update_plan"] {
        assert_eq!(tools.permission(read), Permission::Read, "{read}");
    }
    assert_eq!(tools.permission("mystery"), Permission::ReadWrite);
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let (dir, tools) = workspace(ToolsConfig::default());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        dir.path().join("secret-link"),
    )
    .unwrap();

    for path in [
        "../x",
        "/etc/passwd",
        "link/secret.txt",
        "secret-link",
        "sub/../../x",
    ] {
        let (out, stop) = call(&tools, "read_file", json!({"path": path})).await;
        assert_eq!(stop, StopReason::Failed, "{path}");
        assert_eq!(
            out,
            format!("[tool error] path {path:?} is outside the workspace"),
        );
    }
    for path in ["../escape.txt", "link/new.txt"] {
        let (out, stop) = call(&tools, "write_file", json!({"path": path, "content": "x"})).await;
        assert_eq!(stop, StopReason::Failed, "{path}: {out}");
        assert!(out.contains(&format!("{path:?}")), "{out}");
    }
    assert!(!outside.path().join("new.txt").exists());
    assert!(!dir.path().parent().unwrap().join("escape.txt").exists());

    let (out, stop) = call(
        &tools,
        "edit_file",
        json!({"path": "secret-link", "old_string": "secret", "new_string": "leaked"}),
    )
    .await;
    assert_eq!(stop, StopReason::Failed, "{out}");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret"
    );

    // Inside the workspace, `..` and absolute paths are fine.
    std::fs::write(dir.path().join("in.txt"), "inside").unwrap();
    let abs = std::fs::canonicalize(dir.path()).unwrap().join("in.txt");
    for path in [abs.to_str().unwrap(), "link/../in.txt"] {
        let (out, stop) = call(&tools, "read_file", json!({"path": path})).await;
        assert_eq!(
            (out.as_str(), stop),
            ("     1\tinside", StopReason::Completed),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_process_that_left_the_group_cannot_hang_the_call() {
    if std::process::Command::new("setsid")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "setsid is not installed");
        eprintln!("setsid is not installed; skipping");
        return;
    }
    let (dir, tools) = workspace(unsandboxed());
    let started = Instant::now();
    // The escaped sleep keeps stdout open in a session of its own, out of the group's reach.
    let (out, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "setsid sleep 30 & echo $! > esc.pid; echo done"}),
    )
    .await;
    let escaped = read_pid(dir.path(), "esc.pid").expect("escaped pid");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(escaped).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((out.as_str(), stop), ("done\n", StopReason::Completed));
}

#[tokio::test]
async fn special_files_are_refused_for_writing_without_blocking() {
    let (dir, tools) = workspace(ToolsConfig::default());
    let fifo = dir.path().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    // Nobody reads the FIFO: opening it for writing would block until the tool timeout.
    let (out, stop) = tokio::time::timeout(
        Duration::from_secs(10),
        call(
            &tools,
            "write_file",
            json!({"path": "pipe", "content": "x"}),
        ),
    )
    .await
    .expect("refused at once, not after the tool timeout");
    assert_eq!(stop, StopReason::Failed);
    assert_eq!(
        out,
        "[tool error] pipe: a FIFO (named pipe), not a regular file"
    );
}

/// A tool of one's own: it counts the words of its `text`, streaming one line per word, or
/// panics on `"boom"`, or sleeps past its timeout on `"sleep"`.
struct WordCount;

#[async_trait::async_trait]
impl penguin_tools::Tool for WordCount {
    async fn run(&self, args: Value, out: penguin_tools::Output) -> penguin_tools::ToolResult {
        let text = args["text"].as_str().ok_or("expected {\"text\": string}")?;
        match text {
            "boom" => panic!("the word counter fell over"),
            "sleep" => tokio::time::sleep(Duration::from_secs(60)).await,
            _ => {}
        }
        for (i, word) in text.split_whitespace().enumerate() {
            out.emit(format!("{}: {word}\n", i + 1)).await;
        }
        Ok(penguin_tools::ToolOutcome {
            note: Some(format!("[{} words]", text.split_whitespace().count())),
            ..Default::default()
        })
    }
}

fn word_count_definition(name: &str) -> penguin_omni_protocol::ToolDefinition {
    penguin_omni_protocol::ToolDefinition {
        name: name.into(),
        description: "Counts words.".into(),
        parameters: Some(json!({"type": "object", "properties": {"text": {"type": "string"}}})),
    }
}

#[tokio::test]
async fn a_tool_of_ones_own_runs_under_the_same_contract() {
    let config = ToolsConfig {
        max_output_chars: 40,
        timeout: Some(Duration::from_millis(300)),
        ..ToolsConfig::default()
    };
    let (_dir, tools) = workspace(config);
    let tools = tools
        .with_tool(
            word_count_definition("word_count"),
            Permission::Read,
            WordCount,
        )
        .unwrap();
    assert!(tools.tools().iter().any(|t| t.name == "word_count"));
    assert_eq!(tools.permission("word_count"), Permission::Read);

    let (o, stop) = call(&tools, "word_count", json!({"text": "one two"})).await;
    assert_eq!(
        (o.as_str(), stop),
        ("1: one\n2: two\n\n[2 words]", StopReason::Completed)
    );
    // The cap, the archive, a panic, a bad argument and the timeout: the wrapper's, not the tool's.
    let (o, _) = call(
        &tools,
        "word_count",
        json!({"text": "a b c d e f g h i j k"}),
    )
    .await;
    assert!(o.contains("[output truncated: exceeded 40 chars]"), "{o}");
    let (o, stop) = call(&tools, "word_count", json!({"text": "boom"})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(
        o.contains("[tool error] tool panicked: the word counter fell over"),
        "{o}"
    );
    let (o, stop) = call(&tools, "word_count", json!({"text": 3})).await;
    assert_eq!(
        (o.as_str(), stop),
        (
            "[tool error] expected {\"text\": string}",
            StopReason::Failed
        )
    );
    let (o, stop) = call(&tools, "word_count", json!({"text": "sleep"})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(o.contains("[tool timeout: exceeded 300ms]"), "{o}");

    for (name, why) in [
        ("read_file", "already there"),
        ("word_count", "already there"),
        ("", "1 to 64"),
        ("two words", "only letters"),
    ] {
        let err = tools
            .clone()
            .with_tool(word_count_definition(name), Permission::Read, WordCount)
            .unwrap_err();
        assert!(err.to_string().contains(why), "{name}: {err}");
    }
}
