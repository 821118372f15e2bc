//! The HTTP routes (protocol
//! [§5.4](penguin_omni_protocol::spec#s5.4)–[§5.8](penguin_omni_protocol::spec#s5.8), *Session
//! state and concurrency* to *Endpoints*).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use penguin_engine::ThinkingLevel;
use penguin_omni_protocol::ApprovalDecision;
use penguin_sse_transport::{
    into_response, last_event_id, open_stream, LiveTail, ServerEvent, SseStream,
};

use serde_json::Value;

use crate::api::{
    CompactAccepted, CreateSessionRequest, MessagesPage, Recalled, RetryNow, SessionEnvelope,
    SteerAccepted, TaskAccepted,
};
use crate::auth::{host_allowed, presented_token, tokens_match};
use crate::entry::Entry;
use crate::error::{json_response, opt_bool, opt_str, read_object, ApiError};
use crate::history::{page_of, read_history, Window};
use crate::list::parse_list_query;
use crate::requests::{
    parse_goal, parse_input, parse_mcp_servers, parse_mode, parse_query, parse_sandbox, pin_skills,
};
use crate::sessions::{Patch, USER_CHANNEL};
use crate::tasks::TaskInput;
use crate::AppState;
use tokio::sync::OwnedSemaphorePermit;

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn path_id(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(id)| id)
        .map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))
}

pub(crate) async fn entry(
    app: &AppState,
    p: Result<Path<String>, PathRejection>,
) -> Result<Arc<Entry>, ApiError> {
    let id = path_id(p)?;
    app.sessions.get(&id).await
}

/// The routes an `EventSource` or a `WebSocket` opens, which cannot send headers: only they
/// take the token from the query string, and only for `GET`.
fn is_stream_route(method: &Method, path: &str) -> bool {
    if method != Method::GET {
        return false;
    }
    if path == "/api/events" || path == "/api/events/socket" {
        return true;
    }
    path.strip_prefix("/api/sessions/")
        .and_then(|rest| {
            rest.strip_suffix("/stream")
                .or_else(|| rest.strip_suffix("/socket"))
        })
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// Every request must present the token ([§5](penguin_omni_protocol::spec#s5) *The server
/// transport*); streams may pass it as `?access_token=`.
pub(crate) async fn auth(State(app): State<AppState>, req: Request, next: Next) -> Response {
    // Forwarded by another node of the cluster, whose signature verified: that node checked
    // the user's token and Host (the token itself never travels between nodes).
    if req
        .extensions()
        .get::<crate::placement::ForwardedBy>()
        .is_some()
    {
        return next.run(req).await;
    }
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .map(|h| h.to_str().unwrap_or(""));
    if !host_allowed(host, &app.allowed_hosts) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "this server does not answer to Host {:?}; start it with --allowed-host NAME to allow that name",
                host.unwrap_or("")
            ),
        )
        .into_response();
    }
    let allow_query = is_stream_route(req.method(), req.uri().path());
    match presented_token(req.headers(), req.uri(), allow_query) {
        Some(t) if tokens_match(&t, &app.token) => next.run(req).await,
        Some(_) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the bearer token is not this server's token",
        )
        .into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing credentials: send Authorization: Bearer <token>",
        )
        .into_response(),
    }
}

pub(crate) async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {method} {}", uri.path()),
    )
    .into_response()
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
    .into_response()
}

