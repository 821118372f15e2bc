//! `.penguin/` in the user's workspace: what a session makes there (archived tool output,
//! goal mode's scratchpad, attached images) is penguin's, not the project's, so the folder carries a `.gitignore`
//! that keeps those out of `git status`. A user's own files there (committed settings) stay
//! visible: only penguin's folders are ignored.

use std::io::{self, Write};
use std::path::Path;

use crate::confined::Dir;

/// The folder's name, at the workspace's root.
pub const DIR: &str = ".penguin";

/// What `.penguin/.gitignore` says: penguin's folders, and itself, so a workspace where
/// penguin made only those shows nothing new.
const GITIGNORE: &str = "# Written by penguin: what its sessions make here is not the project's.\n\
archive/\nscratchpad/\nimages/\n.gitignore\n";

/// Creates the folder `rel` of the workspace `ws` (and its missing ancestors); when it lies
/// beneath [`DIR`], makes sure `.penguin/.gitignore` exists (one the user already has, or
/// changed, is left as it is). Through `ws`'s door, like every write penguin makes there.
pub fn create_dirs(ws: &Dir, rel: &Path) -> io::Result<()> {
    ws.create_dirs(rel)?;
    if rel.starts_with(DIR) {
        match ws.create_new(Path::new(DIR).join(".gitignore")) {
            Ok(mut file) => file.write_all(GITIGNORE.as_bytes())?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penguins_folders_are_ignored_and_a_users_gitignore_is_kept() {
        let ws = tempfile::tempdir().unwrap();
        let dir = Dir::open(ws.path()).unwrap();
        create_dirs(&dir, Path::new(".penguin/scratchpad/s1")).unwrap();
        let ignore = ws.path().join(".penguin/.gitignore");
        assert_eq!(std::fs::read_to_string(&ignore).unwrap(), GITIGNORE);
        std::fs::write(&ignore, "mine\n").unwrap();
        create_dirs(&dir, Path::new(".penguin/images")).unwrap();
        assert_eq!(std::fs::read_to_string(&ignore).unwrap(), "mine\n");
        // A folder elsewhere in the workspace gets no .gitignore of penguin's.
        create_dirs(&dir, Path::new("notes/goal")).unwrap();
        assert!(!ws.path().join("notes/.gitignore").exists());
    }

    #[test]
    fn git_status_shows_nothing_penguin_made() {
        let ws = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(ws.path())
                .output()
                .expect("git runs")
        };
        if !git(&["init", "-q"]).status.success() {
            panic!("git init failed");
        }
        let dir = Dir::open(ws.path()).unwrap();
        create_dirs(&dir, Path::new(".penguin/scratchpad/s1")).unwrap();
        dir.write(".penguin/scratchpad/s1/GOAL.yaml", b"status: active\n")
            .unwrap();
        let status = git(&["status", "--porcelain", "--untracked-files=all"]);
        assert_eq!(String::from_utf8_lossy(&status.stdout), "");
        // The user's own file there is the project's to track.
        std::fs::write(ws.path().join(".penguin/hooks.toml"), "").unwrap();
        let status = git(&["status", "--porcelain", "--untracked-files=all"]);
        assert_eq!(
            String::from_utf8_lossy(&status.stdout),
            "?? .penguin/hooks.toml\n"
        );
    }
}
