//! A session's workspace files for the web app's files panel: `GET …/files` (one folder),
//! `…/files/content` (one file's bytes) and `…/files/changes` (what the session changed, with
//! diffs). The session reads them ([`HostedSession::files`](crate::HostedSession::files)),
//! confined as its file tools are; this module says how they are served.
//!
//! A workspace file is whatever a model or a command wrote, so it must never run as part of
//! penguin's page, which holds the token: it is served from the API (not the page's
//! routes), as `text/plain` when it is text (a workspace's HTML, SVG or script too), as
//! itself only when it is a raster image, and as an attachment otherwise; every answer says
//! `nosniff` and carries a `sandbox` Content-Security-Policy, so even opened on its own it is
//! an opaque origin with no script.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use tokio::io::AsyncReadExt;

use crate::error::{json_response, ApiError};
use crate::host::{FilesError, WorkspaceFiles};
use crate::routes::{entry, ApiResult};
use crate::AppState;

/// The largest file shown as a preview; a larger one is downloaded.
pub(crate) const MAX_PREVIEW_BYTES: u64 = 2 << 20;

/// Bytes read from a downloaded file at a time.
const CHUNK: usize = 64 << 10;

/// The policy of every file served: no script, no plugin, no form, an origin of its own.
const CSP_FILE: &str = "sandbox; default-src 'none'";

/// The same for an image, which its own document may draw (a browser's image viewer styles it
/// inline).
const CSP_IMAGE: &str =
    "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'";

/// The raster images previewed as themselves, by their first bytes. SVG is not one: it can
/// hold script, so it is shown as the text it is.
const IMAGES: &[(&[u8], usize, &str)] = &[
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
];

fn image_type(bytes: &[u8]) -> Option<&'static str> {
    IMAGES.iter().find_map(|(magic, at, mime)| {
        let riff = *at == 0 || bytes.starts_with(b"RIFF");
        (riff && bytes.get(*at..at + magic.len()) == Some(*magic)).then_some(*mime)
    })
}

/// The session's files, or 501 when it offers none.
async fn workspace(
    app: &AppState,
    p: Result<Path<String>, PathRejection>,
) -> Result<Arc<dyn WorkspaceFiles>, ApiError> {
    let e = entry(app, p).await?;
    let data_root = app.sessions.cfg.location.root.clone();
    let files = e.session().files(&data_root);
    files.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "files_unavailable",
            format!("session {} offers no view of its workspace's files", e.id),
        )
    })
}

/// `f` on a blocking thread (file I/O).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FilesError> + Send + 'static,
) -> Result<T, FilesError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| FilesError::Internal(format!("reading the workspace failed: {e}")))?
}

/// The answer for `e`; `wrong_kind` is the code of a path that is not what was asked.
fn refusal(e: FilesError, wrong_kind: &'static str) -> ApiError {
    match e {
        FilesError::Refused(m) => ApiError::bad_request("path_refused", m),
        FilesError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "file_not_found", m),
        FilesError::WrongKind(m) => ApiError::bad_request(wrong_kind, m),
        FilesError::NoCheckpoints(m) => ApiError::conflict("no_checkpoints", m),
        FilesError::Internal(m) => ApiError::internal(m),
    }
}

/// The query of a files route: `path`, and `download` where `allow_download`.
struct FileQuery {
    path: Option<String>,
    download: bool,
}

fn file_query(uri: &Uri, route: &str, allow_download: bool) -> Result<FileQuery, ApiError> {
    let mut q = FileQuery {
        path: None,
        download: false,
    };
    for (k, v) in crate::requests::query_pairs(uri) {
        match k {
            "path" => q.path = Some(v),
            "download" if allow_download => {
                q.download = match v.as_str() {
                    "" | "1" | "true" => true,
                    "0" | "false" => false,
                    other => {
                        return Err(ApiError::bad_request(
                            "invalid_query",
                            format!("download: expected 1 or 0, got {other:?}"),
                        ))
                    }
                }
            }
            other => {
                let known = if allow_download {
                    "path, download"
                } else {
                    "path"
                };
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!(
                        "{:?} is not a parameter of {route}: {known}",
                        other.chars().take(64).collect::<String>()
                    ),
                ));
            }
        }
    }
    Ok(q)
}

