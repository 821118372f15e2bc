//! The crate's error type. Every variant names the file (and line) it is about.

use std::io;
use std::path::PathBuf;

/// What went wrong reading, locating or resuming a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A line is not a valid record ([`ReadMode::Strict`](crate::ReadMode::Strict) only).
    #[error("{}:{line}: malformed record: {message}", path.display())]
    Malformed {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Why the line did not parse.
        message: String,
    },
    /// The path names something other than a regular file (a FIFO, a device, a directory,
    /// a socket), which would block a reader or never end: traces are only read from regular
    /// files ([`open_trace`](crate::open_trace)).
    #[error("{}: not a regular file ({kind}); traces are only read from regular files", path.display())]
    NotRegularFile {
        /// The path asked for.
        path: PathBuf,
        /// What it is instead: `FIFO`, `character device`, `directory`, ...
        kind: &'static str,
    },
    /// A line is longer than [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES): it is refused
    /// unread rather than held in memory ([`ReadMode::Strict`](crate::ReadMode::Strict); the
    /// tolerant reader skips it and reports it as a skipped line).
    #[error("{}:{line}: record longer than {limit} bytes (MAX_RECORD_BYTES); refused unread", path.display())]
    RecordTooLarge {
        /// The trace file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The limit it exceeds, in bytes.
        limit: usize,
    },
    /// No trace file exists for the session.
    #[error("Session does not exist: no trace file for {session_id} under {}", traces_dir.display())]
    SessionNotFound {
        /// The session looked for.
        session_id: String,
        /// The traces directory searched.
        traces_dir: PathBuf,
    },
    /// The trace holds no session_meta, so the session's invariants are unknown.
    #[error("{}: the trace has no session_meta record, so the session cannot be resumed", path.display())]
    MissingMeta {
        /// The trace file.
        path: PathBuf,
    },
    /// The writer thread could not be started.
    #[error("cannot start the trace writer thread: {0}")]
    Spawn(#[source] io::Error),
}

impl TraceError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> TraceError {
        TraceError::Io {
            path: path.into(),
            source,
        }
    }
}
