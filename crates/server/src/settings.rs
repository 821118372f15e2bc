//! Per-session settings, kept in `<agent>/server-sessions/<id>.json` so a restart (or an idle
//! unload) keeps them: what the API can change (approval mode, title) and what the session was
//! created with (sandbox, MCP servers). The file may hold MCP headers and variables (tokens), so
//! only its owner can read it. The marks a listing filters on (archived, pinned, the title) are
//! kept here too, and read for every session at once through a cache of the directory
//! ([`SettingsStore::marks`]).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use penguin_trace_store::TraceLocation;
use serde::{Deserialize, Serialize};

use crate::api::{ApprovalMode, SandboxSettings};
use crate::index::SETTLED;
use crate::sync::lock;

/// What is kept of a session across restarts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Settings {
    /// `None`: the session was never given one, so it has the server's default
    /// ([`crate::ServeOptions::approval_mode`]) whatever that is when it loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approval_mode: Option<ApprovalMode>,
    #[serde(default)]
    pub(crate) title: Option<String>,
    /// The configured name of the model it was created with (`GET /api/models`' `name`), when
    /// the factory names its models: two configured models may share a provider and an id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model_name: Option<String>,
    /// The sandbox asked for at creation: a reloaded session keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sandbox: Option<SandboxSettings>,
    /// The `mcpServers` asked for at creation: a reloaded session connects them again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) mcp_servers: Vec<serde_json::Value>,
    /// Hidden from the default listing (`PATCH {"archived": true}`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) archived: bool,
    /// Listed before the others (`PATCH {"pinned": true}`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) pinned: bool,
}

impl Settings {
    fn marks(&self) -> Marks {
        Marks {
            title: self.title.clone(),
            archived: self.archived,
            pinned: self.pinned,
        }
    }
}

/// A session's marks (`crate::marks` says what a listing does with them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Marks {
    /// The title given with `PATCH` (the first prompt's stands in when there is none).
    pub title: Option<String>,
    /// Left out of the default listing.
    pub archived: bool,
    /// Listed before the others.
    pub pinned: bool,
}

/// Where the settings of one agent's sessions live.
#[derive(Clone, Debug)]
pub(crate) struct SettingsStore {
    dir: PathBuf,
    marks: Arc<Mutex<MarkCache>>,
}

/// Every session's marks as the directory held them when last read: read again only when the
/// directory changed (every save renames a file into it), and then only the files that did.
#[derive(Debug, Default)]
struct MarkCache {
    /// The directory's modification time when it was last read; `None` before its first read.
    mtime: Option<SystemTime>,
    /// It changed within `SETTLED` of its last read: read again next time whatever its time.
    unsettled: bool,
    /// Each file's marks, with the file's modification time when it was read.
    files: HashMap<String, (Option<SystemTime>, Marks)>,
}

