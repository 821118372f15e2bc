//! The `penguin` command.

// Every line goes through `untrusted::{outln, errln, …}`, which show control sequences of
// text penguin did not write instead of letting the terminal obey them.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod approve;
mod args;
mod attach;
mod chat;
mod checks;
mod console;
mod describe;
mod editor;
mod glance;
mod hooks;
mod init;
mod knowledge;
mod markdown;
mod models;
mod render;
mod replay;
mod rewind;
mod run;
// Its few lines are about its own startup; it is another team's file for now.
#[allow(clippy::print_stdout, clippy::print_stderr)]
mod serve;
mod setup;
mod show;
mod term;
mod tool_view;
mod untrusted;
mod usage;
mod watch;

use std::io::IsTerminal;
use std::process::ExitCode;

use args::{
    Cli, Command, McpCommand, MemoryCommand, ModelsCommand, ScenarioCommand, SkillsCommand,
    TraceCommand,
};
use clap::Parser;
use untrusted::{errln, Untrusted};

fn main() -> ExitCode {
    // A panic during a task must not leave the terminal without echo.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        term::restore();
        default_hook(info);
    }));
    let command = match Cli::parse().command {
        Some(command) => command,
        // Bare `penguin` in a terminal opens a chat; anywhere else there is nobody to chat
        // with, so it says how it is used.
        None if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() => {
            match Cli::parse_from(["penguin", "chat"]).command {
                Some(chat) => chat,
                None => unreachable!("`chat` parses as a command"),
            }
        }
        None => {
            let _ = <Cli as clap::CommandFactory>::command().print_help();
            return ExitCode::from(2);
        }
    };
    let log_file = match &command {
        Command::Serve(args) => args.log_file.as_deref(),
        _ => None,
    };
    if let Err(e) = init_logging(log_file) {
        errln!("penguin: {}", Untrusted(&e));
        return ExitCode::FAILURE;
    }
    let result = match command {
        Command::Scenario {
            command:
                ScenarioCommand::Run {
                    scenario,
                    trace,
                    requests,
                },
        } => checks::scenario_run(scenario, trace, requests),
        Command::CheckStream { file } => checks::check_stream(&file),
        Command::Trace {
            command: TraceCommand::Check { files },
        } => checks::trace_check(&files),
        Command::Usage { since, by } => usage::usage(since, by),
        Command::Sessions {
            mark: Some(mark), ..
        } => setup::mark_session(mark),
        Command::Sessions {
            mark: None,
            here,
            limit,
            all,
            archived,
            search,
        } => setup::sessions(
            here,
            if all { usize::MAX } else { limit },
            archived,
            search.as_deref(),
        ),
        Command::Show {
            session_id,
            last,
            jsonl,
            verbose,
        } => show::show(session_id, last, jsonl, verbose),
        Command::Fork {
            session_id,
            last,
            at,
        } => setup::fork(session_id, last, at),
        Command::Init { force } => init::init(force),
        Command::Export {
            session_id,
            last,
            out,
        } => setup::export(session_id, last, out),
        Command::Import { file } => setup::import(&file),
        Command::Replay {
            session_id,
            last,
            from: Some(from),
            prompt,
            model,
            task,
            sandbox,
            ..
        } => with_runtime(replay::counterfactual(
            replay::Counterfactual {
                id: session_id,
                last,
                from,
                prompt,
            },
            model,
            task,
            sandbox,
        )),
        Command::Replay {
            session_id,
            last,
            check,
            out,
            ..
        } => replay::replay(session_id, last, check, out),
        Command::Rewind {
            session_id,
            last,
            to,
            code,
            conversation,
            both: _,
            yes,
            with_yours,
        } => {
            // Neither or --both: both.
            let (files, talk) = (code || !conversation, conversation || !code);
            with_runtime(rewind::rewind(
                session_id, last, to, files, talk, yes, with_yours,
            ))
        }
        Command::Models { command } => {
            models::models(command.unwrap_or(ModelsCommand::List { json: false }))
        }
        Command::Skills { command } => knowledge::skills(command.unwrap_or(SkillsCommand::List {
            workspace: None,
            json: false,
        })),
        Command::Memory { command } => {
            knowledge::memory(command.unwrap_or(MemoryCommand::List { json: false }))
        }
        Command::Hooks { command } => hooks::hooks(command),
        Command::Completions { shell } => {
            init::completions(shell);
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp {
            command:
                McpCommand::List {
                    mcp,
                    workspace,
                    json,
                },
        } => with_runtime(checks::mcp_list(mcp, workspace, json)),
        Command::Watch {
            session_id,
            url,
            token,
            follow,
        } => with_runtime(watch::watch(session_id, url, token, follow)),
        Command::Serve(args) => serve::serve(args),
        Command::Run {
            prompt,
            model,
            task: _,
            sandbox,
            workspace,
            print_system_prompt: true,
            goal: _,
        } => setup::print_system_prompt(prompt, model, sandbox, workspace),
        Command::Run {
            prompt,
            model,
            task,
            sandbox,
            workspace,
            print_system_prompt: false,
            goal,
        } => with_runtime(run::run(prompt, model, task, sandbox, workspace, goal)),
        Command::Chat {
            model,
            task,
            sandbox,
            workspace,
            resume,
            last,
        } => with_runtime(chat::chat(model, task, sandbox, workspace, resume, last)),
        Command::Resume {
            session_id,
            prompt,
            model,
            task,
            sandbox,
            last,
        } => {
            // With --last the only positional is the prompt.
            let (id, prompt) = match last {
                true => (None, session_id.or(prompt)),
                false => (session_id, prompt),
            };
            with_runtime(chat::resume(id, prompt, model, task, sandbox))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // An error may quote a server's reply, a file or a model's output.
            errln!("penguin: {}", Untrusted(&e));
            ExitCode::FAILURE
        }
    }
}

/// Installs the log: `RUST_LOG` filters it (default `warn`, so trace-writer failures, provider
/// errors and server faults are always shown), and it goes to stderr or to `log_file`.
fn init_logging(log_file: Option<&std::path::Path>) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let installed = match log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open the log file {}: {e}", path.display()))?;
            builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(untrusted::LogWriter(file)))
                .try_init()
        }
        // Colour only for a person: a log redirected to a file or a pipe stays plain text.
        None => builder
            .with_ansi(render::color_for(std::io::stderr().is_terminal()))
            .with_writer(|| untrusted::LogWriter(std::io::stderr()))
            .try_init(),
    };
    installed.map_err(|e| format!("cannot install the log: {e}"))
}

pub(crate) fn with_runtime(
    fut: impl std::future::Future<Output = Result<ExitCode, String>>,
) -> Result<ExitCode, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(fut)
}
