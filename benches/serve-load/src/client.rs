//! The client side: one keep-alive HTTP/1.1 connection (hyper's connection API, no pool) and a
//! minimal SSE reader that hands out each event's fields without copying them.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Bytes read from a connection at a time.
const READ_BUFFER: usize = 32 * 1024;

/// Errors are said in words: the bench reports them and stops.
pub type Error = String;

/// Where the server is and the token it wants.
#[derive(Clone, Debug)]
pub struct Target {
    /// The server's address.
    pub addr: SocketAddr,
    /// `Bearer <token>`.
    pub auth: String,
}

/// One connection, kept alive across requests.
#[derive(Debug)]
pub struct Conn {
    send: SendRequest<String>,
    target: Target,
}

impl Conn {
    /// Connects (the connection's driver runs on its own task).
    pub async fn open(target: &Target) -> Result<Conn, Error> {
        let tcp = TcpStream::connect(target.addr)
            .await
            .map_err(|e| format!("connect {}: {e}", target.addr))?;
        let _ = tcp.set_nodelay(true);
        // A fixed, small read buffer: hyper's adaptive one grows past malloc's mmap threshold
        // under a burst, and a fresh mapping per read costs more in page faults than reading.
        let (send, conn) = http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUFFER))
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            send,
            target: target.clone(),
        })
    }

    /// Sends one request; the response's body is the caller's to read.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<Response<Incoming>, Error> {
        self.send
            .ready()
            .await
            .map_err(|e| format!("{method} {path}: connection closed: {e}"))?;
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.target.addr.to_string())
            .header("authorization", &self.target.auth);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req
            .body(body.unwrap_or_default())
            .map_err(|e| format!("{method} {path}: {e}"))?;
        self.send
            .send_request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))
    }

    /// The server's address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.target.addr
    }

    /// A whole exchange: the status and the body.
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<(StatusCode, Vec<u8>), Error> {
        let resp = self.request(method, path, body).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut all = Vec::new();
        while let Some(chunk) = next_chunk(&mut body).await? {
            all.extend_from_slice(&chunk);
        }
        Ok((status, all))
    }

    /// A whole exchange that must answer 2xx; returns the body.
    pub async fn ok(
        &mut self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<Vec<u8>, Error> {
        let (status, body) = self.call(method, path, body).await?;
        if !status.is_success() {
            return Err(format!(
                "{method} {path}: {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(body)
    }
}

/// The next data chunk of a response body, `None` at its end.
pub async fn next_chunk(body: &mut Incoming) -> Result<Option<Bytes>, Error> {
    loop {
        match poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            None => return Ok(None),
            Some(Err(e)) => return Err(format!("body: {e}")),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// One SSE event: its raw block and the two fields the bench reads, found in the one pass
/// over its lines that finds its end.
#[derive(Debug, Default)]
pub struct SseEvent<'a> {
    block: &'a [u8],
    event: &'a [u8],
    data: &'a [u8],
}

impl<'a> SseEvent<'a> {
    /// The `event:` field (empty for the default type).
    pub fn event(&self) -> &'a [u8] {
        self.event
    }

    /// The first `data:` line (penguin's data is one JSON line).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Whether the event's text contains `needle`.
    pub fn data_has(&self, needle: &[u8]) -> bool {
        memchr::memmem::find(self.block, needle).is_some()
    }
}

/// Cuts a byte stream into SSE events; comments (heartbeats) are skipped.
#[derive(Debug, Default)]
pub struct SseReader {
    rest: Vec<u8>,
}

impl SseReader {
    /// Feeds one chunk; `each` sees every event it completes.
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(&SseEvent<'_>)) {
        if self.rest.is_empty() {
            let used = events(chunk, &mut each);
            self.rest.extend_from_slice(&chunk[used..]);
        } else {
            self.rest.extend_from_slice(chunk);
            let used = events(&self.rest, &mut each);
            self.rest.drain(..used);
        }
    }
}

/// A field's value: the line after its name and colon, less one leading space.
fn field(line: &[u8], len: usize) -> &[u8] {
    let v = &line[len..];
    v.strip_prefix(b" ").unwrap_or(v)
}

/// Calls `each` for every complete event in `bytes`; returns the bytes used.
fn events(bytes: &[u8], each: &mut impl FnMut(&SseEvent<'_>)) -> usize {
    let (mut start, mut line) = (0, 0);
    let mut ev = SseEvent::default();
    let mut any = false;
    for nl in memchr::memchr_iter(b'\n', bytes) {
        let l = &bytes[line..nl];
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        line = nl + 1;
        if l.is_empty() {
            // A blank line ends the event; a block of comments only (heartbeats) is none.
            if any {
                ev.block = &bytes[start..nl];
                each(&ev);
            }
            ev = SseEvent::default();
            any = false;
            start = nl + 1;
        } else if l[0] != b':' {
            any = true;
            if l.starts_with(b"event:") {
                ev.event = field(l, 6);
            } else if ev.data.is_empty() && l.starts_with(b"data:") {
                ev.data = field(l, 5);
            }
        }
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_across_chunks() {
        let mut r = SseReader::default();
        let mut seen = Vec::new();
        let mut push = |e: &SseEvent<'_>| {
            seen.push((
                String::from_utf8_lossy(e.event()).into_owned(),
                String::from_utf8_lossy(e.data()).into_owned(),
            ))
        };
        r.feed(b": hi\n\nid: 1\nevent: a\ndata: {\"x\"", &mut push);
        r.feed(b":1}\n\ndata: 2\n", &mut push);
        r.feed(b"\n", &mut push);
        assert_eq!(
            seen,
            [
                ("a".to_owned(), "{\"x\":1}".to_owned()),
                (String::new(), "2".to_owned())
            ]
        );
    }
}
