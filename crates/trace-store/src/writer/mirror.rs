//! A second home for a writer's records: a replicated log (penguin-cluster's JetStream trace)
//! gets every record the writer appends, and a commit waits for it as for an `fsync`.

use std::io;

/// Where a [`Writer`](crate::Writer) copies each record, and how its commits wait for the copy.
///
/// The writer thread calls [`append`](TraceMirror::append) with every record in order, and
/// [`commit`](TraceMirror::commit) wherever it would `fsync` (after each commit record under
/// [`Durability::AtCommit`](crate::Durability), at every flush and rotation, and when the
/// writer closes): a flush that returns `Ok` means the mirror holds every record before it.
/// Both run on the writer thread, never on an async worker, so `commit` may block.
pub trait TraceMirror: Send + Sync + 'static {
    /// Queues one record (its JSON line, without the newline) of trace file `file` (the
    /// `NNN` index: rotation moves to the next one). `false` refuses it for good: the trace
    /// belongs to another writer now (a cluster node lost the session), and the record goes
    /// nowhere, the local file included.
    fn append(&self, file: u32, line: &[u8]) -> bool;

    /// Blocks until every record appended so far is stored, or says why one is not (then no
    /// record after it is stored either).
    fn commit(&self) -> io::Result<()>;
}
