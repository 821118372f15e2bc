//! Running one task: approvals, Ctrl-C, rendering; `penguin run` and `penguin resume`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use penguin::engine::{AllowAll, Approver, CancellationToken, Environment, RunOptions};
use penguin::omni_protocol::{build, Body, Frame, ModelPayload, OmniMessage, Role};
use penguin::session::Session;

use crate::approve::TerminalApprover;
use crate::args::{ModelArgs, SandboxArgs, TaskArgs};
use crate::console::Console;
use crate::render::{color_for, status_text, user_text_display, Renderer, UserText};
use crate::setup::{ready, session_line, Which};
use crate::untrusted::style::{DIM, RESET};
use crate::untrusted::{errln, json_line, Untrusted};

/// The approver of a task (its approval mode: `--approve`, `--yes`, `[session] approval`),
/// and the terminal one when it asks (for `/approvals`). `tools`: the session's, which say
/// which calls are read-only and which may run once outside their sandbox.
pub(crate) fn approver(
    task: &TaskArgs,
    console: &Console,
    tools: Arc<dyn Environment>,
) -> (Arc<dyn Approver>, Option<Arc<TerminalApprover>>) {
    use penguin::config::ApprovalMode;
    let mode = task.approval();
    match mode {
        // A hook may still ask about a call: at a terminal, the person there answers; without
        // one, nobody can, and the call is denied (`docs/hooks.md`).
        ApprovalMode::AllowAll if std::io::stdin().is_terminal() => {
            let person = TerminalApprover::new(console.clone()).offering_unsandboxed(tools);
            return (
                Arc::new(crate::approve::AllowAllAsking(Arc::new(person))),
                None,
            );
        }
        ApprovalMode::AllowAll => return (Arc::new(AllowAll), None),
        ApprovalMode::DenyAll => return (Arc::new(crate::approve::DenyAll), None),
        ApprovalMode::ReadOnly | ApprovalMode::AlwaysAsk => {}
    }
    if !std::io::stdin().is_terminal() {
        errln!(
            "penguin: {}",
            nobody_to_ask(mode, PROMPT_FROM_STDIN.load(Ordering::SeqCst))
        );
    }
    let asking =
        Arc::new(TerminalApprover::new(console.clone()).offering_unsandboxed(tools.clone()));
    let approver: Arc<dyn Approver> = match mode {
        ApprovalMode::ReadOnly => Arc::new(crate::approve::ReadOnly {
            tools,
            ask: asking.clone(),
        }),
        _ => asking.clone(),
    };
    (approver, Some(asking))
}

/// What is said when a mode that asks runs without a terminal: who answers (the lines of
/// stdin, or nobody when stdin carried the prompt), and how to choose instead.
fn nobody_to_ask(mode: penguin::config::ApprovalMode, prompt_on_stdin: bool) -> String {
    let which = match mode {
        penguin::config::ApprovalMode::ReadOnly => "calls of tools that are not read-only",
        _ => "tool calls",
    };
    let who = if prompt_on_stdin {
        format!("stdin is not a terminal and carried the prompt, so there is nobody to ask: {which} are denied")
    } else {
        format!("stdin is not a terminal, so there is nobody to ask: {which} are asked there, one answer a line (y/n/a), and denied once it ends")
    };
    format!(
        "approval mode {}: {who}. To choose without asking, pass --approve allow-all, read-only or deny-all (--yes is allow-all), or set [session] approval in config.toml",
        mode.as_str()
    )
}

/// Set when `run`'s prompt was read from stdin, which then holds no answers.
static PROMPT_FROM_STDIN: AtomicBool = AtomicBool::new(false);

