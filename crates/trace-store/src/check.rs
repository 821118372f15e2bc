//! `penguin trace check`: structural checks of a trace file.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use penguin_omni_protocol::{Body, EventPayload, ModelPayload, OmniMessage, Role, StopReason};

use crate::error::TraceError;
use crate::lines::TraceLines;
use crate::open::MAX_RECORD_BYTES;
use crate::reader::{is_blank, parse_line, too_long};

/// How serious a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Expected after a crash (torn last line, request or tool still open at the end).
    Warning,
    /// The file breaks an invariant the writer guarantees.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One finding, printed as `file:line: severity: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The trace file.
    pub path: PathBuf,
    /// 1-based line, when the problem is about one line.
    pub line: Option<usize>,
    /// Warning or error.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(
                f,
                "{}:{l}: {}: {}",
                self.path.display(),
                self.severity,
                self.message
            ),
            None => write!(
                f,
                "{}: {}: {}",
                self.path.display(),
                self.severity,
                self.message
            ),
        }
    }
}

struct CallInfo {
    line: usize,
    /// The request that produced it completed.
    committed: bool,
    answers: Vec<usize>,
    /// A request_begin followed the commit, so the engine had waited for every output.
    superseded: bool,
    /// An abort came between the commit and the next request: a call still awaiting approval
    /// never runs, and its placeholder lives only in the carry-over, which is never written.
    aborted: bool,
    /// A later run's input came while it still had no output: the process stopped (the
    /// reference writes no closing record either) and the session was resumed.
    crashed: bool,
    /// Its request failed or never ended, so resume dropped it: a retried or resumed request
    /// may bring the same id again.
    dropped: bool,
}

/// Records only a run's start writes (its input, its bootstrap records). Seen while a request
/// is open, or while committed calls still await outputs, they mark a crash boundary: within
/// one process a run's input never lands there.
fn starts_a_run(body: &Body) -> bool {
    match body {
        Body::Event(e) => matches!(
            e,
            EventPayload::ToolListReady { .. }
                | EventPayload::McpConnectBegin { .. }
                | EventPayload::McpConnectEnd { .. }
        ),
        Body::Model(ModelPayload::Text(t)) => t.role == Role::User,
        Body::Model(ModelPayload::ImageUrl(_)) => true,
        Body::Model(ModelPayload::InlineData(d)) => d.role == Role::User,
        _ => false,
    }
}

/// The line `penguin scenario run --trace` writes where the session moved on to a new file
/// (after a compaction): its trace is every file of the session, one after the other, with
/// this line between them. [`check_trace`] checks each file's records on their own, as it
/// would check the files themselves.
pub const ROTATE_MARKER: &str = r#"{"type":"trace_rotate"}"#;

pub(crate) fn is_rotate_marker(line: &[u8]) -> bool {
    line.trim_ascii() == ROTATE_MARKER.as_bytes()
}

