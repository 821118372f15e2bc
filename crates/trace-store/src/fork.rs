//! Forking a session: a new session whose trace is a copy of another's up to the end of one
//! of its completed tasks (the reference's session fork).
//!
//! The cut always falls on a task boundary: right after the records that close the task
//! whose final assistant reply was chosen (its `request_end`, `token_usage`, …), before the
//! next task's input or a compaction. Every earlier file of the session is copied whole, the
//! chosen one up to the cut; each file's `session_meta` gets the new session id (and the
//! system prompt has the old id replaced by the new one; `source` is dropped, so a fork of a
//! subagent's session is an ordinary one). Every other record is copied byte for byte, so a
//! resume of the fork sees exactly the context the source had at that point.
//!
//! Positions are the server history's `tracePosition`: a file's index (`NNN` of
//! `<id>_NNN.jsonl`) and a record's ordinal in that file, from 0, counting every line that is
//! a JSON object.

use std::io::Write;
use std::path::{Path, PathBuf};

use penguin_omni_protocol::{Body, EventPayload, ModelPayload, OmniMessage, Role, StopReason};

use crate::paths::{session_trace_files, LocatedTrace};
use crate::{new_session_id, resume_trace, trace_file_path, TraceError, TraceLines};

/// Where a fork cuts its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkPoint {
    /// After the session's last completed task.
    End,
    /// After the N-th completed task (from 1), in the order `penguin show` lists them.
    Task(usize),
    /// After the task whose final assistant reply is this record (the history API's
    /// `tracePosition`).
    Position {
        /// The trace file's index (`NNN`).
        file_index: u32,
        /// The record's ordinal in that file, from 0.
        ordinal: u64,
    },
}

/// A fork made: the new session and where its trace is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forked {
    /// The new session's id.
    pub session_id: String,
    /// Its trace files, oldest first.
    pub files: Vec<PathBuf>,
    /// How many completed tasks it holds.
    pub tasks: usize,
    /// The position of the reply it ends with.
    pub file_index: u32,
    /// The ordinal of that reply in its file.
    pub ordinal: u64,
}

/// One completed task of a session, as [`fork_session`] counts them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedTask {
    /// Its final reply's trace file (`NNN`).
    pub file_index: u32,
    /// The reply's ordinal in that file.
    pub ordinal: u64,
    /// The reply's `timestamp` (RFC 3339, milliseconds, UTC).
    pub timestamp: String,
}

/// The completed tasks of `session_id` under `traces_dir`, in order: the N-th is what
/// `ForkPoint::Task(N)` cuts after (a rewind "to before task N" is the state right after
/// task N-1's reply).
pub fn completed_tasks(
    traces_dir: &Path,
    session_id: &str,
) -> Result<Vec<CompletedTask>, ForkError> {
    let files = read_session(traces_dir, session_id)?;
    Ok(task_ends(&files)
        .into_iter()
        .map(|(f, i, _)| CompletedTask {
            file_index: files[f].located.index,
            ordinal: i as u64,
            timestamp: files[f].records[i]
                .msg
                .as_ref()
                .map(|m| m.timestamp.as_str().to_owned())
                .unwrap_or_default(),
        })
        .collect())
}

/// The input of the task that follows completed task `after` of `session_id` (0: the
/// session's first task): the user's messages that started it, text and images, as the model
/// got them. What a counterfactual replay sends again to a fork cut after task `after`.
pub fn next_task_input(
    traces_dir: &Path,
    session_id: &str,
    after: usize,
) -> Result<Vec<OmniMessage>, ForkError> {
    let files = read_session(traces_dir, session_id)?;
    let ends = task_ends(&files);
    let (first_file, first_record) = match after {
        0 => (0, 0),
        n => match ends.get(n - 1) {
            Some((f, _, cut)) => (*f, *cut),
            None => {
                return Err(ForkError::InvalidPoint(format!(
                    "session {session_id} has {} completed task(s); no task follows task {n}",
                    ends.len()
                )))
            }
        },
    };
    let mut input = Vec::new();
    let later = files
        .iter()
        .enumerate()
        .skip(first_file)
        .flat_map(|(f, file)| {
            let skip = if f == first_file { first_record } else { 0 };
            file.records.iter().skip(skip)
        });
    for msg in later.filter_map(|r| r.msg.as_ref()) {
        if starts_task(msg) {
            input.push(msg.clone());
        } else if !input.is_empty() && top_level(msg) {
            break;
        }
    }
    if input.is_empty() {
        return Err(ForkError::InvalidPoint(match after {
            0 => format!("session {session_id} has no task"),
            n => format!("session {session_id} has no task after its task {n}"),
        }));
    }
    Ok(input)
}

