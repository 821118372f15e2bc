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
    /// The interactive terminal, when stdin, stdout and stderr are all one.
    term: Option<Arc<crate::term::Term>>,
    shared: Arc<Shared>,
}

/// What the REPL, the renderer and the approver share besides input.
#[derive(Debug, Default)]
struct Shared {
    /// Tool calls already on screen: an approval question waits for its call's line.
    shown: StdMutex<std::collections::HashSet<String>>,
    shown_changed: tokio::sync::Notify,
    /// A renderer is showing calls (else nobody would mark them and nothing waits).
    rendering: AtomicBool,
    /// Text offered as the next prompt (steering that was never delivered).
    next_prompt: StdMutex<Option<String>>,
    /// The last tool output shown collapsed: its tool and full text, for `/expand`.
    collapsed: StdMutex<Option<(String, String)>>,
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
    /// Signalled when stdin ends, for a REPL waiting on its queue.
    ended_signal: tokio::sync::Notify,
}

impl Console {
    /// Reads the terminal (see [`crate::term`]) when stdin, stdout and stderr are one; else
    /// reads stdin line by line.
    pub fn stdin() -> Console {
        let all_terminal = std::io::stdin().is_terminal()
            && std::io::stdout().is_terminal()
            && std::io::stderr().is_terminal();
        if all_terminal {
            if let Some(term) = crate::term::Term::start() {
                let (_tx, rx) = mpsc::unbounded_channel();
                return Console {
                    inner: Arc::new(Inner {
                        lines: Mutex::new(rx),
                        answer: StdMutex::new(None),
                        task: StdMutex::new(None),
                        fixed: None,
                        repl_tx: None,
                        ended: AtomicBool::new(false),
                        ended_signal: tokio::sync::Notify::new(),
                    }),
                    term: Some(term),
                    shared: Arc::default(),
                };
            }
        }
        Console::lines()
    }

    /// The interactive terminal, when there is one.
    pub fn term(&self) -> Option<&Arc<crate::term::Term>> {
        self.term.as_ref()
    }

