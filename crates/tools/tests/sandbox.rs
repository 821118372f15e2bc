//! `exec_command` under the Landlock sandbox, with real commands: what a command may write,
//! read and connect to in each mode, and that the policy reaches every descendant.
//!
//! Each test prints why it skips on a kernel without (enough) Landlock.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod support;

use std::net::TcpListener;

use penguin_engine::Environment;
use penguin_omni_protocol::{build, ModelPayload, StopReason};
use penguin_tools::{Sandbox, SandboxBypass, SandboxMode};
use serde_json::json;
use support::*;

#[tokio::test]
async fn workspace_write_allows_the_workspace_and_temp_and_refuses_everything_else() {
    if !landlock_at_least("workspace_write", 2) {
        return;
    }
    let s = Scene::new();
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]));
    let out = q(&s.outside);

    let (o, stop) = sh(&tools, "echo inside > inside.txt && mkdir -p d/e && mv inside.txt d/e/ && cat d/e/inside.txt && echo x > /dev/null").await;
    assert_eq!((o.as_str(), stop), ("inside\n", StopReason::Completed));

    let (o, stop) = sh(
        &tools,
        "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo \"$TMPDIR\"",
    )
    .await;
    assert_eq!(stop, StopReason::Completed, "{o}");
    assert_eq!(o, format!("t\n{}\n", s.tmp.display()));

    // Reading outside is allowed.
    let (o, stop) = sh(&tools, &format!("cat {out}/secret.txt")).await;
    assert_eq!((o.as_str(), stop), (SECRET, StopReason::Completed));

    // A plain write outside.
    let (o, stop) = sh(&tools, &format!("echo x > {out}/new.txt")).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert!(
        o.contains("Read-only file system") || o.contains("Permission denied"),
        "{o}"
    );
    assert!(o.contains("[sandbox: "), "the model is told: {o}");
    assert!(o.contains("mode workspace-write"), "{o}");
    assert!(
        o.contains(&format!("{}/new.txt", s.outside.display())),
        "{o}"
    );
    assert!(!s.outside.join("new.txt").exists());

    // Through a symlink in the workspace, to a file and to a directory.
    let (o, stop) = sh(&tools, &format!("ln -s {out}/secret.txt link && ln -s {out} dirlink && echo evil > link; echo evil > dirlink/new.txt; echo evil >> link")).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert_eq!(s.secret(), SECRET);
    assert!(!s.outside.join("new.txt").exists());
    let real = s.outside.join("secret.txt");
    assert!(
        o.contains(&format!("'link' (really {})", real.display())),
        "the note names where the link leads: {o}"
    );

    // A hard link of an outside file into the workspace (writable through the workspace name).
    let (o, stop) = sh(&tools, &format!("ln {out}/secret.txt hard")).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert!(!s.ws.join("hard").exists(), "{o}");
    assert!(o.contains("[sandbox: "), "{o}");

    // Moving an outside file in: the rename is refused, and mv's copy fallback cannot remove
    // the original, so the file outside stays. (A copy left in the workspace is no more than
    // `cat` could make: reading is allowed.)
    let (o, stop) = sh(&tools, &format!("mv {out}/secret.txt moved.txt")).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert_eq!(s.secret(), SECRET);

    // Removing, truncating, renaming outside.
    for cmd in [
        format!("rm {out}/secret.txt"),
        format!("truncate -s 0 {out}/secret.txt"),
        format!("mv {out}/secret.txt {out}/renamed.txt"),
        format!("mkdir {out}/d"),
    ] {
        let (o, stop) = sh(&tools, &cmd).await;
        assert_eq!(stop, StopReason::Failed, "{cmd}: {o}");
        assert_eq!(s.secret(), SECRET, "{cmd}");
    }
    assert!(!s.outside.join("d").exists());

    // penguin itself was never confined: this test (the host process) still writes outside.
    std::fs::write(s.outside.join("by_host.txt"), "host").expect("the host is not confined");
}

