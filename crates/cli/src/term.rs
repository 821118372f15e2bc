//! The terminal while a task runs: one writer for everything on screen, and typed text kept
//! on its own bottom line instead of landing inside the model's output.
//!
//! During a task the terminal is switched to no-echo, non-canonical input (signals stay on,
//! so Ctrl-C still interrupts) and a key thread collects what is typed into a draft. The
//! bottom line shows the status (spinner), what is auto-approved, and the draft, or the
//! approval question being asked. Output is written above it: the bottom line is cleared,
//! the output written, and the line drawn again. Everything goes through one lock, so an
//! approval question can never overtake the tool line it is about.
//!
//! Between tasks the terminal is left as it was, for the line editor (rustyline).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use tokio::sync::{mpsc, oneshot};

use crate::untrusted::neutralise;
use crate::untrusted::style::{BOLD, DIM, RESET};

/// The terminal settings found at start, restored after each task and on exit.
static SAVED: OnceLock<Mutex<Option<Termios>>> = OnceLock::new();

/// Puts the terminal back as it was found (after a task, before exiting).
pub fn restore() {
    if let Some(saved) = SAVED.get() {
        if let Some(t) = saved.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, t);
        }
    }
}

/// The interactive terminal; see the module docs.
#[derive(Debug)]
pub struct Term {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// A task runs: the key thread reads stdin.
    reading: bool,
    /// Lines typed with no question asked steer the task (chat) rather than wait to answer
    /// the next question (run).
    steer: bool,
    draft: String,
    utf8: Vec<u8>,
    esc: Esc,
    question: Option<Question>,
    typed_ahead: VecDeque<String>,
    task: Option<mpsc::UnboundedSender<String>>,
    status: Option<String>,
    approvals: String,
    bottom_shown: bool,
    /// stdout's cursor is at the start of a line.
    at_line_start: bool,
    /// The output line under way was already broken once to show the draft: it is not
    /// broken again (the draft shows once the line ends), so typing never chops a line
    /// into pieces.
    broke_line: bool,
    /// stdin has ended (the terminal hung up).
    ended: bool,
    /// Notes that came while a streamed line was under way: shown once it ends (or, when it
    /// stalls, after [`NOTE_WAIT`]), so a note never cuts a line of the model's in two.
    pending_notes: Vec<String>,
    pending_since: Option<std::time::Instant>,
}

/// How long a note waits for a stalled streamed line to end before it is shown anyway.
const NOTE_WAIT: std::time::Duration = std::time::Duration::from_millis(2000);

/// Writes the notes waiting for their line, on a line of their own.
fn flush_notes(st: &mut State) {
    if st.pending_notes.is_empty() {
        return;
    }
    hide(st);
    let mut out = std::io::stdout().lock();
    if !st.at_line_start {
        let _ = writeln!(out);
    }
    for text in st.pending_notes.drain(..) {
        let _ = writeln!(out, "{DIM}{text}{RESET}");
    }
    let _ = out.flush();
    st.pending_since = None;
    st.at_line_start = true;
}

#[derive(Debug)]
struct Question {
    text: String,
    tx: oneshot::Sender<Option<String>>,
    saved_draft: String,
    /// The letters it offers (`[y]es` → `y`): one of them answers on its own, no Enter.
    keys: Vec<char>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Esc {
    #[default]
    None,
    Start,
    /// Inside `ESC [ …` or `ESC O …`: skipped up to the final byte.
    Sequence,
}

impl Term {
    /// Takes over the terminal's input during tasks; `None` when stdin is not a terminal.
    pub fn start() -> Option<Arc<Term>> {
        let saved = termios::tcgetattr(std::io::stdin()).ok()?;
        let _ = SAVED.set(Mutex::new(Some(saved)));
        let term = Arc::new(Term {
            state: Mutex::new(State {
                at_line_start: true,
                ..State::default()
            }),
            wake: Condvar::new(),
        });
        let keys = term.clone();
        std::thread::spawn(move || keys.read_keys());
        Some(term)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A task starts: typed text is collected from now on. With `steer`, a typed line goes to
    /// the task's lines (`Console::task_lines`); without, it answers the next question.
    pub fn begin_task(&self, steer: bool) {
        let mut st = self.lock();
        if let Some(saved) = SAVED.get() {
            if let Some(t) = saved.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                let mut raw = t.clone();
                raw.local_flags
                    .remove(LocalFlags::ICANON | LocalFlags::ECHO);
                raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
                raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
                let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &raw);
            }
        }
        st.reading = true;
        st.steer = steer;
        st.at_line_start = true;
        drop(st);
        self.wake.notify_all();
    }

