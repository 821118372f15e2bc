//! A stub OpenAI-compatible model on loopback for the CLI tests: each request's body goes to a
//! function that says what to answer, so a test scripts a real provider path (HTTP, SSE,
//! errors) without a model server. Shared by the test binaries through `#[path]`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// What the stub answers one request with.
#[derive(Clone)]
pub enum Reply {
    /// `200` and these chat-completion chunks as SSE, then `[DONE]`.
    Stream(Vec<serde_json::Value>),
    /// This status line (`503 Service Unavailable`) with an OpenAI-style error body.
    Error(&'static str, &'static str),
}

/// Serves until the test process ends; returns the base URL (`http://127.0.0.1:PORT/v1`).
pub fn serve(reply: impl Fn(&str) -> Reply + Send + 'static) -> String {
    serve_listing(None, reply)
}

/// [`serve`], and `GET /v1/models` lists `models` as an OpenAI-compatible server does.
pub fn serve_listing(
    models: Option<Vec<&'static str>>,
    reply: impl Fn(&str) -> Reply + Send + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (line, body) = read_request(&mut conn);
            if let (Some(ids), true) = (&models, line.starts_with("GET /v1/models ")) {
                let data: Vec<_> = ids
                    .iter()
                    .map(|id| serde_json::json!({"id": id, "object": "model"}))
                    .collect();
                let body = serde_json::json!({"object": "list", "data": data}).to_string();
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
                continue;
            }
            // Only the model's endpoint is the script's: anything else (penguin asking a local
            // server for its context window, GET /props, POST /api/show) is not found, as an
            // OpenAI-compatible server that is not llama.cpp or Ollama answers it.
            if !line.contains("/chat/completions ") {
                let _ = conn.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            }
            let out = match reply(&body) {
                Reply::Stream(chunks) => {
                    let mut out = String::from(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                    );
                    for c in chunks {
                        out.push_str(&format!("data: {c}\n\n"));
                    }
                    out.push_str("data: [DONE]\n\n");
                    out
                }
                Reply::Error(status, message) => {
                    let body = serde_json::json!({"error": {"message": message, "type": "mock"}})
                        .to_string();
                    format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                }
            };
            let _ = conn.write_all(out.as_bytes());
        }
    });
    url
}

/// The requests a [`serve_script`] stub received, parsed, in order.
#[derive(Clone, Default)]
pub struct Requests(Arc<Mutex<Vec<serde_json::Value>>>);

impl Requests {
    /// Every request so far.
    pub fn all(&self) -> Vec<serde_json::Value> {
        self.0.lock().unwrap().clone()
    }
}

/// Answers the requests in turn with `replies` (the last one again once they run out) and
/// keeps each request's body.
pub fn serve_script(replies: Vec<Reply>) -> (String, Requests) {
    assert!(!replies.is_empty());
    let requests = Requests::default();
    let seen = requests.clone();
    let url = serve(move |body| {
        let mut all = seen.0.lock().unwrap();
        all.push(serde_json::from_str(body).unwrap_or(serde_json::Value::Null));
        replies[(all.len() - 1).min(replies.len() - 1)].clone()
    });
    (url, requests)
}

/// The names of the tools a request offers.
pub fn offered_tools(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// The messages of a request with this `role`.
pub fn messages<'a>(request: &'a serde_json::Value, role: &str) -> Vec<&'a serde_json::Value> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == role)
        .collect()
}

/// A streamed answer of `text`.
pub fn text(text: &str) -> Reply {
    Reply::Stream(vec![
        serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]}),
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ])
}

/// `reply` with a usage chunk at its end (1,000 prompt tokens of which 200 cached, 100 out),
/// so its task records a `token_usage`.
#[allow(dead_code)]
pub fn with_usage(reply: Reply) -> Reply {
    let Reply::Stream(mut chunks) = reply else {
        return reply;
    };
    chunks.push(serde_json::json!({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100, "prompt_tokens_details": {"cached_tokens": 200}}}));
    Reply::Stream(chunks)
}

/// A streamed call of `name` with `arguments` (JSON text), id `call_1`.
pub fn tool_call(name: &str, arguments: &str) -> Reply {
    Reply::Stream(vec![
        serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}, "finish_reason": null}]}),
        serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ])
}

/// Whether a request body carries a tool's output (the model's turn after a call).
pub fn has_tool_output(body: &str) -> bool {
    body.contains(r#""role":"tool""#)
}

/// The request line and the body of one request.
fn read_request(conn: &mut TcpStream) -> (String, String) {
    let mut reader = BufReader::new(conn);
    let mut length = 0;
    let mut request_line = String::new();
    let _ = reader.read_line(&mut request_line);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    (request_line, String::from_utf8_lossy(&body).into_owned())
}
