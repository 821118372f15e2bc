//! The writer thread: appends records in call order with one `write(2)` each, heals a torn
//! tail before the first append, rotates files, and syncs by group commit.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

use penguin_omni_protocol::Frame;

use super::{Durability, TraceMirror};
use crate::open::{ensure_regular, nonblocking};
use crate::paths::trace_file_path;

pub(super) enum Command {
    Record(Frame),
    Rotate,
    Flush(Sender<io::Result<()>>),
    Mirror(Arc<dyn TraceMirror>),
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) failed_writes: AtomicU64,
    pub(super) failed_syncs: AtomicU64,
    pub(super) syncs: AtomicU64,
    pub(super) written: AtomicU64,
}

/// Appends `buf` with as few `write(2)` calls as the OS allows (one, unless it writes short).
///
/// On failure returns how many bytes did land, so the caller knows whether the file now ends in
/// a partial line.
pub(crate) fn append_all(w: &mut impl Write, buf: &[u8]) -> Result<(), (usize, io::Error)> {
    let mut done = 0;
    while done < buf.len() {
        match w.write(&buf[done..]) {
            Ok(0) => {
                return Err((
                    done,
                    io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "Trace append made no progress at byte {done} of {}",
                            buf.len()
                        ),
                    ),
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((done, e)),
        }
    }
    Ok(())
}

/// Cuts a torn tail (bytes after the last `\n`: a record whose write a crash cut short) off
/// the file, so the next record starts on a line of its own and the fragment can never end up
/// in the middle of the file. Returns how many bytes were dropped; a missing file is clean.
fn heal_torn_tail(path: &Path) -> io::Result<u64> {
    let mut f = match nonblocking().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    ensure_regular(path, &f)?;
    let len = f.metadata()?.len();
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(buf)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        f.set_len(end)?;
        f.sync_data()?;
    }
    Ok(len - end)
}

pub(super) struct Worker {
    pub(super) traces_dir: PathBuf,
    pub(super) date_dir: String,
    pub(super) session_id: String,
    pub(super) index: u32,
    pub(super) durability: Durability,
    /// The O_APPEND handle of `index`. The reference reopens per record; keeping it open halves
    /// the syscalls, and O_APPEND still makes every write land at the current end of file.
    pub(super) file: Option<File>,
    pub(super) probed_index: Option<u32>,
    /// The file may end in a partial line: prefix the next record with `\n`.
    pub(super) torn: bool,
    /// Bytes appended since the last fsync.
    pub(super) dirty: bool,
    /// A record asked for a sync that group commit has not done yet.
    pub(super) sync_owed: bool,
    pub(super) buf: Vec<u8>,
    pub(super) counters: Arc<Counters>,
    /// Where every record is copied too, if anywhere.
    pub(super) mirror: Option<Arc<dyn TraceMirror>>,
    /// Records given to the mirror since its last commit.
    pub(super) mirror_owed: bool,
}

impl Worker {
    /// Group commit: a sync a record asks for waits until the queue is momentarily empty, so
    /// one fsync covers every commit that arrived meanwhile and a fast producer is bounded by
    /// CPU, not by fsync latency. A flush or a rotation syncs at once.
    pub(super) fn run(mut self, rx: Receiver<Command>) {
        loop {
            let cmd = match rx.try_recv() {
                Ok(cmd) => cmd,
                Err(mpsc::TryRecvError::Empty) => {
                    if self.sync_owed {
                        // Logged and counted inside; the records themselves did land.
                        let _ = self.sync_if_dirty();
                    }
                    match rx.recv() {
                        Ok(cmd) => cmd,
                        Err(_) => break,
                    }
                }
                Err(mpsc::TryRecvError::Disconnected) => break,
            };
            match cmd {
                Command::Record(frame) => self.append(&frame),
                Command::Rotate => {
                    // A failed sync is already logged and counted; rotation goes ahead regardless.
                    let _ = self.sync_if_dirty();
                    self.file = None;
                    self.index += 1;
                }
                Command::Mirror(mirror) => self.mirror = Some(mirror),
                Command::Flush(ack) => {
                    let r = self.sync_if_dirty();
                    // The flusher may have given up waiting; nothing to do then.
                    let _ = ack.send(r);
                }
            }
        }
        // Logged and counted inside; nobody is left to report it to.
        let _ = self.sync_if_dirty();
    }

