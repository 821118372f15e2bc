//! The Trace: append-only JSONL files, one per model context, and session resume.
