//! The terminal side of a session: lines from stdin shared by the REPL and approval prompts,
//! and the approvers the CLI offers.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use penguin_engine::Approver;
use penguin_omni_protocol::{ApprovalDecision, ModelPayload, OmniMessage};
use tokio::sync::{mpsc, Mutex};

/// Lines typed on stdin, read by one background thread, consumed by whoever asks next.
#[derive(Clone, Debug)]
pub struct Console {
    lines: Arc<Mutex<mpsc::UnboundedReceiver<String>>>,
}

impl Console {
    /// Starts reading stdin.
    pub fn stdin() -> Console {
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Console {
            lines: Arc::new(Mutex::new(rx)),
        }
    }

    /// A console fed from a list (tests).
    pub fn from_lines(lines: Vec<String>) -> Console {
        let (tx, rx) = mpsc::unbounded_channel();
        for l in lines {
            let _ = tx.send(l);
        }
        Console {
            lines: Arc::new(Mutex::new(rx)),
        }
    }

    /// The next line, or `None` at end of input.
    pub async fn read_line(&self) -> Option<String> {
        self.lines.lock().await.recv().await
    }
}

/// Allows every call (`--yes`).
#[derive(Debug, Default)]
pub struct AllowAll;

#[async_trait]
impl Approver for AllowAll {
    async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, String> {
        Ok(ApprovalDecision::Allow)
    }
}

/// Asks on the terminal: `y` allow, `n` deny, `a` allow this and every later call.
#[derive(Debug)]
pub struct TerminalApprover {
    console: Console,
    always: AtomicBool,
}

impl TerminalApprover {
    /// An approver reading answers from `console`.
    pub fn new(console: Console) -> TerminalApprover {
        TerminalApprover {
            console,
            always: AtomicBool::new(false),
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

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, String> {
        if self.always.load(Ordering::Relaxed) {
            return Ok(ApprovalDecision::Allow);
        }
        let mut err = std::io::stderr();
        let _ = write!(err, "{}", approval_prompt(call));
        let _ = err.flush();
        let answer = self.console.read_line().await;
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
}