/// Set when Ctrl-C interrupted a task: `run` then exits with 130, as a shell expects of a
/// command stopped by SIGINT.
pub(crate) static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The first Ctrl-C interrupts `cancel`'s task; a second one exits at once, after syncing the
/// trace so nothing already streamed is lost.
pub(crate) fn interrupt_on_ctrl_c(
    cancel: CancellationToken,
    writer: penguin::trace_store::Writer,
) -> tokio::task::JoinHandle<()> {
    // Registered before the task starts, not at its first poll: a Ctrl-C that comes as the
    // first messages print must interrupt, not kill penguin with the default action.
    let sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
    tokio::spawn(async move {
        let Ok(mut sigint) = sigint else { return };
        if sigint.recv().await.is_some() {
            INTERRUPTED.store(true, Ordering::SeqCst);
            errln!("\ninterrupting (Ctrl-C again to exit)");
            cancel.cancel();
            if sigint.recv().await.is_some() {
                crate::term::restore();
                let _ = tokio::task::spawn_blocking(move || writer.flush()).await;
                // Exiting skips destructors: end the session's background commands first.
                penguin::tools::kill_all_background_processes();
                std::process::exit(130);
            }
        }
    })
}

/// How a task ended.
#[derive(Debug, Default)]
pub(crate) struct TaskEnd {
    /// It completed, and its trace is whole.
    pub(crate) ok: bool,
    /// Steering typed during it that never reached the model (it ended first).
    pub(crate) undelivered: Vec<String>,
}

/// Runs one task in `session`, rendering it (or printing JSON lines). Ctrl-C interrupts the
/// task; a second Ctrl-C exits at once.
pub(crate) async fn run_task(
    session: &mut Session,
    input: Vec<OmniMessage>,
    task: &TaskArgs,
    approver: Arc<dyn Approver>,
    console: &Console,
    quit: Option<&Arc<AtomicBool>>,
) -> Result<TaskEnd, String> {
    let cancel = CancellationToken::new();
    let ctrl_c = interrupt_on_ctrl_c(cancel.clone(), session.writer().clone());
    let mut options = RunOptions::new(approver)
        .with_cancel(cancel.clone())
        .with_thinking_level(task.thinking);
    let budget = cost_budget(session, task)?;
    if let Some(budget) = &budget {
        // Each request's cost is added as the engine emits its token_usage, so the request
        // that reaches the budget is the run's last (the rendered stream lags the engine).
        let (budget, cancel) = (budget.clone(), cancel.clone());
        options = options.with_observer(Arc::new(move |msg| {
            let mut b = budget.lock().unwrap_or_else(|p| p.into_inner());
            if !b.reached() && b.observe(msg) {
                cancel.cancel();
            }
        }));
    }
    let started = Instant::now();
    let mut stream = match &task.goal {
        Some(goal) => session.run_goal(input, goal.clone(), options),
        None => session.run(input, options).map_err(Into::into),
    }
    .map_err(|e| e.to_string())?;
    let control = quit.map(|quit| Control {
        lines: console.task_lines(),
        console: console.clone(),
        engine: session.engine().clone(),
        cancel: cancel.clone(),
        quit: quit.clone(),
        queued: Vec::new(),
    });
    let window = match session.session_meta().model_context_window {
        penguin::omni_protocol::ContextWindow::Tokens(n) => Some(n),
        _ => None,
    };
    let shown = render_for(&mut stream, task, control, &cancel, console, window).await?;
    ctrl_c.abort();
    // Namespaces are tried by the first command, not at startup: what that found missing is
    // said once, as the startup warning would have.
    if let Some(warning) = session.sandbox().and_then(|s| s.warning_once()) {
        errln!("penguin: {warning}");
    }
    if let Err(e) = session.writer().flush() {
        errln!(
            "penguin: the trace could not be synced: {}",
            Untrusted(&e.to_string())
        );
    }
    let failed = session.writer().failed_writes();
    if failed > 0 {
        errln!(
            "penguin: {failed} trace record(s) of session {} could not be written (see the log above); its history and a resume will miss them",
            session.id()
        );
    }
    let stopped = budget.as_ref().and_then(|b| {
        let b = b.lock().unwrap_or_else(|p| p.into_inner());
        *task.spent.lock().unwrap_or_else(|p| p.into_inner()) += b.spent();
        b.reached().then(|| b.stopped_line())
    });
    if !task.jsonl {
        end_line(
            session,
            task,
            &shown.summary,
            stopped.as_deref(),
            started.elapsed(),
        );
    }
    // A goal succeeds only when it is complete.
    let goal_ok = task.goal.is_none()
        || session
            .goal()
            .is_some_and(|g| g.status == penguin::goal::GoalStatus::Complete);
    Ok(TaskEnd {
        // A task whose Trace lost records did not complete cleanly, whatever the stream said.
        ok: shown.ok && failed == 0 && goal_ok && stopped.is_none(),
        undelivered: shown.undelivered,
    })
}