pub(crate) async fn create_session(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let obj = read_object(&headers, body, &app.body).await?;
    let req = CreateSessionRequest {
        provider: opt_str(&obj, "provider")?.map(str::to_owned),
        model: opt_str(&obj, "model")?.map(str::to_owned),
        workspace: opt_str(&obj, "workspace")?.map(str::to_owned),
        approval_mode: parse_mode(&obj)?,
        sandbox: parse_sandbox(&obj)?,
        mcp_servers: parse_mcp_servers(&obj)?,
    };
    if let Some(c) = &app.sessions.cfg.cluster {
        // Refused now, not after the session exists here alone.
        c.ready()?;
    }
    let entry = app.sessions.create(req)?;
    if let Some(c) = &app.sessions.cfg.cluster {
        let adopted = match c.adopt(&entry.id).await {
            // It exists in the cluster from now on, run or not.
            Ok(()) => app.sessions.store_head(&entry).await,
            Err(e) => Err(e),
        };
        if let Err(e) = adopted {
            app.sessions.evict(&entry.id);
            return Err(e);
        }
        c.changed(&entry.id);
    }
    Ok(json_response(
        StatusCode::CREATED,
        &SessionEnvelope {
            session: entry.info(),
        },
    ))
}

pub(crate) async fn list_sessions(State(app): State<AppState>, uri: Uri) -> ApiResult {
    let query = parse_list_query(&uri)?;
    let list = match &app.sessions.cfg.cluster {
        Some(c) => crate::list::paginate(c.sessions(), &query),
        None => crate::list::list(&app.sessions, query).await?,
    };
    Ok(json_response(StatusCode::OK, &list))
}

pub(crate) async fn get_session(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    Ok(json_response(
        StatusCode::OK,
        &SessionEnvelope { session: e.info() },
    ))
}

pub(crate) async fn patch_session(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let id = path_id(p)?;
    let obj = read_object(&headers, body, &app.body).await?;
    let patch = Patch {
        mode: parse_mode(&obj)?,
        title: opt_str(&obj, "title")?.map(str::to_owned),
        archived: opt_bool(&obj, "archived")?,
        pinned: opt_bool(&obj, "pinned")?,
    };
    let session = match app.sessions.patch_stored(&id, &patch).await? {
        Some(stored) => crate::list::on_disk_info(&app.sessions, id, stored),
        None => {
            let e = app.sessions.get(&id).await?;
            app.sessions.update(&e, patch);
            e.info()
        }
    };
    Ok(json_response(StatusCode::OK, &SessionEnvelope { session }))
}

pub(crate) async fn delete_session(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    app.sessions.delete(&e).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn messages(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let window = parse_query(&uri)?;
    // Captured before the trace is read: every event up to the live cursor is then either in
    // the trace, in the fragments, or in the pending holds.
    let snap = app.sessions.history_snapshot(&e);
    let flush = snap.flush;
    let flushed = tokio::task::spawn_blocking(move || flush.wait()).await;
    if let Ok(Err(err)) = flushed {
        tracing::warn!("[server] trace flush before /messages failed: {err}");
    }
    let id = e.id.clone();
    let sessions = app.sessions.clone();
    // A `before` page is history only: the live tail and the pending holds belong to the
    // newest end, which such a page never reaches.
    let pending: Vec<String> = match window {
        Window::Before { .. } => Vec::new(),
        _ => snap.pending.iter().map(|f| f.json().to_owned()).collect(),
    };
    let live = match window {
        Window::Before { .. } => None,
        _ => snap.live.map(LiveTail::from),
    };
    let (messages, page) = tokio::task::spawn_blocking(move || {
        let files = sessions.index.files(&id)?;
        let own = read_history(&files)?;
        let files_of = |child: &str| sessions.index.files(child).unwrap_or_default();
        Ok::<_, std::io::Error>(page_of(&files_of, &id, own, pending, window))
    })
    .await
    .map_err(|err| ApiError::internal(format!("history reader failed: {err}")))?
    .map_err(|err| ApiError::internal(format!("cannot read the session's trace: {err}")))?;
    Ok(json_response(
        StatusCode::OK,
        &MessagesPage {
            messages,
            live,
            page,
        },
    ))
}

pub(crate) async fn stream(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> ApiResult {
    let id = path_id(p)?;
    let last = last_event_id(&headers);
    let permit = stream_permit(&app)?;
    let sub = crate::routing::subscribe(&app, &id, last.as_deref()).await?;
    Ok(into_response(Held {
        stream: SseStream::new(sub, app.sse.heartbeat),
        _permit: permit,
    }))
}

/// `GET /api/sessions/{id}/state`: what a stream of the session starts with after its replay
/// (its `task_state`, then its pending `approval_request`s), as a JSON array.
pub(crate) async fn state(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    Ok(json_response(StatusCode::OK, &e.snapshot_events()))
}

/// A slot of the stream budget, or 503 at once: streams at their cap must not take the
/// connections API requests need.
pub(crate) fn stream_permit(app: &AppState) -> Result<OwnedSemaphorePermit, ApiError> {
    app.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "the server has as many event streams open as it allows ([server] max_streams, \
             --max-streams); close another tab or stream, or raise the limit",
        )
    })
}

