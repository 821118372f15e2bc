//! Requests for a session another node owns, carried to that node over NATS request/reply
//! and run there through its own router, the answer carried back.
//!
//! A request is one message on `penguin.http.<node>`: the method and URI in headers, the
//! HTTP headers prefixed `Http-`, the body as payload. The owner answers at once with an
//! empty "accepted" message (so a paused or dead owner is told from a slow one), then with
//! the response in as many parts as NATS's payload limit needs.
//!
//! The user's credentials never go on the bus: the sending node checked the token, leaves
//! `Authorization`, cookies and a query's `access_token` out, and signs the message under the
//! cluster secret ([`penguin_cluster::Signer`]). The owner runs only a request whose
//! signature verifies (fresh, not seen before), as authenticated ([`ForwardedBy`]); anything
//! else on the subject is refused with the reason, logged. Every reply is signed too, and
//! the sender takes only replies that verify, so nothing on NATS without the secret can
//! answer for a node.

use std::time::Duration;

use async_nats::{HeaderMap as NatsHeaders, StatusCode as NatsStatus};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use penguin_cluster::{Cluster, Signer};
use tower::ServiceExt;

use crate::error::ApiError;
use crate::placement::{ForwardError, ForwardedBy};

const METHOD: &str = "Penguin-Method";
const URI: &str = "Penguin-Uri";
const STATUS: &str = "Penguin-Status";
const PART: &str = "Penguin-Part";
const ACCEPTED: &str = "Penguin-Accepted";
/// Set (unsigned) on the answer to a request the owner refused, with the reason.
const REFUSED: &str = "Penguin-Refused";
const HTTP: &str = "Http-";

/// Largest answer carried back (a long session's `/messages`).
const MAX_RESPONSE: usize = 256 * 1024 * 1024;

/// How long a request's answer may take once the owner accepted it.
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

fn subject(node: &str) -> String {
    format!("penguin.http.{node}")
}

// Headers that describe one hop's connection, not the request.
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "content-length" | "te"
    )
}

// Headers that may carry the user's credentials: never on the bus (the sending node checked
// them; the owner trusts its signature instead).
fn credential(name: &str) -> bool {
    matches!(
        name,
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    )
}

/// `uri` without an `access_token` query parameter (the token, as streams take it).
fn without_token(uri: &Uri) -> String {
    let Some(query) = uri.query() else {
        return uri.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split('=').next() != Some("access_token"))
        .collect();
    if kept.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), kept.join("&"))
    }
}

/// The HTTP headers as a message carries them: `Http-` prefixed, trimmed (as NATS delivers
/// them), without the connection's own nor the user's credentials.
fn carry_headers(from: &axum::http::HeaderMap, into: &mut NatsHeaders) {
    for (name, value) in from {
        if hop_by_hop(name.as_str()) || credential(name.as_str()) {
            continue;
        }
        if let Ok(v) = value.to_str() {
            into.append(format!("{HTTP}{name}").as_str(), v.trim());
        }
    }
}

fn unavailable(doing: &str, e: impl std::fmt::Display) -> ForwardError {
    ForwardError::Failed(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "cluster_unavailable",
        format!("{doing}: {e}"),
    ))
}

