//! `exec_command`, `input_command` and `kill_command`: shell commands in the workspace, each
//! leading its own session (off penguin's terminal) and so its own process group, under the
//! session's sandbox, that may run past the call that started them (a dev server, a long
//! build) and are reached again by their `process_id`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use crate::command::{CommandSessions, Exit, ManagedProcess};
use crate::contract::{Output, Tool, ToolOutcome, ToolResult};
use crate::notes;
use crate::path::Workspace;
use crate::sandbox::Sandbox;
use penguin_omni_protocol::StopReason;

/// How long `exec_command` waits for a command before handing back its `process_id`.
pub(crate) const DEFAULT_EXEC_YIELD: Duration = Duration::from_secs(60);
/// How long `input_command` waits after writing.
const DEFAULT_WRITE_YIELD: Duration = Duration::from_millis(250);
/// How long an empty `input_command` poll waits: most builds finish within one.
const DEFAULT_POLL_YIELD: Duration = Duration::from_secs(120);
/// A shorter wait is not worth a round trip.
const MIN_YIELD: Duration = Duration::from_millis(250);
/// A call hands back at least this long before its timeout would fire.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(1);

/// "Wait until it ends": the call's timeout (or its interrupt) comes first.
const NO_YIELD: Duration = Duration::from_secs(365 * 24 * 3600);

/// Ctrl-C, sent alone as `chars`: SIGINT to the process group.
const INTERRUPT: &str = "\u{3}";

/// How long to wait: the asked (or default) time, at least [`MIN_YIELD`], and a margin before
/// the call's timeout. `None` when the timeout leaves no room for a wait: the call then simply
/// runs under its timeout.
fn yield_time(
    asked: Option<u64>,
    default: Duration,
    timeout: Option<Duration>,
) -> Option<Duration> {
    let want = asked.map_or(default, Duration::from_millis).max(MIN_YIELD);
    match timeout {
        None => Some(want),
        Some(t) => {
            let ceiling = t.checked_sub(TIMEOUT_MARGIN)?;
            (ceiling >= MIN_YIELD).then(|| want.min(ceiling))
        }
    }
}

/// The note and stop reason of a command that has exited.
fn exit_outcome(exit: Option<Exit>) -> ToolOutcome {
    let failed = |note: String| ToolOutcome {
        note: Some(note),
        stop: Some(StopReason::Failed),
        images: Vec::new(),
    };
    match exit {
        Some(Exit::Code(0)) => ToolOutcome::default(),
        Some(Exit::Code(code)) => failed(notes::exit_code(code)),
        Some(Exit::Signal(signal)) => failed(notes::exit_signal(signal)),
        Some(Exit::Unknown(_)) | None => failed(notes::EXIT_STATUS_UNKNOWN.to_owned()),
    }
}

/// Ends a command still owned by its call when the call goes away (interrupt, timeout, a
/// foreground command that finished): only a registered command outlives its call.
struct Owned(Option<Arc<ManagedProcess>>);

impl Owned {
    fn release(&mut self) {
        self.0 = None;
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.kill_now();
        }
    }
}

#[derive(Deserialize)]
struct ExecArgs {
    cmd: String,
    #[serde(default)]
    workdir: Option<String>,
    #[serde(default)]
    yield_time_ms: Option<u64>,
    #[serde(default)]
    run_in_background: bool,
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "parsed only to reject a malformed value; the wrapper applies it"
    )]
    timeout_ms: Option<u64>,
}

/// The `exec_command` tool bound to a workspace root.
#[derive(Debug)]
pub(crate) struct ExecCommand {
    pub root: PathBuf,
    /// Confines the command; [`Sandbox::off`] for a call allowed to run outside it.
    pub sandbox: Sandbox,
    pub commands: CommandSessions,
}

