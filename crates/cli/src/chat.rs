//! `penguin chat`: the REPL (a line editor on a terminal), its slash commands, steering during
//! a task, `/compact`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use penguin::agent::Agent;
use penguin::engine::CancellationToken;
use penguin::omni_protocol::build;
use penguin::session::Session;

use crate::approve::TerminalApprover;
use crate::args::{ModelArgs, SandboxArgs, TaskArgs};
use crate::console::Console;
use crate::editor::{Input, LineEditor};
use crate::run::{approver, interrupt_on_ctrl_c, render, run_task};
use crate::setup::{ready, session_line, Which};
use crate::untrusted::{err, errln, json_line, outln, Untrusted};

pub(crate) async fn chat(
    model: ModelArgs,
    task: TaskArgs,
    sandbox: SandboxArgs,
    workspace: Option<PathBuf>,
    resume_id: Option<String>,
    last: bool,
) -> Result<ExitCode, String> {
    let which = if resume_id.is_some() || last {
        Which::Stored(resume_id)
    } else {
        Which::New(workspace)
    };
    let (agent, session) = ready(&model, &sandbox, which)?;
    let task = task.configured(&agent);
    repl(&agent, session, task, Reopen { model, sandbox }).await
}

/// How the chat's session was opened, for `/model` and `/new` to open the next one alike.
pub(crate) struct Reopen {
    pub(crate) model: ModelArgs,
    pub(crate) sandbox: SandboxArgs,
}

/// Where `/model` and `/new` go.
enum Target {
    /// This session, with the configured model of this name.
    Model(String),
    /// A new session in this workspace.
    New(PathBuf),
    /// A stored session (a fork), with the model in use.
    Stored(String),
}

/// Leaves `session` (its background work ended and said, its trace flushed) for `to`. On a
/// failure to open it (a model not configured, its key not set) the session it left is opened
/// again as it was, and the failure is said.
async fn switch(
    session: Session,
    reopen: &mut Reopen,
    to: Target,
) -> Result<(Session, Option<String>), String> {
    crate::run::end_background_work(&session).await;
    let id = session.id().to_owned();
    let (model, which) = match to {
        Target::Model(name) => (
            ModelArgs {
                model: Some(name),
                provider: None,
                base_url: None,
                api_key_env: None,
                scenario: None,
                real_tools: false,
                ..reopen.model.clone()
            },
            Which::Stored(Some(id.clone())),
        ),
        Target::New(workspace) => (reopen.model.clone(), Which::New(Some(workspace))),
        Target::Stored(other) => (reopen.model.clone(), Which::Stored(Some(other))),
    };
    if let Err(e) = session.writer().flush() {
        errln!(
            "penguin: flushing the trace of {id}: {}",
            Untrusted(&e.to_string())
        );
    }
    // One writer per trace: the session is closed before it (or another) is opened.
    drop(session);
    match ready(&model, &reopen.sandbox, which) {
        Ok((_, next)) => {
            reopen.model = model;
            Ok((next, None))
        }
        Err(e) => {
            let (_, back) = ready(&reopen.model, &reopen.sandbox, Which::Stored(Some(id)))?;
            Ok((back, Some(e)))
        }
    }
}

/// `/compact`: replace the context with a summary now (the session's next run starts with it).
pub(crate) async fn compact(
    session: &mut Session,
    task: &TaskArgs,
    console: &Console,
) -> Result<(), String> {
    use penguin::engine::Compactability;
    match session.engine().compactability() {
        Compactability::Ok => {}
        Compactability::Unsupported => {
            errln!("compaction is not configured for this session's model");
            return Ok(());
        }
        Compactability::JustCompacted => {
            errln!("the context was just compacted; nothing has run since");
            return Ok(());
        }
        Compactability::Empty => {
            errln!("nothing to compact yet");
            return Ok(());
        }
        other => {
            errln!("nothing to compact ({})", other.code());
            return Ok(());
        }
    }
    let cancel = CancellationToken::new();
    let ctrl_c = interrupt_on_ctrl_c(cancel.clone(), session.writer().clone());
    let mut stream = session.compact(cancel.clone()).map_err(|e| e.to_string())?;
    render(&mut stream, task, None, &cancel, console).await?;
    ctrl_c.abort();
    crate::run::INTERRUPTED.store(false, Ordering::SeqCst);
    if cancel.is_cancelled() {
        errln!("compaction interrupted; the context is unchanged");
    } else if !task.jsonl {
        errln!("context compacted; the summary opens the next message's context");
    }
    Ok(())
}

