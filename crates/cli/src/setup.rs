//! Building sessions from flags and config: the flags mapped to a [`Launcher`]'s overrides,
//! the session an id names, `penguin run --print-system-prompt`, `fork` and `sessions`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use penguin::agent::Agent;
use penguin::config::ModelFlags;
use penguin::launch::{Launcher, Overrides};
use penguin::session::Session;

use crate::args::{ModelArgs, SandboxArgs, SessionMark};
use crate::untrusted::{errln, out, outln, Untrusted};

/// The launcher of this command: `config.toml` with the command line's model, scenario, MCP
/// and sandbox flags over it; its notices go to stderr.
pub(crate) fn launcher(model: &ModelArgs, sandbox: &SandboxArgs) -> Result<Launcher, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let mut overrides = Overrides::default()
        .model_flags(ModelFlags {
            model: model.model.clone(),
            provider: model.provider.clone(),
            base_url: model.base_url.clone(),
            api_key_env: model.api_key_env.clone(),
            retries: model.retries,
        })
        .mcp(model.mcp.iter().cloned());
    if let Some(file) = &model.scenario {
        if model.provider.as_deref() == Some("scripted") {
            overrides = overrides.scenario(file, model.real_tools);
        }
    }
    if let Some(mode) = &sandbox.sandbox {
        overrides = overrides.sandbox(mode);
    }
    let launcher = Launcher::new(agent, overrides).map_err(|e| e.to_string())?;
    Ok(launcher.with_notices(Arc::new(|n| errln!("penguin: {}", Untrusted(n)))))
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
    // The person's newest session here: a subagent's is its parent's to drive.
    list.into_iter()
        .find(|s| Path::new(&s.workspace) == here && !s.subagent)
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

