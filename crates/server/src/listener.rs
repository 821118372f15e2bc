//! Accepting connections with limits: at most `max_connections` at once, of which at most
//! `max_streams` SSE streams (the routes refuse more with 503), and a client that does not
//! finish its request headers in time is dropped, so neither long-lived streams nor slow or idle
//! sockets can starve API requests of descriptors or slots.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Limits of the accept loop (request bodies are timed separately, see `ServeOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; more wait in the kernel's backlog. `None`: what the
    /// process's open-file limit allows, less a reserve for traces, sessions and tools.
    pub max_connections: Option<usize>,
    /// Of those, SSE streams at once; a stream asked for beyond it is answered 503 at once.
    /// `None`: all but an eighth of the connections (at least 16 are kept for API requests).
    /// Always less than the connections, so an API request is served while streams are at
    /// their cap.
    pub max_streams: Option<usize>,
    /// Time a client has to send a request's headers (also between keep-alive requests).
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: None,
            max_streams: None,
            header_timeout: Duration::from_secs(10),
        }
    }
}

impl ConnectionLimits {
    /// Connections served at once (at least 2: one stream, one request).
    pub fn connections(&self) -> usize {
        self.max_connections
            .unwrap_or_else(|| {
                let files = open_file_limit();
                files.saturating_sub((files / 8).max(64))
            })
            .max(2)
    }

    /// SSE streams at once: [`max_streams`](Self::max_streams), at most all connections but
    /// one.
    pub fn streams(&self) -> usize {
        let connections = self.connections();
        let api = (connections / 8).max(16).min(connections - 1);
        self.max_streams
            .unwrap_or(connections - api)
            .clamp(1, connections - 1)
    }
}

/// The process's soft limit of open files.
pub fn open_file_limit() -> usize {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| {
            usize::try_from(soft).unwrap_or(usize::MAX)
        })
}

/// Raises the soft limit of open files to the hard limit (what the system allows this process
/// without privileges) and returns the new soft limit. Each connection is a descriptor: a
/// server of thousands of streams needs more than the usual 1,024.
pub fn raise_open_file_limit() -> std::io::Result<usize> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(std::io::Error::from)?;
    }
    Ok(open_file_limit())
}

// After a failed accept (out of descriptors, typically) the loop pauses instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting, closes idle
/// keep-alive connections, lets requests in flight finish and waits (at most `drain`) for them.
pub async fn serve_with_limits(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let connections = limits.connections();
    let slots = Arc::new(Semaphore::new(connections));
    // Tells every open connection to shut down gracefully once `shutdown` completed.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::error!("[server] accept failed: {e}; pausing {ACCEPT_BACKOFF:?}");
                drop(permit);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(app.clone());
        let header_timeout = limits.header_timeout;
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                // The web app's event streams are WebSockets.
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                // Stopping (or the loop gone): an idle connection closes now, a request in
                // flight finishes first.
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                // Timeouts and resets by clients are normal; only say so at debug level.
                tracing::debug!("[server] connection from {peer} ended: {e}");
            }
            drop(permit);
        });
    }
    let _ = stopping.send(true);
    // Every slot back means every connection has ended.
    let all = u32::try_from(connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(drain, slots.acquire_many(all)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_always_leave_room_for_api_requests() {
        let of = |c: Option<usize>, s: Option<usize>| {
            let l = ConnectionLimits {
                max_connections: c,
                max_streams: s,
                ..ConnectionLimits::default()
            };
            (l.connections(), l.streams())
        };
        assert_eq!(of(Some(512), None), (512, 448));
        assert_eq!(of(Some(100), None), (100, 84));
        assert_eq!(of(Some(20_000), None), (20_000, 17_500));
        assert_eq!(of(Some(512), Some(10_000)), (512, 511));
        assert_eq!(of(Some(512), Some(10)), (512, 10));
        assert_eq!(of(Some(0), None), (2, 1));
        let (c, s) = of(None, None);
        assert!(s < c && c <= open_file_limit(), "{c} {s}");
    }
}