    /// The task ended: the terminal is given back. Returns the unsent draft.
    pub fn end_task(&self) -> String {
        let mut st = self.lock();
        flush_notes(&mut st);
        st.reading = false;
        st.status = None;
        st.task = None;
        hide(&mut st);
        restore();
        if let Some(q) = st.question.take() {
            let _ = q.tx.send(None);
        }
        st.typed_ahead.clear();
        std::mem::take(&mut st.draft)
    }

    /// Lines typed with no question waiting go to `tx` until [`Term::end_task`].
    pub fn set_task_lines(&self, tx: mpsc::UnboundedSender<String>) {
        self.lock().task = Some(tx);
    }

    /// Writes output above the bottom line: the renderer's lines, already guarded
    /// (`crate::untrusted`), or JSON lines with their hazards escaped.
    pub fn write_out(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut st = self.lock();
        hide(&mut st);
        let mut out = std::io::stdout().lock();
        out.write_all(bytes)?;
        if let Some(&last) = bytes.last() {
            st.at_line_start = last == b'\n';
        }
        if bytes.contains(&b'\n') {
            st.broke_line = false;
        }
        if st.at_line_start {
            drop(out);
            flush_notes(&mut st);
        }
        Ok(())
    }

    /// Flushes output and draws the bottom line again.
    pub fn flush_out(&self) -> std::io::Result<()> {
        let mut st = self.lock();
        std::io::stdout().flush()?;
        draw(&mut st);
        Ok(())
    }

    /// A line of penguin's own (dimmed), above the bottom line. What it quotes (a command,
    /// typed text) is shown [`neutralise`]d.
    pub fn note(&self, text: &str) {
        let text = &*neutralise(text);
        let mut st = self.lock();
        if !st.at_line_start && st.reading {
            // A streamed line is under way: the note follows it.
            st.pending_notes.push(text.to_owned());
            st.pending_since.get_or_insert_with(std::time::Instant::now);
            return;
        }
        flush_notes(&mut st);
        hide(&mut st);
        let mut out = std::io::stdout().lock();
        if !st.at_line_start {
            let _ = writeln!(out);
        }
        let _ = writeln!(out, "{DIM}{text}{RESET}");
        let _ = out.flush();
        st.at_line_start = true;
        draw(&mut st);
    }

    /// What the status part of the bottom line says (the spinner), or nothing.
    pub fn set_status(&self, status: Option<String>) {
        let mut st = self.lock();
        if st.pending_since.is_some_and(|t| t.elapsed() >= NOTE_WAIT) {
            flush_notes(&mut st);
            draw(&mut st);
        }
        if st.status != status {
            st.status = status;
            if st.reading {
                draw(&mut st);
            }
        }
    }

    /// What is auto-approved, for the bottom line.
    pub fn set_approvals(&self, summary: String) {
        self.lock().approvals = summary;
    }

    /// Asks `question` on the bottom line; the answer is the next line typed (`None` when
    /// input ends first or the task ends). Outside chat, a line typed ahead answers at once.
    pub fn ask(&self, question: String) -> oneshot::Receiver<Option<String>> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.lock();
        flush_notes(&mut st);
        // The whole question goes into the output, right under its tool line, where it
        // can wrap freely and stays on record; the bottom line only takes the answer.
        hide(&mut st);
        {
            let mut out = std::io::stdout().lock();
            if !st.at_line_start {
                let _ = writeln!(out);
            }
            // It quotes the call: its arguments are the model's.
            let _ = writeln!(out, "{BOLD}{}{RESET}", neutralise(question.trim_end()));
            let _ = out.flush();
        }
        st.at_line_start = true;
        if !st.steer {
            if let Some(line) = st.typed_ahead.pop_front() {
                let _ = tx.send(Some(line));
                return rx;
            }
        }
        if st.ended {
            let _ = tx.send(None);
            return rx;
        }
        let saved_draft = std::mem::take(&mut st.draft);
        st.question = Some(Question {
            text: answer_prompt(&question),
            tx,
            saved_draft,
            keys: offered_keys(&question),
        });
        draw(&mut st);
        rx
    }

    /// Shows the answer given to a question, in the output, so the screen keeps a record.
    pub fn answered(&self, answer: &str) {
        let mut st = self.lock();
        hide(&mut st);
        let mut out = std::io::stdout().lock();
        if !st.at_line_start {
            let _ = writeln!(out);
        }
        let _ = writeln!(out, "{DIM}  answered: {RESET}{}", neutralise(answer));
        let _ = out.flush();
        st.at_line_start = true;
        draw(&mut st);
    }

    fn read_keys(self: Arc<Self>) {
        use std::os::fd::AsFd;
        // Bigger than stdin's own buffer, so reads bypass it and nothing is kept back from
        // the line editor.
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            {
                let mut st = self.lock();
                while !st.reading {
                    st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            }
            let stdin = std::io::stdin();
            let ready = {
                let mut fds = [nix::poll::PollFd::new(
                    stdin.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16)).unwrap_or(0) > 0
            };
            if !ready {
                continue;
            }
            // Read under the lock: once end_task has taken it, nothing more is read.
            let mut st = self.lock();
            if !st.reading {
                continue;
            }
            match stdin.lock().read(&mut buf) {
                Ok(0) | Err(_) => {
                    st.ended = true;
                    st.reading = false;
                    if let Some(q) = st.question.take() {
                        let _ = q.tx.send(None);
                    }
                }
                Ok(n) => {
                    for &b in &buf[..n] {
                        key(&mut st, b);
                    }
                    draw(&mut st);
                }
            }
        }
    }
}

