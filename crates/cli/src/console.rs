//! The terminal side of a session: input shared by the REPL and approval prompts (the
//! interactive terminal of `term.rs`, or stdin line by line), and what the REPL, the renderer
//! and the approver share.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

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

/// Collapsed tool outputs `/expand` can reach.
const KEPT_COLLAPSED: usize = 50;

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
    /// The last [`KEPT_COLLAPSED`] tool outputs shown collapsed, oldest first: each tool and
    /// full text, for `/expand`.
    collapsed: StdMutex<VecDeque<(String, String)>>,
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

    /// Offers `text` as the next prompt's starting text (after what was offered already: a
    /// half-typed line, then steering a task never delivered).
    pub fn offer_next_prompt(&self, text: String) {
        let mut next = self
            .shared
            .next_prompt
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match next.as_mut() {
            Some(offered) => {
                offered.push('\n');
                offered.push_str(&text);
            }
            None => *next = Some(text),
        }
    }

    /// The text offered for the next prompt, once.
    pub fn take_next_prompt(&self) -> Option<String> {
        self.shared
            .next_prompt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Keeps a task's collapsed tool outputs for `/expand`.
    pub fn add_collapsed(&self, outputs: &[(String, String)]) {
        let mut kept = self
            .shared
            .collapsed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        kept.extend(outputs.iter().cloned());
        while kept.len() > KEPT_COLLAPSED {
            kept.pop_front();
        }
    }

    /// The `n`-th last collapsed tool output (1: the last).
    pub fn collapsed(&self, n: usize) -> Option<(String, String)> {
        let kept = self
            .shared
            .collapsed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        n.checked_sub(1)
            .and_then(|back| kept.len().checked_sub(back + 1))
            .and_then(|i| kept.get(i).cloned())
    }

    /// How many collapsed tool outputs are kept.
    pub fn collapsed_count(&self) -> usize {
        self.shared
            .collapsed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
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
    /// with the next line of stdin. `None` at end of input. The question is shown
    /// neutralised (`crate::untrusted`): it quotes a call's arguments.
    pub async fn ask(&self, question: &str) -> Option<String> {
        if let Some(term) = &self.term {
            let answer = term.ask(question.to_owned()).await.ok().flatten();
            if let Some(a) = &answer {
                term.answered(a);
            }
            return answer;
        }
        // Read by lines here: the answer needs Enter, and the question says so.
        let question = match question.strip_suffix(": ") {
            Some(q) if q.contains("]") => format!("{q} (then Enter): "),
            _ => question.to_owned(),
        };
        crate::untrusted::err!("{}", crate::untrusted::Untrusted(&question));
        self.answer().await
    }

    /// Shows what a call asked about would do (see [`crate::approve::call_view`]) above its
    /// question, indented: diffs coloured on a terminal, plain on stderr otherwise. It is the
    /// model's text: shown neutralised (`crate::untrusted`).
    pub fn show_view(&self, view: &str) {
        let color = self.term.is_some() && crate::render::color_for(true);
        let mut block = String::new();
        for line in crate::tool_view::painted(view, color) {
            block.push_str(&line);
            block.push('\n');
        }
        match &self.term {
            Some(term) => {
                let _ = term.write_out(block.as_bytes());
                let _ = term.flush_out();
            }
            // Already neutralised, and `err!` guards what penguin's styles leave.
            None => crate::untrusted::err!("{block}"),
        }
    }

    /// Prints a line of penguin's own: above the bottom line on a terminal, else on stderr.
    /// What it quotes is shown neutralised (`crate::untrusted`).
    pub fn note(&self, text: &str) {
        match &self.term {
            Some(term) => term.note(text),
            None => crate::untrusted::errln!("{}", crate::untrusted::Untrusted(text)),
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

/// True when stdout is a terminal (color and the status line are on).
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_reaches_every_kept_output_counting_back_from_the_last() {
        let console = Console::from_lines(Vec::new());
        assert_eq!(console.collapsed(1), None);
        let out = |i: usize| (format!("tool{i}"), format!("output {i}"));
        console.add_collapsed(&[out(0), out(1)]);
        console.add_collapsed(&[out(2)]);
        assert_eq!(console.collapsed(1), Some(out(2)));
        assert_eq!(console.collapsed(3), Some(out(0)));
        assert_eq!((console.collapsed(0), console.collapsed(4)), (None, None));
        let many: Vec<_> = (3..3 + KEPT_COLLAPSED).map(out).collect();
        console.add_collapsed(&many);
        assert_eq!(console.collapsed_count(), KEPT_COLLAPSED);
        assert_eq!(console.collapsed(KEPT_COLLAPSED), Some(out(3)));
    }
}
