//! No store can be jammed: whatever sits in a traces folder under a trace's name (a FIFO, a
//! link to `/dev/zero`, a file with a record of any length), every reader finishes promptly,
//! within bounded memory, and says what it refused.

use std::fs;
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use penguin_omni_protocol::{build, ContextWindow, OmniMessage, SessionMeta, StopReason};
use penguin_trace_store::{
    check_trace, find_last_record, find_latest_trace_file, latest_session_id, open_trace,
    read_trace, read_trace_head, resume_session, Durability, ReadMode, Severity, TraceError,
    TraceLines, TraceLocation, Writer, WriterConfig, LIST_HEAD_BYTES, LIST_TAIL_BYTES,
    MAX_RECORD_BYTES, ROTATE_MARKER,
};

const DATE: &str = "2026-07-18";

/// Runs `f` on a thread of its own and waits a few seconds for it: a reader that blocks (on a
/// FIFO) or runs away (on `/dev/zero`) fails the test instead of hanging it. Also returns how
/// many bytes the thread read (`rchar`), so a bounded read can be told from a whole one.
fn promptly<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> (T, u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let before = bytes_read_by_this_thread();
        let out = f();
        let read = bytes_read_by_this_thread() - before;
        let _ = tx.send((out, read));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the reader blocked or ran away")
}

fn bytes_read_by_this_thread() -> u64 {
    let io = fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

fn meta(id: &str) -> OmniMessage {
    build::session_meta(SessionMeta {
        session_id: id.into(),
        provider: "p".into(),
        model_id: "m".into(),
        model_context_window: ContextWindow::Tokens(1000),
        system_prompt: "sys".into(),
        agent_state: "/a".into(),
        workspace: "/w".into(),
        source: None,
        forked_from: None,
    })
}

fn lines(messages: &[OmniMessage]) -> String {
    messages.iter().map(|m| m.to_json() + "\n").collect()
}

/// A traces folder holding one healthy session, `s-ok`, and `intruder` (made by `make`) under
/// the name of a session file of `s-ok` and of a session of its own.
fn traces_with(make: impl Fn(&Path)) -> (tempfile::TempDir, TraceLocation, Vec<PathBuf>) {
    let root = tempfile::tempdir().unwrap();
    let location = TraceLocation::new(root.path(), "proj", "agent");
    let day = location.traces_dir().join(DATE);
    fs::create_dir_all(&day).unwrap();
    let session = [
        meta("s-ok"),
        build::user_text("hi"),
        build::request_begin(),
        build::assistant_text("hello", StopReason::Completed),
        build::request_end(StopReason::Completed, Default::default()),
    ];
    fs::write(day.join("s-ok_000.jsonl"), lines(&session)).unwrap();
    let intruders = vec![day.join("s-ok_001.jsonl"), day.join("s-zzz_000.jsonl")];
    for path in &intruders {
        make(path);
    }
    (root, location, intruders)
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
}

fn link_to_dev_zero(path: &Path) {
    std::os::unix::fs::symlink("/dev/zero", path).unwrap();
}

/// Every reader, asked for the intruder directly: each refuses it by name.
fn every_direct_read(path: PathBuf) -> Vec<String> {
    let mut refusals = vec![
        open_trace(&path).map(drop),
        read_trace(&path, ReadMode::Tolerant).map(drop),
        read_trace(&path, ReadMode::Strict).map(drop),
        TraceLines::open(&path).map(drop),
        read_trace_head(&path, LIST_HEAD_BYTES, |_, _| ControlFlow::Continue(())),
        find_last_record(&path, LIST_TAIL_BYTES, |_| Some(())).map(drop),
    ]
    .into_iter()
    .map(|r| match r {
        Err(e @ TraceError::NotRegularFile { .. }) => e.to_string(),
        other => panic!("{} was not refused: {other:?}", path.display()),
    })
    .collect::<Vec<_>>();
    let problems = check_trace(&path);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].severity, Severity::Error);
    refusals.push(problems[0].to_string());
    refusals
}

