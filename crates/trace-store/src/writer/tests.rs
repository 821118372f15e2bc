use std::io::Write;

use super::*;
use penguin_omni_protocol::{build, StopReason};

/// Accepts `limit` bytes in chunks of `chunk`, then fails.
struct Flaky {
    out: Vec<u8>,
    chunk: usize,
    limit: usize,
}

impl Write for Flaky {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let room = self.limit - self.out.len();
        if room == 0 {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        let n = b.len().min(self.chunk).min(room);
        self.out.extend_from_slice(&b[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn short_writes_loop_and_failures_report_landed_bytes() {
    let mut w = Flaky {
        out: vec![],
        chunk: 3,
        limit: 100,
    };
    append_all(&mut w, b"0123456789").unwrap();
    assert_eq!(w.out, b"0123456789");

    let mut w = Flaky {
        out: vec![],
        chunk: 4,
        limit: 6,
    };
    let (landed, e) = append_all(&mut w, b"0123456789").unwrap_err();
    assert_eq!(landed, 6);
    assert_eq!(e.kind(), io::ErrorKind::StorageFull);

    struct Zero;
    impl Write for Zero {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Ok(0)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (landed, e) = append_all(&mut Zero, b"abc").unwrap_err();
    assert_eq!(landed, 0);
    assert_eq!(
        e.to_string(),
        "Trace append made no progress at byte 0 of 3"
    );
}

#[test]
fn commit_points() {
    let end = build::request_end(StopReason::Completed, Default::default());
    let text = build::user_text("x");
    assert!(Durability::AtCommit.syncs_after(&end));
    assert!(Durability::AtCommit.syncs_after(&build::abort(Some("x".into()))));
    assert!(!Durability::AtCommit.syncs_after(&text));
    assert!(!Durability::Never.syncs_after(&end));
    assert!(Durability::EveryRecord.syncs_after(&text));
}

#[test]
fn writer_is_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Writer>();
}

/// Keeps what it is given; `commit` fails once `fail` is set.
#[derive(Default)]
struct Kept {
    lines: Mutex<Vec<(u32, String)>>,
    commits: std::sync::atomic::AtomicUsize,
    fail: std::sync::atomic::AtomicBool,
    refuse: std::sync::atomic::AtomicBool,
}

impl TraceMirror for Kept {
    fn append(&self, file: u32, line: &[u8]) -> bool {
        if self.refuse.load(Ordering::SeqCst) {
            return false;
        }
        let line = String::from_utf8(line.to_vec()).unwrap();
        self.lines.lock().unwrap().push((file, line));
        true
    }
    fn commit(&self) -> io::Result<()> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::other("quorum lost"));
        }
        Ok(())
    }
}

#[test]
fn a_mirror_gets_every_record_with_its_file_and_commits_where_the_file_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let w = Writer::open(
        WriterConfig::new(dir.path(), "s1")
            .date_dir("2026-01-01")
            .durability(Durability::AtCommit),
    )
    .unwrap();
    let kept = Arc::new(Kept::default());
    w.set_mirror(kept.clone());
    w.record_message(build::user_text("hi"));
    w.record_message(build::request_begin());
    w.record_message(build::request_end(
        StopReason::Completed,
        Default::default(),
    ));
    w.flush().unwrap();
    w.rotate();
    w.record_message(build::user_text("again"));
    w.flush().unwrap();

    let lines = kept.lines.lock().unwrap().clone();
    let files: Vec<u32> = lines.iter().map(|(f, _)| *f).collect();
    assert_eq!(files, [1, 1, 1, 2]);
    let on_disk = std::fs::read_to_string(w.current_path()).unwrap();
    assert_eq!(
        on_disk,
        format!("{}\n", lines[3].1),
        "the very bytes the file got"
    );
    assert!(kept.commits.load(Ordering::SeqCst) >= 2);

    // A mirror that cannot store makes the flush fail: nothing is acknowledged it lacks.
    kept.fail.store(true, Ordering::SeqCst);
    w.record_message(build::user_text("lost"));
    let err = w.flush().unwrap_err();
    assert!(err.to_string().contains("quorum lost"), "{err}");
    assert!(w.failed_syncs() >= 1);

    // A mirror that refuses for good (another writer owns the trace): the file gets nothing.
    kept.refuse.store(true, Ordering::SeqCst);
    let before = std::fs::read_to_string(w.current_path()).unwrap();
    w.record_message(build::user_text("not mine"));
    let _ = w.flush();
    assert_eq!(std::fs::read_to_string(w.current_path()).unwrap(), before);
    assert!(w.failed_writes() >= 1);
}
