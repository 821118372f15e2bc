//! Reading traces (protocol [§3.4](penguin_omni_protocol::spec#s3.4) *Reading*): tolerant by
//! default, strict for imports.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;

use penguin_omni_protocol::OmniMessage;

use crate::error::TraceError;
use crate::lines::{buffer, part_lines, part_starts, Line, Lines};
use crate::open::{open_trace, MAX_RECORD_BYTES};

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
    /// that checks the field. A line over [`MAX_RECORD_BYTES`] fails wherever it is
    /// ([`TraceError::RecordTooLarge`]).
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

pub(crate) fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// A non-blank line, parsed.
pub(crate) enum Parsed {
    Record(OmniMessage),
    Malformed(String),
    /// Longer than the reader's limit: never held, never parsed.
    TooLong,
}

impl Parsed {
    /// `None` for a blank line. Splitting bytes rather than a `str` keeps a record cut inside a
    /// multi-byte character confined to its own line.
    pub(crate) fn of(line: Line<'_>) -> Option<Parsed> {
        match line {
            Line::TooLong => Some(Parsed::TooLong),
            Line::Text(bytes) if is_blank(bytes) => None,
            Line::Text(bytes) => Some(match parse_line(bytes) {
                Ok(m) => Parsed::Record(m),
                Err(e) => Parsed::Malformed(e),
            }),
        }
    }
}

/// What a skipped over-long line is reported as (the file is named beside it).
pub(crate) fn too_long(limit: usize) -> String {
    format!("record longer than {limit} bytes (MAX_RECORD_BYTES); refused unread")
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
    /// Lines longer than this are refused.
    limit: usize,
    on_record: F,
    report: ReadReport,
    held: Option<SkippedLine>,
}

impl<'a, F: FnMut(usize, OmniMessage)> LineSink<'a, F> {
    fn new(mode: ReadMode, source: &'a Path, limit: usize, on_record: F) -> Self {
        LineSink {
            mode,
            source,
            limit,
            on_record,
            report: ReadReport::default(),
            held: None,
        }
    }

    fn push(&mut self, number: usize, line: Line<'_>) -> Result<(), TraceError> {
        match Parsed::of(line) {
            Some(parsed) => self.take(number, parsed),
            None => Ok(()),
        }
    }

    /// A non-blank line, parsed.
    fn take(&mut self, number: usize, parsed: Parsed) -> Result<(), TraceError> {
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
        match parsed {
            Parsed::Record(m) => (self.on_record)(number, m),
            Parsed::Malformed(error) => {
                self.held = Some(SkippedLine {
                    line: number,
                    error,
                })
            }
            Parsed::TooLong if self.mode == ReadMode::Strict => {
                return Err(TraceError::RecordTooLarge {
                    path: self.source.to_path_buf(),
                    line: number,
                    limit: self.limit,
                })
            }
            // Like a malformed line: skipped in the middle, a torn tail at the end.
            Parsed::TooLong => {
                self.held = Some(SkippedLine {
                    line: number,
                    error: too_long(self.limit),
                })
            }
        }
        Ok(())
    }

    /// Every line `lines` gives, in order, numbered after the `before` lines already read; the
    /// number of lines it gave, and its buffer back.
    fn push_all(
        &mut self,
        mut lines: Lines<impl Read>,
        before: usize,
    ) -> Result<(usize, Vec<u8>), TraceError> {
        while let Some((number, line)) = lines.next_line().map_err(|e| self.io(e))? {
            self.push(before + number, line)?;
        }
        Ok((lines.number(), lines.into_buffer()))
    }

