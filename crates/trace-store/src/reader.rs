//! Reading traces (§3.4): tolerant by default, strict for imports.

use std::path::{Path, PathBuf};

use penguin_omni_protocol::OmniMessage;

use crate::error::TraceError;

/// How malformed lines are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Skip malformed middle lines (reported in [`TraceRead::skipped`] and logged once); keep
    /// every parseable record.
    #[default]
    Tolerant,
    /// Fail on the first malformed middle line with [`TraceError::Malformed`] (file and line).
    ///
    /// Like the reference's `"throw"` mode, a malformed *last* line is still treated as a crash
    /// artifact and only reported in [`TraceRead::torn_tail`]; a caller that must reject even
    /// that checks the field.
    Strict,
}

/// A malformed line that was skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedLine {
    /// 1-based line number.
    pub line: usize,
    /// Why it did not parse.
    pub error: String,
}

/// The records of a trace file.
#[derive(Clone, Debug, Default)]
pub struct TraceRead {
    /// Every parseable record, in file order.
    pub messages: Vec<OmniMessage>,
    /// The 1-based line number of each record in `messages`.
    pub line_numbers: Vec<usize>,
    /// Malformed lines other than the last one (tolerant mode only).
    pub skipped: Vec<SkippedLine>,
    /// The last non-empty line, when it failed to parse: a write cut short by a crash.
    pub torn_tail: Option<SkippedLine>,
}

/// One physical line, before parsing.
pub(crate) struct RawLine<'a> {
    pub(crate) number: usize,
    pub(crate) bytes: &'a [u8],
}

/// Non-blank lines with their 1-based numbers. Splitting bytes rather than a `str` keeps a record
/// cut inside a multi-byte character confined to its own line.
pub(crate) fn raw_lines(content: &[u8]) -> Vec<RawLine<'_>> {
    content
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !is_blank(l))
        .map(|(i, bytes)| RawLine {
            number: i + 1,
            bytes,
        })
        .collect()
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

pub(crate) fn parse_line(bytes: &[u8]) -> Result<OmniMessage, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
    OmniMessage::from_json(text).map_err(|e| e.to_string())
}

/// What reading a trace found besides its records.
#[derive(Clone, Debug, Default)]
pub struct ReadReport {
    /// Malformed lines other than the last one (tolerant mode only).
    pub skipped: Vec<SkippedLine>,
    /// The last non-empty line, when it failed to parse: a write cut short by a crash.
    pub torn_tail: Option<SkippedLine>,
}

impl ReadReport {
    /// Logs skipped middle lines once (`tracing::warn!`), in the reference's words:
    /// `[trace] skipped K malformed line(s) [l1, l2, …] in <path>`.
    pub fn warn_skipped(&self, path: &Path) {
        if !self.skipped.is_empty() {
            tracing::warn!("{}", skipped_diagnostic(&self.skipped, path));
        }
    }
}

/// Classifies lines one at a time, handing each record on as it parses. A malformed line is
/// held back until another non-empty line arrives, because only then is it known not to be
/// the last one (a crash artifact).
struct LineSink<'a, F> {
    mode: ReadMode,
    source: &'a Path,
    on_record: F,
    report: ReadReport,
    held: Option<SkippedLine>,
}

impl<'a, F: FnMut(usize, OmniMessage)> LineSink<'a, F> {
    fn new(mode: ReadMode, source: &'a Path, on_record: F) -> Self {
        LineSink {
            mode,
            source,
            on_record,
            report: ReadReport::default(),
            held: None,
        }
    }

    fn push(&mut self, number: usize, bytes: &[u8]) -> Result<(), TraceError> {
        if is_blank(bytes) {
            return Ok(());
        }
        if let Some(prev) = self.held.take() {
            if self.mode == ReadMode::Strict {
                return Err(TraceError::Malformed {
                    path: self.source.to_path_buf(),
                    line: prev.line,
                    message: prev.error,
                });
            }
            self.report.skipped.push(prev);
        }
        match parse_line(bytes) {
            Ok(m) => (self.on_record)(number, m),
            Err(error) => {
                self.held = Some(SkippedLine {
                    line: number,
                    error,
                })
            }
        }
        Ok(())
    }

    fn finish(mut self) -> ReadReport {
        self.report.torn_tail = self.held;
        self.report
    }
}

/// Collects every record with its line number.
fn collect(read: &mut TraceRead) -> impl FnMut(usize, OmniMessage) + '_ {
    |number, m| {
        read.messages.push(m);
        read.line_numbers.push(number);
    }
}

impl TraceRead {
    fn with_report(mut self, report: ReadReport) -> Self {
        self.skipped = report.skipped;
        self.torn_tail = report.torn_tail;
        self
    }
}

