//! Writer, locator, resume-session and check behaviour on real files.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use penguin_omni_protocol::{
    build, CompactionMode, CompactionReason, ContextWindow, EventPayload, Frame, ModelPayload,
    OmniMessage, SessionMeta, StopReason,
};
use penguin_trace_store::{
    check_trace, find_latest_trace_file, latest_session_id, read_trace, resume_session,
    resume_trace, Durability, ReadMode, TraceError, TraceLocation, Writer, WriterConfig,
    PLACEHOLDER_OUTPUT,
};

const SID: &str = "session-2026-07-18-03-10-22-0123abcd";
const DATE: &str = "2026-07-18";

fn meta() -> OmniMessage {
    build::session_meta(SessionMeta {
        session_id: SID.into(),
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

fn writer(dir: &Path, durability: Durability) -> Writer {
    Writer::open(
        WriterConfig::new(dir, SID)
            .date_dir(DATE)
            .durability(durability),
    )
    .unwrap()
}

fn end(status: StopReason) -> OmniMessage {
    build::request_end(status, Default::default())
}

fn rec(w: &Writer, m: OmniMessage) {
    assert!(w.record(&Frame::new(m)));
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn records_one_line_per_recordable_message_in_call_order() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::EveryRecord);
    let msgs = [
        meta(),
        build::user_text("hi"),
        build::request_begin(),
        build::assistant_text("multi\nline", StopReason::Completed),
        end(StopReason::Completed),
    ];
    for m in &msgs {
        rec(&w, m.clone());
    }
    assert!(!w.record(&Frame::new(build::partial_text(
        penguin_omni_protocol::StreamEventType::Delta,
        "x",
        StopReason::Completed
    ))));
    assert!(!w.record(&Frame::new(
        build::user_text("child").with_origin("session-child")
    )));
    w.flush().unwrap();
    let path = dir.path().join(DATE).join(format!("{SID}_001.jsonl"));
    assert_eq!(w.current_path(), path);
    let got = lines(&path);
    let want: Vec<String> = msgs.iter().map(OmniMessage::to_json).collect();
    assert_eq!(got, want);
    assert_eq!(w.written(), 5);
    assert_eq!(w.failed_writes(), 0);
}

#[test]
fn concurrent_producers_never_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::Never);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let body = format!("{t}-{i}-") + &"x".repeat((i * 37) % 5000);
                    w.record_message(build::user_text(body));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    w.flush().unwrap();
    let read = read_trace(&w.current_path(), ReadMode::Strict).unwrap();
    assert_eq!(read.messages.len(), 800);
    // Per producer, order is preserved.
    for t in 0..4 {
        let seq: Vec<usize> = read
            .messages
            .iter()
            .filter_map(|m| match m.model() {
                Some(ModelPayload::Text(x)) if x.text.starts_with(&format!("{t}-")) => {
                    x.text.split('-').nth(1).and_then(|s| s.parse().ok())
                }
                _ => None,
            })
            .collect();
        assert_eq!(seq, (0..200).collect::<Vec<_>>());
    }
}

#[test]
fn a_torn_tail_is_cut_off_before_appending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DATE).join(format!("{SID}_001.jsonl"));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let first = build::user_text("before the crash");
    fs::write(
        &path,
        format!("{}\n{{\"timestamp\":\"2026", first.to_json()),
    )
    .unwrap();

    let w = writer(dir.path(), Durability::AtCommit);
    let a = build::user_text("a");
    let b = build::user_text("b");
    rec(&w, a.clone());
    rec(&w, b.clone());
    w.flush().unwrap();
    let raw = fs::read_to_string(&path).unwrap();
    // The fragment is cut off before the first append: it never becomes a middle line.
    assert_eq!(
        raw,
        format!("{}\n{}\n{}\n", first.to_json(), a.to_json(), b.to_json())
    );
    let read = read_trace(&path, ReadMode::Tolerant).unwrap();
    assert_eq!(read.messages, vec![first, a, b]);
    assert!(read.skipped.is_empty() && read.torn_tail.is_none());
    assert!(check_trace(&path).is_empty());
}

