//! The SSE endpoint over real sockets: setup order, replay, resync and fan-out.

use penguin_sse_transport::SseDecoder;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use penguin_sse_transport::{
    last_event_id, sse_response, Channel, ChannelConfig, EventData, ServerEvent, SessionStatus,
    SseConfig, TaskState,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

fn task_state() -> ServerEvent {
    ServerEvent::TaskState(TaskState {
        state: SessionStatus::Running,
        queued: Some(0),
        pending_steering: None,
        pending_follow_ups: None,
    })
}

async fn stream(State(ch): State<Arc<Channel>>, headers: HeaderMap) -> Response {
    sse_response(
        &ch,
        last_event_id(&headers).as_deref(),
        vec![task_state()],
        &SseConfig::default(),
    )
}

async fn serve(ch: Arc<Channel>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/stream", get(stream)).with_state(ch);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[derive(Debug, Clone, PartialEq)]
struct Ev {
    id: String,
    event: Option<String>,
    data: String,
}

/// A minimal HTTP/1.1 SSE client: chunked decoding, and penguin's one SSE parser.
struct SseClient {
    io: BufReader<TcpStream>,
    headers: String,
    decoder: SseDecoder,
    ready: std::collections::VecDeque<Ev>,
    last_id: Option<String>,
}

impl SseClient {
    async fn connect(addr: std::net::SocketAddr, last_id: Option<&str>) -> SseClient {
        Self::connect_with(TcpStream::connect(addr).await.unwrap(), last_id).await
    }

    async fn connect_with(mut tcp: TcpStream, last_id: Option<&str>) -> SseClient {
        let mut req =
            "GET /stream HTTP/1.1\r\nHost: test\r\nAccept: text/event-stream\r\n".to_owned();
        if let Some(id) = last_id {
            req.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        req.push_str("\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut io = BufReader::new(tcp);
        let mut headers = String::new();
        loop {
            let mut line = String::new();
            io.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            headers.push_str(&line.to_ascii_lowercase());
        }
        assert!(headers.starts_with("http/1.1 200"), "{headers}");
        assert!(headers.contains("transfer-encoding: chunked"), "{headers}");
        SseClient {
            io,
            headers,
            decoder: SseDecoder::new(),
            ready: Default::default(),
            last_id: None,
        }
    }

    /// Reads one chunk into `body`; false at the end of the body.
    async fn read_chunk(&mut self) -> bool {
        let mut line = String::new();
        if self.io.read_line(&mut line).await.unwrap() == 0 {
            return false;
        }
        let size = usize::from_str_radix(line.trim_end(), 16).unwrap();
        let mut chunk = vec![0; size + 2];
        self.io.read_exact(&mut chunk).await.unwrap();
        assert_eq!(&chunk[size..], b"\r\n");
        for e in self.decoder.feed(&chunk[..size]).expect("valid SSE") {
            assert!(!e.data.contains('\n'), "single-line data: {:?}", e.data);
            // The parser carries the last id over; a fresh one proves each event has its own.
            assert_ne!(e.id, self.last_id, "every event has an id");
            self.last_id = e.id.clone();
            self.ready.push_back(Ev {
                id: e.id.expect("every event has an id"),
                event: e.event,
                data: e.data,
            });
        }
        size > 0
    }

    async fn next(&mut self) -> Option<Ev> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                return Some(ev);
            }
            if !self.read_chunk().await {
                return None;
            }
        }
    }

    async fn take(&mut self, n: usize) -> Vec<Ev> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.next().await.expect("stream ended early"));
        }
        out
    }
}

fn data(s: &str) -> EventData {
    EventData::Text(Arc::from(s))
}

fn seq(ev: &Ev) -> u64 {
    ev.id.rsplit_once('-').unwrap().1.parse().unwrap()
}