/// `--max-cost`'s budget for this task: what is left of it after the earlier tasks of the
/// same arguments (a chat's), refused up front for a model without a price and once spent.
pub(crate) type Budget = Arc<std::sync::Mutex<penguin::pricing::CostBudget>>;

pub(crate) fn cost_budget(session: &Session, task: &TaskArgs) -> Result<Option<Budget>, String> {
    let Some(limit) = task.max_cost else {
        return Ok(None);
    };
    let meta = session.session_meta();
    let spent = *task.spent.lock().unwrap_or_else(|p| p.into_inner());
    if spent >= limit {
        return Err(format!(
            "cost budget of {} reached ({} spent): start another chat for more",
            penguin::pricing::dollars(limit),
            penguin::pricing::dollars(spent)
        ));
    }
    let budget = penguin::pricing::CostBudget::new(
        limit - spent,
        task.prices.clone(),
        &meta.provider,
        &meta.model_id,
    )
    .map_err(|e| e.to_string())?;
    Ok(Some(Arc::new(std::sync::Mutex::new(budget))))
}

/// `✓ done · model · tokens · cost · time` on stderr after a task; `stopped` replaces the
/// outcome when the cost budget stopped it.
fn end_line(
    session: &Session,
    task: &TaskArgs,
    summary: &crate::render::RunSummary,
    stopped: Option<&str>,
    took: std::time::Duration,
) {
    let meta = session.session_meta();
    let model = format!("{}/{}", meta.provider, meta.model_id);
    let t = summary.tokens;
    let what = stopped.map_or_else(|| summary.outcome(), str::to_owned);
    let mark = match what.as_str() {
        "done" => "✓",
        "interrupted" => "⏹",
        _ => "✗",
    };
    // A request cut off mid-stream reports no usage: its tokens are estimated, and said so.
    let base = penguin::llm_providers::limits::base_input_tokens(
        &meta.system_prompt,
        &session.environment().tools(),
    );
    let (more_in, more_out) = summary.unreported_estimate(base);
    let (input, output) = (
        t.cache_read + t.uncached_prompt + more_in,
        t.output + more_out,
    );
    let tokens = match more_in + more_out {
        0 => format!("{} tokens ({input} in, {output} out)", t.total),
        _ => format!(
            "~{} tokens (~{input} in, ~{output} out; estimated for the request cut off)",
            input + output
        ),
    };
    // The reported tokens, priced (an estimate for a request cut off is not).
    let cost = match task.prices.cost(&meta.provider, &meta.model_id, &t) {
        Some(c) => penguin::pricing::dollars(c),
        None => format!("no price for model {model}"),
    };
    // The outcome quotes a failure's cause, and a resumed session's model comes from its trace.
    let line = format!(
        "{mark} {} · {} · {tokens} · {} · {:.1}s",
        Untrusted(&what),
        Untrusted(&model),
        Untrusted(&cost),
        took.as_secs_f64()
    );
    if color_for(std::io::stderr().is_terminal()) {
        errln!("{DIM}{line}{RESET}");
    } else {
        errln!("{line}");
    }
}

