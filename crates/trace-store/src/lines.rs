//! A file's lines, read in large blocks and handed out in place; and where a large file can be
//! cut into parts of whole lines, so that two threads can parse alternate parts.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Take};
use std::path::{Path, PathBuf};

use crate::error::TraceError;
use crate::open::{open_trace, MAX_RECORD_BYTES};

/// The lines of a file, read in large blocks and handed out in place: no copy per line.
pub(crate) struct Lines<R> {
    source: R,
    buf: Vec<u8>,
    /// `buf[start..end]` is read and not handed out yet.
    start: usize,
    end: usize,
    number: usize,
    at_end: bool,
    /// A longer line is handed out as [`Line::TooLong`], and never held whole.
    limit: usize,
    /// The line being read is already longer than `limit`: its bytes are dropped as they come.
    skipping: bool,
    /// Whether a last line without a newline is handed out. A window that stops inside the
    /// file cuts its last line short: that fragment is no line of the file.
    unterminated_tail: bool,
}

/// One line as [`Lines`] hands it out.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// The line, without its newline.
    Text(&'a [u8]),
    /// A line longer than the limit; its bytes were read past, never kept.
    TooLong,
}

/// Lines are read in blocks of this many bytes (a longer line grows its buffer).
const BLOCK: usize = 64 << 10;

/// A buffer for reading `expected` bytes: a small file (a session's summary reads many) gets
/// one its size, not a block.
pub(crate) fn buffer(expected: u64) -> Vec<u8> {
    let len = usize::try_from(expected.saturating_add(1)).unwrap_or(BLOCK);
    vec![0; len.clamp(64, BLOCK)]
}

impl<R: std::io::Read> Lines<R> {
    /// Lines read into `buf` (not empty), as left by [`Lines::into_buffer`]: the parts of a
    /// file share one buffer rather than each faulting in a new one. A line longer than
    /// `limit` bytes is handed out as [`Line::TooLong`].
    pub(crate) fn with_buffer(source: R, buf: Vec<u8>, limit: usize) -> Self {
        Lines {
            source,
            buf,
            start: 0,
            end: 0,
            number: 0,
            at_end: false,
            limit,
            skipping: false,
            unterminated_tail: true,
        }
    }

    /// Drops a last line that no newline ends, rather than hand it out.
    pub(crate) fn without_unterminated_tail(mut self) -> Self {
        self.unterminated_tail = false;
        self
    }

    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// How many lines were handed out.
    pub(crate) fn number(&self) -> usize {
        self.number
    }

    /// The next line (without its newline) and its 1-based number; the last line may lack a
    /// newline. No more than `limit + 1` bytes of one line are ever held.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<(usize, Line<'_>)>> {
        loop {
            let pending = &self.buf[self.start..self.end];
            if self.skipping {
                if let Some(i) = memchr::memchr(b'\n', pending) {
                    self.start += i + 1;
                    self.skipping = false;
                    self.number += 1;
                    return Ok(Some((self.number, Line::TooLong)));
                }
                self.start = self.end;
                if self.at_end {
                    self.skipping = false;
                    if !self.unterminated_tail {
                        return Ok(None);
                    }
                    self.number += 1;
                    return Ok(Some((self.number, Line::TooLong)));
                }
                self.refill()?;
                continue;
            }
            if let Some(i) = memchr::memchr(b'\n', pending) {
                let line = self.start..self.start + i;
                self.start += i + 1;
                self.number += 1;
                if i > self.limit {
                    return Ok(Some((self.number, Line::TooLong)));
                }
                return Ok(Some((self.number, Line::Text(&self.buf[line]))));
            }
            if pending.len() > self.limit {
                // No newline yet and already too long: read past the rest, keeping none of it.
                self.skipping = true;
                continue;
            }
            if self.at_end {
                if self.start == self.end {
                    return Ok(None);
                }
                let line = self.start..self.end;
                self.start = self.end;
                if !self.unterminated_tail {
                    return Ok(None);
                }
                self.number += 1;
                return Ok(Some((self.number, Line::Text(&self.buf[line]))));
            }
            self.refill()?;
        }
    }

    /// Moves the partial line to the front and reads more after it.
    fn refill(&mut self) -> std::io::Result<()> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        if self.end == self.buf.len() {
            // Never past `limit + 1`: that many bytes without a newline already make the
            // line too long.
            let grown = (self.buf.len() * 2).min(self.limit.saturating_add(1));
            self.buf.resize(grown.max(self.buf.len() + 1), 0);
        } else if self.buf.len() > 4 * BLOCK && self.end < BLOCK {
            // Do not keep a multi-megabyte record's buffer for the rest of the file.
            self.buf.truncate(BLOCK);
            self.buf.shrink_to_fit();
        }
        loop {
            match self.source.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.at_end = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The raw lines of one trace file, for a reader that wants each record's own bytes (the
/// server keeps them as JSON, key order and all) rather than parsed messages.
///
/// The file is opened with [`open_trace`] (a regular file, or an error) and read in blocks;
/// no line longer than [`MAX_RECORD_BYTES`] is ever held: it comes out as
/// [`TraceError::RecordTooLarge`], and the lines after it still come.
pub struct TraceLines {
    path: PathBuf,
    lines: Lines<Take<File>>,
}

impl std::fmt::Debug for TraceLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceLines")
            .field("path", &self.path)
            .field("lines_read", &self.lines.number)
            .finish()
    }
}

