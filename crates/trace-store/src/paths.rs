//! Where traces live (protocol [§3.1](penguin_omni_protocol::spec#s3.1) *Layout*) and how sessions
//! are named and found.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::TraceError;
use crate::listing::{read_trace_head, LIST_HEAD_BYTES};
use crate::open::is_regular_entry;

/// The data root: `$PENGUIN_HOME`, or `~/.penguin/data` when it is unset or empty.
///
/// Falls back to a relative `.penguin/data` only when no home directory is known, so a
/// misconfigured environment still writes somewhere visible rather than failing.
pub fn data_root() -> PathBuf {
    if let Some(home) = std::env::var_os("PENGUIN_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home);
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".penguin").join("data")
}

/// The traces of one agent: `<root>/<project>/agents/<agent>/traces`.
///
/// A location may also know where one session's newest file is
/// ([`TraceLocation::with_known_trace`]): a caller that keeps an index of the traces (a server)
/// says so, and [`resume_session`](crate::resume_session) opens that file instead of reading
/// every date directory. Two locations are equal when their directories are.
#[derive(Clone, Debug)]
pub struct TraceLocation {
    /// The data root (see [`data_root`]).
    pub root: PathBuf,
    /// Project name.
    pub project: String,
    /// Agent id.
    pub agent: String,
    known: Option<std::sync::Arc<KnownTrace>>,
}

/// A session's newest trace file, as a caller that indexes the traces knows it.
#[derive(Debug)]
struct KnownTrace {
    session_id: String,
    latest: LocatedTrace,
}

impl PartialEq for TraceLocation {
    fn eq(&self, other: &Self) -> bool {
        // What is known of a session is a shortcut to its files, not part of where they live.
        (&self.root, &self.project, &self.agent) == (&other.root, &other.project, &other.agent)
    }
}

impl Eq for TraceLocation {}

impl TraceLocation {
    /// A location under an explicit root.
    pub fn new(
        root: impl Into<PathBuf>,
        project: impl Into<String>,
        agent: impl Into<String>,
    ) -> Self {
        TraceLocation {
            root: root.into(),
            project: project.into(),
            agent: agent.into(),
            known: None,
        }
    }

    /// This location, knowing that `latest` is `session_id`'s newest trace file (one of this
    /// location's): resuming that session opens it directly, a lookup that costs the same
    /// however many sessions are on disk. A file that is gone by then, or a resume of another
    /// session, falls back to reading the date directories.
    ///
    /// ```
    /// use penguin_trace_store::{LocatedTrace, TraceLocation};
    ///
    /// let here = TraceLocation::new("/data", "default", "penguin");
    /// let latest = LocatedTrace {
    ///     path: here.trace_file("2026-01-01", "s-1", 2),
    ///     date_dir: "2026-01-01".into(),
    ///     index: 2,
    /// };
    /// let knowing = here.clone().with_known_trace("s-1", latest.clone());
    /// assert_eq!(knowing.known_trace("s-1"), Some(&latest));
    /// assert_eq!(knowing.known_trace("s-2"), None);
    /// assert_eq!(knowing, here);
    /// ```
    pub fn with_known_trace(mut self, session_id: &str, latest: LocatedTrace) -> Self {
        self.known = Some(std::sync::Arc::new(KnownTrace {
            session_id: session_id.to_owned(),
            latest,
        }));
        self
    }

    /// The newest file of `session_id` this location was told of
    /// ([`TraceLocation::with_known_trace`]), if any.
    pub fn known_trace(&self, session_id: &str) -> Option<&LocatedTrace> {
        self.known
            .as_deref()
            .filter(|k| k.session_id == session_id)
            .map(|k| &k.latest)
    }

    /// A location under [`data_root`].
    pub fn from_env(project: impl Into<String>, agent: impl Into<String>) -> Self {
        TraceLocation::new(data_root(), project, agent)
    }

    /// `<root>/<project>/agents/<agent>/traces`.
    pub fn traces_dir(&self) -> PathBuf {
        self.root
            .join(&self.project)
            .join("agents")
            .join(&self.agent)
            .join("traces")
    }

    /// The file of `session_id` at `index` in the date directory `date_dir` (`yyyy-mm-dd`).
    pub fn trace_file(&self, date_dir: &str, session_id: &str, index: u32) -> PathBuf {
        trace_file_path(&self.traces_dir(), date_dir, session_id, index)
    }
}

/// `<traces_dir>/<date_dir>/<session_id>_<NNN>.jsonl`.
pub fn trace_file_path(traces_dir: &Path, date_dir: &str, session_id: &str, index: u32) -> PathBuf {
    traces_dir
        .join(date_dir)
        .join(trace_file_name(session_id, index))
}

/// `<session_id>_<NNN>.jsonl`, the index zero-padded to three digits.
pub fn trace_file_name(session_id: &str, index: u32) -> String {
    format!("{session_id}_{index:03}.jsonl")
}

/// Today's local date as a date-directory name, `yyyy-mm-dd`.
pub fn local_date_dir() -> String {
    chrono::Local::now().format("%Y-%m-%d").to_string()
}

/// A fresh session id, `session-YYYY-MM-DD-HH-mm-ss-<8hex>`, in local time.
pub fn new_session_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS once per process and perturbed per instance; mixing in
    // the clock, pid and a counter keeps ids distinct across processes started in the same second
    // without pulling in a random-number crate.
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let hex = h.finish() as u32;
    format!(
        "session-{}-{hex:08x}",
        chrono::Local::now().format("%Y-%m-%d-%H-%M-%S")
    )
}

