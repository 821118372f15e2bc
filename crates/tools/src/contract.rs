//! The execution wrapper: turns any [`Tool`] into a stream that honours §2.16, whatever the
//! tool does (finishes, fails, panics, hangs, floods).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::FutureExt;
use penguin_engine::{CancellationToken, MessageSink};
use penguin_omni_protocol::{
    build, Body, ModelPayload, OmniMessage, PartialToolCallOutput, Role, StopReason,
    StreamEventType, ToolCall,
};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::notes;
use crate::path::error_code;

/// How many chunks a tool may run ahead of the sink before its `emit` waits: keeps a flooding
/// command from buffering unbounded output in memory.
const CHANNEL_DEPTH: usize = 64;

/// What a tool reports when it finishes on its own.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ToolOutcome {
    /// A note such as `[exit code: 2]`, written after the content.
    pub note: Option<String>,
    /// The tool's own stop reason; `None` means completed.
    pub stop: Option<StopReason>,
    /// `data:<mime>;base64,...` URLs, delivered only when the call completes.
    pub images: Vec<String>,
}

/// `Err` is the reference's "the tool threw": it becomes `[tool error] <msg>`.
pub(crate) type ToolResult = Result<ToolOutcome, String>;

/// Where a running tool sends its output, chunk by chunk.
#[derive(Debug)]
pub(crate) struct Output {
    tx: mpsc::Sender<String>,
    timeout: Option<Duration>,
}

impl Output {
    /// The call's effective timeout, so a tool can hand back before it fires.
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Sends one chunk; waits while the sink is behind.
    pub(crate) async fn emit(&self, chunk: impl Into<String>) {
        let chunk = chunk.into();
        if !chunk.is_empty() {
            // A send only fails once the wrapper stopped listening, when nothing matters anymore.
            let _ = self.tx.send(chunk).await;
        }
    }
}

/// One executable tool, already bound to its workspace.
///
/// The wrapper may drop `run`'s future at any await point (interrupt or timeout), so a tool
/// that owns external resources must release them on drop.
#[async_trait]
pub(crate) trait Tool: Send + Sync {
    /// A per-call timeout requested by the arguments, replacing the configured one.
    fn timeout_override(&self, _args: &Value) -> Option<Duration> {
        None
    }

    /// Runs the call, streaming its content through `out`.
    async fn run(&self, args: Value, out: Output) -> ToolResult;
}

/// The limits the wrapper enforces.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// `None`: no cap.
    pub max_output_chars: Option<usize>,
    /// `None`: no timeout.
    pub timeout: Option<Duration>,
    /// Canonical workspace root, when truncated output is archived under it.
    pub archive_root: Option<PathBuf>,
    /// How much the archive may still write.
    pub archive_budget: Arc<ArchiveBudget>,
}

/// The archive's bounds: bytes per archived call, and bytes left for the whole session (the
/// tools instance), so a command printing forever cannot fill the disk.
#[derive(Debug)]
pub(crate) struct ArchiveBudget {
    per_file: u64,
    session_left: AtomicU64,
}

impl ArchiveBudget {
    pub(crate) fn new(per_file: u64, per_session: u64) -> ArchiveBudget {
        ArchiveBudget {
            per_file,
            session_left: AtomicU64::new(per_session),
        }
    }

    /// Takes up to `want` bytes from the session's budget; returns what was granted.
    fn take(&self, want: u64) -> u64 {
        let mut granted = 0;
        let _ = self
            .session_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                granted = left.min(want);
                Some(left - granted)
            });
        granted
    }

    fn exhausted(&self) -> bool {
        self.session_left.load(Ordering::Relaxed) == 0
    }
}

/// Workspace-relative directory where the full output of truncated calls is archived.
pub const ARCHIVE_DIR: &str = ".penguin/archive";

