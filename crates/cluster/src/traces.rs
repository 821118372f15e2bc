//! A session's trace records, replicated: each record is published to
//! `penguin.traces.<session>` in the [`TRACE_STREAM`](crate::TRACE_STREAM) and counts as
//! written only once JetStream acknowledged it (stored on a quorum of replicas): the
//! `AtCommit` policy becomes a publish acknowledgement. Any node reads a session's records
//! back to rebuild it after its owner died.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

use crate::batch;
use crate::error::check_session;
use crate::events::{last_of, ordered, retrying, seq_of, RETRY_FOR};
use crate::{ClusterError, Lease, NODE_HEADER, SEQ_HEADER};

pub(crate) const PREFIX: &str = "penguin.traces";

/// The header carrying a record's trace file index (`NNN`; rotation moves to the next).
const FILE_HEADER: &str = "Penguin-File";

/// One replicated record: the trace file it belongs to, and its JSON line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// The trace file index (`NNN` of `<id>_NNN.jsonl`), from 1.
    pub file: u32,
    /// The record's JSON line, without its newline.
    pub line: Bytes,
}

/// What [`TraceLog::read_since`] read: `(session, record)` in stream order, and the stream
/// position to read on from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordsSince {
    /// The records, each with its session.
    pub records: Vec<(String, TraceRecord)>,
    /// The stream position of the last record read (or `after`, when there was none).
    pub next: u64,
}

fn subject(session: &str) -> String {
    format!("{PREFIX}.{session}")
}

/// Every session's replicated trace records.
#[derive(Clone, Debug)]
pub struct TraceLog {
    js: jetstream::Context,
    stream: stream::Stream,
    node: String,
}

impl TraceLog {
    pub(crate) fn new(js: jetstream::Context, stream: stream::Stream, node: String) -> TraceLog {
        TraceLog { js, stream, node }
    }

    /// How many records `session` has.
    pub async fn len(&self, session: &str) -> Result<u64, ClusterError> {
        check_session(session)?;
        Ok(last_of(&self.stream, &subject(session)).await?.1)
    }