#[test]
fn rotation_moves_to_the_next_index_lazily() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::AtCommit);
    rec(&w, build::user_text("one"));
    w.rotate();
    assert_eq!(w.index(), 2);
    w.flush().unwrap();
    let second = dir.path().join(DATE).join(format!("{SID}_002.jsonl"));
    assert!(
        !second.exists(),
        "a rotation with nothing after it creates no file"
    );
    rec(&w, build::user_text("two"));
    w.flush().unwrap();
    assert_eq!(lines(&second).len(), 1);
    let located = find_latest_trace_file(dir.path(), SID).unwrap().unwrap();
    assert_eq!(located.index, 2);
    assert_eq!(located.date_dir, DATE);
    assert_eq!(located.path, second);
}

#[test]
fn a_write_failure_is_counted_and_the_writer_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::AtCommit);
    let path = w.current_path();
    // A directory where the file should be makes the open fail, even for root.
    fs::create_dir_all(&path).unwrap();
    rec(&w, build::user_text("lost"));
    w.flush().unwrap();
    assert_eq!(w.failed_writes(), 1);
    assert_eq!(w.written(), 0);
    fs::remove_dir(&path).unwrap();
    let kept = build::user_text("kept");
    rec(&w, kept.clone());
    w.flush().unwrap();
    assert_eq!(lines(&path), vec![kept.to_json()]);
    assert_eq!(w.failed_writes(), 1);
}

#[cfg(target_os = "linux")]
#[test]
fn disk_full_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::Never);
    let path = w.current_path();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // /dev/full accepts the open and fails every write with ENOSPC.
    std::os::unix::fs::symlink("/dev/full", &path).unwrap();
    for i in 0..3 {
        rec(&w, build::user_text(format!("r{i}")));
    }
    w.flush().unwrap();
    assert_eq!(w.failed_writes(), 3);
}

#[test]
fn flush_handle_completes_after_queued_records() {
    let dir = tempfile::tempdir().unwrap();
    let w = Arc::new(writer(dir.path(), Durability::EveryRecord));
    for i in 0..50 {
        rec(&w, build::user_text(format!("{i}")));
    }
    let h = w.flush_handle();
    h.wait().unwrap();
    assert_eq!(lines(&w.current_path()).len(), 50);
    let h = w.flush_handle();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(r) = h.try_wait() {
            r.unwrap();
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "flush never completed"
        );
        std::thread::yield_now();
    }
}

#[test]
fn dropping_the_last_clone_drains_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::Never);
    let path = w.current_path();
    let clone = w.clone();
    for i in 0..1000 {
        rec(&clone, build::user_text(format!("{i}")));
    }
    drop(clone);
    drop(w);
    assert_eq!(lines(&path).len(), 1000);
}

#[test]
fn latest_session_skips_files_with_only_meta() {
    let dir = tempfile::tempdir().unwrap();
    let write = |date: &str, sid: &str, msgs: &[OmniMessage]| {
        let p = dir.path().join(date).join(format!("{sid}_001.jsonl"));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let body: String = msgs.iter().map(|m| m.to_json() + "\n").collect();
        fs::write(p, body).unwrap();
    };
    write("2026-07-17", "session-a", &[meta(), build::user_text("x")]);
    write("2026-07-18", "session-b", &[meta(), build::user_text("y")]);
    write("2026-07-18", "session-c", &[meta()]);
    assert_eq!(
        latest_session_id(dir.path()).unwrap().as_deref(),
        Some("session-b")
    );
    assert_eq!(
        latest_session_id(&dir.path().join("missing")).unwrap(),
        None
    );
    assert_eq!(
        find_latest_trace_file(dir.path(), "session-z").unwrap(),
        None
    );
}

fn location(dir: &Path) -> TraceLocation {
    TraceLocation::new(dir, "proj", "agent")
}

