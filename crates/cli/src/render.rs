//! Rendering a run's stream for a person: streaming text, dimmed thinking, one line per tool
//! call with its status, retries and aborts.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

use penguin_omni_protocol::{
    ApprovalDecision, Body, EventPayload, Frame, ModelPayload, StopReason, StreamEventType,
};

use crate::describe::clip;
pub use crate::describe::{user_text_display, UserText};
use crate::tool_view;
use crate::untrusted::style::{BOLD, DIM, GREEN, RED, RESET, YELLOW};
use crate::untrusted::{guard, neutralise, Untrusted};
use penguin::llm_providers::failure::{Failure, FailureKind};

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
    /// Tokens of this task's requests (the main session's), as the provider reported them.
    pub tokens: penguin_omni_protocol::TokenCounts,
    /// The last failed request: why, and its attempt number.
    pub failure: Option<(Failure, u32)>,
    /// Output streamed by requests that ended without reporting usage (interrupted or
    /// failed mid-stream), in characters.
    pub unreported_chars: u64,
    /// How many requests streamed something and then ended without reporting usage.
    pub unreported_requests: u32,
    /// The input estimate of the next request (from the last reported total), when known.
    pub last_total: u64,
    /// Characters the open request has streamed so far.
    open_chars: u64,
}

impl RunSummary {
    /// Takes one frame of the run into account (the main session's own outcome only).
    pub fn observe(&mut self, frame: &Frame) {
        let msg = frame.message();
        if msg.has_origin() {
            return;
        }
        match msg.event() {
            Some(EventPayload::RequestBegin) => self.open_chars = 0,
            Some(EventPayload::RequestEnd {
                status,
                error_message,
                attempt,
                ..
            }) => {
                self.last_status = Some(*status);
                if !matches!(status, StopReason::Completed | StopReason::Aborted) {
                    self.failure = Some((
                        Failure::classify(*status, error_message.as_deref()),
                        attempt.unwrap_or(1),
                    ));
                }
                // A request that streamed and was cut off reports no usage: count its output.
                if *status != StopReason::Completed && self.open_chars > 0 {
                    self.unreported_chars += self.open_chars;
                    self.unreported_requests += 1;
                }
                self.open_chars = 0;
            }
            Some(EventPayload::TokenUsage { request, .. }) => {
                self.tokens = self.tokens + *request;
                self.last_total = request.total;
                self.open_chars = 0;
            }
            Some(EventPayload::Abort { reason }) => {
                self.aborted = Some(reason.clone().unwrap_or_default())
            }
            _ => {}
        }
        match msg.model() {
            Some(ModelPayload::ToolCall(c))
                if c.stop_reason.is_none_or(|r| r == StopReason::Completed) =>
            {
                self.tool_calls += 1;
            }
            Some(ModelPayload::PartialText(t)) => self.open_chars += t.text.chars().count() as u64,
            Some(ModelPayload::PartialThinking(t)) => {
                self.open_chars += t.thinking.chars().count() as u64
            }
            Some(ModelPayload::PartialToolCall(c)) => {
                self.open_chars += c.arguments.chars().count() as u64
            }
            _ => {}
        }
    }

    /// How the run ended, for the end-of-task line: `done`, `interrupted`, or
    /// `failed after N attempts: <cause>`.
    pub fn outcome(&self) -> String {
        if self.succeeded() {
            return "done".into();
        }
        match (&self.aborted, &self.failure) {
            (Some(reason), Some((failure, attempts))) if !reason.starts_with("aborted") => {
                failure.ended(*attempts)
            }
            (Some(_), _) => "interrupted".into(),
            (None, Some((failure, attempts))) => failure.ended(*attempts),
            (None, None) => "failed".into(),
        }
    }