const CONNECT_GUARD: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_fresh_connection_starts_with_the_initial_events_then_live() {
    let ch = Channel::new(ChannelConfig::default());
    for i in 0..3 {
        ch.publish(data(&format!(r#"{{"n":{i}}}"#)), None);
    }
    let addr = serve(ch.clone()).await;
    let mut c = SseClient::connect(addr, None).await;
    assert!(c.headers.contains("content-type: text/event-stream"));
    assert!(c.headers.contains("cache-control: no-cache"));
    assert!(c.headers.contains("x-accel-buffering: no"));
    ch.publish(data(r#"{"n":"live"}"#), None);
    let got = c.take(2).await;
    assert_eq!(got[0].event.as_deref(), Some("server_event"));
    assert_eq!(got[0].data, task_state().to_json());
    assert_eq!(got[0].id, format!("{}-4", ch.epoch()));
    assert_eq!(got[1].event, None);
    assert_eq!(got[1].data, r#"{"n":"live"}"#);
    assert_eq!(seq(&got[1]), 5);
}

#[tokio::test]
async fn reconnect_replays_exactly_the_gap_then_initial_then_live() {
    let ch = Channel::new(ChannelConfig::default());
    let addr = serve(ch.clone()).await;
    let mut c = SseClient::connect(addr, None).await;
    for i in 0..5 {
        ch.publish(data(&format!(r#"{{"n":{i}}}"#)), None);
    }
    let first = c.take(6).await;
    // Read only up to event n=2, then drop the connection: n=3 and n=4 were sent but are lost
    // with the socket, which is exactly what a flaky network does.
    let resume = first[3].id.clone();
    assert_eq!(first[3].data, r#"{"n":2}"#);
    drop(c);
    for i in 5..8 {
        ch.publish(data(&format!(r#"{{"n":{i}}}"#)), None);
    }
    let mut c = tokio::time::timeout(CONNECT_GUARD, SseClient::connect(addr, Some(&resume)))
        .await
        .unwrap();
    // The handler has subscribed by the time the headers arrive, so this is live.
    ch.publish(data(r#"{"n":"live"}"#), None);
    let got = c.take(7).await;
    let datas: Vec<&str> = got.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(
        datas,
        [
            r#"{"n":3}"#,
            r#"{"n":4}"#,
            r#"{"n":5}"#,
            r#"{"n":6}"#,
            r#"{"n":7}"#,
            task_state().to_json().as_str(),
            r#"{"n":"live"}"#,
        ]
    );
    let seqs: Vec<u64> = got.iter().map(seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[tokio::test]
async fn an_evicted_gap_gets_resync_required_first() {
    let ch = Channel::new(ChannelConfig {
        max_events: 4,
        ..ChannelConfig::default()
    });
    let addr = serve(ch.clone()).await;
    let mut c = SseClient::connect(addr, None).await;
    let resume = c.next().await.unwrap().id;
    drop(c);
    for i in 0..10 {
        ch.publish(data(&format!(r#"{{"n":{i}}}"#)), None);
    }
    let mut c = SseClient::connect(addr, Some(&resume)).await;
    ch.publish(data(r#"{"n":"live"}"#), None);
    let got = c.take(3).await;
    assert_eq!(got[0].event.as_deref(), Some("server_event"));
    assert_eq!(got[0].data, r#"{"type":"resync_required"}"#);
    assert_eq!(got[1].data, task_state().to_json());
    assert_eq!(got[2].data, r#"{"n":"live"}"#);

    // Another epoch (a restarted server) also misses.
    let mut c = SseClient::connect(addr, Some("00000000-3")).await;
    assert_eq!(
        c.next().await.unwrap().data,
        r#"{"type":"resync_required"}"#
    );
}

/// A client that stops reading fills its socket buffers and then only keeps its place: a reading
/// client receives every event without waiting on it, and when the stalled one reads again it
/// gets what is still buffered, `resync_required` for what fell out, then live events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_socket_delays_no_one_and_resyncs_when_it_reads_again() {
    let ch = Channel::new(ChannelConfig {
        max_events: 64,
        ..ChannelConfig::default()
    });
    let addr = serve(ch.clone()).await;
    let sock = TcpSocket::new_v4().unwrap();
    // Small buffers so the stall reaches the channel after little data.
    sock.set_recv_buffer_size(4096).unwrap();
    let stalled_tcp = sock.connect(addr).await.unwrap();
    let mut stalled = SseClient::connect_with(stalled_tcp, None).await;
    let mut good = SseClient::connect(addr, None).await;
    let _ = good.take(1).await;
    assert_eq!(ch.subscriber_count(), 2);

    let payload = format!(r#"{{"pad":"{}"}}"#, "x".repeat(16 * 1024));
    let run = async {
        // Publish in rounds and wait for the good client to catch up after each: the test
        // proceeds exactly as fast as the reading client, whatever the stalled one does.
        for _ in 0..64 {
            let mut last = 0;
            for _ in 0..16 {
                last = ch.publish(data(&payload), None).seq;
            }
            loop {
                let ev = good.next().await.expect("good client kept");
                if seq(&ev) == last {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the reading client was delayed");
    assert_eq!(ch.subscriber_count(), 2, "the stalled one keeps its place");
    ch.publish(data(r#"{"n":"after"}"#), None);
    assert_eq!(good.next().await.unwrap().data, r#"{"n":"after"}"#);
    let mut seen = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), stalled.next())
            .await
            .expect("the stalled client reads on")
            .expect("still connected");
        let resync = ev.data == r#"{"type":"resync_required"}"#;
        seen.push(seq(&ev));
        if resync {
            break;
        }
    }
    seen.pop();
    // Its own hello, then the broadcast events it kept up with, contiguous.
    assert!(
        seen[1..].windows(2).all(|w| w[1] == w[0] + 1),
        "what it read before the resync has no gap: {seen:?}"
    );
    // After the resync it reads on from the newest event.
    ch.publish(data(r#"{"n":"next"}"#), None);
    assert_eq!(stalled.next().await.unwrap().data, r#"{"n":"next"}"#);
}
