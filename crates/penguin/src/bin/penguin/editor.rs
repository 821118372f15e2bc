//! The chat prompt's line editor (rustyline): history saved per user in the data root,
//! multi-line input, completion of slash commands, Ctrl-C clears the line, Ctrl-D on an empty
//! line leaves.

use std::path::{Path, PathBuf};

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Cmd, Config, Editor, Helper, KeyCode, KeyEvent, Modifiers};

/// What the prompt gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    /// A line (possibly several, joined by newlines).
    Line(String),
    /// Ctrl-C: the line was cleared.
    Cleared,
    /// Ctrl-D on an empty line, or the terminal went away.
    End,
}

#[derive(Debug)]
struct ChatHelper;

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
        let names = crate::chat::COMMANDS
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .filter(|name| name.starts_with(typed))
            .collect();
        Ok((0, names))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {}

impl Validator for ChatHelper {
    /// A line ending in `\` continues on the next one.
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
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
        editor.set_helper(Some(ChatHelper));
        editor.bind_sequence(KeyEvent(KeyCode::Enter, Modifiers::ALT), Cmd::Newline);
        let history = root.join("history");
        // A missing history file is a first run, not an error.
        let _ = editor.load_history(&history);
        Ok(LineEditor {
            editor: Some(editor),
            history,
        })
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
        let joined = tokio::task::spawn_blocking(move || {
            let read = match &initial {
                Some(text) => editor.readline_with_initial(&prompt, (text, "")),
                None => editor.readline(&prompt),
            };
            (editor, read)
        })
        .await;
        let Ok((mut editor, read)) = joined else {
            return Input::End;
        };
        let input = match read {
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
