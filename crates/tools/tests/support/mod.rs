//! What the sandbox tests share: a scene with a workspace, a temp directory and a directory
//! outside both, and one-call helpers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use penguin_engine::{CancellationToken, Environment, ToolCallRequest};
use penguin_omni_protocol::{build, ModelPayload, StopReason};
use penguin_tools::sandbox::{Host, Landlock, Namespaces};
use penguin_tools::{BuiltinTools, Sandbox, SandboxMode, SandboxRequest, ToolsConfig};
use serde_json::json;

pub const ID: &str = "call_sb";
pub const SECRET: &str = "outside, untouched\n";
/// The server token in the scene's data root.
pub const TOKEN: &str = "tok-0123456789abcdef";
/// Its config.
pub const CONFIG: &str = "[sandbox]\nmode = \"workspace-write\"\n";

/// True when this kernel's Landlock has at least ABI `min`; otherwise says why the test skips.
pub fn landlock_at_least(test: &str, min: u8) -> bool {
    match Landlock::probe() {
        Landlock::Abi(n) if n >= min => true,
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: needs Landlock ABI {min}, and {other}"
            );
            eprintln!("SKIPPED {test}: needs Landlock ABI {min}, and {other}");
            false
        }
    }
}

/// A workspace, a private temp directory and a directory outside both, in one scratch dir;
/// `outside/secret.txt` holds [`SECRET`].
pub struct Scene {
    _base: tempfile::TempDir,
    pub ws: PathBuf,
    pub tmp: PathBuf,
    pub outside: PathBuf,
    /// penguin's data root, inside the workspace (penguin run from `$HOME`): protected.
    pub data: PathBuf,
}

impl Scene {
    pub fn new() -> Scene {
        let base = tempfile::tempdir().expect("tempdir");
        let root = base.path().canonicalize().expect("canonical");
        let (ws, tmp, outside) = (root.join("ws"), root.join("tmp"), root.join("outside"));
        for d in [&ws, &tmp, &outside] {
            std::fs::create_dir(d).expect("mkdir");
        }
        std::fs::write(outside.join("secret.txt"), SECRET).expect("secret");
        let data = ws.join(".penguin-data");
        std::fs::create_dir(&data).expect("mkdir");
        std::fs::write(data.join("server-token"), TOKEN).expect("token");
        std::fs::write(data.join("config.toml"), CONFIG).expect("config");
        Scene {
            _base: base,
            ws,
            tmp,
            outside,
            data,
        }
    }

    pub fn sandbox(&self, mode: SandboxMode, network: bool, allow_ports: Vec<u16>) -> Sandbox {
        self.sandbox_on(Host::probe(), mode, network, allow_ports)
    }

    /// The same, on a host without namespaces: Landlock and seccomp only.
    pub fn landlock_only(&self, mode: SandboxMode, network: bool) -> Sandbox {
        let host = Host {
            namespaces: Namespaces::Unavailable("left out by the test".into()),
            ..Host::probe()
        };
        Sandbox::resolve_for(&self.request(mode, network, Vec::new()), host)
            .expect("Landlock and seccomp are enforced")
    }

    fn sandbox_on(
        &self,
        host: Host,
        mode: SandboxMode,
        network: bool,
        allow_ports: Vec<u16>,
    ) -> Sandbox {
        Sandbox::resolve_for(
            &SandboxRequest {
                strict: true,
                ..self.request(mode, network, allow_ports)
            },
            host,
        )
        .expect(
            "this kernel enforces the sandbox fully (scripts/install-sandbox.sh installs bubblewrap)",
        )
    }

    fn request(&self, mode: SandboxMode, network: bool, allow_ports: Vec<u16>) -> SandboxRequest {
        SandboxRequest {
            mode: Some(mode),
            network,
            allow_ports,
            // Not the system temp directory: the scratch dirs live there, and "outside" must
            // really be outside everything writable.
            temp_dir: Some(self.tmp.clone()),
            protected: vec![self.data.clone()],
            ..SandboxRequest::default()
        }
    }

    pub fn tools(&self, sandbox: Sandbox) -> BuiltinTools {
        let config = ToolsConfig {
            sandbox,
            ..ToolsConfig::default()
        };
        BuiltinTools::new(&self.ws, config).expect("workspace")
    }

    pub fn secret(&self) -> String {
        std::fs::read_to_string(self.outside.join("secret.txt")).expect("secret still there")
    }
}

/// Runs one tool call; returns the complete output and its stop reason.
pub async fn call(
    tools: &BuiltinTools,
    name: &str,
    args: serde_json::Value,
) -> (String, StopReason) {
    let request = ToolCallRequest {
        call: build::tool_call(name, args.to_string(), ID, StopReason::Completed, None),
        cancel: CancellationToken::new(),
        approver: None,
        thinking_level: None,
    };
    let mut sink = Vec::new();
    tools.execute(request, &mut sink).await;
    let last = sink.last().expect("an output");
    let Some(ModelPayload::ToolCallOutput(done)) = last.model() else {
        panic!("expected the complete output last, got {last:?}");
    };
    (done.output.clone(), done.stop_reason.expect("stop reason"))
}

pub async fn sh(tools: &BuiltinTools, cmd: &str) -> (String, StopReason) {
    call(tools, "exec_command", json!({ "cmd": cmd })).await
}

pub fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// Connects to `port` with a Python socket; prints `connected` on success.
pub fn python_connect(port: u16) -> String {
    format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\""
    )
}

pub fn python_available(test: &str) -> bool {
    program_available("python3", test)
}

/// Whether `program --version` runs; a test without it is skipped, but never in CI.
pub fn program_available(program: &str, test: &str) -> bool {
    let ok = std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {program} is not installed"
        );
        eprintln!("SKIPPED {test}: {program} is not installed");
    }
    ok
}

/// Whether a live process (not a zombie) has `arg` among its arguments: how a test finds a
/// process started inside a PID namespace, whose own pid means nothing outside it.
pub fn running_with_argument(arg: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let has = cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes());
        let live = std::fs::read_to_string(p.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
        });
        has && live
    })
}