    /// A sink appending to `session`'s records while `lease` holds. Must be called inside a
    /// tokio runtime (it spawns the publishing task).
    pub async fn sink(&self, session: &str, lease: Lease) -> Result<ReplicatedTrace, ClusterError> {
        check_session(session)?;
        let subject = subject(session);
        let (stream_seq, seq) = last_of(&self.stream, &subject).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Counters::default());
        shared.written.store(seq, Ordering::Relaxed);
        let task = Publisher {
            js: self.js.clone(),
            session: session.to_owned(),
            subject,
            node: self.node.clone(),
            lease,
            last_stream_seq: stream_seq,
            seq,
            shared: shared.clone(),
            stopped: None,
        };
        tokio::spawn(task.run(rx));
        Ok(ReplicatedTrace {
            tx,
            shared,
            queued: AtomicU64::new(seq),
        })
    }

    /// Every record of `session`, in order (each one JSON line, without its newline).
    pub async fn read(&self, session: &str) -> Result<Vec<Bytes>, ClusterError> {
        Ok(self
            .read_records(session)
            .await?
            .into_iter()
            .map(|r| r.line)
            .collect())
    }

    /// Every record of `session`, in order, with the trace file each belongs to: what a node
    /// taking the session over writes back to its own trace files.
    pub async fn read_records(&self, session: &str) -> Result<Vec<TraceRecord>, ClusterError> {
        // A read is what a takeover rebuilds from, right after a node died: JetStream may need
        // longer than one retry window to elect the stream's new leader on a loaded machine, so
        // the whole read is tried again, from the start, a few times.
        let mut tries = 0;
        loop {
            match self.read_once(session).await {
                Err(ClusterError::Unavailable { .. }) if tries < 2 => tries += 1,
                done => return done,
            }
        }
    }

    async fn read_once(&self, session: &str) -> Result<Vec<TraceRecord>, ClusterError> {
        check_session(session)?;
        let subject = subject(session);
        let (_, last) = last_of(&self.stream, &subject).await?;
        if last == 0 {
            return Ok(Vec::new());
        }
        let mut messages = ordered(&self.stream, &subject, DeliverPolicy::All).await?;
        let mut out = Vec::with_capacity(last as usize);
        let mut expected = 1;
        while let Some(m) = messages.next().await {
            let m = m.map_err(|e| ClusterError::unavailable(&format!("reading {subject}"), e))?;
            let seq = seq_of(m.headers.as_ref()).ok_or_else(|| ClusterError::Malformed {
                what: format!("record on {subject}"),
                reason: format!("no {SEQ_HEADER} header"),
            })?;
            let malformed = |reason: String| ClusterError::Malformed {
                what: format!("record {seq} of {session}"),
                reason,
            };
            let count = batch::count_of(m.headers.as_ref()).map_err(malformed)?;
            let first = (seq + 1).saturating_sub(count);
            if first != expected {
                return Err(ClusterError::Malformed {
                    what: format!("records of {session}"),
                    reason: format!("record {first} where {expected} was due"),
                });
            }
            expected = seq + 1;
            let file = m
                .headers
                .as_ref()
                .and_then(|h| h.get(FILE_HEADER))
                .map_or(Ok(1), |f| f.as_str().parse::<u32>())
                .map_err(|e| malformed(format!("{FILE_HEADER}: {e}")))?;
            for line in batch::split(&m.payload, count).map_err(malformed)? {
                out.push(TraceRecord { file, line });
            }
            if seq >= last {
                break;
            }
        }
        Ok(out)
    }

    /// Every session's records published after stream position `after` (0: all of them),
    /// in the order they were stored, with the position to read on from next time: what a
    /// node adds up the whole cluster's usage from without reading what it read before.
    /// Records of a session purged since are not there.
    pub async fn read_since(&self, after: u64) -> Result<RecordsSince, ClusterError> {
        use async_nats::jetstream::consumer::{pull, AckPolicy};
        let mut out = RecordsSince {
            records: Vec::new(),
            next: after,
        };
        // A pull consumer's fetch ends when nothing more is there (an ordered consumer waits
        // for more), and its pending count at creation says how much to read: records purged
        // since (a session deleted) are simply not delivered.
        let consumer = retrying("reading the trace stream", || async {
            self.stream
                .create_consumer(pull::Config {
                    filter_subject: format!("{PREFIX}.>"),
                    deliver_policy: DeliverPolicy::ByStartSequence {
                        start_sequence: after + 1,
                    },
                    ack_policy: AckPolicy::None,
                    inactive_threshold: Duration::from_secs(30),
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())
        })
        .await?;
        let mut pending = consumer.cached_info().num_pending;
        let failed = |e: &dyn std::fmt::Display| {
            ClusterError::unavailable("reading the trace stream", e.to_string())
        };
        while pending > 0 {
            let mut fetched = consumer
                .fetch()
                .max_messages(pending.min(512) as usize)
                .messages()
                .await
                .map_err(|e| failed(&e))?;
            let mut got = 0;
            while let Some(m) = fetched.next().await {
                let m = m.map_err(|e| failed(&e))?;
                let info = m.info().map_err(|e| failed(&e))?;
                let (at, left) = (info.stream_sequence, info.pending);
                got += 1;
                let session = m
                    .subject
                    .as_str()
                    .strip_prefix(PREFIX)
                    .and_then(|s| s.strip_prefix('.'))
                    .unwrap_or_default()
                    .to_owned();
                let malformed = |reason: String| ClusterError::Malformed {
                    what: format!("message {at} of the trace stream"),
                    reason,
                };
                let count = batch::count_of(m.headers.as_ref()).map_err(malformed)?;
                let file = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(FILE_HEADER))
                    .map_or(Ok(1), |f| f.as_str().parse::<u32>())
                    .map_err(|e| malformed(format!("{FILE_HEADER}: {e}")))?;
                for line in batch::split(&m.payload, count).map_err(malformed)? {
                    out.records
                        .push((session.clone(), TraceRecord { file, line }));
                }
                out.next = at;
                pending = left;
            }
            if got == 0 {
                // Nothing came although some was pending: purged meanwhile.
                break;
            }
        }
        Ok(out)
    }

    /// Removes every record of `session` (it was deleted).
    pub async fn purge(&self, session: &str) -> Result<(), ClusterError> {
        check_session(session)?;
        self.stream
            .purge()
            .filter(subject(session))
            .await
            .map_err(|e| ClusterError::unavailable("purging a session's records", e))?;
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Counters {
    /// Records acknowledged by JetStream (this session's total, earlier owners' included).
    written: AtomicU64,
    /// Records given up on (or refused after the lease was lost).
    failed: AtomicU64,
}

enum Command {
    Record(u32, Bytes),
    Flush(oneshot::Sender<Result<u64, ClusterError>>),
}

/// A session's trace sink in the cluster: [`record`](ReplicatedTrace::record) never blocks
/// (a task publishes in order), a record counts as [`written`](ReplicatedTrace::written) once
/// JetStream acknowledged it, and [`flush`](ReplicatedTrace::flush) waits until every record
/// so far is acknowledged, or says why one is not. Once the lease is lost, nothing more is
/// written.
#[derive(Debug)]
pub struct ReplicatedTrace {
    tx: mpsc::UnboundedSender<Command>,
    shared: Arc<Counters>,
    queued: AtomicU64,
}

impl ReplicatedTrace {
    /// Queues one record (a JSON line without its newline) of the first trace file.
    pub fn record(&self, line: Bytes) {
        self.record_in(1, line);
    }

    /// Queues one record (a JSON line without its newline) of trace file `file`.
    pub fn record_in(&self, file: u32, line: Bytes) {
        self.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Command::Record(file, line)).is_err() {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records acknowledged so far (the session's count, from its first record).
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Records that could not be stored.
    pub fn failed_writes(&self) -> u64 {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Waits until every record queued so far is acknowledged; returns the written count, or
    /// the error that stopped the sink (then the records after the last acknowledged one are
    /// not stored, and none will be).
    pub async fn flush(&self) -> Result<u64, ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Flush(tx))
            .map_err(|_| ClusterError::Unavailable {
                reason: "the trace publisher stopped".into(),
            })?;
        rx.await.map_err(|_| ClusterError::Unavailable {
            reason: "the trace publisher stopped".into(),
        })?
    }
}

struct Publisher {
    js: jetstream::Context,
    session: String,
    subject: String,
    node: String,
    lease: Lease,
    last_stream_seq: u64,
    seq: u64,
    shared: Arc<Counters>,
    /// Why the sink stopped writing, for good.
    stopped: Option<ClusterError>,
}

impl Publisher {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut batch = Vec::new();
        let mut flushes = Vec::new();
        while rx.recv_many(&mut batch, 256).await > 0 {
            let mut records = Vec::new();
            for command in batch.drain(..) {
                match command {
                    Command::Record(file, line) => records.push((file, line)),
                    Command::Flush(tx) => flushes.push((records.len(), tx)),
                }
            }
            // Each flush answers after the records queued before it.
            let mut done = 0;
            for (upto, tx) in flushes.drain(..) {
                self.publish_all(&records[done..upto]).await;
                done = upto;
                let _ = tx.send(match &self.stopped {
                    None => Ok(self.seq),
                    Some(e) => Err(copy(e)),
                });
            }
            self.publish_all(&records[done..]).await;
        }
    }

    async fn publish_all(&mut self, records: &[(u32, Bytes)]) {
        if records.is_empty() {
            return;
        }
        if self.stopped.is_none() {
            if let Err(e) = self.lease.check() {
                self.stopped = Some(e);
            }
        }
        if self.stopped.is_some() {
            self.shared
                .failed
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            return;
        }
        // One message at a time, each conditional on the subject's last sequence being the one
        // this sink wrote last (see `batch`): records land in order even when a publish has to
        // be tried again, and a node that lost the session to another cannot append after the
        // other's records. The records queued while one message was in flight go out together
        // in the next, so a burst costs one quorum round trip, not one per record.
        let mut rest = records;
        while !rest.is_empty() {
            let n = batch::chunk_len(rest, |r| &r.1[..], |a, b| a.0 == b.0);
            let (chunk, after) = rest.split_at(n);
            rest = after;
            if self.stopped.is_some() {
                self.shared.failed.fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            match self.publish_chunk(chunk).await {
                Ok(()) => self.shared.written.store(self.seq, Ordering::Relaxed),
                Err(e) => {
                    // The message and everything after it are not stored, as one record
                    // refused was before.
                    self.stopped = Some(e);
                    self.shared.failed.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
    }

    /// Publishes `chunk` (records of one file) as one message, tried again while JetStream does
    /// not answer, and counts it written once acknowledged.
    async fn publish_chunk(&mut self, chunk: &[(u32, Bytes)]) -> Result<(), ClusterError> {
        let first = self.seq + 1;
        let last = self.seq + chunk.len() as u64;
        let mut message = PublishMessage::build()
            .payload(batch::join(chunk.iter().map(|r| &r.1)))
            .header(SEQ_HEADER, last.to_string().as_str())
            .header(FILE_HEADER, chunk[0].0.to_string().as_str())
            .header(NODE_HEADER, self.node.as_str())
            .message_id(format!("{}:{last}", self.session))
            .expected_last_subject_sequence(self.last_stream_seq);
        if chunk.len() > 1 {
            message = message.header(batch::COUNT_HEADER, chunk.len().to_string().as_str());
        }
        let start = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            self.lease.check()?;
            let ack = match self.send(message.clone()).await {
                Ok(ack) => ack.await.map_err(|e| (e.kind(), e.to_string())),
                Err(e) => Err((PublishErrorKind::Other, e.to_string())),
            };
            match ack {
                Ok(ack) => {
                    self.last_stream_seq = ack.sequence;
                    self.seq = last;
                    return Ok(());
                }
                Err((PublishErrorKind::WrongLastSequence, _)) => {
                    return Err(ClusterError::Fenced {
                        session: self.session.clone(),
                        reason: "another node appended to this session's trace".into(),
                    })
                }
                Err((_, e)) if start.elapsed() + pause > RETRY_FOR => {
                    tracing::error!(session = %self.session, first, last, "trace records not stored: {e}");
                    return Err(ClusterError::Unavailable {
                        reason: format!(
                            "trace records {first}..={last} of {} not stored: {e}",
                            self.session
                        ),
                    });
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    async fn send(
        &self,
        message: PublishMessage,
    ) -> Result<async_nats::jetstream::context::PublishAckFuture, ClusterError> {
        self.js
            .send_publish(self.subject.clone(), message)
            .await
            .map_err(|e| ClusterError::unavailable("publishing a trace record", e))
    }
}

fn copy(e: &ClusterError) -> ClusterError {
    match e {
        ClusterError::Fenced { session, reason } => ClusterError::Fenced {
            session: session.clone(),
            reason: reason.clone(),
        },
        other => ClusterError::Unavailable {
            reason: other.to_string(),
        },
    }
}