/// Checks one trace file; an empty result means it is sound.
///
/// - every line parses (a torn **last** line is a warning: a crash artifact), and none is over
///   [`MAX_RECORD_BYTES`];
/// - only recordable messages (no partials, no origin-tagged records);
/// - `request_begin`/`request_end` alternate (a request still open at the end is a warning);
/// - every committed `tool_call` is answered exactly once by a `tool_call_output` after it
///   (missing outputs of the last turn are a warning: the process may have died with tools
///   running).
///
/// A [`ROTATE_MARKER`] line ends one file's records and starts the next's, so the
/// concatenated trace `penguin scenario run --trace` writes checks as its files would. The
/// file is opened with [`open_trace`](crate::open_trace) and read line by line, never whole.
pub fn check_trace(path: &Path) -> Vec<Problem> {
    let problem = |line: Option<usize>, severity, message: String| Problem {
        path: path.to_path_buf(),
        line,
        severity,
        message,
    };
    let mut problems = Vec::new();
    let mut lines = match TraceLines::open(path) {
        Ok(lines) => lines,
        Err(e) => return vec![problem(None, Severity::Error, unreadable(e))],
    };
    let mut file = FileCheck::new(path);
    // A line that did not parse: an error unless it is the last one.
    let mut held: Option<(usize, String)> = None;
    loop {
        let (n, line) = match lines.next_line() {
            Ok(Some(next)) => next,
            Ok(None) => break,
            Err(e) => {
                problems.push(problem(None, Severity::Error, unreadable(e)));
                break;
            }
        };
        let bytes = match line {
            Ok(bytes) if is_blank(bytes) => continue,
            Ok(bytes) => Some(bytes),
            Err(_) => None,
        };
        if let Some((at, e)) = held.take() {
            problems.push(problem(
                Some(at),
                Severity::Error,
                format!("malformed record: {e}"),
            ));
        }
        let Some(bytes) = bytes else {
            problems.push(problem(
                Some(n),
                Severity::Error,
                too_long(MAX_RECORD_BYTES),
            ));
            continue;
        };
        if is_rotate_marker(bytes) {
            file.finish(&mut problems);
            file = FileCheck::new(path);
            continue;
        }
        match parse_line(bytes) {
            Ok(msg) => file.record(n, &msg, &mut problems),
            Err(e) => held = Some((n, e)),
        }
    }
    if let Some((at, e)) = held {
        problems.push(problem(
            Some(at),
            Severity::Warning,
            format!("torn last line (a write cut short by a crash; resume ignores it): {e}"),
        ));
    }
    file.finish(&mut problems);
    problems.sort_by_key(|p| (p.line.unwrap_or(0), p.severity));
    problems
}

/// Why the file could not be read, without naming it again (its problem does).
fn unreadable(e: TraceError) -> String {
    match e {
        TraceError::Io { source, .. } => format!("cannot read: {source}"),
        TraceError::NotRegularFile { kind, .. } => {
            format!("not a regular file ({kind}); traces are only read from regular files")
        }
        other => other.to_string(),
    }
}

/// What checking one file's records has seen so far.
struct FileCheck<'a> {
    path: &'a Path,
    open_request: Option<usize>,
    /// A later run's input came after the open request began: a crash boundary.
    resumed_after_open: bool,
    request_calls: Vec<String>,
    calls: HashMap<String, CallInfo>,
    call_order: Vec<String>,
    /// Committed calls whose turn has not been followed by a new request yet.
    awaiting: Vec<String>,
}

impl<'a> FileCheck<'a> {
    fn new(path: &'a Path) -> Self {
        FileCheck {
            path,
            open_request: None,
            resumed_after_open: false,
            request_calls: Vec::new(),
            calls: HashMap::new(),
            call_order: Vec::new(),
            awaiting: Vec::new(),
        }
    }

