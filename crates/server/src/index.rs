//! The index of sessions on disk: which trace files each session has and what its
//! `session_meta` says, kept as the traces directory changes instead of scanned per request.
//!
//! Two ways in, at two costs:
//!
//! - **The listing** (`SessionIndex::sessions`) is exact on every call: a `stat` per date
//!   directory, and a directory read again only when its modification time moved or it changed
//!   within `SETTLED` of its last read. A read applies what changed: only a file the index
//!   has not seen costs a `stat`, and only a session it has not seen a head read.
//! - **One session's files** (`SessionIndex::files`), asked for per `/messages`, per load and
//!   per delete, never read a directory for a session the index knows: its known files are
//!   checked with a `stat` each, the file after its newest (a rotation) and the file its writer
//!   in this process said it writes (`SessionIndex::host`) with one more. Only an id the
//!   index does not know yet (a session another process wrote, a subagent's) makes it read the
//!   directories that changed, as the listing does. A running server's cost per task therefore
//!   does not grow with the sessions it has served (docs/performance.md, "Sessions served").
//!
//! What the index does not see: a trace appended to by another process (a directory's time
//! moves on new files, not on appends), so an unloaded session's "last active" is when its
//! newest file was created or when this process last unloaded it; and, until the next listing
//! or the next lookup of an unknown id, a file another process adds to a session the index
//! knows other than right after its newest. Every method may do file I/O: call them off the
//! async workers (`spawn_blocking`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use penguin_trace_store::{
    is_regular_entry, parse_trace_file_name, read_session_head, trace_file_path,
};

use crate::history::TraceFile;
use crate::sync::lock;

/// What a listing shows of a session nobody has loaded: its `session_meta` and its title
/// (the first prompt, by the trace store's one rule), and what a search reads of its first
/// prompt (bounded: see `penguin_trace_store::PROMPT_CHARS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) created_at: Option<String>,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) workspace: Option<String>,
    pub(crate) source: Option<String>,
    pub(crate) title: Option<String>,
    pub(crate) prompt: Option<String>,
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
            prompt: head.prompt,
        }
    }
}

/// One session on disk, as the listing shows it.
#[derive(Clone, Debug)]
pub(crate) struct Indexed {
    /// Read once, from the first file.
    pub(crate) head: Option<Arc<Head>>,
    /// When its newest file was last written, as far as the index knows.
    pub(crate) written: Option<SystemTime>,
}

/// A file: its `NNN` and its date directory (shared with the directory's entry).
type File = (u32, Arc<str>);

/// What the index keeps of one session: a few dozen bytes and its head, whatever this process
/// did with it before.
#[derive(Debug, Default)]
struct Known {
    /// Its files on disk, by index.
    files: Vec<File>,
    /// The files this process's writer of the session said it records to, until each is seen
    /// on disk (a session that never ran has none yet). Usually one, or none.
    expected: Vec<File>,
    /// Loaded in this process: its files are this process's to write, so a lookup never reads
    /// a directory for it, even before it has any.
    hosted: bool,
    head: Option<Arc<Head>>,
    written: Option<SystemTime>,
}

impl Known {
    fn has(&self, index: u32, dir: &str) -> bool {
        self.files.iter().any(|(i, d)| *i == index && &**d == dir)
    }

