//! Sessions with a workspace to browse: [`FilesFactory`] wraps a [`FakeFactory`] and gives
//! each of its sessions `HostedSession::files` over penguin-tools' `browse` (the file tools'
//! confinement and door, as the facade's sessions have it) and a checkpoint of the workspace
//! taken as the session was made, which "what it changed" is measured against. The facade's
//! own implementation, over real edits, is tested in penguin-agent (`tests/hosting/files.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use penguin_engine::{CancellationToken, Engine, EngineBusy, Environment, RunOptions};
use penguin_omni_protocol::{Frame, OmniMessage, SessionMeta};
use penguin_server::api::{ChangedFile, FileChanges, FileEntry, FileListing, SandboxInfo};
use penguin_server::{
    CreateSession, FactoryError, FilesError, HostedSession, LoadSession, OpenFile, SessionFactory,
    WorkspaceFiles,
};
use penguin_tools::browse::{Browse, BrowseError};
use penguin_tools::checkpoint::{self, Limits, Manifest, Store};
use penguin_trace_store::Writer;

use super::FakeFactory;

/// A [`FakeFactory`] whose sessions show their workspace's files.
pub struct FilesFactory {
    inner: FakeFactory,
    /// Each session's checkpoint from when it was made, kept across loads.
    before: Mutex<HashMap<String, (Store, Manifest)>>,
}

impl FilesFactory {
    /// Wraps `inner`.
    pub fn new(inner: FakeFactory) -> FilesFactory {
        FilesFactory {
            inner,
            before: Mutex::default(),
        }
    }

    fn wrap(
        &self,
        session: Box<dyn HostedSession>,
        data_root: &Path,
    ) -> Result<Box<dyn HostedSession>, FactoryError> {
        let workspace = PathBuf::from(&session.meta().workspace);
        let mut before = self.before.lock().unwrap();
        let (store, manifest) = match before.get(session.id()) {
            Some(b) => b.clone(),
            None => {
                let store = Store::new(data_root.join("fake-checkpoints"));
                let m = checkpoint::take(&workspace, &store, None, &Limits::default())
                    .map_err(FactoryError::internal)?;
                before.insert(session.id().to_owned(), (store.clone(), m.clone()));
                (store, m)
            }
        };
        Ok(Box::new(WithFiles {
            inner: session,
            workspace,
            store,
            before: manifest,
        }))
    }
}

impl SessionFactory for FilesFactory {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let session = self.inner.create(req)?;
        self.wrap(session, &req.location.root)
    }

    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let session = self.inner.load(req)?;
        self.wrap(session, &req.location.root)
    }
}

/// A fake session and its workspace's files.
struct WithFiles {
    inner: Box<dyn HostedSession>,
    workspace: PathBuf,
    store: Store,
    before: Manifest,
}

impl HostedSession for WithFiles {
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn meta(&self) -> &SessionMeta {
        self.inner.meta()
    }
    fn run(
        &mut self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        self.inner.run(input, options)
    }
    fn compact(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        self.inner.compact(cancel)
    }
    fn engine(&self) -> &Engine {
        self.inner.engine()
    }
    fn writer(&self) -> &Writer {
        self.inner.writer()
    }
    fn environment(&self) -> Arc<dyn Environment> {
        self.inner.environment()
    }
    fn on_notice(&self, hook: Arc<dyn Fn() + Send + Sync>) {
        self.inner.on_notice(hook)
    }
    fn on_background_message(&self, hook: Arc<dyn Fn(OmniMessage) + Send + Sync>) {
        self.inner.on_background_message(hook)
    }
    fn sandbox(&self) -> Option<SandboxInfo> {
        self.inner.sandbox()
    }
    fn files(&self, data_root: &Path) -> Option<Arc<dyn WorkspaceFiles>> {
        let browse = Browse::new(&self.workspace, &[data_root.to_path_buf()]).ok()?;
        Some(Arc::new(FakeFiles {
            browse,
            store: self.store.clone(),
            before: self.before.clone(),
        }))
    }
}

struct FakeFiles {
    browse: Browse,
    store: Store,
    before: Manifest,
}

fn refused(e: BrowseError) -> FilesError {
    match e {
        BrowseError::Refused(m) => FilesError::Refused(m),
        e @ BrowseError::NotFound(_) => FilesError::NotFound(e.to_string()),
        e @ BrowseError::WrongKind { .. } => FilesError::WrongKind(e.to_string()),
        e => FilesError::Internal(e.to_string()),
    }
}

impl WorkspaceFiles for FakeFiles {
    fn list(&self, path: &str) -> Result<FileListing, FilesError> {
        let l = self.browse.list(path).map_err(refused)?;
        Ok(FileListing {
            path: l.path,
            entries: l
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
        let o = self.browse.open(path).map_err(refused)?;
        Ok(OpenFile {
            path: o.path,
            file: o.file,
            size: o.size,
        })
    }

    fn changes(&self) -> Result<FileChanges, FilesError> {
        let plan = checkpoint::plan(self.browse.root(), &self.store, &self.before)
            .map_err(|e| FilesError::Internal(e.to_string()))?;
        let mut paths: Vec<String> = plan.restore.into_iter().chain(plan.remove).collect();
        paths.sort();
        let files = self
            .browse
            .changes(&self.store, &self.before, &paths)
            .into_iter()
            .map(|c| ChangedFile {
                path: c.path,
                status: c.kind.as_str().to_owned(),
                added: c.added,
                removed: c.removed,
                diff: c.diff,
                note: c.note,
                others: false,
            })
            .collect();
        Ok(FileChanges {
            since_ms: self.before.taken_at_ms,
            files,
            unknown: Vec::new(),
        })
    }
}