/// Executes one call and closes it out: start, deltas, stop, exactly one complete output.
pub(crate) async fn execute(
    tool: Option<&dyn Tool>,
    call: &ToolCall,
    cancel: &CancellationToken,
    limits: &Limits,
    sink: &mut dyn MessageSink,
) {
    let id = call.tool_call_id.as_str();
    sink.emit(build::partial_tool_call_output(
        StreamEventType::Start,
        "",
        id,
        StopReason::Completed,
    ))
    .await;
    let Some(tool) = tool else {
        return fail_fast(sink, id, notes::unknown_tool(&call.name)).await;
    };
    let args = match notes::arguments(&call.name, &call.arguments) {
        Ok(args) => args,
        Err(text) => return fail_fast(sink, id, text).await,
    };
    // The model may ask for a shorter timeout, never a longer one than the operator set.
    let timeout = match (tool.timeout_override(&args), limits.timeout) {
        (Some(asked), Some(limit)) => Some(asked.min(limit)),
        (asked, limit) => asked.or(limit),
    }
    .filter(|t| !t.is_zero());

    let mut acc = Accumulator::new(id, limits);
    let (tx, mut rx) = mpsc::channel(CHANNEL_DEPTH);
    let mut running =
        Box::pin(AssertUnwindSafe(tool.run(args, Output { tx, timeout })).catch_unwind());
    let mut deadline = Box::pin(async move {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    });
    let end = loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break End::Aborted,
            () = &mut deadline => break End::TimedOut,
            Some(chunk) = rx.recv() => acc.push(chunk, sink).await,
            res = &mut running => break End::Finished(res),
        }
    };
    // Dropping the tool is how interrupt and timeout stop it (its resources clean up on
    // drop); it also drops the sender, so the drain below sees everything sent before.
    drop(running);
    while let Ok(chunk) = rx.try_recv() {
        acc.push(chunk, sink).await;
    }

    let timed_out = matches!(end, End::TimedOut);
    let user_aborted = matches!(end, End::Aborted);
    let (outcome, thrown) = match end {
        End::Finished(Ok(Ok(outcome))) => (outcome, None),
        End::Finished(Ok(Err(msg))) => (ToolOutcome::default(), Some(msg)),
        End::Finished(Err(panic)) => (
            ToolOutcome::default(),
            Some(format!("tool panicked: {}", panic_message(&*panic))),
        ),
        End::Aborted | End::TimedOut => (ToolOutcome::default(), None),
    };
    let stop = if user_aborted || (!timed_out && outcome.stop == Some(StopReason::Aborted)) {
        StopReason::Aborted
    } else if timed_out || thrown.is_some() {
        StopReason::Failed
    } else {
        outcome.stop.unwrap_or(StopReason::Completed)
    };

    let mut lines = acc.finish_archive().await;
    lines.extend(outcome.note.filter(|n| !n.is_empty()));
    if stop == StopReason::Aborted {
        lines.push(notes::INTERRUPTED.to_owned());
    } else if timed_out {
        let ms = timeout.map_or(0, |t| t.as_millis());
        lines.push(notes::timeout(ms));
    } else if let Some(msg) = thrown {
        lines.push(notes::tool_error(&msg));
    }
    if lines.is_empty() && acc.content.is_empty() {
        lines.push(notes::NO_OUTPUT.to_owned());
    }
    let images = if stop == StopReason::Completed {
        outcome.images
    } else {
        Vec::new()
    };
    acc.close(sink, &lines.join("\n"), images, stop).await;
}

enum End {
    Aborted,
    TimedOut,
    Finished(Result<ToolResult, Box<dyn Any + Send>>),
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

/// The three-message close-out of a call that never ran: delta, stop(failed), complete.
async fn fail_fast(sink: &mut dyn MessageSink, id: &str, text: String) {
    sink.emit(build::partial_tool_call_output(
        StreamEventType::Delta,
        text.clone(),
        id,
        StopReason::Completed,
    ))
    .await;
    sink.emit(build::partial_tool_call_output(
        StreamEventType::Stop,
        "",
        id,
        StopReason::Failed,
    ))
    .await;
    sink.emit(build::tool_call_output(text, id, StopReason::Failed))
        .await;
}

/// The call's content under the cap, what of it has been streamed, and the archive of the
/// full output once the cap is exceeded.
struct Accumulator<'a> {
    id: &'a str,
    cap: Option<usize>,
    archive_root: Option<&'a Path>,
    budget: &'a ArchiveBudget,
    /// Bytes written to the archive file, and bytes the caps kept out of it.
    archived: u64,
    dropped: u64,
    /// Head-kept content, at most `cap` chars.
    content: String,
    content_chars: usize,
    /// Byte length of the prefix of `content` already sent as deltas.
    streamed: usize,
    truncated: bool,
    archive: Archive,
}

enum Archive {
    /// Not needed (yet), or disabled.
    None,
    /// The session's archive budget was used up before this call needed one.
    Skipped,
    Open {
        file: tokio::fs::File,
        rel: String,
    },
    Failed(String),
}