    fn add(&mut self, file: File, modified: Option<SystemTime>) {
        self.expected.retain(|f| *f != file);
        if self.expected.is_empty() {
            // Kept for every session on disk: no spare capacity.
            self.expected = Vec::new();
        }
        if !self.has(file.0, &file.1) {
            let at = self.files.partition_point(|(i, _)| *i < file.0);
            self.files.insert(at, file);
            self.files.shrink_to_fit();
        }
        self.written = match (self.written, modified) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// Whether the index may forget it: nothing on disk and nobody here writing it.
    fn gone(&self) -> bool {
        self.files.is_empty() && !self.hosted
    }

    fn expect(&mut self, file: Option<File>) {
        if let Some(file) = file.filter(|f| !self.has(f.0, &f.1) && !self.expected.contains(f)) {
            self.expected.push(file);
        }
    }
}

#[derive(Debug)]
struct Dir {
    /// Its modification time when it was last read; `None` before its first read.
    mtime: Option<SystemTime>,
    /// It changed within `SETTLED` of its last read: read again next time whatever its time.
    unsettled: bool,
    /// The sessions with a file in it, so a read finds what vanished without a walk of every
    /// session.
    ids: HashSet<Arc<str>>,
}

#[derive(Default)]
struct State {
    dirs: HashMap<Arc<str>, Dir>,
    sessions: HashMap<Arc<str>, Known>,
}

impl State {
    /// The shared name of date directory `name`, made known (to be read) when it is not.
    fn dir(&mut self, name: &str) -> Arc<str> {
        if let Some((k, _)) = self.dirs.get_key_value(name) {
            return k.clone();
        }
        let k: Arc<str> = Arc::from(name);
        self.dirs.insert(
            k.clone(),
            Dir {
                mtime: None,
                unsettled: true,
                ids: HashSet::new(),
            },
        );
        k
    }

    /// The shared id of session `id`, with its entry made when there is none.
    fn session(&mut self, id: &str) -> (Arc<str>, &mut Known) {
        let key = match self.sessions.get_key_value(id) {
            Some((k, _)) => k.clone(),
            None => {
                let k: Arc<str> = Arc::from(id);
                self.sessions.insert(k.clone(), Known::default());
                k
            }
        };
        let known = self.sessions.get_mut(&key).expect("inserted above");
        (key, known)
    }

    fn add(&mut self, id: &str, file: File, modified: Option<SystemTime>) {
        let dir = file.1.clone();
        let (key, known) = self.session(id);
        known.add(file, modified);
        if let Some(d) = self.dirs.get_mut(&dir) {
            d.ids.insert(key);
        }
    }

    /// Drops `id`'s files in `dir` that `keep` refuses, and the session when nothing is left.
    fn drop_files(&mut self, id: &Arc<str>, dir: &str, keep: impl Fn(u32) -> bool) {
        let Some(known) = self.sessions.get_mut(id) else {
            return;
        };
        known.files.retain(|(i, d)| &**d != dir || keep(*i));
        let still_there = known.files.iter().any(|(_, d)| &**d == dir);
        if known.gone() {
            self.sessions.remove(id);
        }
        if !still_there {
            if let Some(d) = self.dirs.get_mut(dir) {
                d.ids.remove(id);
            }
        }
    }
}

/// The index of one traces directory.
pub(crate) struct SessionIndex {
    traces: PathBuf,
    state: Mutex<State>,
    // Reads of directories and checks of files one at a time: a directory read that began
    // before a file was created must not be applied after that file was added.
    refreshing: Mutex<()>,
    // What it costs, for the tests: date directories read, heads read.
    dir_reads: AtomicUsize,
    head_reads: AtomicUsize,
}

// A directory changed this recently may change again within the same timestamp: read it again
// next time rather than trust its time.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

impl SessionIndex {
    pub(crate) fn new(traces: PathBuf) -> SessionIndex {
        SessionIndex {
            traces,
            state: Mutex::new(State::default()),
            refreshing: Mutex::new(()),
            dir_reads: AtomicUsize::new(0),
            head_reads: AtomicUsize::new(0),
        }
    }

    /// Reads the date directories that changed since they were last read, then every session
    /// on disk with its head (read once per session).
    pub(crate) fn sessions(&self) -> std::io::Result<Vec<(String, Indexed)>> {
        {
            let _one = lock(&self.refreshing);
            self.refresh()?;
        }
        // Heads are read without the lock: a slow disk must not hold up other requests.
        let firsts: Vec<(Arc<str>, PathBuf)> = lock(&self.state)
            .sessions
            .iter()
            .filter(|(_, k)| k.head.is_none())
            .filter_map(|(id, k)| Some((id.clone(), self.path(id, k.files.first()?))))
            .collect();
        for (id, path) in firsts {
            let head = Arc::new(self.read_head(&path));
            if let Some(k) = lock(&self.state).sessions.get_mut(&id) {
                k.head.get_or_insert(head);
            }
        }
        let st = lock(&self.state);
        Ok(st
            .sessions
            .iter()
            .filter(|(_, k)| !k.files.is_empty())
            .map(|(id, k)| {
                let row = Indexed {
                    head: k.head.clone(),
                    written: k.written,
                };
                (id.to_string(), row)
            })
            .collect())
    }