/// The letters a question offers (`[y]es / [n]o` → `y`, `n`).
fn offered_keys(question: &str) -> Vec<char> {
    question
        .match_indices('[')
        .filter_map(|(i, _)| {
            let rest = &question[i + 1..];
            let end = rest.find(']')?;
            (end == 1).then(|| rest.chars().next()).flatten()
        })
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The bottom line while a question waits: the keys it takes (`[y]es / [n]o` → `y/n`).
fn answer_prompt(question: &str) -> String {
    let letters: Vec<String> = offered_keys(question).iter().map(char::to_string).collect();
    match letters.is_empty() {
        true => "answer › ".into(),
        false => format!("press {} › ", letters.join("/")),
    }
}

/// A key typed while a question waits with nothing typed yet: an offered letter answers at
/// once; any other printable key is not taken (the question waits, and says which keys it
/// takes). True when the key was handled so.
fn single_key(st: &mut State, b: u8) -> bool {
    let Some(q) = st.question.as_mut() else {
        return false;
    };
    if q.keys.is_empty() || !st.draft.is_empty() || !st.utf8.is_empty() || st.esc != Esc::None {
        return false;
    }
    if !b.is_ascii_graphic() && b < 0x80 {
        return false;
    }
    let c = (b as char).to_ascii_lowercase();
    if b.is_ascii() && q.keys.contains(&c) {
        st.draft.push(c);
        submit(st);
    } else if !q.text.starts_with("not an answer") {
        let keys: Vec<String> = q.keys.iter().map(char::to_string).collect();
        q.text = format!("not an answer: press {} › ", keys.join("/"));
    }
    true
}

/// One byte typed.
fn key(st: &mut State, b: u8) {
    match st.esc {
        Esc::Start => {
            st.esc = if b == b'[' || b == b'O' {
                Esc::Sequence
            } else {
                Esc::None
            };
            return;
        }
        Esc::Sequence => {
            if (0x40..=0x7e).contains(&b) {
                st.esc = Esc::None;
            }
            return;
        }
        Esc::None => {}
    }
    if single_key(st, b) {
        return;
    }
    match b {
        0x1b => st.esc = Esc::Start,
        // Enter alone does not answer a question: it would be no answer at all.
        b'\r' | b'\n' if st.draft.is_empty() && st.question.is_some() => {}
        b'\r' | b'\n' => submit(st),
        0x7f | 0x08 => {
            st.draft.pop();
        }
        0x15 => st.draft.clear(),
        0x17 => {
            let kept = st.draft.trim_end().rfind(' ').map_or(0, |i| i + 1);
            st.draft.truncate(kept);
        }
        b'\t' => st.draft.push(' '),
        0..=0x1f => {}
        _ => {
            st.utf8.push(b);
            match std::str::from_utf8(&st.utf8) {
                Ok(s) => {
                    let s = s.to_owned();
                    st.draft.push_str(&s);
                    st.utf8.clear();
                }
                Err(e) if e.error_len().is_some() => st.utf8.clear(),
                Err(_) => {}
            }
        }
    }
}

fn submit(st: &mut State) {
    let line = std::mem::take(&mut st.draft);
    if let Some(q) = st.question.take() {
        st.draft = q.saved_draft;
        let _ = q.tx.send(Some(line));
        return;
    }
    if line.trim().is_empty() {
        return;
    }
    if st.steer {
        if let Some(tx) = &st.task {
            if let Err(mpsc::error::SendError(line)) = tx.send(line) {
                st.draft = line;
            }
            return;
        }
    }
    st.typed_ahead.push_back(line);
}

fn hide(st: &mut State) {
    if st.bottom_shown {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
        st.bottom_shown = false;
    }
}

/// The draft as shown: its end, when it is long.
fn tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        s.to_owned()
    } else {
        format!("…{}", s.chars().skip(n + 1 - max).collect::<String>())
    }
}