/// Parses trace content (`parseTraceLines`). `source` only names the file in errors.
pub fn parse_trace_lines(
    content: &[u8],
    mode: ReadMode,
    source: &Path,
) -> Result<TraceRead, TraceError> {
    let mut read = TraceRead::default();
    let mut sink = LineSink::new(mode, source, collect(&mut read));
    for (i, line) in content.split(|&b| b == b'\n').enumerate() {
        sink.push(i + 1, line)?;
    }
    let report = sink.finish();
    Ok(read.with_report(report))
}

/// Reads and parses a trace file, one line at a time (memory is bounded by the records, not the
/// file).
///
/// In tolerant mode, skipped middle lines are logged once ([`ReadReport::warn_skipped`]).
pub fn read_trace(path: &Path, mode: ReadMode) -> Result<TraceRead, TraceError> {
    let mut read = TraceRead::default();
    let report = read_trace_each(path, mode, collect(&mut read))?;
    report.warn_skipped(path);
    Ok(read.with_report(report))
}

/// Reads a trace file one line at a time and hands each record, with its 1-based line number,
/// to `on_record` as soon as it parses: a caller that keeps only some records (resume keeps
/// the context) never holds the whole file's. Nothing is logged; see
/// [`ReadReport::warn_skipped`].
pub fn read_trace_each(
    path: &Path,
    mode: ReadMode,
    on_record: impl FnMut(usize, OmniMessage),
) -> Result<ReadReport, TraceError> {
    let file = std::fs::File::open(path).map_err(|e| TraceError::io(path, e))?;
    // A small file (a session's summary reads many) gets a buffer its size, not a block.
    let size = file.metadata().map_or(0, |m| m.len());
    let mut sink = LineSink::new(mode, path, on_record);
    let mut lines = Lines::new(file, usize::try_from(size).unwrap_or(usize::MAX));
    while let Some((number, line)) = lines.next_line().map_err(|e| TraceError::io(path, e))? {
        sink.push(number, line)?;
    }
    Ok(sink.finish())
}

/// The lines of a file, read in large blocks and handed out in place: no copy per line.
struct Lines<R> {
    source: R,
    buf: Vec<u8>,
    /// `buf[start..end]` is read and not handed out yet.
    start: usize,
    end: usize,
    number: usize,
    at_end: bool,
}

impl<R: std::io::Read> Lines<R> {
    const BLOCK: usize = 256 << 10;

    /// `size`: the bytes expected, for a first buffer no larger than needed.
    fn new(source: R, size: usize) -> Self {
        Lines {
            source,
            buf: vec![0; size.saturating_add(1).clamp(64, Self::BLOCK)],
            start: 0,
            end: 0,
            number: 0,
            at_end: false,
        }
    }

