//! The Trace: append-only JSONL files, one per model context, and session resume.
//!
//! # Layout
//!
//! ```text
//! <root>/<project>/agents/<agent>/traces/<yyyy-mm-dd>/<session_id>_<NNN>.jsonl
//! ```
//!
//! - `root` is `$PENGUIN_HOME`, default `~/.penguin/data` ([`data_root`]); [`TraceLocation`]
//!   builds the rest.
//! - Session ids are `session-YYYY-MM-DD-HH-mm-ss-<8hex>` in local time ([`new_session_id`]).
//! - The date directory is the local date when the [`Writer`] is constructed and never changes
//!   for that writer, so every rotated file of a session sits next to the first.
//! - One file is one model context. [`Writer::rotate`] moves to `NNN + 1` (after a completed
//!   compaction); a record is never split across files.
//! - Each record is one line: the message's single-line JSON ([`Frame::json`]) and `\n`.
//!
//! # Writing
//!
//! [`Writer::record`] filters out what is not recordable (partials, origin-tagged messages) and
//! hands the frame to a dedicated writer thread through a channel. It never blocks on I/O, so the
//! engine may call it from a synchronous hook while holding a lock, and records land in call
//! order. The thread appends each record with a single `write(2)` of one buffer (looping only on
//! a short write) on a file opened with `O_APPEND`.
//!
//! A crash can cut the last record short. Before the first append to each file (and after an
//! append of its own was cut short), the writer cuts off whatever follows the last `\n`: the
//! fragment of an unfinished record. A broken line can therefore only ever be the last one.
//!
//! [`Writer::flush`] blocks until everything queued before it is appended (and fsynced unless
//! the policy is [`Durability::Never`]); [`Writer::flush_handle`] does the same without blocking
//! the caller. The crate needs no async runtime.
//!
//! ## Durability policies and their cost
//!
//! | policy | fsync | survives process crash | survives power loss |
//! |---|---|---|---|
//! | [`Durability::Never`] | never | everything appended | what the OS wrote back |
//! | [`Durability::AtCommit`] (default) | after `request_end`, `abort`, `compaction_end` | everything appended | every committed turn |
//! | [`Durability::EveryRecord`] | after every record | everything appended | every appended record |
//!
//! `AtCommit` is the default because resume keeps only committed turns anyway: a power loss
//! costs at most the in-flight turn, for about one fsync per model request. `EveryRecord` pays
//! one fsync per record (streamed tool outputs, approvals, token usage...), which bounds
//! throughput by the disk's sync latency. Measure on your machine with
//! `cargo bench -p penguin-trace-store` (the `trace_bench` target, plain `std::time::Instant`;
//! it also times resuming a 100,000-record trace and reports its peak RSS).
//!
//! Two runs on the development VM (2 cores and a virtio disk shared with other builds, so fsync
//! latency is noisy; records of a realistic turn mix, ~285 bytes on average, timed from the
//! first `record` to the end of `flush`):
//!
//! | policy | records/s on disk | `record()` calls/s |
//! |---|---|---|
//! | `Never` | 490,000 – 630,000 | 2.5 – 2.9 M |
//! | `AtCommit` (one fsync per 9-record turn) | 2,700 – 24,000 | 1.2 – 2.6 M |
//! | `EveryRecord` | 4,100 – 4,400 | 4.2 – 4.4 M |
//!
//! `record()` stays in the microseconds whatever the policy (its rare multi-millisecond
//! outliers are scheduler preemption on the shared cores): the fsync cost lands on the writer
//! thread, not on the caller. Resuming a 100,000-record (28 MB) trace took 0.3 – 0.5 s
//! (reading and parsing about three quarters of it) with a peak RSS of ~100 MB.
//!
//! ## Failures
//!
//! A failed append (disk full, permission denied, missing directory) is logged as
//! `[trace] write failed: <path>: <error>` via `tracing::warn!` and counted in
//! [`Writer::failed_writes`]; it never panics, never blocks later records, and is never returned
//! to the caller of `record`. If part of a record landed before the error, the next record starts
//! on a fresh line. A failed fsync is logged as `[trace] fsync failed: …` and counted in
//! [`Writer::failed_syncs`], and makes the pending [`Writer::flush`] return the error.
//!
//! # Reading and resuming
//!
//! - [`read_trace`] with [`ReadMode::Tolerant`] ignores a torn last line, skips malformed middle
//!   lines (one `[trace] skipped K malformed line(s) [...] in <path>` warning) and keeps every
//!   parseable record; [`ReadMode::Strict`] fails on the first malformed middle line, naming file
//!   and line.
//! - [`resume_trace`] rebuilds the engine state from the newest file (§3.5 of the reference):
//!   committed history, carry-over, compaction closure, token counters, turns.
//! - [`resume_session`] does the whole §3.6 file work: locate, read, resume, and return a
//!   [`Writer`] that continues the same file.
//! - [`check_trace`] lists structural problems for `penguin trace check`.
//!
//! ## What a reader accepts
//!
//! Traces live where other processes can write, so no file in a traces folder can be allowed
//! to jam a reader. Every trace is opened through [`open_trace`], which opens only regular files
//! (checked on the open descriptor, after an open that cannot block on a FIFO) and names
//! anything else ([`TraceError::NotRegularFile`]); listings pass such entries over unopened
//! ([`is_regular_entry`]). No line longer than [`MAX_RECORD_BYTES`] is ever held: it is
//! refused with [`TraceError::RecordTooLarge`] (file, line, limit), and the tolerant reader
//! skips it as it skips a broken line. A listing reads a bounded head and tail of each file
//! ([`read_trace_head`], [`find_last_record`]), never the whole; [`TraceLines`] hands raw lines
//! to readers that keep records as JSON.
//!
//! # Example
//!
//! ```
//! use penguin_omni_protocol::{build, Frame, StopReason};
//! use penguin_trace_store::{
//!     read_trace, resume_trace, Durability, ReadMode, Writer, WriterConfig,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("penguin-doc-{}", std::process::id()));
//! let writer = Writer::open(
//!     WriterConfig::new(&dir, "session-2026-07-18-03-10-22-0123abcd")
//!         .date_dir("2026-07-18")
//!         .durability(Durability::Never),
//! )?;
//! writer.record(&Frame::new(build::user_text("hi")));
//! writer.record(&Frame::new(build::request_begin()));
//! writer.record(&Frame::new(build::assistant_text("hello", StopReason::Completed)));
//! writer.record(&Frame::new(build::request_end(StopReason::Completed, Default::default())));
//! writer.flush()?;
//!
//! let read = read_trace(&writer.current_path(), ReadMode::Tolerant)?;
//! let resumed = resume_trace(&read.messages);
//! assert_eq!(resumed.history.len(), 2);
//! assert_eq!(resumed.session_turns, 1);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! Resuming a session stored under the data root (touches `~/.penguin/data`):
//!
//! ```no_run
//! use penguin_trace_store::{resume_session, Durability, TraceLocation};
//!
//! # fn main() -> Result<(), penguin_trace_store::TraceError> {
//! let location = TraceLocation::from_env("my-project", "default");
//! let session = resume_session(&location, "session-2026-07-18-03-10-22-0123abcd", Durability::AtCommit)?;
//! println!("{} committed messages", session.resumed.history.len());
//! session.writer.record_message(penguin_omni_protocol::build::user_text("continue"));
//! # Ok(())
//! # }
//! ```
//!
//! [`Frame::json`]: penguin_omni_protocol::Frame::json

mod check;
mod error;
mod lines;
mod listing;
mod open;
mod paths;
mod reader;
mod resume;
mod writer;

pub use check::{check_trace, Problem, Severity, ROTATE_MARKER};
pub use error::TraceError;
pub use lines::TraceLines;
pub use listing::{find_last_record, read_trace_head, LIST_HEAD_BYTES, LIST_TAIL_BYTES};
pub use open::{is_regular_entry, open_trace, MAX_RECORD_BYTES};
pub use paths::{
    data_root, find_latest_trace_file, latest_session_id, local_date_dir, new_session_id,
    trace_file_name, trace_file_path, LocatedTrace, TraceLocation,
};
pub use penguin_omni_protocol::markers::extract_summary;
pub use reader::{
    parse_trace_lines, read_trace, read_trace_each, read_trace_tolerant, skipped_diagnostic,
    ReadMode, ReadReport, SkippedLine, TraceRead,
};
pub use resume::{
    placeholder, resume_session, resume_trace, DanglingCompaction, Resumed, ResumedSession,
    Resumer, PLACEHOLDER_OUTPUT,
};
pub use writer::{Durability, FlushHandle, Writer, WriterConfig};