/// A line the REPL handles itself, or `None` for a prompt.
#[derive(Debug, PartialEq, Eq)]
enum Command<'a> {
    Quit,
    Help,
    Compact,
    Approvals {
        clear: bool,
    },
    /// `/expand [N]`: the N-th last collapsed output (the last without N).
    Expand(&'a str),
    Diff,
    Cost,
    /// `/model NAME`.
    Model(&'a str),
    /// `/new` or `/clear`.
    New,
    /// `/rewind N`: the files and the conversation as before task N.
    Rewind(&'a str),
    Abort,
    /// `/goal[:BUDGET] OBJECTIVE`: the whole line.
    Goal(&'a str),
    Unknown(&'a str),
}

/// `/word` (one token of letters) is a command; `/etc/hosts is wrong` is a prompt.
fn command(line: &str) -> Option<Command<'_>> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if first == "/goal" || first.starts_with("/goal:") {
        return Some(Command::Goal(line));
    }
    let name = first.strip_prefix('/')?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphabetic() || c == '-') {
        return None;
    }
    let rest: Vec<&str> = words.collect();
    Some(match (name, rest.as_slice()) {
        ("quit" | "exit", []) => Command::Quit,
        ("help", []) => Command::Help,
        ("compact", []) => Command::Compact,
        ("approvals", []) => Command::Approvals { clear: false },
        ("approvals", ["clear"]) => Command::Approvals { clear: true },
        ("expand", []) => Command::Expand("1"),
        ("expand", [n]) => Command::Expand(n),
        ("diff", []) => Command::Diff,
        ("cost", []) => Command::Cost,
        ("model", [name]) => Command::Model(name),
        ("new" | "clear", []) => Command::New,
        ("rewind", [n]) => Command::Rewind(n),
        ("abort", []) => Command::Abort,
        _ => Command::Unknown(first),
    })
}

fn help() -> String {
    let mut out = String::from("commands:\n");
    for (name, what) in crate::editor::COMMANDS {
        out.push_str(&format!("  {name:<12} {what}\n"));
    }
    out.push_str(
        "anything else is sent to the model. While a task runs, typing steers it (sent after the current turn).\n\
         Keys: ↑/↓ history, Alt-Enter or a trailing \\ for a new line, Ctrl-C clears the line, Ctrl-D leaves.",
    );
    out
}

fn approvals_text(asking: Option<&TerminalApprover>, clear: bool) -> String {
    let Some(asking) = asking else {
        return "every call is allowed without asking (--yes)".into();
    };
    let scopes = asking.scopes();
    if clear {
        asking.clear();
        return format!(
            "forgot {} \"always\" answer(s); every call is asked again",
            scopes.len()
        );
    }
    if scopes.is_empty() {
        return "nothing is auto-approved: every call is asked (answer a to allow one tool, or one command prefix, from then on)".into();
    }
    let mut out = String::from("allowed without asking:\n");
    for s in &scopes {
        out.push_str(&match s {
            crate::approve::Scope::Tool(t) => format!("  every {t} call\n"),
            crate::approve::Scope::Command(p) => format!(
                "  exec_command with a command starting `{}`\n",
                crate::approve::shown_prefix(p)
            ),
        });
    }
    out.push_str("(/approvals clear forgets them)");
    out
}

pub(crate) async fn repl(
    agent: &Agent,
    mut session: Session,
    task: TaskArgs,
    mut reopen: Reopen,
) -> Result<ExitCode, String> {
    // --max-cost on a model without a price is refused before the first prompt.
    crate::run::cost_budget(&session, &task)?;
    let console = Console::stdin();
    let (mut approver, mut asking) = approver(&task, &console, session.environment().clone());
    let quit = Arc::new(AtomicBool::new(false));
    let mut editor = match console.term() {
        Some(_) => Some(LineEditor::new(&agent.location.root)?),
        None => None,
    };
    let recap = crate::show::recap(agent, session.id(), 2);
    if !recap.is_empty() {
        err!("earlier in this session:\n{}", Untrusted(&recap));
    }
    errln!(
        "{} — /help for commands, /quit or Ctrl-D to leave; while a task runs, type to steer it, /abort or Ctrl-C to interrupt",
        Untrusted(&session_line(&session, task.approval()))
    );
    // A background launch that settles while the prompt waits starts a task carrying its notice:
    // the notice hook wakes the line editor (or the plain reader's select below).
    let notice = Arc::new(tokio::sync::Notify::new());
    let reading = Arc::new(AtomicBool::new(false));
    let waker = editor.as_ref().map(LineEditor::waker);
    if let Some(waker) = waker.clone() {
        let notice = notice.clone();
        tokio::spawn(async move {
            loop {
                notice.notified().await;
                waker.wake();
            }
        });
    }
    let attach = |session: &Session, editor: &mut Option<LineEditor>| {
        let hook = notice.clone();
        session.on_notice(Arc::new(move || hook.notify_one()));
        show_background_messages(session, &console, editor, &reading, task.jsonl);
    };
    attach(&session, &mut editor);
    // `--image` files go with the first message; `@shot.png` attaches an image of the workspace.
    let mut first_images = crate::attach::files(&task.images)?;
    let workspace = std::path::PathBuf::from(&session.session_meta().workspace);
    loop {
        let line = match (editor.as_mut(), &waker) {
            (Some(ed), Some(waker)) => {
                // Notices that came while no read waited (during a command, or after a task's
                // last turn) go now; a later one wakes the read.
                waker.forget();
                let notices = session.engine().take_notices();
                if !notices.is_empty() {
                    tell_the_model(&mut session, notices, &task, &approver, &console, &quit)
                        .await?;
                    if quit.load(Ordering::Relaxed) {
                        break;
                    }
                    continue;
                }
                reading.store(true, Ordering::SeqCst);
                let read = ed.read("› ", console.take_next_prompt()).await;
                reading.store(false, Ordering::SeqCst);
                match read {
                    Input::Line(line) => line,
                    Input::Cleared => continue,
                    Input::End => break,
                    Input::Woken(typed) => {
                        if !typed.is_empty() {
                            console.offer_next_prompt(typed);
                        }
                        continue;
                    }
                }
            }
            _ => {
                err!("› ");
                let _ = std::io::Write::flush(&mut std::io::stderr());
                // Ctrl-C at the prompt leaves, as it would in any REPL (during a task it
                // interrupts).
                let line = tokio::select! {
                    line = console.read_line() => line,
                    _ = tokio::signal::ctrl_c() => None,
                    () = notice.notified() => {
                        let notices = session.engine().take_notices();
                        if notices.is_empty() {
                            continue;
                        }
                        errln!();
                        tell_the_model(&mut session, notices, &task, &approver, &console, &quit)
                            .await?;
                        if quit.load(Ordering::Relaxed) {
                            break;
                        }
                        continue;
                    }
                };
                let Some(line) = line else { break };
                line
            }
        };
        let line = line.trim();
        let command = match line.is_empty() {
            true => None,
            false => command(line),
        };
        // A notice that arrived as the line was accepted goes with it; a command leaves it
        // queued for the next turn of this loop.
        let notices = match (&editor, &command) {
            (Some(_), None) => session.engine().take_notices(),
            _ => Vec::new(),
        };
        if line.is_empty() && notices.is_empty() {
            continue;
        }
        match command {
            Some(Command::Quit) => break,
            Some(Command::Help) => errln!("{}", help()),
            Some(Command::Compact) => compact(&mut session, &task, &console).await?,
            Some(Command::Approvals { clear }) => {
                errln!("{}", Untrusted(&approvals_text(asking.as_deref(), clear)))
            }
            Some(Command::Expand(n)) => match n.parse().ok().and_then(|n| console.collapsed(n)) {
                Some((name, output)) => {
                    outln!("{}:", Untrusted(&name));
                    let color = crate::render::color_for(std::io::stdout().is_terminal());
                    for l in crate::tool_view::painted(&output, color) {
                        outln!("{l}");
                    }
                }
                None => match console.collapsed_count() {
                    0 => errln!("no collapsed tool output yet"),
                    kept => errln!(
                        "/expand N shows the N-th last collapsed tool output, N from 1 to {kept}"
                    ),
                },
            },
            Some(Command::Diff) => {
                let color = crate::render::color_for(std::io::stdout().is_terminal());
                // Scripted tools have no sandbox: they run nothing, and git runs as penguin.
                let off = penguin::tools::Sandbox::off();
                let sandbox = session.sandbox().unwrap_or(&off);
                outln!("{}", crate::glance::diff(&workspace, sandbox, color).await);
            }
            Some(Command::Cost) => match crate::glance::cost(agent, &session) {
                Ok(table) => outln!("{table}"),
                Err(e) => errln!("{}", Untrusted(&e)),
            },
            Some(Command::Rewind(n)) if n.parse::<usize>().is_err() => {
                errln!("/rewind N: N is a task number, from 1 (as before task N ran)")
            }
            Some(command @ (Command::Model(_) | Command::New | Command::Rewind(_))) => {
                let (to, left) = match command {
                    Command::Model(name) => (Target::Model(name.to_owned()), None),
                    Command::Rewind(n) => {
                        let n: usize = n.parse().unwrap_or_default();
                        if let Err(e) = session.writer().flush() {
                            errln!("penguin: flushing the trace: {}", Untrusted(&e.to_string()));
                        }
                        let files = match crate::rewind::FilesRewind::plan(agent, session.id(), n) {
                            Ok(files) => files,
                            Err(e) => {
                                errln!("{}", Untrusted(&e));
                                continue;
                            }
                        };
                        errln!("{}", Untrusted(&files.describe()));
                        if !files.is_empty() {
                            let answer = match editor.as_mut() {
                                Some(ed) => match ed.read(crate::rewind::QUESTION, None).await {
                                    Input::Line(line) => Some(line),
                                    _ => None,
                                },
                                None => console.ask(crate::rewind::QUESTION).await,
                            };
                            if !crate::rewind::yes(answer.as_deref()) {
                                errln!("nothing was changed");
                                continue;
                            }
                            let with_yours = files.has_yours() && {
                                let q = crate::rewind::YOURS_QUESTION;
                                let answer = match editor.as_mut() {
                                    Some(ed) => match ed.read(q, None).await {
                                        Input::Line(line) => Some(line),
                                        _ => None,
                                    },
                                    None => console.ask(q).await,
                                };
                                crate::rewind::yes(answer.as_deref())
                            };
                            if let Err(e) = files.apply(with_yours) {
                                errln!("{}", Untrusted(&e));
                                continue;
                            }
                        }
                        // The conversation goes on from the fork; before task 1, afresh.
                        match crate::rewind::fork_conversation(agent, session.id(), n) {
                            Ok(Some(fork)) => (Target::Stored(fork), Some(session.id().to_owned())),
                            Ok(None) => (Target::New(workspace.clone()), Some(session.id().to_owned())),
                            Err(e) => {
                                errln!("{}", Untrusted(&e));
                                continue;
                            }
                        }
                    }
                    _ => (Target::New(workspace.clone()), Some(session.id().to_owned())),
                };
                let (next, failed) = switch(session, &mut reopen, to).await?;
                session = next;
                let scopes = asking.as_ref().map(|a| a.scopes()).unwrap_or_default();
                (approver, asking) = crate::run::approver(&task, &console, session.environment().clone());
                if let Some(asking) = &asking {
                    asking.keep(scopes);
                }
                attach(&session, &mut editor);
                match (failed, left) {
                    (Some(e), _) => errln!(
                        "{}; still on {}",
                        Untrusted(&e),
                        Untrusted(reopen.model.model.as_deref().unwrap_or("the model it had"))
                    ),
                    (None, Some(left)) => errln!(
                        "{} (the previous session stays: penguin resume {left})",
                        Untrusted(&session_line(&session, task.approval()))
                    ),
                    (None, None) => errln!(
                        "now on {}: the conversation so far goes on with it",
                        Untrusted(reopen.model.model.as_deref().unwrap_or_default())
                    ),
                }
                if let Err(e) = crate::run::cost_budget(&session, &task) {
                    errln!("{}", Untrusted(&e));
                }
            }
            Some(Command::Abort) => errln!(
                "nothing is running (while a task runs, /abort or Ctrl-C interrupts it and typing steers it)"
            ),
            Some(Command::Unknown(name)) => {
                errln!(
                    "unknown command {}: nothing was sent (/help lists the commands)",
                    Untrusted(name)
                )
            }
            Some(Command::Goal(line)) => match penguin::goal::parse_goal_command(line) {
                // Goal mode: the rounds run as one task; /abort or Ctrl-C ends the whole goal.
                Ok((budget, objective)) => {
                    let goal_task = TaskArgs {
                        goal: Some(penguin::goal::GoalOptions {
                            budget,
                            ..Default::default()
                        }),
                        ..task.clone()
                    };
                    let end = run_task(
                        &mut session,
                        vec![build::user_text(objective)],
                        &goal_task,
                        approver.clone(),
                        &console,
                        Some(&quit),
                    )
                    .await?;
                    after_task(end, &console);
                }
                Err(usage) => errln!("{}", Untrusted(&usage)),
            },
            None => {
                let mut input = notices;
                if !line.is_empty() {
                    let (mut images, notes) = crate::attach::mentions(line, &workspace);
                    images.splice(0..0, std::mem::take(&mut first_images));
                    for note in notes {
                        errln!("{}", Untrusted(&note));
                    }
                    if let Some(said) = crate::attach::said(&images) {
                        errln!("{}", Untrusted(&said));
                    }
                    input.extend(crate::attach::input(line.to_owned(), images));
                }
                let end = run_task(
                    &mut session,
                    input,
                    &task,
                    approver.clone(),
                    &console,
                    Some(&quit),
                )
                .await?;
                after_task(end, &console);
            }
        }
        if quit.load(Ordering::Relaxed) {
            break;
        }
    }
    // What still runs in the background is named and ended, never left behind unsaid.
    crate::run::end_background_work(&session).await;
    session.end("exit").await;
    errln!("resume with: penguin resume {}", session.id());
    Ok(ExitCode::SUCCESS)
}

/// Starts a task carrying harness notices (background work settled while nothing ran).
async fn tell_the_model(
    session: &mut Session,
    notices: Vec<penguin::omni_protocol::OmniMessage>,
    task: &TaskArgs,
    approver: &Arc<dyn penguin::engine::Approver>,
    console: &Console,
    quit: &Arc<AtomicBool>,
) -> Result<(), String> {
    errln!("(background work finished; telling the model)");
    let end = run_task(
        session,
        notices,
        task,
        approver.clone(),
        console,
        Some(quit),
    )
    .await?;
    after_task(end, console);
    Ok(())
}

/// In chat an interrupted task returns to the prompt, not to the shell, and steering the task
/// never delivered is offered back.
fn after_task(end: crate::run::TaskEnd, console: &Console) {
    crate::run::INTERRUPTED.store(false, Ordering::SeqCst);
    if end.undelivered.is_empty() {
        return;
    }
    let text = end.undelivered.join("\n");
    match console.term() {
        Some(_) => {
            errln!("not delivered to the model (the task ended first); it is in the prompt below to send or edit:");
            console.offer_next_prompt(text);
        }
        None => errln!(
            "not delivered to the model (the task ended first): {}",
            Untrusted(&text)
        ),
    }
}

// ---- Background subagents (see `Session::on_background_message`) ---------------------------
// Their messages are in no run's stream. One line each for what a person follows (answers,
// tool calls, an abort), tagged with the child, written where notices go: above the prompt
// while the line editor reads, else above the task's bottom line (or on stderr). With
// --jsonl, every message as a JSON line on stdout.
fn show_background_messages(
    session: &Session,
    console: &Console,
    editor: &mut Option<LineEditor>,
    reading: &Arc<AtomicBool>,
    jsonl: bool,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // Printing may wait for the terminal: not on the child's own task.
    session.on_background_message(Arc::new(move |msg| {
        let _ = tx.send(msg);
    }));
    let (console, reading) = (console.clone(), reading.clone());
    let mut printer = editor.as_mut().and_then(LineEditor::printer);
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if jsonl {
                outln!("{}", json_line(&msg.to_json()));
                continue;
            }
            let Some(line) = background_line(&msg) else {
                continue;
            };
            match printer.as_mut() {
                Some(p) if reading.load(Ordering::SeqCst) => {
                    // rustyline writes it as it is: the same guard as every other line.
                    let _ = p.print(crate::untrusted::guard(&line).into_owned());
                }
                _ => console.note(&line),
            }
        }
    });
}

