//! A hostile command against penguin's own powers: its data root (config, server token,
//! traces), its environment, the network past `network = false`, files outside the workspace
//! by metadata, penguin's process, and what penguin writes on a command's behalf.
//!
//! Each promise is tested with the layer that keeps it: with namespaces (bubblewrap, which
//! `scripts/install-sandbox.sh` installs; the tests fail without it rather than skip) and,
//! where Landlock and seccomp keep it alone, without them too.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command};

use penguin_omni_protocol::StopReason;
use penguin_tools::sandbox::Gap;
use penguin_tools::{BuiltinTools, Sandbox, SandboxMode, SandboxRequest, ToolsConfig};
use serde_json::json;
use support::*;

#[tokio::test]
async fn penguins_data_root_is_hidden_and_unwritable_even_inside_the_workspace() {
    if !landlock_at_least("data root", 2) {
        return;
    }
    let s = Scene::new();
    let data = q(&s.data);
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly] {
        let tools = s.tools(s.sandbox(mode, false, vec![]));
        let (o, _) = sh(&tools, &format!("cat {data}/server-token; ls -A {data}")).await;
        assert!(!o.contains(TOKEN), "{mode}: the token was read: {o}");
        assert!(
            !o.contains("config.toml"),
            "{mode}: the data root is listed: {o}"
        );
        let (o, stop) = sh(
            &tools,
            &format!("printf '[sandbox]\\nmode = \"off\"' > {data}/config.toml"),
        )
        .await;
        assert_eq!(stop, StopReason::Failed, "{mode}: {o}");
        sh(&tools, &format!("rm -rf {data}/server-token {data}")).await;
        // Unmounting what hides it needs a capability the sandbox dropped, root or not.
        let (o, _) = sh(&tools, &format!("umount {data}; cat {data}/server-token")).await;
        assert!(!o.contains(TOKEN), "{mode}: {o}");
        assert_eq!(
            std::fs::read_to_string(s.data.join("config.toml")).unwrap(),
            CONFIG
        );
        assert_eq!(
            std::fs::read_to_string(s.data.join("server-token")).unwrap(),
            TOKEN
        );
    }
    // The rest of the workspace stays writable around it.
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]));
    let (o, stop) = sh(&tools, "echo ok > beside.txt && cat beside.txt").await;
    assert_eq!((o.as_str(), stop), ("ok\n", StopReason::Completed));

    // Without namespaces Landlock cannot hide it, and the sandbox says so.
    let landlock = s.landlock_only(SandboxMode::WorkspaceWrite, false);
    assert!(
        landlock.gaps().contains(&Gap::Namespaces),
        "{:?}",
        landlock.gaps()
    );
    assert!(landlock.warning().unwrap().contains("data root"));
}

#[tokio::test]
async fn the_file_tools_refuse_penguins_data_root_in_every_mode() {
    let s = Scene::new();
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::Off] {
        let sandbox = Sandbox::resolve(&SandboxRequest {
            mode: Some(mode),
            protected: vec![s.data.clone()],
            ..SandboxRequest::default()
        })
        .unwrap();
        let tools = s.tools(sandbox);
        let rel = ".penguin-data/server-token";
        let (o, stop) = call(&tools, "read_file", json!({ "path": rel })).await;
        assert_eq!(stop, StopReason::Failed, "{o}");
        assert!(o.contains("penguin's own state"), "{o}");
        assert!(!o.contains(TOKEN), "{o}");
        let config = s.data.join("config.toml");
        for (tool, args) in [
            ("write_file", json!({"path": config, "content": "x"})),
            (
                "edit_file",
                json!({"path": config, "old_string": "workspace-write", "new_string": "off"}),
            ),
            (
                "exec_command",
                json!({"cmd": "true", "workdir": ".penguin-data"}),
            ),
        ] {
            let (o, stop) = call(&tools, tool, args).await;
            assert_eq!(stop, StopReason::Failed, "{tool}: {o}");
            assert!(o.contains("penguin's own state"), "{tool}: {o}");
        }
        assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIG);
    }
}