#[test]
fn resume_session_continues_the_same_file_and_closes_a_dangling_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let loc = location(dir.path());
    {
        let w = Writer::open(
            WriterConfig::new(loc.traces_dir(), SID)
                .date_dir(DATE)
                .start_index(3),
        )
        .unwrap();
        for m in [
            meta(),
            build::user_text("hi"),
            build::request_begin(),
            build::assistant_text("hello", StopReason::Completed),
            end(StopReason::Completed),
            build::compaction_begin(CompactionReason::Turns, CompactionMode::Summarize, 10, 1),
            build::request_begin(),
            build::assistant_text("[summary]half", StopReason::Completed),
        ] {
            rec(&w, m);
        }
    }
    let s = resume_session(&loc, SID, Durability::AtCommit).unwrap();
    assert_eq!(s.located.index, 3);
    assert_eq!(
        s.resumed.dangling_compaction.map(|d| (d.reason, d.mode)),
        Some((CompactionReason::Turns, CompactionMode::Summarize))
    );
    assert_eq!(s.resumed.history.len(), 2);
    assert_eq!(s.resumed.session_turns, 1);
    assert_eq!(s.resumed.meta.session_id, SID);
    assert_eq!(s.writer.current_path(), s.located.path);
    rec(&s.writer, build::user_text("next"));
    s.writer.flush().unwrap();
    let read = read_trace(&s.located.path, ReadMode::Strict).unwrap();
    let n = read.messages.len();
    assert!(matches!(
        read.messages[n - 2].event(),
        Some(EventPayload::CompactionEnd {
            status: StopReason::Failed,
            reason: CompactionReason::Turns,
            ..
        })
    ));
    assert_eq!(read.messages[n - 1].payload_type(), "text");
    // Resuming again: the compaction is closed now and the half summary did not commit.
    let again = resume_trace(&read.messages);
    assert_eq!(again.dangling_compaction, None);
    assert!(!again.context_closed);
}

#[test]
fn resume_session_opens_the_file_its_location_knows_and_reads_the_directories_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let loc = location(dir.path());
    let write = |date: &str, index: u32, text: &str| {
        let w = Writer::open(
            WriterConfig::new(loc.traces_dir(), SID)
                .date_dir(date)
                .start_index(index),
        )
        .unwrap();
        rec(&w, meta());
        rec(&w, build::user_text(text));
        w.flush().unwrap();
        penguin_trace_store::LocatedTrace {
            path: w.current_path(),
            date_dir: date.into(),
            index,
        }
    };
    let told = write(DATE, 1, "the file the index knows");
    let newest = write("2026-07-19", 2, "a file only a directory read finds");
    // Told of a file, the resume opens it: no directory is read, so the newer one is not seen.
    let knowing = loc.clone().with_known_trace(SID, told.clone());
    let s = resume_session(&knowing, SID, Durability::Never).unwrap();
    assert_eq!(s.located, told);
    assert_eq!(s.writer.current_path(), told.path);
    drop(s);
    // Another session's file, or a file gone since, is no shortcut: the directories are read.
    let other = loc.clone().with_known_trace("session-other", told.clone());
    let s = resume_session(&other, SID, Durability::Never).unwrap();
    assert_eq!(s.located, newest);
    drop(s);
    fs::remove_file(&told.path).unwrap();
    let s = resume_session(&knowing, SID, Durability::Never).unwrap();
    assert_eq!(s.located, newest);
}

#[test]
fn resume_session_errors_name_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let loc = location(dir.path());
    let err = resume_session(&loc, SID, Durability::Never).unwrap_err();
    assert!(matches!(err, TraceError::SessionNotFound { .. }));
    assert!(err
        .to_string()
        .starts_with(&format!("Session does not exist: no trace file for {SID}")));
    {
        let w = Writer::open(WriterConfig::new(loc.traces_dir(), SID).date_dir(DATE)).unwrap();
        rec(&w, build::user_text("no meta"));
    }
    let err = resume_session(&loc, SID, Durability::Never).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("the trace has no session_meta record, so the session cannot be resumed"),
        "{err}"
    );
}

