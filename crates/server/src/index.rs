//! The index of sessions on disk: which trace files each session has and what its
//! `session_meta` says, kept as the traces directory changes instead of scanned per request.
//!
//! A date directory is read again only when its modification time moved (an entry was
//! created, renamed or removed in it), so listing 10,000 sessions costs a `stat` per date
//! directory, not a read of every directory and a head of every file. Every method does file
//! I/O: call them off the async workers (`spawn_blocking`).
//!
//! What the index does not see: a trace appended to by another process (a directory's time
//! moves on new files, not on appends), so an unloaded session's "last active" is when its
//! newest file was created or when this process last unloaded it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use penguin_trace_store::{is_regular_entry, parse_trace_file_name, read_session_head};

use crate::history::TraceFile;
use crate::sync::lock;

/// What a listing shows of a session nobody has loaded: its `session_meta` and its title
/// (the first prompt, by the trace store's one rule).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) created_at: Option<String>,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) workspace: Option<String>,
    pub(crate) source: Option<String>,
    pub(crate) title: Option<String>,
}

impl Head {
    fn read(path: &Path) -> Head {
        let Ok(head) = read_session_head(path) else {
            return Head::default();
        };
        let meta = head.meta.as_ref();
        Head {
            created_at: head.created_at,
            provider: meta.map(|m| m.provider.clone()),
            model: meta.map(|m| m.model_id.clone()),
            workspace: meta.map(|m| m.workspace.clone()),
            source: meta.and_then(|m| m.source.clone()),
            title: head.title,
        }
    }
}

/// One session on disk.
#[derive(Clone, Debug)]
pub(crate) struct Indexed {
    /// Its files by index, each with the date directory it is in.
    files: BTreeMap<u32, (String, PathBuf)>,
    /// Read once, from the first file.
    pub(crate) head: Option<Head>,
    /// When its newest file was last written, as far as the index knows.
    pub(crate) written: Option<SystemTime>,
}

impl Indexed {
    /// Its trace files in index order.
    pub(crate) fn files(&self) -> Vec<TraceFile> {
        self.files
            .iter()
            .map(|(index, (_, path))| TraceFile {
                path: path.clone(),
                index: *index,
            })
            .collect()
    }
}

#[derive(Default)]
struct State {
    // Each date directory's modification time when it was last read; `None` to read it again
    // next time (it changed within the clock's resolution of that read).
    dirs: HashMap<String, Option<SystemTime>>,
    sessions: HashMap<String, Indexed>,
}

/// The index of one traces directory.
pub(crate) struct SessionIndex {
    traces: PathBuf,
    state: Mutex<State>,
}

// A directory changed this recently may change again within the same timestamp: read it again
// next time rather than trust its time.
const SETTLED: Duration = Duration::from_secs(2);

impl SessionIndex {
    pub(crate) fn new(traces: PathBuf) -> SessionIndex {
        SessionIndex {
            traces,
            state: Mutex::new(State::default()),
        }
    }

    /// Reads the date directories that changed since they were last read, then every session
    /// on disk, newest files first.
    pub(crate) fn sessions(&self) -> std::io::Result<Vec<(String, Indexed)>> {
        self.refresh()?;
        let st = lock(&self.state);
        Ok(st
            .sessions
            .iter()
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect())
    }

    /// The trace files of `id` in index order, empty when it has none. Reads only the date
    /// directories that changed.
    pub(crate) fn files(&self, id: &str) -> std::io::Result<Vec<TraceFile>> {
        self.refresh()?;
        Ok(lock(&self.state)
            .sessions
            .get(id)
            .map(Indexed::files)
            .unwrap_or_default())
    }

    /// What the index read of `id`'s first file, if it has read it.
    pub(crate) fn head(&self, id: &str) -> Option<Head> {
        lock(&self.state).sessions.get(id)?.head.clone()
    }

    /// Forgets `id` (its files were removed).
    pub(crate) fn remove(&self, id: &str) {
        lock(&self.state).sessions.remove(id);
    }

    /// Records that `id` was written at `when` (it was unloaded after running).
    pub(crate) fn written(&self, id: &str, when: SystemTime) {
        if let Some(s) = lock(&self.state).sessions.get_mut(id) {
            s.written = Some(s.written.map_or(when, |w| w.max(when)));
        }
    }

    fn refresh(&self) -> std::io::Result<()> {
        let dates = match std::fs::read_dir(&self.traces) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let now = SystemTime::now();
        let mut present = Vec::new();
        for date in dates {
            let date = date?;
            let Ok(name) = date.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = std::fs::metadata(date.path()) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let mtime = meta.modified().ok();
            let known = lock(&self.state).dirs.get(&name).copied();
            if known.is_none_or(|t| t.is_none() || t != mtime) {
                let settled = mtime.filter(|t| now.duration_since(*t).is_ok_and(|d| d > SETTLED));
                let files = read_date_dir(&date.path())?;
                self.replace_dir(&name, files, settled);
            }
            present.push(name);
        }
        // A date directory that is gone takes its files with it.
        let gone: Vec<String> = {
            let st = lock(&self.state);
            st.dirs
                .keys()
                .filter(|d| !present.contains(d))
                .cloned()
                .collect()
        };
        for d in gone {
            self.replace_dir(&d, Vec::new(), None);
            lock(&self.state).dirs.remove(&d);
        }
        Ok(())
    }