/// The skills folder and the memory folders beneath the data root: commands may read the
/// skills (a read-only bind in the namespace) and nothing else there; neither commands nor
/// the file tools write the skills; only the file tools (and `memory_forget`) reach memory.
#[tokio::test]
async fn skills_are_readable_and_memory_writable_only_through_the_file_tools() {
    if !landlock_at_least("skills and memory", 2) {
        return;
    }
    let s = Scene::new();
    let skills = s.data.join("skills");
    let memory = s.data.join("memory/user");
    std::fs::create_dir_all(skills.join("deploy")).unwrap();
    std::fs::write(
        skills.join("deploy/SKILL.md"),
        "---\nname: deploy\n---\nShip.",
    )
    .unwrap();
    std::fs::create_dir_all(&memory).unwrap();
    std::fs::write(memory.join("MEMORY.md"), "- [Tabs](tabs.md)\n").unwrap();
    std::fs::write(memory.join("tabs.md"), "tabs").unwrap();
    let (sk, mem, data) = (q(&skills), q(&memory), q(&s.data));
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly] {
        let sandbox = s
            .sandbox(mode, false, vec![])
            .with_readable([skills.clone()]);
        let tools = BuiltinTools::new(
            &s.ws,
            ToolsConfig {
                sandbox,
                memory: vec![memory.clone()],
                ..ToolsConfig::default()
            },
        )
        .unwrap();
        // A command reads the skill, but not the rest of the data root, nor memory.
        let (o, _) = sh(&tools, &format!("cat {sk}/deploy/SKILL.md")).await;
        assert!(o.contains("Ship."), "{mode}: {o}");
        let (o, _) = sh(
            &tools,
            &format!("cat {data}/server-token {mem}/tabs.md; ls -A {data}"),
        )
        .await;
        assert!(
            !o.contains(TOKEN) && !o.contains("tabs\n") && !o.contains("config.toml"),
            "{mode}: {o}"
        );
        // ... and writes neither.
        for cmd in [
            format!("echo evil > {sk}/deploy/SKILL.md"),
            format!("echo evil > {sk}/new.md"),
            format!("rm -rf {sk}/deploy"),
            format!("mkdir -p {mem} && echo evil > {mem}/MEMORY.md"),
            format!("umount {sk}; echo evil > {sk}/deploy/SKILL.md"),
        ] {
            sh(&tools, &cmd).await;
        }
        assert_eq!(
            std::fs::read_to_string(skills.join("deploy/SKILL.md")).unwrap(),
            "---\nname: deploy\n---\nShip."
        );
        assert!(!skills.join("new.md").exists());
        assert_eq!(
            std::fs::read_to_string(memory.join("MEMORY.md")).unwrap(),
            "- [Tabs](tabs.md)\n"
        );
        // The file tools read the skill but never change it, nor anything else of the data
        // root through a link or `..` out of the allowed folders.
        let skill_file = skills.join("deploy/SKILL.md");
        let (o, stop) = call(&tools, "read_file", json!({ "path": skill_file })).await;
        assert_eq!(stop, StopReason::Completed, "{o}");
        assert!(o.contains("Ship."), "{o}");
        for (tool, args) in [
            ("write_file", json!({"path": skill_file, "content": "x"})),
            (
                "write_file",
                json!({"path": ".penguin-data/skills/deploy/SKILL.md", "content": "x"}),
            ),
            (
                "edit_file",
                json!({"path": skill_file, "old_string": "Ship.", "new_string": "x"}),
            ),
            (
                "read_file",
                json!({"path": format!("{sk}/../server-token")}),
            ),
            (
                "read_file",
                json!({"path": format!("{mem}/../../config.toml")}),
            ),
            ("memory_forget", json!({"path": skill_file})),
            ("memory_forget", json!({"path": s.data.join("config.toml")})),
        ] {
            let (o, stop) = call(&tools, tool, args).await;
            assert_eq!(stop, StopReason::Failed, "{mode} {tool}: {o}");
            assert!(!o.contains(TOKEN), "{o}");
        }
        std::os::unix::fs::symlink(s.data.join("server-token"), memory.join("link.md")).ok();
        let (o, stop) = call(
            &tools,
            "read_file",
            json!({ "path": memory.join("link.md") }),
        )
        .await;
        assert_eq!(stop, StopReason::Failed, "{o}");
        assert!(!o.contains(TOKEN), "{o}");
        assert_eq!(
            std::fs::read_to_string(&skill_file).unwrap(),
            "---\nname: deploy\n---\nShip."
        );
        assert_eq!(
            std::fs::read_to_string(s.data.join("config.toml")).unwrap(),
            CONFIG
        );
    }
    // In workspace-write, the file tools keep memory: write a note, forget it.
    let tools = BuiltinTools::new(
        &s.ws,
        ToolsConfig {
            sandbox: s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]),
            memory: vec![memory.clone()],
            ..ToolsConfig::default()
        },
    )
    .unwrap();
    let note = memory.join("editor.md");
    let (o, stop) = call(
        &tools,
        "write_file",
        json!({"path": note, "content": "vim"}),
    )
    .await;
    assert_eq!(stop, StopReason::Completed, "{o}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "vim");
    let (o, stop) = call(
        &tools,
        "memory_forget",
        json!({"path": memory.join("tabs.md")}),
    )
    .await;
    assert_eq!(stop, StopReason::Completed, "{o}");
    assert!(o.contains("dropped 1 line"), "{o}");
    assert_eq!(
        std::fs::read_to_string(memory.join("MEMORY.md")).unwrap(),
        ""
    );
}

