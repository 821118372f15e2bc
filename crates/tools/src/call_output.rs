//! One call's output as the model and the host see it (protocol
//! [§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out*): the start fragment, the text kept
//! head-first under the cap (everything past it archived), messages of nested sessions passed
//! through, and the close-out: the notes, the stop fragment and exactly one complete output. The
//! execution wrapper ([`crate::contract`]) drives it for every tool of this crate; tools that run
//! elsewhere (a subagent's) use it directly, so every call closes the same way.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

use penguin_engine::MessageSink;
use penguin_omni_protocol::{
    build, Body, ModelPayload, OmniMessage, PartialToolCallOutput, Role, StopReason,
    StreamEventType,
};
use tokio::io::AsyncWriteExt;

use crate::confined::Dir;
use crate::notes;
use crate::path::error_code;

/// Workspace-relative directory where the full output of truncated calls is archived.
pub const ARCHIVE_DIR: &str = ".penguin/archive";

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

/// What a call may produce and how long it may run: the output cap, where truncated output is
/// archived and how much of it, and the timeout.
/// [`BuiltinTools::limits`](crate::BuiltinTools::limits) gives a session's; the default is the
/// reference's (16,000 chars, 120 s, no archive).
#[derive(Clone, Debug)]
pub struct Limits {
    /// `None`: no cap.
    pub(crate) max_output_chars: Option<usize>,
    /// `None`: no timeout.
    pub(crate) timeout: Option<Duration>,
    /// Canonical workspace root, when truncated output is archived under it.
    pub(crate) archive_root: Option<PathBuf>,
    /// How much the archive may still write.
    pub(crate) archive_budget: Arc<ArchiveBudget>,
}

impl Default for Limits {
    fn default() -> Limits {
        let budget = ArchiveBudget::new(
            DEFAULT_ARCHIVE_MAX_FILE_BYTES,
            DEFAULT_ARCHIVE_MAX_SESSION_BYTES,
        );
        Limits {
            max_output_chars: usize::try_from(crate::DEFAULT_MAX_OUTPUT_CHARS).ok(),
            timeout: Some(crate::DEFAULT_TIMEOUT),
            archive_root: None,
            archive_budget: Arc::new(budget),
        }
    }
}

/// Most bytes archived for one call, by default.
pub(crate) const DEFAULT_ARCHIVE_MAX_FILE_BYTES: u64 = 16 << 20;

/// Most bytes archived by one session's calls together, by default.
pub(crate) const DEFAULT_ARCHIVE_MAX_SESSION_BYTES: u64 = 256 << 20;

/// One call's output, from its start fragment to its complete message.
///
/// ```
/// use penguin_omni_protocol::{OmniMessage, StopReason};
/// use penguin_tools::{CallOutput, Limits};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let (mut sink, limits): (Vec<OmniMessage>, _) = (Vec::new(), Limits::default());
/// let mut out = CallOutput::start(&mut sink, "call_1", &limits).await;
/// out.text("hello").await;
/// out.close(["[done]".to_owned()], Vec::new(), StopReason::Completed).await;
/// let complete = sink.last().and_then(|m| m.model()).and_then(|p| p.content());
/// assert_eq!(complete, Some("hello\n[done]"));
/// # });
/// ```
pub struct CallOutput<'a> {
    sink: &'a mut dyn MessageSink,
    id: String,
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

impl std::fmt::Debug for CallOutput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOutput")
            .field("id", &self.id)
            .field("content", &self.content)
            .field("truncated", &self.truncated)
            .finish_non_exhaustive()
    }
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

impl<'a> CallOutput<'a> {
    /// Emits call `id`'s start fragment; the text that follows is capped and archived as
    /// `limits` say (their timeout is the caller's to keep).
    pub async fn start(
        sink: &'a mut dyn MessageSink,
        id: &str,
        limits: &'a Limits,
    ) -> CallOutput<'a> {
        sink.emit(build::partial_tool_call_output(
            StreamEventType::Start,
            "",
            id,
            StopReason::Completed,
        ))
        .await;
        CallOutput {
            sink,
            id: id.to_owned(),
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

    /// Passes on a message of a nested session (one carrying an origin) unchanged.
    pub async fn forward(&mut self, msg: OmniMessage) {
        self.sink.emit(msg).await;
    }

    /// Adds `chunk` to the content: streamed as a delta while the content stays within the
    /// cap; the chunk that crosses it keeps its head (sent at close-out), and everything from
    /// then on goes only to the archive.
    pub async fn text(&mut self, chunk: impl Into<String>) {
        let chunk = chunk.into();
        if chunk.is_empty() {
            return;
        }
        if self.truncated {
            self.archive_write(&chunk).await;
            return;
        }
        let chars = chunk.chars().count();
        match self.cap {
            Some(cap) if self.content_chars + chars > cap => {
                // Start the archive with everything produced so far.
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
                self.sink
                    .emit(build::partial_tool_call_output(
                        StreamEventType::Delta,
                        chunk,
                        &self.id,
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
        let (root, at) = (root.to_path_buf(), PathBuf::from(&rel));
        let opened = tokio::task::spawn_blocking(move || {
            let dir = Dir::open(&root)?;
            crate::workspace_dir::create_dirs(&dir, Path::new(ARCHIVE_DIR))?;
            dir.create_new(&at)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
        .map(tokio::fs::File::from_std);
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

    /// Closes the call ([§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out* step 7): the
    /// kept head not yet streamed, then the notes, each on its own line after the content (the
    /// truncation lines first, then `notes` in order; `[no output]` when there is nothing at all),
    /// the images (only a completed call has any), the stop fragment with `stop`, and the complete
    /// output.
    pub async fn close(
        mut self,
        notes: impl IntoIterator<Item = String>,
        images: Vec<String>,
        stop: StopReason,
    ) {
        let mut lines = self.finish_archive().await;
        lines.extend(notes.into_iter().filter(|n| !n.is_empty()));
        if lines.is_empty() && self.content.is_empty() {
            lines.push(notes::NO_OUTPUT.to_owned());
        }
        let notes = lines.join("\n");
        let id = self.id.as_str();
        let delta = |text: String| {
            build::partial_tool_call_output(StreamEventType::Delta, text, id, StopReason::Completed)
        };
        if self.streamed < self.content.len() {
            self.sink
                .emit(delta(self.content[self.streamed..].to_owned()))
                .await;
        }
        let mut output = self.content;
        if !notes.is_empty() {
            let note_delta = if output.is_empty() {
                notes
            } else {
                format!("\n{notes}")
            };
            output.push_str(&note_delta);
            self.sink.emit(delta(note_delta)).await;
        }
        if !images.is_empty() {
            self.sink
                .emit(OmniMessage::new(Body::Model(
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
        self.sink
            .emit(build::partial_tool_call_output(
                StreamEventType::Stop,
                "",
                id,
                stop,
            ))
            .await;
        self.sink
            .emit(build::tool_call_output_with_images(
                output, id, stop, images,
            ))
            .await;
    }

    /// Closes a failed call with `note` after whatever it produced (for a call that never
    /// ran, an unknown tool or arguments that do not parse, `note` is its whole output).
    pub async fn fail(self, note: String) {
        self.close([note], Vec::new(), StopReason::Failed).await;
    }

    /// Closes a call the user's interrupt stopped.
    pub async fn interrupted(self) {
        self.close(
            [notes::INTERRUPTED.to_owned()],
            Vec::new(),
            StopReason::Aborted,
        )
        .await;
    }
}
