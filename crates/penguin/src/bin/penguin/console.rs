//! The terminal side of a session: lines from stdin shared by the REPL and approval prompts,
//! and the approvers the CLI offers.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use async_trait::async_trait;
use penguin::engine::{ApprovalError, Approver};
use penguin::tools::SandboxBypass;
use penguin_omni_protocol::{ApprovalDecision, ModelPayload, OmniMessage};
use tokio::sync::{mpsc, oneshot, Mutex};

/// Lines typed on stdin, shared by the REPL and approval prompts.
///
/// One background thread reads stdin. A line typed while an approval prompt waits answers the
/// prompt; any other line goes to the REPL (which, during a task, steers it or aborts it). The
/// decision is made when the line arrives, so an answer can never be taken for steering.
#[derive(Clone, Debug)]
pub struct Console {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Lines for the REPL.
    lines: Mutex<mpsc::UnboundedReceiver<String>>,
    /// The waiting prompt, if any.
    answer: StdMutex<Option<oneshot::Sender<Option<String>>>>,
    /// The running task's listener, if any: lines typed during a task steer or abort it.
    task: StdMutex<Option<mpsc::UnboundedSender<String>>>,
    /// Test input, handed out on demand instead of by a reader thread.
    fixed: Option<StdMutex<VecDeque<String>>>,
    /// The REPL queue's sender, for lines a task hands back.
    repl_tx: Option<mpsc::UnboundedSender<String>>,
    /// stdin has ended: a prompt asked from now on gets no answer. (The REPL queue never
    /// reports the end itself: `repl_tx` keeps it open.)
    ended: AtomicBool,
}

impl Console {
    /// Starts reading stdin.
    pub fn stdin() -> Console {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            lines: Mutex::new(rx),
            answer: StdMutex::new(None),
            task: StdMutex::new(None),
            fixed: None,
            repl_tx: Some(tx.clone()),
            ended: AtomicBool::new(false),
        });
        let reader = inner.clone();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { break };
                let waiting = reader
                    .answer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                if let Some(prompt) = waiting {
                    let _ = prompt.send(Some(line));
                    continue;
                }
                // Routed under the task slot's lock, so a task ending now (which hands its
                // unread lines back to the REPL queue under the same lock) keeps line order.
                let task = reader.task.lock().unwrap_or_else(|p| p.into_inner());
                let line = match task.as_ref() {
                    Some(t) => match t.send(line) {
                        Ok(()) => continue,
                        Err(mpsc::error::SendError(line)) => line,
                    },
                    None => line,
                };
                if tx.send(line).is_err() {
                    break;
                }
            }
            // End of input: a waiting prompt, and every later one, gets no answer (deny).
            let mut slot = reader.answer.lock().unwrap_or_else(|p| p.into_inner());
            reader.ended.store(true, Ordering::SeqCst);
            if let Some(prompt) = slot.take() {
                let _ = prompt.send(None);
            }
        });
        Console { inner }
    }

    /// A console fed from a list (tests): prompts and the REPL take lines in the order they ask.
    #[cfg(test)]
    pub fn from_lines(lines: Vec<String>) -> Console {
        let (_tx, rx) = mpsc::unbounded_channel();
        Console {
            inner: Arc::new(Inner {
                lines: Mutex::new(rx),
                answer: StdMutex::new(None),
                task: StdMutex::new(None),
                fixed: Some(StdMutex::new(lines.into())),
                repl_tx: None,
                ended: AtomicBool::new(false),
            }),
        }
    }

    /// The next REPL line, or `None` at end of input.
    pub async fn read_line(&self) -> Option<String> {
        if let Some(fixed) = &self.inner.fixed {
            return fixed.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        }
        self.inner.lines.lock().await.recv().await
    }

    /// Lines typed from now on, until the returned guard is dropped, go to it rather than to the
    /// REPL's prompt (a prompt's answer still goes to the prompt). Lines typed ahead stay for
    /// the prompt. A test console never has task lines.
    pub fn task_lines(&self) -> TaskLines {
        let (tx, rx) = mpsc::unbounded_channel();
        if self.inner.fixed.is_none() {
            *self.inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        }
        TaskLines {
            rx,
            console: self.clone(),
        }
    }

    /// Hands a line a task could not use back to the REPL's prompt, after what is queued.
    pub fn requeue(&self, line: String) {
        match (&self.inner.repl_tx, &self.inner.fixed) {
            (Some(tx), _) => {
                let _ = tx.send(line);
            }
            (None, Some(fixed)) => fixed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(line),
            (None, None) => {}
        }
    }

    /// The answer to a prompt: the next line typed from now on, or `None` at end of input.
    pub async fn answer(&self) -> Option<String> {
        if let Some(fixed) = &self.inner.fixed {
            return fixed.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        }
        let rx = {
            // Holding the slot while checking the queue: the reader thread cannot slip a line
            // between the two, so every line goes either to the queue we just drained or to us.
            let mut slot = self.inner.answer.lock().unwrap_or_else(|p| p.into_inner());
            // Nobody reading the REPL queue (a one-shot `penguin run`): lines typed ahead answer
            // prompts. While the REPL reads it (a task in chat), only lines from now on do.
            if let Ok(mut queued) = self.inner.lines.try_lock() {
                match queued.try_recv() {
                    Ok(line) => return Some(line),
                    Err(mpsc::error::TryRecvError::Disconnected) => return None,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
            }
            if self.inner.ended.load(Ordering::SeqCst) {
                return None;
            }
            let (tx, rx) = oneshot::channel();
            *slot = Some(tx);
            rx
        };
        rx.await.ok().flatten()
    }
}