#[tokio::test]
async fn read_only_allows_only_the_temp_directory() {
    if !landlock_at_least("read_only", 2) {
        return;
    }
    let s = Scene::new();
    std::fs::write(s.ws.join("a.txt"), "workspace file\n").unwrap();
    let tools = s.tools(s.sandbox(SandboxMode::ReadOnly, true, vec![]));

    let (o, stop) = sh(
        &tools,
        "cat a.txt && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
    )
    .await;
    assert_eq!(
        (o.as_str(), stop),
        ("workspace file\nt\n", StopReason::Completed)
    );
    let (o, stop) = sh(&tools, &format!("cat {}/secret.txt", q(&s.outside))).await;
    assert_eq!((o.as_str(), stop), (SECRET, StopReason::Completed));

    let (o, stop) = sh(&tools, "echo x > b.txt").await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert!(o.contains("mode read-only"), "{o}");
    assert!(o.contains("'b.txt'"), "{o}");
    let (o, stop) = sh(&tools, "echo more >> a.txt; rm a.txt").await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a.txt")).unwrap(),
        "workspace file\n"
    );
    assert!(!s.ws.join("b.txt").exists());

    // penguin's own file tools refuse as well.
    let (o, stop) = call(
        &tools,
        "write_file",
        json!({"path": "c.txt", "content": "x"}),
    )
    .await;
    assert_eq!(stop, StopReason::Failed);
    assert!(o.contains("read-only"), "{o}");
    let patch = "*** Begin Patch\n*** Add File: c.txt\n+x\n*** End Patch";
    let (o, stop) = call(&tools, "apply_patch", json!({"input": patch})).await;
    assert_eq!(stop, StopReason::Failed);
    assert!(o.contains("read-only"), "{o}");
    assert!(!s.ws.join("c.txt").exists());
    let (o, stop) = call(&tools, "read_file", json!({"path": "a.txt"})).await;
    assert_eq!(
        (o.as_str(), stop),
        ("     1\tworkspace file", StopReason::Completed)
    );
}

#[tokio::test]
async fn children_grandchildren_and_background_jobs_inherit_the_policy() {
    if !landlock_at_least("inheritance", 2) {
        return;
    }
    let s = Scene::new();
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]));
    let out = s.outside.display().to_string();
    let cmd = format!(
        "sh -c 'echo child > {out}/child.txt'; \
         sh -c \"sh -c 'echo grandchild > {out}/grandchild.txt'\"; \
         (echo background > {out}/background.txt) & wait; \
         nohup sh -c 'echo detached > {out}/detached.txt' > /dev/null 2>&1; \
         sh -c 'echo inside > child_inside.txt'"
    );
    let (o, stop) = sh(&tools, &cmd).await;
    assert_eq!(
        stop,
        StopReason::Completed,
        "the last command succeeds: {o}"
    );
    for f in [
        "child.txt",
        "grandchild.txt",
        "background.txt",
        "detached.txt",
    ] {
        assert!(!s.outside.join(f).exists(), "{f} was written: {o}");
    }
    assert_eq!(
        std::fs::read_to_string(s.ws.join("child_inside.txt")).unwrap(),
        "inside\n"
    );
}

#[tokio::test]
async fn a_sandboxed_command_is_still_killed_on_timeout() {
    if !landlock_at_least("timeout", 2) {
        return;
    }
    let s = Scene::new();
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]));
    let started = std::time::Instant::now();
    // As long as a timeout can be and still end the call (from 1250 ms on, the call hands the
    // command back a second before it): time enough for a busy machine to start the shell.
    let (o, stop) = call(
        &tools,
        "exec_command",
        json!({"cmd": "sleep 60.0317", "timeout_ms": 1200}),
    )
    .await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert!(o.contains("[tool timeout: exceeded 1200ms]"), "{o}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    // SIGKILL was sent when the call ended; the kernel tears the process down right after.
    // (Its pid inside the sandbox's PID namespace means nothing here: found by its command.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running_with_argument("60.0317") {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandboxed command outlived its timeout"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn off_runs_commands_unconfined() {
    let s = Scene::new();
    let tools = s.tools(Sandbox::off());
    let (o, stop) = sh(&tools, &format!("echo x > {}/new.txt", q(&s.outside))).await;
    assert_eq!((o.as_str(), stop), ("[no output]", StopReason::Completed));
    assert!(s.outside.join("new.txt").exists());
}

