//! Running one task: approvals, Ctrl-C, rendering; `penguin run` and `penguin resume`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use penguin::engine::{AllowAll, Approver, CancellationToken, RunOptions};
use penguin::omni_protocol::{build, Frame, OmniMessage};
use penguin::session::Session;

use penguin::tools::SandboxBypass;

use crate::args::{ModelArgs, SandboxArgs, TaskArgs};
use crate::console::{stdout_is_terminal, Console, TerminalApprover};
use crate::render::{status_text, Renderer};
use crate::setup::{
    new_session, open_session, pick_source, session_line, workspace_dir, Confinement,
};

/// `bypass`: the grants of the session's tools, when a command can be run once outside the
/// sandbox.
pub(crate) fn approver(
    task: &TaskArgs,
    console: &Console,
    bypass: Option<SandboxBypass>,
) -> Arc<dyn Approver> {
    if task.yes {
        return Arc::new(AllowAll);
    }
    if !std::io::stdin().is_terminal() {
        eprintln!(
            "penguin: stdin is not a terminal: tool calls are asked there and denied when it ends; pass --yes to allow them without asking"
        );
    }
    Arc::new(TerminalApprover::new(console.clone()).with_bypass(bypass))
}

/// The first Ctrl-C interrupts `cancel`'s task; a second one exits at once, after syncing the
/// trace so nothing already streamed is lost.
pub(crate) fn interrupt_on_ctrl_c(
    cancel: CancellationToken,
    writer: penguin::trace_store::Writer,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupting (Ctrl-C again to exit)");
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tokio::task::spawn_blocking(move || writer.flush()).await;
                // Exiting skips destructors: end the session's background commands first.
                penguin::tools::kill_all_background_processes();
                std::process::exit(130);
            }
        }
    })
}

/// Runs one task in `session`, rendering it (or printing JSON lines). Ctrl-C interrupts the
/// task; a second Ctrl-C exits at once.
pub(crate) async fn run_task(
    session: &mut Session,
    input: Vec<OmniMessage>,
    task: &TaskArgs,
    approver: Arc<dyn Approver>,
    repl: Option<(&Console, &Arc<std::sync::atomic::AtomicBool>)>,
) -> Result<bool, String> {
    let cancel = CancellationToken::new();
    let ctrl_c = interrupt_on_ctrl_c(cancel.clone(), session.writer().clone());
    let options = RunOptions {
        approver: Some(approver),
        cancel: cancel.clone(),
        thinking_level: task.thinking,
    };
    let mut stream = session.run(input, options).map_err(|e| e.to_string())?;
    let control = repl.map(|(console, quit)| Control {
        lines: console.task_lines(),
        console: console.clone(),
        engine: session.engine().clone(),
        cancel: cancel.clone(),
        quit: quit.clone(),
    });
    let ok = render(&mut stream, task.jsonl, control, &cancel).await?;
    ctrl_c.abort();
    if let Err(e) = session.writer().flush() {
        eprintln!("penguin: the trace could not be synced: {e}");
    }
    let failed = session.writer().failed_writes();
    if failed > 0 {
        eprintln!(
            "penguin: {failed} trace record(s) of session {} could not be written (see the log above); its history and a resume will miss them",
            session.id()
        );
    }
    // A task whose Trace lost records did not complete cleanly, whatever the stream said.
    Ok(ok && failed == 0)
}

/// What a REPL user can do while a task runs: type to steer it, `/abort` to interrupt it.
pub(crate) struct Control {
    lines: crate::console::TaskLines,
    console: Console,
    engine: penguin::engine::Engine,
    cancel: CancellationToken,
    /// Set by `/quit` during a task: the REPL leaves once the task has ended.
    quit: Arc<std::sync::atomic::AtomicBool>,
}

impl Control {
    /// A line typed during the task. What the task cannot use (other commands, text after the
    /// run ended) goes back to the prompt.
    fn line(&self, line: String) {
        match line.trim() {
            "" => {}
            "/abort" => {
                eprintln!("interrupting");
                self.cancel.cancel();
            }
            "/quit" | "/exit" => {
                eprintln!("interrupting, then leaving");
                self.quit.store(true, std::sync::atomic::Ordering::Relaxed);
                self.cancel.cancel();
            }
            cmd if cmd.starts_with('/') => self.console.requeue(line),
            text => match self.engine.steer(vec![build::user_text(text)]) {
                penguin::engine::Steered::Queued(_) => {
                    eprintln!("(steering: sent to the model after the current turn)")
                }
                penguin::engine::Steered::Empty => {}
                penguin::engine::Steered::NotRunning => self.console.requeue(line),
            },
        }
    }
}

