//! `penguin chat`: the REPL, steering during a task, `/compact`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use penguin::agent::Agent;
use penguin::engine::CancellationToken;
use penguin::omni_protocol::build;
use penguin::session::Session;

use penguin::tools::SandboxBypass;

use crate::args::{ModelArgs, SandboxArgs, TaskArgs};
use crate::console::Console;
use crate::run::{approver, interrupt_on_ctrl_c, render, run_task};
use crate::setup::{
    new_session, open_session, pick_source, session_line, workspace_dir, Confinement,
};

pub(crate) async fn chat(
    model: ModelArgs,
    task: TaskArgs,
    sandbox: SandboxArgs,
    workspace: Option<PathBuf>,
    resume_id: Option<String>,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let confinement = Confinement::resolve(&agent, &sandbox)?;
    let session = match resume_id {
        Some(id) => open_session(&agent, &id, &model, &confinement)?,
        None => new_session(
            &agent,
            pick_source(&agent, &model)?,
            &workspace_dir(workspace)?,
            &confinement,
        )?,
    };
    repl(session, task, confinement.bypass()).await
}

/// `/compact`: replace the context with a summary now (the session's next run starts with it).
pub(crate) async fn compact(session: &mut Session, task: &TaskArgs) -> Result<(), String> {
    use penguin::engine::Compactability;
    match session.engine().compactability() {
        Compactability::Ok => {}
        Compactability::Unsupported => {
            eprintln!("compaction is not configured for this session's model");
            return Ok(());
        }
        Compactability::JustCompacted => {
            eprintln!("the context was just compacted; nothing has run since");
            return Ok(());
        }
        Compactability::Empty => {
            eprintln!("nothing to compact yet");
            return Ok(());
        }
    }
    let cancel = CancellationToken::new();
    let ctrl_c = interrupt_on_ctrl_c(cancel.clone(), session.writer().clone());
    let mut stream = session.compact(cancel.clone()).map_err(|e| e.to_string())?;
    render(&mut stream, task.jsonl, None, &cancel).await?;
    ctrl_c.abort();
    if cancel.is_cancelled() {
        eprintln!("compaction interrupted; the context is unchanged");
    } else if !task.jsonl {
        eprintln!("context compacted; the summary opens the next message's context");
    }
    Ok(())
}

pub(crate) async fn repl(
    mut session: Session,
    task: TaskArgs,
    bypass: Option<SandboxBypass>,
) -> Result<ExitCode, String> {
    let console = Console::stdin();
    let approver = approver(&task, &console, bypass);
    let quit = Arc::new(std::sync::atomic::AtomicBool::new(false));
    eprintln!(
        "{} — /quit to leave, /compact; while a task runs, type to steer it, /abort or Ctrl-C to interrupt",
        session_line(&session)
    );
    // A background launch that settles while the prompt waits starts a task carrying its notice.
    let notice = Arc::new(tokio::sync::Notify::new());
    let hook = notice.clone();
    session.on_notice(Arc::new(move || hook.notify_one()));
    show_background_messages(&session, task.jsonl);
    loop {
        eprint!("› ");
        let _ = std::io::stderr().flush();
        // Ctrl-C at the prompt leaves, as it would in any REPL (during a task it interrupts).
        let line = tokio::select! {
            line = console.read_line() => line,
            _ = tokio::signal::ctrl_c() => None,
            () = notice.notified() => {
                let notices = session.engine().take_notices();
                if notices.is_empty() {
                    continue;
                }
                eprintln!("\n(background work finished; telling the model)");
                run_task(&mut session, notices, &task, approver.clone(), Some((&console, &quit)))
                    .await?;
                if quit.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                continue;
            }
        };
        let Some(line) = line else {
            break;
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/quit" | "/exit" => break,
            "/compact" => {
                compact(&mut session, &task).await?;
                continue;
            }
            "/abort" => {
                eprintln!("nothing is running (while a task runs, /abort or Ctrl-C interrupts it and typing steers it)");
                continue;
            }
            _ => {}
        }
        run_task(
            &mut session,
            vec![build::user_text(line)],
            &task,
            approver.clone(),
            Some((&console, &quit)),
        )
        .await?;
        if quit.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
    }
    eprintln!("resume with: penguin resume {}", session.id());
    Ok(ExitCode::SUCCESS)
}

// ---- Background subagents (see `Session::on_background_message`) ---------------------------
// Their messages are in no run's stream: shown as they come, on stderr, each line tagged with
// the child it is from (JSON lines on stdout with --jsonl).
fn show_background_messages(session: &Session, jsonl: bool) {
    use std::io::IsTerminal;
    let color = std::io::stderr().is_terminal();
    let renderer = std::sync::Mutex::new(crate::render::Renderer::new(std::io::stderr(), color));
    session.on_background_message(Arc::new(move |msg| {
        if jsonl {
            println!("{}", msg.to_json());
            return;
        }
        let mut r = renderer.lock().unwrap_or_else(|p| p.into_inner());
        let _ = r.frame(&penguin::omni_protocol::Frame::new(msg));
    }));
}
// ---- end of background subagents ------------------------------------------------------------
