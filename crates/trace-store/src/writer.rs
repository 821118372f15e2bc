//! The append-only trace writer (protocol [§3.3](penguin_omni_protocol::spec#s3.3) *Writing*).

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;

use penguin_omni_protocol::{EventPayload, Frame, OmniMessage, SessionMeta};

use crate::error::TraceError;
use crate::paths::{local_date_dir, trace_file_path, TraceLocation};

mod mirror;
mod worker;

pub use mirror::TraceMirror;

#[cfg(test)]
use worker::append_all;
use worker::{Command, Counters, Worker};

/// When the writer asks the OS to put records on stable storage (`fsync`).
///
/// Every policy appends each record with one `write(2)` as soon as the writer thread reaches it,
/// so a *process* crash (panic, SIGKILL, OOM kill) loses nothing that was appended: the data is in
/// the kernel's page cache. The policies differ only for a *machine* crash or power loss.
///
/// Costs (measured by `cargo bench -p penguin-trace-store`; see the crate docs): an `fsync` costs
/// from tens of microseconds up to several milliseconds depending on the disk (about 0.24 ms on
/// the development VM), so `EveryRecord` caps throughput at a few hundred to a few thousand
/// records per second, while `AtCommit` pays it about once per model request, which is
/// negligible next to the request itself. The cost is paid on the writer thread; callers of
/// [`Writer::record`] never wait for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Never fsync. A power loss can lose anything the OS had not written back yet (typically up
    /// to ~30 s). Fastest; fine for tests and throwaway sessions.
    Never,
    /// fsync after each `request_end` and `abort`, and after `compaction_end` (a completed one
    /// closes the context that resume rebuilds from). A committed turn survives a power loss;
    /// only the in-flight turn's records can be lost, and resume drops an uncommitted turn anyway.
    #[default]
    AtCommit,
    /// fsync after every record. Nothing acknowledged by the writer thread is ever lost, at the
    /// price of one fsync per record.
    EveryRecord,
}

impl Durability {
    fn syncs_after(self, msg: &OmniMessage) -> bool {
        match self {
            Durability::Never => false,
            Durability::EveryRecord => true,
            Durability::AtCommit => matches!(
                msg.event(),
                Some(
                    EventPayload::RequestEnd { .. }
                        | EventPayload::Abort { .. }
                        | EventPayload::CompactionEnd { .. }
                )
            ),
        }
    }
}

/// A name that is not a [`Durability`]: `never`, `commit` or `record` are.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a durability (never, commit or record)")]
pub struct UnknownDurability(pub String);

impl std::str::FromStr for Durability {
    type Err = UnknownDurability;

    /// `never`, `commit` ([`AtCommit`](Durability::AtCommit)) or `record`
    /// ([`EveryRecord`](Durability::EveryRecord)), as `[trace] durability` and
    /// `--durability` spell them.
    fn from_str(s: &str) -> Result<Durability, UnknownDurability> {
        match s {
            "never" => Ok(Durability::Never),
            "commit" => Ok(Durability::AtCommit),
            "record" => Ok(Durability::EveryRecord),
            other => Err(UnknownDurability(other.to_owned())),
        }
    }
}

#[cfg(test)]
#[test]
fn durability_names_parse_and_a_wrong_one_is_named() {
    assert_eq!("commit".parse(), Ok(Durability::AtCommit));
    assert_eq!("never".parse(), Ok(Durability::Never));
    assert_eq!("record".parse(), Ok(Durability::EveryRecord));
    let err = "always".parse::<Durability>().unwrap_err();
    assert_eq!(
        err.to_string(),
        r#""always" is not a durability (never, commit or record)"#
    );
}

/// Everything a [`Writer`] needs to know.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// `<root>/<project>/agents/<agent>/traces`.
    pub traces_dir: PathBuf,
    /// The session whose files are written.
    pub session_id: String,
    /// The date directory (`yyyy-mm-dd`). Fixed for the Writer's lifetime: rotated files stay
    /// next to the first one.
    pub date_dir: String,
    /// The first file index (`NNN`); 1 for a new session, the located index on resume.
    pub start_index: u32,
    /// The fsync policy.
    pub durability: Durability,
}

