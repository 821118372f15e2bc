//! A session's workspace as the server's files panel reads it ([`HostedSession::files`]):
//! browsed through penguin-tools' `browse` (the file tools' confinement and door), with the
//! session's protected paths and the server's data root hidden, and what it changed taken from
//! its checkpoints: the workspace now against the one from before its first task, the way a
//! rewind to task 1 would see it (`crate::rewind::plan_files`).
//!
//! [`HostedSession::files`]: penguin_server::HostedSession::files

use std::path::{Path, PathBuf};

use penguin_server::api::{ChangedFile, FileChanges, FileEntry, FileListing};
use penguin_server::{FilesError, OpenFile, WorkspaceFiles};
use penguin_tools::browse::{Browse, BrowseError};
use penguin_tools::checkpoint::Store;

use super::Session;
use crate::rewind::RewindError;

/// One session's workspace, read for a person.
#[derive(Debug)]
pub(crate) struct SessionFiles {
    id: String,
    /// The workspace opened to be browsed, or why it cannot be.
    browse: Result<Browse, String>,
    /// The session's checkpoints and where its trace lives, when it keeps them.
    checkpoints: Option<(Store, PathBuf)>,
}

impl Session {
    /// Its workspace's files, `data_root` (the server's) hidden along with what the session's
    /// sandbox protects.
    pub(crate) fn workspace_files(&self, data_root: &Path) -> SessionFiles {
        let workspace = Path::new(&self.session_meta.workspace);
        let mut protected = vec![data_root.to_path_buf()];
        if let Some(sandbox) = &self.sandbox {
            protected.extend(sandbox.protected().iter().cloned());
        }
        SessionFiles {
            id: self.id.clone(),
            browse: Browse::new(workspace, &protected)
                .map_err(|e| format!("the workspace {}: {e}", workspace.display())),
            checkpoints: self
                .checkpoints
                .as_ref()
                .map(|cp| (cp.store().clone(), self.traces_dir())),
        }
    }
}

impl SessionFiles {
    fn browse(&self) -> Result<&Browse, FilesError> {
        self.browse
            .as_ref()
            .map_err(|e| FilesError::NotFound(e.clone()))
    }
}

fn refused(e: BrowseError) -> FilesError {
    match e {
        BrowseError::Refused(m) => FilesError::Refused(m),
        e @ BrowseError::NotFound(_) => FilesError::NotFound(e.to_string()),
        e @ BrowseError::WrongKind { .. } => FilesError::WrongKind(e.to_string()),
        e => FilesError::Internal(e.to_string()),
    }
}

impl WorkspaceFiles for SessionFiles {
    fn list(&self, path: &str) -> Result<FileListing, FilesError> {
        let listing = self.browse()?.list(path).map_err(refused)?;
        Ok(FileListing {
            path: listing.path,
            entries: listing
                .entries
                .into_iter()
                .map(|e| FileEntry {
                    name: e.name,
                    kind: e.kind.as_str().to_owned(),
                    size: e.size,
                    mtime_ms: e.mtime_ms,
                    target: e.target,
                })
                .collect(),
        })
    }

    fn open(&self, path: &str) -> Result<OpenFile, FilesError> {
        let opened = self.browse()?.open(path).map_err(refused)?;
        Ok(OpenFile {
            path: opened.path,
            file: opened.file,
            size: opened.size,
        })
    }

    fn changes(&self) -> Result<FileChanges, FilesError> {
        let browse = self.browse()?;
        let Some((store, traces)) = &self.checkpoints else {
            return Err(FilesError::NoCheckpoints(format!(
                "session {} keeps no checkpoints of its workspace, so what it changed is not known ([checkpoints] in config.toml)",
                self.id
            )));
        };
        // A session that ran no task yet has no trace to count tasks in either.
        let (taken, _) = store
            .list(&self.id)
            .map_err(|e| FilesError::Internal(format!("the checkpoints: {e}")))?;
        if taken.is_empty() {
            return Err(FilesError::NoCheckpoints(format!(
                "session {} has no checkpoint of its workspace yet (one is taken as each task starts)",
                self.id
            )));
        }
        let plan =
            crate::rewind::plan_files(store, traces, &self.id, 1, browse.root()).map_err(|e| {
                match e {
                    RewindError::NoCheckpoint { .. } => FilesError::NoCheckpoints(e.to_string()),
                    e => FilesError::Internal(e.to_string()),
                }
            })?;
        let mut paths: Vec<String> = plan
            .plan
            .restore
            .iter()
            .chain(&plan.plan.remove)
            .cloned()
            .collect();
        paths.sort();
        paths.dedup();
        let files = browse
            .changes(store, &plan.target, &paths)
            .into_iter()
            .map(|c| ChangedFile {
                others: plan.yours.contains(&c.path),
                path: c.path,
                status: c.kind.as_str().to_owned(),
                added: c.added,
                removed: c.removed,
                diff: c.diff,
                note: c.note,
            })
            .collect();
        Ok(FileChanges {
            since_ms: plan.target.taken_at_ms,
            files,
            unknown: plan
                .plan
                .left_alone
                .iter()
                .map(|s| format!("{} ({})", s.path, s.why))
                .collect(),
        })
    }
}