impl TraceLines {
    /// Every line of `path`.
    pub fn open(path: &Path) -> Result<TraceLines, TraceError> {
        let file = open_trace(path)?;
        let size = file.metadata().map_or(0, |m| m.len());
        Ok(TraceLines {
            path: path.to_path_buf(),
            lines: Lines::with_buffer(file.take(u64::MAX), buffer(size), MAX_RECORD_BYTES),
        })
    }

    /// The whole lines within the first `max_bytes` of `path`: what a listing reads, however
    /// large the file. A line the window cuts short is not handed out.
    pub fn head(path: &Path, max_bytes: u64) -> Result<TraceLines, TraceError> {
        let file = open_trace(path)?;
        let size = file.metadata().map_or(0, |m| m.len());
        let limit = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let mut lines = Lines::with_buffer(
            file.take(max_bytes),
            buffer(size.min(max_bytes)),
            limit.min(MAX_RECORD_BYTES),
        );
        if size > max_bytes {
            lines = lines.without_unterminated_tail();
        }
        Ok(TraceLines {
            path: path.to_path_buf(),
            lines,
        })
    }

    /// The next line (without its newline) and its 1-based number, or
    /// [`TraceError::RecordTooLarge`] in its place; `Err` when the file cannot be read on.
    /// Blank lines are handed out too: they count in the numbering.
    #[allow(clippy::type_complexity)]
    pub fn next_line(&mut self) -> Result<Option<(usize, Result<&[u8], TraceError>)>, TraceError> {
        let limit = self.lines.limit;
        match self.lines.next_line() {
            Err(e) => Err(TraceError::io(&self.path, e)),
            Ok(None) => Ok(None),
            Ok(Some((number, Line::Text(bytes)))) => Ok(Some((number, Ok(bytes)))),
            Ok(Some((line, Line::TooLong))) => Ok(Some((
                line,
                Err(TraceError::RecordTooLarge {
                    path: self.path.clone(),
                    line,
                    limit,
                }),
            ))),
        }
    }
}

/// Where `file` (`size` bytes) starts its parts: at 0, then at the first line that starts at
/// least `sizes[0]` bytes after an even part's start, `sizes[1]` after an odd one's. Each
/// part but the last ends with a newline; the last runs to the end of the file. A line longer
/// than its part's size makes the part longer.
pub(crate) fn part_starts(
    file: &mut std::fs::File,
    size: u64,
    sizes: [u64; 2],
) -> std::io::Result<Vec<u64>> {
    let mut starts = vec![0];
    // Lines are short: a few KiB usually hold the next newline.
    let mut window = vec![0; 4 << 10];
    let mut near = sizes[0].max(1);
    while near < size {
        // A line starts at `near` when a newline ends the byte before.
        file.seek(SeekFrom::Start(near - 1))?;
        let Some(start) = next_line_start(file, near - 1, &mut window)? else {
            break;
        };
        if start >= size {
            break;
        }
        near = start + sizes[starts.len() % 2].max(1);
        starts.push(start);
    }
    Ok(starts)
}

/// The offset just past the first newline of `file` from `at` (where it is positioned) on.
fn next_line_start(
    file: &mut std::fs::File,
    mut at: u64,
    window: &mut [u8],
) -> std::io::Result<Option<u64>> {
    loop {
        let n = match file.read(window) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => other?,
        };
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = memchr::memchr(b'\n', &window[..n]) {
            return Ok(Some(at + i as u64 + 1));
        }
        at += n as u64;
    }
}