    /// The next line (without its newline) and its 1-based number; the last line may lack a
    /// newline.
    fn next_line(&mut self) -> std::io::Result<Option<(usize, &[u8])>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let line = self.start..self.start + i;
                self.start += i + 1;
                self.number += 1;
                return Ok(Some((self.number, &self.buf[line])));
            }
            if self.at_end {
                if self.start == self.end {
                    return Ok(None);
                }
                let line = self.start..self.end;
                self.start = self.end;
                self.number += 1;
                return Ok(Some((self.number, &self.buf[line])));
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
            self.buf.resize(self.buf.len() * 2, 0);
        } else if self.buf.len() > 4 * Self::BLOCK && self.end < Self::BLOCK {
            // Do not keep a multi-megabyte record's buffer for the rest of the file.
            self.buf.truncate(Self::BLOCK);
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

/// `readTraceTolerant`: the parseable records of `path`.
pub fn read_trace_tolerant(path: &Path) -> Result<Vec<OmniMessage>, TraceError> {
    Ok(read_trace(path, ReadMode::Tolerant)?.messages)
}

/// The one-line diagnostic for skipped lines; at most 20 line numbers are listed.
pub fn skipped_diagnostic(skipped: &[SkippedLine], path: &Path) -> String {
    let mut nums: Vec<String> = skipped
        .iter()
        .take(20)
        .map(|s| s.line.to_string())
        .collect();
    if skipped.len() > 20 {
        nums.push("…".into());
    }
    format!(
        "[trace] skipped {} malformed line(s) [{}] in {}",
        skipped.len(),
        nums.join(", "),
        PathBuf::from(path).display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    fn line(m: &OmniMessage) -> String {
        m.to_json() + "\n"
    }

    #[test]
    fn tolerant_skips_middle_and_ignores_torn_tail() {
        let a = build::user_text("a");
        let b = build::assistant_text("b", StopReason::Completed);
        let content = format!(
            "{}{{broken\n\n{}{{\"timestamp\":\"x\",\"ty",
            line(&a),
            line(&b)
        );
        let r = parse_trace_lines(content.as_bytes(), ReadMode::Tolerant, Path::new("f.jsonl"))
            .unwrap();
        assert_eq!(r.messages, vec![a.clone(), b.clone()]);
        assert_eq!(r.line_numbers, vec![1, 4]);
        assert_eq!(r.skipped.len(), 1);
        assert_eq!(r.skipped[0].line, 2);
        assert_eq!(r.torn_tail.as_ref().map(|t| t.line), Some(5));
        assert_eq!(
            skipped_diagnostic(&r.skipped, Path::new("f.jsonl")),
            "[trace] skipped 1 malformed line(s) [2] in f.jsonl"
        );

        let err = parse_trace_lines(content.as_bytes(), ReadMode::Strict, Path::new("f.jsonl"))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("f.jsonl:2: malformed record: invalid JSON"),
            "{text}"
        );
    }

    #[test]
    fn a_valid_json_line_that_is_not_a_message_is_malformed() {
        let a = build::user_text("a");
        let content = format!("{{\"type\":\"model_msg\"}}\n{}", line(&a));
        let err =
            parse_trace_lines(content.as_bytes(), ReadMode::Strict, Path::new("t")).unwrap_err();
        assert!(
            err.to_string()
                .contains("t:1: malformed record: timestamp: missing"),
            "{err}"
        );
    }

    #[test]
    fn torn_utf8_stays_on_its_line() {
        let a = build::user_text("héllo");
        let json = line(&a);
        let cut = json.find('é').unwrap() + 1;
        let mut content = json.as_bytes()[..cut].to_vec();
        content.push(b'\n');
        content.extend_from_slice(json.as_bytes());
        let r = parse_trace_lines(&content, ReadMode::Tolerant, Path::new("t")).unwrap();
        assert_eq!(r.messages, vec![a]);
        assert_eq!(r.skipped[0].line, 1);
        assert!(r.skipped[0].error.contains("UTF-8"), "{:?}", r.skipped);
    }

    #[test]
    fn more_than_twenty_skipped_lines_are_elided() {
        let skipped: Vec<SkippedLine> = (1..=25)
            .map(|line| SkippedLine {
                line,
                error: String::new(),
            })
            .collect();
        let d = skipped_diagnostic(&skipped, Path::new("p"));
        assert!(
            d.starts_with("[trace] skipped 25 malformed line(s) [1, 2,"),
            "{d}"
        );
        assert!(d.ends_with("19, 20, …] in p"), "{d}");
    }
}

#[cfg(test)]
mod block_tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

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
        let mut lines = Lines::new(
            Trickle {
                data,
                step,
                interrupt: false,
            },
            step.min(1000),
        );
        let mut out = Vec::new();
        while let Some((n, line)) = lines.next_line().unwrap() {
            out.push((n, line.to_vec()));
        }
        out
    }

    #[test]
    fn lines_come_whole_however_the_reads_fall() {
        let long = "x".repeat(3 * Lines::<&[u8]>::BLOCK + 17);
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

    /// A file read from disk in blocks reads exactly as the same text parsed in memory: the
    /// same records and line numbers, the same skipped lines and torn tail.
    #[test]
    fn a_file_reads_as_its_text_parses() {
        let mut text = String::new();
        for i in 0..3000 {
            let m = if i % 100 == 7 {
                build::tool_call_output("o".repeat(600_000), format!("c{i}"), StopReason::Completed)
            } else {
                build::user_text(format!("line {i}"))
            };
            text.push_str(&m.to_json());
            text.push('\n');
            if i % 500 == 3 {
                text.push_str("{not json\n\n");
            }
        }
        text.push_str(r#"{"timestamp":"t","ty"#);
        let dir = std::env::temp_dir().join(format!("penguin-blocks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, &text).unwrap();
        let from_file = read_trace(&path, ReadMode::Tolerant).unwrap();
        let from_text = parse_trace_lines(text.as_bytes(), ReadMode::Tolerant, &path).unwrap();
        assert_eq!(from_file.messages, from_text.messages);
        assert_eq!(from_file.line_numbers, from_text.line_numbers);
        assert_eq!(from_file.skipped, from_text.skipped);
        assert_eq!(from_file.skipped.len(), 6);
        assert_eq!(from_file.torn_tail, from_text.torn_tail);
        assert!(from_file.torn_tail.is_some());
        let strict = read_trace(&path, ReadMode::Strict).unwrap_err().to_string();
        assert_eq!(
            strict,
            parse_trace_lines(text.as_bytes(), ReadMode::Strict, &path)
                .unwrap_err()
                .to_string()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
