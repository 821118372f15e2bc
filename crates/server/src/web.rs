//! The web app: one page and its assets, compiled into the binary (`web/` beside `src/`).
//!
//! The page and assets are served without the token: they hold no data, and the page signs in
//! with the token from the URL fragment (`#token=…`, which a browser never sends to the server)
//! or from a pasted one, then calls the API with it. Every `/api` route still needs the token.
//!
//! Every view has its own path (`/`, `/sessions/{id}`) answered with the same page, so a view
//! can be bookmarked, shared and reloaded; the page picks the view from `location.pathname`.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Its name under `/assets/`.
    pub name: &'static str,
    /// Its `Content-Type`.
    pub mime: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
    /// A strong validator, computed at compile time, so a reload revalidates with a 304
    /// instead of downloading the unchanged file again.
    pub etag: &'static str,
}

/// FNV-1a over the bytes: not cryptographic, only a cache validator that changes with the file.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// `"<16 hex digits>"` (quotes included, as an ETag is written), built in a const context.
const fn etag_of(bytes: &[u8]) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let h = fnv1a(bytes);
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((h >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($name:literal, $mime:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("../web/", $name));
        const TAG: [u8; 18] = etag_of(BODY);
        Asset {
            name: $name,
            mime: $mime,
            body: BODY,
            etag: match std::str::from_utf8(&TAG) {
                Ok(s) => s,
                Err(_) => panic!("an etag is ASCII"),
            },
        }
    }};
}

/// The page every view path answers with.
pub static INDEX: Asset = asset!("index.html", "text/html; charset=utf-8");

/// Everything under `/assets/`.
pub static ASSETS: &[Asset] = &[
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("nav.js", "text/javascript; charset=utf-8"),
    asset!("chrome.js", "text/javascript; charset=utf-8"),
    asset!("dom.js", "text/javascript; charset=utf-8"),
    asset!("format.js", "text/javascript; charset=utf-8"),
    asset!("signin.js", "text/javascript; charset=utf-8"),
    asset!("sessionlist.js", "text/javascript; charset=utf-8"),
    asset!("sessionview.js", "text/javascript; charset=utf-8"),
    asset!("sessionhead.js", "text/javascript; charset=utf-8"),
    asset!("transcriptpane.js", "text/javascript; charset=utf-8"),
    asset!("approvals.js", "text/javascript; charset=utf-8"),
    asset!("rewind.js", "text/javascript; charset=utf-8"),
    asset!("processes.js", "text/javascript; charset=utf-8"),
    asset!("files.js", "text/javascript; charset=utf-8"),
    asset!("pending.js", "text/javascript; charset=utf-8"),
    asset!("banners.js", "text/javascript; charset=utf-8"),
    asset!("composer.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("stream.js", "text/javascript; charset=utf-8"),
    asset!("socket.js", "text/javascript; charset=utf-8"),
    asset!("toolview.js", "text/javascript; charset=utf-8"),
    asset!("transcript.js", "text/javascript; charset=utf-8"),
    asset!("markdown.js", "text/javascript; charset=utf-8"),
    asset!("usage.js", "text/javascript; charset=utf-8"),
    asset!("models.js", "text/javascript; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
];

/// The page's policy: scripts, styles and connections only from this server (no CDN, no
/// inline script), images also from `data:` URLs and the web (a task may carry image URLs),
/// and from `blob:` URLs (a workspace's image, fetched with the token, then shown).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob: https: http:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == asset.etag));
    let mut res = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.mime)], asset.body).into_response()
    };
    let h = res.headers_mut();
    h.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    // Revalidate every time: a new binary must never run with an old page's scripts.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    res
}

async fn page(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn session_page(Path(_id): Path<String>, headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => serve(a, &headers),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no asset {name:?}"),
        )
            .into_response(),
    }
}

/// The page's routes, none of which needs the token, and the list of them.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>(
) -> (Router<S>, &'static [(&'static str, &'static str)]) {
    crate::route_table! {
        get "/" => page,
        get "/sessions/{id}" => session_page,
        get "/usage" => page,
        get "/models" => page,
        get "/assets/{name}" => asset,
    }
}

/// The URL that opens the web app signed in: the token rides in the fragment, which the browser
/// keeps to itself (it is never sent in a request, nor logged by a proxy).
pub fn sign_in_url(addr: std::net::SocketAddr, token: &str) -> String {
    let host = if addr.ip().is_unspecified() {
        // Bound to every interface: the loopback address is one a local browser can open.
        match addr {
            std::net::SocketAddr::V4(_) => format!("127.0.0.1:{}", addr.port()),
            std::net::SocketAddr::V6(_) => format!("[::1]:{}", addr.port()),
        }
    } else {
        addr.to_string()
    };
    format!("http://{host}/#token={}", fragment_escape(token))
}

/// Percent-encodes what could end or confuse a fragment value.
fn fragment_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_differ_per_content_and_are_quoted_hex() {
        assert_eq!(&etag_of(b""), b"\"cbf29ce484222325\"");
        assert_ne!(etag_of(b"a"), etag_of(b"b"));
        for a in ASSETS.iter().chain([&INDEX]) {
            assert_eq!(a.etag.len(), 18, "{}", a.name);
            assert!(!a.body.is_empty(), "{}", a.name);
        }
    }

    #[test]
    fn every_module_a_script_imports_is_served() {
        let served = |name: &str| ASSETS.iter().any(|a| a.name == name);
        let mut scripts = 0;
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            scripts += 1;
            let text = std::str::from_utf8(a.body).unwrap();
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let name = line
                    .split_once("from \"./")
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(name, _)| name)
                    .unwrap_or_else(|| panic!("{}: an import not of a sibling: {line}", a.name));
                assert!(
                    served(name),
                    "{} imports {name}, which is not served",
                    a.name
                );
            }
        }
        assert!(scripts > 10);
        let page = std::str::from_utf8(INDEX.body).unwrap();
        assert!(page.contains(r#"<script type="module" src="/assets/app.js">"#));
        assert!(served("app.js"));
    }

    #[test]
    fn the_sign_in_url_carries_the_token_in_the_fragment() {
        let addr: std::net::SocketAddr = "127.0.0.1:7364".parse().unwrap();
        assert_eq!(
            sign_in_url(addr, "abc-DEF_123"),
            "http://127.0.0.1:7364/#token=abc-DEF_123"
        );
        assert_eq!(
            sign_in_url("0.0.0.0:80".parse().unwrap(), "a b&c#d"),
            "http://127.0.0.1:80/#token=a%20b%26c%23d"
        );
        assert_eq!(
            sign_in_url("[::]:9".parse().unwrap(), "t"),
            "http://[::1]:9/#token=t"
        );
    }
}