/// Lines typed while a task runs; see [`Console::task_lines`].
#[derive(Debug)]
pub struct TaskLines {
    rx: mpsc::UnboundedReceiver<String>,
    console: Console,
}

impl TaskLines {
    /// The next line typed during the task (pending forever once input has ended).
    pub async fn next(&mut self) -> String {
        match self.rx.recv().await {
            Some(line) => line,
            None => std::future::pending().await,
        }
    }
}

impl Drop for TaskLines {
    fn drop(&mut self) {
        // Lines typed as the task ended and not read by it belong to the prompt, in order.
        let mut task = self
            .console
            .inner
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *task = None;
        while let Ok(line) = self.rx.try_recv() {
            if let Some(tx) = &self.console.inner.repl_tx {
                let _ = tx.send(line);
            }
        }
    }
}

/// Asks on the terminal: `y` allow, `n` deny, `a` allow this and every later call, and for a
/// command under a sandbox `u`: run this one call outside the sandbox.
#[derive(Debug)]
pub struct TerminalApprover {
    console: Console,
    always: AtomicBool,
    bypass: Option<SandboxBypass>,
}

impl TerminalApprover {
    /// An approver reading answers from `console`.
    pub fn new(console: Console) -> TerminalApprover {
        TerminalApprover {
            console,
            always: AtomicBool::new(false),
            bypass: None,
        }
    }

    /// Offers `u` for commands, granting the call in `bypass` (the session's tools' grants).
    pub fn with_bypass(mut self, bypass: Option<SandboxBypass>) -> TerminalApprover {
        self.bypass = bypass;
        self
    }

    /// The command call `u` would run outside the sandbox: its id and arguments.
    fn bypassable(&self, call: &OmniMessage) -> Option<(String, String)> {
        self.bypass.as_ref()?;
        match call.model() {
            Some(ModelPayload::ToolCall(c)) if c.name == "exec_command" => {
                Some((c.tool_call_id.clone(), c.arguments.clone()))
            }
            _ => None,
        }
    }
}