impl SettingsStore {
    pub(crate) fn new(location: &TraceLocation) -> SettingsStore {
        SettingsStore {
            dir: location
                .root
                .join(&location.project)
                .join("agents")
                .join(&location.agent)
                .join("server-sessions"),
            marks: Arc::default(),
        }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// The saved settings, or the defaults when there are none. An unreadable file is logged
    /// and the defaults used: a session must not become unloadable over its title.
    pub(crate) fn load(&self, id: &str) -> Settings {
        let path = self.path(id);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Settings::default(),
            Err(e) => {
                tracing::warn!("[server] cannot read {}: {e}", path.display());
                return Settings::default();
            }
        };
        serde_json::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!("[server] ignoring {}: {e}", path.display());
            Settings::default()
        })
    }

    /// Writes the settings atomically (best effort: a failure is logged, the session goes on).
    pub(crate) fn save(&self, id: &str, settings: &Settings) {
        if let Err(e) = self.write(id, settings) {
            tracing::warn!("[server] cannot save the settings of session {id}: {e}");
        }
    }

    fn write(&self, id: &str, settings: &Settings) -> std::io::Result<()> {
        let path = self.path(id);
        std::fs::create_dir_all(&self.dir)?;
        let tmp = path.with_extension("json.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&serde_json::to_vec(settings)?)?;
        std::fs::rename(&tmp, &path)
    }

    /// Changes what `change` changes of `id`'s saved settings and keeps the rest as the file
    /// has it: another process (the CLI's `penguin sessions pin`) may have written the rest.
    pub(crate) fn change(
        &self,
        id: &str,
        change: impl FnOnce(&mut Settings),
    ) -> std::io::Result<()> {
        let mut settings = self.load(id);
        change(&mut settings);
        self.write(id, &settings)
    }

    /// The marks of every session that has settings. A `stat` of the directory when nothing
    /// changed; a directory read and a read of each changed file when something did.
    pub(crate) fn marks(&self) -> HashMap<String, Marks> {
        let mut cache = lock(&self.marks);
        let mtime = match std::fs::metadata(&self.dir) {
            Ok(m) => m.modified().ok(),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("[server] cannot read {}: {e}", self.dir.display());
                }
                *cache = MarkCache::default();
                return HashMap::new();
            }
        };
        if cache.unsettled || cache.mtime.is_none() || cache.mtime != mtime {
            self.read_marks(&mut cache, mtime);
        }
        cache
            .files
            .iter()
            .map(|(id, (_, m))| (id.clone(), m.clone()))
            .collect()
    }

    fn read_marks(&self, cache: &mut MarkCache, mtime: Option<SystemTime>) {
        // The time first, then the read: a change in between is read now and again next time.
        let recent = |t: Option<SystemTime>| {
            t.is_none_or(|t| {
                !SystemTime::now()
                    .duration_since(t)
                    .is_ok_and(|d| d > SETTLED)
            })
        };
        cache.unsettled = recent(mtime);
        cache.mtime = mtime;
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) => {
                tracing::warn!("[server] cannot read {}: {e}", self.dir.display());
                cache.files.clear();
                return;
            }
        };
        let mut seen = HashMap::with_capacity(cache.files.len());
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            let modified = entry.metadata().and_then(|m| m.modified()).ok();
            let kept = cache
                .files
                .remove(id)
                .filter(|(t, _)| *t == modified && !recent(modified));
            let row = kept.unwrap_or_else(|| (modified, self.load(id).marks()));
            seen.insert(id.to_owned(), row);
        }
        cache.files = seen;
    }

    pub(crate) fn remove(&self, id: &str) {
        let _ = std::fs::remove_file(self.path(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_tolerate_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let store = SettingsStore::new(&TraceLocation::new(dir.path(), "p", "a"));
        assert_eq!(store.load("s1"), Settings::default());
        let s = Settings {
            approval_mode: Some(ApprovalMode::AlwaysAsk),
            title: Some("t".into()),
            model_name: Some("fast".into()),
            sandbox: Some(SandboxSettings {
                mode: Some("read-only".into()),
                network: Some(false),
            }),
            mcp_servers: vec![
                serde_json::json!({"name": "docs", "url": "http://127.0.0.1:1/mcp",
                "headers": {"Authorization": "Bearer secret"}}),
            ],
            archived: true,
            pinned: true,
        };
        store.save("s1", &s);
        assert_eq!(store.load("s1"), s);
        // It may hold MCP credentials.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(store.path("s1"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(store.path("s2"), "{not json").unwrap();
        assert_eq!(store.load("s2"), Settings::default());
        store.remove("s1");
        assert_eq!(store.load("s1"), Settings::default());
    }

    #[test]
    fn marks_follow_the_files_another_process_writes() {
        let dir = tempfile::tempdir().unwrap();
        let location = TraceLocation::new(dir.path(), "p", "a");
        let store = SettingsStore::new(&location);
        assert!(store.marks().is_empty(), "no directory yet");
        store.change("s1", |s| s.pinned = true).unwrap();
        store
            .change("s2", |s| s.title = Some("kept".into()))
            .unwrap();
        let marks = store.marks();
        assert!(marks["s1"].pinned && !marks["s1"].archived);
        assert_eq!(marks["s2"].title.as_deref(), Some("kept"));
        // Another store of the same agent (the CLI) archives s2: its title stays.
        SettingsStore::new(&location)
            .change("s2", |s| s.archived = true)
            .unwrap();
        let marks = store.marks();
        assert!(marks["s2"].archived);
        assert_eq!(marks["s2"].title.as_deref(), Some("kept"));
        store.remove("s1");
        assert!(!store.marks().contains_key("s1"));
    }
}