    fn path(&self) -> PathBuf {
        trace_file_path(
            &self.traces_dir,
            &self.date_dir,
            &self.session_id,
            self.index,
        )
    }

    fn open_current(&mut self) -> io::Result<()> {
        let path = self.path();
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        if self.probed_index != Some(self.index) {
            let dropped = heal_torn_tail(&path)?;
            if dropped > 0 {
                tracing::warn!(
                    "[trace] {}: dropped a torn last line ({dropped} bytes of a record a crash cut short) before appending",
                    path.display()
                );
            }
            self.torn = false;
            self.probed_index = Some(self.index);
        }
        let existed = path.exists();
        // Not blocking, and checked: a FIFO with this file's name would otherwise stop the
        // writer (and every flush) until someone read it.
        let file = nonblocking().create(true).append(true).open(&path)?;
        ensure_regular(&path, &file)?;
        if !existed && self.durability != Durability::Never {
            // A new file's directory entry must be durable too, or an fsynced record could
            // vanish with its file after a power loss.
            if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
                self.counters.failed_syncs.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("[trace] fsync failed: {}: {e}", dir.display());
            }
        }
        self.file = Some(file);
        Ok(())
    }

    fn append(&mut self, frame: &Frame) {
        if let Err(e) = self.try_append(frame) {
            self.counters.failed_writes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("[trace] write failed: {}: {e}", self.path().display());
            // Reopen next time: the handle may be the cause (file replaced, fd invalidated).
            self.file = None;
        }
    }

    fn try_append(&mut self, frame: &Frame) -> io::Result<()> {
        if let Some(mirror) = &self.mirror {
            // The mirror is the record's durable home; the local file may fail on its own.
            if !mirror.append(self.index, frame.json().as_bytes()) {
                return Err(io::Error::other(
                    "the trace's mirror refused the record: another writer owns this trace now",
                ));
            }
            self.mirror_owed = true;
        }
        if self.torn {
            // Our own append was cut short: heal the file before the next record.
            self.file = None;
            self.probed_index = None;
        }
        if self.file.is_none() {
            self.open_current()?;
        }
        let json = frame.json().as_bytes();
        self.buf.clear();
        self.buf.reserve(json.len() + 1);
        self.buf.extend_from_slice(json);
        self.buf.push(b'\n');
        let file = self.file.as_mut().expect("opened above");
        if let Err((landed, e)) = append_all(file, &self.buf) {
            if landed > 0 {
                self.torn = true;
                self.dirty = true;
            }
            return Err(e);
        }
        self.torn = false;
        self.dirty = true;
        self.counters.written.fetch_add(1, Ordering::Relaxed);
        if self.durability.syncs_after(frame.message()) {
            self.sync_owed = true;
        }
        // A multi-megabyte record should not pin its buffer for the rest of the session.
        if self.buf.capacity() > 1 << 20 {
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// The file's fsync, then the mirror's commit: each a sync point of its own.
    fn sync_if_dirty(&mut self) -> io::Result<()> {
        let file = self.sync_file();
        let mirrored = match (&self.mirror, self.mirror_owed) {
            (Some(mirror), true) => {
                self.mirror_owed = false;
                mirror.commit().inspect_err(|e| {
                    self.counters.failed_syncs.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("[trace] mirror of {} failed: {e}", self.session_id);
                })
            }
            _ => Ok(()),
        };
        file.and(mirrored)
    }

    fn sync_file(&mut self) -> io::Result<()> {
        self.sync_owed = false;
        if !self.dirty || self.durability == Durability::Never {
            return Ok(());
        }
        let Some(file) = self.file.as_ref() else {
            return Ok(());
        };
        match file.sync_data() {
            Ok(()) => {
                self.dirty = false;
                self.counters.syncs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.counters.failed_syncs.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("[trace] fsync failed: {}: {e}", self.path().display());
                Err(e)
            }
        }
    }
}
