//! A session's Trace as one text a person can take away: every file's records in order, a
//! [`ROTATE_MARKER`] line where the next file starts (the form `penguin scenario run --trace`
//! writes, and [`check_trace`] reads). Importing checks it first and refuses what the checker
//! calls an error, so a session moves between machines, or into a bug report, intact.

use std::io::Write;
use std::path::Path;

use penguin_omni_protocol::OmniMessage;

use crate::check::is_rotate_marker;
use crate::paths::{session_trace_files, trace_file_path};
use crate::{check_trace, TraceError, TraceLines, ROTATE_MARKER};

/// Why a Trace was not imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The checker found errors (each line says where and what).
    #[error("not a valid trace:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// It does not start with a `session_meta`, which names the session.
    #[error("not a session's trace: its first record is not a session_meta")]
    NoMeta,
    /// A session of that id is here already.
    #[error("session {0} is here already (delete it first, or fork it)")]
    Exists(String),
    /// The files could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Writes session `session_id`'s Trace to `out` as one text (see the module's docs).
pub fn export_session(
    traces_dir: &Path,
    session_id: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let trace_error = |e: TraceError| std::io::Error::other(e.to_string());
    let files = session_trace_files(traces_dir, session_id).map_err(trace_error)?;
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no trace of session {session_id}"),
        ));
    }
    for (i, file) in files.iter().enumerate() {
        if i > 0 {
            out.write_all(ROTATE_MARKER.as_bytes())?;
            out.write_all(b"\n")?;
        }
        let mut lines = TraceLines::open(&file.path).map_err(trace_error)?;
        while let Some((_, line)) = lines.next_line().map_err(trace_error)? {
            // A record too large to read is left out, as every reader of the Trace leaves it.
            let Ok(line) = line else { continue };
            out.write_all(line)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// A session imported: its id and its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    /// The session's id (its `session_meta`'s).
    pub session_id: String,
    /// Its trace files, in order.
    pub files: Vec<std::path::PathBuf>,
}

/// Imports an exported Trace into `traces_dir`: checked by [`check_trace`] (an error refuses
/// it), then written as the session's files under the date of its id. Nothing is written when
/// it is refused.
pub fn import_session(traces_dir: &Path, text: &[u8]) -> Result<Imported, ImportError> {
    std::fs::create_dir_all(traces_dir)?;
    let staged = traces_dir.join(format!(".import-{}.jsonl", std::process::id()));
    std::fs::write(&staged, text)?;
    let problems: Vec<String> = check_trace(&staged)
        .into_iter()
        .filter(|p| p.severity == crate::Severity::Error)
        .map(|p| {
            let at = p.line.map(|l| format!("line {l}: ")).unwrap_or_default();
            format!("{at}{}", p.message)
        })
        .collect();
    let _ = std::fs::remove_file(&staged);
    if !problems.is_empty() {
        return Err(ImportError::Invalid(problems));
    }
    let text = String::from_utf8_lossy(text);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let meta = OmniMessage::from_json(first)
        .ok()
        .and_then(|m| m.session_meta().cloned())
        .ok_or(ImportError::NoMeta)?;
    let id = meta.session_id;
    // The id is the session's name in every path: only the form penguin gives it.
    let date = id
        .strip_prefix("session-")
        .and_then(|rest| rest.get(..10))
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
        .filter(|_| id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .ok_or(ImportError::NoMeta)?
        .to_owned();
    if !session_trace_files(traces_dir, &id)
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .is_empty()
    {
        return Err(ImportError::Exists(id));
    }
    let mut files: Vec<String> = vec![String::new()];
    for line in text.lines() {
        if is_rotate_marker(line.as_bytes()) {
            files.push(String::new());
        } else if !line.trim().is_empty() {
            let file = files.last_mut().expect("one at least");
            file.push_str(line);
            file.push('\n');
        }
    }
    std::fs::create_dir_all(traces_dir.join(&date))?;
    let mut written = Vec::new();
    for (i, content) in files.iter().enumerate() {
        let index = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let path = trace_file_path(traces_dir, &date, &id, index);
        std::fs::write(&path, content)?;
        written.push(path);
    }
    Ok(Imported {
        session_id: id,
        files: written,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, SessionMeta};

    fn meta(id: &str) -> OmniMessage {
        build::session_meta(SessionMeta {
            session_id: id.into(),
            provider: "demo".into(),
            model_id: "demo".into(),
            model_context_window: penguin_omni_protocol::ContextWindow::Other("unknown".into()),
            system_prompt: "s".into(),
            agent_state: "/a".into(),
            workspace: "/w".into(),
            source: None,
            forked_from: None,
        })
    }

    #[test]
    fn an_exported_trace_imports_elsewhere_file_for_file_and_a_broken_one_is_refused() {
        let here = tempfile::tempdir().unwrap();
        let id = "session-2026-01-02-03-04-05-abcdef12";
        let day = here.path().join("2026-01-02");
        std::fs::create_dir_all(&day).unwrap();
        let first = format!(
            "{}\n{}\n",
            meta(id).to_json(),
            build::user_text("hi").to_json()
        );
        let second = format!(
            "{}\n{}\n",
            meta(id).to_json(),
            build::user_text("again").to_json()
        );
        std::fs::write(day.join(format!("{id}_001.jsonl")), &first).unwrap();
        std::fs::write(day.join(format!("{id}_002.jsonl")), &second).unwrap();
        let mut text = Vec::new();
        export_session(here.path(), id, &mut text).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&text),
            format!("{first}{ROTATE_MARKER}\n{second}")
        );

        let there = tempfile::tempdir().unwrap();
        let imported = import_session(there.path(), &text).unwrap();
        assert_eq!(imported.session_id, id);
        let read = |p: &std::path::PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(
            imported.files.iter().map(read).collect::<Vec<_>>(),
            [first, second]
        );
        assert!(matches!(
            import_session(there.path(), &text),
            Err(ImportError::Exists(_))
        ));

        let broken = tempfile::tempdir().unwrap();
        let err = import_session(broken.path(), b"{not json}\n{\"also\": 1}\n").unwrap_err();
        assert!(
            matches!(err, ImportError::Invalid(_) | ImportError::NoMeta),
            "{err}"
        );
        assert!(
            std::fs::read_dir(broken.path())
                .unwrap()
                .all(|e| { !e.unwrap().path().is_dir() }),
            "nothing written"
        );
    }
}