/// An SSE body that holds its stream-budget slot for as long as it is sent.
#[pin_project::pin_project]
struct Held<S> {
    #[pin]
    stream: S,
    _permit: OwnedSemaphorePermit,
}

impl<S: futures::Stream> futures::Stream for Held<S> {
    type Item = S::Item;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        self.project().stream.poll_next(cx)
    }
}

pub(crate) async fn events(State(app): State<AppState>, headers: HeaderMap) -> ApiResult {
    let permit = stream_permit(&app)?;
    let channel = app.sessions.cfg.hub.get(USER_CHANNEL);
    let last = last_event_id(&headers);
    let s = open_stream(
        &channel,
        last.as_deref(),
        || vec![ServerEvent::Hello],
        &app.sse,
    );
    Ok(into_response(Held {
        stream: s,
        _permit: permit,
    }))
}

pub(crate) async fn create_task(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let obj = read_object(&headers, body, &app.body).await?;
    let (input, text, images) = parse_input(obj.get("input"))?;
    let thinking =
        match opt_str(&obj, "thinkingLevel")? {
            None => None,
            Some(s) => Some(s.parse::<ThinkingLevel>().map_err(|m| {
                ApiError::field("thinkingLevel", &format!("a thinking level ({m})"))
            })?),
        };
    let queue = opt_bool(&obj, "queueIfBusy")?.unwrap_or(false);
    let goal = parse_goal(&obj)?;
    let (input, text) = pin_skills(&obj, input, text)?;
    if goal.is_some() && queue {
        return Err(ApiError::field(
            "goal",
            "a goal starts on an idle session; it cannot be queued (queueIfBusy)",
        ));
    }
    let task = TaskInput {
        messages: input,
        thinking,
        text,
        images,
        goal,
    };
    let queued = app.sessions.submit(&e, task, queue)?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &TaskAccepted {
            session_id: e.id.clone(),
            queued,
        },
    ))
}

/// `POST /api/sessions/{id}/fork`: `{}` (after its last task) or `{"position": {"fileIndex":
/// F, "ordinal": O}}` (after the task whose final reply has that `tracePosition`): a new
/// session with the trace up to there, its approval mode and a title `<title> (fork)`. 201
/// with the new session; 409 while a task runs; 400 for a position that is no task's end.
pub(crate) async fn fork(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    use penguin_trace_store::ForkPoint;
    let e = entry(&app, p).await?;
    let obj = read_object(&headers, body, &app.body).await?;
    let at = match obj.get("position") {
        None | Some(Value::Null) => ForkPoint::End,
        Some(pos) => {
            let (file_index, ordinal) =
                trace_position(pos, "position", "a message's tracePosition")?;
            ForkPoint::Position {
                file_index,
                ordinal,
            }
        }
    };
    let forked = app.sessions.fork(&e, at).await?;
    if let Some(c) = &app.sessions.cfg.cluster {
        c.adopt(&forked).await?;
    }
    let child = app.sessions.get(&forked).await?;
    if let Some(c) = &app.sessions.cfg.cluster {
        c.changed(&forked);
    }
    Ok(json_response(
        StatusCode::CREATED,
        &SessionEnvelope {
            session: child.info(),
        },
    ))
}