    // Makes the index hold exactly `files` for `dir`, reading the head of a session that is new.
    fn replace_dir(&self, dir: &str, files: Vec<DirFile>, settled: Option<SystemTime>) {
        let mut st = lock(&self.state);
        st.sessions.retain(|_, s| {
            s.files.retain(|_, (d, _)| d != dir);
            !s.files.is_empty()
        });
        let mut fresh = Vec::new();
        for f in files {
            let s = st.sessions.entry(f.id.clone()).or_insert_with(|| Indexed {
                files: BTreeMap::new(),
                head: None,
                written: None,
            });
            s.files.insert(f.index, (dir.to_owned(), f.path));
            s.written = match (s.written, f.modified) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if s.head.is_none() {
                fresh.push(f.id);
            }
        }
        st.dirs.insert(dir.to_owned(), settled);
        // Heads are read without the lock: a slow disk must not hold up other requests.
        let firsts: Vec<(String, PathBuf)> = fresh
            .into_iter()
            .filter_map(|id| {
                let first = st.sessions.get(&id)?.files.values().next()?.1.clone();
                Some((id, first))
            })
            .collect();
        drop(st);
        for (id, path) in firsts {
            let head = Head::read(&path);
            if let Some(s) = lock(&self.state).sessions.get_mut(&id) {
                s.head.get_or_insert(head);
            }
        }
    }
}

struct DirFile {
    id: String,
    index: u32,
    path: PathBuf,
    modified: Option<SystemTime>,
}

// The trace files in one date directory: regular files named `<id>_<NNN>.jsonl`.
fn read_date_dir(dir: &Path) -> std::io::Result<Vec<DirFile>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for f in rd {
        let f = f?;
        let name = f.file_name();
        let Some((id, index)) = name.to_str().and_then(parse_trace_file_name) else {
            continue;
        };
        if !is_regular_entry(&f) {
            continue;
        }
        out.push(DirFile {
            id: id.to_owned(),
            index,
            modified: f.metadata().and_then(|m| m.modified()).ok(),
            path: f.path(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, date: &str, name: &str, body: &str) -> PathBuf {
        let d = dir.join(date);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    fn meta() -> String {
        use penguin_omni_protocol::{build, ContextWindow, SessionMeta};
        let mut meta = build::session_meta(SessionMeta {
            session_id: "s".into(),
            provider: "p".into(),
            model_id: "m".into(),
            model_context_window: ContextWindow::Other("unknown".into()),
            system_prompt: String::new(),
            agent_state: String::new(),
            workspace: "/w".into(),
            source: Some("cli".into()),
        });
        meta.timestamp = penguin_omni_protocol::Timestamp::from_unix_millis(1_767_225_600_000);
        let prompt = build::user_text("Count   the\n penguins");
        format!(
            "{}\n{}\n",
            serde_json::to_string(&meta).unwrap(),
            serde_json::to_string(&prompt).unwrap()
        )
    }

    #[test]
    fn sessions_files_across_dates_and_their_heads() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "2026-01-01", "s-1_000.jsonl", &meta());
        write(dir.path(), "2026-01-02", "s-1_001.jsonl", "{}\n");
        write(dir.path(), "2026-01-02", "s-2_000.jsonl", "{}\n");
        write(dir.path(), "2026-01-02", "notes.txt", "");
        write(dir.path(), "2026-01-02", "s-3_07.jsonl", "");
        let index = SessionIndex::new(dir.path().to_owned());
        let mut all = index.sessions().unwrap();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let ids: Vec<&str> = all.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["s-1", "s-2"]);
        let head = all[0].1.head.clone().unwrap();
        assert_eq!(head.model.as_deref(), Some("m"));
        assert_eq!(head.created_at.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert_eq!(head.title.as_deref(), Some("Count the penguins"));
        let files = index.files("s-1").unwrap();
        assert_eq!(
            files.iter().map(|f| f.index).collect::<Vec<_>>(),
            [0, 1],
            "{files:?}"
        );
        assert!(index.files("nobody").unwrap().is_empty());
    }

    #[test]
    fn new_and_removed_files_are_seen_without_a_full_rescan() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "2026-01-01", "s-1_000.jsonl", &meta());
        let index = SessionIndex::new(dir.path().to_owned());
        assert_eq!(index.sessions().unwrap().len(), 1);
        // Changed within the clock's resolution: read again on the next refresh.
        let p = write(dir.path(), "2026-01-01", "s-2_000.jsonl", &meta());
        write(dir.path(), "2026-01-03", "s-1_001.jsonl", "{}\n");
        assert_eq!(index.sessions().unwrap().len(), 2);
        assert_eq!(index.files("s-1").unwrap().len(), 2);
        std::fs::remove_file(p).unwrap();
        assert_eq!(index.sessions().unwrap().len(), 1);
        std::fs::remove_dir_all(dir.path().join("2026-01-03")).unwrap();
        assert_eq!(index.files("s-1").unwrap().len(), 1);
    }

    #[test]
    fn a_fifo_named_as_a_trace_is_not_a_session() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("2026-01-01");
        std::fs::create_dir_all(&d).unwrap();
        nix::unistd::mkfifo(&d.join("s-1_000.jsonl"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let index = SessionIndex::new(dir.path().to_owned());
        assert!(index.sessions().unwrap().is_empty());
    }
}
