//! The `penguin` command.

mod console;
mod render;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use console::{stdout_is_terminal, Console, TerminalApprover};
use futures::StreamExt;
use penguin::agent::{Agent, SessionModel};
use penguin::config::{resolve_model, ModelFlags};
use penguin::engine::{
    AllowAll, Approver, CancellationToken, Environment, RunOptions, ThinkingLevel,
};
use penguin::models::{ModelSpec, Protocol};
use penguin::omni_protocol::{build, validator::validate_jsonl, Frame, OmniMessage};
use penguin::scenario::{run_scenario_blocking, Scenario};
use penguin::session::Session;
use penguin::subagent::{SubagentEnvironment, SubagentSpawner};
use penguin::tools::{BuiltinTools, ToolsConfig};
use penguin::trace_store::{check_trace, Severity};
use render::{status_text, Renderer};

#[derive(Parser, Debug)]
#[command(
    name = "penguin",
    version,
    about = "An agent harness: one ordered stream between you, a model and its tools."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone, Default)]
struct ModelArgs {
    /// A configured model name, or the model id when --provider is given.
    #[arg(long)]
    model: Option<String>,
    /// Provider protocol for an ad-hoc model: openai-chat, anthropic-messages, gemini, demo, or
    /// scripted (with --scenario).
    #[arg(long)]
    provider: Option<String>,
    /// Base URL of the provider (e.g. http://127.0.0.1:8080/v1 for a local llama.cpp server).
    #[arg(long)]
    base_url: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long)]
    api_key_env: Option<String>,
    /// Scenario file for --provider scripted: the model and tools play its scripts.
    #[arg(long)]
    scenario: Option<PathBuf>,
}