/// A `tracePosition` in a body's `field`: `{"fileIndex": F, "ordinal": O}`, `what` saying
/// whose in the error.
fn trace_position(v: &Value, field: &str, what: &str) -> Result<(u32, u64), ApiError> {
    let num = |k: &str| v.get(k).and_then(Value::as_u64);
    match (
        num("fileIndex").and_then(|f| u32::try_from(f).ok()),
        num("ordinal"),
    ) {
        (Some(file), Some(ordinal)) => Ok((file, ordinal)),
        _ => Err(ApiError::field(
            field,
            &format!("{{\"fileIndex\": N, \"ordinal\": N}} ({what})"),
        )),
    }
}

/// `POST /api/sessions/{id}/rewind` `{"to": N, "files"?: true, "conversation"?: true,
/// "apply"?: false, "yours"?: false}` (or `"at"`: the tracePosition of the task's first input
/// in place of `"to"`): the session as before task N. Without `apply`, what the files' rewind
/// would change (`{"files": RewindFiles}`, its `yours` the paths changed between the
/// session's tasks, kept unless `"yours": true`), nothing changed; with it, the files put back and
/// the conversation forked after task N-1 (`{"files": …, "session": the fork}`; before task 1
/// there is no conversation to fork). 409 while a task runs; 409 `no_checkpoints` when the
/// session keeps none and the files were asked for.
pub(crate) async fn rewind(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    use penguin_trace_store::ForkPoint;
    let e = entry(&app, p).await?;
    let obj = read_object(&headers, body, &app.body).await?;
    let to = match (obj.get("to"), obj.get("at")) {
        (Some(to), _) => to
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| ApiError::field("to", "a task number from 1 (as before task N ran)"))?,
        // A task's first input by its tracePosition: N is one more than the tasks completed
        // before it.
        (None, Some(pos)) => {
            let (file, ordinal) =
                trace_position(pos, "at", "a task's first input's tracePosition")?;
            let traces = app.sessions.cfg.location.traces_dir();
            let id = e.id.clone();
            let tasks = tokio::task::spawn_blocking(move || {
                penguin_trace_store::completed_tasks(&traces, &id)
            })
            .await
            .map_err(|err| ApiError::internal(format!("reading the trace failed: {err}")))?
            .map_err(|err| ApiError::internal(err.to_string()))?;
            1 + tasks
                .iter()
                .filter(|t| (t.file_index, t.ordinal) < (file, ordinal))
                .count()
        }
        _ => {
            return Err(ApiError::field(
                "to",
                "a task number from 1 (or `at`, the task's first input's tracePosition)",
            ))
        }
    };
    let files = opt_bool(&obj, "files")?.unwrap_or(true);
    let conversation = opt_bool(&obj, "conversation")?.unwrap_or(true);
    let apply = opt_bool(&obj, "apply")?.unwrap_or(false);
    let with_yours = opt_bool(&obj, "yours")?.unwrap_or(false);
    let status = e.rt().status;
    if status != penguin_sse_transport::SessionStatus::Idle {
        return Err(crate::tasks::busy_error(status));
    }
    let mut out = serde_json::Map::new();
    out.insert("to".into(), Value::from(to));
    if files {
        let session = e.clone();
        let rewound = tokio::task::spawn_blocking(move || {
            session.session().rewind_files(to, apply, with_yours)
        })
        .await
        .map_err(|err| ApiError::internal(format!("the rewind failed: {err}")))?;
        let plan = match rewound {
            None => {
                return Err(ApiError::conflict(
                    "no_checkpoints",
                    format!("session {} keeps no checkpoints of its workspace", e.id),
                ))
            }
            Some(Err(why)) => return Err(ApiError::conflict("no_checkpoint", why)),
            Some(Ok(plan)) => plan,
        };
        out.insert(
            "files".into(),
            serde_json::to_value(plan).unwrap_or_default(),
        );
    }
    if conversation && apply && to > 1 {
        let forked = app.sessions.fork(&e, ForkPoint::Task(to - 1)).await?;
        if let Some(c) = &app.sessions.cfg.cluster {
            c.adopt(&forked).await?;
            c.changed(&forked);
        }
        let child = app.sessions.get(&forked).await?;
        out.insert(
            "session".into(),
            serde_json::to_value(child.info()).unwrap_or_default(),
        );
    }
    Ok(json_response(StatusCode::OK, &Value::Object(out)))
}