    /// The record at line `n`.
    fn record(&mut self, n: usize, msg: &OmniMessage, problems: &mut Vec<Problem>) {
        let path = self.path;
        let problem = |line: Option<usize>, severity, message: String| Problem {
            path: path.to_path_buf(),
            line,
            severity,
            message,
        };
        if msg.has_origin() {
            problems.push(problem(
                Some(n),
                Severity::Error,
                format!(
                    "{} carries an origin; child-session messages belong in the child's trace",
                    msg.payload_type()
                ),
            ));
            return;
        }
        if msg.is_partial() {
            problems.push(problem(
                Some(n),
                Severity::Error,
                format!(
                    "{} is a streaming fragment; partials are never recorded",
                    msg.payload_type()
                ),
            ));
            return;
        }
        if starts_a_run(&msg.body) {
            self.resumed_after_open |= self.open_request.is_some();
            // Committed calls still without outputs: their process stopped before answering.
            for id in &self.awaiting {
                if let Some(c) = self.calls.get_mut(id) {
                    c.crashed |= c.answers.is_empty();
                }
            }
        }
        match &msg.body {
            Body::Event(EventPayload::RequestBegin) => {
                if self.resumed_after_open {
                    for id in self.request_calls.drain(..) {
                        if let Some(c) = self.calls.get_mut(&id) {
                            c.dropped = true;
                        }
                    }
                }
                match self.open_request {
                    Some(open) if self.resumed_after_open => problems.push(problem(
                        Some(open),
                        Severity::Warning,
                        "request never ended: the process stopped mid-request and a later run resumed the session (a crash boundary)".into(),
                    )),
                    Some(open) => problems.push(problem(
                        Some(n),
                        Severity::Error,
                        format!("request_begin while the request begun at line {open} has no request_end"),
                    )),
                    None => {}
                }
                self.resumed_after_open = false;
                for id in self.awaiting.drain(..) {
                    if let Some(c) = self.calls.get_mut(&id) {
                        c.superseded = true;
                    }
                }
                self.open_request = Some(n);
                self.request_calls.clear();
            }
            Body::Event(EventPayload::RequestEnd { status, .. }) => {
                if self.open_request.take().is_none() {
                    problems.push(problem(
                        Some(n),
                        Severity::Error,
                        "request_end without a request_begin".into(),
                    ));
                } else {
                    let completed = *status == StopReason::Completed;
                    for id in self.request_calls.drain(..) {
                        if let Some(c) = self.calls.get_mut(&id) {
                            c.committed = completed;
                            c.dropped = !completed;
                            if completed {
                                self.awaiting.push(id);
                            }
                        }
                    }
                }
                self.request_calls.clear();
            }
            Body::Event(EventPayload::Abort { .. }) => {
                for id in &self.awaiting {
                    if let Some(c) = self.calls.get_mut(id) {
                        c.aborted = true;
                    }
                }
            }
            Body::Model(ModelPayload::ToolCall(tc)) => {
                let completed = tc.stop_reason.is_none_or(|s| s == StopReason::Completed);
                let reused = self.calls.get(&tc.tool_call_id).is_some_and(|c| !c.dropped);
                if reused {
                    problems.push(problem(
                        Some(n),
                        Severity::Error,
                        format!("tool_call id {:?} is used twice", tc.tool_call_id),
                    ));
                } else {
                    let earlier = self.calls.insert(
                        tc.tool_call_id.clone(),
                        CallInfo {
                            line: n,
                            committed: false,
                            answers: Vec::new(),
                            superseded: false,
                            aborted: false,
                            crashed: false,
                            dropped: false,
                        },
                    );
                    // A dropped call's id keeps its place in the order.
                    if earlier.is_none() {
                        self.call_order.push(tc.tool_call_id.clone());
                    }
                    if completed && self.open_request.is_some() {
                        self.request_calls.push(tc.tool_call_id.clone());
                    }
                }
            }
            Body::Model(ModelPayload::ToolCallOutput(o)) => {
                match self.calls.get_mut(&o.tool_call_id) {
                    Some(c) => c.answers.push(n),
                    None => problems.push(problem(
                        Some(n),
                        Severity::Warning,
                        format!(
                        "tool_call_output for {:?}, which no earlier tool_call in this file made",
                        o.tool_call_id
                    ),
                    )),
                }
            }
            _ => {}
        }
    }

    /// What the end of the file leaves unfinished.
    fn finish(self, problems: &mut Vec<Problem>) {
        let path = self.path;
        let problem = |line: Option<usize>, severity, message: String| Problem {
            path: path.to_path_buf(),
            line,
            severity,
            message,
        };
        if let Some(open) = self.open_request {
            problems.push(problem(
                Some(open),
                Severity::Warning,
                "request never ended (the process stopped mid-request; resume drops it)".into(),
            ));
        }
        for id in &self.call_order {
            let c = &self.calls[id];
            if !c.committed {
                continue;
            }
            match c.answers.len() {
                1 => {}
                0 if c.crashed => problems.push(problem(
                    Some(c.line),
                    Severity::Warning,
                    format!("tool_call {id:?} has no output: the process stopped before it was answered and a later run resumed the session (a crash boundary)"),
                )),
                0 if !c.superseded || c.aborted => problems.push(problem(
                    Some(c.line),
                    Severity::Warning,
                    format!("tool_call {id:?} has no output (the run ended or the process stopped first; resume adds a placeholder)"),
                )),
                0 => problems.push(problem(
                    Some(c.line),
                    Severity::Error,
                    format!("committed tool_call {id:?} has no tool_call_output"),
                )),
                k => problems.push(problem(
                    Some(c.answers[1]),
                    Severity::Error,
                    format!(
                        "committed tool_call {id:?} (line {}) is answered {k} times (lines {})",
                        c.line,
                        c.answers.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
                    ),
                )),
            }
        }
    }
}