/// Listing and resuming pass the intruders over unopened, and every reader refuses them by
/// name when asked for them directly: nothing waits for a writer, nothing reads forever.
fn nothing_is_jammed_by(make: fn(&Path), kind: &str) {
    let (_root, location, intruders) = traces_with(make);
    let traces = location.traces_dir();
    let ((latest, found, missing, resumed), _) = promptly(move || {
        let latest = latest_session_id(&traces).unwrap();
        let found = find_latest_trace_file(&traces, "s-ok").unwrap().unwrap();
        let missing = find_latest_trace_file(&traces, "s-zzz").unwrap();
        let resumed = resume_session(&location, "s-ok", Durability::Never)
            .unwrap()
            .resumed
            .history
            .len();
        (latest, found, missing, resumed)
    });
    assert_eq!(latest.as_deref(), Some("s-ok"));
    assert_eq!(
        found.index, 0,
        "the intruder is not the session's newest file"
    );
    assert_eq!(missing, None, "an intruder is no session");
    assert_eq!(resumed, 2);
    for path in intruders {
        let shown = path.display().to_string();
        let (refusals, read) = promptly(move || every_direct_read(path));
        // Only this thread's own counter was read.
        assert!(read < 4096, "{read} bytes read");
        for refusal in refusals {
            assert!(refusal.contains(&shown), "{refusal}");
            assert!(
                refusal.contains(&format!("not a regular file ({kind})")),
                "{refusal}"
            );
        }
    }
}

#[test]
fn a_fifo_with_a_trace_name_blocks_no_reader() {
    nothing_is_jammed_by(mkfifo, "FIFO");
}

#[test]
fn a_link_to_dev_zero_with_a_trace_name_is_never_read() {
    nothing_is_jammed_by(link_to_dev_zero, "character device");
}

/// A FIFO where the writer's next file goes (a session rotating into it) stops neither the
/// writer nor a flush: the write fails, is counted, and the writer goes on.
#[test]
fn a_fifo_where_the_writer_appends_does_not_stop_it() {
    let (_root, location, intruders) = traces_with(mkfifo);
    let ((flushed, failed), _) = promptly(move || {
        let writer = Writer::open(
            WriterConfig::new(location.traces_dir(), "s-ok")
                .date_dir(DATE)
                .start_index(1)
                .durability(Durability::Never),
        )
        .unwrap();
        writer.record_message(build::user_text("into the FIFO?"));
        let flushed = writer.flush().is_ok();
        (flushed, writer.failed_writes())
    });
    assert!(flushed);
    assert_eq!(failed, 1);
    assert!(fs::metadata(&intruders[0]).unwrap().file_type().is_fifo());
}

/// A file of `first`, then a line of `hole` zero bytes (a hole: nothing is written to disk),
/// then `last`.
fn with_a_hole(path: &Path, first: &[OmniMessage], hole: u64, last: &[OmniMessage]) {
    let head = lines(first);
    fs::write(path, &head).unwrap();
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.set_len(head.len() as u64 + hole).unwrap();
    f.write_all(format!("\n{}", lines(last)).as_bytes())
        .unwrap();
}

