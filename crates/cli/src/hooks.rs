//! `penguin hooks`: list the hooks a session here runs, try one event's hooks on a sample
//! payload, and trust a workspace's own `.penguin/hooks.toml` (docs/hooks.md).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use penguin::agent::Agent;
use penguin::hooks::trust::{self, TrustStore, WorkspaceHooks};
use penguin::hooks::{Hook, HookEvent, Permission};

use crate::args::{HooksCommand, ModelArgs, SandboxArgs};
use crate::setup::{launcher, workspace_dir};
use crate::untrusted::{errln, outln, Untrusted};

pub(crate) fn hooks(command: HooksCommand) -> Result<ExitCode, String> {
    match command {
        HooksCommand::List { workspace } => list(workspace),
        HooksCommand::Test {
            event,
            tool,
            input,
            prompt,
            workspace,
            sandbox,
        } => crate::with_runtime(test(event, tool, input, prompt, workspace, sandbox)),
        HooksCommand::Trust { workspace, yes } => trust_file(workspace, yes),
    }
}

fn workspace(ws: Option<PathBuf>) -> Result<PathBuf, String> {
    let dir = workspace_dir(ws)?;
    dir.canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))
}

fn loaded(agent: &Agent, ws: &std::path::Path) -> Result<trust::Loaded, String> {
    let store = TrustStore::new(&agent.location.root);
    trust::load(&agent.config.hooks, ws, &store).map_err(|e| e.to_string())
}

fn describe(h: &Hook) -> String {
    let mut what = format!("{} `{}`", h.event, h.command);
    if let Some(m) = &h.matcher {
        what.push_str(&format!(" matcher {m:?}"));
    }
    if let Some(p) = &h.command_prefix {
        what.push_str(&format!(" command_prefix {p:?}"));
    }
    what.push_str(&format!(
        " · {} ms · {} · {}",
        h.timeout.as_millis(),
        if h.sandboxed {
            "sandboxed"
        } else {
            "unsandboxed"
        },
        h.origin.as_str()
    ));
    what
}

fn list(ws: Option<PathBuf>) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let ws = workspace(ws)?;
    let loaded = loaded(&agent, &ws)?;
    if loaded.hooks.is_empty() {
        outln!("no hooks (add [[hooks.EVENT]] tables to config.toml: docs/hooks.md)");
    }
    for h in &loaded.hooks {
        outln!("{}", Untrusted(&describe(h)));
    }
    if let Some(notice) = loaded.untrusted_notice() {
        errln!("penguin: {}", Untrusted(&notice));
    }
    Ok(ExitCode::SUCCESS)
}

async fn test(
    event: String,
    tool: String,
    input: String,
    prompt: String,
    ws: Option<PathBuf>,
    sandbox: SandboxArgs,
) -> Result<ExitCode, String> {
    let Some(event) = HookEvent::parse(&event) else {
        let names: Vec<&str> = HookEvent::ALL.iter().map(|e| e.as_str()).collect();
        return Err(format!(
            "unknown event {event:?}: one of {}",
            names.join(", ")
        ));
    };
    let ws = workspace(ws)?;
    let launcher = launcher(&ModelArgs::default(), &sandbox)?;
    let confinement = launcher.confinement().map_err(|e| e.to_string())?;
    let Some(hooks) = launcher
        .hooks(&ws, &confinement)
        .map_err(|e| e.to_string())?
    else {
        outln!("no hooks");
        return Ok(ExitCode::SUCCESS);
    };
    let command = penguin::hooks::command_of(&tool, &input);
    let fields = penguin::hooks::sample_fields(event, &tool, &input, &prompt);
    let results = hooks
        .run(event, fields, |h| {
            !event.is_about_a_tool() || h.matches(&tool, command.as_deref())
        })
        .await;
    if results.is_empty() {
        outln!("no {event} hook applies");
    }
    for r in results {
        outln!(
            "{}: {}",
            Untrusted(&format!("{} `{}`", r.hook.event, r.hook.command)),
            Untrusted(&answer_line(&r.answer))
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One hook's answer on one line.
fn answer_line(answer: &Result<penguin::hooks::HookAnswer, penguin::hooks::HookFailure>) -> String {
    let a = match answer {
        Err(e) => return format!("failed: {e}"),
        Ok(a) => a,
    };
    let mut parts = Vec::new();
    match a.permission {
        Some(Permission::Allow) => parts.push("allow".to_owned()),
        Some(Permission::Deny) => parts.push("deny".to_owned()),
        Some(Permission::Ask) => parts.push("ask".to_owned()),
        None => {}
    }
    if let Some(b) = &a.block {
        parts.push(format!("block: {b}"));
    }
    if let Some(r) = &a.reason {
        parts.push(format!("reason: {r}"));
    }
    if let Some(c) = &a.context {
        parts.push(format!("context: {c}"));
    }
    if let Some(u) = &a.updated_input {
        parts.push(format!("updated input: {u}"));
    }
    if let Some(h) = &a.halt {
        parts.push(format!("stop: {h}"));
    }
    if let Some(m) = &a.system_message {
        parts.push(format!("message: {m}"));
    }
    match parts.is_empty() {
        true => "no decision".to_owned(),
        false => parts.join("; "),
    }
}

fn trust_file(ws: Option<PathBuf>, yes: bool) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let ws = workspace(ws)?;
    let Some(found) = WorkspaceHooks::read(&ws).map_err(|e| e.to_string())? else {
        outln!(
            "no {} in {}",
            trust::WORKSPACE_FILE,
            Untrusted(&ws.display().to_string())
        );
        return Ok(ExitCode::SUCCESS);
    };
    // Refuse a file that would not load: trusting it would change nothing.
    found.hooks().map_err(|e| e.to_string())?;
    let store = TrustStore::new(&agent.location.root);
    if store.is_trusted(&found) {
        outln!("already trusted (sha256 {})", found.hash);
        return Ok(ExitCode::SUCCESS);
    }
    errln!(
        "{}:\n{}\n(sha256 {})",
        Untrusted(&ws.join(trust::WORKSPACE_FILE).display().to_string()),
        Untrusted(found.text.trim_end()),
        found.hash
    );
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err("not trusted: confirm on a terminal, or pass --yes".into());
        }
        errln!("Run these commands in every session started in this workspace? [y/N] ");
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| format!("stdin: {e}"))?;
        if !matches!(line.trim(), "y" | "Y" | "yes") {
            outln!("not trusted");
            return Ok(ExitCode::FAILURE);
        }
    }
    store.trust(&found).map_err(|e| e.to_string())?;
    outln!("trusted (sha256 {})", found.hash);
    Ok(ExitCode::SUCCESS)
}