fn completed_compaction(mode: CompactionMode, summary_text: &str) -> Vec<OmniMessage> {
    vec![
        meta(),
        build::user_text("task"),
        build::request_begin(),
        build::tool_call("t", "{}", "c1", StopReason::Completed, None),
        build::token_usage(
            Default::default(),
            penguin_omni_protocol::TokenCounts::new(0, 90, 10),
        ),
        end(StopReason::Completed),
        build::compaction_begin(CompactionReason::Context, mode, 100, 1),
        build::user_text("summarize please"),
        build::request_begin(),
        build::assistant_text("first attempt", StopReason::Completed),
        end(StopReason::Timeout),
        build::request_begin(),
        build::assistant_text("Here it is. ", StopReason::Completed),
        build::assistant_text(summary_text, StopReason::Completed),
        end(StopReason::Completed),
        build::compaction_end(
            CompactionReason::Context,
            mode,
            StopReason::Completed,
            Default::default(),
        ),
    ]
}

#[test]
fn a_completed_summarize_compaction_closes_the_context() {
    let r = resume_trace(&completed_compaction(
        CompactionMode::Summarize,
        "[summary]\nthe gist\n[/summary]",
    ));
    assert!(r.context_closed);
    assert!(r.history.is_empty() && r.carry_over.is_empty() && r.render_messages.is_empty());
    assert_eq!(r.session_turns, 0);
    assert_eq!(r.last_request_total, 0);
    assert_eq!(r.session_tokens.total, 0);
    let summary = r.pending_summary.unwrap();
    assert!(summary.to_json().contains(r#""role":"user","text":"[context_summary]\nthe gist\n[/context_summary]","stop_reason":"completed""#));
    assert!(r.meta.is_some());
}

#[test]
fn a_completed_discard_compaction_closes_without_summary() {
    let r = resume_trace(&completed_compaction(CompactionMode::Discard, "ignored"));
    assert!(r.context_closed && r.pending_summary.is_none() && r.history.is_empty());
}

#[test]
fn an_empty_summary_voids_the_closure() {
    let r = resume_trace(&completed_compaction(
        CompactionMode::Summarize,
        "[summary] [/summary]",
    ));
    // "Here it is. " survives the ladder's step 2, so use a request with no text at all.
    assert!(
        r.context_closed,
        "step 2 of the ladder keeps the surrounding text"
    );
    let mut msgs = completed_compaction(CompactionMode::Summarize, "");
    msgs.retain(|m| !matches!(m.model(), Some(ModelPayload::Text(t)) if t.text == "Here it is. "));
    let r = resume_trace(&msgs);
    assert!(!r.context_closed && r.pending_summary.is_none());
    // Legacy replay: the task turn and the compaction request both commit; only the first is
    // a turn. The compaction prompt of the timed-out attempt is not reclaimed (§3.5 Drop), and
    // the unanswered call gets its placeholder when the next request commits.
    assert_eq!(r.session_turns, 1);
    let texts: Vec<String> = r
        .history
        .iter()
        .filter_map(|m| m.model().and_then(|p| p.content()).map(str::to_owned))
        .collect();
    assert_eq!(texts, ["task", "{}", PLACEHOLDER_OUTPUT, ""]);
    assert_eq!(r.dangling_compaction, None);
}

#[test]
fn unanswered_calls_get_placeholders_and_orphans_are_dropped() {
    let msgs = vec![
        build::user_text("go"),
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        build::tool_call("t", "{}", "b", StopReason::Completed, None),
        build::tool_call("t", "{}", "x", StopReason::Aborted, None),
        end(StopReason::Completed),
        build::tool_call_output("A", "a", StopReason::Completed),
        build::tool_call_output("orphan", "nobody", StopReason::Completed),
        build::request_begin(),
        build::tool_call("t", "{}", "lost", StopReason::Completed, None),
        end(StopReason::Timeout),
        build::tool_call_output("from an uncommitted turn", "lost", StopReason::Completed),
    ];
    let r = resume_trace(&msgs);
    // go, a, b, and x (a non-completed call is kept but never committed, so it gets no output).
    assert_eq!(r.history.len(), 4);
    let carry: Vec<(String, String)> = r
        .carry_over
        .iter()
        .map(|m| match m.model() {
            Some(ModelPayload::ToolCallOutput(o)) => (o.tool_call_id.clone(), o.output.clone()),
            other => panic!("unexpected carry-over {other:?}"),
        })
        .collect();
    assert_eq!(
        carry,
        [
            ("a".into(), "A".into()),
            ("b".into(), PLACEHOLDER_OUTPUT.to_string())
        ]
    );
    assert_eq!(
        r.carry_over[1].model().unwrap().stop_reason(),
        Some(StopReason::Aborted)
    );
}

#[test]
fn check_reports_structure_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.jsonl");
    let msgs = [
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        build::request_begin(),
        build::tool_call("t", "{}", "b", StopReason::Completed, None),
        end(StopReason::Completed),
        build::tool_call_output("1", "b", StopReason::Completed),
        build::tool_call_output("2", "b", StopReason::Completed),
        end(StopReason::Completed),
        build::partial_text(
            penguin_omni_protocol::StreamEventType::Start,
            "",
            StopReason::Completed,
        ),
        build::user_text("x").with_origin("child"),
        build::tool_call_output("?", "ghost", StopReason::Completed),
        build::request_begin(),
        build::tool_call("t", "{}", "c", StopReason::Completed, None),
        end(StopReason::Completed),
    ];
    let mut body: String = msgs.iter().map(|m| m.to_json() + "\n").collect();
    body.push_str("{\"torn");
    fs::write(&p, body).unwrap();
    let got: Vec<String> = check_trace(&p)
        .iter()
        .map(|pr| pr.to_string().replace(&p.display().to_string(), "F"))
        .collect();
    assert_eq!(
        got,
        [
            "F:3: error: request_begin while the request begun at line 1 has no request_end",
            "F:7: error: committed tool_call \"b\" (line 4) is answered 2 times (lines 6, 7)",
            "F:8: error: request_end without a request_begin",
            "F:9: error: partial_text is a streaming fragment; partials are never recorded",
            "F:10: error: text carries an origin; child-session messages belong in the child's trace",
            "F:11: warning: tool_call_output for \"ghost\", which no earlier tool_call in this file made",
            "F:13: warning: tool_call \"c\" has no output (the run ended or the process stopped first; resume adds a placeholder)",
            "F:15: warning: torn last line (a write cut short by a crash; resume ignores it): invalid JSON: EOF while parsing a string at line 1 column 6",
        ]
    );
}

#[test]
fn a_writer_that_never_records_holds_no_thread_and_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::AtCommit);
    w.flush().unwrap();
    assert!(!w.started(), "a flush of nothing starts nothing");
    assert!(!w.current_path().exists());
    rec(&w, meta());
    assert!(w.started());
    w.flush().unwrap();
    assert!(w.current_path().exists());
}

#[test]
fn commits_arriving_together_share_an_fsync_and_none_is_left_unsynced() {
    let dir = tempfile::tempdir().unwrap();
    let w = writer(dir.path(), Durability::AtCommit);
    rec(&w, meta());
    for _ in 0..2_000 {
        rec(&w, build::request_begin());
        rec(&w, end(StopReason::Completed));
    }
    // No flush: the writer syncs on its own once the queue is empty.
    let mut waited = 0;
    while (w.written() < 4_001 || w.syncs() == 0) && waited < 2_000 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        waited += 1;
    }
    assert_eq!(w.written(), 4_001);
    let syncs = w.syncs();
    assert!(syncs >= 1, "the last commit is synced");
    assert!(
        syncs < 2_000,
        "commits were grouped: {syncs} fsyncs for 2,000 commits"
    );
}
