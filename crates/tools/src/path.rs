//! Workspace confinement: every path a tool touches must stay under the canonical root.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Resolves `input` (relative to `root`, or absolute) to a path under `root`.
///
/// `root` must already be canonical. The path is normalized lexically first, so `a/../b` is
/// fine while `../x` and `/etc/passwd` are refused; then the nearest existing ancestor is
/// canonicalized, which catches symlinks pointing outside. The returned path is what the
/// tool must use for I/O: it is the canonical ancestor plus components that do not exist yet,
/// so no unresolved symlink remains in it. (A concurrent process could still swap a
/// component for a symlink between this check and the I/O; the workspace is trusted that far.)
pub(crate) fn resolve(root: &Path, input: &str) -> Result<PathBuf, String> {
    if input.is_empty() {
        return Err("path is empty".to_owned());
    }
    let given = Path::new(input);
    let mut normal = if given.is_absolute() {
        PathBuf::from("/")
    } else {
        root.to_path_buf()
    };
    for comp in given.components() {
        match comp {
            Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            Component::Normal(part) => normal.push(part),
        }
    }
    let outside = || format!("path {input:?} is outside the workspace");
    if !normal.starts_with(root) {
        return Err(outside());
    }

    // Walk up to the nearest entry that exists (a dangling symlink counts as existing, so that
    // canonicalizing it fails below instead of letting a write follow it out of the root).
    let mut existing = normal.as_path();
    let mut missing = Vec::new();
    loop {
        match std::fs::symlink_metadata(existing) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(outside());
                };
                missing.push(name.to_owned());
                existing = parent;
            }
            Err(e) => return Err(format!("path {input:?} could not be resolved: {e}")),
        }
    }
    let canonical = std::fs::canonicalize(existing)
        .map_err(|e| format!("path {input:?} could not be resolved: {e}"))?;
    if !canonical.starts_with(root) {
        return Err(outside());
    }
    Ok(missing
        .iter()
        .rev()
        .fold(canonical, |acc, name| acc.join(name)))
}

/// Converts an I/O error to the code written in `[output archive failed: <code>]`: the errno
/// name (`EACCES`, `ENOSPC`, …) when there is one, as Node's `err.code` would be.
pub(crate) fn error_code(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(raw) => format!("{:?}", nix::errno::Errno::from_raw(raw)),
        None => format!("{:?}", e.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonicalize");
        (dir, root)
    }

    #[test]
    fn relative_paths_resolve_under_the_root() {
        let (_d, root) = root();
        assert_eq!(resolve(&root, "a/b.txt").unwrap(), root.join("a/b.txt"));
        assert_eq!(resolve(&root, "./a/../b").unwrap(), root.join("b"));
        assert_eq!(resolve(&root, ".").unwrap(), root);
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, root) = root();
        for bad in ["../x", "a/../../x", "/etc/passwd", "/"] {
            let err = resolve(&root, bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
            assert!(err.contains("outside the workspace"), "{err}");
        }
        assert!(resolve(&root, "").is_err());
    }

    #[test]
    fn absolute_paths_inside_the_root_are_accepted() {
        let (_d, root) = root();
        let inside = root.join("x.txt");
        assert_eq!(resolve(&root, inside.to_str().unwrap()).unwrap(), inside);
    }

    #[test]
    fn symlinks_out_of_the_root_are_refused() {
        let (_d, root) = root();
        let outside = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", root.join("dangling")).unwrap();
        assert!(resolve(&root, "out/file").unwrap_err().contains("outside"));
        assert!(resolve(&root, "out").unwrap_err().contains("outside"));
        assert!(resolve(&root, "dangling").is_err());
        assert!(resolve(&root, "dangling/new.txt").is_err());
    }

    #[test]
    fn errno_names_are_used_as_codes() {
        let e = io::Error::from_raw_os_error(nix::errno::Errno::EACCES as i32);
        assert_eq!(error_code(&e), "EACCES");
        assert_eq!(error_code(&io::Error::other("x")), "Other");
    }
}