    /// Marks a tool call as shown on screen.
    pub fn mark_shown(&self, tool_call_id: &str) {
        self.shared
            .shown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tool_call_id.to_owned());
        self.shared.shown_changed.notify_waiters();
    }

    /// A renderer now shows this console's calls (approval questions wait for them).
    pub fn set_rendering(&self, on: bool) {
        self.shared.rendering.store(on, Ordering::SeqCst);
        self.shared.shown_changed.notify_waiters();
    }

    /// Waits (briefly) until the call's line is on screen, so its question comes after it.
    pub async fn until_shown(&self, tool_call_id: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let notified = self.shared.shown_changed.notified();
            if !self.shared.rendering.load(Ordering::SeqCst)
                || self
                    .shared
                    .shown
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(tool_call_id)
            {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// Offers `text` as the next prompt's starting text.
    pub fn offer_next_prompt(&self, text: String) {
        *self
            .shared
            .next_prompt
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(text);
    }

    /// The text offered for the next prompt, once.
    pub fn take_next_prompt(&self) -> Option<String> {
        self.shared
            .next_prompt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Keeps the last collapsed tool output for `/expand`.
    pub fn set_collapsed(&self, collapsed: Option<(String, String)>) {
        if collapsed.is_some() {
            *self
                .shared
                .collapsed
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = collapsed;
        }
    }

    /// The last collapsed tool output.
    pub fn collapsed(&self) -> Option<(String, String)> {
        self.shared
            .collapsed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads stdin line by line (stdin is not a terminal).
    fn lines() -> Console {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            lines: Mutex::new(rx),
            answer: StdMutex::new(None),
            task: StdMutex::new(None),
            fixed: None,
            repl_tx: Some(tx.clone()),
            ended: AtomicBool::new(false),
            ended_signal: tokio::sync::Notify::new(),
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
            reader.ended_signal.notify_waiters();
            reader.ended_signal.notify_one();
            if let Some(prompt) = slot.take() {
                let _ = prompt.send(None);
            }
        });
        Console {
            inner,
            term: None,
            shared: Arc::default(),
        }
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
                ended_signal: tokio::sync::Notify::new(),
            }),
            term: None,
            shared: Arc::default(),
        }
    }

    /// The next REPL line, or `None` at end of input (once every line typed before it is
    /// read).
    pub async fn read_line(&self) -> Option<String> {
        if let Some(fixed) = &self.inner.fixed {
            return fixed.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        }
        let mut lines = self.inner.lines.lock().await;
        loop {
            let ended = self.inner.ended_signal.notified();
            match lines.try_recv() {
                Ok(line) => return Some(line),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if self.inner.ended.load(Ordering::SeqCst) {
                return None;
            }
            tokio::select! {
                line = lines.recv() => return line,
                _ = ended => {}
            }
        }
    }

    /// Lines typed from now on, until the returned guard is dropped, go to it rather than to the
    /// REPL's prompt (a prompt's answer still goes to the prompt). Lines typed ahead stay for
    /// the prompt. A test console never has task lines.
    pub fn task_lines(&self) -> TaskLines {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(term) = &self.term {
            term.set_task_lines(tx);
        } else if self.inner.fixed.is_none() {
            *self.inner.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        }
        TaskLines {
            rx,
            console: self.clone(),
        }
    }

    /// Hands a line a task could not use back to the REPL's prompt, after what is queued.
    pub fn requeue(&self, line: String) {
        if self.term.is_some() {
            self.offer_next_prompt(line);
            return;
        }
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

    /// Asks `question` and returns the answer: on the terminal's bottom line, else on stderr
    /// with the next line of stdin. `None` at end of input.
    pub async fn ask(&self, question: &str) -> Option<String> {
        if let Some(term) = &self.term {
            let answer = term.ask(question.to_owned()).await.ok().flatten();
            if let Some(a) = &answer {
                term.answered(a);
            }
            return answer;
        }
        let mut err = std::io::stderr();
        let _ = write!(err, "{question}");
        let _ = err.flush();
        self.answer().await
    }

    /// Prints a line of penguin's own: above the bottom line on a terminal, else on stderr.
    pub fn note(&self, text: &str) {
        match &self.term {
            Some(term) => term.note(text),
            None => eprintln!("{text}"),
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

/// What an "always" answer allows from then on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every call of one tool (never `exec_command`: commands are scoped by prefix).
    Tool(String),
    /// `exec_command` calls whose command is this prefix, or starts with it and a space, and
    /// chains no other command.
    Command(String),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Tool(t) => write!(f, "{t}"),
            Scope::Command(p) => write!(f, "`{p}`"),
        }
    }
}

/// The command of an `exec_command` call, its whitespace squashed.
fn command_of(name: &str, args: &str) -> Option<String> {
    if name != "exec_command" {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(args).ok()?;
    let cmd = v.get("cmd")?.as_str()?;
    Some(cmd.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// A command that runs more than its first program (`a && b`, `a | b`, `$(b)`, redirections)
/// is never covered by a prefix: `cargo test && rm -rf ~` must not pass as `cargo test`.
fn chains(cmd: &str) -> bool {
    ["&", "|", ";", "`", "$(", ">", "<", "\n"]
        .iter()
        .any(|op| cmd.contains(op))
}

/// The prefix "always" grants for a command: its program, plus its subcommand when the
/// second word looks like one (`cargo test`, `git status`, but `ls` for `ls -la`).
pub fn command_prefix(cmd: &str) -> Option<String> {
    if chains(cmd) {
        return None;
    }
    let mut words = cmd.split_whitespace();
    let program = words.next()?;
    let sub = words.next().filter(|w| {
        w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    });
    Some(match sub {
        Some(sub) => format!("{program} {sub}"),
        None => program.to_owned(),
    })
}

impl Scope {
    /// The scope "always" grants for a call of `name` with `args`; `None` when it grants
    /// nothing beyond this call (a command chaining others).
    pub fn for_call(name: &str, args: &str) -> Option<Scope> {
        match command_of(name, args) {
            Some(cmd) => command_prefix(&cmd).map(Scope::Command),
            None if name == "exec_command" => None,
            None => Some(Scope::Tool(name.to_owned())),
        }
    }

    /// Whether this scope allows a call of `name` with `args`.
    pub fn covers(&self, name: &str, args: &str) -> bool {
        match self {
            Scope::Tool(t) => t == name && name != "exec_command",
            Scope::Command(prefix) => command_of(name, args).is_some_and(|cmd| {
                !chains(&cmd) && (cmd == *prefix || cmd.starts_with(&format!("{prefix} ")))
            }),
        }
    }
}

/// Asks on the terminal: `y` allow, `n` deny, `a` allow this and later calls of the same
/// scope (one tool, or for `exec_command` one command prefix), and for a command under a
/// sandbox `u`: run this one call outside the sandbox.
#[derive(Debug)]
pub struct TerminalApprover {
    console: Console,
    always: StdMutex<Vec<Scope>>,
    bypass: Option<SandboxBypass>,
}

impl TerminalApprover {
    /// An approver reading answers from `console`.
    pub fn new(console: Console) -> TerminalApprover {
        TerminalApprover {
            console,
            always: StdMutex::new(Vec::new()),
            bypass: None,
        }
    }

    /// Offers `u` for commands, granting the call in `bypass` (the session's tools' grants).
    pub fn with_bypass(mut self, bypass: Option<SandboxBypass>) -> TerminalApprover {
        self.bypass = bypass;
        self
    }

    /// What "always" answers have allowed so far.
    pub fn scopes(&self) -> Vec<Scope> {
        self.always
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Forgets every "always" answer.
    pub fn clear(&self) {
        self.always
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.publish();
    }

    /// The status line's note of what is auto-approved (empty when nothing is).
    pub fn summary(&self) -> String {
        let scopes = self.scopes();
        if scopes.is_empty() {
            return String::new();
        }
        let list: Vec<String> = scopes.iter().map(Scope::to_string).collect();
        format!("auto-approved: {}", list.join(", "))
    }

    fn publish(&self) {
        if let Some(term) = self.console.term() {
            term.set_approvals(self.summary());
        }
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
    let always = match Scope::for_call(name, args) {
        Some(Scope::Command(p)) => format!(" (commands starting `{p}`)"),
        Some(Scope::Tool(t)) => format!(" (every {t} call)"),
        None => " (this call only: it chains commands)".into(),
    };
    format!("Allow {name} {args}{from}? [y]es / [n]o / [a]lways{always}: ")
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
        let (id, name, args) = match call.model() {
            Some(ModelPayload::ToolCall(c)) => {
                (c.tool_call_id.clone(), c.name.clone(), c.arguments.clone())
            }
            _ => Default::default(),
        };
        if self.scopes().iter().any(|s| s.covers(&name, &args)) {
            return Ok(ApprovalDecision::Allow);
        }
        self.console.until_shown(&id).await;
        let bypassable = self.bypassable(call);
        let prompt = match bypassable {
            Some(_) => bypass_prompt(call),
            None => approval_prompt(call),
        };
        let answer = self.console.ask(&prompt).await;
        if answer.is_none() {
            self.console.note(
                "(no answer: input has ended, so the call is denied; pass --yes to allow tool calls without asking)",
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
                    match Scope::for_call(&name, &args) {
                        Some(scope) => {
                            self.console.note(&format!(
                                "  from now on {} is allowed without asking (/approvals to review or clear)",
                                match &scope {
                                    Scope::Tool(t) => format!("every {t} call"),
                                    Scope::Command(p) => format!("a command starting `{p}`"),
                                }
                            ));
                            let mut always = self.always.lock().unwrap_or_else(|p| p.into_inner());
                            if !always.contains(&scope) {
                                always.push(scope);
                            }
                        }
                        None => self.console.note(
                            "  allowed this once: a command chaining others is asked every time",
                        ),
                    }
                    self.publish();
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

    fn cmd(c: &str, id: &str) -> OmniMessage {
        let args = serde_json::json!({ "cmd": c }).to_string();
        build::tool_call("exec_command", args, id, StopReason::Completed, None)
    }

    #[tokio::test]
    async fn answers_map_to_decisions_and_always_sticks_to_its_scope() {
        let console = Console::from_lines(vec!["n".into(), "y".into(), "a".into()]);
        let approver = TerminalApprover::new(console);
        let call = cmd("cargo test -p x", "c");
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Deny));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert_eq!(approver.scopes(), [Scope::Command("cargo test".into())]);
        // No input left, but "always" answers without asking, within its scope only.
        assert_eq!(
            approver.approve(&cmd("cargo test", "d")).await,
            Ok(ApprovalDecision::Allow)
        );
        for other in [
            "cargo build",
            "cargo testing",
            "cargo test && rm -rf ~",
            "rm -rf ~",
        ] {
            assert_eq!(
                approver.approve(&cmd(other, "e")).await,
                Ok(ApprovalDecision::Deny),
                "{other} was asked (and denied: input has ended)"
            );
        }
        let write = build::tool_call("write_file", "{}", "w", StopReason::Completed, None);
        assert_eq!(approver.approve(&write).await, Ok(ApprovalDecision::Deny));
        assert_eq!(approver.summary(), "auto-approved: `cargo test`");
        approver.clear();
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Deny));
        let denied_at_eof = TerminalApprover::new(Console::from_lines(vec![]));
        assert_eq!(
            denied_at_eof.approve(&call).await,
            Ok(ApprovalDecision::Deny)
        );
    }

    #[tokio::test]
    async fn always_for_a_file_tool_covers_that_tool_only() {
        let approver = TerminalApprover::new(Console::from_lines(vec!["a".into()]));
        let write = build::tool_call("write_file", "{}", "w1", StopReason::Completed, None);
        assert_eq!(approver.approve(&write).await, Ok(ApprovalDecision::Allow));
        assert_eq!(approver.approve(&write).await, Ok(ApprovalDecision::Allow));
        assert_eq!(
            approver.approve(&cmd("ls", "c")).await,
            Ok(ApprovalDecision::Deny)
        );
        assert_eq!(approver.scopes(), [Scope::Tool("write_file".into())]);
    }

    #[test]
    fn command_prefixes_take_the_subcommand_but_not_flags_or_paths() {
        assert_eq!(command_prefix("ls -la").as_deref(), Some("ls"));
        assert_eq!(command_prefix("git  status").as_deref(), Some("git status"));
        assert_eq!(command_prefix("python3 x.py").as_deref(), Some("python3"));
        assert_eq!(command_prefix("cargo test | tail"), None);
    }

    #[tokio::test]
    async fn u_grants_one_command_outside_the_sandbox() {
        let bypass = SandboxBypass::new();
        let console = Console::from_lines(vec!["u".into(), "u".into(), "u".into()]);
        let approver = TerminalApprover::new(console).with_bypass(Some(bypass.clone()));
        let args = r#"{"cmd":"make install"}"#;
        let call = build::tool_call("exec_command", args, "c1", StopReason::Completed, None);
        assert!(bypass_prompt(&call)
            .ends_with("[a]lways (commands starting `make install`) / [u]nsandboxed, this once: "));
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
