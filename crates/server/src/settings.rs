//! Per-session settings, kept in `<agent>/server-sessions/<id>.json` so a restart (or an idle
//! unload) keeps them: what the API can change (approval mode, title) and what the session was
//! created with (sandbox, MCP servers). The file may hold MCP headers and variables (tokens), so
//! only its owner can read it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use penguin_trace_store::TraceLocation;
use serde::{Deserialize, Serialize};

use crate::api::{ApprovalMode, SandboxSettings};

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
}

/// Where the settings of one agent's sessions live.
#[derive(Clone, Debug)]
pub(crate) struct SettingsStore {
    dir: PathBuf,
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
        let path = self.path(id);
        let write = || -> std::io::Result<()> {
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
        };
        if let Err(e) = write() {
            tracing::warn!("[server] cannot save the settings of session {id}: {e}");
        }
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
}
