//! Why a model request failed, in terms a person can act on: the one classification of a
//! failed request's `status` and `error_message` (as `request_end` carries them) that every
//! surface shows, so the terminal and the web app say the same thing.
//!
//! ```
//! use penguin_llm_providers::failure::{Failure, FailureKind};
//! use penguin_omni_protocol::StopReason;
//!
//! let f = Failure::classify(
//!     StopReason::Timeout,
//!     Some("error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)"),
//! );
//! assert_eq!(f.kind, FailureKind::ConnectionRefused);
//! assert_eq!(f.cause, "connection refused (http://127.0.0.1:9/v1/chat/completions)");
//! assert!(f.hint.unwrap().contains("is the server running?"));
//! assert_eq!(
//!     f.ended(6),
//!     "failed after 6 attempts: connection refused (http://127.0.0.1:9/v1/chat/completions)"
//! );
//! ```

use std::time::{Duration, SystemTime};

use penguin_omni_protocol::StopReason;

/// What kind of failure a request ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// Nothing listens at the model's address.
    ConnectionRefused,
    /// The host name does not resolve.
    Dns,
    /// Connecting (or the whole request) took too long.
    ConnectTimeout,
    /// The connection opened, then the model sent nothing within the idle timeout.
    IdleTimeout,
    /// The server dropped the connection.
    ConnectionReset,
    /// TLS could not be set up (certificate, protocol).
    Tls,
    /// The provider refused the API key (HTTP 401, or an auth error code).
    Auth,
    /// HTTP 403: the key has no access to this model or endpoint.
    Forbidden,
    /// HTTP 404: no such path (a wrong base URL) or no such model.
    NotFound,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// HTTP 429 or a rate-limit error: too many requests, or out of quota.
    RateLimited,
    /// HTTP 502, 503 or 504: the server is down, starting or overloaded.
    Unavailable,
    /// Another 5xx: the provider failed.
    ServerError,
    /// The response passed `max_message_bytes`.
    TooLarge,
    /// The response could not be read (bad JSON, a cut stream).
    Malformed,
    /// Another HTTP error status.
    Http,
    /// Anything else.
    Other,
}

/// A failed request as a person should read it: its kind, the cause in a few words (the
/// line's text), and what to check, when there is something to check.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The cause in a few words, e.g. `connection refused (http://…/v1/chat/completions)`,
    /// `HTTP 404 Not Found`, `prompt too large for the model's context (HTTP 400: …)`.
    pub cause: String,
    /// What to check, e.g. `wrong base_url? …`; `None` when there is nothing to suggest.
    pub hint: Option<&'static str>,
    /// How long the provider asked to wait before the next attempt (a `Retry-After` on a 429
    /// or 503, see [`retry_after`]), in seconds.
    pub retry_after_secs: Option<u64>,
}

/// How the HTTP shell writes a provider's `Retry-After` into a failed request's
/// `error_message`: `"<status> <text> (Retry-After: <n> s)"`. `request_end` has no field of its
/// own for it, so the message carries it, where a person reads it too; the engine's ladder
/// ([`retry_after`]) and every surface ([`Failure::classify`]) read it back from there.
pub fn with_retry_after(message: impl Into<String>, wait: Duration) -> String {
    format!("{} (Retry-After: {} s)", message.into(), wait.as_secs())
}

/// The wait a failed request's `error_message` says the provider asked for
/// ([`with_retry_after`]'s suffix), and the message without it.
pub fn split_retry_after(message: &str) -> (&str, Option<Duration>) {
    let parsed = message
        .strip_suffix(" s)")
        .and_then(|m| m.rsplit_once(" (Retry-After: "))
        .and_then(|(rest, n)| n.parse::<u64>().ok().map(|n| (rest, n)));
    match parsed {
        Some((rest, n)) => (rest, Some(Duration::from_secs(n))),
        None => (message, None),
    }
}

