//! Workspace confinement: every path a tool touches must stay under the canonical root.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::confined::Dir;

/// A workspace as the tools see it: its canonical root, penguin's own state, which no tool
/// reads or writes even when it lies beneath the root, and the few folders outside the root
/// a file tool may still reach (the user's skills to read, the memory folders to keep).
#[derive(Clone, Debug, Default)]
pub(crate) struct Workspace {
    pub root: PathBuf,
    pub protected: Vec<PathBuf>,
    /// Folders outside the root (or beneath a protected path) the file tools may reach:
    /// canonical, each readable, and writable when it says so.
    pub extra: Vec<ExtraRoot>,
    /// The tool changes files: a read-only extra folder refuses it.
    pub writes: bool,
    /// A repository's `.git` is read-only here, as it is for commands in the sandbox (hooks
    /// and `core.fsmonitor` run unconfined at the user's next `git status`).
    pub git_read_only: bool,
}

/// A folder a file tool may reach besides the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExtraRoot {
    /// Canonical.
    pub root: PathBuf,
    pub writable: bool,
}

impl Workspace {
    /// [`resolve`]s `input`, refusing penguin's own state; a path in one of the extra folders
    /// resolves there (a read-only one refuses a tool that writes).
    pub(crate) fn resolve(&self, input: &str) -> Result<PathBuf, String> {
        let path = match self.extra_for(Path::new(input)) {
            Some(extra) => resolve(&extra.root, input)?,
            None => resolve(&self.root, input)?,
        };
        // By the resolved path, however it was named (a data root inside the workspace is
        // reached by relative paths too).
        if let Some(extra) = self.extra_for(&path) {
            if self.writes && !extra.writable {
                return Err(format!(
                    "path {input:?} is in {}, which the tools may read but not change",
                    extra.root.display()
                ));
            }
        } else if self.protected.iter().any(|p| path.starts_with(p)) {
            return Err(format!(
                "path {input:?} is penguin's own state (its data root: config, tokens, traces), which tools may not read or write"
            ));
        } else if self.writes
            && self.git_read_only
            && path
                .strip_prefix(&self.root)
                .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == ".git"))
        {
            return Err(format!(
                "path {input:?} is in a repository's .git, which this sandbox keeps read-only (a hook or core.fsmonitor written there would run outside it at the next git command); set [sandbox] git_writable = true to let commands and tools change it"
            ));
        }
        checked(&path);
        Ok(path)
    }

    /// The root handle `full` (a path [`Workspace::resolve`] returned) lies beneath, and the
    /// path below it: every read and write of a tool goes through this door, so a link
    /// swapped into the path since the check is refused instead of followed (`confined`).
    /// The root itself is opened by name: it is the canonical workspace or a folder under the
    /// data root, which no command can replace (a mount point, or hidden).
    pub(crate) fn door(&self, full: &Path) -> io::Result<(Dir, PathBuf)> {
        let root = self
            .extra
            .iter()
            .filter(|e| full.starts_with(&e.root))
            .max_by_key(|e| e.root.components().count())
            .map_or(self.root.as_path(), |e| e.root.as_path());
        let rel = full.strip_prefix(root).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is outside the workspace", full.display()),
            )
        })?;
        Ok((Dir::open(root)?, rel.to_path_buf()))
    }

    /// The extra folder an absolute `given` names (lexically, before any link is followed;
    /// [`resolve`] then refuses a link out of it).
    fn extra_for(&self, given: &Path) -> Option<&ExtraRoot> {
        if !given.is_absolute() {
            return None;
        }
        let normal = normalize(Path::new("/"), given);
        // The deepest one wins, so a folder inside another keeps its own rights.
        self.extra
            .iter()
            .filter(|e| normal.starts_with(&e.root))
            .max_by_key(|e| e.root.components().count())
    }

    /// Whether `path` (canonical) is penguin's own state that no tool shows: protected, and in
    /// none of the extra folders.
    pub(crate) fn is_hidden(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| path.starts_with(p))
            && !self.extra.iter().any(|e| path.starts_with(&e.root))
    }
}

/// Where a path's check ends and its use begins: the window a hostile command races. Tests
/// stop here to change the tree deterministically (`races.rs`); nothing happens otherwise.
pub(crate) fn checked(_full: &Path) {
    #[cfg(test)]
    race::HOOK.with(|hook| {
        if let Some(f) = hook.borrow_mut().as_mut() {
            f(_full)
        }
    });
}