impl WriterConfig {
    /// A new session: today's local date, index 1, [`Durability::AtCommit`].
    pub fn new(traces_dir: impl Into<PathBuf>, session_id: impl Into<String>) -> Self {
        WriterConfig {
            traces_dir: traces_dir.into(),
            session_id: session_id.into(),
            date_dir: local_date_dir(),
            start_index: 1,
            durability: Durability::default(),
        }
    }

    /// Sets the date directory.
    pub fn date_dir(mut self, date_dir: impl Into<String>) -> Self {
        self.date_dir = date_dir.into();
        self
    }

    /// Sets the first index.
    pub fn start_index(mut self, index: u32) -> Self {
        self.start_index = index;
        self
    }

    /// Sets the fsync policy.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
}

/// The append-only writer of one session's trace.
///
/// Cheap to clone (all clones share one writer thread) and `Send + Sync`. Records are appended by
/// a dedicated thread fed through a channel, so [`record`](Writer::record) never blocks on I/O
/// and may be called while holding a lock; record order is call order (for calls from different
/// threads, the order in which they reached the channel).
///
/// Dropping the last clone drains the queue and joins the thread, so nothing queued is lost on an
/// orderly shutdown. That drop therefore waits for the pending appends; drop the last clone
/// outside latency-sensitive code (or call [`flush`](Writer::flush) first to bound the wait).
///
/// # `session_meta` first
///
/// A session's trace starts with its `session_meta` (the session's invariants: id, model,
/// system prompt, workspace), and [`resume_session`](crate::resume_session) refuses a trace
/// without one ([`TraceError::MissingMeta`]). Nobody else writes it: the engine records each
/// run from its prompt on (with the `engine` feature a `Writer` is the engine's `TraceSink`,
/// see the `engine` module). So record it yourself, once, before the first run:
/// [`Writer::record_session_meta`].
///
/// ```
/// use penguin_omni_protocol::{build, ContextWindow, SessionMeta, StopReason};
/// use penguin_trace_store::{resume_session, Durability, TraceError, TraceLocation, Writer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let root = std::env::temp_dir().join(format!("penguin-doc-meta-{}", std::process::id()));
/// let location = TraceLocation::new(&root, "project", "agent");
/// let meta = |id: &str| SessionMeta {
///     session_id: id.into(),
///     provider: "openai-chat".into(),
///     model_id: "gpt-4.1".into(),
///     model_context_window: ContextWindow::Tokens(128_000),
///     system_prompt: "You are terse.".into(),
///     agent_state: String::new(),
///     workspace: "/tmp".into(),
///     source: None,
///     forked_from: None,
/// };
/// let turn = [
///     build::user_text("hi"),
///     build::request_begin(),
///     build::assistant_text("hello", StopReason::Completed),
///     build::request_end(StopReason::Completed, Default::default()),
/// ];
///
/// // Without session_meta: written, but not resumable.
/// let bare = Writer::create(&location, "session-bare", Durability::Never)?;
/// for m in turn.clone() {
///     bare.record_message(m);
/// }
/// bare.flush()?;
/// let err = resume_session(&location, "session-bare", Durability::Never).unwrap_err();
/// assert!(matches!(err, TraceError::MissingMeta { .. }));
///
/// // With it, first: resumable, and the head comes back typed.
/// let writer = Writer::create(&location, "session-good", Durability::Never)?;
/// writer.record_session_meta(meta("session-good"));
/// for m in turn {
///     writer.record_message(m);
/// }
/// writer.flush()?;
/// let session = resume_session(&location, "session-good", Durability::Never)?;
/// assert_eq!(session.resumed.meta.model_id, "gpt-4.1");
/// assert_eq!(session.resumed.history.len(), 2);
/// # std::fs::remove_dir_all(&root)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Writer {
    shared: Arc<Shared>,
}

