//! A session's trace on a cluster node: its records on their way to the replicated trace
//! (the writer's [`TraceMirror`]), and its trace files written back from the cluster's
//! records when the node takes it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penguin_cluster::{Lease, ReplicatedTrace, TraceRecord};
use penguin_trace_store::{TraceLocation, TraceMirror};

use crate::index::SessionIndex;

/// A session's trace records on their way to the replicated trace (a [`TraceMirror`]).
pub(super) struct Mirror {
    pub(super) sink: Arc<ReplicatedTrace>,
    pub(super) lease: Lease,
    pub(super) rt: tokio::runtime::Handle,
}

impl TraceMirror for Mirror {
    fn append(&self, file: u32, line: &[u8]) -> bool {
        // Past its lease (paused, cut off) a node writes nothing, not even its own file.
        if self.lease.check().is_err() {
            return false;
        }
        self.sink.record_in(file, Bytes::copy_from_slice(line));
        true
    }

    fn commit(&self) -> io::Result<()> {
        // The writer thread waits; the publishing runs on the runtime. A plain channel, not
        // `block_on`: the thread that joins this writer may be one of the runtime's own.
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = self.sink.clone();
        self.rt.spawn(async move {
            let _ = tx.send(sink.flush().await);
        });
        match rx.recv_timeout(penguin_cluster::RETRY_FOR + Duration::from_secs(5)) {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(io::Error::other(e)),
            Err(_) => Err(io::Error::other(
                "the cluster did not acknowledge the trace records in time",
            )),
        }
    }
}

/// Writes `records` as `id`'s trace files under `location`, replacing any this node kept
/// from an earlier time it owned the session (the cluster's records are the session), and
/// tells `index` of them, so the load that follows finds them without a directory read.
pub(super) fn materialize(
    location: &TraceLocation,
    index: &SessionIndex,
    id: &str,
    records: &[TraceRecord],
) -> io::Result<()> {
    use std::io::Write;
    let traces = location.traces_dir();
    remove_local(index, id)?;
    let date = penguin_trace_store::local_date_dir();
    let mut written = Vec::new();
    let mut open: Option<(u32, std::fs::File)> = None;
    for r in records {
        if open.as_ref().map(|(f, _)| *f) != Some(r.file) {
            if let Some((_, f)) = open.take() {
                f.sync_all()?;
            }
            let path = penguin_trace_store::trace_file_path(&traces, &date, id, r.file);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            open = Some((r.file, std::fs::File::create(&path)?));
            written.push(path);
        }
        let (_, f) = open.as_mut().expect("opened above");
        f.write_all(&r.line)?;
        f.write_all(b"\n")?;
    }
    if let Some((_, f)) = open {
        f.sync_all()?;
    }
    index.wrote(id, &written);
    Ok(())
}

/// Removes every trace file of `id` this node has, and forgets them.
fn remove_local(index: &SessionIndex, id: &str) -> io::Result<()> {
    for file in index.files(id)? {
        match std::fs::remove_file(&file.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    index.remove(id);
    Ok(())
}

/// The records of `id`'s trace files, oldest file first, with the file each is in. The index
/// knows a session this node loaded or wrote: a `stat` per file, no directory read.
pub(super) fn local_records(index: &SessionIndex, id: &str) -> io::Result<Vec<(u32, Bytes)>> {
    let mut out = Vec::new();
    for file in index.files(id)? {
        let text = std::fs::read(&file.path)?;
        out.extend(
            text.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| (file.index, Bytes::copy_from_slice(l))),
        );
    }
    Ok(out)
}
