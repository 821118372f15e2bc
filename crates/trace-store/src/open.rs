//! The one way a trace file is opened for reading, and the one test a listing applies: only
//! regular files are ever read. A FIFO with a trace's name would block every reader until
//! someone wrote to it; a link to `/dev/zero` would never end.

use std::fs::{DirEntry, File, FileType, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::OFlag;

use crate::error::TraceError;

/// The longest record (one line, without its newline) a reader accepts: 64 MiB.
///
/// The writer has no such limit, so a line can be longer: readers refuse it unread
/// ([`TraceError::RecordTooLarge`], naming file, line and this limit) instead of holding a line
/// of any length in memory; the tolerant reader skips it like a malformed line and keeps every
/// other record. No reader holds more than this (plus one block) of a line it refuses.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// Opens a trace file for reading: a regular file (a symbolic link to one is followed), or
/// [`TraceError::NotRegularFile`] naming what it is instead.
///
/// The path is looked at before it is opened, so a device is never opened at all (opening
/// some has effects); and the descriptor is checked after, with `fstat`, because that is what
/// will be read, whatever the path names by then. `O_NONBLOCK` keeps the open of a FIFO
/// (swapped in between) from waiting for a writer; it changes nothing for a regular file.
/// `O_NOCTTY` keeps a terminal from becoming the process's own.
pub fn open_trace(path: &Path) -> Result<File, TraceError> {
    let io = |e| TraceError::io(path, e);
    let named = std::fs::metadata(path).map_err(io)?;
    regular(path, named.file_type())?;
    let file = nonblocking().read(true).open(path).map_err(io)?;
    let opened = file.metadata().map_err(io)?;
    regular(path, opened.file_type())?;
    Ok(file)
}

/// Whether a directory entry may be listed as a trace: a regular file, or a symbolic link to
/// one. Nothing is opened, so a listing never blocks; [`open_trace`] checks again.
pub fn is_regular_entry(entry: &DirEntry) -> bool {
    match entry.file_type() {
        Ok(t) if t.is_file() => true,
        Ok(t) if t.is_symlink() => std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file()),
        _ => false,
    }
}

/// Options that open without blocking on a FIFO and never take a terminal as the process's
/// own; for a regular file they change nothing. The writer opens its files with them too.
pub(crate) fn nonblocking() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
    options
}

/// `Ok` when `file` (opened from `path`) is a regular file: the writer's check, as an I/O
/// error it can log and count like any failed write.
pub(crate) fn ensure_regular(path: &Path, file: &File) -> std::io::Result<()> {
    regular(path, file.metadata()?.file_type()).map_err(std::io::Error::other)
}

fn regular(path: &Path, t: FileType) -> Result<(), TraceError> {
    if t.is_file() {
        return Ok(());
    }
    let kind = if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else if t.is_dir() {
        "directory"
    } else {
        "special file"
    };
    Err(TraceError::NotRegularFile {
        path: path.to_path_buf(),
        kind,
    })
}