impl<'a> Accumulator<'a> {
    fn new(id: &'a str, limits: &'a Limits) -> Accumulator<'a> {
        Accumulator {
            id,
            cap: limits.max_output_chars,
            archive_root: limits.archive_root.as_deref(),
            budget: &limits.archive_budget,
            archived: 0,
            dropped: 0,
            content: String::new(),
            content_chars: 0,
            streamed: 0,
            truncated: false,
            archive: Archive::None,
        }
    }

    async fn push(&mut self, chunk: String, sink: &mut dyn MessageSink) {
        if self.truncated {
            self.archive_write(&chunk).await;
            return;
        }
        let chars = chunk.chars().count();
        match self.cap {
            Some(cap) if self.content_chars + chars > cap => {
                // The chunk does not fit: keep its head, stop forwarding (the kept head goes
                // out in the compensation delta at close-out), and start the archive with
                // everything produced so far.
                let room = cap - self.content_chars;
                let cut = chunk
                    .char_indices()
                    .nth(room)
                    .map_or(chunk.len(), |(i, _)| i);
                let full_so_far = std::mem::take(&mut self.content);
                self.content = full_so_far.clone();
                self.content.push_str(&chunk[..cut]);
                self.content_chars = cap;
                self.truncated = true;
                self.archive_open().await;
                self.archive_write(&full_so_far).await;
                self.archive_write(&chunk).await;
            }
            _ => {
                self.content.push_str(&chunk);
                self.content_chars += chars;
                self.streamed = self.content.len();
                sink.emit(build::partial_tool_call_output(
                    StreamEventType::Delta,
                    chunk,
                    self.id,
                    StopReason::Completed,
                ))
                .await;
            }
        }
    }

    async fn archive_open(&mut self) {
        let Some(root) = self.archive_root else {
            return;
        };
        if self.budget.exhausted() {
            self.archive = Archive::Skipped;
            return;
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let safe_id: String = self
            .id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let rel = format!("{ARCHIVE_DIR}/{millis}-{seq}-{safe_id}.txt");
        let path = root.join(&rel);
        let opened = async {
            if let Some(dir) = path.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .await
        }
        .await;
        self.archive = match opened {
            Ok(file) => Archive::Open { file, rel },
            Err(e) => Archive::Failed(error_code(&e)),
        };
    }

    async fn archive_write(&mut self, text: &str) {
        let Archive::Open { file, .. } = &mut self.archive else {
            return;
        };
        let len = text.len() as u64;
        let room = self.budget.per_file.saturating_sub(self.archived).min(len);
        let granted = self.budget.take(room);
        // Whole characters only, so the archive stays valid UTF-8.
        let mut keep = usize::try_from(granted).unwrap_or(text.len());
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        if let Err(e) = file.write_all(&text.as_bytes()[..keep]).await {
            self.archive = Archive::Failed(error_code(&e));
            return;
        }
        self.archived += keep as u64;
        self.dropped += len - keep as u64;
    }

    /// The truncation note lines (empty when nothing was cut).
    async fn finish_archive(&mut self) -> Vec<String> {
        if !self.truncated {
            return Vec::new();
        }
        let mut lines = vec![notes::truncated(self.cap.unwrap_or(0))];
        match std::mem::replace(&mut self.archive, Archive::None) {
            Archive::None => {}
            Archive::Open { mut file, rel } => match file.flush().await {
                Ok(()) => {
                    lines.push(notes::archived(&rel));
                    if self.dropped > 0 {
                        lines.push(notes::archive_capped(self.archived, self.dropped));
                    }
                }
                Err(e) => lines.push(notes::archive_failed(&error_code(&e))),
            },
            Archive::Skipped => lines.push(notes::ARCHIVE_BUDGET_SPENT.to_owned()),
            Archive::Failed(code) => lines.push(notes::archive_failed(&code)),
        }
        lines
    }

    /// Final emission (§2.16 step 7).
    async fn close(
        self,
        sink: &mut dyn MessageSink,
        notes: &str,
        images: Vec<String>,
        stop: StopReason,
    ) {
        let id = self.id;
        let delta = |text: String| {
            build::partial_tool_call_output(StreamEventType::Delta, text, id, StopReason::Completed)
        };
        if self.streamed < self.content.len() {
            sink.emit(delta(self.content[self.streamed..].to_owned()))
                .await;
        }
        let mut output = self.content;
        if !notes.is_empty() {
            let note_delta = if output.is_empty() {
                notes.to_owned()
            } else {
                format!("\n{notes}")
            };
            output.push_str(&note_delta);
            sink.emit(delta(note_delta)).await;
        }
        if !images.is_empty() {
            sink.emit(OmniMessage::new(Body::Model(
                ModelPayload::PartialToolCallOutput(PartialToolCallOutput {
                    role: Role::User,
                    event_type: StreamEventType::Delta,
                    output: String::new(),
                    images: Some(images.clone()),
                    tool_call_id: id.to_owned(),
                    stop_reason: Some(StopReason::Completed),
                }),
            )))
            .await;
        }
        sink.emit(build::partial_tool_call_output(
            StreamEventType::Stop,
            "",
            id,
            stop,
        ))
        .await;
        sink.emit(build::tool_call_output_with_images(
            output, id, stop, images,
        ))
        .await;
    }
}

#[cfg(test)]
mod tests;