#[tokio::test]
async fn network_off_refuses_tcp_except_allowed_ports() {
    if !landlock_at_least("network", 4) || !python_available("network") {
        return;
    }
    let s = Scene::new();
    // Listening before the command runs: a refused connection is the sandbox, not a race.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();

    let open = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]));
    let (o, stop) = sh(&open, &python_connect(port)).await;
    assert_eq!((o.as_str(), stop), ("connected\n", StopReason::Completed));

    let closed = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, false, vec![other_port]));
    let (o, stop) = sh(&closed, &python_connect(port)).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert!(o.contains("PermissionError"), "{o}");
    assert!(o.contains("[sandbox: "), "{o}");
    assert!(o.contains("network off"), "{o}");
    let (o, stop) = sh(
        &closed,
        &format!("curl -sS http://127.0.0.1:{port}/ -o /dev/null"),
    )
    .await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    assert!(o.contains(&format!("TCP port {port}")), "{o}");
    // The explicitly allowed port stays reachable, on loopback too.
    let (o, stop) = sh(&closed, &python_connect(other_port)).await;
    assert_eq!((o.as_str(), stop), ("connected\n", StopReason::Completed));
    // Binding a port is refused as well.
    let bind = "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print('bound')\"";
    let (o, stop) = sh(&closed, bind).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    let (o, stop) = sh(&open, bind).await;
    assert_eq!((o.as_str(), stop), ("bound\n", StopReason::Completed));

    // With mode off, network = false still blocks TCP (and only TCP).
    let net_only = s.tools(s.sandbox(SandboxMode::Off, false, vec![]));
    let (o, stop) = sh(&net_only, &python_connect(port)).await;
    assert_eq!(stop, StopReason::Failed, "{o}");
    let (o, stop) = sh(
        &net_only,
        &format!("echo x > {}/net_only.txt", q(&s.outside)),
    )
    .await;
    assert_eq!((o.as_str(), stop), ("[no output]", StopReason::Completed));
}

#[tokio::test]
async fn a_granted_call_runs_once_outside_the_sandbox() {
    if !landlock_at_least("bypass", 2) {
        return;
    }
    let s = Scene::new();
    let bypass = SandboxBypass::new();
    let tools = s
        .tools(s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]))
        .with_bypass(bypass.clone());
    let args = json!({ "cmd": format!("echo x >> {}/granted.txt", q(&s.outside)) });
    bypass.grant(ID, &args.to_string());
    let (o, stop) = call(&tools, "exec_command", args.clone()).await;
    assert_eq!((o.as_str(), stop), ("[no output]", StopReason::Completed));
    let (o, stop) = call(&tools, "exec_command", args).await;
    assert_eq!(stop, StopReason::Failed, "the grant is used up: {o}");
    assert_eq!(
        std::fs::read_to_string(s.outside.join("granted.txt")).unwrap(),
        "x\n"
    );
}

/// What a host holding only the session's `Environment` does (the server's
/// `allow_unsandboxed`): the grant goes through the environment, for commands of a sandboxed
/// session only.
#[tokio::test]
async fn the_environment_grants_commands_of_a_sandboxed_session_only() {
    if !landlock_at_least("grant_unsandboxed", 2) {
        return;
    }
    let s = Scene::new();
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]));
    let args = json!({ "cmd": format!("echo x >> {}/env_granted.txt", q(&s.outside)) });
    let command = |name: &str| {
        let m = build::tool_call(name, args.to_string(), ID, StopReason::Completed, None);
        let Some(ModelPayload::ToolCall(tc)) = m.model().cloned() else {
            unreachable!()
        };
        tc
    };
    // What the approvers offer is what the environment grants.
    assert_eq!(tools.unsandboxed_tools(), ["exec_command"]);
    assert!(
        !tools.grant_unsandboxed(&command("read_file")),
        "not a command"
    );
    assert!(tools.grant_unsandboxed(&command("exec_command")));
    let (o, stop) = call(&tools, "exec_command", args.clone()).await;
    assert_eq!((o.as_str(), stop), ("[no output]", StopReason::Completed));
    assert!(s.outside.join("env_granted.txt").exists());
    let unconfined = s.tools(Sandbox::off());
    assert!(unconfined.unsandboxed_tools().is_empty());
    assert!(
        !unconfined.grant_unsandboxed(&command("exec_command")),
        "nothing to run outside of"
    );
}

/// What a background command session or an MCP stdio server does: its own process, started
/// with `std`, under the session's sandbox.
#[test]
fn confine_works_for_any_spawner() {
    if !landlock_at_least("confine", 2) {
        return;
    }
    let s = Scene::new();
    let sandbox = s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]);
    let status = sandbox
        .confine(&s.ws, || {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "echo x > {}/std.txt; echo y > inside.txt",
                    q(&s.outside)
                ))
                .current_dir(&s.ws)
                .status()
        })
        .unwrap();
    assert!(status.success(), "the last write is allowed");
    assert!(!s.outside.join("std.txt").exists());
    assert!(s.ws.join("inside.txt").exists());
}
