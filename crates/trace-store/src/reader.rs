//! Reading traces (§3.4): tolerant by default, strict for imports.

use std::io::{BufRead, BufReader};
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
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
        .map(|(i, bytes)| RawLine {
            number: i + 1,
            bytes,
        })
        .collect()
}

pub(crate) fn parse_line(bytes: &[u8]) -> Result<OmniMessage, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("invalid UTF-8: {e}"))?;
    OmniMessage::from_json(text).map_err(|e| e.to_string())
}

/// Classifies lines one at a time. A malformed line is held back until another non-empty line
/// arrives, because only then is it known not to be the last one (a crash artifact).
struct LineSink<'a> {
    mode: ReadMode,
    source: &'a Path,
    out: TraceRead,
    held: Option<SkippedLine>,
}

impl<'a> LineSink<'a> {
    fn new(mode: ReadMode, source: &'a Path) -> Self {
        LineSink {
            mode,
            source,
            out: TraceRead::default(),
            held: None,
        }
    }

    fn push(&mut self, number: usize, bytes: &[u8]) -> Result<(), TraceError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
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
            self.out.skipped.push(prev);
        }
        match parse_line(bytes) {
            Ok(m) => {
                self.out.messages.push(m);
                self.out.line_numbers.push(number);
            }
            Err(error) => {
                self.held = Some(SkippedLine {
                    line: number,
                    error,
                })
            }
        }
        Ok(())
    }

    fn finish(mut self) -> TraceRead {
        self.out.torn_tail = self.held;
        self.out
    }
}

/// Parses trace content (`parseTraceLines`). `source` only names the file in errors.
pub fn parse_trace_lines(
    content: &[u8],
    mode: ReadMode,
    source: &Path,
) -> Result<TraceRead, TraceError> {
    let mut sink = LineSink::new(mode, source);
    for (i, line) in content.split(|&b| b == b'\n').enumerate() {
        sink.push(i + 1, line)?;
    }
    Ok(sink.finish())
}

/// Reads and parses a trace file, one line at a time (memory is bounded by the records, not the
/// file).
///
/// In tolerant mode, skipped middle lines are logged once (`tracing::warn!`), in the reference's
/// words: `[trace] skipped K malformed line(s) [l1, l2, …] in <path>`.
pub fn read_trace(path: &Path, mode: ReadMode) -> Result<TraceRead, TraceError> {
    let file = std::fs::File::open(path).map_err(|e| TraceError::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut sink = LineSink::new(mode, path);
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| TraceError::io(path, e))?;
        if n == 0 {
            break;
        }
        number += 1;
        let bytes = line.strip_suffix(b"\n").unwrap_or(&line);
        sink.push(number, bytes)?;
        if line.capacity() > 1 << 20 {
            // Do not keep a multi-megabyte record's buffer for the rest of the file.
            line = Vec::new();
        }
    }
    let read = sink.finish();
    if !read.skipped.is_empty() {
        tracing::warn!("{}", skipped_diagnostic(&read.skipped, path));
    }
    Ok(read)
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
