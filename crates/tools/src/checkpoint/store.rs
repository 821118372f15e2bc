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
        write_atomically(&path, bytes)
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
        // Two checkpoints in one millisecond keep apart by a counter.
        for n in 0.. {
            let path = dir.join(format!("{:013}-{n}.json", manifest.taken_at_ms));
            if !path.exists() {
                write_atomically(&path, &text)?;
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

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
