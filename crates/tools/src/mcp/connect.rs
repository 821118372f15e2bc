//! Starting and reaching one MCP server: a stdio child leading its own session, off penguin's
//! terminal (optionally sandboxed), Streamable HTTP, or legacy HTTP+SSE; then its tool list,
//! within the server's connect budget.

use super::MAX_MESSAGE_BYTES;
use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::sync::watch;

use super::{sse, McpServer, McpTransport};
use crate::Sandbox;

/// Stderr kept per stdio server, to explain a failed start.
const STDERR_TAIL_CHARS: usize = 2048;

/// Why a stdio connection broke its framing; `None` while it has not.
type Broken = watch::Receiver<Option<String>>;

/// A stdio server's stdout with each line bounded by [`MAX_MESSAGE_BYTES`].
///
/// The SDK drops a longer line and reads on, so the call it answered would wait out its whole
/// timeout. Here the line that crosses the limit ends the stream with an error instead (the
/// SDK then closes the connection) and says why on `broken`, which the calls waiting on the
/// connection watch: they fail at once, naming the limit. Complete lines read before it are
/// still delivered.
struct BoundedLines<R> {
    inner: R,
    /// Bytes of the current line so far.
    line: usize,
    broken: watch::Sender<Option<String>>,
}

impl<R> BoundedLines<R> {
    fn new(inner: R) -> (BoundedLines<R>, Broken) {
        let (broken, watcher) = watch::channel(None);
        let reader = BoundedLines {
            inner,
            line: 0,
            broken,
        };
        (reader, watcher)
    }

    fn error(&self) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            self.broken.borrow().clone().unwrap_or_default(),
        )
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.broken.borrow().is_some() {
            return Poll::Ready(Err(this.error()));
        }
        let start = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut line = this.line;
        // Where the last complete line of this read ends, relative to `start`.
        let mut complete = 0;
        for (i, b) in buf.filled()[start..].iter().enumerate() {
            line += 1;
            if line > MAX_MESSAGE_BYTES {
                this.broken.send_replace(Some(format!(
                    "sent a message over {} MiB, the most one MCP message may take",
                    MAX_MESSAGE_BYTES / (1024 * 1024)
                )));
                buf.set_filled(start + complete);
                return if complete > 0 {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Ready(Err(this.error()))
                };
            }
            if *b == b'\n' {
                line = 0;
                complete = i + 1;
            }
        }
        this.line = line;
        Poll::Ready(Ok(()))
    }
}

/// Kills a stdio server's whole process group when dropped, so `npx`-style launchers do not
/// leave their real server behind.
struct ChildGuard {
    child: tokio::process::Child,
}

impl ChildGuard {
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// One live connection.
pub(super) struct Connection {
    pub(super) service: RunningService<RoleClient, ()>,
    child: Option<Mutex<ChildGuard>>,
    stderr: Arc<Mutex<String>>,
    /// stdio: why the server's output broke its framing, once it did.
    broken: Option<Broken>,
    pub(super) dead: AtomicBool,
}

impl Connection {
    /// Why the server broke the connection's framing, if it did.
    pub(super) fn broken_reason(&self) -> Option<String> {
        self.broken.as_ref().and_then(|b| b.borrow().clone())
    }

    /// Resolves with the reason once the server breaks the connection's framing; never for a
    /// connection that does not. The reason is set before the SDK sees the stream fail, so a
    /// `biased` select that polls this first names the limit rather than a closed transport.
    pub(super) async fn broken(&self) -> String {
        broken(self.broken.clone()).await
    }

    pub(super) fn alive(&self) -> bool {
        if self.dead.load(Ordering::Relaxed)
            || self.service.is_closed()
            || self.broken_reason().is_some()
        {
            return false;
        }
        match &self.child {
            Some(child) => lock(child).exit_status().is_none(),
            None => true,
        }
    }