    /// The trace files of `id` in index order, empty when it has none. For a session the
    /// index knows: a `stat` per file and one or two more, no directory read.
    pub(crate) fn files(&self, id: &str) -> std::io::Result<Vec<TraceFile>> {
        let _one = lock(&self.refreshing);
        if !self.check(id) {
            self.refresh()?;
        }
        let st = lock(&self.state);
        Ok(st.sessions.get(id).map_or_else(Vec::new, |k| {
            k.files
                .iter()
                .map(|f| TraceFile {
                    path: self.path(id, f),
                    index: f.0,
                })
                .collect()
        }))
    }

    /// `id` as the listing shows it (its head read now if the index has not read it yet),
    /// `None` when it has no files.
    pub(crate) fn indexed(&self, id: &str) -> std::io::Result<Option<Indexed>> {
        if self.files(id)?.is_empty() {
            return Ok(None);
        }
        let head = self.head(id);
        let written = lock(&self.state).sessions.get(id).and_then(|k| k.written);
        Ok(Some(Indexed { head, written }))
    }

    /// What `id`'s first file says, read now if the index has not read it yet.
    pub(crate) fn head(&self, id: &str) -> Option<Arc<Head>> {
        let first = {
            let st = lock(&self.state);
            let k = st.sessions.get(id)?;
            if let Some(h) = &k.head {
                return Some(h.clone());
            }
            self.path(id, k.files.first()?)
        };
        let head = Arc::new(self.read_head(&first));
        let mut st = lock(&self.state);
        let k = st.sessions.get_mut(id)?;
        Some(k.head.get_or_insert(head).clone())
    }

    /// `id` is loaded here and its writer records to `path` (`<date>/<id>_<NNN>.jsonl`, which
    /// may not exist yet): lookups of it read no directory, and find that file as soon as it
    /// is on disk. Say it again when the writer moves on to a new file.
    pub(crate) fn host(&self, id: &str, path: &Path) {
        let mut st = lock(&self.state);
        let file = file_of(&mut st, path);
        let (_, known) = st.session(id);
        known.hosted = true;
        known.expect(file);
    }

    /// `id` is no longer loaded here (unloaded, or taken by another node): from now on it is
    /// a session on disk like any other.
    pub(crate) fn unhost(&self, id: &str) {
        let mut st = lock(&self.state);
        if let Some(k) = st.sessions.get_mut(id) {
            k.hosted = false;
            // Its expected file may still be on its way: the next lookup checks it, and only
            // then is the session forgotten when it has none.
            if k.gone() && k.expected.is_empty() {
                st.sessions.remove(id);
            }
        }
    }

    /// `id`'s writer here now records to `path` (it rotated): the next lookup finds that file
    /// without a directory read. Nothing for a session not hosted here.
    pub(crate) fn writing(&self, id: &str, path: &Path) {
        let mut st = lock(&self.state);
        if !st.sessions.get(id).is_some_and(|k| k.hosted) {
            return;
        }
        let file = file_of(&mut st, path);
        if let Some(k) = st.sessions.get_mut(id) {
            k.expect(file);
        }
    }

    /// `id`'s files at `paths` were written by this process (a fork): known at once, without
    /// a directory read.
    pub(crate) fn wrote(&self, id: &str, paths: &[PathBuf]) {
        let found: Vec<(&Path, Option<SystemTime>)> = paths
            .iter()
            .map(|p| (p.as_path(), modified(p)))
            .filter(|(_, m)| m.is_some())
            .collect();
        let mut st = lock(&self.state);
        for (path, m) in found {
            if let Some(file) = file_of(&mut st, path) {
                st.add(id, file, m);
            }
        }
    }