/// Runs `req` on `node`. [`ForwardError::Unreachable`] when nobody answers for the node, or
/// it does not accept within half a lease: it is dead or paused, and its lease will lapse.
pub(super) async fn send(
    cluster: &Cluster,
    node: &str,
    req: Request,
) -> Result<Response, ForwardError> {
    let client = cluster.client();
    let signer = cluster.signer();
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ForwardError::Failed(ApiError::bad_request("invalid_body", e.to_string())))?;
    let mut headers = NatsHeaders::new();
    headers.insert(METHOD, parts.method.as_str());
    headers.insert(URI, without_token(&parts.uri).as_str());
    carry_headers(&parts.headers, &mut headers);
    signer.sign(&subject(node), &mut headers, &body);
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| unavailable("forwarding to the session's node", e))?;
    client
        .publish_with_reply_and_headers(subject(node), inbox.clone(), headers, body)
        .await
        .map_err(|e| unavailable("forwarding to the session's node", e))?;
    client
        .flush()
        .await
        .map_err(|e| unavailable("forwarding to the session's node", e))?;
    let accept_within = (cluster.config().lease_ttl / 2).max(Duration::from_secs(2));
    let accept_by = tokio::time::Instant::now() + accept_within;
    loop {
        let m = match tokio::time::timeout_at(accept_by, replies.next()).await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(unavailable("forwarding", "the reply subscription ended")),
            Err(_) => {
                return Err(ForwardError::Unreachable(format!(
                    "node {node} did not accept the request within {} ms",
                    accept_within.as_millis()
                )))
            }
        };
        if m.status == Some(NatsStatus::NO_RESPONDERS) {
            return Err(ForwardError::Unreachable(format!(
                "node {node} is not connected to the cluster"
            )));
        }
        if let Some(why) = m.headers.as_ref().and_then(|h| h.get(REFUSED)) {
            // Unsigned: a node refusing us cannot sign for us either (another secret).
            return Err(ForwardError::Failed(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "cluster_refused",
                format!(
                    "node {node} refused the forwarded request: {}; do the nodes share one \
                     cluster secret, and do their clocks agree?",
                    why.as_str()
                ),
            )));
        }
        if !verified(signer, &inbox, &m) {
            continue;
        }
        if m.headers
            .as_ref()
            .is_some_and(|h| h.get(ACCEPTED).is_some())
        {
            break;
        }
        return Err(unavailable("forwarding", "an answer without acceptance"));
    }
    let mut status = StatusCode::BAD_GATEWAY;
    let mut response_headers = Vec::new();
    let mut body = BytesMut::new();
    let (mut got, mut total) = (0usize, 1usize);
    while got < total {
        let m = match tokio::time::timeout(ANSWER_WITHIN, replies.next()).await {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => {
                return Err(unavailable(
                    "forwarding",
                    format!("node {node} accepted the request but did not answer it"),
                ))
            }
        };
        if !verified(signer, &inbox, &m) {
            continue;
        }
        let h = m.headers.unwrap_or_default();
        let part = h
            .get(PART)
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        let Some((i, n)) = part
            .split_once('/')
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        else {
            return Err(unavailable("forwarding", format!("a reply part {part:?}")));
        };
        if i != got {
            return Err(unavailable(
                "forwarding",
                format!("part {i} where {got} was due"),
            ));
        }
        if i == 0 {
            total = n.max(1);
            status = h
                .get(STATUS)
                .and_then(|s| s.as_str().parse::<u16>().ok())
                .and_then(|s| StatusCode::from_u16(s).ok())
                .unwrap_or(StatusCode::BAD_GATEWAY);
            for (name, values) in h.iter() {
                let name: &str = name.as_ref();
                let Some(http) = name.strip_prefix(HTTP) else {
                    continue;
                };
                for v in values {
                    response_headers.push((http.to_owned(), v.as_str().to_owned()));
                }
            }
        }
        body.extend_from_slice(&m.payload);
        got += 1;
    }
    let mut response = Response::new(Body::from(body.freeze()));
    *response.status_mut() = status;
    for (name, value) in response_headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(n, v);
        }
    }
    Ok(response)
}

/// Whether a reply on `inbox` is a node's (signed under the cluster secret, fresh). Anything
/// else is dropped, said in the log: whatever else publishes there cannot answer for a node.
fn verified(signer: &Signer, inbox: &str, m: &async_nats::Message) -> bool {
    match signer.verify(inbox, m.headers.as_ref(), &m.payload) {
        Ok(_) => true,
        Err(refusal) => {
            tracing::warn!("[cluster] dropped a reply to a forwarded request: {refusal}");
            false
        }
    }
}

/// Answers the requests forwarded to this node, each through `router` as authenticated
/// ([`ForwardedBy`]) once its signature verified: the sending node checked the user's token.
pub(super) fn serve(cluster: Cluster, router: axum::Router) {
    tokio::spawn(async move {
        let client = cluster.client().clone();
        loop {
            let mut requests = match client.subscribe(subject(cluster.node())).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("[cluster] cannot take forwarded requests: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            while let Some(m) = requests.next().await {
                let (client, router) = (client.clone(), router.clone());
                let signer = cluster.signer().clone();
                tokio::spawn(async move { answer(client, signer, router, m).await });
            }
        }
    });
}

