//! A tiny local HTTP/1.1 server that plays canned responses, one per connection in the order
//! connections arrive, and records what each request sent: the other end of fault injection.
//!
//! Each connection is served on its own task, so a response that stalls or streams forever
//! never holds up the next request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One step of a canned response body.
#[derive(Clone, Debug)]
pub enum Step {
    /// Write these bytes as one HTTP chunk.
    Chunk(Vec<u8>),
    /// Write these bytes as that many HTTP chunks, one after another (a body far larger than
    /// a test would hold in memory, without building it).
    Repeat(Vec<u8>, usize),
    /// Wait before the next step.
    Sleep(Duration),
    /// Drop the connection without finishing the chunked body.
    Drop,
}

impl Step {
    /// The bytes of a [`Step::Chunk`]. Panics on any other step.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Step::Chunk(b) => b,
            other => panic!("not a chunk: {other:?}"),
        }
    }
}

/// One canned response.
#[derive(Clone, Debug)]
pub enum Canned {
    /// `200` with the server's streaming content type, chunked, then the steps; a clean end
    /// unless a [`Step::Drop`].
    Stream(Vec<Step>),
    /// A complete response: status, reason phrase, JSON body.
    Status(u16, &'static str, String),
    /// Like [`Canned::Stream`] but offering keep-alive, then closing the connection unanswered
    /// as soon as the client sends its next request on it (llama.cpp's behaviour after a
    /// streamed reply).
    StreamThenCloseIdle(Vec<Step>),
    /// Like [`Canned::Status`], with more response headers (`Retry-After`).
    StatusWithHeaders(u16, &'static str, Vec<(&'static str, String)>, String),
    /// An error status whose body is this many bytes of `x` (an endless proxy error page),
    /// sent in 64 KiB writes.
    HugeError(u16, &'static str, usize),
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The request path, query included.
    pub path: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`null` when it was not JSON).
    pub body: Value,
}

impl Seen {
    /// The first value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The server: [`start`](Server::start) it with the responses to play, point a model at
/// [`base_url`](Server::base_url), then inspect [`requests`](Server::requests).
#[derive(Debug)]
pub struct Server {
    base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Response body bytes the client accepted so far (writes that went through).
    written: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Server {
    /// A server whose streams are `text/event-stream`.
    pub async fn start(responses: Vec<Canned>) -> Server {
        Server::start_as("text/event-stream", responses).await
    }

    /// A server whose streams have `content_type` (e.g. `application/x-ndjson`).
    pub async fn start_as(content_type: &'static str, responses: Vec<Canned>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let addr = listener.local_addr().expect("a bound address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let written = Arc::new(AtomicUsize::new(0));
        let (log, counter) = (seen.clone(), written.clone());
        let task = tokio::spawn(async move {
            let mut served = Vec::new();
            for canned in responses {
                let Ok((socket, _)) = listener.accept().await else {
                    break;
                };
                let (log, counter) = (log.clone(), counter.clone());
                served.push(tokio::spawn(serve(
                    socket,
                    canned,
                    content_type,
                    log,
                    counter,
                )));
            }
            for handle in served {
                let _ = handle.await;
            }
        });
        Server {
            base_url: format!("http://{addr}"),
            seen,
            written,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash; any path may follow.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The requests received so far, in the order they were read.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Response body bytes written so far.
    pub fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// Waits (30 s at most) until every canned response was served, or given up on because
    /// the client went away, and returns how many body bytes got through.
    pub async fn finished(self) -> usize {
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the server finishes once the client hangs up")
            .expect("the server task does not panic");
        self.written.load(Ordering::SeqCst)
    }
}

async fn serve(
    mut socket: TcpStream,
    canned: Canned,
    content_type: &'static str,
    log: Arc<Mutex<Vec<Seen>>>,
    written: Arc<AtomicUsize>,
) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    log.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(request);
    if let Canned::StreamThenCloseIdle(steps) = canned {
        if write_stream(&mut socket, content_type, false, steps, &written)
            .await
            .is_ok()
        {
            // The reused connection's request is read and never answered.
            let _ = read_request(&mut socket).await;
        }
        return;
    }
    // A client that went away mid-response is part of some tests.
    let _ = respond(&mut socket, canned, content_type, &written).await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    Some(Seen {
        path,
        headers,
        body,
    })
}

async fn respond(
    socket: &mut TcpStream,
    canned: Canned,
    content_type: &'static str,
    written: &AtomicUsize,
) -> std::io::Result<()> {
    match canned {
        Canned::Status(code, reason, body) => {
            let head = format!(
                "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
        }
        Canned::StatusWithHeaders(code, reason, headers, body) => {
            let extra: String = headers
                .iter()
                .map(|(name, value)| format!("{name}: {value}\r\n"))
                .collect();
            let head = format!(
                "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(body.as_bytes()).await?;
        }
        Canned::Stream(steps) | Canned::StreamThenCloseIdle(steps) => {
            write_stream(socket, content_type, true, steps, written).await?;
        }
        Canned::HugeError(code, reason, len) => {
            let head = format!(
                "HTTP/1.1 {code} {reason}\r\ncontent-type: text/html\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
            );
            socket.write_all(head.as_bytes()).await?;
            let block = vec![b'x'; 64 * 1024];
            let mut left = len;
            while left > 0 {
                let n = left.min(block.len());
                socket.write_all(&block[..n]).await?;
                written.fetch_add(n, Ordering::SeqCst);
                left -= n;
            }
        }
    }
    socket.shutdown().await
}

/// Writes a chunked `200` response; a [`Step::Drop`] stops before its end.
async fn write_stream(
    socket: &mut TcpStream,
    content_type: &str,
    close: bool,
    steps: Vec<Step>,
    written: &AtomicUsize,
) -> std::io::Result<()> {
    let connection = if close { "close" } else { "keep-alive" };
    socket
        .write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\nconnection: {connection}\r\n\r\n").as_bytes())
        .await?;
    for step in steps {
        match step {
            Step::Chunk(bytes) => write_chunk(socket, &bytes, written).await?,
            Step::Repeat(bytes, times) => {
                for _ in 0..times {
                    write_chunk(socket, &bytes, written).await?;
                }
            }
            Step::Sleep(d) => tokio::time::sleep(d).await,
            Step::Drop => return Ok(()),
        }
    }
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await
}

/// Writes `bytes` as one HTTP chunk and counts them once they went through.
async fn write_chunk(
    socket: &mut TcpStream,
    bytes: &[u8],
    written: &AtomicUsize,
) -> std::io::Result<()> {
    if bytes.is_empty() {
        // A zero-length chunk would end the body.
        return Ok(());
    }
    socket
        .write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
        .await?;
    socket.write_all(bytes).await?;
    socket.write_all(b"\r\n").await?;
    socket.flush().await?;
    written.fetch_add(bytes.len(), Ordering::SeqCst);
    Ok(())
}