    /// Forgets `id` (its files were removed).
    pub(crate) fn remove(&self, id: &str) {
        let mut st = lock(&self.state);
        if let Some((key, known)) = st.sessions.remove_entry(id) {
            for (_, dir) in known.files {
                if let Some(d) = st.dirs.get_mut(&dir) {
                    d.ids.remove(&key);
                }
            }
        }
    }

    /// Records that `id` was written at `when` (it was unloaded after running).
    pub(crate) fn written(&self, id: &str, when: SystemTime) {
        if let Some(s) = lock(&self.state).sessions.get_mut(id) {
            s.written = Some(s.written.map_or(when, |w| w.max(when)));
        }
    }

    fn path(&self, id: &str, (index, dir): &File) -> PathBuf {
        trace_file_path(&self.traces, dir, id, *index)
    }

    fn read_head(&self, path: &Path) -> Head {
        self.head_reads.fetch_add(1, Ordering::Relaxed);
        Head::read(path)
    }

    /// Brings `id`'s entry up to date from its own files; `false` when the index cannot
    /// answer for it without reading directories (it does not know it, or a file it knew is
    /// gone). Called with `refreshing` held.
    fn check(&self, id: &str) -> bool {
        let (files, expected, hosted) = {
            let st = lock(&self.state);
            let Some(k) = st.sessions.get(id) else {
                return false;
            };
            (k.files.clone(), k.expected.clone(), k.hosted)
        };
        if files.iter().any(|f| modified(&self.path(id, f)).is_none()) {
            return false;
        }
        let (mut found, mut missed) = (Vec::new(), Vec::new());
        for f in expected {
            match regular(&self.path(id, &f)) {
                Some(m) => found.push((f, Some(m))),
                None => missed.push(f),
            }
        }
        // A rotation writes the next file beside the newest: follow it.
        let mut newest = files
            .iter()
            .chain(found.iter().map(|(f, _)| f))
            .max_by_key(|f| f.0)
            .cloned();
        while let Some((index, dir)) = newest.take() {
            let next = (index + 1, dir);
            if files.contains(&next) {
                newest = Some(next);
            } else if let Some(m) = regular(&self.path(id, &next)) {
                found.push((next.clone(), Some(m)));
                newest = Some(next);
            }
        }
        let mut st = lock(&self.state);
        for (f, m) in found {
            st.add(id, f, m);
        }
        if !hosted {
            // Its writer is gone: a file it never wrote will not come.
            if let Some(k) = st.sessions.get_mut(id) {
                k.expected.retain(|f| !missed.contains(f));
            }
        }
        if hosted || st.sessions.get(id).is_some_and(|k| !k.files.is_empty()) {
            return true;
        }
        // Unloaded before its file was seen: forgotten, and looked for like any other.
        if st.sessions.get(id).is_some_and(Known::gone) {
            st.sessions.remove(id);
        }
        false
    }

    /// Reads the date directories that changed (or that were unsettled) and applies what they
    /// hold now. Called with `refreshing` held.
    fn refresh(&self) -> std::io::Result<()> {
        let dates = match std::fs::read_dir(&self.traces) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.apply_gone(&HashSet::new());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut present = HashSet::new();
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
            let stale = lock(&self.state)
                .dirs
                .get(name.as_str())
                .is_none_or(|d| d.unsettled || d.mtime.is_none() || d.mtime != mtime);
            if stale {
                // The time first, then the read: a change in between is read now and read
                // again next time, never missed.
                let now = SystemTime::now();
                let unsettled =
                    mtime.is_none_or(|t| !now.duration_since(t).is_ok_and(|d| d > SETTLED));
                let found = self.read_date_dir(&date.path())?;
                self.apply_dir(&name, found, mtime, unsettled);
            }
            present.insert(name);
        }
        self.apply_gone(&present);
        Ok(())
    }

