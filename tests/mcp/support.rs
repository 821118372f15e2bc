//! What the MCP tests of `penguin-tools` and of the `penguin` command share: where the npm
//! servers are (`scripts/install-mcp-servers.sh`, `PENGUIN_MCP_SERVERS`), the failure fixture,
//! and `server-everything` started in an HTTP mode. Included by those test files (`#[path]`).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The installed servers; `None` (said on stderr) when the tests cannot run here.
pub fn servers_dir() -> Option<PathBuf> {
    match std::env::var_os("PENGUIN_MCP_SERVERS") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            let why = "PENGUIN_MCP_SERVERS is not set (scripts/install-mcp-servers.sh)";
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// An installed server's executable.
pub fn bin(dir: &Path, name: &str) -> String {
    dir.join("node_modules/.bin")
        .join(name)
        .display()
        .to_string()
}

/// `tests/mcp/fixture-server.mjs`, from any crate of the workspace.
pub fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/fixture-server.mjs")
        .display()
        .to_string()
}

/// A server process, killed when dropped.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `server-everything` in an HTTP mode (`streamableHttp`, `sse`) and waits until its
/// port accepts.
pub fn everything_http(dir: &Path, mode: &str) -> (Server, u16) {
    let port = free_port();
    let child = Command::new(bin(dir, "mcp-server-everything"))
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{mode} server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}