    /// Tokens spent but not reported: requests cut off mid-stream report no usage, so their
    /// input (the last reported total, or `base_input` before any) and streamed output are
    /// estimated (a quarter token per character). `(input, output)`, zero when nothing was cut.
    pub fn unreported_estimate(&self, base_input: u64) -> (u64, u64) {
        if self.unreported_requests == 0 {
            return (0, 0);
        }
        let input = match self.last_total {
            0 => base_input,
            t => t,
        };
        (
            input * self.unreported_requests as u64,
            self.unreported_chars.div_ceil(4),
        )
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
    /// The tool outputs shown collapsed, in order: each tool and full text.
    collapsed: Vec<(String, String)>,
    names: HashMap<String, String>,
    streaming: Option<&'static str>,
    at_line_start: bool,
    running_tools: usize,
    waiting: Waiting,
    summary: RunSummary,
    /// Calls whose denial was shown: their aborted output adds nothing.
    denied: HashSet<String>,
    /// Failure kinds whose hint was shown in this run.
    hinted: HashSet<FailureKind>,
    /// The model's context window, when known: tool definitions taking much of it are said.
    context_window: Option<u64>,
    /// The last tool-cost note shown (each list is said once).
    cost_noted: Option<String>,
}

impl<W: Write> Renderer<W> {
    /// A renderer writing to `out`; `color` enables ANSI styling.
    pub fn new(out: W, color: bool) -> Renderer<W> {
        Renderer {
            out,
            color,
            verbose: false,
            markdown: None,
            collapsed: Vec::new(),
            names: HashMap::new(),
            streaming: None,
            at_line_start: true,
            running_tools: 0,
            waiting: Waiting::Nothing,
            summary: RunSummary::default(),
            denied: HashSet::new(),
            hinted: HashSet::new(),
            context_window: None,
            cost_noted: None,
        }
    }

    /// The model's context window, so a tool list that takes much of it is said.
    pub fn context_window(mut self, window: Option<u64>) -> Self {
        self.context_window = window.filter(|w| *w > 0);
        self
    }