/// The wait a failed request's `error_message` says the provider asked for, if it says one.
pub fn retry_after(message: &str) -> Option<Duration> {
    split_retry_after(message).1
}

/// A `Retry-After` header's value as a wait from `now`: delay-seconds (`120`) or an HTTP date
/// (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110's IMF-fixdate; a date already past is no wait).
/// `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = parse_http_date(value)?;
    let now = now.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Seconds since the epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(value: &str) -> Option<u64> {
    let parts: Vec<&str> = value.split_ascii_whitespace().collect();
    let [_weekday, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m == month)? as i64 + 1;
    let day: i64 = day.parse().ok()?;
    let year: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|n| n.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + m * 60 + s).ok()
}

const HINT_REFUSED: &str = "nothing is listening at the model's address: is the server running? Check --base-url (or base_url in config.toml)";
const HINT_DNS: &str =
    "the host name does not resolve: check --base-url (or base_url in config.toml) and the network";
const HINT_CONNECT_TIMEOUT: &str = "the address did not answer in time: is the host reachable (a firewall, a VPN, the port)? Check --base-url (or base_url in config.toml)";
const HINT_IDLE: &str = "the model sent nothing for the idle timeout (idle_timeout_ms in config.toml): it may still be loading, overloaded, or stuck";
const HINT_RESET: &str =
    "the server dropped the connection: it may have crashed or restarted (see its log)";
const HINT_TLS: &str = "TLS could not be set up: check that the base URL's scheme (http or https) and port match the server";
const HINT_AUTH: &str = "the provider refused the API key: check the variable it is read from (--api-key-env, or the provider's default such as OPENAI_API_KEY)";
const HINT_FORBIDDEN: &str =
    "the key was accepted but has no access to this model or endpoint: check the model id and the key's permissions";
const HINT_NOT_FOUND: &str = "wrong base_url? The server has no such path or model: an OpenAI-compatible base URL usually ends in /v1 (penguin appends /chat/completions), and the model id must be one the server serves";
const HINT_CONTEXT: &str = "prompt too large for the model's context: /compact or start a new session, connect fewer MCP servers (their tool definitions count too), or give the model a larger context (llama.cpp: -c) and set context_window in config.toml to match";
const HINT_RATE: &str = "rate-limited or out of quota: penguin waits and retries; if it persists, check the provider's plan";
const HINT_UNAVAILABLE: &str =
    "the server is down, starting or overloaded: penguin retries; if it persists, check the server";
const HINT_SERVER: &str =
    "the provider failed: penguin retries; if it persists, see the server's log";
const HINT_TOO_LARGE: &str =
    "the model's output passed max_message_bytes: raise it in config.toml, or ask differently";

impl Failure {
    /// Classifies a failed request from its `request_end` status and `error_message`.
    pub fn classify(status: StopReason, message: Option<&str>) -> Failure {
        let (message, asked) = match message {
            Some(m) => {
                let (m, asked) = split_retry_after(m);
                (Some(m), asked)
            }
            None => (None, None),
        };
        Failure {
            retry_after_secs: asked.map(|d| d.as_secs()),
            ..Failure::classify_text(status, message)
        }
    }