    // The trace files in one date directory: regular files named `<id>_<NNN>.jsonl`.
    fn read_date_dir(&self, dir: &Path) -> std::io::Result<Vec<DirFile>> {
        self.dir_reads.fetch_add(1, Ordering::Relaxed);
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
                entry: f,
            });
        }
        Ok(out)
    }

    // Makes the index hold exactly `found` for `dir`: what vanished goes, what is new is
    // added with its time (a `stat` for new files only); sessions it knew keep their heads.
    fn apply_dir(
        &self,
        dir: &str,
        found: Vec<DirFile>,
        mtime: Option<SystemTime>,
        unsettled: bool,
    ) {
        let new: Vec<&DirFile> = {
            let mut st = lock(&self.state);
            let key = st.dir(dir);
            let seen: HashSet<(&str, u32)> =
                found.iter().map(|f| (f.id.as_str(), f.index)).collect();
            let before: Vec<Arc<str>> = st.dirs[&key].ids.iter().cloned().collect();
            for id in before {
                st.drop_files(&id, dir, |i| seen.contains(&(&*id, i)));
            }
            found
                .iter()
                .filter(|f| {
                    !st.sessions
                        .get(f.id.as_str())
                        .is_some_and(|k| k.has(f.index, dir))
                })
                .collect()
        };
        let times: Vec<Option<SystemTime>> = new
            .iter()
            .map(|f| f.entry.metadata().and_then(|m| m.modified()).ok())
            .collect();
        let mut st = lock(&self.state);
        let key = st.dir(dir);
        for (f, m) in new.into_iter().zip(times) {
            st.add(&f.id, (f.index, key.clone()), m);
        }
        if let Some(d) = st.dirs.get_mut(&key) {
            d.mtime = mtime;
            d.unsettled = unsettled;
        }
    }

    // A date directory that is gone takes its files with it.
    fn apply_gone(&self, present: &HashSet<String>) {
        let mut st = lock(&self.state);
        let gone: Vec<Arc<str>> = st
            .dirs
            .keys()
            .filter(|d| !present.contains(&***d))
            .cloned()
            .collect();
        for dir in gone {
            // A directory this process named (a writer's, a fork's) before it exists stays.
            if st.dirs[&dir].mtime.is_none() {
                continue;
            }
            let ids: Vec<Arc<str>> = st.dirs[&dir].ids.iter().cloned().collect();
            for id in ids {
                st.drop_files(&id, &dir, |_| false);
            }
            st.dirs.remove(&dir);
        }
    }
}

struct DirFile {
    id: String,
    index: u32,
    entry: std::fs::DirEntry,
}

/// `<traces>/<date>/<id>_<NNN>.jsonl` as a file of the index.
fn file_of(st: &mut State, path: &Path) -> Option<File> {
    let (_, index) = parse_trace_file_name(path.file_name()?.to_str()?)?;
    let date = path.parent()?.file_name()?.to_str()?;
    Some((index, st.dir(date)))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).ok()?.modified().ok()
}

