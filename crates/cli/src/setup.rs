//! Building sessions from flags and config: the model source, the tools, new and resumed
//! sessions, and `penguin sessions`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use penguin::agent::{Agent, SessionModel};
use penguin::config::{resolve_model, ModelFlags};
use penguin::engine::Environment;
use penguin::models::{ModelSpec, Protocol};
use penguin::scenario::Scenario;
use penguin::session::{Session, SessionError};
use penguin::subagent::{SubagentEnvironment, SubagentSpawner};
use penguin::tools::{BuiltinTools, Sandbox, SandboxBypass, ToolsConfig};

use crate::args::{ModelArgs, SandboxArgs};
use crate::untrusted::{errln, out, outln, Untrusted};

/// What a session is built from: a model plus tools, or a scenario's scripts (with the real
/// tools instead of its scripted ones when the flag says so).
pub(crate) enum Source {
    Model(ModelSpec),
    Scenario(Box<Scenario>, bool),
}

pub(crate) fn pick_source(agent: &Agent, args: &ModelArgs) -> Result<Source, String> {
    if args.provider.as_deref() == Some("scripted") {
        let path = args
            .scenario
            .as_ref()
            .ok_or("--provider scripted needs --scenario FILE")?;
        let scenario = Scenario::from_file(path).map_err(|e| e.to_string())?;
        return Ok(Source::Scenario(Box::new(scenario), args.real_tools));
    }
    let flags = ModelFlags {
        model: args.model.clone(),
        provider: args.provider.clone(),
        base_url: args.base_url.clone(),
        api_key_env: args.api_key_env.clone(),
    };
    let spec = resolve_model(&agent.config, &flags, |k| std::env::var(k).ok())
        .map_err(|e| e.to_string())?;
    check_key(&spec)?;
    if spec.protocol == Protocol::Demo {
        // Named anywhere (a flag, PENGUIN_MODEL/PENGUIN_PROVIDER, or default_model, which
        // `penguin init` writes as "demo"), the demo was chosen, not fallen back to.
        let env = |k: &str| std::env::var(k).ok();
        let asked = args.model.as_deref() == Some("demo")
            || args.provider.as_deref() == Some("demo")
            || env("PENGUIN_MODEL").as_deref() == Some("demo")
            || env("PENGUIN_PROVIDER").as_deref() == Some("demo")
            || agent.config.default_model.as_deref() == Some("demo");
        if asked {
            errln!("penguin: using the built-in demo model (offline; it only lists the workspace)");
        } else {
            errln!("penguin: no model configured; using the built-in demo model (`penguin init` writes a starter config.toml; see the README)");
        }
    }
    Ok(Source::Model(spec))
}

/// Refuses a model whose API key variable is unset before any request is sent, naming it.
pub(crate) fn check_key(spec: &ModelSpec) -> Result<(), String> {
    match spec.missing_key(|k| std::env::var(k).ok()) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// The session an id argument (or `--last`) names: a full id, a unique part of one, or the
/// newest session of the current directory's workspace.
pub(crate) fn resolve_session_id(
    agent: &Agent,
    id: Option<&str>,
    last: bool,
) -> Result<String, String> {
    if !last {
        let id = id.ok_or("name a session (see `penguin sessions`) or pass --last")?;
        return agent.resolve_id(id).map_err(|e| e.to_string());
    }
    let here = current_workspace()?;
    let list = agent
        .sessions()
        .map_err(|e| format!("cannot list the sessions: {e}"))?;
    list.into_iter()
        .find(|s| Path::new(&s.workspace) == here)
        .map(|s| s.id)
        .ok_or_else(|| {
            format!(
                "no session has {} as its workspace yet (see `penguin sessions`)",
                here.display()
            )
        })
}

/// The current directory as sessions record their workspace (canonical).
pub(crate) fn current_workspace() -> Result<PathBuf, String> {
    let dir = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    Ok(std::fs::canonicalize(&dir).unwrap_or(dir))
}

/// `[sandbox]` of `config.toml` with `--sandbox` applied.
pub(crate) fn sandbox_request(
    agent: &Agent,
    args: &SandboxArgs,
) -> Result<penguin::tools::SandboxRequest, String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut request = agent
        .config
        .sandbox
        .request(args.sandbox.as_deref(), home.as_deref())
        .map_err(|e| e.to_string())?;
    // The config, the server token and every trace: never a command's to read or change.
    request.protected.push(agent.location.root.clone());
    Ok(request)
}

