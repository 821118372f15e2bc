//! The chat prompt's line editor (rustyline): history saved per user in the data root,
//! multi-line input, completion of slash commands, Ctrl-C clears the line, Ctrl-D on an empty
//! line leaves, and a [`Waker`] that ends a read from outside (background work finished).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Cmd, Config, Editor, Helper, KeyCode, KeyEvent, Modifiers};

/// The REPL's commands, with what they do (`/help`).
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    ("/help", "this list"),
    (
        "/approvals",
        "what \"always\" answers allow; /approvals clear forgets them",
    ),
    (
        "/expand",
        "/expand [N]: the last (or N-th last) collapsed tool output, in full",
    ),
    (
        "/diff",
        "the workspace's uncommitted changes (git diff, untracked files)",
    ),
    (
        "/cost",
        "this session's requests so far: tokens and cost per model",
    ),
    (
        "/model",
        "/model NAME: go on in this session with another configured model",
    ),
    (
        "/new",
        "a new session in this workspace (this one stays: penguin resume); also /clear",
    ),
    (
        "/rewind",
        "/rewind N: the files and the conversation as before task N (asks first)",
    ),
    ("/compact", "replace the context with a summary now"),
    (
        "/goal",
        "/goal[:BUDGET] OBJECTIVE: loop rounds until the model marks it complete or blocked",
    ),
    ("/abort", "(during a task) interrupt it; so does Ctrl-C"),
    ("/quit", "leave (also /exit, or Ctrl-D on an empty line)"),
];

/// What the prompt gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// A line (possibly several, joined by newlines).
    Line(String),
    /// Ctrl-C: the line was cleared.
    Cleared,
    /// Ctrl-D on an empty line, or the terminal went away.
    End,
    /// [`Waker::wake`] ended the read; what had been typed so far.
    Woken(String),
}

/// Where a read is, for [`Waker`]: rustyline cannot be told to return, but while it reads it
/// turns SIGINT into "interrupted" (the terminal is raw, so Ctrl-C arrives as a key, not as
/// this signal). The signal may only be sent while rustyline's handler is installed: from the
/// first refresh of the line (the helper sees it) until the line is accepted (the validator
/// sees it). Outside that window a SIGINT would reach the process's own handler instead. One
/// race remains: a read ended by Ctrl-C or Ctrl-D is marked over only once rustyline returns,
/// so a wake in the microseconds between reaches the process's handler, and a task started
/// right then could take it as an interrupt.
#[derive(Debug, Default)]
struct WakeState {
    phase: Phase,
    /// A wake was asked for: sent as soon as the read is armed.
    wanted: bool,
    /// A SIGINT was sent for the current read.
    sent: bool,
    /// The line as last drawn, to give back when woken.
    typed: String,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum Phase {
    /// No read, or one whose line is accepted.
    #[default]
    Idle,
    /// A read started; rustyline may not have installed its handler yet.
    Starting,
    /// rustyline is reading with its SIGINT handler installed.
    Armed,
}

impl WakeState {
    fn interrupt(&mut self) {
        self.sent = true;
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::SIGINT);
    }
}

/// Ends the prompt's current (or next) read with [`Input::Woken`], from any thread.
#[derive(Clone, Debug)]
pub struct Waker(Arc<Mutex<WakeState>>);

impl Waker {
    /// Asks for the read to end: now if one is waiting for keys, else as soon as the next one
    /// starts (until [`Waker::forget`]).
    pub fn wake(&self) {
        let mut state = self.0.lock().unwrap();
        state.wanted = true;
        if state.phase == Phase::Armed && !state.sent {
            state.interrupt();
        }
    }

    /// Drops a wake asked for earlier: the caller has just looked for what it was about.
    pub fn forget(&self) {
        self.0.lock().unwrap().wanted = false;
    }
}

#[derive(Debug)]
struct ChatHelper(Arc<Mutex<WakeState>>);

