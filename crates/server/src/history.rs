//! Reading a session's history from its trace files ([§5.7](penguin_omni_protocol::spec#s5.7)
//! *`/messages` and the live tail*).

use std::collections::HashSet;
use std::path::PathBuf;

use penguin_trace_store::{TraceError, TraceLines};
use serde_json::{json, Value};

use crate::api::PageInfo;

/// How many trailing history messages a pending hold is compared against.
pub const PENDING_WINDOW: usize = 50;

/// One trace file of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFile {
    /// The file.
    pub path: PathBuf,
    /// Its `NNN`.
    pub index: u32,
}

/// Every record of every file, in order, each with `tracePosition: {fileIndex, ordinal}`.
///
/// Records are kept as parsed JSON (key order preserved) rather than re-encoded from typed
/// messages, so with `tracePosition` removed they are byte-identical to what was streamed: the
/// client's dedup depends on it. Unparseable lines (a torn tail) are skipped, and so are lines
/// over [`MAX_RECORD_BYTES`](penguin_trace_store::MAX_RECORD_BYTES), read past without being
/// held (logged, naming file, line and limit). A file that is not a regular file fails the
/// read with [`TraceError::NotRegularFile`]'s message.
pub fn read_history(files: &[TraceFile]) -> std::io::Result<Vec<Value>> {
    let mut out = Vec::new();
    for file in files {
        let mut lines = match TraceLines::open(&file.path) {
            Ok(lines) => lines,
            // Deleted between listing and reading.
            Err(TraceError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                continue
            }
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        };
        let mut ordinal = 0u64;
        while let Some((_, line)) = lines
            .next_line()
            .map_err(|e| std::io::Error::other(e.to_string()))?
        {
            let line = match line {
                Ok(line) => line,
                Err(too_large) => {
                    tracing::warn!("[server] {too_large}");
                    continue;
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            obj.insert(
                "tracePosition".into(),
                json!({"fileIndex": file.index, "ordinal": ordinal}),
            );
            ordinal += 1;
            out.push(Value::Object(obj));
        }
    }
    Ok(out)
}

/// How deep subagent pointers are expanded (the reference's cap).
pub const EXPANSION_DEPTH: usize = 4;

/// Replaces each `subagent` pointer with the child session's records, each tagged with the
/// child's id prepended to `origin` (the same shape the live forwarded copy had), recursively up
/// to [`EXPANSION_DEPTH`] and never through an ancestor. A pointer whose child trace is missing
/// stays as it is. Expanded records carry no `tracePosition`.
pub fn expand_subagents(
    files_of: &dyn Fn(&str) -> Vec<TraceFile>,
    messages: Vec<Value>,
    ancestors: &mut Vec<String>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    for msg in messages {
        let child = (msg.get("type").and_then(Value::as_str) == Some("event_msg")
            && msg.pointer("/payload/type").and_then(Value::as_str) == Some("subagent"))
        .then(|| {
            msg.pointer("/payload/session_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .flatten()
        .filter(|id| !ancestors.contains(id) && ancestors.len() < EXPANSION_DEPTH);
        let records = child.as_ref().and_then(|id| {
            let files = Some(files_of(id)).filter(|f| !f.is_empty())?;
            read_history(&files).ok()
        });
        let (Some(id), Some(records)) = (child, records) else {
            out.push(msg);
            continue;
        };
        ancestors.push(id.clone());
        let records: Vec<Value> = records
            .into_iter()
            .map(|mut r| {
                if let Value::Object(o) = &mut r {
                    o.remove("tracePosition");
                }
                r
            })
            .collect();
        for mut r in expand_subagents(files_of, records, ancestors) {
            if let Value::Object(o) = &mut r {
                // `origin` goes last, as `withOrigin` puts it.
                let mut chain = vec![Value::String(id.clone())];
                if let Some(Value::Array(old)) = o.remove("origin") {
                    chain.extend(old);
                }
                o.insert("origin".into(), Value::Array(chain));
            }
            out.push(r);
        }
        ancestors.pop();
    }
    out
}

/// Appends each pending message that the last [`PENDING_WINDOW`] history messages do not hold
/// (compared by JSON without `tracePosition`).
pub fn append_missing(messages: &mut Vec<Value>, pending: impl IntoIterator<Item = String>) {
    let start = messages.len().saturating_sub(PENDING_WINDOW);
    let mut seen: HashSet<String> = messages[start..]
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Value::Object(o) = &mut m {
                o.shift_remove("tracePosition");
            }
            m.to_string()
        })
        .collect();
    for json in pending {
        if seen.contains(&json) {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<Value>(&json) {
            messages.push(v);
            seen.insert(json);
        }
    }
}

/// Which part of the history `/messages` answers with ([§5.7](penguin_omni_protocol::spec#s5.7)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Everything, pending holds included.
    All,
    /// The last N units, pending holds included.
    Tail(usize),
    /// The units recorded before a trace position, at most `limit` of them (the newest).
    Before {
        /// Only records strictly before this position.
        position: TracePosition,
        /// At most this many units (the newest); all when absent.
        limit: Option<usize>,
    },
}

/// A record's place in a session's own trace: file index, then line ordinal in that file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TracePosition {
    /// The trace file's `NNN`.
    pub file_index: u32,
    /// The record's ordinal in that file, from 0.
    pub ordinal: u64,
}

impl TracePosition {
    /// Parses `F:O`, the `before` cursor's spelling.
    pub fn parse(s: &str) -> Option<TracePosition> {
        let (f, o) = s.split_once(':')?;
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(f) || !digits(o) {
            return None;
        }
        Some(TracePosition {
            file_index: f.parse().ok()?,
            ordinal: o.parse().ok()?,
        })
    }

    /// The `tracePosition` of a record read by [`read_history`].
    pub fn of(record: &Value) -> Option<TracePosition> {
        let p = record.get("tracePosition")?;
        Some(TracePosition {
            file_index: u32::try_from(p.get("fileIndex")?.as_u64()?).ok()?,
            ordinal: p.get("ordinal")?.as_u64()?,
        })
    }

    /// The position just after this one in the same file: a `before` cursor that includes it.
    fn next(self) -> TracePosition {
        TracePosition {
            file_index: self.file_index,
            ordinal: self.ordinal + 1,
        }
    }
}

impl std::fmt::Display for TracePosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file_index, self.ordinal)
    }
}

