//! Bearer-token authentication and the on-disk server token.

use std::io::Write;
use std::path::{Path, PathBuf};

use axum::http::{header, HeaderMap, Uri};

/// The token file under the data root.
pub const TOKEN_FILE: &str = "server-token";

/// The server's token and whether this start generated it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The secret.
    pub value: String,
    /// True when it was generated (and written) by this start: print it once.
    pub generated: bool,
    /// Where it is stored; `None` when it came from the environment.
    pub path: Option<PathBuf>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never log the secret itself.
        f.debug_struct("Token")
            .field("generated", &self.generated)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The token: `explicit` (e.g. `PENGUIN_TOKEN`) when set and non-empty, else the content of
/// `<data_root>/server-token`, generated on first start with mode 0600.
///
/// The file is written under a temporary name and hard-linked into place, so a reader never sees
/// a half-written token and two servers starting at once agree on one token.
pub fn resolve_token(explicit: Option<&str>, data_root: &Path) -> Result<Token, TokenError> {
    if let Some(t) = explicit.map(str::trim).filter(|t| !t.is_empty()) {
        let len = t.chars().count();
        if len < MIN_TOKEN_LEN {
            return Err(TokenError::TooShort(len));
        }
        return Ok(Token {
            value: t.to_owned(),
            generated: false,
            path: None,
        });
    }
    let path = data_root.join(TOKEN_FILE);
    if let Some(value) = read_token(&path)? {
        return Ok(Token {
            value,
            generated: false,
            path: Some(path),
        });
    }
    std::fs::create_dir_all(data_root).map_err(|source| TokenError::Io {
        path: data_root.to_path_buf(),
        source,
    })?;
    let bytes: [u8; 32] = rand::random();
    let value: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = data_root.join(format!(".{TOKEN_FILE}.{:08x}", rand::random::<u32>()));
    let write = || -> std::io::Result<()> {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(value.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()
    };
    let written = write();
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(Token {
            value,
            generated: true,
            path: Some(path),
        }),
        // Another server won the race: use its token.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read_token(&path)? {
            Some(value) => Ok(Token {
                value,
                generated: false,
                path: Some(path),
            }),
            None => Err(TokenError::Empty(path)),
        },
        Err(source) => Err(TokenError::Io { path, source }),
    }
}

fn read_token(path: &Path) -> Result<Option<String>, TokenError> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let t = s.trim();
            if t.is_empty() {
                Err(TokenError::Empty(path.to_path_buf()))
            } else {
                Ok(Some(t.to_owned()))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TokenError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Whether a presented token is the server's, in time that does not depend on where they
/// differ.
pub fn tokens_match(presented: &str, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    presented.as_bytes().ct_eq(token.as_bytes()).into()
}

/// Whether a request's `Host` header is one this server answers to: an IP address (a
/// DNS-rebinding page reaches the server only under a name of its own, never an IP literal),
/// `localhost`, or a name the operator allowed. A request without `Host` (HTTP/1.0 tools) passes.
pub fn host_allowed(host: Option<&str>, allowed: &[String]) -> bool {
    let Some(host) = host else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        // `[::1]:7364`
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::IpAddr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(&name))
}

/// The shortest token the server accepts: anything shorter can be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why the server token could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// A given token is too short to be a secret.
    #[error("the token is {0} characters long; use at least {MIN_TOKEN_LEN} (or unset PENGUIN_TOKEN to generate one)")]
    TooShort(usize),
    /// The token file is empty.
    #[error("{0} is empty: delete it to generate a new token")]
    Empty(PathBuf),
    /// The token file or the data root could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The credential a request presents: `Authorization: Bearer <token>`, or for SSE streams
/// (EventSource cannot set headers) the `access_token` query parameter.
pub fn presented_token(headers: &HeaderMap, uri: &Uri, allow_query: bool) -> Option<String> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.to_str().ok()?;
        let (scheme, rest) = v.split_once(' ')?;
        if scheme.eq_ignore_ascii_case("bearer") {
            return Some(rest.trim().to_owned());
        }
        return None;
    }
    if !allow_query {
        return None;
    }
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == "access_token").then(|| percent_decode(v))
    })
}

/// Decodes `%XX` escapes and `+`; malformed escapes are kept literally (they then fail the
/// comparison, which is the right outcome for a malformed token).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_ip_literals_and_allowed_names_pass_the_host_check() {
        let allowed = ["penguin.lan".to_owned()];
        for ok in [
            None,
            Some("localhost:7364"),
            Some("LOCALHOST"),
            Some("127.0.0.1:7364"),
            Some("[::1]:7364"),
            Some("10.0.0.5"),
            Some("app.localhost:80"),
            Some("penguin.lan:7364"),
            Some("Penguin.LAN."),
        ] {
            assert!(host_allowed(ok, &allowed), "{ok:?}");
        }
        for bad in [
            Some("attacker.example:7364"),
            Some("localhost.attacker.example"),
            Some("127.0.0.1.nip.io"),
            Some(""),
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad:?}");
        }
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abc", "abd"));
        assert!(!tokens_match("abc", "abcd"));
    }

    #[test]
    fn query_tokens_are_percent_decoded() {
        assert_eq!(percent_decode("a%2Bb+c"), "a+b c");
        assert_eq!(percent_decode("x%2"), "x%2");
        assert_eq!(percent_decode("%zz"), "%zz");
        let uri: Uri = "/s?x=1&access_token=t%31".parse().unwrap();
        assert_eq!(
            presented_token(&HeaderMap::new(), &uri, true).as_deref(),
            Some("t1")
        );
        assert_eq!(presented_token(&HeaderMap::new(), &uri, false), None);
    }

    #[test]
    fn the_token_file_is_generated_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let first = resolve_token(None, dir.path()).unwrap();
        assert!(first.generated);
        assert_eq!(first.value.len(), 64);
        let again = resolve_token(None, dir.path()).unwrap();
        assert!(!again.generated);
        assert_eq!(again.value, first.value);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let env = resolve_token(Some(" from-env-0123456789 "), dir.path()).unwrap();
        assert_eq!(env.value, "from-env-0123456789");
        assert!(matches!(
            resolve_token(Some("x"), dir.path()),
            Err(TokenError::TooShort(1))
        ));
        assert!(!env.generated && env.path.is_none());
    }
}
