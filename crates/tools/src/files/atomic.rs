//! Writes that either happen whole or not at all: the content goes to a temporary file in the
//! target's directory, which is then renamed over the target. A file that existed keeps its
//! permissions; a new one gets the usual `0666` less the umask.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A complete new content, waiting in its temporary file to be renamed into place.
#[derive(Debug)]
pub(crate) struct Staged {
    temp: tempfile::TempPath,
    target: PathBuf,
}

impl Staged {
    /// Renames the content into place.
    pub(crate) fn commit(self) -> io::Result<()> {
        self.temp.persist(&self.target).map_err(|e| e.error)
    }
}

/// Writes `content` next to `target` without touching `target` yet. Dropping the result
/// removes the temporary file.
pub(crate) fn stage(target: &Path, content: &[u8]) -> io::Result<Staged> {
    let dir = target.parent().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "a file path has a directory")
    })?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let existing = std::fs::metadata(target).ok().map(|m| m.permissions());
    let mut file = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".penguin-tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    if let Some(perms) = existing {
        file.as_file().set_permissions(perms)?;
    }
    file.write_all(content)?;
    file.as_file().sync_all()?;
    Ok(Staged {
        temp: file.into_temp_path(),
        target: target.to_path_buf(),
    })
}

/// Replaces (or creates) `target` with `content` in one rename.
pub(crate) fn write(target: &Path, content: &[u8]) -> io::Result<()> {
    stage(target, content)?.commit()
}

/// Creates `dir` and its missing ancestors; returns the ones created, outermost first, so a
/// failed change can remove them again.
pub(crate) fn create_dirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.exists()) {
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    missing.reverse();
    for (i, d) in missing.iter().enumerate() {
        if let Err(e) = std::fs::create_dir(d) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                remove_dirs(&missing[..i]);
                return Err(e);
            }
        }
    }
    Ok(missing)
}

/// Removes directories [`create_dirs`] made, innermost first, as long as they are empty.
pub(crate) fn remove_dirs(created: &[PathBuf]) {
    for d in created.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}