/// Why a fork was not made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// The source session has no trace.
    #[error("no session {0}")]
    NotFound(String),
    /// The source is running a task (or compacting): its trace is still growing. Never
    /// returned by [`fork_session`] itself, which cannot know; hosts that can say it do.
    #[error("session {0} is running a task; fork it once it is idle")]
    Running(String),
    /// The point names no task boundary of the source (the message says why).
    #[error("{0}")]
    InvalidPoint(String),
    /// The source's trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The new trace could not be written (nothing of it is left behind).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// One record of a source file: its bytes, and the message when it parses as one.
struct Record {
    line: Vec<u8>,
    msg: Option<OmniMessage>,
}

struct SourceFile {
    located: LocatedTrace,
    records: Vec<Record>,
}

/// Every file of `session_id`, read; a session without any is `NotFound`.
fn read_session(traces_dir: &Path, session_id: &str) -> Result<Vec<SourceFile>, ForkError> {
    let located = session_trace_files(traces_dir, session_id)?;
    if located.is_empty() {
        return Err(ForkError::NotFound(session_id.to_owned()));
    }
    Ok(located
        .into_iter()
        .map(read_file)
        .collect::<Result<Vec<_>, _>>()?)
}

fn read_file(located: LocatedTrace) -> Result<SourceFile, TraceError> {
    let mut lines = TraceLines::open(&located.path)?;
    let mut records = Vec::new();
    while let Some((_, line)) = lines.next_line()? {
        // A record too large to read is skipped, as the history skips it.
        let Ok(line) = line else { continue };
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        // The history's ordinals count every JSON object; a torn tail is no record.
        if !text.starts_with('{') || !is_json_object(text) {
            continue;
        }
        records.push(Record {
            msg: OmniMessage::from_json(text).ok(),
            line: line.to_vec(),
        });
    }
    Ok(SourceFile { located, records })
}

fn is_json_object(text: &str) -> bool {
    matches!(
        serde_json::from_str::<serde_json::Value>(text),
        Ok(serde_json::Value::Object(_))
    )
}

fn top_level(msg: &OmniMessage) -> bool {
    !msg.has_origin()
}

/// A visible reply: an assistant text of the session itself with something in it.
fn is_reply(msg: &OmniMessage) -> bool {
    top_level(msg)
        && matches!(msg.model(), Some(ModelPayload::Text(t)) if t.role == Role::Assistant && !t.text.trim().is_empty())
}

/// A record that starts a new task: a user's input (not steering, not a context summary).
fn starts_task(msg: &OmniMessage) -> bool {
    if !top_level(msg) {
        return false;
    }
    match msg.model() {
        Some(ModelPayload::ImageUrl(i)) => i.role == Role::User,
        Some(ModelPayload::Text(t)) if t.role == Role::User => {
            let text = t.text.trim_start();
            ![
                "[user_steering]",
                "<user_steering>",
                "[context_summary]",
                "<context_summary>",
            ]
            .iter()
            .any(|m| text.starts_with(m))
        }
        _ => false,
    }
}

fn compaction_begins(msg: &OmniMessage) -> bool {
    top_level(msg) && matches!(msg.event(), Some(EventPayload::CompactionBegin { .. }))
}

/// Where the task whose reply is `records[at]` ends (exclusive), or why `at` is no task's
/// final reply of a completed request.
fn cut_after(records: &[Record], at: usize) -> Result<usize, String> {
    let mut cut = at + 1;
    let mut completed = false;
    for (i, r) in records.iter().enumerate().skip(at + 1) {
        let Some(msg) = &r.msg else {
            cut = i + 1;
            continue;
        };
        if starts_task(msg) || compaction_begins(msg) {
            break;
        }
        if is_reply(msg) {
            return Err("the record is not the final assistant reply of its task".into());
        }
        cut = i + 1;
        if top_level(msg) {
            if let Some(EventPayload::RequestEnd { status, .. }) = msg.event() {
                if *status == StopReason::Completed {
                    completed = true;
                } else {
                    return Err("the reply belongs to a request that did not complete".into());
                }
            }
        }
    }
    if !completed {
        return Err("the reply's request has not completed".into());
    }
    Ok(cut)
}

/// Every completed task's final reply: (file position in `files`, record index, cut).
fn task_ends(files: &[SourceFile]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for (f, file) in files.iter().enumerate() {
        let mut in_compaction = false;
        for (i, r) in file.records.iter().enumerate() {
            let Some(msg) = &r.msg else { continue };
            match msg.event() {
                Some(EventPayload::CompactionBegin { .. }) if top_level(msg) => {
                    in_compaction = true
                }
                Some(EventPayload::CompactionEnd { .. }) if top_level(msg) => in_compaction = false,
                _ => {}
            }
            if in_compaction || !is_reply(msg) {
                continue;
            }
            if let Ok(cut) = cut_after(&file.records, i) {
                if resumable(&file.records[..cut]) {
                    out.push((f, i, cut));
                }
            }
        }
    }
    out
}

