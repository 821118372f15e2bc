//! Rendering a run's stream for a person: streaming text, dimmed thinking, one line per tool
//! call with its status, retries and aborts.

use std::collections::HashMap;
use std::io::{self, Write};

use penguin_omni_protocol::{
    ApprovalDecision, Body, EventPayload, Frame, ModelPayload, StopReason, StreamEventType,
};

use crate::describe::clip;
pub use crate::describe::{cause, user_text_display, UserText};
use crate::tool_view;

const DIM: &str = "\x1b[2m";
const BOLD: &str = "\x1b[1m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// Whether to style output for a terminal: it is one, and `NO_COLOR` is not set
/// (<https://no-color.org>: any non-empty value).
pub fn color_for(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// What the renderer knows about the run so far (for exit codes and the status line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// The abort reason, when the run was aborted.
    pub aborted: Option<String>,
    /// The status of the last `request_end`.
    pub last_status: Option<StopReason>,
    /// Tool calls seen.
    pub tool_calls: usize,
    /// Tokens of this task's requests (the main session's).
    pub tokens: penguin_omni_protocol::TokenCounts,
    /// `request_end`s that failed with a refused connection.
    pub refused: u32,
}

impl RunSummary {
    /// Takes one frame of the run into account (the main session's own outcome only).
    pub fn observe(&mut self, frame: &Frame) {
        let msg = frame.message();
        if msg.has_origin() {
            return;
        }
        match msg.event() {
            Some(EventPayload::RequestEnd {
                status,
                error_message,
                ..
            }) => {
                self.last_status = Some(*status);
                if error_message
                    .as_deref()
                    .is_some_and(|m| m.contains("Connection refused"))
                {
                    self.refused += 1;
                }
            }
            Some(EventPayload::TokenUsage { request, .. }) => {
                self.tokens = self.tokens + *request;
            }
            Some(EventPayload::Abort { reason }) => {
                self.aborted = Some(reason.clone().unwrap_or_default())
            }
            _ => {}
        }
        if let Some(ModelPayload::ToolCall(c)) = msg.model() {
            if c.stop_reason.is_none_or(|r| r == StopReason::Completed) {
                self.tool_calls += 1;
            }
        }
    }

    /// True when the run ended normally.
    pub fn succeeded(&self) -> bool {
        self.aborted.is_none() && self.last_status == Some(StopReason::Completed)
    }
}

/// What the status line should say while nothing is streaming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Nothing to show.
    Nothing,
    /// A request is open and no model output has arrived yet.
    FirstToken,
    /// Backing off before reconnect attempt `attempt`, for `retry_in_ms`.
    Backoff {
        /// The attempt that failed.
        attempt: u32,
        /// The planned wait.
        retry_in_ms: u64,
    },
    /// Tools are still running.
    Tools(usize),
}

