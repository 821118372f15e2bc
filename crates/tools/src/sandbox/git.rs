//! The repositories in the writable roots keep their own files (`.git`) out of a command's
//! reach, unless `[sandbox] git_writable` lets commands commit.
//!
//! A repository's config and hooks are code the user's own git runs, unconfined:
//! `core.fsmonitor`, `core.pager`, `core.sshCommand`, a filter driver, a `pre-commit` hook. A
//! command that can write them plants something the user's next `git status` runs outside
//! the sandbox. So, as codex's workspace-write does, the repository of each writable root is
//! bound read-only over the writable bind (namespaces only: Landlock cannot take a subtree
//! back from a tree it granted):
//!
//! - `<root>/.git`, a directory, whole: config, hooks, `info/`, the index and refs, so no
//!   file in it can be replaced, and no missing one (`hooks/`) created;
//! - a `.git` file (a linked worktree, a submodule, `--separate-git-dir`): the file itself, so
//!   it cannot be pointed elsewhere, and the git directory and common directory it leads to
//!   where those lie in a writable root;
//! - the `.git` file of each submodule checked out in the root, found from the repository's
//!   own `modules/*/config` (`core.worktree`), which the command cannot edit.
//!
//! Each is a mount point inside the sandbox, so it cannot be removed or renamed either. What
//! is not covered: a root with no `.git` when the command starts (a command may `git init`
//! one, and its config is then the command's), a `.git` deeper in the tree that is no
//! submodule, and a `.git` that is a symbolic link (a mount covers what it points to, not the
//! link).

use std::path::{Path, PathBuf};

use crate::confined::{Dir, Kind};

/// At most this much of a `.git` file, a `commondir` or a module's config is read.
const MAX_READ: u64 = 64 * 1024;
/// Module git directories looked at per repository (their tree can be deep: names with `/`,
/// nested submodules).
const MAX_MODULES: usize = 1024;

/// The writable roots, each held open: what is read beneath them is read through the handle
/// (`confined::Dir`), so a link or a FIFO a command left there is described, never followed
/// or waited on.
struct Roots(Vec<(PathBuf, Dir)>);

impl Roots {
    /// The root `path` (canonical) lies in, with `path` relative to it.
    fn find<'a>(&'a self, path: &'a Path) -> Option<(&'a Dir, &'a Path)> {
        self.0
            .iter()
            .find_map(|(root, dir)| Some((dir, path.strip_prefix(root).ok()?)))
    }

    fn writable(&self, path: &Path) -> bool {
        self.find(path).is_some()
    }

    /// The text of the regular file `path` in a root, `None` for anything else.
    fn read(&self, path: &Path) -> Option<String> {
        let (dir, rel) = self.find(path)?;
        String::from_utf8(dir.read(rel, MAX_READ).ok()?).ok()
    }

    fn kind(&self, path: &Path) -> Option<Kind> {
        let (dir, rel) = self.find(path)?;
        let meta = dir.metadata(rel).ok()?;
        let t = meta.file_type();
        Some(if t.is_symlink() {
            Kind::Link
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        })
    }
}

/// The repository paths under `roots` (canonical) to bind read-only, outermost only.
pub(super) fn protected(roots: &[PathBuf]) -> Vec<PathBuf> {
    let open = Roots(
        roots
            .iter()
            .filter_map(|r| Some((r.clone(), Dir::open(r).ok()?)))
            .collect(),
    );
    let mut found = Vec::new();
    for root in roots {
        repository(&root.join(".git"), &open, &mut found);
    }
    found.sort();
    found.dedup();
    let outermost: Vec<PathBuf> = found
        .iter()
        // A writable root the user named (a bare repository, say) stays theirs.
        .filter(|p| !roots.contains(p))
        .filter(|p| !found.iter().any(|q| q != *p && p.starts_with(q)))
        .cloned()
        .collect();
    outermost
}

/// `dot_git` (a `.git` entry in a root) and the git directories it leads to, where writable.
fn repository(dot_git: &Path, roots: &Roots, found: &mut Vec<PathBuf>) {
    let mut git_dirs = Vec::new();
    match roots.kind(dot_git) {
        // The link stays replaceable; what it points to is protected.
        Some(Kind::Link) => git_dirs.extend(std::fs::canonicalize(dot_git)),
        Some(Kind::Dir) => git_dirs.push(dot_git.to_path_buf()),
        Some(Kind::File) => {
            found.push(dot_git.to_path_buf());
            git_dirs.extend(gitdir_of(dot_git, roots));
        }
        Some(Kind::Other) | None => return,
    }
    // A linked worktree's git directory names the repository's common one (config, hooks).
    let common: Vec<PathBuf> = git_dirs
        .iter()
        .filter_map(|d| {
            let text = roots.read(&d.join("commondir"))?;
            std::fs::canonicalize(d.join(text.lines().next()?.trim())).ok()
        })
        .collect();
    git_dirs.extend(common);
    for dir in git_dirs.into_iter().filter(|d| roots.writable(d)) {
        submodules(&dir, roots, found);
        found.push(dir);
    }
}

