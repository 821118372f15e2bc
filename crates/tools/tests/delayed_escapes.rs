//! Escapes that wait for later (issue 36): a command that plants code in a repository's
//! `.git` (`core.fsmonitor`, a hook), which the user's next `git status` or `git commit` runs
//! outside the sandbox; and the kernel keyring, which no namespace separates from the user's.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::process::Command;

use penguin_omni_protocol::StopReason;
use penguin_tools::sandbox::Gap;
use penguin_tools::{Sandbox, SandboxMode, SandboxRequest};
use support::*;

fn git_available(test: &str) -> bool {
    program_available("git", test)
}

/// Runs git as the user would, outside any sandbox.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The scene's sandbox in `mode`, with `.git` writable or not; namespaces required.
fn sandbox(s: &Scene, git_writable: bool) -> Sandbox {
    Sandbox::resolve(&SandboxRequest {
        mode: Some(SandboxMode::WorkspaceWrite),
        strict: true,
        temp_dir: Some(s.tmp.clone()),
        protected: vec![s.data.clone()],
        git_writable,
        ..SandboxRequest::default()
    })
    .expect(
        "this kernel enforces the sandbox fully (scripts/install-sandbox.sh installs bubblewrap)",
    )
}

#[tokio::test]
async fn a_repositorys_git_is_read_only_to_commands_unless_the_user_lets_them_commit() {
    if !landlock_at_least("git", 2) || !git_available("git") {
        return;
    }
    let s = Scene::new();
    std::fs::write(s.ws.join("README"), "hello\n").unwrap();
    git(&s.ws, &["init", "-q", "-b", "main"]);
    git(&s.ws, &["add", "README"]);
    git(&s.ws, &["commit", "-q", "-m", "first"]);
    // A repository without the sample hooks: `hooks/` must not be creatable either.
    std::fs::remove_dir_all(s.ws.join(".git/hooks")).unwrap();
    let config = std::fs::read(s.ws.join(".git/config")).unwrap();
    let pwned = s.outside.join("pwned");
    let plant = format!("touch {}", q(&pwned));
    let tools = s.tools(sandbox(&s, false));

    for cmd in [
        format!("git config core.fsmonitor \"{plant}\""),
        format!("printf '[core]\\n\\tfsmonitor = {plant}\\n' >> .git/config"),
        format!("mkdir -p .git/hooks && printf '#!/bin/sh\\n{plant}\\n' > .git/hooks/pre-commit"),
        "mv .git .git-away".to_owned(),
        "rm -rf .git".to_owned(),
        "git -c user.name=m -c user.email=m@example.org commit -q --allow-empty -m planted"
            .to_owned(),
    ] {
        let (out, stop) = sh(&tools, &cmd).await;
        assert_eq!(stop, StopReason::Failed, "{cmd}: {out}");
        assert_eq!(
            std::fs::read(s.ws.join(".git/config")).unwrap(),
            config,
            "{cmd}: {out}"
        );
        assert!(!s.ws.join(".git/hooks").exists(), "{cmd}: {out}");
        assert!(s.ws.join(".git/HEAD").is_file(), "{cmd}: {out}");
    }
    let (out, _) = sh(
        &tools,
        "git -c user.name=m -c user.email=m@example.org commit -q --allow-empty -m planted",
    )
    .await;
    assert!(
        out.contains("git_writable = true"),
        "the note says why and what lets commands commit: {out}"
    );
    // Reading the repository still works, and the rest of the workspace stays writable.
    let (out, stop) = sh(
        &tools,
        "git status && git log --oneline && echo ok > new.txt",
    )
    .await;
    assert_eq!(stop, StopReason::Completed, "{out}");
    assert!(
        out.contains("On branch main") && out.contains("first"),
        "{out}"
    );
    assert!(s.ws.join("new.txt").is_file());
    // Nothing planted ran or remains: the user's git finds the repository as it was.
    let status = Command::new("git")
        .args(["config", "--get", "core.fsmonitor"])
        .current_dir(&s.ws)
        .output()
        .unwrap();
    assert!(!status.status.success(), "no fsmonitor is set: {status:?}");
    assert_eq!(git(&s.ws, &["log", "--format=%s"]), "first\n");
    assert!(!pwned.exists());

    // With the switch, commands may commit and change the repository.
    let tools = s.tools(sandbox(&s, true));
    let (out, stop) = sh(
        &tools,
        "mkdir -p .git/hooks && printf '#!/bin/sh\\necho hook ran\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && git -c user.name=m -c user.email=m@example.org commit -q --allow-empty -m second",
    )
    .await;
    assert_eq!(stop, StopReason::Completed, "{out}");
    assert!(out.contains("hook ran"), "{out}");
    assert_eq!(git(&s.ws, &["log", "--format=%s"]), "second\nfirst\n");

    // Without namespaces Landlock cannot take `.git` back from the workspace, and says so.
    let landlock = s.landlock_only(SandboxMode::WorkspaceWrite, false);
    assert!(landlock.gaps().contains(&Gap::Namespaces));
    assert!(landlock.warning().unwrap().contains(".git"));
}