#[cfg(test)]
pub(crate) mod race {
    use std::cell::RefCell;
    use std::path::Path;

    /// What a test does in the window, on this thread.
    pub(crate) type Hook = Box<dyn FnMut(&Path)>;

    thread_local! {
        pub(crate) static HOOK: RefCell<Option<Hook>> = RefCell::new(None);
    }
}

/// `given` made absolute against `base` and normalized lexically (`..` pops a component).
fn normalize(base: &Path, given: &Path) -> PathBuf {
    let mut normal = if given.is_absolute() {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
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
    normal
}

/// Resolves `input` (relative to `root`, or absolute) to a path under `root`.
///
/// `root` must already be canonical. The path is normalized lexically first, so `a/../b` is
/// fine while `../x` and `/etc/passwd` are refused; then the nearest existing ancestor is
/// canonicalized, which catches symlinks pointing outside. The returned path is what the
/// tool must use for I/O: it is the canonical ancestor plus components that do not exist yet,
/// so no unresolved symlink remains in it, and the I/O goes through [`Workspace::door`], which
/// refuses a link a concurrent process swapped in after this check.
pub(crate) fn resolve(root: &Path, input: &str) -> Result<PathBuf, String> {
    if input.is_empty() {
        return Err("path is empty".to_owned());
    }
    let normal = normalize(root, Path::new(input));
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
    fn extra_folders_are_reached_by_absolute_path_with_their_own_rights() {
        let (_d, root) = root();
        let data = root.join(".data");
        let (skills, memory) = (data.join("skills"), data.join("memory"));
        std::fs::create_dir_all(&skills).unwrap();
        std::fs::create_dir_all(&memory).unwrap();
        let ws = |writes| Workspace {
            root: root.clone(),
            protected: vec![data.clone()],
            extra: vec![
                ExtraRoot {
                    root: skills.clone(),
                    writable: false,
                },
                ExtraRoot {
                    root: memory.clone(),
                    writable: true,
                },
            ],
            writes,
            git_read_only: true,
        };
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        assert_eq!(
            ws(false).resolve(&s(&skills.join("a/SKILL.md"))).unwrap(),
            skills.join("a/SKILL.md")
        );
        assert!(ws(true)
            .resolve(&s(&skills.join("a/SKILL.md")))
            .unwrap_err()
            .contains("may read but not change"));
        assert_eq!(
            ws(true).resolve(&s(&memory.join("n.md"))).unwrap(),
            memory.join("n.md")
        );
        // Out of a folder by `..` or a link: the data root is refused as ever.
        assert!(ws(false)
            .resolve(&format!("{}/../token", s(&skills)))
            .unwrap_err()
            .contains("penguin's own state"));
        std::os::unix::fs::symlink(data.join("token"), memory.join("l.md")).unwrap();
        assert!(ws(false).resolve(&s(&memory.join("l.md"))).is_err());
        // Named relative to a workspace that holds the data root: the same rights.
        assert_eq!(
            ws(false).resolve(".data/skills/a").unwrap(),
            skills.join("a")
        );
        assert!(ws(true).resolve(".data/skills/a").is_err());
        assert!(ws(false).resolve(".data/token").is_err());
        assert!(!ws(false).is_hidden(&skills.join("a")));
        assert!(ws(false).is_hidden(&data.join("token")));
    }

    #[test]
    fn a_repositorys_git_folder_is_read_only_when_the_sandbox_says_so() {
        let (_d, root) = root();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        let ws = |writes, git_read_only| Workspace {
            root: root.clone(),
            writes,
            git_read_only,
            ..Workspace::default()
        };
        for p in [
            ".git/config",
            ".git/hooks/pre-commit",
            "sub/.git/config",
            "./x/../.git/HEAD",
        ] {
            let err = ws(true, true).resolve(p).unwrap_err();
            assert!(err.contains("git_writable"), "{p}: {err}");
            assert!(
                ws(false, true).resolve(p).is_ok(),
                "{p}: reading stays allowed"
            );
            assert!(
                ws(true, false).resolve(p).is_ok(),
                "{p}: the switch allows it"
            );
        }
        assert!(ws(true, true).resolve(".gitignore").is_ok());
        assert!(ws(true, true).resolve("src/git/x").is_ok());
    }

    #[test]
    fn errno_names_are_used_as_codes() {
        let e = io::Error::from_raw_os_error(nix::errno::Errno::EACCES as i32);
        assert_eq!(error_code(&e), "EACCES");
        assert_eq!(error_code(&io::Error::other("x")), "Other");
    }
}