impl Completer for ChatHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let typed = &line[..pos];
        if !typed.starts_with('/') || typed.contains(char::is_whitespace) {
            return Ok((pos, Vec::new()));
        }
        let names = COMMANDS
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .filter(|name| name.starts_with(typed))
            .collect();
        Ok((0, names))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;

    /// Called on every redraw of the line, from inside the read: the moment it is armed.
    fn hint(&self, line: &str, _pos: usize, _ctx: &rustyline::Context<'_>) -> Option<String> {
        let mut state = self.0.lock().unwrap();
        state.typed.clear();
        state.typed.push_str(line);
        if state.phase == Phase::Starting {
            state.phase = Phase::Armed;
            if state.wanted && !state.sent {
                state.interrupt();
            }
        }
        None
    }
}

impl Highlighter for ChatHelper {}

impl Validator for ChatHelper {
    /// A line ending in `\` continues on the next one.
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            // Accepted: rustyline returns and removes its handler next, so no more wakes.
            self.0.lock().unwrap().phase = Phase::Idle;
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ChatHelper {}

/// The chat prompt.
pub struct LineEditor {
    /// Taken while a read runs on a blocking thread.
    editor: Option<Editor<ChatHelper, FileHistory>>,
    history: PathBuf,
    wake: Arc<Mutex<WakeState>>,
    /// Keeps a SIGINT handler installed for the process while rustyline's is not, so a wake
    /// racing the end of a read is ignored instead of ending penguin.
    _sigint: Option<tokio::signal::unix::Signal>,
}

impl std::fmt::Debug for LineEditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineEditor")
            .field("history", &self.history)
            .finish_non_exhaustive()
    }
}

impl LineEditor {
    /// An editor whose history lives in `root/history` (the data root: one per user).
    pub fn new(root: &Path) -> Result<LineEditor, String> {
        let config = Config::builder()
            .max_history_size(2000)
            .map_err(|e| e.to_string())?
            .history_ignore_dups(true)
            .map_err(|e| e.to_string())?
            .history_ignore_space(true)
            .auto_add_history(false)
            .build();
        let mut editor: Editor<ChatHelper, FileHistory> =
            Editor::with_config(config).map_err(|e| format!("line editor: {e}"))?;
        let wake = Arc::new(Mutex::new(WakeState::default()));
        editor.set_helper(Some(ChatHelper(wake.clone())));
        editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);
        let history = root.join("history");
        // A missing history file is a first run, not an error.
        let _ = editor.load_history(&history);
        let sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
        Ok(LineEditor {
            editor: Some(editor),
            history,
            wake,
            _sigint: sigint,
        })
    }

    /// A handle that ends a read from another thread.
    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    /// A printer that writes above the prompt while a read waits (for notices).
    pub fn printer(&mut self) -> Option<Box<dyn rustyline::ExternalPrinter + Send>> {
        let printer = self.editor.as_mut()?.create_external_printer().ok()?;
        Some(Box::new(printer))
    }

    /// Reads one entry with `prompt`, starting from `initial` when given.
    pub async fn read(&mut self, prompt: &str, initial: Option<String>) -> Input {
        let Some(mut editor) = self.editor.take() else {
            return Input::End;
        };
        let prompt = prompt.to_owned();
        {
            let mut state = self.wake.lock().unwrap();
            state.phase = Phase::Starting;
            state.sent = false;
        }
        let joined = tokio::task::spawn_blocking(move || {
            let read = match &initial {
                Some(text) => editor.readline_with_initial(&prompt, (text, "")),
                None => editor.readline(&prompt),
            };
            (editor, read)
        })
        .await;
        let woken = {
            let mut state = self.wake.lock().unwrap();
            state.phase = Phase::Idle;
            state.sent.then(|| {
                state.wanted = false;
                std::mem::take(&mut state.typed)
            })
        };
        let Ok((mut editor, read)) = joined else {
            return Input::End;
        };
        let input = match read {
            Err(ReadlineError::Interrupted) if woken.is_some() => {
                Input::Woken(woken.unwrap_or_default())
            }
            Ok(line) => {
                let line = line.replace("\\\n", "\n");
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                    if let Some(dir) = self.history.parent() {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    if let Err(e) = editor.append_history(&self.history) {
                        tracing::warn!(
                            "[penguin] the chat history could not be saved to {}: {e}",
                            self.history.display()
                        );
                    }
                }
                Input::Line(line)
            }
            Err(ReadlineError::Interrupted) => Input::Cleared,
            Err(_) => Input::End,
        };
        self.editor = Some(editor);
        input
    }
}
