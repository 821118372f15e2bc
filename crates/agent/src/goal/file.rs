//! GOAL.yaml: written once by the loop when the goal starts (`objective`, `status: active`);
//! afterwards only its `status` is read, the model's mailbox back to the loop.

use std::io;
use std::path::Path;

use penguin_tools::confined::Dir;

use super::yaml;

/// What the loop may act on after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileStatus {
    Active,
    Complete,
    Blocked,
}

/// The file's text for these values, as the reference's YAML library writes it.
pub(crate) fn serialize(objective: &str, status: &str) -> String {
    yaml::entry("objective", objective) + &yaml::entry("status", status)
}

/// Writes GOAL.yaml (creating its folders) beneath `root`, never through a link a command
/// planted on the way or at its name (`penguin_tools::confined`): the loop's one write.
pub(crate) fn write(root: &Path, path: &Path, objective: &str) -> io::Result<()> {
    let rel = beneath(root, path)?;
    // The root is the workspace, or the folder the user named for the file: created by its
    // path, which no command chose; what lies beneath it goes through the door.
    #[allow(clippy::disallowed_methods)]
    std::fs::create_dir_all(root)?;
    let dir = Dir::open(root)?;
    if let Some(folder) = rel.parent() {
        penguin_tools::workspace_dir::create_dirs(&dir, folder)?;
    }
    dir.write(rel, serialize(objective, "active").as_bytes())
}

/// The status the model left: a missing or unreadable file, a file that does not parse, or a
/// status other than `active` and `complete` all read as `blocked`, so a broken control
/// channel stops the loop rather than spin it. Read beneath `root` like [`write`], bounded
/// (the model may have written anything there), a link or FIFO refused.
pub(crate) fn read_status(root: &Path, path: &Path) -> FileStatus {
    let text = beneath(root, path).and_then(|rel| Dir::open(root)?.read(rel, 64 * 1024));
    let Ok(text) = text else {
        return FileStatus::Blocked;
    };
    match yaml::read_status(&String::from_utf8_lossy(&text)).as_deref() {
        Some("active") => FileStatus::Active,
        Some("complete") => FileStatus::Complete,
        _ => FileStatus::Blocked,
    }
}

fn beneath<'a>(root: &Path, path: &'a Path) -> io::Result<&'a Path> {
    path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not beneath {}", path.display(), root.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace and, outside it, a file a command would like penguin to overwrite.
    fn scene() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join(".penguin/scratchpad/s1")).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        (tmp, ws, victim)
    }

    #[test]
    fn goal_yaml_is_never_written_through_a_planted_link() {
        let (tmp, ws, victim) = scene();
        let file = ws.join(".penguin/scratchpad/s1/GOAL.yaml");
        write(&ws, &file, "ship it").unwrap();
        assert_eq!(read_status(&ws, &file), FileStatus::Active);
        // The command's own GOAL.yaml replaced by a link to any file.
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&victim, &file).unwrap();
        assert!(write(&ws, &file, "again").is_err());
        assert_eq!(read_status(&ws, &file), FileStatus::Blocked);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // `.penguin` made a link out of the workspace.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("scratchpad/s1")).unwrap();
        std::fs::remove_dir_all(ws.join(".penguin")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, ws.join(".penguin")).unwrap();
        assert!(write(&ws, &file, "again").is_err());
        assert_eq!(
            std::fs::read_dir(elsewhere.join("scratchpad/s1"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn a_fifo_at_goal_yaml_reads_as_blocked_without_hanging() {
        let (_tmp, ws, _) = scene();
        let file = ws.join(".penguin/scratchpad/s1/GOAL.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&file)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(read_status(&ws, &file), FileStatus::Blocked);
    }
}