/// The messages of a `/messages` answer and its paging info, from the session's own records
/// (as [`read_history`] gives them) and the pending holds.
///
/// Only the selected records' subagent pointers are expanded, so an old page does not read
/// every child trace of the session.
pub fn page_of(
    files_of: &dyn Fn(&str) -> Vec<TraceFile>,
    session_id: &str,
    own: Vec<Value>,
    pending: Vec<String>,
    window: Window,
) -> (Vec<Value>, Option<PageInfo>) {
    let expand =
        |records: Vec<Value>| expand_subagents(files_of, records, &mut vec![session_id.to_owned()]);
    match window {
        Window::Before { position, limit } => {
            let older: Vec<Value> = own
                .into_iter()
                .take_while(|r| TracePosition::of(r).is_some_and(|p| p < position))
                .collect();
            let start = limit.map_or(0, |n| older.len().saturating_sub(n));
            let before = older.get(start).and_then(TracePosition::of);
            let page = PageInfo {
                has_more: start > 0,
                before: (start > 0).then(|| before.map(|p| p.to_string())).flatten(),
            };
            (expand(older.into_iter().skip(start).collect()), Some(page))
        }
        Window::All | Window::Tail(_) => {
            let last_own = own.last().and_then(TracePosition::of);
            // Each own record with its expansion is one unit; `starts[i]` is where unit i
            // begins in `messages`, and `positions[i]` its trace position (none for a hold).
            let mut messages = Vec::with_capacity(own.len());
            let mut starts = Vec::with_capacity(own.len());
            let mut positions = Vec::with_capacity(own.len());
            for record in own {
                starts.push(messages.len());
                positions.push(TracePosition::of(&record));
                messages.extend(expand(vec![record]));
            }
            let recorded = messages.len();
            append_missing(&mut messages, pending);
            for i in recorded..messages.len() {
                starts.push(i);
                positions.push(None);
            }
            let Window::Tail(n) = window else {
                return (messages, None);
            };
            let first = starts.len().saturating_sub(n);
            let has_more = first > 0;
            // A page that starts at a pending hold continues just after the last record.
            let before = has_more
                .then(|| positions[first].or(last_own.map(TracePosition::next)))
                .flatten();
            let cut = starts.get(first).copied().unwrap_or(messages.len());
            messages.drain(..cut);
            let page = PageInfo {
                has_more,
                before: before.map(|p| p.to_string()),
            };
            (messages, Some(page))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_trace_store::{is_regular_entry, LIST_HEAD_BYTES};
    use std::path::Path;

    /// Every trace file of `session_id` under `traces_dir`, in index order, by a scan of every date
    /// directory; the server asks its [`SessionIndex`](crate::index::SessionIndex) instead.
    fn trace_files(traces_dir: &Path, session_id: &str) -> std::io::Result<Vec<TraceFile>> {
        let mut out = Vec::new();
        let dates = match std::fs::read_dir(traces_dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        let prefix = format!("{session_id}_");
        for date in dates {
            let date = date?;
            if !date.file_type()?.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(date.path())? {
                let f = f?;
                let name = f.file_name();
                let Some(name) = name.to_str() else { continue };
                let Some(digits) = name
                    .strip_prefix(&prefix)
                    .and_then(|r| r.strip_suffix(".jsonl"))
                else {
                    continue;
                };
                if digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                if !is_regular_entry(&f) {
                    continue;
                }
                if let Ok(index) = digits.parse() {
                    out.push(TraceFile {
                        path: f.path(),
                        index,
                    });
                }
            }
        }
        out.sort_by_key(|f| f.index);
        Ok(out)
    }

    /// The first record of a file (a session's `session_meta`), if it parses within the first
    /// [`LIST_HEAD_BYTES`] of the file: listing many sessions reads no more than that of each.
    fn first_record(path: &Path) -> Option<Value> {
        let mut lines = TraceLines::head(path, LIST_HEAD_BYTES).ok()?;
        let (_, line) = lines.next_line().ok()??;
        serde_json::from_slice(line.ok()?).ok()
    }

    #[test]
    fn subagent_pointers_expand_into_origin_tagged_child_records() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("2026-11-29");
        std::fs::create_dir_all(&day).unwrap();
        let meta = |id: &str| {
            format!(
                r#"{{"timestamp":"t","type":"session_meta","payload":{{"session_id":"{id}"}}}}"#
            )
        };
        let pointer = |id: &str| {
            format!(
                r#"{{"timestamp":"t","type":"event_msg","payload":{{"type":"subagent","session_id":"{id}"}}}}"#
            )
        };
        let text = r#"{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"assistant","text":"hi","stop_reason":"completed"}}"#;
        std::fs::write(
            day.join("parent_001.jsonl"),
            format!(
                "{}\n{}\n{}\n",
                meta("parent"),
                pointer("child"),
                pointer("gone")
            ),
        )
        .unwrap();
        // The child points back at its parent: a cycle that must not be followed.
        std::fs::write(
            day.join("child_001.jsonl"),
            format!("{}\n{text}\n{}\n", meta("child"), pointer("parent")),
        )
        .unwrap();
        let own = read_history(&trace_files(dir.path(), "parent").unwrap()).unwrap();
        let expanded = expand_subagents(
            &|id| trace_files(dir.path(), id).unwrap(),
            own,
            &mut vec!["parent".to_string()],
        );
        let lines: Vec<String> = expanded
            .iter()
            .map(|v| {
                let mut v = v.clone();
                v.as_object_mut().unwrap().remove("tracePosition");
                v.to_string()
            })
            .collect();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert_eq!(
            lines[1],
            r#"{"timestamp":"t","type":"session_meta","payload":{"session_id":"child"},"origin":["child"]}"#
        );
        assert_eq!(
            lines[2],
            format!("{},\"origin\":[\"child\"]}}", &text[..text.len() - 1])
        );
        assert!(
            lines[3].contains(r#""session_id":"parent"},"origin":["child"]"#),
            "the cycle stays a pointer"
        );
        assert!(
            lines[4].contains(r#""session_id":"gone""#) && !lines[4].contains("origin"),
            "a missing child stays a pointer"
        );
        assert!(expanded[1].get("tracePosition").is_none());
    }

    #[test]
    fn files_are_found_across_dates_in_index_order_and_read_with_positions() {
        let dir = tempfile::tempdir().unwrap();
        let d1 = dir.path().join("2026-01-01");
        let d2 = dir.path().join("2026-01-02");
        std::fs::create_dir_all(&d1).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        std::fs::write(d2.join("s-1_001.jsonl"), "{\"b\":1}\n").unwrap();
        std::fs::write(d1.join("s-1_000.jsonl"), "{\"z\":1,\"a\":2}\n{torn").unwrap();
        std::fs::write(d1.join("s-10_000.jsonl"), "{}\n").unwrap();
        std::fs::write(d1.join("s-1_00.jsonl"), "{}\n").unwrap();
        let files = trace_files(dir.path(), "s-1").unwrap();
        assert_eq!(files.iter().map(|f| f.index).collect::<Vec<_>>(), [0, 1]);
        let h = read_history(&files).unwrap();
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"[{"z":1,"a":2,"tracePosition":{"fileIndex":0,"ordinal":0}},{"b":1,"tracePosition":{"fileIndex":1,"ordinal":0}}]"#
        );
        let index = crate::index::SessionIndex::new(dir.path().to_owned());
        let mut ids: Vec<String> = index.sessions().unwrap().into_iter().map(|s| s.0).collect();
        ids.sort();
        assert_eq!(ids, ["s-1", "s-10"]);
        assert_eq!(index.files("s-1").unwrap(), files);

        let mut msgs = h;
        append_missing(
            &mut msgs,
            ["{\"b\":1}".to_string(), "{\"c\":3}".to_string()],
        );
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[2], json!({"c": 3}));
    }

    /// Runs `f` on a thread of its own: a reader that blocks fails the test instead of
    /// hanging it.
    fn promptly<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("reading the traces folder blocked or ran away")
    }

    /// Nothing with a trace's name jams the listing (`GET /api/sessions`) or the history
    /// (`/messages`): a FIFO or a link to `/dev/zero` is passed over unopened when listed and
    /// refused by name when read.
    #[test]
    fn a_fifo_or_a_device_named_as_a_trace_is_passed_over_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("2026-01-01");
        std::fs::create_dir_all(&day).unwrap();
        let meta = r#"{"timestamp":"t","type":"session_meta","payload":{"session_id":"s-ok"}}"#;
        std::fs::write(day.join("s-ok_000.jsonl"), format!("{meta}\n")).unwrap();
        let fifo = day.join("s-fifo_000.jsonl");
        for path in [&fifo, &day.join("s-ok_001.jsonl")] {
            let made = std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap();
            assert!(made.success());
        }
        let zero = day.join("s-zero_000.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();

        let traces = dir.path().to_path_buf();
        let (ids, files, first, history) = promptly(move || {
            let index = crate::index::SessionIndex::new(traces);
            let ids: Vec<String> = index.sessions().unwrap().into_iter().map(|s| s.0).collect();
            let files: Vec<Vec<TraceFile>> =
                ids.iter().map(|id| index.files(id).unwrap()).collect();
            let first: Vec<Option<Value>> = files
                .iter()
                .map(|f| f.first().and_then(|f| first_record(&f.path)))
                .collect();
            let history: Vec<usize> = files
                .iter()
                .map(|f| read_history(f).unwrap().len())
                .collect();
            (ids, files, first, history)
        });
        assert_eq!(ids, ["s-ok"]);
        assert_eq!(files[0].iter().map(|f| f.index).collect::<Vec<_>>(), [0]);
        assert_eq!(first[0].as_ref().unwrap()["type"], "session_meta");
        assert_eq!(history, [1]);

        for (path, kind) in [(fifo, "FIFO"), (zero, "character device")] {
            let file = TraceFile {
                path: path.clone(),
                index: 0,
            };
            let read = promptly(move || (read_history(&[file]), first_record(&path)));
            let err = read.0.unwrap_err().to_string();
            assert!(
                err.contains(&format!("not a regular file ({kind})")),
                "{err}"
            );
            assert!(read.1.is_none());
        }
    }

    /// A record over the limit costs `/messages` neither the whole line in memory nor the
    /// records around it.
    #[test]
    fn a_record_over_the_limit_is_skipped_and_the_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s_000.jsonl");
        std::fs::write(&path, "{\"a\":1}\n").unwrap();
        // A line of zero bytes one past the limit, as a hole: nothing written to disk.
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.set_len(8 + penguin_trace_store::MAX_RECORD_BYTES as u64 + 1)
            .unwrap();
        use std::io::Write;
        (&f).write_all(b"\n{\"b\":2}\n").unwrap();
        let file = TraceFile { path, index: 3 };
        let h = promptly(move || read_history(&[file]).unwrap());
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"[{"a":1,"tracePosition":{"fileIndex":3,"ordinal":0}},{"b":2,"tracePosition":{"fileIndex":3,"ordinal":1}}]"#
        );
    }

    #[test]
    fn a_tail_page_that_starts_at_a_pending_hold_continues_after_the_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let own: Vec<Value> = (0..3)
            .map(|i| json!({"n": i, "tracePosition": {"fileIndex": 2, "ordinal": i}}))
            .collect();
        let pending = vec![r#"{"p":1}"#.to_string(), r#"{"p":2}"#.to_string()];
        let (msgs, page) = page_of(
            &|id| trace_files(dir.path(), id).unwrap(),
            "s",
            own.clone(),
            pending.clone(),
            Window::Tail(1),
        );
        assert_eq!(msgs, [json!({"p": 2})]);
        let page = page.unwrap();
        assert!(page.has_more);
        assert_eq!(page.before.as_deref(), Some("2:3"));
        let position = TracePosition::parse("2:3").unwrap();
        let (older, page) = page_of(
            &|id| trace_files(dir.path(), id).unwrap(),
            "s",
            own.clone(),
            Vec::new(),
            Window::Before {
                position,
                limit: Some(2),
            },
        );
        assert_eq!(older, own[1..]);
        assert_eq!(page.unwrap().before.as_deref(), Some("2:1"));

        let (all, page) = page_of(
            &|id| trace_files(dir.path(), id).unwrap(),
            "s",
            own.clone(),
            pending,
            Window::All,
        );
        assert_eq!(all.len(), 5);
        assert!(page.is_none());
        assert_eq!(TracePosition::parse("1:"), None);
        assert_eq!(TracePosition::parse("+1:2"), None);
        assert!(TracePosition::parse("1:2").unwrap() < TracePosition::parse("2:0").unwrap());
    }
}