/// The lines of the part of `file` from `start` to `end` (to the end of the file when `None`),
/// read into `buf`, none longer than `limit`.
pub(crate) fn part_lines(
    file: &std::fs::File,
    start: u64,
    end: Option<u64>,
    buf: Vec<u8>,
    limit: usize,
) -> std::io::Result<Lines<std::io::Take<&std::fs::File>>> {
    let mut source = file;
    source.seek(SeekFrom::Start(start))?;
    let len = end.map_or(u64::MAX, |end| end - start);
    Ok(Lines::with_buffer(source.take(len), buf, limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out at most `step` bytes per read, and is interrupted before every other read.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        interrupt: bool,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn all_lines(data: &[u8], step: usize) -> Vec<(usize, Vec<u8>)> {
        let source = Trickle {
            data,
            step,
            interrupt: false,
        };
        let mut lines = Lines::with_buffer(source, buffer(step.min(1000) as u64), usize::MAX);
        let mut out = Vec::new();
        while let Some((n, line)) = lines.next_line().unwrap() {
            let Line::Text(line) = line else {
                panic!("line {n} too long")
            };
            out.push((n, line.to_vec()));
        }
        out
    }

    /// Every line, a too-long one as `None`, reading `step` bytes at a time.
    fn limited_lines(data: &[u8], step: usize, limit: usize) -> Vec<(usize, Option<Vec<u8>>)> {
        let source = Trickle {
            data,
            step,
            interrupt: false,
        };
        let mut lines = Lines::with_buffer(source, vec![0; 3], limit);
        let mut out = Vec::new();
        while let Some((n, line)) = lines.next_line().unwrap() {
            out.push((
                n,
                match line {
                    Line::Text(t) => Some(t.to_vec()),
                    Line::TooLong => None,
                },
            ));
            // Never more than the limit and a block's read of one line is held.
            assert!(lines.buf.len() <= (limit + 1).max(3), "{}", lines.buf.len());
        }
        out
    }

    /// A line longer than the limit comes out as `TooLong` in its place, without its bytes
    /// ever being held; the lines around it come whole, however the reads fall.
    #[test]
    fn a_line_over_the_limit_is_read_past_not_held() {
        let long = "z".repeat(5000);
        let data = format!("ok\n{long}\nexactly10!\n12345678901\nlast{long}");
        let want = vec![
            (1, Some(b"ok".to_vec())),
            (2, None),
            (3, Some(b"exactly10!".to_vec())),
            (4, None),
            (5, None),
        ];
        for step in [1, 7, 4096, usize::MAX] {
            assert_eq!(
                limited_lines(data.as_bytes(), step, 10),
                want,
                "step {step}"
            );
        }
        // An over-long last line that a newline ends is still one line.
        assert_eq!(
            limited_lines(format!("{long}\n").as_bytes(), 64, 10),
            vec![(1, None)]
        );
        let mut cut =
            Lines::with_buffer(&b"whole\ncut sho"[..], vec![0; 4], 100).without_unterminated_tail();
        assert_eq!(
            cut.next_line().unwrap(),
            Some((1, Line::Text(&b"whole"[..])))
        );
        assert_eq!(cut.next_line().unwrap(), None);
    }

    #[test]
    fn lines_come_whole_however_the_reads_fall() {
        let long = "x".repeat(3 * BLOCK + 17);
        let data = format!("a\n\n{long}\nb\r\nlast without newline");
        let want: Vec<(usize, Vec<u8>)> = data
            .split('\n')
            .enumerate()
            .map(|(i, l)| (i + 1, l.as_bytes().to_vec()))
            .collect();
        for step in [1, 7, 4096, usize::MAX] {
            assert_eq!(all_lines(data.as_bytes(), step), want, "step {step}");
        }
        assert!(all_lines(b"", 1).is_empty());
        assert_eq!(all_lines(b"one\n", 1), vec![(1, b"one".to_vec())]);
    }

    /// Parts start at line starts, at least `every` bytes apart, and cover the file.
    #[test]
    fn parts_start_at_lines() {
        let long = "y".repeat(5000);
        let text = format!("a\n\nbb\n{long}\nccc\r\nd\n\n{long}\nlast");
        let dir = std::env::temp_dir().join(format!("penguin-part-starts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        std::fs::write(&path, &text).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let size = text.len() as u64;
        for sizes in [
            [1, 1],
            [2, 2],
            [3, 1],
            [10, 10],
            [4000, 4000],
            [6000, 1],
            [20_000, 20_000],
        ] {
            let starts = part_starts(&mut file, size, sizes).unwrap();
            assert_eq!(starts[0], 0);
            for (i, pair) in starts.windows(2).enumerate() {
                assert!(pair[1] >= pair[0] + sizes[i % 2], "{sizes:?}: {starts:?}");
                assert_eq!(text.as_bytes()[pair[1] as usize - 1], b'\n');
            }
            // Read part by part, the lines are the file's.
            let mut got = Vec::new();
            for (i, &start) in starts.iter().enumerate() {
                let mut lines = part_lines(
                    &file,
                    start,
                    starts.get(i + 1).copied(),
                    vec![0; 7],
                    usize::MAX,
                )
                .unwrap();
                while let Some((_, Line::Text(line))) = lines.next_line().unwrap() {
                    got.push(String::from_utf8(line.to_vec()).unwrap());
                }
            }
            let want: Vec<&str> = text.split('\n').collect();
            assert_eq!(got, want, "{sizes:?}");
        }
        assert_eq!(part_starts(&mut file, size, [1, 1]).unwrap().len(), 9);
        assert_eq!(part_starts(&mut file, size, [size, 1]).unwrap(), [0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