/// `penguin run --print-system-prompt`: the prompt a new session here would start with.
pub(crate) fn print_system_prompt(
    _prompt: Option<String>,
    mut model: ModelArgs,
    sandbox: SandboxArgs,
    workspace: Option<PathBuf>,
) -> Result<ExitCode, String> {
    // A scenario's prompt is its own: the prompt shown is the configured model's.
    model.provider = model.provider.filter(|p| p != "scripted");
    let launcher = launcher(&model, &sandbox)?;
    let workspace = workspace_dir(workspace)?;
    // Sized as a new session's model is: a small window shows the compact prompt.
    let (spec, _) = launcher.sized(launcher.model().map_err(|e| e.to_string())?);
    let confinement = launcher.confinement().map_err(|e| e.to_string())?;
    let tools = launcher
        .session_tools(&spec, &workspace, &confinement)
        .map_err(|e| e.to_string())?;
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
    let root = &launcher.agent().location.root;
    let prompt = launcher.system_prompt(&spec, &workspace, tools.tools());
    let template = penguin::prompt::template_path(root);
    if penguin::prompt::read_template(root).is_some() {
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

/// `penguin export`: the session's Trace as one text, to `out` or stdout.
pub(crate) fn export(
    id: Option<String>,
    last: bool,
    out: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let id = resolve_session_id(&agent, id.as_deref(), last)?;
    let traces = agent.location.traces_dir();
    let written = match &out {
        Some(path) => std::fs::File::create(path)
            .and_then(|f| {
                let mut w = std::io::BufWriter::new(f);
                penguin::trace_store::export_session(&traces, &id, &mut w)?;
                std::io::Write::flush(&mut w)
            })
            .map_err(|e| format!("cannot write {}: {e}", path.display())),
        // On stdout each line's hazards are escaped as JSON escapes them (`json_line`): the
        // same records, inert on a terminal.
        None => {
            let mut all = Vec::new();
            penguin::trace_store::export_session(&traces, &id, &mut all)
                .map_err(|e| format!("cannot export {id}: {e}"))?;
            for line in String::from_utf8_lossy(&all).lines() {
                outln!("{}", crate::untrusted::json_line(line));
            }
            Ok(())
        }
    };
    written?;
    if let Some(path) = out {
        errln!("penguin: session {id} is in {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `penguin import FILE`: an exported Trace made a session here; prints its id.
pub(crate) fn import(file: &Path) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let text = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let id = penguin::trace_store::import_session(&agent.location.traces_dir(), &text)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .session_id;
    errln!("penguin: imported session {id}: `penguin show {id}`, `penguin resume {id}`");
    outln!("{id}");
    Ok(ExitCode::SUCCESS)
}

/// Which session a command works on.
pub(crate) enum Which {
    /// A new one in this workspace (the current directory when `None`).
    New(Option<PathBuf>),
    /// A stored one: this id (or unique part of one), or the newest of this workspace.
    Stored(Option<String>),
}

/// A command's arguments made a ready session by the [`Launcher`]: new in a workspace, or
/// stored and resumed.
pub(crate) fn ready(
    model: &ModelArgs,
    sandbox: &SandboxArgs,
    which: Which,
) -> Result<(Agent, Session), String> {
    let launcher = launcher(model, sandbox)?;
    let confinement = launcher.confinement().map_err(|e| e.to_string())?;
    if confinement.strict {
        STRICT.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let session = match which {
        Which::New(workspace) => launcher.new_session(&workspace_dir(workspace)?, &confinement),
        Which::Stored(id) => {
            let id = resolve_session_id(launcher.agent(), id.as_deref(), id.is_none())?;
            launcher.open_session(&id, &confinement)
        }
    }
    .map_err(|e| e.to_string())?;
    Ok((launcher.agent().clone(), session))
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

/// `--sandbox strict` (or `strict = true`) was asked: the session line says so.
static STRICT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `session ID`, what the approval mode asks, the sandbox when the session's tools have one
/// (`strict` when asked so; a scenario's scripted tools run nothing, and the line says that
/// instead), and how many hooks run.
pub(crate) fn session_line(session: &Session, approval: penguin::config::ApprovalMode) -> String {
    let head = format!(
        "session {} · {}: {}",
        session.id(),
        approval.as_str(),
        approval.describe()
    );
    let line = sandbox_line(session, head);
    match session.hooks().map_or(0, |h| h.len()) {
        0 => line,
        1 => format!("{line} · 1 hook"),
        n => format!("{line} · {n} hooks"),
    }
}

fn sandbox_line(session: &Session, head: String) -> String {
    match session.sandbox() {
        Some(sandbox) => {
            let mut summary = sandbox.summary();
            if STRICT.load(std::sync::atomic::Ordering::Relaxed) {
                summary = summary.replacen("sandbox: ", "sandbox: strict ", 1);
            }
            format!("{head} · {summary}")
        }
        None if session.session_meta().provider == "scripted" => {
            format!("{head} · scripted tools (a scenario's: no command runs)")
        }
        None => head,
    }
}

/// `penguin sessions`: a page of the list, by the server's rule (`penguin::server::marks`):
/// archived ones left out (or only they, with `--archived`), a search of titles and first
/// prompts, pinned ones first.
pub(crate) fn sessions(
    here_only: bool,
    limit: usize,
    archived: bool,
    search: Option<&str>,
) -> Result<ExitCode, String> {
    use penguin::server::marks::{read_marks, Archived, SessionFilter};
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let here = current_workspace()?;
    let here_str = here.display().to_string();
    let marks = read_marks(&agent.location);
    let filter = SessionFilter::new(
        if archived {
            Archived::Only
        } else {
            Archived::Hidden
        },
        search,
    );
    let pinned = |id: &str| marks.get(id).is_some_and(|m| m.pinned);
    let (mut shown, unread) = agent
        .recent_sessions(limit, pinned, |s| {
            let m = marks.get(&s.id);
            let given = m.and_then(|m| m.title.as_deref());
            (!here_only || s.workspace == here_str)
                && filter.keeps(
                    m.is_some_and(|m| m.archived),
                    given
                        .into_iter()
                        .chain([s.title.as_str(), s.prompt.as_str()]),
                )
        })
        .map_err(|e| format!("cannot list {}: {e}", agent.location.traces_dir().display()))?;
    if shown.is_empty() && unread == 0 {
        let traces = agent.location.traces_dir();
        let traces = traces.display();
        match (archived || filter.searches(), here_only) {
            (false, true) => outln!("no sessions in {here_str} yet (`penguin sessions` lists all)"),
            (false, false) => outln!("no sessions yet under {traces}"),
            (true, true) => outln!("no {} in {here_str}", unmatched(archived)),
            (true, false) => outln!("no {} under {traces}", unmatched(archived)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    // The title a person gave (over the API) names the session here too.
    for s in &mut shown {
        if let Some(m) = marks.get(&s.id) {
            if let Some(t) = &m.title {
                s.title.clone_from(t);
            }
            if m.pinned {
                s.title.insert_str(0, "[pinned] ");
            }
        }
    }
    // Of the page, the pinned sessions come first, then the current workspace's.
    let (pins, rest): (Vec<_>, Vec<_>) = shown.into_iter().partition(|s| pinned(&s.id));
    let (mine, others): (Vec<_>, Vec<_>) = rest.into_iter().partition(|s| s.workspace == here_str);
    let shown: Vec<_> = pins.into_iter().chain(mine).chain(others).collect();
    out!("{}", sessions_table(&shown, &here_str));
    if unread > 0 {
        let s = if unread == 1 { "" } else { "s" };
        let what = match here_only || archived || filter.searches() {
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

// What an empty filtered list had none of.
fn unmatched(archived: bool) -> &'static str {
    match archived {
        true => "archived sessions that match",
        false => "sessions that match",
    }
}

/// `penguin sessions archive|unarchive|pin|unpin ID`.
pub(crate) fn mark_session(mark: SessionMark) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let (query, archived, pinned, done) = match &mark {
        SessionMark::Archive { session_id } => (session_id, Some(true), None, "archived"),
        SessionMark::Unarchive { session_id } => (session_id, Some(false), None, "unarchived"),
        SessionMark::Pin { session_id } => (session_id, None, Some(true), "pinned"),
        SessionMark::Unpin { session_id } => (session_id, None, Some(false), "unpinned"),
    };
    let id = agent.resolve_id(query).map_err(|e| e.to_string())?;
    penguin::server::marks::set_marks(&agent.location, &id, archived, pinned)
        .map_err(|e| format!("cannot mark session {id}: {e}"))?;
    outln!("{done} {id}");
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
