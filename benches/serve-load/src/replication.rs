//! Replication latency per record, measured at the source: a probe joins the bench's NATS as
//! a node of its own (`penguin-cluster`, as a server's node does), holds one session's lease
//! and times trace records and events one at a time, each from the moment it is handed over
//! to the moment JetStream acknowledged it (stored on its replicas). One at a time is the
//! worst case: nothing shares a message with it.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use penguin_cluster::{Cluster, ClusterConfig, ClusterSecret};

use crate::client::Error;

/// Records (and events) timed.
const SAMPLES: usize = 1_000;

/// Acknowledgement latencies, sorted.
pub struct Latencies {
    pub records: Vec<Duration>,
    pub events: Vec<Duration>,
}

/// Times [`SAMPLES`] trace records and as many events on a fresh session of the NATS at
/// `urls` (credentials in them), with `replicas` replicas and the nodes' secret.
pub async fn probe(
    urls: &[String],
    replicas: usize,
    secret_file: &Path,
) -> Result<Latencies, Error> {
    let secret = ClusterSecret::from_file(secret_file).map_err(|e| e.to_string())?;
    let mut config = ClusterConfig::new(urls.to_vec(), "probe", secret);
    config.replicas = replicas;
    let cluster = Cluster::connect(config)
        .await
        .map_err(|e| format!("the probe joins NATS: {e}"))?;
    let lease = cluster
        .leases()
        .acquire("replication-probe")
        .await
        .map_err(|e| e.to_string())?;
    let renewal = lease.keep_alive();
    let line = |n: usize| Bytes::from(format!(r#"{{"type":"probe","n":{n}}}"#));

    let sink = cluster
        .traces()
        .sink("replication-probe", lease.clone())
        .await
        .map_err(|e| e.to_string())?;
    let mut records = Vec::with_capacity(SAMPLES);
    for n in 0..SAMPLES {
        let began = Instant::now();
        sink.record(line(n));
        sink.flush().await.map_err(|e| e.to_string())?;
        records.push(began.elapsed());
    }

    let mut publisher = cluster
        .events()
        .publisher("replication-probe", lease.clone())
        .await
        .map_err(|e| e.to_string())?;
    let mut events = Vec::with_capacity(SAMPLES);
    for n in 0..SAMPLES {
        let began = Instant::now();
        publisher
            .publish(line(n))
            .await
            .map_err(|e| e.to_string())?;
        events.push(began.elapsed());
    }
    renewal.abort();
    let _ = lease.release().await;
    records.sort_unstable();
    events.sort_unstable();
    Ok(Latencies { records, events })
}