#[async_trait]
impl Tool for ExecCommand {
    fn timeout_override(&self, args: &Value) -> Option<Duration> {
        args.get("timeout_ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let args: ExecArgs = serde_json::from_value(args)
            .map_err(|e| format!("invalid arguments for exec_command: {e}"))?;
        let cwd = match args.workdir.as_deref().filter(|w| !w.is_empty()) {
            Some(w) => Workspace {
                root: self.root.clone(),
                protected: self.sandbox.protected().to_vec(),
                ..Workspace::default()
            }
            .resolve(w)?,
            None => self.root.clone(),
        };
        if !cwd.is_dir() {
            return Err(format!("workdir {}: not a directory", cwd.display()));
        }
        let process = ManagedProcess::spawn(&args.cmd, &cwd, &self.root, &self.sandbox)?;
        let mut owned = Owned(Some(process.clone()));
        if args.run_in_background {
            let id = self.commands.register(process.clone()).ok_or_else(|| {
                format!(
                    "too many background commands ({}); kill_command or poll finished ones first",
                    crate::command::MAX_PROCESSES
                )
            })?;
            owned.release();
            self.commands.arm_report(&id, &process);
            return Ok(ToolOutcome {
                note: Some(notes::command_in_background(&id)),
                ..ToolOutcome::default()
            });
        }
        let yield_for = yield_time(args.yield_time_ms, DEFAULT_EXEC_YIELD, out.timeout());
        // With no room for a wait, the command runs until it ends or the call times out.
        process.collect(yield_for.unwrap_or(NO_YIELD), &out).await;
        if process.running() {
            return match self.commands.register(process.clone()) {
                Some(id) => {
                    owned.release();
                    Ok(ToolOutcome {
                        note: Some(notes::command_still_running(&id)),
                        ..ToolOutcome::default()
                    })
                }
                None => Err(format!(
                    "the command was still running and was killed: too many background commands ({})",
                    crate::command::MAX_PROCESSES
                )),
            };
        }
        let mut outcome = exit_outcome(process.exit());
        // Only a failed command gets the note: one that recovered from a refusal needs no help.
        if outcome.stop.is_some() {
            if let Some(denial) = self.sandbox.denial_note(&process.denials(), &self.root) {
                outcome.note = Some(match outcome.note {
                    Some(note) => format!("{note}\n{denial}"),
                    None => denial,
                });
            }
        }
        Ok(outcome)
    }
}

#[derive(Deserialize)]
struct InputArgs {
    process_id: String,
    #[serde(default)]
    chars: Option<String>,
    #[serde(default)]
    yield_time_ms: Option<u64>,
}

/// `input_command`: writes to a command's stdin (or interrupts it), then collects what it
/// printed. An interrupted poll leaves the command running.
#[derive(Debug)]
pub(crate) struct InputCommand {
    pub commands: CommandSessions,
}

#[async_trait]
impl Tool for InputCommand {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let args: InputArgs = serde_json::from_value(args)
            .map_err(|e| format!("invalid arguments for input_command: {e}"))?;
        let id = args.process_id;
        let process = self
            .commands
            .get(&id)
            .ok_or_else(|| notes::unknown_process(&id))?;
        let chars = args.chars.unwrap_or_default();
        let default = if chars.is_empty() {
            DEFAULT_POLL_YIELD
        } else {
            DEFAULT_WRITE_YIELD
        };
        if chars == INTERRUPT {
            process.interrupt();
        } else if chars.contains(INTERRUPT) {
            return Err(
                "chars mixes U+0003 (Ctrl-C) with other content; send \"\\u0003\" alone to interrupt"
                    .into(),
            );
        } else if !chars.is_empty() {
            process.write(&chars).await?;
        }
        let yield_for = yield_time(args.yield_time_ms, default, out.timeout());
        process.collect(yield_for.unwrap_or(NO_YIELD), &out).await;
        if process.running() {
            return Ok(ToolOutcome {
                note: Some(notes::process_still_running(&id)),
                ..ToolOutcome::default()
            });
        }
        self.commands.remove(&id);
        Ok(exit_outcome(process.exit()))
    }
}

#[derive(Deserialize)]
struct KillArgs {
    process_id: String,
}

/// `kill_command`: ends a command's whole group and hands back what it printed since the last
/// look. A killed command sends no completion report.
#[derive(Debug)]
pub(crate) struct KillCommand {
    pub commands: CommandSessions,
}

#[async_trait]
impl Tool for KillCommand {
    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let args: KillArgs = serde_json::from_value(args)
            .map_err(|e| format!("invalid arguments for kill_command: {e}"))?;
        let id = args.process_id;
        let process = self
            .commands
            .get(&id)
            .ok_or_else(|| notes::unknown_process(&id))?;
        process.disarm();
        out.emit(process.drain()).await;
        let exit = process.exit();
        self.commands.remove(&id);
        Ok(ToolOutcome {
            note: Some(match exit {
                None => notes::process_killed(&id),
                Some(exit) => notes::process_had_exited(&id, &exit.detail()),
            }),
            ..ToolOutcome::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_leave_a_margin_before_the_timeout_or_do_not_happen() {
        let s = Duration::from_secs;
        assert_eq!(yield_time(None, s(60), Some(s(120))), Some(s(60)));
        assert_eq!(yield_time(None, s(60), Some(s(30))), Some(s(29)));
        assert_eq!(yield_time(Some(10), s(60), None), Some(MIN_YIELD));
        assert_eq!(yield_time(Some(5_000), s(60), None), Some(s(5)));
        // Too short a timeout for any wait: the command simply runs under it.
        assert_eq!(
            yield_time(None, s(60), Some(Duration::from_millis(300))),
            None
        );
    }
}