#[tokio::test]
async fn a_git_file_and_the_directory_it_names_are_read_only_too() {
    if !landlock_at_least("git file", 2) || !git_available("git file") {
        return;
    }
    let s = Scene::new();
    // `.git` is a file naming a git directory elsewhere in the workspace.
    git(&s.ws, &["init", "-q", "--separate-git-dir", ".repo"]);
    assert!(s.ws.join(".git").is_file());
    let pointer = std::fs::read_to_string(s.ws.join(".git")).unwrap();
    let evil = s.tmp.join("evil");
    std::fs::create_dir(&evil).unwrap();
    let tools = s.tools(sandbox(&s, false));
    for cmd in [
        format!("printf 'gitdir: {}\\n' > .git", evil.display()),
        "rm -f .git".to_owned(),
        "git config core.fsmonitor 'touch pwned'".to_owned(),
        "printf x > .repo/hooks/pre-commit".to_owned(),
    ] {
        let (out, stop) = sh(&tools, &cmd).await;
        assert_eq!(stop, StopReason::Failed, "{cmd}: {out}");
        assert_eq!(
            std::fs::read_to_string(s.ws.join(".git")).unwrap(),
            pointer,
            "{cmd}: {out}"
        );
    }
    let config = std::fs::read_to_string(s.ws.join(".repo/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(!s.ws.join(".repo/hooks/pre-commit").exists());
}

/// Set in the copy of this test binary that runs with the planted programs first on `PATH`.
const PLANTED: &str = "PENGUIN_TEST_PLANTED_PATH";

#[tokio::test]
async fn a_bwrap_or_setsid_planted_on_path_is_never_what_starts_a_command() {
    if !landlock_at_least("planted", 2) {
        return;
    }
    let Some(planted) = std::env::var_os(PLANTED) else {
        // A directory in the home folder on PATH (`~/.local/bin`), written by a command of a
        // session whose workspace was the home folder: each fake notes that it ran, then runs
        // the command without any confinement.
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let ran = dir.path().join("ran");
        for (name, skip) in [
            ("bwrap", r#"while [ "$1" != "--" ]; do shift; done; shift"#),
            ("setsid", r#"[ "$1" = "--" ] && shift"#),
        ] {
            let fake = bin.join(name);
            std::fs::write(
                &fake,
                format!(
                    "#!/bin/sh\necho {name} >> '{}'\n{skip}\nexec \"$@\"\n",
                    ran.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_bwrap_or_setsid_planted_on_path_is_never_what_starts_a_command",
                "--nocapture",
            ])
            .env(PLANTED, &bin)
            .env("PATH", path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("test result: ok. 1 passed"),
            "{text}"
        );
        assert!(
            !ran.exists(),
            "a planted program ran: {}",
            std::fs::read_to_string(&ran).unwrap_or_default()
        );
        return;
    };
    let first = std::env::split_paths(&std::env::var_os("PATH").unwrap()).next();
    assert_eq!(first.as_deref(), Some(Path::new(&planted)));
    let s = Scene::new();
    for sandbox in [
        s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]),
        Sandbox::off(),
    ] {
        let tools = s.tools(sandbox.clone());
        let (out, stop) = sh(&tools, "echo started").await;
        assert_eq!(
            (out.as_str(), stop),
            ("started\n", StopReason::Completed),
            "{}",
            sandbox.summary()
        );
    }
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]));
    let (out, stop) = sh(&tools, &format!("echo x > {}/x", q(&s.outside))).await;
    assert_eq!(stop, StopReason::Failed, "{out}");
    assert!(!s.outside.join("x").exists());
}

#[tokio::test]
async fn the_kernel_keyring_is_out_of_reach_in_every_confined_mode() {
    if !landlock_at_least("keyring", 4) || !python_available("keyring") {
        return;
    }
    let probe = format!(
        r#"python3 -c "
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def call(name, nr, *args):
    r = libc.syscall(L(nr), *args)
    print(name, 'ok' if r >= 0 else errno.errorcode[ctypes.get_errno()])
call('keyctl', {keyctl}, L(0), L(-4), L(1))
call('add_key', {add_key}, b'user', b'penguin-test', b'secret', L(6), L(-2))
call('request_key', {request_key}, b'user', b'penguin-test-absent', None, L(0))
""#,
        // KEYCTL_GET_KEYRING_ID of the user's keyring; a key into the process keyring.
        keyctl = libc::SYS_keyctl,
        add_key = libc::SYS_add_key,
        request_key = libc::SYS_request_key,
    );
    let s = Scene::new();
    let (control, _) = sh(&s.tools(Sandbox::off()), &probe).await;
    if !control.contains("keyctl ok") {
        assert!(std::env::var_os("CI").is_none(), "{control}");
        eprintln!("SKIPPED keyring: no keyring to reach here: {control}");
        return;
    }
    assert!(control.contains("add_key ok"), "{control}");
    let off_network_off = Sandbox::resolve(&SandboxRequest {
        mode: Some(SandboxMode::Off),
        network: false,
        ..SandboxRequest::default()
    })
    .unwrap();
    for (mode, sandbox) in [
        (
            "workspace-write",
            s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]),
        ),
        ("read-only", s.sandbox(SandboxMode::ReadOnly, true, vec![])),
        (
            "workspace-write without namespaces",
            s.landlock_only(SandboxMode::WorkspaceWrite, false),
        ),
        ("off with the network off", off_network_off),
    ] {
        let (out, _) = sh(&s.tools(sandbox), &probe).await;
        assert_eq!(
            out, "keyctl EPERM\nadd_key EPERM\nrequest_key EPERM\n",
            "{mode}"
        );
    }
}