struct Shared {
    // The writer thread starts with the first command, so a session that never writes (a
    // server session created and never run) holds neither a thread nor a file.
    pending: Mutex<Option<Worker>>,
    tx: OnceLock<Sender<Command>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    counters: Arc<Counters>,
    index: AtomicU32,
    traces_dir: PathBuf,
    date_dir: String,
    session_id: String,
    durability: Durability,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("started", &self.tx.get().is_some())
            .field("counters", &self.counters)
            .field("index", &self.index)
            .field("session_id", &self.session_id)
            .field("durability", &self.durability)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish what is queued and exit.
        drop(self.tx.take());
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::warn!("[trace] writer thread panicked");
            }
        }
    }
}

impl Writer {
    /// A writer for a new session under `location`, today's date, index 1.
    pub fn create(
        location: &TraceLocation,
        session_id: &str,
        durability: Durability,
    ) -> Result<Writer, TraceError> {
        Writer::open(WriterConfig::new(location.traces_dir(), session_id).durability(durability))
    }

    /// A writer for an explicit configuration. Nothing touches the disk, and no thread starts,
    /// until the first record.
    pub fn open(config: WriterConfig) -> Result<Writer, TraceError> {
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            traces_dir: config.traces_dir.clone(),
            date_dir: config.date_dir.clone(),
            session_id: config.session_id.clone(),
            index: config.start_index,
            durability: config.durability,
            file: None,
            probed_index: None,
            torn: false,
            dirty: false,
            sync_owed: false,
            buf: Vec::new(),
            counters: counters.clone(),
            mirror: None,
            mirror_owed: false,
        };
        Ok(Writer {
            shared: Arc::new(Shared {
                pending: Mutex::new(Some(worker)),
                tx: OnceLock::new(),
                thread: Mutex::new(None),
                counters,
                index: AtomicU32::new(config.start_index),
                traces_dir: config.traces_dir,
                date_dir: config.date_dir,
                session_id: config.session_id,
                durability: config.durability,
            }),
        })
    }

    /// The writer thread's queue, starting the thread on first use. `None` when it could not
    /// be started (logged once).
    fn sender(&self) -> Option<&Sender<Command>> {
        if let Some(tx) = self.shared.tx.get() {
            return Some(tx);
        }
        let mut pending = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = self.shared.tx.get() {
            return Some(tx);
        }
        let worker = pending.take()?;
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("trace-writer-{}", self.shared.session_id))
            .spawn(move || worker.run(rx));
        match spawned {
            Ok(handle) => {
                *self
                    .shared
                    .thread
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(handle);
                Some(self.shared.tx.get_or_init(|| tx))
            }
            Err(e) => {
                tracing::error!(
                    "[trace] cannot start the writer of session {}: {e}; its records are lost",
                    self.shared.session_id
                );
                None
            }
        }
    }

    /// Copies every record queued from now on to `mirror` too, and makes each sync point
    /// (commit, flush, rotation) wait for it: see [`TraceMirror`]. Set it before the first
    /// record, or the records before it are the file's alone.
    pub fn set_mirror(&self, mirror: std::sync::Arc<dyn TraceMirror>) {
        {
            let mut pending = self
                .shared
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(worker) = pending.as_mut() {
                worker.mirror = Some(mirror);
                return;
            }
        }
        if !self.send(Command::Mirror(mirror)) {
            tracing::warn!("[trace] mirror not set: the writer thread has stopped");
        }
    }

    /// Whether the writer thread has started: it does with the first record or rotation.
    pub fn started(&self) -> bool {
        self.shared.tx.get().is_some()
    }

    fn send(&self, cmd: Command) -> bool {
        self.sender().is_some_and(|tx| tx.send(cmd).is_ok())
    }

    /// Queues `frame` for appending, if it is recordable ([§3.2](penguin_omni_protocol::spec#s3.2)
    /// *What is recorded*); returns whether it was queued.
    ///
    /// Never blocks on I/O: the frame (a reference-counted handle) is handed to the writer
    /// thread. A later write failure is logged and counted, never returned here.
    pub fn record(&self, frame: &Frame) -> bool {
        if !frame.message().is_recordable() {
            return false;
        }
        let queued = self.send(Command::Record(frame.clone()));
        if !queued {
            self.shared
                .counters
                .failed_writes
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!("[trace] write failed: the writer thread has stopped");
        }
        queued
    }

    /// [`record`](Writer::record) for a message that has no frame yet.
    pub fn record_message(&self, msg: OmniMessage) -> bool {
        self.record(&Frame::new(msg))
    }

    /// Records the session's head, `session_meta`: once, before anything else of a new
    /// session (a resumed one has it already). A trace without it cannot be resumed (see
    /// [`Writer`]'s docs). The same as recording `build::session_meta(meta)`.
    pub fn record_session_meta(&self, meta: SessionMeta) -> bool {
        self.record_message(penguin_omni_protocol::build::session_meta(meta))
    }

    /// Queues a rotation: records queued after this call go to the file at `index + 1`.
    /// Nothing is created until a record arrives, so a rotation followed by nothing leaves no
    /// empty file.
    pub fn rotate(&self) {
        self.shared.index.fetch_add(1, Ordering::SeqCst);
        if !self.send(Command::Rotate) {
            tracing::warn!("[trace] rotate failed: the writer thread has stopped");
        }
    }

    /// Blocks until everything queued before this call has been appended and, unless the policy
    /// is [`Durability::Never`], fsynced.
    ///
    /// Returns an error only when the fsync failed or the writer thread is gone; failed appends
    /// are reported through [`failed_writes`](Writer::failed_writes).
    pub fn flush(&self) -> io::Result<()> {
        self.flush_handle().wait()
    }

    /// Queues a flush and returns at once; the handle completes when [`flush`](Writer::flush)
    /// would have returned. An async caller can wait on it from a blocking task, or poll
    /// [`FlushHandle::try_wait`].
    pub fn flush_handle(&self) -> FlushHandle {
        let (tx, rx) = mpsc::channel();
        if !self.started() {
            // Nothing was ever queued: nothing to flush, and no reason to start a thread.
            let _ = tx.send(Ok(()));
            return FlushHandle { rx };
        }
        // When the send fails the sender is dropped with the command, so the handle reports the
        // stopped thread instead of hanging.
        self.send(Command::Flush(tx));
        FlushHandle { rx }
    }

    /// Records that could not be appended (queue closed, open or write error) so far.
    pub fn failed_writes(&self) -> u64 {
        self.shared.counters.failed_writes.load(Ordering::Relaxed)
    }

    /// fsyncs that failed so far (the records were appended but may not survive a power loss).
    pub fn failed_syncs(&self) -> u64 {
        self.shared.counters.failed_syncs.load(Ordering::Relaxed)
    }

    /// fsyncs done so far: with group commit, fewer than the commits they cover.
    pub fn syncs(&self) -> u64 {
        self.shared.counters.syncs.load(Ordering::Relaxed)
    }

    /// Records appended so far.
    pub fn written(&self) -> u64 {
        self.shared.counters.written.load(Ordering::Relaxed)
    }

    /// The index that records queued now go to.
    pub fn index(&self) -> u32 {
        self.shared.index.load(Ordering::SeqCst)
    }

    /// The file that records queued now go to.
    pub fn current_path(&self) -> PathBuf {
        trace_file_path(
            &self.shared.traces_dir,
            &self.shared.date_dir,
            &self.shared.session_id,
            self.index(),
        )
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.shared.session_id
    }

    /// The date directory name.
    pub fn date_dir(&self) -> &str {
        &self.shared.date_dir
    }

    /// The fsync policy.
    pub fn durability(&self) -> Durability {
        self.shared.durability
    }
}

/// A pending flush (see [`Writer::flush_handle`]).
#[derive(Debug)]
pub struct FlushHandle {
    rx: Receiver<io::Result<()>>,
}

impl FlushHandle {
    /// Blocks until the flush completed.
    pub fn wait(self) -> io::Result<()> {
        self.rx.recv().unwrap_or_else(|_| Err(stopped()))
    }

    /// `None` while the flush is still queued.
    pub fn try_wait(&self) -> Option<io::Result<()>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(stopped())),
        }
    }

    /// The underlying channel, for callers that select over several receivers.
    pub fn into_receiver(self) -> Receiver<io::Result<()>> {
        self.rx
    }
}

fn stopped() -> io::Error {
    io::Error::other("the trace writer thread has stopped")
}

#[cfg(test)]
mod tests;