fn background_line(msg: &penguin::omni_protocol::OmniMessage) -> Option<String> {
    use penguin::omni_protocol::{Body, EventPayload, ModelPayload, Role, StopReason};
    let hop = msg.origin.as_ref()?.last()?;
    let tag = format!("[{}]", &hop[hop.len().saturating_sub(8)..]);
    let clip = crate::describe::clip;
    match &msg.body {
        Body::Model(ModelPayload::Text(t))
            if t.role == Role::Assistant && !t.text.trim().is_empty() =>
        {
            Some(format!("{} {}", Untrusted(&tag), clip(t.text.trim(), 200)))
        }
        Body::Model(ModelPayload::ToolCall(c))
            if c.stop_reason.is_none_or(|r| r == StopReason::Completed) =>
        {
            Some(format!(
                "{} ⚙ {} {}",
                Untrusted(&tag),
                Untrusted(&c.name),
                clip(&c.arguments, 80)
            ))
        }
        Body::Event(EventPayload::Abort { reason }) => Some(format!(
            "{} aborted{}",
            Untrusted(&tag),
            reason
                .as_deref()
                .map(|r| format!(": {}", Untrusted(r)))
                .unwrap_or_default()
        )),
        _ => None,
    }
}
// ---- end of background subagents ------------------------------------------------------------

