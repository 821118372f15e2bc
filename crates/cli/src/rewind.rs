//! `penguin rewind` and chat's `/rewind`: a session's workspace put back as it was before a
//! task (`penguin::rewind`, from its checkpoints), and its conversation forked at the task
//! before. What would change is shown, and asked, before anything is touched.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use penguin::agent::Agent;
use penguin::rewind::FilesPlan;
use penguin::tools::checkpoint::Store;

use crate::console::Console;
use crate::setup::resolve_session_id;
use crate::untrusted::{errln, outln, Untrusted};

/// The question a rewind asks before it changes files.
pub(crate) const QUESTION: &str = "Rewind the files? [y]es / [n]o: ";

/// The question it asks when someone else changed files between the session's tasks.
pub(crate) const YOURS_QUESTION: &str =
    "Undo the changes made between its tasks too (marked yours)? [y]es / [n]o: ";

/// A rewind of a session's files, planned: what it changes is known, nothing is changed yet.
pub(crate) struct FilesRewind {
    workspace: PathBuf,
    store: Store,
    files: FilesPlan,
    to: usize,
}

impl FilesRewind {
    /// Plans putting session `id`'s workspace back as it was before task `to`.
    pub(crate) fn plan(agent: &Agent, id: &str, to: usize) -> Result<FilesRewind, String> {
        let workspace = workspace_of(agent, id)?;
        let store = agent.checkpoint_store();
        let files =
            penguin::rewind::plan_files(&store, &agent.location.traces_dir(), id, to, &workspace)
                .map_err(|e| {
                format!(
                    "cannot compare {} with its checkpoint: {e}",
                    workspace.display()
                )
            })?;
        for d in &files.damaged {
            errln!("penguin: passed over {}", Untrusted(d));
        }
        Ok(FilesRewind {
            workspace,
            store,
            files,
            to,
        })
    }

    /// Whether the files already are as they were.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.plan.is_empty()
    }

    /// Whether someone else changed some of them between the session's tasks.
    pub(crate) fn has_yours(&self) -> bool {
        !self.files.yours.is_empty()
    }

    /// The lines a person reads before saying yes.
    pub(crate) fn describe(&self) -> String {
        if self.is_empty() {
            return format!("the files are already as they were before task {}", self.to);
        }
        let plan = &self.files.plan;
        let yours = |p: &String| self.files.yours.contains(p);
        let mut out = format!(
            "to put {} back as it was before task {}:",
            self.workspace.display(),
            self.to
        );
        for p in &plan.restore {
            match yours(p) {
                true => out.push_str(&format!("\n  restore {p} (yours: changed between tasks)")),
                false => out.push_str(&format!("\n  restore {p}")),
            }
        }
        for p in &plan.remove {
            match yours(p) {
                true => out.push_str(&format!("\n  remove  {p} (yours: made between tasks)")),
                false => out.push_str(&format!("\n  remove  {p} (made since)")),
            }
        }
        for s in &plan.left_alone {
            out.push_str(&format!(
                "\n  leave   {} ({}; not in the checkpoint)",
                s.path, s.why
            ));
        }
        if self.has_yours() {
            out.push_str(&format!(
                "\n{} path(s) marked yours were changed between the session's tasks, not by them: kept unless you say so",
                self.files.yours.len()
            ));
        }
        out
    }

    /// Changes the files as planned (those marked yours only `with_yours`), and says how it
    /// went.
    pub(crate) fn apply(self, with_yours: bool) -> Result<(), String> {
        let failed = self
            .files
            .apply(&self.workspace, &self.store, with_yours)
            .map_err(|e| format!("cannot rewind {}: {e}", self.workspace.display()))?;
        for f in &failed {
            errln!("penguin: not rewound: {}", Untrusted(f));
        }
        let planned = self.files.changes(with_yours);
        let changed = (planned.restore.len() + planned.remove.len()).saturating_sub(failed.len());
        errln!("rewound {changed} path(s) of {}", self.workspace.display());
        if !with_yours && self.has_yours() {
            errln!(
                "kept {} path(s) changed between the session's tasks",
                self.files.yours.len()
            );
        }
        Ok(())
    }
}

/// The conversation of session `id` as before task `to`: a fork after task `to - 1`, whose
/// id is returned; before task 1 there was none.
pub(crate) fn fork_conversation(
    agent: &Agent,
    id: &str,
    to: usize,
) -> Result<Option<String>, String> {
    if to <= 1 {
        errln!("before task 1 the conversation was empty: `penguin chat` starts a new one");
        return Ok(None);
    }
    let forked = agent
        .fork_session(id, penguin::session::ForkPoint::Task(to - 1))
        .map_err(|e| e.to_string())?;
    errln!(
        "the conversation as before task {to} is session {}: continue it with `penguin resume {}`",
        forked.session_id,
        forked.session_id
    );
    Ok(Some(forked.session_id))
}

/// Whether a typed answer is yes.
pub(crate) fn yes(answer: Option<&str>) -> bool {
    matches!(
        answer.map(|a| a.trim().to_ascii_lowercase()).as_deref(),
        Some("y" | "yes")
    )
}

/// `penguin rewind`: `code` and/or `conversation`, asking first unless `yes`.
pub(crate) async fn rewind(
    id: Option<String>,
    last: bool,
    to: usize,
    code: bool,
    conversation: bool,
    yes: bool,
    with_yours: bool,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let id = resolve_session_id(&agent, id.as_deref(), last)?;
    if code {
        let files = FilesRewind::plan(&agent, &id, to)?;
        errln!("{}", Untrusted(&files.describe()));
        if !files.is_empty() {
            let terminal = std::io::stdin().is_terminal();
            let go = match (yes, terminal) {
                (true, _) => true,
                (false, true) => self::yes(Console::stdin().ask(QUESTION).await.as_deref()),
                (false, false) => {
                    return Err("a rewind asks before it changes files, and stdin is not a terminal: pass --yes to rewind without asking".into())
                }
            };
            if !go {
                return Err("nothing was changed".into());
            }
            // Changes made between the session's tasks are someone's own work: undone only
            // when asked for (--with-yours), or agreed to at a terminal.
            let with_yours = with_yours
                || (!yes
                    && terminal
                    && files.has_yours()
                    && self::yes(Console::stdin().ask(YOURS_QUESTION).await.as_deref()));
            files.apply(with_yours)?;
        }
    }
    if conversation {
        if let Some(fork) = fork_conversation(&agent, &id, to)? {
            outln!("{fork}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The workspace a stored session's trace names.
pub(crate) fn workspace_of(agent: &Agent, id: &str) -> Result<PathBuf, String> {
    let head = agent
        .sessions()
        .map_err(|e| format!("cannot list the sessions: {e}"))?
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| format!("no session {id}"))?;
    if head.workspace.is_empty() {
        return Err(format!("session {id}'s trace names no workspace"));
    }
    Ok(head.workspace.into())
}