/// Renders frames as they arrive.
#[derive(Debug)]
pub struct Renderer<W: Write> {
    out: W,
    color: bool,
    verbose: bool,
    markdown: Option<crate::markdown::Markdown>,
    /// The last tool output shown collapsed: its tool and full text.
    collapsed: Option<(String, String)>,
    names: HashMap<String, String>,
    streaming: Option<&'static str>,
    at_line_start: bool,
    running_tools: usize,
    waiting: Waiting,
    summary: RunSummary,
}

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`; `color` enables ANSI styling.
    pub fn new(out: W, color: bool) -> Renderer<W> {
        Renderer {
            out,
            color,
            verbose: false,
            markdown: None,
            collapsed: None,
            names: HashMap::new(),
            streaming: None,
            at_line_start: true,
            running_tools: 0,
            waiting: Waiting::Nothing,
            summary: RunSummary::default(),
        }
    }

    /// Shows tool output in full instead of its first line.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// The last tool output shown collapsed (tool name, full output).
    pub fn collapsed(&self) -> Option<&(String, String)> {
        self.collapsed.as_ref()
    }

    /// The run so far.
    pub fn summary(&self) -> &RunSummary {
        &self.summary
    }

    /// What a status line should show now.
    pub fn waiting(&self) -> &Waiting {
        &self.waiting
    }

    /// A dimmed line of penguin's own (not the model's).
    pub fn note(&mut self, text: &str) -> io::Result<()> {
        let (dim, reset) = (self.style(DIM), self.style(RESET));
        self.line(&format!("{dim}{text}{reset}"))?;
        self.out.flush()
    }

    /// The writer.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn style(&self, code: &'static str) -> &'static str {
        if self.color {
            code
        } else {
            ""
        }
    }

    fn line(&mut self, text: &str) -> io::Result<()> {
        if !self.at_line_start {
            writeln!(self.out)?;
        }
        writeln!(self.out, "{text}")?;
        self.at_line_start = true;
        Ok(())
    }

    fn raw(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        write!(self.out, "{text}")?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    /// Renders one frame.
    pub fn frame(&mut self, frame: &Frame) -> io::Result<()> {
        self.summary.observe(frame);
        let msg = frame.message();
        let child = msg.origin.as_ref().map(|o| {
            format!(
                "[{}] ",
                short_id(o.last().map(String::as_str).unwrap_or(""))
            )
        });
        let (dim, bold, red, green, yellow, reset) = (
            self.style(DIM),
            self.style(BOLD),
            self.style(RED),
            self.style(GREEN),
            self.style(YELLOW),
            self.style(RESET),
        );
        match &msg.body {
            Body::Model(p) => {
                if child.is_none()
                    && matches!(
                        p,
                        ModelPayload::PartialText(_)
                            | ModelPayload::PartialThinking(_)
                            | ModelPayload::Text(_)
                            | ModelPayload::Thinking(_)
                            | ModelPayload::PartialToolCall(_)
                            | ModelPayload::ToolCall(_)
                    )
                {
                    self.waiting = Waiting::Nothing;
                }
                match p {
                    ModelPayload::PartialText(t) if child.is_none() && self.color => {
                        self.stream_markdown(t.event_type, &t.text)?
                    }
                    ModelPayload::PartialText(t) if child.is_none() => {
                        self.stream_part("text", t.event_type, &t.text, "", "")?
                    }
                    ModelPayload::PartialThinking(t) if child.is_none() => {
                        self.stream_part("thinking", t.event_type, &t.thinking, dim, reset)?
                    }
                    ModelPayload::Text(t)
                        if t.role == penguin_omni_protocol::Role::User && child.is_none() =>
                    {
                        // Input shown by a watcher (history, server-published prompts) and
                        // delivered steering, without the markers the model reads.
                        match user_text_display(&t.text) {
                            UserText::Prompt(text) => {
                                self.line(&format!("{bold}› {}{reset}", text.trim_end()))?
                            }
                            UserText::Steering(text) => self.line(&format!(
                                "{bold}› {}{reset} {dim}(steering, delivered){reset}",
                                text.trim_end()
                            ))?,
                            UserText::Note(note) => self.line(&format!("{dim}({note}){reset}"))?,
                            UserText::Hidden => {}
                        }
                    }
                    ModelPayload::Text(t) if t.role == penguin_omni_protocol::Role::Assistant => {
                        if let Some(c) = &child {
                            self.line(&format!("{dim}{c}{}{reset}", t.text.trim_end()))?;
                        } else if self.streaming.take() != Some("text") {
                            // A model that sends only complete messages.
                            let text = format!("{}\n", t.text.trim_end());
                            let shown = match self.color {
                                true => {
                                    let mut md = crate::markdown::Markdown::new();
                                    md.push(&text) + &md.finish()
                                }
                                false => text,
                            };
                            if !self.at_line_start {
                                writeln!(self.out)?;
                            }
                            self.raw(&shown)?;
                            self.at_line_start = true;
                        }
                        if t.stop_reason == Some(StopReason::Failed) && child.is_none() {
                            self.line(&format!("{yellow}(cut off){reset}"))?;
                        }
                    }
                    ModelPayload::Thinking(t)
                        if child.is_none()
                            && self.streaming.take() != Some("thinking")
                            && !t.thinking.is_empty() =>
                    {
                        // A model that sends only complete messages.
                        self.line(&format!("{dim}{}{reset}", t.thinking.trim_end()))?;
                    }
                    ModelPayload::ToolCall(c) => {
                        self.streaming = None;
                        if c.stop_reason.is_none_or(|r| r == StopReason::Completed) {
                            self.names.insert(c.tool_call_id.clone(), c.name.clone());
                            let prefix = child.clone().unwrap_or_default();
                            let args = match c.name.as_str() {
                                "update_plan" => tool_view::plan_summary(&c.arguments),
                                _ => None,
                            }
                            .unwrap_or_else(|| clip(&c.arguments, 100));
                            self.line(&format!(
                                "{bold}{prefix}⚙ {}{reset} {dim}{args}{reset}",
                                c.name,
                            ))?;
                        }
                    }
                    ModelPayload::ToolCallOutput(o) => {
                        let name = self
                            .names
                            .get(&o.tool_call_id)
                            .cloned()
                            .unwrap_or_else(|| o.tool_call_id.clone());
                        let (mark, color) = match o.stop_reason {
                            None | Some(StopReason::Completed) => ("✓", green),
                            Some(StopReason::Aborted) => ("⏹", yellow),
                            _ => ("✗", red),
                        };
                        let completed = matches!(o.stop_reason, None | Some(StopReason::Completed));
                        let first = o.output.lines().next().unwrap_or("");
                        let body =
                            tool_view::body(&name, &o.output, completed, self.verbose, self.color);
                        if body.hidden > 0 && child.is_none() {
                            self.collapsed = Some((name.clone(), o.output.clone()));
                        }
                        let more = match (body.hidden, body.lines.is_empty()) {
                            (0, _) | (_, false) => String::new(),
                            (n, true) => format!(" {dim}(+{n} lines){reset}"),
                        };
                        let images = tool_view::images_note(o.images.as_ref().map_or(0, Vec::len))
                            .map(|note| format!(" {dim}{note}{reset}"))
                            .unwrap_or_default();
                        let prefix = child.clone().unwrap_or_default();
                        self.line(&format!(
                            "  {color}{prefix}{mark} {name}{reset}: {}{more}{images}",
                            clip(first, 100)
                        ))?;
                        for l in &body.lines {
                            self.line(l)?;
                        }
                        if body.hidden > 0 && !body.lines.is_empty() {
                            self.line(&format!("    {dim}… {} more lines{reset}", body.hidden))?;
                        }
                        if child.is_none() {
                            self.running_tools = self.running_tools.saturating_sub(1);
                            self.waiting = if self.running_tools > 0 {
                                Waiting::Tools(self.running_tools)
                            } else {
                                Waiting::Nothing
                            };
                        }
                    }
                    _ => {}
                }
            }
            Body::Event(e) if child.is_none() => match e {
                EventPayload::RequestBegin => self.waiting = Waiting::FirstToken,
                EventPayload::ApprovalDecision {
                    decision,
                    tool_call_id,
                } => {
                    let name = self.names.get(tool_call_id).cloned().unwrap_or_default();
                    match decision {
                        ApprovalDecision::Allow => self.running_tools += 1,
                        ApprovalDecision::Deny => {
                            self.line(&format!("  {yellow}✗ {name} denied{reset}"))?
                        }
                        ApprovalDecision::Forbidden => {
                            self.line(&format!("  {red}✗ {name} forbidden by policy{reset}"))?
                        }
                    }
                }
                EventPayload::RequestEnd {
                    status,
                    error_message,
                    attempt,
                    retry_in_ms,
                } => {
                    self.waiting = if self.running_tools > 0 {
                        Waiting::Tools(self.running_tools)
                    } else {
                        Waiting::Nothing
                    };
                    if *status != StopReason::Completed && *status != StopReason::Aborted {
                        let detail = cause(*status, error_message.as_deref());
                        self.line(&format!(
                            "{yellow}request {status} (attempt {}): {detail}{reset}",
                            attempt.unwrap_or(1)
                        ))?;
                        if self.summary.refused == 1
                            && error_message
                                .as_deref()
                                .is_some_and(|m| m.contains("Connection refused"))
                        {
                            self.line(&format!(
                                "{dim}  nothing is listening at the model's address: is the server running? Check --base-url (or base_url in config.toml){reset}"
                            ))?;
                        }
                        if *status == StopReason::Auth {
                            self.line(&format!(
                                "{dim}  the provider refused the API key: check the variable it is read from (--api-key-env, or the provider's default such as OPENAI_API_KEY){reset}"
                            ))?;
                        }
                        if let Some(ms) = retry_in_ms {
                            self.waiting = Waiting::Backoff {
                                attempt: attempt.unwrap_or(1),
                                retry_in_ms: *ms,
                            };
                        }
                    }
                }
                EventPayload::Abort { reason } => {
                    self.waiting = Waiting::Nothing;
                    let reason = reason.as_deref().unwrap_or_default();
                    self.line(&format!("{red}⏹ aborted: {reason}{reset}"))?;
                }
                _ => {}
            },
            _ => {}
        }
        self.out.flush()
    }

    /// Streamed reply text, rendered as markdown as it arrives.
    fn stream_markdown(&mut self, event: StreamEventType, content: &str) -> io::Result<()> {
        match event {
            StreamEventType::Start => {
                if !self.at_line_start {
                    writeln!(self.out)?;
                    self.at_line_start = true;
                }
                self.streaming = Some("text");
                let mut md = crate::markdown::Markdown::new();
                let shown = md.push(content);
                self.markdown = Some(md);
                self.raw(&shown)?;
            }
            StreamEventType::Delta => {
                let shown = self
                    .markdown
                    .get_or_insert_with(crate::markdown::Markdown::new)
                    .push(content);
                self.raw(&shown)?;
            }
            StreamEventType::Stop => {
                if let Some(mut md) = self.markdown.take() {
                    let rest = md.finish();
                    self.raw(&rest)?;
                }
                if !self.at_line_start {
                    writeln!(self.out)?;
                    self.at_line_start = true;
                }
            }
        }
        Ok(())
    }

    fn stream_part(
        &mut self,
        kind: &'static str,
        event: StreamEventType,
        content: &str,
        pre: &str,
        post: &str,
    ) -> io::Result<()> {
        match event {
            StreamEventType::Start => {
                if !self.at_line_start {
                    writeln!(self.out)?;
                    self.at_line_start = true;
                }
                self.streaming = Some(kind);
                self.raw(&format!("{pre}{content}{post}"))?;
            }
            StreamEventType::Delta => self.raw(&format!("{pre}{content}{post}"))?,
            StreamEventType::Stop => {
                if !self.at_line_start {
                    writeln!(self.out)?;
                    self.at_line_start = true;
                }
            }
        }
        Ok(())
    }
}

fn short_id(id: &str) -> &str {
    let n = id.len();
    &id[n.saturating_sub(8)..]
}

/// The status-line text for `waiting`, `elapsed_ms` after it began.
pub fn status_text(waiting: &Waiting, elapsed_ms: u64) -> Option<String> {
    const SPIN: [&str; 4] = ["⠋", "⠙", "⠸", "⠴"];
    let spin = SPIN[(elapsed_ms / 120) as usize % SPIN.len()];
    match waiting {
        Waiting::Nothing => None,
        Waiting::FirstToken => Some(format!(
            "{spin} waiting for the model… {:.1}s",
            elapsed_ms as f64 / 1000.0
        )),
        Waiting::Backoff {
            attempt,
            retry_in_ms,
        } => {
            let left = retry_in_ms.saturating_sub(elapsed_ms);
            Some(format!(
                "{spin} reconnecting: attempt {} in {:.1}s",
                attempt + 1,
                left as f64 / 1000.0
            ))
        }
        Waiting::Tools(n) => Some(format!(
            "{spin} {n} tool(s) running… {:.1}s",
            elapsed_ms as f64 / 1000.0
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::build;

    fn render(msgs: Vec<penguin_omni_protocol::OmniMessage>) -> (String, RunSummary) {
        let mut r = Renderer::new(Vec::new(), false);
        for m in msgs {
            r.frame(&Frame::new(m)).unwrap();
        }
        let summary = r.summary().clone();
        (String::from_utf8(r.into_inner()).unwrap(), summary)
    }

    #[test]
    fn streams_text_and_lists_tools_with_status() {
        use StreamEventType::*;
        let ok = StopReason::Completed;
        let (text, summary) = render(vec![
            build::request_begin(),
            build::partial_text(Start, "", ok),
            build::partial_text(Delta, "Hello ", ok),
            build::partial_text(Delta, "there.", ok),
            build::partial_text(Stop, "", ok),
            build::assistant_text("Hello there.", ok),
            build::tool_call("exec_command", "{\"cmd\":\"ls\"}", "c1", ok, None),
            build::approval_decision(ApprovalDecision::Allow, "c1"),
            build::tool_call("exec_command", "{\"cmd\":\"rm\"}", "c2", ok, None),
            build::approval_decision(ApprovalDecision::Deny, "c2"),
            build::tool_call_output("Tool call denied by user.", "c2", StopReason::Aborted),
            build::token_usage(Default::default(), Default::default()),
            build::request_end(ok, Default::default()),
            build::tool_call_output("a\nb\nc", "c1", ok),
        ]);
        assert_eq!(
            text,
            "Hello there.\n⚙ exec_command {\"cmd\":\"ls\"}\n⚙ exec_command {\"cmd\":\"rm\"}\n  ✗ exec_command denied\n  ⏹ exec_command: Tool call denied by user.\n  ✓ exec_command: a (+2 lines)\n"
        );
        assert!(summary.succeeded());
        assert_eq!(summary.tool_calls, 2);
    }

    #[test]
    fn edits_show_their_diff_plans_a_checklist_and_images_a_note() {
        let ok = StopReason::Completed;
        let plan = r#"{"plan":[{"step":"Fix","status":"in_progress"},{"step":"Test","status":"pending"}]}"#;
        let msgs = vec![
            build::tool_call("edit_file", r#"{"path":"f.txt"}"#, "c1", ok, None),
            build::tool_call_output(
                "Edited f.txt: replaced 1 occurrence\n--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+B",
                "c1",
                ok,
            ),
            build::tool_call("edit_file", r#"{"path":"g.txt"}"#, "c2", ok, None),
            build::tool_call_output(
                "[tool error] old_string occurs 2 times in g.txt, on lines 1, 2. Nothing was changed.\nmore",
                "c2",
                StopReason::Failed,
            ),
            build::tool_call("update_plan", plan, "c3", ok, None),
            build::tool_call_output("Plan updated\n[~] Fix\n[ ] Test", "c3", ok),
            build::tool_call("read_image", r#"{"path":"a.png"}"#, "c4", ok, None),
            build::tool_call_output_with_images(
                "Image a.png: PNG, 1×1 pixels, 67 bytes (attached to this result)",
                "c4",
                ok,
                vec!["data:image/png;base64,AAAA".into()],
            ),
        ];
        let (text, _) = render(msgs.clone());
        insta::assert_snapshot!(text);
        // In colour: the diff's lines by kind.
        let mut r = Renderer::new(Vec::new(), true);
        for m in msgs.into_iter().take(2) {
            r.frame(&Frame::new(m)).unwrap();
        }
        let coloured = String::from_utf8(r.into_inner()).unwrap();
        assert!(
            coloured.contains("    \x1b[36m@@ -1,2 +1,2 @@\x1b[0m\n"),
            "{coloured}"
        );
        assert!(
            coloured.contains("    \x1b[31m-b\x1b[0m\n    \x1b[32m+B\x1b[0m\n"),
            "{coloured}"
        );
    }

    #[test]
    fn retries_and_aborts_are_visible() {
        let detail = build::RetryDetail {
            error_message: Some("boom".into()),
            attempt: Some(1),
            retry_in_ms: Some(2000),
        };
        let mut r = Renderer::new(Vec::new(), false);
        r.frame(&Frame::new(build::request_begin())).unwrap();
        assert_eq!(r.waiting(), &Waiting::FirstToken);
        r.frame(&Frame::new(build::request_end(StopReason::Timeout, detail)))
            .unwrap();
        assert_eq!(
            r.waiting(),
            &Waiting::Backoff {
                attempt: 1,
                retry_in_ms: 2000
            }
        );
        assert_eq!(
            status_text(r.waiting(), 500).unwrap()[4..].to_string(),
            "reconnecting: attempt 2 in 1.5s"
        );
        r.frame(&Frame::new(build::abort(Some(
            "aborted during reconnect backoff".into(),
        ))))
        .unwrap();
        assert!(!r.summary().succeeded());
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert_eq!(
            out,
            "request timeout (attempt 1): boom\n⏹ aborted: aborted during reconnect backoff\n"
        );
    }
}