/// What a REPL user can do while a task runs: type to steer it, `/abort` to interrupt it.
pub(crate) struct Control {
    lines: crate::console::TaskLines,
    console: Console,
    engine: penguin::engine::Engine,
    cancel: CancellationToken,
    /// Set by `/quit` during a task: the REPL leaves once the task has ended.
    quit: Arc<AtomicBool>,
    /// Steering queued and not yet seen delivered.
    queued: Vec<String>,
}

impl Control {
    /// A line typed during the task. What the task cannot use (other commands, text after the
    /// run ended) goes back to the prompt.
    fn line(&mut self, line: String) {
        match line.trim() {
            "" => {}
            "/abort" => {
                self.console.note("interrupting");
                self.cancel.cancel();
            }
            "/quit" | "/exit" => {
                self.console.note("interrupting, then leaving");
                self.quit.store(true, Ordering::Relaxed);
                self.cancel.cancel();
            }
            cmd if cmd.starts_with('/') && self.console.term().is_some() => {
                self.console.note(&format!(
                    "{cmd}: while a task runs, only /abort and /quit work; type anything else to steer"
                ));
            }
            cmd if cmd.starts_with('/') => self.console.requeue(line),
            text => match self.engine.steer(vec![build::user_text(text)]) {
                penguin::engine::Steered::Queued(_) => {
                    self.console.note(&format!(
                        "(steering queued: \"{text}\" reaches the model after the current turn)"
                    ));
                    self.queued.push(text.to_owned());
                }
                penguin::engine::Steered::Empty => {}
                penguin::engine::Steered::NotRunning => self.console.requeue(line),
            },
        }
    }

    /// A frame of the task: delivered steering leaves the queue.
    fn saw(&mut self, frame: &Frame) {
        let msg = frame.message();
        if msg.has_origin() {
            return;
        }
        if let Body::Model(ModelPayload::Text(t)) = &msg.body {
            if t.role == Role::User {
                if let UserText::Steering(body) = user_text_display(&t.text) {
                    if let Some(i) = self.queued.iter().position(|q| body.trim() == q.trim()) {
                        self.queued.remove(i);
                    }
                }
            }
        }
    }
}

/// What [`render`] saw.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    pub(crate) ok: bool,
    pub(crate) summary: crate::render::RunSummary,
    pub(crate) undelivered: Vec<String>,
}

/// Shows a task's stream (rendered, or raw JSON lines) until it ends; with `control`, lines
/// typed meanwhile steer or abort it.
///
/// When stdout is closed (`penguin run --jsonl | head -1`) nobody is reading any more: the task
/// is interrupted, the rest of its stream still reaches the Trace, and nothing more is printed.
pub(crate) async fn render(
    stream: &mut futures::stream::BoxStream<'static, Frame>,
    task: &TaskArgs,
    control: Option<Control>,
    cancel: &CancellationToken,
    console: &Console,
) -> Result<Shown, String> {
    render_for(stream, task, control, cancel, console, None).await
}

