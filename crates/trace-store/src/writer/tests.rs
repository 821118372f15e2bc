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