/// Whether a resume of these records starts clean: nothing carried over (no tool call
/// without its output, no input unsent) and the context still open.
fn resumable(records: &[Record]) -> bool {
    let msgs: Vec<OmniMessage> = records.iter().filter_map(|r| r.msg.clone()).collect();
    let resumed = resume_trace(&msgs);
    !resumed.context_closed && resumed.carry_over.is_empty()
}

/// Forks `source_id` (in `traces_dir`) at `at` into a new session; see the module docs.
pub fn fork_session(
    traces_dir: &Path,
    source_id: &str,
    at: ForkPoint,
) -> Result<Forked, ForkError> {
    let files = read_session(traces_dir, source_id)?;
    let ends = task_ends(&files);
    let chosen = match at {
        ForkPoint::End => ends.last().copied().ok_or_else(|| {
            ForkError::InvalidPoint(format!("session {source_id} has no completed task to fork"))
        })?,
        ForkPoint::Task(n) => match n.checked_sub(1).and_then(|i| ends.get(i)) {
            Some(end) => *end,
            None => {
                return Err(ForkError::InvalidPoint(format!(
                    "session {source_id} has {} completed task(s); --at takes 1 to {}",
                    ends.len(),
                    ends.len()
                )))
            }
        },
        ForkPoint::Position {
            file_index,
            ordinal,
        } => {
            let f = files
                .iter()
                .position(|f| f.located.index == file_index)
                .ok_or_else(|| {
                    ForkError::InvalidPoint(format!(
                        "session {source_id} has no trace file {file_index}"
                    ))
                })?;
            let i = usize::try_from(ordinal)
                .ok()
                .filter(|i| *i < files[f].records.len())
                .ok_or_else(|| {
                    ForkError::InvalidPoint(format!(
                        "trace file {file_index} of session {source_id} has no record {ordinal}"
                    ))
                })?;
            match ends.iter().find(|(ef, ei, _)| *ef == f && *ei == i) {
                Some(end) => *end,
                None => {
                    let why = match &files[f].records[i].msg {
                        Some(m) if is_reply(m) => {
                            cut_after(&files[f].records, i).err().unwrap_or_else(|| {
                                "the reply is inside a compaction, or its task left work unfinished"
                                    .into()
                            })
                        }
                        _ => "the record is not an assistant reply".into(),
                    };
                    return Err(ForkError::InvalidPoint(format!(
                        "position {file_index}:{ordinal} is no completed task's final reply: {why}"
                    )));
                }
            }
        }
    };
    let (last_file, reply, cut) = chosen;
    let tasks = ends.iter().position(|e| *e == chosen).map_or(0, |i| i + 1);
    let new_id = new_session_id();
    let mut written = Vec::new();
    let result = (|| {
        for (f, file) in files.iter().enumerate().take(last_file + 1) {
            let keep = if f == last_file {
                cut
            } else {
                file.records.len()
            };
            let path = trace_file_path(
                traces_dir,
                &file.located.date_dir,
                &new_id,
                file.located.index,
            );
            write_file(&path, &file.records[..keep], source_id, &new_id)?;
            written.push(path);
        }
        Ok(())
    })();
    if let Err(e) = result {
        for path in &written {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    Ok(Forked {
        session_id: new_id,
        files: written,
        tasks,
        file_index: files[last_file].located.index,
        ordinal: reply as u64,
    })
}

/// The session_meta of a fork: the new id, the old one replaced in the prompt, no `source`,
/// and `forked_from` naming the session it came from.
fn rewritten_meta(msg: &OmniMessage, source_id: &str, new_id: &str) -> Option<String> {
    let Body::SessionMeta(meta) = &msg.body else {
        return None;
    };
    let mut meta = meta.clone();
    meta.session_id = new_id.to_owned();
    meta.system_prompt = meta.system_prompt.replace(source_id, new_id);
    meta.source = None;
    meta.forked_from = Some(source_id.to_owned());
    let mut out = msg.clone();
    out.body = Body::SessionMeta(meta);
    Some(out.to_json())
}

fn write_file(
    path: &Path,
    records: &[Record],
    source_id: &str,
    new_id: &str,
) -> Result<(), ForkError> {
    let err = |source| ForkError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut body = Vec::new();
    for r in records {
        match r
            .msg
            .as_ref()
            .filter(|m| top_level(m))
            .and_then(|m| rewritten_meta(m, source_id, new_id))
        {
            Some(meta) => body.extend_from_slice(meta.as_bytes()),
            None => body.extend_from_slice(&r.line),
        }
        body.push(b'\n');
    }
    // create_new: a fork never overwrites a trace.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(err)?;
    let done = file.write_all(&body).and_then(|()| file.sync_all());
    if let Err(e) = done {
        let _ = std::fs::remove_file(path);
        return Err(err(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