/// [`render`], knowing the model's context window (a tool list taking much of it is said).
pub(crate) async fn render_for(
    stream: &mut futures::stream::BoxStream<'static, Frame>,
    task: &TaskArgs,
    control: Option<Control>,
    cancel: &CancellationToken,
    console: &Console,
    window: Option<u64>,
) -> Result<Shown, String> {
    let jsonl = task.jsonl;
    let term = console.term().cloned();
    let tty = std::io::stdout().is_terminal();
    let status_on = !jsonl && tty && std::io::stderr().is_terminal();
    let out: Box<dyn Write + Send> = match &term {
        Some(t) => Box::new(crate::term::TermOut(t.clone())),
        None => Box::new(std::io::stdout()),
    };
    let mut r = Renderer::new(out, color_for(tty))
        .verbose(task.verbose)
        .context_window(window);
    let mut summary = crate::render::RunSummary::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(120));
    let mut since = Instant::now();
    let mut shown = false;
    let mut last_waiting = r.waiting().clone();
    let has_control = control.is_some();
    let mut control = control;
    let mut closed = false;
    if let Some(t) = &term {
        t.begin_task(has_control);
    }
    console.set_rendering(true);
    let result = loop {
        tokio::select! {
            frame = stream.next() => {
                let Some(frame) = frame else { break Ok(()) };
                if shown && term.is_none() {
                    crate::untrusted::status_line(None);
                    shown = false;
                }
                if closed {
                    continue;
                }
                if let Some(c) = control.as_mut() {
                    c.saw(&frame);
                }
                let written = if jsonl {
                    summary.observe(&frame);
                    let line = format!("{}\n", json_line(frame.json()));
                    match &term {
                        Some(t) => t.write_out(line.as_bytes()).and_then(|()| t.flush_out()),
                        None => {
                            let mut out = std::io::stdout().lock();
                            out.write_all(line.as_bytes()).and_then(|()| out.flush())
                        }
                    }
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
                    Err(e) => break Err(format!("stdout: {e}")),
                }
                if let Some(ModelPayload::ToolCall(c)) = frame.message().model() {
                    console.mark_shown(&c.tool_call_id);
                }
                if *r.waiting() != last_waiting {
                    last_waiting = r.waiting().clone();
                    since = Instant::now();
                }
            }
            line = async { control.as_mut().expect("guarded").lines.next().await }, if has_control => {
                control.as_mut().expect("guarded").line(line);
            }
            _ = tick.tick(), if status_on => {
                let text = status_text(r.waiting(), since.elapsed().as_millis() as u64);
                match &term {
                    Some(t) => t.set_status(text),
                    None => if let Some(text) = text {
                        crate::untrusted::status_line(Some(&text));
                        shown = true;
                    },
                }
            }
        }
    };
    console.set_rendering(false);
    if let Some(t) = &term {
        let draft = t.end_task();
        if !draft.trim().is_empty() {
            console.offer_next_prompt(draft);
        }
    }
    if shown {
        crate::untrusted::status_line(None);
    }
    result?;
    console.add_collapsed(r.collapsed());
    let summary = if jsonl { summary } else { r.summary().clone() };
    Ok(Shown {
        ok: !closed && summary.succeeded(),
        summary,
        undelivered: control.map(|c| c.queued).unwrap_or_default(),
    })
}

/// Runs one prompt in `session`; the exit code says whether the task completed (130 when
/// Ctrl-C interrupted it).
pub(crate) async fn one_task(
    session: &mut Session,
    prompt: String,
    task: &TaskArgs,
) -> Result<ExitCode, String> {
    let mut images = crate::attach::files(&task.images)?;
    if task.goal.is_none() {
        let workspace = PathBuf::from(&session.session_meta().workspace);
        let (mentioned, notes) = crate::attach::mentions(&prompt, &workspace);
        images.extend(mentioned);
        for note in notes {
            errln!("penguin: {}", Untrusted(&note));
        }
    } else if !images.is_empty() {
        return Err("images do not go with --goal: a goal's objective is text, sent again every round; name the image's path in it instead".into());
    }
    if let Some(said) = crate::attach::said(&images) {
        errln!("{}", Untrusted(&said));
    }
    one_input(session, crate::attach::input(prompt, images), task).await
}