/// `penguin resume ID|--last [PROMPT]`: one task when a prompt is given, the REPL otherwise.
pub(crate) async fn resume(
    id: Option<String>,
    prompt: Option<String>,
    model: ModelArgs,
    task: TaskArgs,
    sandbox: SandboxArgs,
) -> Result<ExitCode, String> {
    let (agent, mut session) = ready(&model, &sandbox, Which::Stored(id))?;
    let task = task.configured(&agent);
    let Some(prompt) = prompt else {
        return repl(&agent, session, task, Reopen { model, sandbox }).await;
    };
    let prompt = crate::run::read_prompt(Some(prompt))?;
    crate::run::announce(&session, &task);
    if !task.jsonl {
        let recap = crate::show::recap(&agent, session.id(), 2);
        if !recap.is_empty() {
            err!("earlier in this session:\n{}", Untrusted(&recap));
        }
    }
    crate::run::one_task(&mut session, prompt, &task).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_words_are_commands_and_paths_are_prompts() {
        assert_eq!(command("/help"), Some(Command::Help));
        assert_eq!(
            command("/approvals clear"),
            Some(Command::Approvals { clear: true })
        );
        assert_eq!(
            command("/frobnicate"),
            Some(Command::Unknown("/frobnicate"))
        );
        assert_eq!(command("/quit now"), Some(Command::Unknown("/quit")));
        assert_eq!(command("/model fast"), Some(Command::Model("fast")));
        assert_eq!(command("/model"), Some(Command::Unknown("/model")));
        assert_eq!(command("/new"), Some(Command::New));
        assert_eq!(command("/expand"), Some(Command::Expand("1")));
        assert_eq!(command("/expand 3"), Some(Command::Expand("3")));
        assert_eq!(command("/rewind 2"), Some(Command::Rewind("2")));
        assert_eq!(command("/clear"), Some(Command::New));
        assert_eq!(command("/diff"), Some(Command::Diff));
        assert_eq!(command("/cost"), Some(Command::Cost));
        assert_eq!(command("/etc/hosts is wrong"), None);
        assert_eq!(command("fix /help text"), None);
        assert_eq!(
            command("/goal:500k fix it"),
            Some(Command::Goal("/goal:500k fix it"))
        );
        assert_eq!(command("/goal fix it"), Some(Command::Goal("/goal fix it")));
        assert_eq!(command("/goals"), Some(Command::Unknown("/goals")));
    }
}
