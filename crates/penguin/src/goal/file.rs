//! GOAL.yaml: written once by the loop when the goal starts (`objective`, `status: active`);
//! afterwards only its `status` is read, the model's mailbox back to the loop.

use std::io;
use std::path::Path;

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

/// Writes GOAL.yaml (creating its folder): the loop's one write.
pub(crate) fn write(path: &Path, objective: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serialize(objective, "active"))
}

/// The status the model left: a missing or unreadable file, a file that does not parse, or a
/// status other than `active` and `complete` all read as `blocked`, so a broken control
/// channel stops the loop rather than spin it.
pub(crate) fn read_status(path: &Path) -> FileStatus {
    // Bounded: the model may have written anything there.
    let Ok(text) = read_bounded(path, 64 * 1024) else {
        return FileStatus::Blocked;
    };
    match yaml::read_status(&text).as_deref() {
        Some("active") => FileStatus::Active,
        Some("complete") => FileStatus::Complete,
        _ => FileStatus::Blocked,
    }
}

fn read_bounded(path: &Path, limit: u64) -> io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() || meta.len() > limit {
        return Err(io::Error::other("not a small regular file"));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_string(&mut text)?;
    Ok(text)
}