/// The directory a `.git` file names (`gitdir: PATH`, relative to the file's directory).
fn gitdir_of(file: &Path, roots: &Roots) -> Option<PathBuf> {
    let text = roots.read(file)?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    std::fs::canonicalize(file.parent()?.join(named)).ok()
}

/// The `.git` files of the submodules whose repositories live in `git_dir/modules`: each
/// module's config names its worktree.
fn submodules(git_dir: &Path, roots: &Roots, found: &mut Vec<PathBuf>) {
    let Some((dir, rel)) = roots.find(git_dir) else {
        return;
    };
    let mut pending = vec![rel.join("modules")];
    let mut seen = 0;
    while let Some(at) = pending.pop() {
        let Ok(entries) = dir.open_dir(&at).and_then(|d| d.entries()) else {
            continue;
        };
        for entry in entries.into_iter().filter(|e| e.kind == Kind::Dir) {
            seen += 1;
            if seen > MAX_MODULES {
                return;
            }
            let module = at.join(&entry.name);
            if dir.metadata(module.join("HEAD")).is_ok_and(|m| m.is_file()) {
                let dot_git = worktree_of(dir, &module).map(|w| w.join(".git"));
                if let Some(dot_git) = dot_git.filter(|g| roots.kind(g).is_some()) {
                    found.push(dot_git);
                }
                // Nested submodules live in the module's own `modules`.
                pending.push(module.join("modules"));
            } else {
                // A module named with a `/` is a tree of directories.
                pending.push(module);
            }
        }
    }
}

/// `core.worktree` of the git directory `module` (relative to `dir`), resolved against it.
fn worktree_of(dir: &Dir, module: &Path) -> Option<PathBuf> {
    let config = String::from_utf8(dir.read(module.join("config"), MAX_READ).ok()?).ok()?;
    let value = config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("worktree")
            .then(|| value.trim().trim_matches('"').to_owned())
    })?;
    std::fs::canonicalize(dir.path().join(module).join(value)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical_tempdir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap();
        (dir, path)
    }

    #[test]
    fn a_git_directory_is_protected_whole_and_a_root_without_one_gives_nothing() {
        let (_dir, base) = canonical_tempdir();
        let (ws, tmp) = (base.join("ws"), base.join("tmp"));
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        assert_eq!(protected(&[ws.clone(), tmp]), [ws.join(".git")]);
    }

    #[test]
    fn a_git_file_protects_itself_its_git_directory_and_the_common_one() {
        let (_dir, base) = canonical_tempdir();
        let (repo, wt) = (base.join("repo"), base.join("wt"));
        let linked = repo.join(".git/worktrees/wt");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(linked.join("commondir"), "../..\n").unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", linked.display())).unwrap();
        // Only the worktree is writable: the repository is read-only anyway.
        assert_eq!(protected(std::slice::from_ref(&wt)), [wt.join(".git")]);
        // Both writable: the common directory, which holds the linked one, is protected too.
        assert_eq!(
            protected(&[wt.clone(), repo.clone()]),
            [repo.join(".git"), wt.join(".git")]
        );
        // A separate git directory inside the root, named relative to the file.
        let (_dir, ws) = canonical_tempdir();
        std::fs::create_dir_all(ws.join(".repo")).unwrap();
        std::fs::write(ws.join(".git"), "gitdir: .repo\n").unwrap();
        assert_eq!(
            protected(std::slice::from_ref(&ws)),
            [ws.join(".git"), ws.join(".repo")]
        );
    }

    #[test]
    fn submodules_are_found_from_the_repositorys_own_modules() {
        let (_dir, ws) = canonical_tempdir();
        let module = ws.join(".git/modules/libs/a");
        std::fs::create_dir_all(&module).unwrap();
        std::fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            module.join("config"),
            "[core]\n\tbare = false\n\tworktree = ../../../../libs/a\n",
        )
        .unwrap();
        std::fs::create_dir_all(ws.join("libs/a")).unwrap();
        std::fs::write(
            ws.join("libs/a/.git"),
            "gitdir: ../../.git/modules/libs/a\n",
        )
        .unwrap();
        assert_eq!(
            protected(std::slice::from_ref(&ws)),
            [ws.join(".git"), ws.join("libs/a/.git")]
        );
    }
}
