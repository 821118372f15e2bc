#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod check;
#[cfg(feature = "engine")]
pub mod engine;
mod error;
mod fork;
mod lines;
mod listing;
mod open;
mod paths;
mod portable;
mod reader;
mod resume;
mod writer;

pub use check::{check_trace, Problem, Severity, ROTATE_MARKER};
pub use error::TraceError;
pub use fork::{
    completed_tasks, fork_session, next_task_input, CompletedTask, ForkError, ForkPoint, Forked,
};
pub use lines::TraceLines;
pub use listing::{
    find_last_record, read_session_head, read_trace_head, session_title, SessionHead, FORK_MARK,
    LIST_HEAD_BYTES, LIST_TAIL_BYTES, PROMPT_CHARS,
};
pub use open::{is_regular_entry, open_trace, MAX_RECORD_BYTES};
pub use paths::{
    data_root, find_latest_trace_file, latest_session_id, local_date_dir, new_session_id,
    parse_trace_file_name, session_trace_files, trace_file_name, trace_file_path, LocatedTrace,
    TraceLocation,
};
pub use penguin_omni_protocol::markers::extract_summary;
pub use portable::{export_session, import_session, ImportError, Imported};
pub use reader::{
    parse_trace_lines, read_trace, read_trace_each, read_trace_tolerant, skipped_diagnostic,
    ReadMode, ReadReport, SkippedLine, TraceRead,
};
pub use resume::{
    placeholder, resume_session, resume_trace, DanglingCompaction, Resumed, ResumedSession,
    Resumer, PLACEHOLDER_OUTPUT,
};
pub use writer::{Durability, FlushHandle, TraceMirror, UnknownDurability, Writer, WriterConfig};