/// The sandbox of this process's sessions, and where their tools keep the calls an approver
/// let run outside it.
#[derive(Clone, Debug)]
pub(crate) struct Confinement {
    pub(crate) sandbox: Sandbox,
    pub(crate) bypass: SandboxBypass,
}

impl Confinement {
    /// `[sandbox]` of `config.toml` with `--sandbox`, resolved against this kernel. What the
    /// kernel cannot enforce is said here, once; `strict` refuses instead.
    pub(crate) fn resolve(agent: &Agent, args: &SandboxArgs) -> Result<Confinement, String> {
        let request = sandbox_request(agent, args)?;
        let sandbox = Sandbox::resolve(&request).map_err(|e| e.to_string())?;
        if let Some(warning) = sandbox.warning_once() {
            errln!("penguin: {warning}");
        }
        if request.strict {
            STRICT.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if sandbox.requested() == Some(penguin::tools::SandboxMode::Off) {
            errln!(
                "penguin: warning: the sandbox is off: commands can change every file you can{}; each one is still asked unless --yes",
                if sandbox.is_active() { "" } else { " and use the network" }
            );
        }
        Ok(Confinement {
            sandbox,
            bypass: SandboxBypass::new(),
        })
    }
}

/// The built-in tools' configuration for a session of `model` (`None`: a scenario's model):
/// `[tools] edit` or the edit tools the model's provider prefers, no `read_image` for a model
/// configured without vision, and the session's sandbox.
pub(crate) fn tools_config(
    agent: &Agent,
    model: Option<&ModelSpec>,
    sandbox: &Sandbox,
) -> Result<ToolsConfig, String> {
    let config = agent
        .config
        .tools_config(model)
        .map_err(|e| e.to_string())?;
    let root = &agent.location.root;
    Ok(ToolsConfig {
        // The user's skills: read by the model (file tools) and its commands, never written.
        sandbox: sandbox
            .clone()
            .with_readable([penguin::skills::user_skills_dir(root)]),
        // Memory: written by the file tools only (the sandbox hides the data root).
        memory: vec![penguin::memory::memory_root(root)],
        ..config
    })
}

pub(crate) fn workspace_tools(
    workspace: &Path,
    config: ToolsConfig,
    bypass: &SandboxBypass,
) -> Result<BuiltinTools, String> {
    BuiltinTools::new(workspace, config)
        .map(|t| t.with_bypass(bypass.clone()))
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))
}

/// The built-in tools plus `run_subagent`, whose children use the same model and the same
/// tools (without `run_subagent`: depth limit 1), so the same sandbox.
pub(crate) fn session_tools(
    agent: &Agent,
    spec: &ModelSpec,
    workspace: &Path,
    sandbox: &Sandbox,
    bypass: &SandboxBypass,
) -> Result<Arc<dyn Environment>, String> {
    // The memory folders of this workspace exist before the tools and the prompt look.
    if let Err(e) = penguin::memory::SessionMemory::prepare(&agent.location.root, workspace) {
        errln!("penguin: memory is not available: {e}");
    }
    let config = tools_config(agent, Some(spec), sandbox)?;
    let builtin = workspace_tools(workspace, config, bypass)?;
    // A child's answer is capped and archived like any tool output of the session.
    let limits = builtin.limits();
    let tools = crate::mcp::with_servers(agent, workspace, sandbox, Arc::new(builtin));
    let spawner: Arc<dyn SubagentSpawner> = Arc::new(Spawner {
        models: agent
            .config
            .named_models()
            .into_iter()
            .filter_map(|(name, spec)| Some((name, spec.ok()?)))
            .collect(),
        agent: agent.clone(),
        spec: spec.clone(),
        ws: workspace.to_path_buf(),
        sandbox: sandbox.clone(),
        bypass: bypass.clone(),
    });
    Ok(Arc::new(
        SubagentEnvironment::new(tools, spawner).with_limits(limits),
    ))
}

/// The children of a session: on its model or another configured one (`run_subagent`'s
/// `model`), in its workspace, with tools of their own (their background commands, and where
/// their reports go, are the child's, never the parent's) under the same sandbox.
struct Spawner {
    agent: Agent,
    spec: ModelSpec,
    models: Vec<(String, ModelSpec)>,
    ws: PathBuf,
    sandbox: Sandbox,
    bypass: SandboxBypass,
}