#[tokio::test]
async fn commands_inherit_an_allowlisted_environment_without_secrets() {
    // Safe in this edition; no other test in this binary reads these names.
    std::env::set_var("OPENAI_API_KEY", "sk-hostile-test");
    std::env::set_var("PENGUIN_TOKEN", "tok-hostile-test");
    std::env::set_var("PENGUIN_TEST_WANTED", "wanted");
    let s = Scene::new();
    let asked = |mode| SandboxRequest {
        mode: Some(mode),
        inherit_env: vec!["PENGUIN_TEST_*".into(), "PENGUIN_TOKEN".into()],
        ..SandboxRequest::default()
    };
    let workspace = Sandbox::resolve(&asked(SandboxMode::WorkspaceWrite)).unwrap();
    let off = Sandbox::resolve(&asked(SandboxMode::Off)).unwrap();
    for sandbox in [workspace.clone(), workspace.unconfined(), off] {
        let tools = s.tools(sandbox.clone());
        let (o, stop) = sh(&tools, "env").await;
        assert_eq!(stop, StopReason::Completed, "{o}");
        assert!(!o.contains("sk-hostile-test"), "{}: {o}", sandbox.summary());
        assert!(
            !o.contains("tok-hostile-test"),
            "{}: {o}",
            sandbox.summary()
        );
        assert!(o.contains("PENGUIN_TEST_WANTED=wanted"), "{o}");
        assert!(o.lines().any(|l| l.starts_with("PATH=")), "{o}");
    }
}

/// What a Python one-liner prints for each kind of socket: `ok` or the errno name.
fn socket_probe(port: u16) -> String {
    format!(
        r#"python3 -c "
import ctypes, errno, socket
def attempt(name, make, use=None):
    try:
        s = make()
        if use: use(s)
        print(name, 'ok')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
attempt('mptcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262), lambda s: s.connect(('127.0.0.1', {port})))
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM), lambda s: s.sendto(b'x', ('127.0.0.1', {port})))
attempt('udp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt('packet', lambda: socket.socket(17, socket.SOCK_RAW, 0))
attempt('netlink', lambda: socket.socket(16, socket.SOCK_RAW, 0))
attempt('tcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK), lambda s: s.connect(('127.0.0.1', {port})))
attempt('unix', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)
print('io_uring', 'ok' if fd >= 0 else errno.errorcode[ctypes.get_errno()])
""#
    )
}

#[tokio::test]
async fn network_off_refuses_mptcp_udp_raw_sockets_and_io_uring() {
    if !landlock_at_least("sockets", 4) || !python_available("sockets") {
        return;
    }
    let s = Scene::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for sandbox in [
        s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]),
        s.landlock_only(SandboxMode::WorkspaceWrite, false),
        s.sandbox(SandboxMode::Off, false, vec![]),
    ] {
        let tools = s.tools(sandbox.clone());
        let (o, _) = sh(&tools, &socket_probe(port)).await;
        let what = sandbox.summary();
        for refused in ["mptcp", "udp", "udp6", "raw", "packet", "netlink"] {
            assert!(
                o.contains(&format!("{refused} EACCES")),
                "{what}: {refused}: {o}"
            );
        }
        assert!(
            o.contains("tcp EACCES"),
            "{what}: Landlock refuses the port: {o}"
        );
        assert!(o.contains("unix ok"), "{what}: {o}");
        assert!(o.contains("io_uring EPERM"), "{what}: {o}");
    }
    // With the network on, sockets are the command's own business; io_uring stays refused.
    let tools = s.tools(s.sandbox(SandboxMode::WorkspaceWrite, true, vec![]));
    let (o, _) = sh(&tools, &socket_probe(port)).await;
    assert!(o.contains("udp ok") && o.contains("mptcp ok"), "{o}");
    assert!(o.contains("io_uring EPERM"), "{o}");
}

