//! A workspace's own hooks (`.penguin/hooks.toml`) run only once the user trusted that exact
//! content: a cloned repository must not run code when penguin opens it. Trust is kept per
//! workspace and SHA-256 of the file in `<data root>/trusted_hooks`, out of every command's
//! reach; any change to the file needs trusting again (`penguin hooks trust`).

use std::io;
use std::path::{Path, PathBuf};

use penguin_tools::confined::Dir;
use sha2::{Digest, Sha256};

use super::config::{Hook, HookConfigError, HookOrigin, HooksConfig, WorkspaceFile};

/// Where a workspace keeps its hooks.
pub const WORKSPACE_FILE: &str = ".penguin/hooks.toml";

/// The largest hooks file read.
const MAX_FILE: u64 = 256 * 1024;

/// A workspace's hooks file as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceHooks {
    /// The workspace.
    pub workspace: PathBuf,
    /// The file's text.
    pub text: String,
    /// Its SHA-256, hex.
    pub hash: String,
}

impl WorkspaceHooks {
    /// Reads `workspace`'s `.penguin/hooks.toml` through the door (no link followed, bounded):
    /// `None` when there is none.
    pub fn read(workspace: &Path) -> Result<Option<WorkspaceHooks>, HookConfigError> {
        let failed = |e: io::Error| HookConfigError::Workspace {
            path: workspace.join(WORKSPACE_FILE).display().to_string(),
            error: e.to_string(),
        };
        let bytes = match Dir::open(workspace).and_then(|d| d.read(WORKSPACE_FILE, MAX_FILE)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(failed(e)),
        };
        let text = String::from_utf8(bytes)
            .map_err(|_| failed(io::Error::new(io::ErrorKind::InvalidData, "not UTF-8")))?;
        Ok(Some(WorkspaceHooks {
            workspace: workspace.to_path_buf(),
            hash: sha256_hex(text.as_bytes()),
            text,
        }))
    }

    /// The hooks it configures.
    pub fn hooks(&self) -> Result<Vec<Hook>, HookConfigError> {
        let file: WorkspaceFile =
            toml::from_str(&self.text).map_err(|e| HookConfigError::Workspace {
                path: self.workspace.join(WORKSPACE_FILE).display().to_string(),
                error: e.to_string(),
            })?;
        Hook::all_of(&file.hooks, HookOrigin::Workspace)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The workspace hooks the user trusted: `<data root>/trusted_hooks`, one `HASH\tWORKSPACE`
/// a line.
#[derive(Clone, Debug)]
pub struct TrustStore {
    file: PathBuf,
}

impl TrustStore {
    /// The store under `data_root`.
    pub fn new(data_root: &Path) -> TrustStore {
        TrustStore {
            file: data_root.join("trusted_hooks"),
        }
    }

    /// Whether `found` was trusted as it is now.
    pub fn is_trusted(&self, found: &WorkspaceHooks) -> bool {
        let line = entry(found);
        self.lines().contains(&line)
    }

    /// Trusts `found` as it is now.
    pub fn trust(&self, found: &WorkspaceHooks) -> io::Result<()> {
        if self.is_trusted(found) {
            return Ok(());
        }
        let mut lines = self.lines();
        lines.push(entry(found));
        // The data root is penguin's own, hidden from commands (docs/security.md).
        #[allow(clippy::disallowed_methods)]
        {
            std::fs::create_dir_all(self.file.parent().unwrap_or(Path::new(".")))?;
            std::fs::write(&self.file, lines.join("\n") + "\n")
        }
    }

    fn lines(&self) -> Vec<String> {
        // As above: the data root's own file.
        #[allow(clippy::disallowed_methods)]
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }
}

fn entry(found: &WorkspaceHooks) -> String {
    format!("{}\t{}", found.hash, found.workspace.display())
}

/// A session's hooks: the user's, then the workspace's when trusted.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// What runs.
    pub hooks: Vec<Hook>,
    /// A workspace file that was not run because its content is not trusted.
    pub untrusted: Option<WorkspaceHooks>,
}

impl Loaded {
    /// What to tell the user about an untrusted workspace file, if there is one.
    pub fn untrusted_notice(&self) -> Option<String> {
        self.untrusted.as_ref().map(|w| {
            format!(
                "{}: not run: its hooks are not trusted (sha256 {}). Read it, then run `penguin hooks trust` in {} to run them",
                w.workspace.join(WORKSPACE_FILE).display(),
                &w.hash[..12],
                w.workspace.display()
            )
        })
    }
}

/// The user's `config` hooks, and `workspace`'s own when `store` trusts their content.
pub fn load(
    config: &HooksConfig,
    workspace: &Path,
    store: &TrustStore,
) -> Result<Loaded, HookConfigError> {
    let mut hooks = Hook::all_of(config, HookOrigin::User)?;
    let mut untrusted = None;
    if let Some(found) = WorkspaceHooks::read(workspace)? {
        match store.is_trusted(&found) {
            true => hooks.extend(found.hooks()?),
            false => untrusted = Some(found),
        }
    }
    // Event order, the user's before the workspace's within one event.
    hooks.sort_by_key(|h| h.event);
    Ok(Loaded { hooks, untrusted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_file_runs_only_once_its_exact_content_is_trusted() {
        let root = tempfile::tempdir().unwrap();
        let (data, ws) = (root.path().join("data"), root.path().join("ws"));
        std::fs::create_dir_all(ws.join(".penguin")).unwrap();
        let file = ws.join(WORKSPACE_FILE);
        std::fs::write(&file, "[[hooks.stop]]\ncommand = \"echo hi\"\n").unwrap();
        let store = TrustStore::new(&data);
        let none = HooksConfig::default();
        let loaded = load(&none, &ws, &store).unwrap();
        assert!(loaded.hooks.is_empty());
        let notice = loaded.untrusted_notice().unwrap();
        assert!(notice.contains("penguin hooks trust"), "{notice}");
        store.trust(loaded.untrusted.as_ref().unwrap()).unwrap();
        let loaded = load(&none, &ws, &store).unwrap();
        assert_eq!(loaded.hooks.len(), 1);
        assert_eq!(loaded.hooks[0].origin, HookOrigin::Workspace);
        // A change is a new content: not trusted.
        std::fs::write(&file, "[[hooks.stop]]\ncommand = \"rm -rf ~\"\n").unwrap();
        let loaded = load(&none, &ws, &store).unwrap();
        assert!(loaded.hooks.is_empty() && loaded.untrusted.is_some());
    }

    #[test]
    fn a_link_at_the_hooks_file_is_refused_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join(".penguin")).unwrap();
        std::fs::write(root.path().join("elsewhere.toml"), "").unwrap();
        std::os::unix::fs::symlink(root.path().join("elsewhere.toml"), ws.join(WORKSPACE_FILE))
            .unwrap();
        assert!(WorkspaceHooks::read(&ws).is_err());
    }
}