/// Shows a task's stream (rendered, or raw JSON lines) until it ends; with `control`, lines
/// typed meanwhile steer or abort it. Returns whether the task completed.
///
/// When stdout is closed (`penguin run --jsonl | head -1`) nobody is reading any more: the task
/// is interrupted, the rest of its stream still reaches the Trace, and nothing more is printed.
pub(crate) async fn render(
    stream: &mut futures::stream::BoxStream<'static, Frame>,
    jsonl: bool,
    control: Option<Control>,
    cancel: &CancellationToken,
) -> Result<bool, String> {
    let tty = stdout_is_terminal();
    let status_on = !jsonl && tty && std::io::stderr().is_terminal();
    let mut r = Renderer::new(std::io::stdout(), tty);
    let mut summary = crate::render::RunSummary::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(120));
    let mut since = Instant::now();
    let mut shown = false;
    let mut last_waiting = r.waiting().clone();
    let has_control = control.is_some();
    let mut control = control;
    let mut closed = false;
    loop {
        tokio::select! {
            frame = stream.next() => {
                let Some(frame) = frame else { break };
                if shown {
                    eprint!("\r\x1b[2K");
                    shown = false;
                }
                if closed {
                    continue;
                }
                let written = if jsonl {
                    summary.observe(&frame);
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{}", frame.json()).and_then(|()| out.flush())
                } else {
                    r.frame(&frame)
                };
                match written {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        closed = true;
                        cancel.cancel();
                        continue;
                    }
                    Err(e) => return Err(format!("stdout: {e}")),
                }
                if *r.waiting() != last_waiting {
                    last_waiting = r.waiting().clone();
                    since = Instant::now();
                }
            }
            line = async { control.as_mut().expect("guarded").lines.next().await }, if has_control => {
                control.as_ref().expect("guarded").line(line);
            }
            _ = tick.tick(), if status_on => {
                if let Some(text) = status_text(r.waiting(), since.elapsed().as_millis() as u64) {
                    eprint!("\r\x1b[2K\x1b[2m{text}\x1b[0m");
                    shown = true;
                }
            }
        }
    }
    if shown {
        eprint!("\r\x1b[2K");
    }
    Ok(if closed {
        false
    } else if jsonl {
        summary.succeeded()
    } else {
        r.summary().succeeded()
    })
}

/// Runs one prompt in `session`; the exit code says whether the task completed.
pub(crate) async fn one_task(
    session: &mut Session,
    prompt: String,
    task: &TaskArgs,
    bypass: Option<SandboxBypass>,
) -> Result<ExitCode, String> {
    let console = Console::stdin();
    let ok = run_task(
        session,
        vec![build::user_text(prompt)],
        task,
        approver(task, &console, bypass),
        None,
    )
    .await?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The prompt of `run`/`resume`: the argument, else piped stdin, else the demo question. A
/// blank prompt is refused before anything is sent to a model.
pub(crate) fn read_prompt(prompt: Option<String>) -> Result<String, String> {
    let prompt = match prompt {
        Some(p) => p,
        None if !std::io::stdin().is_terminal() => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| format!("stdin: {e}"))?;
            s.trim().to_owned()
        }
        None => "Look around the workspace and tell me what it is.".to_owned(),
    };
    if prompt.trim().is_empty() {
        return Err(
            "the prompt is empty: say what the task is, e.g. penguin run \"list the files\"".into(),
        );
    }
    Ok(prompt)
}

pub(crate) async fn run(
    prompt: Option<String>,
    model: ModelArgs,
    task: TaskArgs,
    sandbox: SandboxArgs,
    workspace: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let agent = crate::mcp::agent(&model.mcp)?;
    let workspace = workspace_dir(workspace)?;
    // Read a piped prompt before the console takes stdin over for approvals.
    let prompt = read_prompt(prompt)?;
    let confinement = Confinement::resolve(&agent, &sandbox)?;
    let mut session = new_session(
        &agent,
        pick_source(&agent, &model)?,
        &workspace,
        &confinement,
    )?;
    if !task.jsonl {
        if std::io::stderr().is_terminal() {
            eprintln!("\x1b[2m{}\x1b[0m", session_line(&session));
        } else {
            eprintln!("{}", session_line(&session));
        }
    }
    one_task(&mut session, prompt, &task, confinement.bypass()).await
}

pub(crate) async fn resume(
    id: String,
    prompt: Option<String>,
    model: ModelArgs,
    task: TaskArgs,
    sandbox: SandboxArgs,
) -> Result<ExitCode, String> {
    let agent = crate::mcp::agent(&model.mcp)?;
    let confinement = Confinement::resolve(&agent, &sandbox)?;
    let mut session = open_session(&agent, &id, &model, &confinement)?;
    let Some(prompt) = prompt else {
        return crate::chat::repl(session, task, confinement.bypass()).await;
    };
    let prompt = read_prompt(Some(prompt))?;
    if !task.jsonl {
        eprintln!("{}", session_line(&session));
    }
    one_task(&mut session, prompt, &task, confinement.bypass()).await
}