async fn answer(
    client: async_nats::Client,
    signer: Signer,
    router: axum::Router,
    m: async_nats::Message,
) {
    let from = match signer.verify(m.subject.as_str(), m.headers.as_ref(), &m.payload) {
        Ok(from) => from,
        Err(refusal) => {
            let claimed = m
                .headers
                .as_ref()
                .and_then(|h| h.get(penguin_cluster::NODE_HEADER))
                .map_or("nobody", |v| v.as_str());
            tracing::warn!(
                "[cluster] refused a request on {} (claiming to be from {claimed:?}): {refusal}",
                m.subject
            );
            if let Some(reply) = m.reply.clone() {
                let mut h = NatsHeaders::new();
                h.insert(REFUSED, refusal.to_string().as_str());
                let _ = client.publish_with_headers(reply, h, Bytes::new()).await;
                let _ = client.flush().await;
            }
            return;
        }
    };
    let Some(reply) = m.reply.clone() else {
        return;
    };
    let mut accepted = NatsHeaders::new();
    accepted.insert(ACCEPTED, "1");
    signer.sign(reply.as_str(), &mut accepted, &[]);
    if client
        .publish_with_headers(reply.clone(), accepted, Bytes::new())
        .await
        .is_err()
    {
        return;
    }
    let _ = client.flush().await;
    let response = match request_of(&m, from) {
        Ok(req) => match router.oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
        Err(e) => e.into_response(),
    };
    let (parts, body) = response.into_parts();
    let (status, body) = match axum::body::to_bytes(body, MAX_RESPONSE).await {
        Ok(b) => (parts.status, b),
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            Bytes::from(format!("the owner's answer could not be read: {e}")),
        ),
    };
    // Room for the headers within NATS's payload limit.
    let room = (client.server_info().max_payload)
        .saturating_sub(16 * 1024)
        .max(4096);
    let chunks: Vec<Bytes> = if body.is_empty() {
        vec![Bytes::new()]
    } else {
        (0..body.len())
            .step_by(room)
            .map(|at| body.slice(at..(at + room).min(body.len())))
            .collect()
    };
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let mut h = NatsHeaders::new();
        h.insert(PART, format!("{i}/{n}").as_str());
        if i == 0 {
            h.insert(STATUS, status.as_u16().to_string().as_str());
            carry_headers(&parts.headers, &mut h);
        }
        signer.sign(reply.as_str(), &mut h, &chunk);
        if client
            .publish_with_headers(reply.clone(), h, chunk)
            .await
            .is_err()
        {
            return;
        }
    }
    let _ = client.flush().await;
}

/// The HTTP request a verified message from node `from` carries, marked [`ForwardedBy`].
fn request_of(m: &async_nats::Message, from: String) -> Result<Request, ApiError> {
    let bad = |what: &str| ApiError::bad_request("invalid_forward", what.to_owned());
    let h = m.headers.as_ref().ok_or_else(|| bad("no headers"))?;
    let method = h
        .get(METHOD)
        .and_then(|v| Method::from_bytes(v.as_str().as_bytes()).ok())
        .ok_or_else(|| bad("no method"))?;
    let uri: Uri = h
        .get(URI)
        .and_then(|v| v.as_str().parse().ok())
        .ok_or_else(|| bad("no URI"))?;
    let mut req = Request::new(Body::from(m.payload.clone()));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    for (name, values) in h.iter() {
        let name: &str = name.as_ref();
        let Some(http) = name.strip_prefix(HTTP) else {
            continue;
        };
        let Ok(n) = HeaderName::from_bytes(http.as_bytes()) else {
            continue;
        };
        if credential(n.as_str()) {
            continue;
        }
        for v in values {
            if let Ok(v) = HeaderValue::from_str(v.as_str()) {
                req.headers_mut().append(n.clone(), v);
            }
        }
    }
    req.extensions_mut().insert(ForwardedBy(from));
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_credentials_are_left_out_of_a_forwarded_request() {
        let mut http = axum::http::HeaderMap::new();
        http.insert("authorization", HeaderValue::from_static("Bearer tok"));
        http.insert("cookie", HeaderValue::from_static("t=tok"));
        http.insert("proxy-authorization", HeaderValue::from_static("Basic tok"));
        http.insert(
            "content-type",
            HeaderValue::from_static(" application/json "),
        );
        http.insert("connection", HeaderValue::from_static("close"));
        let mut nats = NatsHeaders::new();
        carry_headers(&http, &mut nats);
        let carried: Vec<(String, Vec<String>)> = nats
            .iter()
            .map(|(n, v)| {
                let n: &str = n.as_ref();
                (
                    n.to_owned(),
                    v.iter().map(|v| v.as_str().to_owned()).collect(),
                )
            })
            .collect();
        assert_eq!(
            carried,
            vec![(
                "Http-content-type".to_owned(),
                vec!["application/json".to_owned()]
            )]
        );
        let uri: Uri = "/api/sessions/s/messages?access_token=tok&limit=2&x=access_token"
            .parse()
            .unwrap();
        assert_eq!(
            without_token(&uri),
            "/api/sessions/s/messages?limit=2&x=access_token"
        );
        let uri: Uri = "/api/sessions/s?access_token=tok".parse().unwrap();
        assert_eq!(without_token(&uri), "/api/sessions/s");
        let uri: Uri = "/api/sessions/s/state".parse().unwrap();
        assert_eq!(without_token(&uri), "/api/sessions/s/state");
    }
}
