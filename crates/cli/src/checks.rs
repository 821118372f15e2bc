//! Commands that check things: `scenario run`, `check-stream`, `trace check` (offline), and
//! `mcp list` (connects the configured MCP servers).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::untrusted::{errln, outln, Untrusted};
use penguin::engine::{CancellationToken, Environment, Permission};
use penguin::omni_protocol::validator::validate_jsonl;
use penguin::omni_protocol::McpConnectStatus;
use penguin::scenario::Scenario;
use penguin::tools::mcp::McpEnvironment;
use penguin::tools::{BuiltinTools, ToolsConfig};
use penguin::trace_store::{check_trace, Severity};

#[cfg(not(feature = "scenario"))]
pub(crate) fn scenario_run(
    _path: PathBuf,
    _trace: Option<PathBuf>,
    _requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    Err("this penguin was built without the `scenario` feature; build it with `cargo build -p penguin-cli` (the feature is on by default)".into())
}

#[cfg(feature = "scenario")]
pub(crate) fn scenario_run(
    path: PathBuf,
    trace: Option<PathBuf>,
    requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let scenario = Scenario::from_file(&path).map_err(|e| e.to_string())?;
    let trace_sink = penguin::scenario::MemoryTrace::default();
    let mut stdout = OffThreadStdout::start().map_err(|e| format!("stdout: {e}"))?;
    let mut written = Ok(());
    let requests_log = penguin::scenario::run_scenario_streaming(
        scenario,
        std::sync::Arc::new(trace_sink.clone()),
        &mut |frame| {
            if written.is_ok() {
                // Bytes, not `writeln!`: the formatting machinery cost 6% of a 227,000-line run.
                written = stdout
                    .write_all(crate::untrusted::json_line(frame.json()).as_bytes())
                    .and_then(|()| stdout.write_all(b"\n"));
            }
        },
    )
    .map_err(|e| format!("cannot start the runtime: {e}"))?;
    written
        .and_then(|()| stdout.finish())
        .map_err(|e| format!("stdout: {e}"))?;
    if let Some(p) = trace {
        let records = trace_sink.records();
        write_lines(
            &p,
            penguin::scenario::trace_lines(&records, &trace_sink.rotations()),
        )?;
    }
    if let Some(p) = requests {
        let lines = requests_log
            .iter()
            .map(|input| serde_json::json!({ "input": input }).to_string());
        write_lines(&p, lines)?;
    }
    // The process ends here: the kernel drops the whole heap at once, faster than 17,000
    // frames and every request's messages are freed one by one.
    std::mem::forget((requests_log, trace_sink));
    Ok(ExitCode::SUCCESS)
}

/// Writes `lines` to `path`, each followed by a newline.
#[cfg(feature = "scenario")]
fn write_lines<S: AsRef<str>>(
    path: &Path,
    lines: impl IntoIterator<Item = S>,
) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(failed)?);
    for line in lines {
        out.write_all(line.as_ref().as_bytes()).map_err(failed)?;
        out.write_all(b"\n").map_err(failed)?;
    }
    out.flush().map_err(failed)
}