impl Spawner {
    fn choices(&self) -> penguin::models::ModelChoices<'_> {
        penguin::models::ModelChoices {
            default: &self.spec,
            named: &self.models,
        }
    }
}

impl SubagentSpawner for Spawner {
    fn spawn(&self) -> Result<Session, SessionError> {
        self.spawn_with(None)
    }

    fn spawn_with(&self, model: Option<&str>) -> Result<Session, SessionError> {
        let invalid = |e: String| SessionError::Config(penguin::config::ConfigError::Invalid(e));
        let spec = self
            .choices()
            .pick(model)
            .map_err(|e| invalid(e.to_string()))?;
        check_key(&spec).map_err(invalid)?;
        let config = tools_config(&self.agent, Some(&spec), &self.sandbox).map_err(invalid)?;
        let child_tools = crate::mcp::with_servers(
            &self.agent,
            &self.ws,
            &self.sandbox,
            Arc::new(
                workspace_tools(&self.ws, config, &self.bypass)
                    .map_err(|e| SessionError::Tools(e.into()))?,
            ),
        );
        self.agent
            .create_session(&spec, &self.ws, child_tools, None, Some("subagent".into()))
    }

    fn models(&self) -> Vec<String> {
        self.choices()
            .offered()
            .into_iter()
            .map(|m| m.name)
            .collect()
    }
}