fn draw(st: &mut State) {
    let text = if let Some(q) = &st.question {
        // Typed text may hold pasted control characters; the list of what is auto-approved
        // quotes tool names and commands.
        format!(
            "{BOLD}{}{RESET}{}",
            q.text,
            tail(&neutralise(&st.draft), 40)
        )
    } else {
        let mut parts = Vec::new();
        if let Some(s) = &st.status {
            parts.push(format!("{DIM}{s}{RESET}"));
        }
        if !st.approvals.is_empty() && st.status.is_some() {
            parts.push(format!("{DIM}{}{RESET}", neutralise(&st.approvals)));
        }
        if !st.draft.is_empty() {
            parts.push(format!("› {}", tail(&neutralise(&st.draft), 60)));
        } else if st.steer && st.status.is_some() {
            parts.push(format!("{DIM}type to steer · /abort{RESET}"));
        }
        parts.join(" · ")
    };
    let wanted = st.reading && !text.is_empty();
    hide(st);
    if !wanted {
        return;
    }
    let urgent = st.question.is_some() || (!st.draft.is_empty() && !st.broke_line);
    if !st.at_line_start {
        if !urgent {
            // Text is streaming mid-line: the spinner waits for the line to end.
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out);
        let _ = out.flush();
        st.at_line_start = true;
        st.broke_line = true;
    }
    let mut err = std::io::stderr().lock();
    // Without autowrap the line never spills onto a second row, so one `\r` + erase-line
    // always removes it.
    let _ = write!(err, "\x1b[?7l\r\x1b[2K{text}\x1b[?7h");
    let _ = err.flush();
    st.bottom_shown = true;
}

/// Output to the terminal through [`Term`], for the renderer.
#[derive(Debug, Clone)]
pub struct TermOut(pub Arc<Term>);

impl Write for TermOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_out(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush_out()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(st: &mut State, s: &[u8]) {
        for &b in s {
            key(st, b);
        }
    }

    #[test]
    fn the_answer_prompt_lists_the_offered_letters() {
        assert_eq!(
            answer_prompt("Allow x {}? [y]es / [n]o / [a]lways (every x call): "),
            "press y/n/a › "
        );
    }

    #[test]
    fn an_offered_key_answers_alone_and_any_other_key_asks_again() {
        let mut st = State::default();
        let (tx, mut rx) = oneshot::channel();
        st.question = Some(Question {
            text: answer_prompt("Allow? [y]es / [n]o: "),
            tx,
            saved_draft: String::new(),
            keys: offered_keys("Allow? [y]es / [n]o: "),
        });
        typed(&mut st, b"x\r");
        assert!(
            rx.try_recv().is_err(),
            "x is not an answer, and Enter alone is none"
        );
        assert_eq!(
            st.question.as_ref().unwrap().text,
            "not an answer: press y/n › "
        );
        assert_eq!(st.draft, "");
        typed(&mut st, b"N");
        assert_eq!(rx.try_recv().unwrap(), Some("n".into()));
        assert!(st.question.is_none());
    }

    #[test]
    fn arrows_and_escapes_never_reach_the_draft_and_editing_keys_edit() {
        let mut st = State::default();
        typed(&mut st, b"ab\x1b[Dc\x1bOA\x7fd h\xc3\xa9llo wor\x17x");
        assert_eq!(st.draft, "abd héllo x");
        typed(&mut st, b"\x15z");
        assert_eq!(st.draft, "z");
    }

    #[test]
    fn a_line_answers_the_question_then_steers_or_waits_for_the_next_one() {
        let mut st = State {
            steer: true,
            ..State::default()
        };
        let (task_tx, mut task_rx) = mpsc::unbounded_channel();
        st.task = Some(task_tx);
        typed(&mut st, b"half");
        let (tx, mut rx) = oneshot::channel();
        st.question = Some(Question {
            text: "Allow? ".into(),
            tx,
            saved_draft: std::mem::take(&mut st.draft),
            keys: Vec::new(),
        });
        typed(&mut st, b"y\r");
        assert_eq!(rx.try_recv().unwrap(), Some("y".into()));
        assert_eq!(st.draft, "half", "the draft comes back after the answer");
        typed(&mut st, b" more\r");
        assert_eq!(task_rx.try_recv().unwrap(), "half more");
        // Outside chat a line waits for the next question.
        st.steer = false;
        typed(&mut st, b"n\r");
        assert_eq!(st.typed_ahead.pop_front().as_deref(), Some("n"));
    }
}
