//! What a person should read for the engine's bookkeeping: user-role texts without the
//! markers the model reads. (The cause of a failed request is
//! `penguin::llm_providers::failure`'s, shared with the web app.)

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
    /// What a hook added for the model (context, feedback, a reason to keep going): its text.
    Hook(String),
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
    // A hook's words for the model: its first line says whose they are, for the model; a
    // person reads what the hook said.
    for (tag, what) in [
        ("hook_context", "hook context"),
        ("hook_stop", "stop hook"),
        ("hook_feedback", "hook"),
    ] {
        if trimmed.starts_with(&format!("[{tag}]")) {
            if let Some(body) = find_block(trimmed, tag) {
                let said = body.split_once('\n').map_or(body, |(_, rest)| rest);
                return UserText::Hook(format!("{what}: {}", said.trim()));
            }
        }
    }
    if trimmed.starts_with("[turn_aborted]") || trimmed.starts_with("[turn_retried]") {
        return UserText::Hidden;
    }
    if text.contains("[summary]") && text.contains("[/summary]") {
        return UserText::Note("asked the model to summarize the conversation");
    }
    // A goal round's input: its body, not the protocol block the model reads.
    if let Some(g) = penguin_omni_protocol::markers::parse_goal_message(text) {
        return UserText::Prompt(format!("[goal round {}] {}", g.round, g.rest));
    }
    UserText::Prompt(text.to_owned())
}

/// `s` on one line, cut to `max` characters with an ellipsis, and [`neutralise`]d: what is
/// clipped is always someone else's text (arguments, outputs, errors, descriptions).
///
/// [`neutralise`]: crate::untrusted::neutralise
pub(crate) fn clip(s: &str, max: usize) -> String {
    let s = crate::untrusted::neutralise(s);
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