/// `penguin run --print-system-prompt`: the prompt a new session here would start with.
pub(crate) fn print_system_prompt(
    _prompt: Option<String>,
    model: ModelArgs,
    sandbox: SandboxArgs,
    workspace: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let agent = crate::mcp::agent(&model.mcp)?;
    let workspace = workspace_dir(workspace)?;
    let flags = penguin::config::ModelFlags {
        model: model.model.clone(),
        provider: model.provider.clone().filter(|p| p != "scripted"),
        base_url: model.base_url.clone(),
        api_key_env: model.api_key_env.clone(),
    };
    let spec = penguin::config::resolve_model(&agent.config, &flags, |k| std::env::var(k).ok())
        .map_err(|e| e.to_string())?;
    let confinement = Confinement::resolve(&agent, &sandbox)?;
    let tools = session_tools(
        &agent,
        &spec,
        &workspace,
        &confinement.sandbox,
        &confinement.bypass,
    )?;
    // MCP servers are connected as a session's first run would, so their tools are listed.
    if !tools.connect_servers().is_empty() {
        let env = tools.clone();
        crate::with_runtime(async move {
            if let Some(results) = env
                .connect(&penguin::engine::CancellationToken::new())
                .await
            {
                for r in results.iter().filter(|r| r.error.is_some()) {
                    errln!(
                        "penguin: MCP server {} not connected: {}",
                        Untrusted(&r.server),
                        Untrusted(r.error.as_deref().unwrap_or_default())
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        })?;
    }
    let prompt = penguin::prompt::system_prompt_in(
        penguin::agent::DEFAULT_SYSTEM_PROMPT,
        &workspace,
        tools.tools(),
        &agent.location.root,
    );
    let template = penguin::prompt::template_path(&agent.location.root);
    if penguin::prompt::read_template(&agent.location.root).is_some() {
        errln!("penguin: from the template {}", template.display());
    } else {
        errln!(
            "penguin: the built-in layout (a template at {} would replace it; see the README)",
            template.display()
        );
    }
    // It quotes the workspace's AGENTS.md, skills and memory: files anyone may have written.
    outln!("{}", Untrusted(&prompt));
    Ok(ExitCode::SUCCESS)
}

/// `penguin fork ID|--last [--at N]`: the new session's id on stdout, what was kept on stderr.
pub(crate) fn fork(id: Option<String>, last: bool, at: Option<usize>) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let id = resolve_session_id(&agent, id.as_deref(), last)?;
    let point = match at {
        Some(n) => penguin::session::ForkPoint::Task(n),
        None => penguin::session::ForkPoint::End,
    };
    let forked = agent.fork_session(&id, point).map_err(|e| e.to_string())?;
    errln!(
        "penguin: forked {id} after its task {}: continue with `penguin resume {}`",
        forked.tasks,
        forked.session_id
    );
    outln!("{}", forked.session_id);
    Ok(ExitCode::SUCCESS)
}

/// Which session a command works on.
pub(crate) enum Which {
    /// A new one in this workspace (the current directory when `None`).
    New(Option<PathBuf>),
    /// A stored one: this id (or unique part of one), or the newest of this workspace.
    Stored(Option<String>),
}

/// The one place a command's arguments and `config.toml` become a ready session: the agent
/// (its config, with `--mcp` servers), the sandbox (`[sandbox]` and `--sandbox`, resolved
/// against this kernel), the model, and the session itself, new or resumed.
pub(crate) fn ready(
    model: &ModelArgs,
    sandbox: &SandboxArgs,
    which: Which,
) -> Result<(Agent, Session), String> {
    let agent = crate::mcp::agent(&model.mcp)?;
    let confinement = Confinement::resolve(&agent, sandbox)?;
    let session = match which {
        Which::New(workspace) => new_session(
            &agent,
            pick_source(&agent, model)?,
            &workspace_dir(workspace)?,
            &confinement,
        )?,
        Which::Stored(id) => {
            let id = resolve_session_id(&agent, id.as_deref(), id.is_none())?;
            open_session(&agent, &id, model, &confinement)?
        }
    };
    Ok((agent, session))
}

pub(crate) fn new_session(
    agent: &Agent,
    source: Source,
    workspace: &Path,
    confinement: &Confinement,
) -> Result<Session, String> {
    match source {
        Source::Model(spec) => {
            let tools = session_tools(
                agent,
                &spec,
                workspace,
                &confinement.sandbox,
                &confinement.bypass,
            )?;
            let mut session = agent
                .create_session(&spec, workspace, tools, None, None)
                .map_err(|e| e.to_string())?;
            session.set_sandbox(confinement.sandbox.clone());
            Ok(session)
        }
        Source::Scenario(s, real_tools) => {
            let Scenario { llm, tools, .. } = *s;
            let tools = scenario_tools(agent, tools, real_tools, workspace, confinement)?;
            let mut session = agent
                .create_session_with(
                    SessionModel {
                        llm: Box::new(llm),
                        provider: "scripted".into(),
                        model_id: "scenario".into(),
                        context_window: None,
                    },
                    workspace,
                    tools,
                    None,
                    None,
                )
                .map_err(|e| e.to_string())?;
            if real_tools {
                session.set_sandbox(confinement.sandbox.clone());
            }
            Ok(session)
        }
    }
}

/// The scenario's scripted tools, or with `real_tools` the workspace's built-in tools and the
/// agent's MCP servers.
fn scenario_tools(
    agent: &Agent,
    scripted: penguin::engine::scripted::ScriptedEnvironment,
    real_tools: bool,
    workspace: &Path,
    confinement: &Confinement,
) -> Result<Arc<dyn Environment>, String> {
    if !real_tools {
        return Ok(Arc::new(scripted));
    }
    let config = tools_config(agent, None, &confinement.sandbox)?;
    let builtin = workspace_tools(workspace, config, &confinement.bypass)?;
    Ok(crate::mcp::with_servers(
        agent,
        workspace,
        &confinement.sandbox,
        Arc::new(builtin),
    ))
}

pub(crate) fn workspace_dir(workspace: Option<PathBuf>) -> Result<PathBuf, String> {
    let dir = match workspace {
        Some(w) => w,
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    if !dir.is_dir() {
        return Err(format!("workspace {} is not a directory", dir.display()));
    }
    Ok(dir)
}

/// The model a resumed session continues with: the flags when given, else the configured
/// model it was made with, else how it was made (saved beside its trace when created, so a
/// session of `--provider X --base-url Y` resumes without them).
pub(crate) fn model_for_resume(
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
    let recorded = agent
        .recorded_model(&meta.session_id)
        .filter(|r| r.protocol.as_str() == meta.provider && r.model_id == meta.model_id);
    match (found, recorded) {
        (Some(name), _) => resolve_model(
            &agent.config,
            &ModelFlags {
                model: Some(name),
                ..Default::default()
            },
            |_| None,
        ),
        (None, Some(record)) => Ok(record.to_spec()),
        (None, None) => Err(penguin::config::ConfigError::Invalid(format!(
            "the session used {}/{}, which is not configured and was not recorded; pass --model, or --provider with --base-url",
            meta.provider, meta.model_id
        ))),
    }
}

pub(crate) fn open_session(
    agent: &Agent,
    id: &str,
    model: &ModelArgs,
    confinement: &Confinement,
) -> Result<Session, String> {
    if model.provider.as_deref() == Some("scripted") {
        let Source::Scenario(s, real_tools) = pick_source(agent, model)? else {
            unreachable!("scripted gives a scenario")
        };
        let Scenario { llm, tools, .. } = *s;
        let mut session = agent
            .resume_session_with(id, Box::new(llm), |workspace| {
                Ok(scenario_tools(
                    agent,
                    tools,
                    real_tools,
                    workspace,
                    confinement,
                )?)
            })
            .map_err(|e| e.to_string())?;
        if real_tools {
            session.set_sandbox(confinement.sandbox.clone());
        }
        return Ok(session);
    }
    let mut session = agent
        .resume_session(
            id,
            |meta| {
                let spec = model_for_resume(agent, model, meta)?;
                check_key(&spec).map_err(penguin::config::ConfigError::Invalid)?;
                Ok(spec)
            },
            // run_subagent children use the same model, so the tools need it too.
            |w, spec| {
                Ok(session_tools(
                    agent,
                    spec,
                    w,
                    &confinement.sandbox,
                    &confinement.bypass,
                )?)
            },
        )
        .map_err(|e| e.to_string())?;
    session.set_sandbox(confinement.sandbox.clone());
    Ok(session)
}

/// `--sandbox strict` (or `strict = true`) was asked: the session line says so.
static STRICT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `session ID`, and the sandbox when the session's tools have one (`strict` when asked so);
/// a scenario's scripted tools run nothing, and the line says that instead.
pub(crate) fn session_line(session: &Session) -> String {
    match session.sandbox() {
        Some(sandbox) => {
            let mut summary = sandbox.summary();
            if STRICT.load(std::sync::atomic::Ordering::Relaxed) {
                summary = summary.replacen("sandbox: ", "sandbox: strict ", 1);
            }
            format!("session {} · {summary}", session.id())
        }
        None if session.session_meta().provider == "scripted" => format!(
            "session {} · scripted tools (a scenario's: no command runs)",
            session.id()
        ),
        None => format!("session {}", session.id()),
    }
}

pub(crate) fn sessions(here_only: bool, limit: usize) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let here = current_workspace()?;
    let here_str = here.display().to_string();
    let (shown, unread) = agent
        .recent_sessions(limit, |s| !here_only || s.workspace == here_str)
        .map_err(|e| format!("cannot list {}: {e}", agent.location.traces_dir().display()))?;
    if shown.is_empty() && unread == 0 {
        match here_only {
            true => outln!("no sessions in {here_str} yet (`penguin sessions` lists all)"),
            false => outln!(
                "no sessions yet under {}",
                agent.location.traces_dir().display()
            ),
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Of the page, the current workspace's sessions come first.
    let (mine, others): (Vec<_>, Vec<_>) = shown.into_iter().partition(|s| s.workspace == here_str);
    let shown: Vec<_> = mine.into_iter().chain(others).collect();
    out!("{}", sessions_table(&shown, &here_str));
    if unread > 0 {
        let s = if unread == 1 { "" } else { "s" };
        let what = match here_only {
            true => "not searched",
            false => "not shown",
        };
        outln!(
            "… {unread} older session{s} {what} (--limit {} or --all)",
            limit.saturating_mul(2)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The table of `penguin sessions`: a header, then one row per session; the workspace is
/// shown as `.` for the current one and with `~` for the home directory.
pub(crate) fn sessions_table(list: &[penguin::agent::SessionSummary], here: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let place = |w: &str| -> String {
        if w == here {
            ".".into()
        } else if !home.is_empty() && w.starts_with(&home) {
            format!("~{}", &w[home.len()..])
        } else {
            w.to_owned()
        }
    };
    // Every cell comes from a trace (the title is the model's), each shown on one line.
    let cell = |s: &str| crate::untrusted::neutralise(s).replace('\n', " ");
    let rows: Vec<[String; 6]> = list
        .iter()
        .map(|s| {
            [
                cell(&s.id),
                cell(&s.created),
                cell(&place(&s.workspace)),
                cell(&s.model),
                cell(&s.state),
                cell(&s.title),
            ]
        })
        .collect();
    let header = ["ID", "CREATED", "WORKSPACE", "MODEL", "STATE", "TITLE"];
    let mut widths = header.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(c);
                out.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(&header.map(String::from));
    for r in &rows {
        out.push_str(&line(r));
    }
    out
}
