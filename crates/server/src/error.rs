//! The JSON error body and request-body validation.
//!
//! Bodies are read and checked by hand (rather than with a typed extractor) so every refusal
//! is JSON and names what was wrong: the size, the content type, the syntax error, the field.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::api::{ErrorBody, ErrorDetail};

/// An HTTP error answered as `{"error":{"code":"…","message":"…"}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Machine-readable code (`session_not_found`, `task_in_progress`, ...).
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 400 `invalid_field` naming the field.
    pub fn field(name: &str, expected: &str) -> ApiError {
        ApiError::bad_request("invalid_field", format!("{name}: expected {expected}"))
    }

    /// 404 `session_not_found`.
    pub fn session_not_found(id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            format!("no session {id:?}"),
        )
    }

    /// 409 with a code.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    /// 500 `internal`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, json_body(&body)).into_response()
    }
}

/// A JSON response with a status.
pub fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response {
    (status, json_body(value)).into_response()
}

fn json_body(value: &impl serde::Serialize) -> ([(header::HeaderName, &'static str); 1], String) {
    // The API types serialize infallibly (string keys, no maps of non-strings).
    let body = serde_json::to_string(value).unwrap_or_else(|e| {
        format!(r#"{{"error":{{"code":"internal","message":"cannot encode the answer: {e}"}}}}"#)
    });
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// How large a request body may be and how long it may take to arrive.
#[derive(Clone, Debug)]
pub struct BodyLimits {
    /// Largest accepted body, in bytes.
    pub max_bytes: usize,
    /// Time the body has to arrive once the headers did.
    pub timeout: std::time::Duration,
}

/// A request body within `limits`: 413 `payload_too_large` past the size (refused before
/// reading when its length is declared), 408 `request_timeout` when it does not arrive in time.
pub async fn read_bytes(
    headers: &HeaderMap,
    body: Body,
    limits: &BodyLimits,
) -> Result<Bytes, ApiError> {
    let limit = limits.max_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body exceeds the {limit}-byte limit"),
        )
    };
    // Refuse a declared oversize body before reading any of it.
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(too_large());
        }
    }
    let bytes: Bytes = tokio::time::timeout(limits.timeout, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    limits.timeout.as_secs_f64()
                ),
            )
        })?
        .map_err(|_| too_large())?;
    Ok(bytes)
}

/// Reads a JSON object body: 415 unless `Content-Type` is JSON, 413 past `limit` bytes, 400
/// `invalid_json` on a syntax error (with its position) or a non-object.
///
/// An empty body is read as `{}` so bodiless POSTs (`/abort`) need no content type.
pub async fn read_object(
    headers: &HeaderMap,
    body: Body,
    limits: &BodyLimits,
) -> Result<Map<String, Value>, ApiError> {
    let bytes = read_bytes(headers, body, limits).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase());
    let is_json = ct.as_deref().is_some_and(|ct| {
        let mime = ct.split(';').next().unwrap_or("").trim();
        mime == "application/json" || mime.ends_with("+json")
    });
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "expected Content-Type: application/json, got {}",
                ct.as_deref()
                    .map_or("none".to_string(), |c| format!("{c:?}"))
            ),
        ));
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("invalid JSON body: {e}")))?;
    match value {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(
            "invalid_json",
            format!("the body must be a JSON object, not {}", kind(&other)),
        )),
    }
}

/// The JSON type name of a value, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An optional string field (`null` counts as absent).
pub fn opt_str<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(ApiError::field(name, &format!("a string, got {}", kind(v)))),
    }
}

/// An optional boolean field (`null` counts as absent).
pub fn opt_bool(obj: &Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ApiError::field(
            name,
            &format!("a boolean, got {}", kind(v)),
        )),
    }
}