    fn io(&self, e: std::io::Error) -> TraceError {
        TraceError::io(self.source, e)
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

/// Parses trace content (`parseTraceLines`). `source` only names the file in errors. A line
/// over [`MAX_RECORD_BYTES`] is refused as [`read_trace`] refuses it, so both read the same.
pub fn parse_trace_lines(
    content: &[u8],
    mode: ReadMode,
    source: &Path,
) -> Result<TraceRead, TraceError> {
    parse_lines_within(content, mode, source, MAX_RECORD_BYTES)
}

/// [`parse_trace_lines`] with lines over `limit` refused.
fn parse_lines_within(
    content: &[u8],
    mode: ReadMode,
    source: &Path,
    limit: usize,
) -> Result<TraceRead, TraceError> {
    let mut read = TraceRead::default();
    let mut sink = LineSink::new(mode, source, limit, collect(&mut read));
    for (i, line) in content.split(|&b| b == b'\n').enumerate() {
        let line = match line.len() > limit {
            true => Line::TooLong,
            false => Line::Text(line),
        };
        sink.push(i + 1, line)?;
    }
    let report = sink.finish();
    Ok(read.with_report(report))
}

/// Reads and parses a trace file, one line at a time (memory is bounded by the records, not the
/// file).
///
/// The file is opened with [`open_trace`](crate::open_trace): anything but a regular file is
/// refused. A line over [`MAX_RECORD_BYTES`] is read past without being held: skipped (and
/// reported in [`TraceRead::skipped`], or as the torn tail when it is last) in tolerant mode,
/// [`TraceError::RecordTooLarge`] in strict mode.
///
/// In tolerant mode, skipped middle lines are logged once ([`ReadReport::warn_skipped`]).
pub fn read_trace(path: &Path, mode: ReadMode) -> Result<TraceRead, TraceError> {
    let mut read = TraceRead::default();
    let report = read_trace_each(path, mode, collect(&mut read))?;
    report.warn_skipped(path);
    Ok(read.with_report(report))
}

/// Reads a trace file and hands each record, in file order and with its 1-based line number,
/// to `on_record` as soon as its turn comes: a caller that keeps only some records (resume
/// keeps the context) never holds the whole file's. A large file is parsed in parts on two
/// threads (parts of about half a MiB); `on_record` is only ever called on the calling thread.
/// Files and over-long lines are treated as [`read_trace`] treats them.
/// Nothing is logged; see [`ReadReport::warn_skipped`].
pub fn read_trace_each(
    path: &Path,
    mode: ReadMode,
    on_record: impl FnMut(usize, OmniMessage),
) -> Result<ReadReport, TraceError> {
    read_each(path, mode, on_record, PARTS, MAX_RECORD_BYTES)
}

/// A file is parsed in parts of about these many bytes, alternately here (even parts) and on
/// a second thread (odd parts): parsing is most of a resume, and the second core is otherwise
/// idle then. This thread's parts are smaller, as it also takes every record the other parsed.
/// The second thread's records wait for their turn, so it keeps at most two parts' worth:
/// parts are small enough that this is little beside the context a resume keeps.
const PARTS: [u64; 2] = [416 << 10, 608 << 10];

/// The records of the parts [`read_each`]'s second thread parsed, or why it stopped.
type PartParsed = std::io::Result<PartRecords>;

/// The non-blank lines of one part, parsed and numbered from the part's start, and how many
/// lines the part has.
struct PartRecords {
    records: Vec<(usize, Parsed)>,
    lines: usize,
}

/// [`read_trace_each`] with even parts of about `parts[0]` bytes, odd ones of `parts[1]`, and
/// lines over `limit` refused.
fn read_each(
    path: &Path,
    mode: ReadMode,
    on_record: impl FnMut(usize, OmniMessage),
    parts: [u64; 2],
    limit: usize,
) -> Result<ReadReport, TraceError> {
    let io = |e| TraceError::io(path, e);
    let mut file = open_trace(path)?;
    let size = file.metadata().map_or(0, |m| m.len());
    let mut sink = LineSink::new(mode, path, limit, on_record);
    let starts = if size >= parts[0] + parts[1] {
        part_starts(&mut file, size, parts).map_err(io)?
    } else {
        vec![0]
    };
    std::thread::scope(|s| {
        let (to_main, parsed) = std::sync::mpsc::sync_channel::<PartParsed>(1);
        let starts = &starts;
        let second = (starts.len() > 1)
            .then(|| {
                std::thread::Builder::new()
                    .name("penguin-trace-read".into())
                    .spawn_scoped(s, move || {
                        parse_odd_parts(path, starts, parts[1], limit, &to_main)
                    })
                    .ok()
            })
            .flatten();
        let Some(second) = second else {
            // One part, or no thread for a second: the whole file here, to its end.
            sink.push_all(
                part_lines(&file, 0, None, buffer(size), limit).map_err(io)?,
                0,
            )?;
            return Ok(sink.finish());
        };
        let mut buf = buffer(parts[0]);
        let mut before = 0;
        for (i, &start) in starts.iter().enumerate() {
            if i % 2 == 0 {
                let end = starts.get(i + 1).copied();
                let lines = part_lines(&file, start, end, buf, limit).map_err(io)?;
                let (count, back) = sink.push_all(lines, before)?;
                buf = back;
                before += count;
                continue;
            }
            let Ok(part) = parsed.recv() else {
                // It stopped without a word: it panicked.
                if let Err(panic) = second.join() {
                    std::panic::resume_unwind(panic);
                }
                return Err(io(std::io::Error::other(
                    "the second reading thread stopped",
                )));
            };
            let part = part.map_err(io)?;
            for (number, record) in part.records {
                sink.take(before + number, record)?;
            }
            before += part.lines;
        }
        Ok(sink.finish())
    })
}

/// One part's lines, parsed; its buffer back.
fn parse_part(mut lines: Lines<impl Read>) -> std::io::Result<(PartRecords, Vec<u8>)> {
    let mut records = Vec::new();
    while let Some((number, line)) = lines.next_line()? {
        if let Some(parsed) = Parsed::of(line) {
            records.push((number, parsed));
        }
    }
    let part = PartRecords {
        records,
        lines: lines.number(),
    };
    Ok((part, lines.into_buffer()))
}

/// Parses parts 1, 3, 5, … of the file and hands each over as it is done; stops at the first
/// error, or when the reader no longer wants them.
fn parse_odd_parts(
    path: &Path,
    starts: &[u64],
    part: u64,
    limit: usize,
    to_main: &SyncSender<PartParsed>,
) {
    // A second descriptor of the same file: the first one's offset is the other thread's.
    // Opened as `open_trace` opens, though the file was already checked.
    let file = match open_trace(path).map_err(|e| std::io::Error::other(e.to_string())) {
        Ok(file) => file,
        Err(e) => {
            let _ = to_main.send(Err(e));
            return;
        }
    };
    let mut buf = buffer(part);
    for i in (1..starts.len()).step_by(2) {
        let end = starts.get(i + 1).copied();
        let parsed =
            part_lines(&file, starts[i], end, std::mem::take(&mut buf), limit).and_then(|lines| {
                let (part, back) = parse_part(lines)?;
                buf = back;
                Ok(part)
            });
        let failed = parsed.is_err();
        if to_main.send(parsed).is_err() || failed {
            return;
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

    /// A line over the limit is refused without being held: the tolerant reader skips it as
    /// it skips a broken line (keeping every record before and after it, and reporting its
    /// line), the strict one fails naming file, line and limit.
    #[test]
    fn a_record_over_the_limit_is_skipped_or_refused_by_name() {
        let a = build::user_text("a");
        let b = build::assistant_text("b", StopReason::Completed);
        let big = build::user_text("x".repeat(5000));
        let file = tempfile::NamedTempFile::new().unwrap();
        let path = file.path();
        std::fs::write(path, format!("{}{}{}", line(&a), line(&big), line(&b))).unwrap();
        let limit = 1000;
        for parts in [PARTS, [1, 1]] {
            let mut read = TraceRead::default();
            let report =
                read_each(path, ReadMode::Tolerant, collect(&mut read), parts, limit).unwrap();
            let read = read.with_report(report);
            assert_eq!(read.messages, vec![a.clone(), b.clone()]);
            assert_eq!(read.line_numbers, vec![1, 3]);
            assert_eq!(
                read.skipped,
                vec![SkippedLine {
                    line: 2,
                    error: "record longer than 1000 bytes (MAX_RECORD_BYTES); refused unread"
                        .into()
                }]
            );
            assert!(read.torn_tail.is_none());
            let err = read_each(path, ReadMode::Strict, |_, _| {}, parts, limit).unwrap_err();
            assert!(
                matches!(
                    err,
                    TraceError::RecordTooLarge {
                        line: 2,
                        limit: 1000,
                        ..
                    }
                ),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "{}:2: record longer than 1000 bytes (MAX_RECORD_BYTES); refused unread",
                    path.display()
                )
            );
        }
        // As the last line it is a torn tail, like any line that does not parse there.
        std::fs::write(path, format!("{}{}", line(&a), line(&big))).unwrap();
        let mut read = TraceRead::default();
        let report = read_each(path, ReadMode::Tolerant, collect(&mut read), PARTS, limit).unwrap();
        assert_eq!(read.messages, vec![a.clone()]);
        assert_eq!(report.torn_tail.map(|t| t.line), Some(2));
        // The default limit lets it through.
        assert_eq!(
            read_trace(path, ReadMode::Strict).unwrap().messages,
            vec![a, big]
        );
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
mod file_tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

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

    /// However a file is cut into parts, and whichever thread parses each, it reads exactly
    /// as its whole text parses: records, line numbers, skipped lines, torn tail, the strict
    /// error; also when its longest lines are over the record limit.
    #[test]
    fn parts_read_as_the_whole_text_wherever_they_fall() {
        let good = |i: usize| build::user_text(format!("line {i}")).to_json();
        let mut text = String::new();
        for i in 0..40 {
            match i % 9 {
                2 => text.push_str("{broken\n"),
                4 => text.push_str("\n   \n"),
                6 => text.push_str(&format!("{}\r\n", good(i))),
                8 => text.push_str(&format!(
                    "{}\n",
                    build::tool_call_output("x".repeat(300), "c", StopReason::Completed).to_json()
                )),
                _ => text.push_str(&format!("{}\n", good(i))),
            }
        }
        let dir = std::env::temp_dir().join(format!("penguin-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tails = [("torn", r#"{"timestamp":"t","ty"#), ("whole", "\n\n")];
        for ((name, tail), limit) in tails
            .into_iter()
            .flat_map(|t| [(t, MAX_RECORD_BYTES), (t, 250)])
        {
            let text = format!("{text}{tail}");
            let path = dir.join(format!("{name}.jsonl"));
            std::fs::write(&path, &text).unwrap();
            let want =
                parse_lines_within(text.as_bytes(), ReadMode::Tolerant, &path, limit).unwrap();
            let strict = parse_lines_within(text.as_bytes(), ReadMode::Strict, &path, limit)
                .unwrap_err()
                .to_string();
            for parts in [
                [1, 1],
                [2, 3],
                [7, 7],
                [50, 20],
                [200, 200],
                [1000, 1000],
                [100_000, 1],
            ] {
                let mut read = TraceRead::default();
                let report =
                    read_each(&path, ReadMode::Tolerant, collect(&mut read), parts, limit).unwrap();
                let read = read.with_report(report);
                let at = format!("{name} {parts:?} {limit}");
                assert_eq!(read.messages, want.messages, "{at}");
                assert_eq!(read.line_numbers, want.line_numbers, "{at}");
                assert_eq!(read.skipped, want.skipped, "{at}");
                assert_eq!(read.torn_tail, want.torn_tail, "{at}");
                let err = read_each(&path, ReadMode::Strict, |_, _| {}, parts, limit).unwrap_err();
                assert_eq!(err.to_string(), strict, "{at}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn line_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            4 => "[a-z \"\\\\é]{0,40}".prop_map(|t| build::user_text(t).to_json()),
            1 => (1usize..3000).prop_map(|n| build::user_text("w".repeat(n)).to_json()),
            1 => Just("{broken".to_owned()),
            1 => Just(String::new()),
            1 => Just("  \r".to_owned()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Whatever the lines, however the file is cut into parts and whichever thread parses
        /// each, records reach the caller in file order with their line numbers, as the
        /// file's text parses.
        #[test]
        fn any_file_reads_as_its_text_parses_however_it_is_cut(
            lines in proptest::collection::vec(line_strategy(), 0..40),
            newline_at_end: bool,
            even in 1u64..600,
            odd in 1u64..600,
            limit in 40usize..4000,
        ) {
            let mut text = lines.join("\n");
            if newline_at_end {
                text.push('\n');
            }
            let file = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(file.path(), &text).unwrap();
            let path = file.path();
            let want = parse_lines_within(text.as_bytes(), ReadMode::Tolerant, path, limit).unwrap();
            let mut read = TraceRead::default();
            let report =
                read_each(path, ReadMode::Tolerant, collect(&mut read), [even, odd], limit).unwrap();
            let read = read.with_report(report);
            proptest::prop_assert_eq!(&read.messages, &want.messages);
            proptest::prop_assert_eq!(&read.line_numbers, &want.line_numbers);
            proptest::prop_assert_eq!(&read.skipped, &want.skipped);
            proptest::prop_assert_eq!(&read.torn_tail, &want.torn_tail);
            let strict = |r: Result<ReadReport, TraceError>| r.map(|_| ()).map_err(|e| e.to_string());
            proptest::prop_assert_eq!(
                strict(read_each(path, ReadMode::Strict, |_, _| {}, [even, odd], limit)),
                parse_lines_within(text.as_bytes(), ReadMode::Strict, path, limit)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            );
        }
    }
}