    /// Shows tool output in full instead of its first line.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// The tool outputs shown collapsed, in order (tool name, full output).
    pub fn collapsed(&self) -> &[(String, String)] {
        &self.collapsed
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
        self.line(&format!("{dim}{}{reset}", Untrusted(text)))?;
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

    /// Every line goes out [`guard`]ed: the styles are penguin's, anything else is shown. The
    /// untrusted parts are neutralised where they are put in, so even a copy of one of
    /// penguin's styles is shown rather than applied.
    fn line(&mut self, text: &str) -> io::Result<()> {
        if !self.at_line_start {
            writeln!(self.out)?;
        }
        writeln!(self.out, "{}", guard(text))?;
        self.at_line_start = true;
        Ok(())
    }

    fn raw(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        write!(self.out, "{}", guard(text))?;
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
                Untrusted(short_id(o.last().map(String::as_str).unwrap_or("")))
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
                        self.stream_part("text", t.event_type, &neutralise(&t.text), "", "")?
                    }
                    ModelPayload::PartialThinking(t) if child.is_none() => self.stream_part(
                        "thinking",
                        t.event_type,
                        &neutralise(&t.thinking),
                        dim,
                        reset,
                    )?,
                    ModelPayload::Text(t)
                        if t.role == penguin_omni_protocol::Role::User
                            && child.is_none()
                            && penguin::goal::round_of(msg).is_some() =>
                    {
                        // A goal round's input: its round, not the protocol block.
                        let round = penguin::goal::round_of(msg).unwrap_or_default();
                        self.line(&format!("{dim}[goal] round {round}{reset}"))?
                    }
                    ModelPayload::Text(t)
                        if t.role == penguin_omni_protocol::Role::User && child.is_none() =>
                    {
                        // Input shown by a watcher (history, server-published prompts) and
                        // delivered steering, without the markers the model reads.
                        match user_text_display(&t.text) {
                            UserText::Prompt(text) => self
                                .line(&format!("{bold}› {}{reset}", Untrusted(text.trim_end())))?,
                            UserText::Steering(text) => self.line(&format!(
                                "{bold}› {}{reset} {dim}(steering, delivered){reset}",
                                Untrusted(text.trim_end())
                            ))?,
                            UserText::Note(note) => self.line(&format!("{dim}({note}){reset}"))?,
                            UserText::Hidden => {}
                            UserText::Hook(text) => {
                                self.line(&format!("  {dim}↳ {}{reset}", clip(&text, 160)))?
                            }
                        }
                    }
                    ModelPayload::Text(t) if t.role == penguin_omni_protocol::Role::Assistant => {
                        if let Some(c) = &child {
                            self.line(&format!("{dim}{c}{}{reset}", Untrusted(t.text.trim_end())))?;
                        } else if self.streaming.take() != Some("text") {
                            // A model that sends only complete messages.
                            let text = format!("{}\n", Untrusted(t.text.trim_end()));
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
                        self.line(&format!("{dim}{}{reset}", Untrusted(t.thinking.trim_end())))?;
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
                                Untrusted(&c.name),
                            ))?;
                        }
                    }
                    ModelPayload::ToolCallOutput(o)
                        if o.stop_reason == Some(StopReason::Aborted)
                            && self.denied.remove(&o.tool_call_id) =>
                    {
                        // The denial's line said it already (and the call never ran, so
                        // the running count is unchanged).
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
                            self.collapsed.push((name.clone(), o.output.clone()));
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
                            "  {color}{prefix}{mark} {}{reset}: {}{more}{images}",
                            Untrusted(&name),
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
                    decided_by,
                    reason,
                    updated_arguments,
                } => {
                    let name = self.names.get(tool_call_id).cloned().unwrap_or_default();
                    match decision {
                        ApprovalDecision::Allow => {
                            self.running_tools += 1;
                            if let Some(args) = updated_arguments {
                                let by = decided_by.as_deref().unwrap_or("a hook");
                                self.line(&format!(
                                    "  {dim}↳ run as rewritten by {}: {}{reset}",
                                    Untrusted(by),
                                    clip(args, 100)
                                ))?
                            }
                        }
                        ApprovalDecision::Deny => {
                            self.denied.insert(tool_call_id.clone());
                            match decided_by {
                                // A hook decided: say which, and why (the model reads the same).
                                Some(by) => self.line(&format!(
                                    "  {yellow}✗ {} denied by {}: {}{reset}",
                                    Untrusted(&name),
                                    Untrusted(by),
                                    clip(reason.as_deref().unwrap_or("no reason given"), 160)
                                ))?,
                                None => self.line(&format!(
                                    "  {yellow}✗ {} denied{reset}",
                                    Untrusted(&name)
                                ))?,
                            }
                        }
                        ApprovalDecision::Forbidden => {
                            self.denied.insert(tool_call_id.clone());
                            self.line(&format!(
                                "  {red}✗ {} forbidden by policy{reset}",
                                Untrusted(&name)
                            ))?
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
                        let failure = Failure::classify(*status, error_message.as_deref());
                        let retry = match (retry_in_ms, failure.retry_after_secs) {
                            // The provider said how long to wait (Retry-After): say so, and
                            // when the ladder's ceiling cut it short.
                            (Some(ms), Some(asked)) if *ms >= asked * 1000 => format!(
                                " · retrying in {:.0}s, as the provider asked (Retry-After)",
                                *ms as f64 / 1000.0
                            ),
                            (Some(ms), Some(asked)) => format!(
                                " · retrying in {:.0}s (the provider asked for {asked}s; the retry ceiling is {:.0}s)",
                                *ms as f64 / 1000.0,
                                *ms as f64 / 1000.0
                            ),
                            (Some(ms), None) => {
                                format!(" · retrying in {:.0}s", *ms as f64 / 1000.0)
                            }
                            (None, _) => String::new(),
                        };
                        self.line(&format!(
                            "{yellow}request failed (attempt {}): {}{retry}{reset}",
                            attempt.unwrap_or(1),
                            Untrusted(&failure.cause)
                        ))?;
                        if let Some(hint) = failure.hint {
                            if self.hinted.insert(failure.kind) {
                                self.line(&format!("{dim}  {hint}{reset}"))?;
                            }
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
                    match (&self.summary.failure, reason.starts_with("aborted")) {
                        // The run gave up on the model: say why, not the engine's reason.
                        (Some((failure, attempts)), false) => self.line(&format!(
                            "{red}✗ {}{reset}",
                            Untrusted(&failure.ended(*attempts))
                        ))?,
                        _ => self.line(&format!("{red}⏹ aborted: {}{reset}", Untrusted(reason)))?,
                    }
                }
                EventPayload::McpConnectEnd { results, .. } => {
                    for r in results {
                        // The event carries the count (the tools themselves arrive in
                        // `tool_list_ready`); a list is counted too, as older traces have it.
                        let tools = r.tools.as_ref().map_or(0, |t| {
                            t.as_u64()
                                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                                .or_else(|| t.as_array().map(Vec::len))
                                .unwrap_or(0)
                        });
                        match &r.error {
                            None => self.line(&format!(
                                "{dim}{}: {tools} tool{} ({:.1}s){reset}",
                                Untrusted(&r.server),
                                if tools == 1 { "" } else { "s" },
                                r.duration_ms as f64 / 1000.0
                            ))?,
                            Some(e) => self.line(&format!(
                                "{yellow}{}: not connected: {}{reset}",
                                Untrusted(&r.server),
                                clip(e, 200)
                            ))?,
                        }
                    }
                }
                EventPayload::GoalFinished {
                    outcome,
                    rounds,
                    tokens_used,
                } if child.is_none() => {
                    let colour = match outcome {
                        penguin_omni_protocol::GoalOutcomeStatus::Complete => green,
                        _ => yellow,
                    };
                    let line = penguin::goal::finished_line(
                        *outcome,
                        *rounds,
                        &penguin::goal::tokens_text(*tokens_used),
                    );
                    self.line(&format!("{colour}{line}{reset}"))?
                }
                EventPayload::ToolListReady { tools } => {
                    if let Some(note) = tools_cost_note(tools, self.context_window) {
                        if self.cost_noted.as_ref() != Some(&note) {
                            self.line(&format!("{yellow}{note}{reset}"))?;
                            self.cost_noted = Some(note);
                        }
                    }
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
                let shown = md.push(&neutralise(content));
                self.markdown = Some(md);
                self.raw(&shown)?;
            }
            StreamEventType::Delta => {
                let shown = self
                    .markdown
                    .get_or_insert_with(crate::markdown::Markdown::new)
                    .push(&neutralise(content));
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

/// A note when the tool definitions take a large share (a quarter or more) of the model's
/// context window: every request carries them, so they leave that much less for the
/// conversation.
pub fn tools_cost_note(
    tools: &[penguin_omni_protocol::ToolDefinition],
    window: Option<u64>,
) -> Option<String> {
    let window = window.filter(|w| *w > 0)?;
    let cost = penguin::llm_providers::limits::base_input_tokens("", tools);
    (cost * 4 >= window).then(|| {
        format!(
            "note: the {} tool definitions cost about {cost} tokens, {}% of the model's {window}-token context window, in every request (fewer MCP servers, or a larger context, leave more room)",
            tools.len(),
            cost * 100 / window
        )
    })
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
            "Hello there.\n⚙ exec_command {\"cmd\":\"ls\"}\n⚙ exec_command {\"cmd\":\"rm\"}\n  ✗ exec_command denied\n  ✓ exec_command: a (+2 lines)\n"
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
            "request failed (attempt 1): boom · retrying in 2s\n⏹ aborted: aborted during reconnect backoff\n"
        );
    }

    #[test]
    fn a_retry_after_is_named_in_the_retry_line() {
        let line = |message: &str, retry_in_ms: u64| {
            let detail = build::RetryDetail {
                error_message: Some(message.into()),
                attempt: Some(1),
                retry_in_ms: Some(retry_in_ms),
            };
            let (out, _) = render(vec![
                build::request_begin(),
                build::request_end(StopReason::Timeout, detail),
            ]);
            out.lines().next().unwrap_or_default().to_owned()
        };
        assert_eq!(
            line("429 Rate limit reached (Retry-After: 20 s)", 20_000),
            "request failed (attempt 1): HTTP 429 Rate limit reached · retrying in 20s, as the provider asked (Retry-After)"
        );
        assert_eq!(
            line("503 Overloaded (Retry-After: 120 s)", 30_000),
            "request failed (attempt 1): HTTP 503 Overloaded · retrying in 30s (the provider asked for 120s; the retry ceiling is 30s)"
        );
        assert_eq!(
            line("429 Rate limit reached", 2_000),
            "request failed (attempt 1): HTTP 429 Rate limit reached · retrying in 2s"
        );
    }

    #[test]
    fn a_run_that_gives_up_says_why_after_how_many_attempts() {
        let refused = "error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)";
        let end = |attempt: u32, retry: Option<u64>| {
            build::request_end(
                StopReason::Timeout,
                build::RetryDetail {
                    error_message: Some(refused.into()),
                    attempt: Some(attempt),
                    retry_in_ms: retry,
                },
            )
        };
        let (text, summary) = render(vec![
            build::request_begin(),
            end(1, Some(2000)),
            build::request_begin(),
            end(2, None),
            build::abort(Some("reconnect failed after 1 retries".into())),
        ]);
        assert_eq!(
            text,
            "request failed (attempt 1): connection refused (http://127.0.0.1:9/v1/chat/completions) · retrying in 2s\n  nothing is listening at the model's address: is the server running? Check --base-url (or base_url in config.toml)\nrequest failed (attempt 2): connection refused (http://127.0.0.1:9/v1/chat/completions)\n✗ failed after 2 attempts: connection refused (http://127.0.0.1:9/v1/chat/completions)\n"
        );
        assert_eq!(
            summary.outcome(),
            "failed after 2 attempts: connection refused (http://127.0.0.1:9/v1/chat/completions)"
        );
        // An interrupt during the ladder is the user's, not a failure.
        let (_, summary) = render(vec![
            build::request_begin(),
            end(1, Some(2000)),
            build::abort(Some("aborted during reconnect backoff".into())),
        ]);
        assert_eq!(summary.outcome(), "interrupted");
    }

    #[test]
    fn a_request_cut_off_mid_stream_still_counts_its_tokens() {
        use StreamEventType::*;
        let ok = StopReason::Completed;
        let (_, summary) = render(vec![
            build::request_begin(),
            build::partial_text(Start, "", ok),
            build::partial_text(Delta, "x".repeat(400), ok),
            build::partial_text(Stop, "", StopReason::Aborted),
            build::request_end(StopReason::Aborted, Default::default()),
            build::abort(Some("aborted by user".into())),
        ]);
        assert_eq!(summary.tokens.total, 0, "nothing was reported");
        assert_eq!(summary.unreported_estimate(1000), (1000, 100));
        assert_eq!(summary.outcome(), "interrupted");
    }

    /// Every escape sequence in `out`, as the bytes from ESC to its final byte (a CSI's, else
    /// the byte after ESC).
    fn escapes(out: &str) -> Vec<String> {
        out.match_indices('\x1b')
            .map(|(i, _)| {
                let seq = &out[i..];
                let end = match seq.as_bytes().get(1) {
                    Some(b'[') => seq[2..]
                        .find(|c: char| ('@'..='~').contains(&c))
                        .map_or(seq.len(), |j| j + 3),
                    _ => 2.min(seq.len()),
                };
                seq[..end].to_owned()
            })
            .collect()
    }

    #[test]
    fn text_penguin_did_not_write_never_reaches_the_terminal_raw() {
        use penguin_omni_protocol::{McpConnectResult, McpConnectStatus};
        use StreamEventType::*;
        const HOSTILE: &str = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;title\x07\x1b[8mhidden\x1b[1A\x1b[2K\u{9b}31m\rforged \x1b[31mred";
        let ok = StopReason::Completed;
        let h = HOSTILE;
        let args = serde_json::json!({ "cmd": h })
            .to_string()
            .replace("\\u001b", "\u{9b}");
        let plan =
            serde_json::json!({"explanation": h, "plan": [{"step": h, "status": "in_progress"}]});
        let mcp = McpConnectResult {
            server: h.into(),
            transport: "stdio".into(),
            status: McpConnectStatus::Failed,
            duration_ms: 1,
            tools: None,
            error: Some(h.into()),
        };
        let frames = vec![
            build::user_text(h),
            build::user_text(format!("[user_steering]\n{h}\n[/user_steering]")),
            build::request_begin(),
            build::partial_thinking(Start, h, ok),
            build::partial_thinking(Delta, h, ok),
            build::partial_thinking(Stop, "", ok),
            build::thinking(h, ok, None),
            build::partial_text(Start, h, ok),
            build::partial_text(Delta, format!("\n# {h}\n- **{h}** `{h}`\n"), ok),
            build::partial_text(Stop, "", ok),
            build::assistant_text(h, ok),
            build::assistant_text(format!("> {h}\n```\n{h}\n```"), ok),
            build::tool_call(h, h, "c1", ok, None),
            build::tool_call("exec_command", args, "c2", ok, None),
            build::tool_call("update_plan", plan.to_string(), "c3", ok, None),
            build::approval_decision(ApprovalDecision::Deny, "c1"),
            build::approval_decision(ApprovalDecision::Allow, "c2"),
            build::tool_call_output(format!("{h}\n{h}\n{h}"), "c2", ok),
            build::tool_call_output(
                format!("Edited: {h}\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-{h}\n+{h}"),
                "c3",
                StopReason::Failed,
            ),
            build::tool_call_output(format!("Plan updated\n{h}\n[~] {h}"), "c3", ok),
            build::assistant_text(h, ok).with_origin(h),
            build::request_end(
                StopReason::Timeout,
                build::RetryDetail {
                    error_message: Some(h.into()),
                    attempt: Some(1),
                    retry_in_ms: Some(10),
                },
            ),
            build::mcp_connect_end(vec![mcp], false),
            build::abort(Some(h.into())),
        ];
        for (color, verbose) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut r = Renderer::new(Vec::new(), color).verbose(verbose);
            for f in &frames {
                r.frame(&Frame::new(f.clone())).unwrap();
            }
            r.note(h).unwrap();
            let out = String::from_utf8(r.into_inner()).unwrap();
            let what = format!("colour {color}, verbose {verbose}:\n{out}");
            for c in ['\x07', '\r', '\u{9b}'] {
                assert!(!out.contains(c), "{c:?} raw, {what}");
            }
            for seq in escapes(&out) {
                assert!(
                    crate::untrusted::style::ALL.contains(&seq.as_str()),
                    "{seq:?} is not one of penguin's styles, {what}"
                );
            }
            assert!(out.contains(r"\x1b]52;c;cm0gLXJmIH4=\x07"), "{what}");
            assert!(
                out.contains(r"\x1b[8mhidden\x1b[1A\x1b[2K\u{9b}31m\x0dforged"),
                "{what}"
            );
            // The model's own `ESC[31m` is shown, not applied, even though penguin uses it.
            assert!(out.contains(r"\x1b[31mred"), "{what}");
            assert_eq!(escapes(&out).is_empty(), !color, "{what}");
        }
    }

    #[test]
    fn mcp_servers_and_a_costly_tool_list_are_said() {
        use penguin_omni_protocol::{McpConnectResult, McpConnectStatus, ToolDefinition};
        let tool = |i: usize| ToolDefinition {
            name: format!("fs__tool{i}"),
            description: "d".repeat(400),
            parameters: Some(serde_json::json!({"type": "object"})),
        };
        let tools: Vec<ToolDefinition> = (0..14).map(tool).collect();
        let result = McpConnectResult {
            server: "fs".into(),
            transport: "stdio".into(),
            status: McpConnectStatus::Completed,
            duration_ms: 300,
            // What penguin-tools' MCP connector puts here: the count.
            tools: Some(serde_json::json!(tools.len())),
            error: None,
        };
        let mut r = Renderer::new(Vec::new(), false).context_window(Some(4096));
        for m in [
            build::mcp_connect_end(vec![result], false),
            build::tool_list_ready(tools),
        ] {
            r.frame(&Frame::new(m)).unwrap();
        }
        let out = String::from_utf8(r.into_inner()).unwrap();
        assert!(out.starts_with("fs: 14 tools (0.3s)\n"), "{out}");
        assert!(
            out.contains("note: the 14 tool definitions cost about")
                && out.contains("of the model's 4096-token context window"),
            "{out}"
        );
        assert_eq!(tools_cost_note(&[tool(0)], Some(128_000)), None);
        assert_eq!(tools_cost_note(&[tool(0)], None), None);
    }
}