#[tokio::test]
async fn metadata_outside_the_writable_roots_cannot_be_changed() {
    if !landlock_at_least("metadata", 2) || !python_available("metadata") {
        return;
    }
    let s = Scene::new();
    let secret = s.outside.join("secret.txt");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&secret).unwrap();
    let file = q(&secret);
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly] {
        let tools = s.tools(s.sandbox(mode, false, vec![]));
        for cmd in [
            format!("chmod 777 {file}"),
            format!("touch -d 2001-01-01 {file}"),
            format!("python3 -c \"import os; os.setxattr({file}, 'user.evil', b'1')\""),
            format!("chown nobody {file}"),
        ] {
            let (o, stop) = sh(&tools, &cmd).await;
            assert_eq!(stop, StopReason::Failed, "{mode}: {cmd}: {o}");
        }
    }
    let after = std::fs::metadata(&secret).unwrap();
    assert_eq!(after.permissions().mode() & 0o7777, 0o600);
    assert_eq!(after.modified().unwrap(), before.modified().unwrap());
    assert!(xattr_names(&secret).is_empty());
}

fn xattr_names(path: &std::path::Path) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!("import os; print(os.listxattr({:?}))", path))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if text == "[]" {
        String::new()
    } else {
        text
    }
}

/// A process outside the sandbox standing in for penguin, with a secret in its environment.
struct Victim(Child);

impl Victim {
    fn start() -> Victim {
        Victim(
            Command::new("sleep")
                .arg("300")
                .env("VICTIM_SECRET", "victim-env-secret")
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let (_, rest) = stat.rsplit_once(')').unwrap();
        rest.trim_start().chars().next().unwrap()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_command_can_neither_signal_nor_inspect_penguin() {
    if !landlock_at_least("signals", 6) {
        return;
    }
    let s = Scene::new();
    let namespaced = s.sandbox(SandboxMode::WorkspaceWrite, false, vec![]);
    for sandbox in [
        namespaced.clone(),
        s.landlock_only(SandboxMode::WorkspaceWrite, false),
        s.landlock_only(SandboxMode::Off, false),
    ] {
        let victim = Victim::start();
        let pid = victim.pid();
        let tools = s.tools(sandbox.clone());
        let (o, _) = sh(
            &tools,
            &format!(
                "kill -STOP {pid}; kill -TERM {pid}; cat /proc/{pid}/environ /proc/$PPID/environ /proc/1/environ"
            ),
        )
        .await;
        let what = sandbox.summary();
        // Landlock's signal scope (ABI 6), or the PID namespace.
        assert!(matches!(victim.state(), 'S' | 'R'), "{what}: {o}");
        if sandbox.uses_namespaces() {
            // Landlock alone does not hide /proc/PID/environ (seen on 6.18): the PID
            // namespace does, and the gap is named without it.
            assert!(!o.contains("victim-env-secret"), "{what}: {o}");
            assert!(!o.contains("sk-"), "{what}: {o}");
        } else if sandbox.mode() != SandboxMode::Off {
            assert!(sandbox.gaps().contains(&Gap::Namespaces), "{what}");
        }
        // (With the filesystem `off`, reading is the command's, penguin's environment too:
        // only what penguin is given by the allowlist is kept from it, see above.)
    }
}

#[tokio::test]
async fn the_output_archive_never_follows_a_link_out_of_the_workspace() {
    let s = Scene::new();
    let config = ToolsConfig {
        max_output_chars: 100,
        sandbox: Sandbox::off(),
        ..ToolsConfig::default()
    };
    let tools = BuiltinTools::new(&s.ws, config).unwrap();
    let (o, _) = sh(
        &tools,
        &format!(
            "rm -rf .penguin; ln -s {} .penguin; seq 1 5000",
            q(&s.outside)
        ),
    )
    .await;
    assert!(o.contains("[output archive failed: "), "{o}");
    assert!(!s.outside.join("archive").exists(), "{o}");
    // A real directory again: the archive works.
    let (o, _) = sh(&tools, "rm .penguin; seq 1 5000").await;
    assert!(o.contains("[output archived: .penguin/archive/"), "{o}");
}
