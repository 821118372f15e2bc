//! What a person should read for the engine's bookkeeping: user-role texts without the
//! markers the model reads, and the cause of a failed request in a few words.

use penguin_omni_protocol::StopReason;

/// A user-role text as a person should see it.
#[derive(Debug, PartialEq, Eq)]
pub enum UserText {
    /// A prompt.
    Prompt(String),
    /// Steering typed during a task.
    Steering(String),
    /// Something penguin added, described rather than shown.
    Note(&'static str),
    /// Bookkeeping for the model only.
    Hidden,
}

/// What a user-role text is: the engine wraps steering, summaries and carried-over turns in
/// markers the model reads and a person should not.
pub fn user_text_display(text: &str) -> UserText {
    use penguin_omni_protocol::markers::find_block;
    let trimmed = text.trim_start();
    if let Some(body) = trimmed
        .starts_with("[user_steering]")
        .then(|| find_block(trimmed, "user_steering"))
        .flatten()
    {
        return UserText::Steering(body.to_owned());
    }
    if trimmed.starts_with("[context_summary]") || trimmed.starts_with("<context_summary>") {
        return UserText::Note("the summary of the earlier conversation opens this context");
    }
    if trimmed.starts_with("[turn_aborted]") || trimmed.starts_with("[turn_retried]") {
        return UserText::Hidden;
    }
    if text.contains("[summary]") && text.contains("[/summary]") {
        return UserText::Note("asked the model to summarize the conversation");
    }
    UserText::Prompt(text.to_owned())
}

/// The cause of a failed request in a few words: what a person can act on.
pub fn cause(status: StopReason, message: Option<&str>) -> String {
    let Some(m) = message.map(str::trim).filter(|m| !m.is_empty()) else {
        return match status {
            StopReason::Timeout => "no data from the provider within the idle timeout".into(),
            other => other.to_string(),
        };
    };
    let lower = m.to_ascii_lowercase();
    let url = m
        .split_once("for url (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(u, _)| format!(" ({u})"))
        .unwrap_or_default();
    if lower.contains("connection refused") {
        return format!("connection refused{url}");
    }
    if lower.contains("dns error")
        || lower.contains("failed to lookup address")
        || lower.contains("name or service not known")
    {
        return format!("DNS failure: the host name does not resolve{url}");
    }
    if lower.contains("connection reset") {
        return format!("connection reset by the server{url}");
    }
    if lower.contains("timed out") {
        return format!("connection timed out{url}");
    }
    if lower.contains("certificate") || lower.contains("tls") {
        return format!("TLS failure: {}", clip(m, 160));
    }
    let code = m.get(..3).filter(|c| c.bytes().all(|b| b.is_ascii_digit()));
    if let (Some(code), Some(rest)) = (code, m.get(3..)) {
        if rest.is_empty() || rest.starts_with(' ') {
            return format!("HTTP {code}{}", clip(rest, 160));
        }
    }
    clip(m, 200)
}

/// `s` on one line, cut to `max` characters with an ellipsis.
pub(crate) fn clip(s: &str, max: usize) -> String {
    let one: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if one.chars().count() > max {
        format!("{}…", one.chars().take(max - 1).collect::<String>())
    } else {
        one
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_short_and_actionable() {
        let refused = "error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(
            cause(StopReason::Timeout, Some(refused)),
            "connection refused (http://127.0.0.1:9/v1/chat/completions)"
        );
        assert_eq!(
            cause(StopReason::Timeout, Some("error sending request for url (https://nope.invalid/v1): client error (Connect): dns error: failed to lookup address information")),
            "DNS failure: the host name does not resolve (https://nope.invalid/v1)"
        );
        assert_eq!(
            cause(StopReason::Timeout, Some("503 Service Unavailable")),
            "HTTP 503 Service Unavailable"
        );
        assert_eq!(
            cause(StopReason::Timeout, None),
            "no data from the provider within the idle timeout"
        );
    }

    #[test]
    fn markers_are_described_not_printed() {
        assert_eq!(
            user_text_display("[user_steering]\nfaster\n[/user_steering]"),
            UserText::Steering("faster".into())
        );
        assert!(matches!(
            user_text_display("[context_summary]\nx\n[/context_summary]"),
            UserText::Note(_)
        ));
        assert_eq!(
            user_text_display("[turn_aborted]\n  [text]a[/text]\n[/turn_aborted]"),
            UserText::Hidden
        );
        assert_eq!(user_text_display("hello"), UserText::Prompt("hello".into()));
    }
}