/// The prompt shown for a call.
pub fn approval_prompt(call: &OmniMessage) -> String {
    let (name, args) = match call.model() {
        Some(ModelPayload::ToolCall(c)) => (c.name.as_str(), c.arguments.as_str()),
        _ => ("?", ""),
    };
    let from = call
        .origin
        .as_ref()
        .map(|o| format!(" (from subagent {})", o.join("/")))
        .unwrap_or_default();
    format!("Allow {name} {args}{from}? [y]es / [n]o / [a]lways: ")
}

/// The prompt for a command that may run once outside the sandbox.
fn bypass_prompt(call: &OmniMessage) -> String {
    let prompt = approval_prompt(call);
    let head = prompt.trim_end_matches(": ");
    format!("{head} / [u]nsandboxed, this once: ")
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        if self.always.load(Ordering::Relaxed) {
            return Ok(ApprovalDecision::Allow);
        }
        let bypassable = self.bypassable(call);
        let prompt = match bypassable {
            Some(_) => bypass_prompt(call),
            None => approval_prompt(call),
        };
        let mut err = std::io::stderr();
        let _ = write!(err, "{prompt}");
        let _ = err.flush();
        let answer = self.console.answer().await;
        if answer.is_none() {
            let _ = writeln!(
                err,
                "\n(no answer: input has ended, so the call is denied; pass --yes to allow tool calls without asking)"
            );
        }
        Ok(
            match answer
                .as_deref()
                .map(str::trim)
                .map(str::to_ascii_lowercase)
                .as_deref()
            {
                Some("y" | "yes") => ApprovalDecision::Allow,
                Some("a" | "always") => {
                    self.always.store(true, Ordering::Relaxed);
                    ApprovalDecision::Allow
                }
                Some("u" | "unsandboxed") => match (&bypassable, &self.bypass) {
                    (Some((id, args)), Some(bypass)) => {
                        bypass.grant(id, args);
                        ApprovalDecision::Allow
                    }
                    // Not offered for this call: an answer to a question not asked is no.
                    _ => ApprovalDecision::Deny,
                },
                _ => ApprovalDecision::Deny,
            },
        )
    }
}

/// True when stdout is a terminal (color and the status line are on).
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    #[tokio::test]
    async fn answers_map_to_decisions_and_always_sticks() {
        let console = Console::from_lines(vec!["n".into(), "y".into(), "a".into()]);
        let approver = TerminalApprover::new(console);
        let call = build::tool_call("exec_command", "{}", "c", StopReason::Completed, None);
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Deny));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        // No input left, but "always" answers without asking.
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        let denied_at_eof = TerminalApprover::new(Console::from_lines(vec![]));
        assert_eq!(
            denied_at_eof.approve(&call).await,
            Ok(ApprovalDecision::Deny)
        );
    }

    #[tokio::test]
    async fn u_grants_one_command_outside_the_sandbox() {
        let bypass = SandboxBypass::new();
        let console = Console::from_lines(vec!["u".into(), "u".into(), "u".into()]);
        let approver = TerminalApprover::new(console).with_bypass(Some(bypass.clone()));
        let args = r#"{"cmd":"make install"}"#;
        let call = build::tool_call("exec_command", args, "c1", StopReason::Completed, None);
        assert!(bypass_prompt(&call).ends_with("[a]lways / [u]nsandboxed, this once: "));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert!(bypass.take("c1", args), "granted for this call");
        assert!(!bypass.take("c1", args), "once");
        // `u` for a file tool is not offered, so it is no.
        let file = build::tool_call("write_file", "{}", "c2", StopReason::Completed, None);
        assert_eq!(approver.approve(&file).await, Ok(ApprovalDecision::Deny));
        // Without a sandbox there is nothing to run outside of.
        let plain = TerminalApprover::new(Console::from_lines(vec!["u".into()]));
        assert_eq!(plain.approve(&call).await, Ok(ApprovalDecision::Deny));
    }
}