#[derive(Args, Debug, Clone, Default)]
struct TaskArgs {
    /// Allow every tool call without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Print the raw stream as JSON lines instead of rendering it.
    #[arg(long)]
    jsonl: bool,
    /// Thinking effort: none, low, medium, high, xhigh, max.
    #[arg(long)]
    thinking: Option<ThinkingLevel>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one task in a new session and render it live.
    Run {
        /// The prompt (read from stdin when absent and stdin is not a terminal).
        prompt: Option<String>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
        /// The workspace the tools act on (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// A conversation over one session (`/quit` to leave).
    Chat {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
        /// The workspace the tools act on (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Continue this session instead of starting a new one.
        #[arg(long)]
        resume: Option<String>,
    },
    /// Continue a session: run PROMPT in it, or open a chat when no prompt is given.
    Resume {
        /// The session id (see `penguin sessions`).
        session_id: String,
        /// The prompt.
        prompt: Option<String>,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        task: TaskArgs,
    },
    /// List sessions, newest first.
    Sessions,
    /// Follow a session on a running `penguin serve`: its history, then what it does live.
    Watch {
        /// The session id.
        session_id: String,
        /// The server.
        #[arg(long, default_value = "http://127.0.0.1:7364")]
        url: String,
        /// The bearer token (default: PENGUIN_TOKEN, else the server's token file in the data root).
        #[arg(long)]
        token: Option<String>,
        /// Keep following after the session goes idle.
        #[arg(long)]
        follow: bool,
    },
    /// Serve sessions over HTTP + SSE (every request needs `Authorization: Bearer <token>`).
    Serve {
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// Port to bind.
        #[arg(long, default_value_t = 7364)]
        port: u16,
        #[command(flatten)]
        model: ModelArgs,
        /// The workspace of sessions created without one (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Scenario files: a scripted model and tools driving the real engine.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
    /// Check a JSONL stream against the seed's ordering guarantees.
    CheckStream {
        /// The stream file (one OmniMessage per line).
        file: PathBuf,
    },
    /// Trace files.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
}

#[derive(Subcommand, Debug)]
enum ScenarioCommand {
    /// Run a scenario; the stream goes to stdout as JSON lines.
    Run {
        /// The scenario file.
        scenario: PathBuf,
        /// Write every trace record here, one per line.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Write each model request's new messages here, one `{"input": [...]}` per line.
        #[arg(long)]
        requests: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Check trace files: every line parses, only recordable messages, requests balanced,
    /// every committed tool call answered once.
    Check {
        /// Trace files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Scenario {
            command:
                ScenarioCommand::Run {
                    scenario,
                    trace,
                    requests,
                },
        } => scenario_run(scenario, trace, requests),
        Command::CheckStream { file } => check_stream(&file),
        Command::Trace {
            command: TraceCommand::Check { files },
        } => trace_check(&files),
        Command::Sessions => sessions(),
        Command::Watch {
            session_id,
            url,
            token,
            follow,
        } => with_runtime(watch(session_id, url, token, follow)),
        Command::Serve {
            host,
            port,
            model,
            workspace,
        } => serve(host, port, model, workspace),
        Command::Run {
            prompt,
            model,
            task,
            workspace,
        } => with_runtime(run(prompt, model, task, workspace)),
        Command::Chat {
            model,
            task,
            workspace,
            resume,
        } => with_runtime(chat(model, task, workspace, resume)),
        Command::Resume {
            session_id,
            prompt,
            model,
            task,
        } => with_runtime(resume(session_id, prompt, model, task)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("penguin: {e}");
            ExitCode::FAILURE
        }
    }
}

fn with_runtime(
    fut: impl std::future::Future<Output = Result<ExitCode, String>>,
) -> Result<ExitCode, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(fut)
}

#[cfg(not(feature = "scenario"))]
fn scenario_run(
    _path: PathBuf,
    _trace: Option<PathBuf>,
    _requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    Err("this penguin was built without the `scenario` feature; build it with `cargo build -p penguin` (the feature is on by default)".into())
}

#[cfg(feature = "scenario")]
fn scenario_run(
    path: PathBuf,
    trace: Option<PathBuf>,
    requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let scenario = Scenario::from_file(&path).map_err(|e| e.to_string())?;
    let out =
        run_scenario_blocking(scenario).map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    for frame in &out.stream {
        writeln!(stdout, "{}", frame.json()).map_err(|e| format!("stdout: {e}"))?;
    }
    stdout.flush().map_err(|e| format!("stdout: {e}"))?;
    if let Some(p) = trace {
        let body: String = out
            .trace
            .iter()
            .map(|f| format!("{}\n", f.json()))
            .collect();
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = requests {
        let body: String = out
            .requests
            .iter()
            .map(|input| format!("{}\n", serde_json::json!({ "input": input })))
            .collect();
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn check_stream(path: &Path) -> Result<ExitCode, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report = validate_jsonl(std::io::BufReader::new(file));
    for v in &report.violations {
        println!("{}: {v}", path.display());
    }
    if report.is_ok() {
        println!("{}: ok, {} messages", path.display(), report.messages);
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

fn trace_check(files: &[PathBuf]) -> Result<ExitCode, String> {
    let mut failed = false;
    for f in files {
        let problems = check_trace(f);
        for p in &problems {
            println!("{p}");
            failed |= p.severity == Severity::Error;
        }
        if problems.is_empty() {
            println!("{}: ok", f.display());
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn sessions() -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let list = agent
        .sessions()
        .map_err(|e| format!("cannot list {}: {e}", agent.location.traces_dir().display()))?;
    if list.is_empty() {
        println!(
            "no sessions yet under {}",
            agent.location.traces_dir().display()
        );
    }
    for s in list {
        println!(
            "{}  {}  {:<28}  {:<22}  {}",
            s.id, s.created, s.model, s.state, s.title
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn watch(
    session_id: String,
    url: String,
    token: Option<String>,
    follow: bool,
) -> Result<ExitCode, String> {
    let token = match token.or_else(|| {
        std::env::var("PENGUIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    }) {
        Some(t) => t,
        None => {
            let path = penguin::trace_store::data_root().join(penguin::server::TOKEN_FILE);
            std::fs::read_to_string(&path)
                .map(|t| t.trim().to_owned())
                .map_err(|e| format!("no token: pass --token, set PENGUIN_TOKEN, or run the server here ({}: {e})", path.display()))?
        }
    };
    let target = penguin::watch::Target {
        base: url,
        token,
        session_id,
    };
    let mut renderer = Renderer::new(std::io::stdout(), stdout_is_terminal());
    let mut failed = None;
    let state = penguin::watch::watch(&target, follow, |m| {
        if let Err(e) = renderer.frame(&Frame::new(m.clone())) {
            failed.get_or_insert(e);
        }
    })
    .await?;
    if let Some(e) = failed {
        return Err(format!("stdout: {e}"));
    }
    if let Some(title) = state.title {
        eprintln!("title: {title}");
    }
    Ok(ExitCode::SUCCESS)
}

fn serve(
    host: String,
    port: u16,
    model: ModelArgs,
    workspace: Option<PathBuf>,
) -> Result<ExitCode, String> {
    use penguin::hosting::{ModelFactory, ScenarioFactory};
    use penguin::server::{ServeOptions, SessionFactory};
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let workspace = workspace_dir(workspace)?;
    let factory: Arc<dyn SessionFactory> = match pick_source(&agent, &model)? {
        Source::Scenario(_) => {
            let path = model
                .scenario
                .as_ref()
                .ok_or("--provider scripted needs --scenario FILE")?;
            Arc::new(
                ScenarioFactory::from_file(path)
                    .map_err(|e| e.to_string())?
                    .with_workspace(workspace)
                    .with_policy(agent.policy()),
            )
        }
        Source::Model(spec) => {
            if spec.protocol == Protocol::Demo {
                eprintln!("penguin: no model configured; sessions use the built-in demo model");
            }
            let tools_agent = agent.clone();
            let tools_spec = spec.clone();
            Arc::new(ModelFactory {
                spec,
                system_prompt: penguin::agent::DEFAULT_SYSTEM_PROMPT.to_owned(),
                default_workspace: workspace,
                engine: agent.engine_for(&tools_spec),
                environment: Arc::new(move |ws: &Path| {
                    session_tools(&tools_agent, &tools_spec, ws)
                }),
                policy: agent.policy(),
            })
        }
    };
    let mut opts = ServeOptions::new(factory);
    opts.host = host;
    opts.port = port;
    opts.data_root = agent.location.root.clone();
    opts.project = agent.location.project.clone();
    opts.agent = agent.location.agent.clone();
    with_runtime(async move {
        penguin::server::serve(opts)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| e.to_string())
    })
}

/// What a session is built from: a model plus tools, or a scenario's scripts.
enum Source {
    Model(ModelSpec),
    Scenario(Box<Scenario>),
}

fn pick_source(agent: &Agent, args: &ModelArgs) -> Result<Source, String> {
    if args.provider.as_deref() == Some("scripted") {
        let path = args
            .scenario
            .as_ref()
            .ok_or("--provider scripted needs --scenario FILE")?;
        let scenario = Scenario::from_file(path).map_err(|e| e.to_string())?;
        return Ok(Source::Scenario(Box::new(scenario)));
    }
    let flags = ModelFlags {
        model: args.model.clone(),
        provider: args.provider.clone(),
        base_url: args.base_url.clone(),
        api_key_env: args.api_key_env.clone(),
    };
    resolve_model(&agent.config, &flags, |k| std::env::var(k).ok())
        .map(Source::Model)
        .map_err(|e| e.to_string())
}

fn workspace_tools(workspace: &Path) -> Result<Arc<dyn Environment>, String> {
    BuiltinTools::new(workspace, ToolsConfig::default())
        .map(|t| Arc::new(t) as Arc<dyn Environment>)
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))
}

/// The built-in tools plus `run_subagent`, whose children use the same model and the same
/// tools (without `run_subagent`: depth limit 1).
fn session_tools(
    agent: &Agent,
    spec: &ModelSpec,
    workspace: &Path,
) -> Result<Arc<dyn Environment>, String> {
    let tools = workspace_tools(workspace)?;
    let (agent, spec, ws, child_tools) = (
        agent.clone(),
        spec.clone(),
        workspace.to_path_buf(),
        tools.clone(),
    );
    let spawner: Arc<dyn SubagentSpawner> = Arc::new(move || {
        agent.create_session(
            &spec,
            &ws,
            child_tools.clone(),
            None,
            Some("subagent".into()),
        )
    });
    Ok(Arc::new(SubagentEnvironment::new(tools, spawner)))
}

fn new_session(agent: &Agent, source: Source, workspace: &Path) -> Result<Session, String> {
    match source {
        Source::Model(spec) => {
            if spec.protocol == Protocol::Demo {
                eprintln!("penguin: no model configured; using the built-in demo model (see the README to configure one)");
            }
            agent
                .create_session(
                    &spec,
                    workspace,
                    session_tools(agent, &spec, workspace)?,
                    None,
                    None,
                )
                .map_err(|e| e.to_string())
        }
        Source::Scenario(s) => agent
            .create_session_with(
                SessionModel {
                    llm: Box::new(s.llm),
                    provider: "scripted".into(),
                    model_id: "scenario".into(),
                    context_window: None,
                },
                workspace,
                Arc::new(s.tools),
                None,
                None,
            )
            .map_err(|e| e.to_string()),
    }
}

fn approver(task: &TaskArgs, console: &Console) -> Arc<dyn Approver> {
    if task.yes {
        Arc::new(AllowAll)
    } else {
        Arc::new(TerminalApprover::new(console.clone()))
    }
}

/// The first Ctrl-C interrupts `cancel`'s task; a second one exits at once, after syncing the
/// trace so nothing already streamed is lost.
fn interrupt_on_ctrl_c(
    cancel: CancellationToken,
    writer: penguin::trace_store::Writer,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupting (Ctrl-C again to exit)");
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tokio::task::spawn_blocking(move || writer.flush()).await;
                std::process::exit(130);
            }
        }
    })
}

/// Runs one task in `session`, rendering it (or printing JSON lines). Ctrl-C interrupts the
/// task; a second Ctrl-C exits at once.
async fn run_task(
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
        cancel,
        quit: quit.clone(),
    });
    let ok = render(&mut stream, task.jsonl, control).await?;
    ctrl_c.abort();
    if let Err(e) = session.writer().flush() {
        eprintln!("penguin: the trace could not be synced: {e}");
    }
    let failed = session.writer().failed_writes();
    if failed > 0 {
        eprintln!("penguin: {failed} trace record(s) could not be written (see the log above)");
    }
    Ok(ok)
}

/// What a REPL user can do while a task runs: type to steer it, `/abort` to interrupt it.
struct Control {
    lines: console::TaskLines,
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
async fn render(
    stream: &mut futures::stream::BoxStream<'static, Frame>,
    jsonl: bool,
    control: Option<Control>,
) -> Result<bool, String> {
    let tty = stdout_is_terminal();
    let status_on = !jsonl && tty && std::io::stderr().is_terminal();
    let mut r = Renderer::new(std::io::stdout(), tty);
    let mut summary = render::RunSummary::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(120));
    let mut since = Instant::now();
    let mut shown = false;
    let mut last_waiting = r.waiting().clone();
    let has_control = control.is_some();
    let mut control = control;
    loop {
        tokio::select! {
            frame = stream.next() => {
                let Some(frame) = frame else { break };
                if shown {
                    eprint!("\r\x1b[2K");
                    shown = false;
                }
                if jsonl {
                    summary.observe(&frame);
                    println!("{}", frame.json());
                    continue;
                }
                r.frame(&frame).map_err(|e| format!("stdout: {e}"))?;
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
    Ok(if jsonl {
        summary.succeeded()
    } else {
        r.summary().succeeded()
    })
}

/// Runs one prompt in `session`; the exit code says whether the task completed.
async fn one_task(
    session: &mut Session,
    prompt: String,
    task: &TaskArgs,
) -> Result<ExitCode, String> {
    let console = Console::stdin();
    let ok = run_task(
        session,
        vec![build::user_text(prompt)],
        task,
        approver(task, &console),
        None,
    )
    .await?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn read_prompt(prompt: Option<String>) -> Result<String, String> {
    match prompt {
        Some(p) => Ok(p),
        None if !std::io::stdin().is_terminal() => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| format!("stdin: {e}"))?;
            Ok(s.trim().to_owned())
        }
        None => Ok("Look around the workspace and tell me what it is.".to_owned()),
    }
}

fn workspace_dir(workspace: Option<PathBuf>) -> Result<PathBuf, String> {
    let dir = match workspace {
        Some(w) => w,
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    if !dir.is_dir() {
        return Err(format!("workspace {} is not a directory", dir.display()));
    }
    Ok(dir)
}

async fn run(
    prompt: Option<String>,
    model: ModelArgs,
    task: TaskArgs,
    workspace: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let workspace = workspace_dir(workspace)?;
    // Read a piped prompt before the console takes stdin over for approvals.
    let prompt = read_prompt(prompt)?;
    let mut session = new_session(&agent, pick_source(&agent, &model)?, &workspace)?;
    if !task.jsonl {
        if std::io::stderr().is_terminal() {
            eprintln!("\x1b[2msession {}\x1b[0m", session.id());
        } else {
            eprintln!("session {}", session.id());
        }
    }
    one_task(&mut session, prompt, &task).await
}

fn model_for_resume(
    agent: &Agent,
    args: &ModelArgs,
    meta: &penguin::omni_protocol::SessionMeta,
) -> Result<ModelSpec, penguin::config::ConfigError> {
    if args.provider.is_some() || args.model.is_some() {
        let flags = ModelFlags {
            model: args.model.clone(),
            provider: args.provider.clone(),
            base_url: args.base_url.clone(),
            api_key_env: args.api_key_env.clone(),
        };
        return resolve_model(&agent.config, &flags, |k| std::env::var(k).ok());
    }
    if meta.provider == "demo" {
        return Ok(ModelSpec::demo());
    }
    // The configured model the session was made with.
    let found = agent
        .config
        .models
        .iter()
        .find(|(_, m)| m.model == meta.model_id && m.protocol == meta.provider)
        .map(|(name, _)| name.clone());
    match found {
        Some(name) => resolve_model(
            &agent.config,
            &ModelFlags {
                model: Some(name),
                ..Default::default()
            },
            |_| None,
        ),
        None => Err(penguin::config::ConfigError::Invalid(format!(
            "the session used {}/{}, which is not configured; pass --model or --provider",
            meta.provider, meta.model_id
        ))),
    }
}

fn open_session(agent: &Agent, id: &str, model: &ModelArgs) -> Result<Session, String> {
    if model.provider.as_deref() == Some("scripted") {
        let Source::Scenario(s) = pick_source(agent, model)? else {
            unreachable!("scripted gives a scenario")
        };
        let s = *s;
        return agent
            .resume_session_with(id, Box::new(s.llm), Arc::new(s.tools))
            .map_err(|e| e.to_string());
    }
    agent
        .resume_session(
            id,
            |meta| model_for_resume(agent, model, meta),
            // run_subagent children use the same model, so the tools need it too.
            |w, spec| session_tools(agent, spec, w),
        )
        .map_err(|e| e.to_string())
}

async fn resume(
    id: String,
    prompt: Option<String>,
    model: ModelArgs,
    task: TaskArgs,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let mut session = open_session(&agent, &id, &model)?;
    let Some(prompt) = prompt else {
        return repl(session, task).await;
    };
    one_task(&mut session, prompt, &task).await
}

async fn chat(
    model: ModelArgs,
    task: TaskArgs,
    workspace: Option<PathBuf>,
    resume_id: Option<String>,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let session = match resume_id {
        Some(id) => open_session(&agent, &id, &model)?,
        None => new_session(
            &agent,
            pick_source(&agent, &model)?,
            &workspace_dir(workspace)?,
        )?,
    };
    repl(session, task).await
}

/// `/compact`: replace the context with a summary now (the session's next run starts with it).
async fn compact(session: &mut Session, task: &TaskArgs) -> Result<(), String> {
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
    if task.jsonl {
        while let Some(frame) = stream.next().await {
            println!("{}", frame.json());
        }
    } else {
        render(&mut stream, false, None).await?;
    }
    ctrl_c.abort();
    if cancel.is_cancelled() {
        eprintln!("compaction interrupted; the context is unchanged");
    } else if !task.jsonl {
        eprintln!("context compacted; the summary opens the next message's context");
    }
    Ok(())
}

async fn repl(mut session: Session, task: TaskArgs) -> Result<ExitCode, String> {
    let console = Console::stdin();
    let approver = approver(&task, &console);
    let quit = Arc::new(std::sync::atomic::AtomicBool::new(false));
    eprintln!(
        "session {} — /quit to leave, /compact; while a task runs, type to steer it, /abort or Ctrl-C to interrupt",
        session.id()
    );
    loop {
        eprint!("› ");
        let _ = std::io::stderr().flush();
        // Ctrl-C at the prompt leaves, as it would in any REPL (during a task it interrupts).
        let line = tokio::select! {
            line = console.read_line() => line,
            _ = tokio::signal::ctrl_c() => None,
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