/// `GET /api/sessions/{id}/trace`: the session's Trace as one JSON-lines text (its files in
/// order, `{"type":"trace_rotate"}` between them), as an attachment.
pub(crate) async fn export_trace(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let writer = e.session().writer().clone();
    let traces = app.sessions.cfg.location.traces_dir();
    let id = e.id.clone();
    let text = tokio::task::spawn_blocking(move || {
        writer.flush()?;
        let mut out = Vec::new();
        penguin_trace_store::export_session(&traces, &id, &mut out).map(|()| out)
    })
    .await
    .map_err(|err| ApiError::internal(format!("the export failed: {err}")))?
    .map_err(|err| ApiError::internal(format!("cannot export the trace: {err}")))?;
    let mut response = Response::new(Body::from(text));
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/x-ndjson"),
    );
    if let Ok(v) =
        axum::http::HeaderValue::from_str(&format!("attachment; filename=\"{}.jsonl\"", e.id))
    {
        headers.insert(axum::http::header::CONTENT_DISPOSITION, v);
    }
    Ok(response)
}

/// `POST /api/sessions/import`: an exported Trace (the body, JSON lines) made a session here,
/// checked first; 201 `{"session": {"id"}}`, 400 `invalid_trace` naming the problems, 409
/// `session_exists`.
pub(crate) async fn import_trace(State(app): State<AppState>, body: Body) -> ApiResult {
    let bytes = axum::body::to_bytes(body, app.body.max_bytes)
        .await
        .map_err(|e| {
            ApiError::bad_request("invalid_body", format!("the trace could not be read: {e}"))
        })?;
    let traces = app.sessions.cfg.location.traces_dir();
    let imported =
        tokio::task::spawn_blocking(move || penguin_trace_store::import_session(&traces, &bytes))
            .await
            .map_err(|err| ApiError::internal(format!("the import failed: {err}")))?
            .map_err(|err| match err {
                penguin_trace_store::ImportError::Exists(_) => {
                    ApiError::conflict("session_exists", err.to_string())
                }
                penguin_trace_store::ImportError::Io(_) => ApiError::internal(err.to_string()),
                other => ApiError::bad_request("invalid_trace", other.to_string()),
            })?;
    app.sessions
        .index
        .wrote(&imported.session_id, &imported.files);
    Ok(json_response(
        StatusCode::CREATED,
        &serde_json::json!({ "session": { "id": imported.session_id } }),
    ))
}

/// `GET /api/sessions/{id}/goal`: `{"goal": {objective, status, budget, used, rounds,
/// updatedAt} | null}`.
pub(crate) async fn goal(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let goal = e.session().goal();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "goal": goal }),
    ))
}

pub(crate) async fn steer(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let obj = read_object(&headers, body, &app.body).await?;
    let text = opt_str(&obj, "text")?
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| ApiError::field("text", "non-blank text"))?
        .to_owned();
    let id = app.sessions.steer(&e, text)?;
    Ok(json_response(StatusCode::ACCEPTED, &SteerAccepted { id }))
}