    fn classify_text(status: StopReason, message: Option<&str>) -> Failure {
        let Some(m) = message.map(str::trim).filter(|m| !m.is_empty()) else {
            return match status {
                StopReason::Timeout => Failure::new(
                    FailureKind::IdleTimeout,
                    "no data from the provider within the idle timeout".into(),
                ),
                StopReason::Auth => {
                    Failure::new(FailureKind::Auth, "the API key was refused".into())
                }
                StopReason::Malformed => Failure::new(
                    FailureKind::Malformed,
                    "the response could not be read".into(),
                ),
                other => Failure::new(FailureKind::Other, other.to_string()),
            };
        };
        let lower = m.to_ascii_lowercase();
        let url = m
            .split_once("for url (")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(u, _)| format!(" ({u})"))
            .unwrap_or_default();
        let code: Option<u16> = m
            .get(..3)
            .filter(|c| c.bytes().all(|b| b.is_ascii_digit()))
            .filter(|_| m.len() == 3 || m.as_bytes()[3] == b' ')
            .and_then(|c| c.parse().ok());
        let http = |rest_max: usize| match code {
            Some(c) => format!("HTTP {c}{}", clip(&m[3..], rest_max)),
            None => clip(m, rest_max),
        };
        if is_context_overflow(&lower) {
            let detail = match code {
                Some(c) => format!("HTTP {c}: {}", clip(m[3..].trim(), 140)),
                None => clip(m, 140),
            };
            return Failure::new(
                FailureKind::ContextOverflow,
                format!("prompt too large for the model's context ({detail})"),
            );
        }
        if status == StopReason::Auth || code == Some(401) {
            return Failure::new(FailureKind::Auth, http(160));
        }
        if let Some(c) = code {
            let kind = match c {
                403 => FailureKind::Forbidden,
                404 => FailureKind::NotFound,
                408 => FailureKind::ConnectTimeout,
                429 => FailureKind::RateLimited,
                502..=504 => FailureKind::Unavailable,
                500..=599 => FailureKind::ServerError,
                _ => FailureKind::Http,
            };
            return Failure::new(kind, http(160));
        }
        if lower.contains("connection refused") {
            return Failure::new(
                FailureKind::ConnectionRefused,
                format!("connection refused{url}"),
            );
        }
        if lower.contains("dns error")
            || lower.contains("failed to lookup address")
            || lower.contains("name or service not known")
        {
            return Failure::new(
                FailureKind::Dns,
                format!("DNS failure: the host name does not resolve{url}"),
            );
        }
        if lower.contains("connection reset")
            || lower.contains("connection closed")
            || lower.contains("broken pipe")
        {
            return Failure::new(
                FailureKind::ConnectionReset,
                format!("connection reset by the server{url}"),
            );
        }
        if lower.contains("timed out") || lower.contains("operation timed out") {
            return Failure::new(
                FailureKind::ConnectTimeout,
                format!("connection timed out{url}"),
            );
        }
        if lower.contains("certificate") || lower.contains("tls") || lower.contains("ssl") {
            return Failure::new(FailureKind::Tls, format!("TLS failure: {}", clip(m, 160)));
        }
        if lower.contains("max_message_bytes") || lower.starts_with("response too large") {
            return Failure::new(FailureKind::TooLarge, clip(m, 200));
        }
        if lower.contains("rate limit") || lower.contains("too many requests") {
            return Failure::new(FailureKind::RateLimited, clip(m, 200));
        }
        if lower.contains("overloaded") || lower.contains("temporarily unavailable") {
            return Failure::new(FailureKind::Unavailable, clip(m, 200));
        }
        if status == StopReason::Malformed {
            return Failure::new(
                FailureKind::Malformed,
                format!("the response could not be read: {}", clip(m, 180)),
            );
        }
        Failure::new(FailureKind::Other, clip(m, 200))
    }

    fn new(kind: FailureKind, cause: String) -> Failure {
        Failure {
            kind,
            cause,
            hint: kind.hint(),
            retry_after_secs: None,
        }
    }

    /// The end of a run that gave up: `failed after N attempts: <cause>`.
    pub fn ended(&self, attempts: u32) -> String {
        let s = if attempts == 1 { "" } else { "s" };
        format!("failed after {attempts} attempt{s}: {}", self.cause)
    }
}