    /// Why it is gone, for the failed output.
    pub(super) fn gone_detail(&self) -> String {
        let status = self
            .child
            .as_ref()
            .and_then(|c| lock(c).exit_status())
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        let broken = self
            .broken_reason()
            .map(|r| format!("; the server {r}"))
            .unwrap_or_default();
        let tail = lock(&self.stderr).trim().to_owned();
        if tail.is_empty() {
            format!("{status}{broken}")
        } else {
            format!("{status}{broken}; server stderr: {tail}")
        }
    }
}

async fn broken(watcher: Option<Broken>) -> String {
    if let Some(mut watcher) = watcher {
        if let Ok(reason) = watcher.wait_for(Option::is_some).await {
            return reason.clone().unwrap_or_default();
        }
    }
    std::future::pending().await
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn spawn_stdio(
    server: &McpServer,
    workspace: &Path,
    sandbox: &Sandbox,
) -> Result<
    (
        RunningService<RoleClient, ()>,
        ChildGuard,
        Arc<Mutex<String>>,
        Broken,
    ),
    String,
> {
    let McpTransport::Stdio {
        command,
        args,
        env,
        cwd,
        sandbox: confined,
    } = &server.transport
    else {
        unreachable!("spawn_stdio is only called for stdio servers")
    };
    // Unconfined servers still get the environment allowlist, never penguin's secrets.
    let unconfined;
    let sandbox = if *confined {
        sandbox
    } else {
        unconfined = sandbox.unconfined();
        &unconfined
    };
    let spawned = sandbox.start(command, workspace, |cmd| {
        cmd.args(args)
            .envs(env)
            .current_dir(match cwd {
                Some(dir) => workspace.join(dir),
                None => workspace.to_path_buf(),
            })
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // No process group here: the sandbox makes the server lead a session of its own,
            // off penguin's terminal, and the guard signals that session's group.
            .kill_on_drop(true);
    });
    let mut child = spawned.map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let stdin = child.stdin.take().ok_or("no stdin pipe")?;
    let stderr = child.stderr.take();
    let guard = ChildGuard { child };
    let tail = Arc::new(Mutex::new(String::new()));
    if let Some(mut stderr) = stderr {
        let tail = tail.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = lock(&tail);
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
                let excess = t.chars().count().saturating_sub(STDERR_TAIL_CHARS);
                if excess > 0 {
                    let cut = t.char_indices().nth(excess).map_or(t.len(), |(i, _)| i);
                    t.drain(..cut);
                }
            }
        });
    }
    let (stdout, broken_watch) = BoundedLines::new(stdout);
    let watcher = broken_watch.clone();
    let service = tokio::select! {
        biased;
        reason = broken(Some(watcher)) => return Err(format!("the server {reason}")),
        served = ().serve((stdout, stdin)) => served.map_err(|e| e.to_string())?,
    };
    Ok((service, guard, tail, broken_watch))
}

/// Connects one server and lists its tools, within its connect budget.
pub(super) async fn connect_server(
    server: &McpServer,
    workspace: &Path,
    sandbox: &Sandbox,
) -> Result<(Connection, Vec<Value>), String> {
    let attempt = async {
        let (service, child, stderr, broken) = match &server.transport {
            McpTransport::Stdio { .. } => {
                let (service, child, stderr, broken) =
                    spawn_stdio(server, workspace, sandbox).await?;
                (service, Some(Mutex::new(child)), stderr, Some(broken))
            }
            McpTransport::Http { url, headers } => {
                penguin_llm_providers::http::install_tls_provider();
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    if let (Ok(k), Ok(v)) = (
                        http::HeaderName::try_from(k.as_str()),
                        http::HeaderValue::try_from(v.as_str()),
                    ) {
                        custom.insert(k, v);
                    }
                }
                let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
                let service = ().serve(transport).await.map_err(|e| e.to_string())?;
                (service, None, Arc::default(), None)
            }
            McpTransport::Sse { url, headers } => {
                let pair = sse::connect(url, headers).await?;
                let service = ().serve(pair).await.map_err(|e| e.to_string())?;
                (service, None, Arc::default(), None)
            }
        };
        let conn = Connection {
            service,
            child,
            stderr,
            broken,
            dead: AtomicBool::new(false),
        };
        let tools = tokio::select! {
            biased;
            reason = conn.broken() => return Err(format!("tools/list: the server {reason}")),
            listed = conn.service.peer().list_all_tools() => {
                listed.map_err(|e| format!("tools/list: {e}"))?
            }
        };
        let tools = tools
            .iter()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect();
        Ok::<_, String>((conn, tools))
    };
    // The stderr tail explains most failed starts ("command not found", a stack trace).
    match tokio::time::timeout(server.connect_timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer within {} ms",
            server.connect_timeout.as_millis()
        )),
    }
}