/// One record over [`MAX_RECORD_BYTES`], through the public default path: the tolerant
/// reader keeps every record around it and reports its line, the strict one refuses it naming
/// file, line and limit, the checker reports it; none holds the line.
#[test]
fn a_record_over_max_record_bytes_is_refused_by_name_and_nothing_else_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s_000.jsonl");
    let before = [meta("s"), build::user_text("before")];
    let after = [build::user_text("after")];
    with_a_hole(&path, &before, MAX_RECORD_BYTES as u64 + 1, &after);
    let p = path.clone();
    let ((tolerant, strict, problems), _) = promptly(move || {
        (
            read_trace(&p, ReadMode::Tolerant).unwrap(),
            read_trace(&p, ReadMode::Strict).unwrap_err(),
            check_trace(&p),
        )
    });
    assert_eq!(tolerant.messages, [&before[..], &after[..]].concat());
    assert_eq!(tolerant.line_numbers, [1, 2, 4]);
    assert_eq!(tolerant.skipped.len(), 1);
    assert_eq!(tolerant.skipped[0].line, 3);
    let limit = format!("longer than {MAX_RECORD_BYTES} bytes (MAX_RECORD_BYTES)");
    assert!(tolerant.skipped[0].error.contains(&limit));
    assert!(
        matches!(strict, TraceError::RecordTooLarge { line: 3, limit, .. } if limit == MAX_RECORD_BYTES)
    );
    let strict = strict.to_string();
    assert!(
        strict.starts_with(&format!("{}:3: ", path.display())) && strict.contains(&limit),
        "{strict}"
    );
    let errors: Vec<String> = problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| p.to_string())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains(":3: error: ") && errors[0].contains(&limit));
}

/// A listing reads a bounded head and tail of a file, however long it is: here the middle is
/// a quarter-GiB line that a whole read would have to go through (and, unbounded, hold).
#[test]
fn a_listing_reads_a_bounded_head_and_tail_only() {
    let dir = tempfile::tempdir().unwrap();
    let day = dir.path().join(DATE);
    fs::create_dir_all(&day).unwrap();
    let path = day.join("s-long_000.jsonl");
    let head = [meta("s-long"), build::user_text("the first prompt")];
    let tail = [
        build::request_begin(),
        build::request_end(StopReason::Failed, Default::default()),
    ];
    with_a_hole(&path, &head, 256 << 20, &tail);
    let traces = dir.path().to_path_buf();
    let ((latest, first, state), read) = promptly(move || {
        let latest = latest_session_id(&traces).unwrap();
        let mut first = Vec::new();
        read_trace_head(&path, LIST_HEAD_BYTES, |_, m| {
            first.push(m);
            ControlFlow::Continue(())
        })
        .unwrap();
        let state = find_last_record(&path, LIST_TAIL_BYTES, |m| {
            m.event().map(|e| format!("{e:?}"))
        })
        .unwrap();
        (latest, first, state)
    });
    assert_eq!(latest.as_deref(), Some("s-long"));
    assert_eq!(first, head);
    assert!(state.unwrap().starts_with("RequestEnd"));
    // Two heads of at most a MiB each, the first tail window, and this thread's own counter.
    assert!(read <= 2 * LIST_HEAD_BYTES + (64 << 10) + 4096, "{read}");
}

/// `penguin scenario run --trace` writes every file of a session into one, with a
/// [`ROTATE_MARKER`] line where a new file starts: the checker checks each file's records on
/// their own and takes the marker for what it is, not for a malformed record.
#[test]
fn trace_check_accepts_what_the_scenario_runner_writes() {
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios-v2");
    let mut with_markers = 0;
    for entry in fs::read_dir(&scenarios).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".trace.jsonl") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        with_markers += usize::from(text.lines().any(|l| l == ROTATE_MARKER));
        let errors: Vec<String> = check_trace(&path)
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
    assert!(with_markers >= 3, "the compaction scenarios rotate");

    // Each file is checked on its own: a file's open request ends with it, and one after
    // the marker is checked as strictly as the first.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.trace.jsonl");
    let first = lines(&[
        build::user_text("a"),
        build::request_begin(),
        build::assistant_text("b", StopReason::Completed),
    ]);
    let second = lines(&[
        build::user_text("c"),
        build::request_end(StopReason::Completed, Default::default()),
    ]);
    fs::write(&path, format!("{first}{ROTATE_MARKER}\n{second}")).unwrap();
    let problems: Vec<(Option<usize>, Severity)> = check_trace(&path)
        .iter()
        .map(|p| (p.line, p.severity))
        .collect();
    assert_eq!(
        problems,
        [(Some(2), Severity::Warning), (Some(6), Severity::Error)]
    );
}