impl FailureKind {
    /// What to check for this kind of failure; `None` when there is nothing to suggest.
    pub fn hint(self) -> Option<&'static str> {
        Some(match self {
            FailureKind::ConnectionRefused => HINT_REFUSED,
            FailureKind::Dns => HINT_DNS,
            FailureKind::ConnectTimeout => HINT_CONNECT_TIMEOUT,
            FailureKind::IdleTimeout => HINT_IDLE,
            FailureKind::ConnectionReset => HINT_RESET,
            FailureKind::Tls => HINT_TLS,
            FailureKind::Auth => HINT_AUTH,
            FailureKind::Forbidden => HINT_FORBIDDEN,
            FailureKind::NotFound => HINT_NOT_FOUND,
            FailureKind::ContextOverflow => HINT_CONTEXT,
            FailureKind::RateLimited => HINT_RATE,
            FailureKind::Unavailable => HINT_UNAVAILABLE,
            FailureKind::ServerError => HINT_SERVER,
            FailureKind::TooLarge => HINT_TOO_LARGE,
            FailureKind::Malformed | FailureKind::Http | FailureKind::Other => return None,
        })
    }
}

/// Whether a provider's error says the prompt does not fit the model's context window (its
/// text, or an error code such as `context_length_exceeded` or llama.cpp's
/// `exceed_context_size_error`). Retrying the same request cannot help: the adapters make such
/// a failure permanent, so the engine ends the run at once instead of climbing the reconnect
/// ladder.
pub fn is_context_overflow_error(message: &str, codes: &[&str]) -> bool {
    is_context_overflow(&message.to_ascii_lowercase())
        || codes
            .iter()
            .any(|c| is_context_overflow(&c.to_ascii_lowercase()))
}

/// The texts providers answer a prompt longer than the context with: llama.cpp (`the request
/// exceeds the available context size`), OpenAI (`maximum context length is …`,
/// `context_length_exceeded`), Anthropic (`prompt is too long`), vLLM, Ollama.
fn is_context_overflow(lower: &str) -> bool {
    [
        "exceeds the available context size",
        "context length",
        "context_length",
        "maximum context",
        "context window",
        "prompt is too long",
        "input is too long",
        "too many tokens",
        "exceed_context_size",
    ]
    .iter()
    .any(|n| lower.contains(n))
}