/// Runs `input` as the one task of `session`, then ends the session: what `run` and
/// `resume PROMPT` do once the prompt is read, and a counterfactual replay with the recorded
/// input.
pub(crate) async fn one_input(
    session: &mut Session,
    input: Vec<OmniMessage>,
    task: &TaskArgs,
) -> Result<ExitCode, String> {
    let console = Console::stdin();
    let (approver, _) = approver(task, &console, session.environment().clone());
    let end = run_task(session, input, task, approver, &console, None).await;
    end_background_work(session).await;
    session.end("exit").await;
    let end = end?;
    Ok(if INTERRUPTED.load(Ordering::SeqCst) {
        ExitCode::from(130)
    } else if end.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// How long penguin waits, as it exits, for the background commands it ended to be gone.
const BACKGROUND_END_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Ends the background work `session` still runs as penguin exits, naming each piece (the
/// user may have meant it to keep running: it is said, not hidden), and waits until every
/// command's process is gone, so that nothing penguin started outlives it.
pub(crate) async fn end_background_work(session: &Session) {
    let Some(work) = session.environment().background() else {
        return;
    };
    let tasks = work.tasks();
    for t in tasks.iter().filter(|t| t.running) {
        let kind = match t.kind {
            penguin::omni_protocol::background::BackgroundKind::Command => "command",
            penguin::omni_protocol::background::BackgroundKind::Subagent => "subagent",
        };
        // The label is the model's command line or task.
        errln!(
            "penguin: ended background {kind} {}, still running as penguin exits: {}",
            Untrusted(&t.id),
            crate::describe::clip(&t.label, 100)
        );
    }
    if tasks.is_empty() {
        return;
    }
    work.kill_all();
    // Each command's process is penguin's child, reaped by the runtime once the kill lands.
    let pids: Vec<i32> = tasks.iter().filter_map(|t| t.pid).collect();
    let deadline = tokio::time::Instant::now() + BACKGROUND_END_GRACE;
    while pids.iter().any(|pid| process_exists(*pid)) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// Whether process `pid` still exists (a zombie not yet reaped included).
fn process_exists(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
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
            PROMPT_FROM_STDIN.store(true, Ordering::SeqCst);
            s.trim().to_owned()
        }
        None => {
            // Never a hidden prompt: what is sent is said.
            let prompt = "Look around the workspace and tell me what it is.";
            errln!("(no prompt given, so asking: {prompt})");
            prompt.to_owned()
        }
    };
    if prompt.trim().is_empty() {
        return Err(
            "the prompt is empty: say what the task is, e.g. penguin run \"list the files\"".into(),
        );
    }
    Ok(prompt)
}

/// The session line on stderr: dimmed on a terminal. With `--jsonl` too (after any notice
/// about the model or the sandbox), so a script can read the id while stdout stays pure JSON.
pub(crate) fn announce(session: &Session, task: &TaskArgs) {
    // A resumed session's line quotes its trace (the workspace, the sandbox it names).
    let line = session_line(session, task.approval());
    if color_for(std::io::stderr().is_terminal()) {
        errln!("{DIM}{}{RESET}", Untrusted(&line));
    } else {
        errln!("{}", Untrusted(&line));
    }
}

pub(crate) async fn run(
    prompt: Option<String>,
    model: ModelArgs,
    task: TaskArgs,
    sandbox: SandboxArgs,
    workspace: Option<PathBuf>,
    goal: Option<String>,
) -> Result<ExitCode, String> {
    let mut task = task;
    let mut prompt = prompt;
    if let Some(value) = goal {
        // `--goal BUDGET PROMPT`, `--goal PROMPT` or `--goal=BUDGET PROMPT`.
        let budget = match penguin::goal::parse_budget(&value) {
            Some(b) => Some(b),
            None if value.is_empty() => None,
            None if prompt.is_none() => {
                prompt = Some(value);
                None
            }
            None => return Err(penguin::goal::budget_error(&value)),
        };
        task.goal = Some(penguin::goal::GoalOptions {
            budget,
            ..Default::default()
        });
    }
    // Read a piped prompt before the console takes stdin over for approvals.
    let prompt = read_prompt(prompt)?;
    let (agent, mut session) = ready(&model, &sandbox, Which::New(workspace))?;
    let task = task.configured(&agent);
    announce(&session, &task);
    one_task(&mut session, prompt, &task).await
}