pub(crate) fn check_stream(path: &Path) -> Result<ExitCode, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report = validate_jsonl(std::io::BufReader::new(file));
    for v in &report.violations {
        outln!("{}: {}", path.display(), Untrusted(&v.to_string()));
    }
    if report.is_ok() {
        outln!("{}: ok, {} messages", path.display(), report.messages);
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

pub(crate) fn trace_check(files: &[PathBuf]) -> Result<ExitCode, String> {
    let mut failed = false;
    for f in files {
        let problems = check_trace(f);
        for p in &problems {
            outln!("{}", Untrusted(&p.to_string()));
            failed |= p.severity == Severity::Error;
        }
        if problems.is_empty() {
            outln!("{}: ok", f.display());
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Stdout written on a thread of its own: the run fills buffers and hands them over, so
/// copying a 44 MB stream into the kernel is not on the run's thread. Buffers come back to be
/// refilled, and at most a few are in flight.
#[cfg(feature = "scenario")]
struct OffThreadStdout {
    buf: Vec<u8>,
    full: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    empty: std::sync::mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

#[cfg(feature = "scenario")]
impl OffThreadStdout {
    const BUFFER: usize = 256 << 10;

    fn start() -> std::io::Result<Self> {
        let (full, to_write) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        let (give_back, empty) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("stdout".into())
            .spawn(move || {
                let mut out = std::io::stdout().lock();
                for mut buf in to_write {
                    out.write_all(&buf)?;
                    buf.clear();
                    let _ = give_back.send(buf);
                }
                out.flush()
            })?;
        Ok(OffThreadStdout {
            buf: Vec::with_capacity(Self::BUFFER),
            full: Some(full),
            empty,
            thread: Some(thread),
        })
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= Self::BUFFER {
            self.hand_over()?;
        }
        Ok(())
    }

    fn hand_over(&mut self) -> std::io::Result<()> {
        let next = self
            .empty
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(Self::BUFFER));
        let buf = std::mem::replace(&mut self.buf, next);
        let sent = self.full.as_ref().is_some_and(|tx| tx.send(buf).is_ok());
        if sent {
            Ok(())
        } else {
            // The thread stopped: its error says why.
            self.finish()
        }
    }

    /// Writes what is left and waits for the thread; its error if a write failed.
    fn finish(&mut self) -> std::io::Result<()> {
        if let Some(tx) = self.full.take() {
            let _ = tx.send(std::mem::take(&mut self.buf));
        }
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(std::io::Error::other("the stdout thread panicked")),
            None => Err(std::io::Error::other("stdout is closed")),
        }
    }
}

/// `penguin mcp list`.
pub(crate) async fn mcp_list(
    flags: Vec<String>,
    workspace: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode, String> {
    let model = crate::args::ModelArgs {
        mcp: flags,
        ..Default::default()
    };
    let launcher = crate::setup::launcher(&model, &Default::default())?;
    let agent = launcher.agent();
    let workspace = crate::setup::workspace_dir(workspace)?;
    if agent.config.mcp_servers.is_empty() {
        outln!(
            "no MCP servers configured: add [[mcp_servers]] to {} or pass --mcp NAME=COMMAND",
            agent.location.root.join("config.toml").display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // No built-in tools: only the servers' tools are listed.
    let none = ToolsConfig {
        enabled: Vec::new(),
        ..ToolsConfig::default()
    };
    let inner = BuiltinTools::new(&workspace, none)
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))?;
    // Servers with `sandbox = true` start confined here too.
    let sandbox = launcher.confinement().map_err(|e| e.to_string())?.sandbox;
    let env = McpEnvironment::new(
        Arc::new(inner),
        &agent.config.mcp_servers,
        &workspace,
        sandbox,
        ToolsConfig::default(),
    )
    // Each server's line says why it failed.
    .with_warnings(Arc::new(|_| {}));
    for w in env.config_warnings() {
        errln!("penguin: {}", Untrusted(&w.to_string()));
    }
    let results = env
        .connect(&CancellationToken::new())
        .await
        .unwrap_or_default();
    let all_ok = results
        .iter()
        .all(|r| r.status == McpConnectStatus::Completed);
    if json {
        let out: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["tool_list"] =
                    serde_json::to_value(env.server_tools(&r.server)).unwrap_or_default();
                v
            })
            .collect();
        let text = serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?;
        outln!("{}", crate::untrusted::json_line(&text));
    } else {
        for r in &results {
            let status = match r.status {
                McpConnectStatus::Completed => "connected",
                McpConnectStatus::Failed => "failed",
                McpConnectStatus::Aborted => "aborted",
            };
            let tools = env.server_tools(&r.server);
            let width = terminal_width();
            let detail = match &r.error {
                Some(_) => String::new(),
                None => format!("{} tools", tools.len()),
            };
            outln!(
                "{:<16} {:<5} {:<9} {:>6} ms  {detail}",
                crate::untrusted::neutralise(&r.server),
                r.transport,
                status,
                r.duration_ms
            );
            // An error is wrapped under its server's line: all of it matters.
            if let Some(e) = &r.error {
                let e = crate::untrusted::neutralise(e);
                for line in wrap(&e, width.saturating_sub(4).max(40)) {
                    outln!("    {line}");
                }
            }
            // A description is cut to the terminal's width (`--json` has it whole).
            for t in tools {
                let perm = match env.permission(&t.name) {
                    Permission::Read => "r ",
                    Permission::ReadWrite => "rw",
                };
                let first_line = t.description.lines().next().unwrap_or_default();
                let head = format!("  {perm}  {}  ", Untrusted(&t.name));
                let room = width.saturating_sub(head.chars().count()).max(20);
                outln!("{head}{}", crate::describe::clip(first_line, room));
            }
        }
    }
    env.shutdown().await;
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The width `mcp list` fits its lines to: `COLUMNS` when set, else 100.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|n| *n >= 40)
        .unwrap_or(100)
}

/// `text` in lines of at most `width` characters, broken at spaces where it can be.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word = word.to_owned();
        while word.chars().count() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            let head: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            lines.push(head);
        }
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod wrap_tests {
    #[test]
    fn long_text_wraps_at_spaces_and_long_words_are_split() {
        let text = format!("{}end", "word ".repeat(30));
        let lines = super::wrap(&text, 40);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert_eq!(lines.join(" "), text);
        assert_eq!(super::wrap(&"x".repeat(90), 40).len(), 3);
    }
}