/// `s` on one line, cut to `max` characters with an ellipsis.
fn clip(s: &str, max: usize) -> String {
    let one: String = s
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if one.chars().count() > max {
        format!("{}…", one.chars().take(max - 1).collect::<String>())
    } else {
        one
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_and_cause(status: StopReason, message: &str) -> (FailureKind, String) {
        let f = Failure::classify(status, Some(message));
        (f.kind, f.cause)
    }

    #[test]
    fn transport_failures_name_their_real_cause() {
        let refused = "error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(
            kind_and_cause(StopReason::Timeout, refused),
            (
                FailureKind::ConnectionRefused,
                "connection refused (http://127.0.0.1:9/v1/chat/completions)".into()
            )
        );
        assert_eq!(
            kind_and_cause(StopReason::Timeout, "error sending request for url (https://nope.invalid/v1): client error (Connect): dns error: failed to lookup address information"),
            (FailureKind::Dns, "DNS failure: the host name does not resolve (https://nope.invalid/v1)".into())
        );
        assert_eq!(
            kind_and_cause(StopReason::Timeout, "error sending request for url (http://10.1.2.3/v1/chat/completions): client error (Connect): tcp connect error: Connection timed out (os error 110)"),
            (FailureKind::ConnectTimeout, "connection timed out (http://10.1.2.3/v1/chat/completions)".into())
        );
        assert_eq!(
            kind_and_cause(
                StopReason::Timeout,
                "error decoding response body: connection reset by peer"
            ),
            (
                FailureKind::ConnectionReset,
                "connection reset by the server".into()
            )
        );
        let idle = Failure::classify(StopReason::Timeout, None);
        assert_eq!(idle.kind, FailureKind::IdleTimeout);
        assert_eq!(
            idle.cause,
            "no data from the provider within the idle timeout"
        );
        // A refused connection is not a timeout, whatever status the ladder filed it under.
        assert_ne!(
            Failure::classify(StopReason::Timeout, Some(refused)).kind,
            FailureKind::ConnectTimeout
        );
    }

    #[test]
    fn http_failures_get_their_hint() {
        let not_found = Failure::classify(StopReason::Failed, Some("404 File Not Found"));
        assert_eq!(not_found.kind, FailureKind::NotFound);
        assert_eq!(not_found.cause, "HTTP 404 File Not Found");
        assert!(not_found.hint.unwrap().starts_with("wrong base_url?"));

        let auth = Failure::classify(StopReason::Auth, Some("401 mock says no"));
        assert_eq!(auth.kind, FailureKind::Auth);
        assert_eq!(auth.cause, "HTTP 401 mock says no");
        assert!(auth.hint.unwrap().contains("--api-key-env"));

        let down = Failure::classify(StopReason::Timeout, Some("503 Service Unavailable"));
        assert_eq!(
            (down.kind, down.cause.as_str()),
            (FailureKind::Unavailable, "HTTP 503 Service Unavailable")
        );
        assert!(down.hint.unwrap().contains("down"));
        assert_eq!(
            Failure::classify(StopReason::Timeout, Some("429 slow down")).kind,
            FailureKind::RateLimited
        );
        assert_eq!(
            Failure::classify(StopReason::Timeout, Some("500 oops")).kind,
            FailureKind::ServerError
        );
        assert_eq!(
            Failure::classify(StopReason::Failed, Some("403 no access")).kind,
            FailureKind::Forbidden
        );
        assert_eq!(
            Failure::classify(StopReason::Failed, Some("422 bad field")).kind,
            FailureKind::Http
        );
    }

    #[test]
    fn a_context_overflow_says_the_prompt_is_too_large() {
        for text in [
            "400 the request exceeds the available context size, try increasing it",
            "400 This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            "400 prompt is too long: 210000 tokens > 200000 maximum",
        ] {
            let f = Failure::classify(StopReason::Failed, Some(text));
            assert_eq!(f.kind, FailureKind::ContextOverflow, "{text}");
            assert!(
                f.cause.starts_with("prompt too large for the model's context (HTTP 400: "),
                "{}",
                f.cause
            );
            assert!(f.hint.unwrap().contains("context_window"));
        }
    }

    #[test]
    fn retry_after_is_seconds_or_a_date_and_rides_the_message() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 08:49:37
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        // A date already past is no wait; nonsense is none.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(
            parse_retry_after("Sun, 06 Foo 1994 08:50:07 GMT", now),
            None
        );

        let message = with_retry_after("429 Rate limit reached", Duration::from_secs(20));
        assert_eq!(message, "429 Rate limit reached (Retry-After: 20 s)");
        assert_eq!(retry_after(&message), Some(Duration::from_secs(20)));
        assert_eq!(retry_after("429 Rate limit reached"), None);
        let f = Failure::classify(StopReason::Timeout, Some(&message));
        assert_eq!(f.kind, FailureKind::RateLimited);
        assert_eq!(f.cause, "HTTP 429 Rate limit reached");
        assert_eq!(f.retry_after_secs, Some(20));
        assert_eq!(
            Failure::classify(StopReason::Timeout, Some("429 x")).retry_after_secs,
            None
        );
    }

    #[test]
    fn the_end_counts_attempts_and_other_texts_are_clipped() {
        let f = Failure::classify(StopReason::Failed, Some("401 no"));
        assert_eq!(f.ended(1), "failed after 1 attempt: HTTP 401 no");
        let long = "x".repeat(500);
        let other = Failure::classify(StopReason::Failed, Some(&long));
        assert_eq!(other.kind, FailureKind::Other);
        assert_eq!(other.cause.chars().count(), 200);
        assert_eq!(other.hint, None);
        let big = Failure::classify(
            StopReason::Failed,
            Some("model output too large: a text message passed max_message_bytes (8 MiB); the rest of the response was not read"),
        );
        assert_eq!(big.kind, FailureKind::TooLarge);
        let json = serde_json::to_value(&big).unwrap();
        assert_eq!(json["kind"], "too_large");
        assert!(json["hint"].as_str().unwrap().contains("max_message_bytes"));
    }
}
