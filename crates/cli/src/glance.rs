//! What chat's `/diff` and `/cost` show: the workspace's changes as git sees them, and what
//! the session's requests cost so far (from its Trace, priced as `penguin usage` prices).

use std::path::Path;
use std::process::Stdio;

use penguin::agent::Agent;
use penguin::server::usage::{read_requests, summarize, GroupBy, UsageQuery};
use penguin::session::Session;
use penguin::tools::Sandbox;

/// `/diff`: what is uncommitted in the workspace (`git diff HEAD`, then the untracked files),
/// painted as the edit tools' diffs are. The session's own edits are among them; a workspace
/// that is not a git repository says how to see its changes instead.
///
/// git runs under `sandbox`, the session's, as a command would: the repository's config is the
/// workspace's, which a command may have written (`core.fsmonitor`, a filter driver run on
/// each file `git diff` reads), so git gets no more than the session's commands.
pub(crate) async fn diff(workspace: &Path, sandbox: &Sandbox, color: bool) -> String {
    let git = |args: &'static [&'static str]| async move {
        let mut child = sandbox.start("git", workspace, |c| {
            c.args(["-c", "core.fsmonitor=false", "-c", "core.pager=cat"])
                .args(args)
                .current_dir(workspace)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
        })?;
        let stdout = child.stdout.take();
        let mut out = Vec::new();
        if let Some(mut pipe) = stdout {
            tokio::io::AsyncReadExt::read_to_end(&mut pipe, &mut out).await?;
        }
        let status = child.wait().await?;
        std::io::Result::Ok((status.success(), String::from_utf8_lossy(&out).into_owned()))
    };
    match git(&["rev-parse", "--is-inside-work-tree"]).await {
        Ok((true, _)) => {}
        Ok(_) => {
            return "the workspace is not a git repository: /diff shows git's view of it (each edit's diff is under its tool line; /expand shows the last in full)".into()
        }
        Err(e) => return format!("cannot run git: {e}"),
    }
    // A repository without a commit yet has no HEAD: everything is new.
    let tracked = match git(&[
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "HEAD",
        "--",
    ])
    .await
    {
        Ok((true, out)) => out,
        _ => String::new(),
    };
    let untracked = match git(&["ls-files", "--others", "--exclude-standard"]).await {
        Ok((_, out)) => out,
        Err(_) => String::new(),
    };
    if tracked.trim().is_empty() && untracked.trim().is_empty() {
        return "no uncommitted changes in the workspace".into();
    }
    let mut lines = crate::tool_view::painted(&tracked, color);
    let new: Vec<&str> = untracked.lines().collect();
    if !new.is_empty() {
        lines.push(format!("new files (untracked): {}", new.join(", ")));
    }
    lines.join("\n")
}

/// `/cost`: the session's requests so far, per model, with their tokens and cost.
pub(crate) fn cost(agent: &Agent, session: &Session) -> Result<String, String> {
    // What the writer holds is on disk before it is read back.
    session
        .writer()
        .flush()
        .map_err(|e| format!("the trace: {e}"))?;
    let traces = agent.location.traces_dir();
    let mut requests = read_requests(&traces)
        .map_err(|e| format!("cannot read the traces in {}: {e}", traces.display()))?;
    requests.retain(|r| r.session_id == session.id());
    if requests.is_empty() {
        return Ok("no model requests in this session yet".into());
    }
    let prices = agent.config.prices();
    let query = UsageQuery {
        from: None,
        to: None,
        group_by: GroupBy::Model,
    };
    let report = summarize(&requests, &query, &|provider, model, tokens| {
        prices.cost(provider, model, tokens)
    });
    Ok(crate::usage::table(&report, "model"))
}
