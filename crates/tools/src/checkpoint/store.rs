//! Where checkpoints live: contents by their SHA-256 under `objects/`, each session's
//! manifests under `sessions/<id>/`. The folder is penguin's own, under its data root, which
//! commands can neither write nor, in most modes, see (docs/security.md): plain file operations
//! serve here, as for the data root's other files, and every content read back is checked
//! against its hash.
#![allow(clippy::disallowed_methods)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Manifest;

/// A checkpoint store rooted at a folder of penguin's own.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

/// The hex SHA-256 of `bytes`.
pub(super) fn hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Store {
    /// The store in `root` (made when first written).
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    /// Its folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn object(&self, hash: &str) -> io::Result<PathBuf> {
        // A manifest is read back from disk: its hashes are checked before they name a file.
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{hash:?} is not a content hash"),
            ));
        }
        Ok(self.root.join("objects").join(&hash[..2]).join(hash))
    }

    /// Whether content `hash` is stored.
    pub(super) fn has(&self, hash: &str) -> bool {
        self.object(hash).is_ok_and(|p| p.is_file())
    }

    /// Stores `bytes` as `hash` (nothing when it is stored already).
    pub(super) fn put(&self, hash: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.object(hash)?;
        if path.is_file() {
            return Ok(());
        }
        // Not synced one by one (a first checkpoint of a large tree stores thousands): `save`
        // syncs them all before the manifest that names them is written.
        write_atomically(&path, bytes, false)
    }

    /// Content `hash`, checked against its hash.
    pub fn get(&self, hash: &str) -> io::Result<Vec<u8>> {
        let bytes = std::fs::read(self.object(hash)?)?;
        if self::hash(&bytes) != hash {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("stored content {hash} is damaged (its bytes hash differently)"),
            ));
        }
        Ok(bytes)
    }

    fn session_dir(&self, session: &str) -> io::Result<PathBuf> {
        if session.is_empty() || session.contains(['/', '\\']) || session.starts_with('.') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{session:?} is not a session id"),
            ));
        }
        Ok(self.root.join("sessions").join(session))
    }

    /// Saves `manifest` as one of `session`'s checkpoints.
    pub fn save(&self, session: &str, manifest: &Manifest) -> io::Result<PathBuf> {
        let dir = self.session_dir(session)?;
        let text = serde_json::to_vec(manifest).map_err(io::Error::other)?;
        // Every content the manifest names is on disk before it is: one `syncfs(2)` of the
        // store's filesystem, not an fsync per content.
        if self.root.is_dir() {
            nix::unistd::syncfs(std::fs::File::open(&self.root)?).map_err(io::Error::from)?;
        }
        // Two checkpoints in one millisecond keep apart by a counter.
        for n in 0.. {
            let path = dir.join(format!("{:013}-{n}.json", manifest.taken_at_ms));
            if !path.exists() {
                write_atomically(&path, &text, true)?;
                return Ok(path);
            }
        }
        unreachable!("a free name is found")
    }

    /// `session`'s checkpoints, oldest first, and a line for each one that could not be read
    /// (left out). `Err` only when the folder cannot be listed.
    pub fn list(&self, session: &str) -> io::Result<(Vec<Manifest>, Vec<String>)> {
        let dir = self.session_dir(session)?;
        let mut names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(e),
        };
        names.sort();
        let (mut out, mut damaged) = (Vec::new(), Vec::new());
        for path in names {
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Manifest>(&b).map_err(|e| e.to_string()))
            {
                Ok(m) => out.push(m),
                Err(e) => damaged.push(format!("checkpoint {}: {e}", path.display())),
            }
        }
        Ok((out, damaged))
    }
}

fn write_atomically(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    if sync {
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// What [`Store::prune`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Sessions whose checkpoints went, oldest first.
    pub sessions: Vec<String>,
    /// Stored contents removed (no checkpoint left names them).
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// A stored content younger than this is never removed: a checkpoint being taken has stored
/// it and not yet saved the manifest that names it.
const IN_FLIGHT: std::time::Duration = std::time::Duration::from_secs(3600);

impl Store {
    /// Keeps the store within `max_bytes` of contents: while the contents the sessions'
    /// checkpoints name come to more, the checkpoints of the session checkpointed least
    /// recently go first (never `keep`'s, the session now running), then every content no
    /// checkpoint names any more (an hour old at least, so one a checkpoint being taken
    /// has just stored stays).
    pub fn prune(&self, max_bytes: u64, keep: &str) -> io::Result<Pruned> {
        let mut pruned = Pruned::default();
        let objects = self.objects()?;
        let total: u64 = objects.iter().map(|o| o.1).sum();
        if total <= max_bytes {
            return Ok(pruned);
        }
        // Each session's checkpoints: when it was last checkpointed, and what they name.
        let mut sessions = Vec::new();
        let dir = self.root.join("sessions");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok((manifests, _)) = self.list(&name) else {
                continue;
            };
            let last = manifests.iter().map(|m| m.taken_at_ms).max().unwrap_or(0);
            let named: std::collections::HashSet<String> = manifests
                .iter()
                .flat_map(|m| m.entries.values())
                .filter_map(|e| match e {
                    super::Entry::File { hash, .. } => Some(hash.clone()),
                    _ => None,
                })
                .collect();
            sessions.push((last, name, named));
        }
        sessions.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let size: std::collections::HashMap<&str, u64> =
            objects.iter().map(|(h, s, _)| (h.as_str(), *s)).collect();
        let named_bytes = |sessions: &[(u64, String, std::collections::HashSet<String>)]| {
            let all: std::collections::HashSet<&String> =
                sessions.iter().flat_map(|s| s.2.iter()).collect();
            all.iter()
                .map(|h| size.get(h.as_str()).copied().unwrap_or(0))
                .sum::<u64>()
        };
        while named_bytes(&sessions) > max_bytes {
            let Some(i) = sessions.iter().position(|s| s.1 != keep) else {
                break;
            };
            let (_, name, _) = sessions.remove(i);
            std::fs::remove_dir_all(dir.join(&name))?;
            pruned.sessions.push(name);
        }
        let named: std::collections::HashSet<&String> =
            sessions.iter().flat_map(|s| s.2.iter()).collect();
        let now = std::time::SystemTime::now();
        for (hash, bytes, modified) in &objects {
            let young = now.duration_since(*modified).unwrap_or_default() < IN_FLIGHT;
            if named.contains(hash) || young {
                continue;
            }
            if std::fs::remove_file(self.object(hash)?).is_ok() {
                pruned.objects += 1;
                pruned.bytes += bytes;
            }
        }
        Ok(pruned)
    }

    /// Every stored content: its hash, size and modification time.
    fn objects(&self) -> io::Result<Vec<(String, u64, std::time::SystemTime)>> {
        let mut out = Vec::new();
        let root = self.root.join("objects");
        let shards = match std::fs::read_dir(&root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for shard in shards.flatten() {
            for file in std::fs::read_dir(shard.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let Ok(meta) = file.metadata() else { continue };
                let name = file.file_name().to_string_lossy().into_owned();
                if meta.is_file() && self.object(&name).is_ok() {
                    let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                    out.push((name, meta.len(), modified));
                }
            }
        }
        Ok(out)
    }
}
