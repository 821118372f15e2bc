//! The sandbox starts no process until a command needs one: resolving it asks the kernel for
//! Landlock and seccomp, but whether bubblewrap can set up namespaces is found out by the first
//! command, once for the process, and the summary says so until then. The probe leaves nothing
//! behind in the process group of the process that ran it.
//!
//! One test in this file: it watches the process-wide probe, which no other test may run first.

// Tests read /proc by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::process::Stdio;

use penguin_tools::sandbox::{Gap, Landlock, Namespaces};
use penguin_tools::{Sandbox, SandboxMode, SandboxRequest};

/// The processes in process group `pgrp` other than this one, by name.
fn group_members(pgrp: u32) -> Vec<String> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (head, rest) = stat.rsplit_once(')').unwrap();
        let name = head.split_once('(').map_or("", |(_, n)| n);
        // state, ppid, pgrp
        let group: u32 = rest.split_whitespace().nth(2).unwrap().parse().unwrap();
        if group == pgrp && pid != me {
            found.push(format!("{name} ({pid})"));
        }
    }
    found
}

fn own_group() -> u32 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn namespaces_are_tried_by_the_first_command_and_the_try_leaves_nothing_behind() {
    if !matches!(Landlock::probe(), Landlock::Abi(_)) {
        assert!(std::env::var_os("CI").is_none(), "{}", Landlock::probe());
        eprintln!(
            "SKIPPED: {} (without Landlock the sandbox is off and never needs namespaces)",
            Landlock::probe()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, tmp) = (root.join("ws"), root.join("tmp"));
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    let request = SandboxRequest {
        mode: Some(SandboxMode::WorkspaceWrite),
        temp_dir: Some(tmp),
        ..SandboxRequest::default()
    };
    let sandbox = Sandbox::resolve(&request).unwrap();
    if let Namespaces::Unavailable(why) = Namespaces::known() {
        // No bubblewrap installed: known, and said, without starting anything.
        eprintln!("no bubblewrap here ({why}): the gap is named at once");
        assert!(sandbox.gaps().contains(&Gap::Namespaces), "{sandbox:?}");
        assert!(!sandbox.summary().contains("checked at the first command"));
        return;
    }
    assert!(
        matches!(sandbox.namespaces(), Namespaces::Untried(_)),
        "resolving tried bubblewrap: {:?}",
        sandbox.namespaces()
    );
    let summary = sandbox.summary();
    assert!(
        summary.ends_with("; namespaces checked at the first command)"),
        "{summary}"
    );
    assert!(
        !sandbox.gaps().contains(&Gap::Namespaces),
        "untried is not missing: {summary}"
    );
    // Everything but the namespaces is known without them: `off` asks for none.
    let off = Sandbox::resolve(&SandboxRequest {
        mode: Some(SandboxMode::Off),
        ..SandboxRequest::default()
    })
    .unwrap();
    assert!(!off.summary().contains("namespaces"), "{}", off.summary());
    assert!(matches!(Namespaces::known(), Namespaces::Untried(_)));

    // The first command finds out, for every sandbox of the process.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        let mut child = sandbox
            .start("true", &ws, |c| {
                c.current_dir(&ws)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
            })
            .expect("a command starts");
        child.wait().await.unwrap()
    });
    assert!(status.success(), "{status}");
    let found = sandbox.namespaces();
    assert!(!matches!(found, Namespaces::Untried(_)), "{found:?}");
    assert_eq!(found, Namespaces::known());
    assert_eq!(Sandbox::resolve(&request).unwrap().namespaces(), found);
    let summary = sandbox.summary();
    assert!(
        !summary.contains("checked at the first command"),
        "{summary}"
    );
    assert_eq!(
        sandbox.gaps().contains(&Gap::Namespaces),
        !found.available(),
        "{summary}"
    );
    assert_eq!(sandbox.uses_namespaces(), found.available());

    // bubblewrap's own init in the probe's namespace used to outlive the bubblewrap that was
    // waited for, and linger in this process group once its parent had gone.
    let left: Vec<String> = group_members(own_group())
        .into_iter()
        .filter(|p| p.starts_with("bwrap") || p.starts_with("true"))
        .collect();
    assert!(left.is_empty(), "left in the process group: {left:?}");
}