/// `GET /api/sessions/{id}/files?path=DIR`.
pub(crate) async fn list(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> ApiResult {
    let q = file_query(&uri, "/files", false)?;
    let files = workspace(&app, p).await?;
    let path = q.path.unwrap_or_default();
    let listing = blocking(move || files.list(&path))
        .await
        .map_err(|e| refusal(e, "not_a_directory"))?;
    Ok(json_response(StatusCode::OK, &listing))
}

/// `GET /api/sessions/{id}/files/changes`.
pub(crate) async fn changes(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let files = workspace(&app, p).await?;
    let changes = blocking(move || files.changes())
        .await
        .map_err(|e| refusal(e, "not_a_file"))?;
    Ok(json_response(StatusCode::OK, &changes))
}

/// `GET /api/sessions/{id}/files/content?path=FILE[&download=1]`.
pub(crate) async fn content(
    State(app): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> ApiResult {
    let q = file_query(&uri, "/files/content", true)?;
    let Some(path) = q.path.filter(|p| !p.is_empty()) else {
        return Err(ApiError::bad_request(
            "invalid_query",
            "path: expected the file's path, relative to the workspace",
        ));
    };
    let files = workspace(&app, p).await?;
    let opened = blocking(move || files.open(&path))
        .await
        .map_err(|e| refusal(e, "not_a_file"))?;
    let name = opened.path.rsplit('/').next().unwrap_or("file").to_owned();
    if q.download {
        return Ok(download(opened, &name));
    }
    if opened.size > MAX_PREVIEW_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "file_too_large",
            format!(
                "{} is {} bytes, more than the {} MiB a preview shows; download it instead (download=1)",
                opened.path,
                opened.size,
                MAX_PREVIEW_BYTES >> 20
            ),
        ));
    }
    let shown = opened.path.clone();
    let bytes = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut bytes = Vec::new();
        // Bounded even if the file grew since it was opened.
        opened
            .file
            .take(MAX_PREVIEW_BYTES)
            .read_to_end(&mut bytes)
            .map(|_| bytes)
    })
    .await
    .map_err(|e| ApiError::internal(format!("reading {shown} failed: {e}")))?
    .map_err(|e| ApiError::internal(format!("reading {shown} failed: {e}")))?;
    Ok(preview(bytes, &name))
}

/// A preview: text as `text/plain`, a raster image as itself, anything else an attachment.
fn preview(bytes: Vec<u8>, name: &str) -> Response {
    let image = image_type(&bytes);
    let text = image.is_none() && !bytes.contains(&0) && std::str::from_utf8(&bytes).is_ok();
    let (mime, csp, attach) = match (image, text) {
        (Some(mime), _) => (mime, CSP_IMAGE, false),
        (None, true) => ("text/plain; charset=utf-8", CSP_FILE, false),
        (None, false) => ("application/octet-stream", CSP_FILE, true),
    };
    let mut res = Response::new(Body::from(bytes));
    guard(&mut res, mime, csp, name, attach);
    res
}

/// The file streamed as an attachment, its length as opened.
fn download(opened: crate::host::OpenFile, name: &str) -> Response {
    let size = opened.size;
    let file = tokio::fs::File::from_std(opened.file).take(size);
    let chunks = futures::stream::unfold(file, |mut file| async move {
        let mut buf = vec![0; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    });
    let mut res = Response::new(Body::from_stream(chunks));
    guard(&mut res, "application/octet-stream", CSP_FILE, name, true);
    if let Ok(v) = HeaderValue::from_str(&size.to_string()) {
        res.headers_mut().insert(header::CONTENT_LENGTH, v);
    }
    res
}

/// The headers that keep a served file from acting as part of penguin's page.
fn guard(res: &mut Response, mime: &'static str, csp: &'static str, name: &str, attach: bool) {
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    let disposition = if attach { "attachment" } else { "inline" };
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{disposition}; filename=\"{}\"; filename*=UTF-8''{}",
        ascii_name(name),
        percent_encode(name)
    )) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
}

/// `name` with anything but printable ASCII (and the quote and backslash a quoted string
/// cannot hold plainly) written as `_`.
fn ascii_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect()
}

/// RFC 5987's `value-chars`: the unreserved bytes as they are, every other byte `%XX`.
fn percent_encode(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_quoted_safely_in_both_forms() {
        assert_eq!(ascii_name("a \"b\"\\c\u{e9}.txt"), "a _b__c_.txt");
        assert_eq!(percent_encode("\u{e9} x.txt"), "%C3%A9%20x.txt");
    }

    #[test]
    fn only_raster_images_are_previewed_as_images() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(
            image_type(b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>"),
            None
        );
        let res = preview(b"<html><script>alert(1)</script></html>".to_vec(), "x.html");
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        let res = preview(vec![0, 1, 2], "x.bin");
        assert!(res.headers()[header::CONTENT_DISPOSITION]
            .to_str()
            .unwrap()
            .starts_with("attachment"));
    }
}
