//! The harness notice that reports settled background work to the model (protocol
//! [§1.10](crate::spec#s1.10) *Marker blocks* and [§2.11](crate::spec#s2.11) *Steering and
//! notices*): a `[background_task_done]` block with the facts, then what ran and the tail of its
//! output, as a user text with `sender: "harness"`.

use crate::build;
use crate::markers::marker_block;
use crate::message::{OmniMessage, TextSender};

/// Which kind of background work settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackgroundKind {
    /// A command started by `exec_command` with `run_in_background`.
    Command,
    /// A subagent started by `run_subagent` with `run_in_background`.
    Subagent,
}

/// One settled background task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackgroundTaskDone {
    /// Command or subagent.
    pub kind: BackgroundKind,
    /// The handle the model holds: a `process_id` or a `subagent_id`.
    pub id: String,
    /// What ran: a command's first line, a subagent's task.
    pub label: String,
    /// Whether it succeeded.
    pub completed: bool,
    /// One line: `exit code 2`, `terminated by signal 9`, a subagent's note; may be empty.
    pub detail: String,
    /// The tail of the output nobody collected (already capped by the producer).
    pub output: String,
}

/// A report's tail of output: at most `cap` chars, the newest kept (the verdict is last).
pub fn report_tail(text: &str, cap: usize) -> String {
    let chars = text.chars().count();
    if chars <= cap {
        return text.to_owned();
    }
    let start = text.char_indices().nth(chars - cap).map_or(0, |(i, _)| i);
    format!(
        "[earlier output dropped: exceeded {cap} chars]\n{}",
        &text[start..]
    )
}

/// How a report names what ran: its first line, at most 120 chars.
pub fn report_label(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() <= 120 {
        return line.to_owned();
    }
    let mut s: String = line.chars().take(119).collect();
    s.push('…');
    s
}

impl BackgroundTaskDone {
    /// The text of the notice.
    pub fn text(&self) -> String {
        let (kind, what, id_field) = match self.kind {
            BackgroundKind::Command => ("command", "Background command", "process_id"),
            BackgroundKind::Subagent => ("subagent", "Background subagent", "subagent_id"),
        };
        let status = if self.completed {
            "completed"
        } else {
            "failed"
        };
        let mut facts = vec![
            "Automatic notification from the harness, not the user: a background task you started has finished.".to_owned(),
            format!("kind: {kind}"),
            format!("id: {}", self.id),
            format!("status: {status}"),
        ];
        if !self.detail.is_empty() {
            facts.push(format!("detail: {}", self.detail));
        }
        let verb = if self.completed { "finished" } else { "failed" };
        let detail = if self.detail.is_empty() {
            String::new()
        } else {
            format!(" — {}", self.detail)
        };
        let mut body = format!(
            "{what} {verb}: `{}` ({id_field} {}){detail}",
            self.label, self.id
        );
        if !self.output.trim().is_empty() {
            body.push_str("\n\n");
            body.push_str(&self.output);
        }
        format!(
            "{}\n\n{body}",
            marker_block("background_task_done", &facts.join("\n"))
        )
    }

    /// The notice as the user text the engine delivers.
    pub fn notice(&self) -> OmniMessage {
        build::user_text_from(self.text(), TextSender::Harness)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_tails_and_labels_are_bounded() {
        assert_eq!(report_tail("abc", 5), "abc");
        assert_eq!(
            report_tail("abcdef", 2),
            "[earlier output dropped: exceeded 2 chars]\nef"
        );
        assert_eq!(report_label("make\nmore"), "make");
        let long = "x".repeat(130);
        assert_eq!(report_label(&long).chars().count(), 120);
        assert!(report_label(&long).ends_with('…'));
    }

    #[test]
    fn the_notice_reads_like_the_reference() {
        let done = BackgroundTaskDone {
            kind: BackgroundKind::Command,
            id: "proc-1a2b3c4d".into(),
            label: "npm run build".into(),
            completed: false,
            detail: "exit code 2".into(),
            output: "error TS2304".into(),
        };
        assert_eq!(
            done.text(),
            "[background_task_done]\nAutomatic notification from the harness, not the user: a background task you started has finished.\nkind: command\nid: proc-1a2b3c4d\nstatus: failed\ndetail: exit code 2\n[/background_task_done]\n\nBackground command failed: `npm run build` (process_id proc-1a2b3c4d) — exit code 2\n\nerror TS2304"
        );
        let quiet = BackgroundTaskDone {
            kind: BackgroundKind::Subagent,
            id: "subagent-0a1b2c3d".into(),
            label: "summarize".into(),
            completed: true,
            detail: String::new(),
            output: "  ".into(),
        };
        assert!(quiet
            .text()
            .ends_with("[/background_task_done]\n\nBackground subagent finished: `summarize` (subagent_id subagent-0a1b2c3d)"));
        let msg = quiet.notice();
        assert!(msg.to_json().contains("\"sender\":\"harness\""));
    }
}