// A regular file's modification time (a FIFO or device with a trace's name is never a trace).
fn regular(path: &Path) -> Option<SystemTime> {
    let m = std::fs::metadata(path).ok()?;
    m.is_file().then(|| m.modified().ok()).flatten()
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
            forked_from: None,
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

    fn reads(index: &SessionIndex) -> (usize, usize) {
        (
            index.dir_reads.load(Ordering::Relaxed),
            index.head_reads.load(Ordering::Relaxed),
        )
    }

    /// Makes `dir` look last changed `ago` (settled), as it would be after a while.
    fn age(dir: &Path, ago: Duration) {
        let when = SystemTime::now() - ago;
        std::fs::File::open(dir)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    /// The listing reads a directory again only when it changed, and then reads the heads of
    /// the new sessions alone; a lookup of a known session reads no directory at all.
    #[test]
    fn lookups_read_no_directory_and_listings_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("2026-01-01");
        for i in 0..200 {
            write(
                dir.path(),
                "2026-01-01",
                &format!("s-{i}_001.jsonl"),
                &meta(),
            );
        }
        age(&day, Duration::from_secs(3600));
        let index = SessionIndex::new(dir.path().to_owned());
        assert_eq!(index.sessions().unwrap().len(), 200);
        assert_eq!(reads(&index), (1, 200));
        for _ in 0..3 {
            for i in 0..200 {
                assert_eq!(index.files(&format!("s-{i}")).unwrap().len(), 1);
            }
            assert_eq!(index.sessions().unwrap().len(), 200);
        }
        assert_eq!(reads(&index), (1, 200), "nothing read again");

        // Another process adds a session: one read of that directory, one head.
        write(dir.path(), "2026-01-01", "s-new_001.jsonl", &meta());
        age(&day, Duration::from_secs(1800));
        assert_eq!(index.sessions().unwrap().len(), 201);
        assert_eq!(reads(&index), (2, 201));
        // And removes one: read again, no head read.
        std::fs::remove_file(day.join("s-7_001.jsonl")).unwrap();
        age(&day, Duration::from_secs(900));
        assert_eq!(index.sessions().unwrap().len(), 200);
        assert_eq!(reads(&index), (3, 201));
        assert!(index.files("s-7").unwrap().is_empty());
    }

    /// A session this process hosts is found as its writer creates its files, rotations
    /// included, however many sessions there are: no directory is read for it.
    #[test]
    fn hosted_sessions_are_found_without_a_directory_read() {
        let dir = tempfile::tempdir().unwrap();
        let day = "2026-01-01";
        let index = SessionIndex::new(dir.path().to_owned());
        let path = |id: &str, n: u32| trace_file_path(dir.path(), day, id, n);
        for i in 0..1_000 {
            let id = format!("s-{i}");
            index.host(&id, &path(&id, 1));
            assert!(
                index.files(&id).unwrap().is_empty(),
                "never ran: no file yet"
            );
            write(dir.path(), day, &format!("{id}_001.jsonl"), &meta());
            let files = index.files(&id).unwrap();
            assert_eq!(
                files,
                [TraceFile {
                    path: path(&id, 1),
                    index: 1
                }]
            );
        }
        assert_eq!(reads(&index), (0, 0));

        // A rotation, then a writer that says where it moved.
        write(dir.path(), day, "s-3_002.jsonl", "{}\n");
        let indexes =
            |id: &str| -> Vec<u32> { index.files(id).unwrap().iter().map(|f| f.index).collect() };
        assert_eq!(indexes("s-3"), [1, 2]);
        index.writing("s-3", &path("s-3", 5));
        write(dir.path(), day, "s-3_005.jsonl", "{}\n");
        assert_eq!(indexes("s-3"), [1, 2, 5]);
        // A writer that moved on before its first file was ever looked up: both are found.
        index.host("c-1", &path("c-1", 1));
        write(dir.path(), day, "c-1_001.jsonl", &meta());
        index.writing("c-1", &path("c-1", 2));
        write(dir.path(), day, "c-1_002.jsonl", "{}\n");
        assert_eq!(indexes("c-1"), [1, 2]);
        // Unloaded, it stays known from its files.
        index.unhost("s-3");
        assert_eq!(indexes("s-3"), [1, 2, 5]);
        // A fork's files, written by this process.
        let forked = write(dir.path(), day, "f-1_001.jsonl", &meta());
        index.wrote("f-1", &[forked]);
        assert_eq!(indexes("f-1"), [1]);
        assert_eq!(reads(&index), (0, 0));

        // Only an id the index does not know reads the directories.
        write(dir.path(), day, "cli-1_001.jsonl", &meta());
        assert_eq!(indexes("cli-1"), [1]);
        assert_eq!(reads(&index).0, 1);
        let head = index.head("cli-1").unwrap();
        assert_eq!(head.title.as_deref(), Some("Count the penguins"));
        assert_eq!(index.sessions().unwrap().len(), 1_003);
    }
}