pub(crate) async fn approve(
    State(app): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let Path((id, call)) = p.map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))?;
    let e = app.sessions.get(&id).await?;
    let obj = read_object(&headers, body, &app.body).await?;
    const DECISIONS: &str = "\"allow\", \"allow_always\", \"allow_unsandboxed\" or \"deny\"";
    let decision = match opt_str(&obj, "decision")? {
        Some("allow") => ApprovalDecision::Allow,
        Some("allow_always") => {
            app.sessions.allow_always(&e, &call);
            ApprovalDecision::Allow
        }
        Some("deny") => ApprovalDecision::Deny,
        Some("allow_unsandboxed") => {
            app.sessions.grant_unsandboxed(&e, &call)?;
            ApprovalDecision::Allow
        }
        Some(other) => {
            return Err(ApiError::field(
                "decision",
                &format!("{DECISIONS}, got {other:?}"),
            ))
        }
        None => {
            return Err(ApiError::field(
                "decision",
                &format!("{DECISIONS} (missing)"),
            ))
        }
    };
    if app.sessions.decide(&e, &call, decision) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "approval_not_found",
            format!("no pending approval for tool call {call:?}"),
        ))
    }
}

pub(crate) async fn abort(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    Ok(if app.sessions.abort(&e) {
        StatusCode::ACCEPTED.into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    })
}

pub(crate) async fn retry_now(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    let skipped = app.sessions.retry_now(&e);
    Ok(json_response(StatusCode::OK, &RetryNow { skipped }))
}

pub(crate) async fn compact(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    app.sessions.compact(&e)?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &CompactAccepted {
            session_id: e.id.clone(),
        },
    ))
}

fn recalled(p: penguin_sse_transport::PendingInput, thinking: Option<ThinkingLevel>) -> Recalled {
    Recalled {
        text: p.text,
        images: p.images,
        files: p.files,
        thinking_level: thinking,
    }
}

pub(crate) async fn unsteer(
    State(app): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult {
    let Path((id, steer)) = p.map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))?;
    let e = app.sessions.get(&id).await?;
    let mirror = app.sessions.unsteer(&e, &steer)?;
    Ok(json_response(StatusCode::OK, &recalled(mirror, None)))
}

pub(crate) async fn remove_follow_up(
    State(app): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult {
    let Path((id, fid)) = p.map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))?;
    let e = app.sessions.get(&id).await?;
    let (mirror, thinking) = app.sessions.remove_follow_up(&e, &fid)?;
    Ok(json_response(StatusCode::OK, &recalled(mirror, thinking)))
}

/// The session's background commands.
fn background_commands(e: &Entry) -> Vec<crate::api::ProcessInfo> {
    let Some(background) = e.env.background() else {
        return Vec::new();
    };
    background
        .tasks()
        .into_iter()
        .filter(|t| t.kind == penguin_omni_protocol::background::BackgroundKind::Command)
        .map(|t| crate::api::ProcessInfo {
            process_id: t.id,
            command: t.label,
            pid: t.pid,
            running: t.running,
            exit: t.detail,
            started_at_ms: t.started_at_ms,
            recent: t.recent,
            ports: t.ports,
        })
        .collect()
}

pub(crate) async fn processes(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let e = entry(&app, p).await?;
    Ok(json_response(
        StatusCode::OK,
        &crate::api::ProcessList {
            processes: background_commands(&e),
        },
    ))
}

pub(crate) async fn kill_process(
    State(app): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult {
    let Path((id, process)) =
        p.map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))?;
    let e = app.sessions.get(&id).await?;
    let killed = e.env.background().is_some_and(|b| {
        background_commands(&e)
            .iter()
            .any(|p| p.process_id == process)
            && b.kill(&process)
    });
    if killed {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "process_not_found",
            format!("session {id} has no background command {process:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_stream_routes_take_a_query_token() {
        assert!(is_stream_route(&Method::GET, "/api/events"));
        assert!(is_stream_route(&Method::GET, "/api/sessions/s1/stream"));
        assert!(!is_stream_route(&Method::POST, "/api/sessions/s1/stream"));
        assert!(!is_stream_route(&Method::POST, "/api/events"));
        for path in [
            "/api/sessions/s1/approvals/stream",
            "/api/sessions//stream",
            "/api/sessions/s1/x/stream",
            "/stream",
            "/api/sessions/s1/messages",
        ] {
            assert!(!is_stream_route(&Method::GET, path), "{path}");
        }
    }
}