/// A trace file found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocatedTrace {
    /// The file.
    pub path: PathBuf,
    /// Its date directory name (`yyyy-mm-dd`).
    pub date_dir: String,
    /// Its index (`NNN`).
    pub index: u32,
}

/// Splits `<id>_<NNN>.jsonl` into `(id, index)`, the inverse of [`trace_file_name`]. Three or
/// more digits are accepted so an index past 999 (which `{:03}` renders with four digits) is
/// still found.
pub fn parse_trace_file_name(name: &str) -> Option<(&str, u32)> {
    let stem = name.strip_suffix(".jsonl")?;
    let (id, digits) = stem.rsplit_once('_')?;
    if id.is_empty() || digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id, digits.parse().ok()?))
}

/// The directories of `dir`, or its files: regular files only (a FIFO or device with a trace's
/// name is never a trace, and is never opened).
fn sorted_entries(dir: &Path, want_dirs: bool) -> Result<Vec<(String, PathBuf)>, TraceError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(TraceError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| TraceError::io(dir, e))?;
        let wanted = match want_dirs {
            true => entry.file_type().is_ok_and(|t| t.is_dir()),
            false => is_regular_entry(&entry),
        };
        if !wanted {
            continue;
        }
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The highest-index file of `session_id` across every date directory (`findLatestTraceFile`).
pub fn find_latest_trace_file(
    traces_dir: &Path,
    session_id: &str,
) -> Result<Option<LocatedTrace>, TraceError> {
    let mut best: Option<LocatedTrace> = None;
    for (date_dir, dir_path) in sorted_entries(traces_dir, true)? {
        for (name, path) in sorted_entries(&dir_path, false)? {
            let Some((id, index)) = parse_trace_file_name(&name) else {
                continue;
            };
            if id == session_id && best.as_ref().is_none_or(|b| index > b.index) {
                best = Some(LocatedTrace {
                    path,
                    date_dir: date_dir.clone(),
                    index,
                });
            }
        }
    }
    Ok(best)
}

/// Every trace file of `session_id` across the date directories, by index.
pub fn session_trace_files(
    traces_dir: &Path,
    session_id: &str,
) -> Result<Vec<LocatedTrace>, TraceError> {
    let mut out = Vec::new();
    for (date_dir, dir_path) in sorted_entries(traces_dir, true)? {
        for (name, path) in sorted_entries(&dir_path, false)? {
            if let Some((id, index)) = parse_trace_file_name(&name) {
                if id == session_id {
                    out.push(LocatedTrace {
                        path,
                        date_dir: date_dir.clone(),
                        index,
                    });
                }
            }
        }
    }
    out.sort_by_key(|f| f.index);
    Ok(out)
}

/// The session of the newest trace file holding at least one record besides session_meta
/// (`latestSessionId`): date directories newest first, files in descending name order. Only
/// the head of each file is read ([`LIST_HEAD_BYTES`]), up to its first such record.
pub fn latest_session_id(traces_dir: &Path) -> Result<Option<String>, TraceError> {
    for (_, dir_path) in sorted_entries(traces_dir, true)?.into_iter().rev() {
        for (name, path) in sorted_entries(&dir_path, false)?.into_iter().rev() {
            let Some((id, _)) = parse_trace_file_name(&name) else {
                continue;
            };
            let mut more_than_meta = false;
            let read = read_trace_head(&path, LIST_HEAD_BYTES, |_, m| {
                more_than_meta = !m.is_session_meta();
                match more_than_meta {
                    true => std::ops::ControlFlow::Break(()),
                    false => std::ops::ControlFlow::Continue(()),
                }
            });
            // A file that vanished or cannot be read is not the answer; keep looking.
            if let Err(e) = read {
                tracing::warn!("[trace] skipping {}: {e}", path.display());
                continue;
            }
            if more_than_meta {
                return Ok(Some(id.to_owned()));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        assert_eq!(trace_file_name("session-x", 7), "session-x_007.jsonl");
        assert_eq!(
            parse_trace_file_name("session-x_007.jsonl"),
            Some(("session-x", 7))
        );
        assert_eq!(parse_trace_file_name("a_b_1000.jsonl"), Some(("a_b", 1000)));
        assert_eq!(parse_trace_file_name("session-x_07.jsonl"), None);
        assert_eq!(parse_trace_file_name("session-x_007.json"), None);
        assert_eq!(parse_trace_file_name("_007.jsonl"), None);
    }

    #[test]
    fn session_ids_have_the_reference_shape() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        // session-YYYY-MM-DD-HH-mm-ss-xxxxxxxx
        assert_eq!(a.len(), "session-2026-07-18-03-10-22-0123abcd".len(), "{a}");
        let hex = a.rsplit('-').next().unwrap();
        assert!(
            hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{a}"
        );
        let fields: Vec<&str> = a.split('-').collect();
        assert_eq!(fields.len(), 8, "{a}");
        assert_eq!(fields[0], "session");
    }

    #[test]
    fn layout() {
        let loc = TraceLocation::new("/r", "proj", "ag");
        assert_eq!(
            loc.trace_file("2026-07-18", "s", 1),
            PathBuf::from("/r/proj/agents/ag/traces/2026-07-18/s_001.jsonl")
        );
    }
}
