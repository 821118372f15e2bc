//! The approver the CLI offers: `y`, `n`, `a` (always, for one scope) and, for a command under
//! a sandbox, `u` (this once outside it).

use std::sync::{Arc, Mutex as StdMutex};

use async_trait::async_trait;
use penguin::engine::{ApprovalError, Approver, Environment};
use penguin_omni_protocol::{ApprovalDecision, ModelPayload, OmniMessage, ToolCall};

use crate::console::Console;
use penguin::engine::always::command_of;
pub use penguin::engine::always::{shown_prefix, Scope};

/// Asks on the terminal: `y` allow, `n` deny, `a` allow this and later calls of the same
/// scope (one tool, or for `exec_command` one command prefix), and for a command under a
/// sandbox `u`: run this one call outside the sandbox.
pub struct TerminalApprover {
    console: Console,
    always: StdMutex<Vec<Scope>>,
    /// The session's tools, which say which calls may run outside their sandbox.
    tools: Option<Arc<dyn Environment>>,
}

impl TerminalApprover {
    /// An approver reading answers from `console`.
    pub fn new(console: Console) -> TerminalApprover {
        TerminalApprover {
            console,
            always: StdMutex::new(Vec::new()),
            tools: None,
        }
    }

    /// Offers `u` for the calls `tools` can run outside their sandbox, and has them grant it.
    pub fn offering_unsandboxed(mut self, tools: Arc<dyn Environment>) -> TerminalApprover {
        self.tools = Some(tools);
        self
    }

    /// What "always" answers have allowed so far.
    pub fn scopes(&self) -> Vec<Scope> {
        self.always
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Takes over "always" answers given to another approver (the chat's, before it moved
    /// to another model or session).
    pub fn keep(&self, scopes: Vec<Scope>) {
        self.always
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(scopes);
        self.publish();
    }

    /// Forgets every "always" answer.
    pub fn clear(&self) {
        self.always
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.publish();
    }

    /// The status line's note of what is auto-approved (empty when nothing is).
    pub fn summary(&self) -> String {
        let scopes = self.scopes();
        if scopes.is_empty() {
            return String::new();
        }
        let list: Vec<String> = scopes.iter().map(Scope::to_string).collect();
        format!("auto-approved: {}", list.join(", "))
    }

    fn publish(&self) {
        if let Some(term) = self.console.term() {
            term.set_approvals(self.summary());
        }
    }

    /// Whether `u` is offered for `call`: its tools can run it outside their sandbox.
    fn may_run_unsandboxed(&self, call: &ToolCall) -> bool {
        self.tools
            .as_ref()
            .is_some_and(|t| t.unsandboxed_tools().contains(&call.name))
    }
}

/// Lines of a call's view shown at once; `m` shows the next page.
const PAGE: usize = 30;

/// What the person approving a call sees above the question: a command as `$ cmd` with where
/// it runs, an edit as `preview` (the diff it would make, computed without writing), any other
/// call as its name and arguments.
pub fn call_view(name: &str, args: &str, preview: Option<&str>) -> String {
    if let Some(preview) = preview {
        return preview.to_owned();
    }
    let Some(cmd) = command_of(name, args) else {
        return format!("{name} {args}");
    };
    let v: serde_json::Value = serde_json::from_str(args).unwrap_or_default();
    let mut place = match v.get("workdir").and_then(|w| w.as_str()) {
        Some(dir) if !dir.is_empty() && dir != "." => format!("in {dir}"),
        _ => "in the workspace root".to_owned(),
    };
    if v.get("run_in_background").and_then(|b| b.as_bool()) == Some(true) {
        place.push_str(", in the background");
    }
    let mut lines = cmd.lines();
    let mut out = format!("$ {}", lines.next().unwrap_or_default());
    for line in lines {
        out.push_str(&format!("\n> {line}"));
    }
    out.push_str(&format!("\n  ({place})"));
    out
}

/// The question asked for a call, below its view: `more` lines of the view are still unseen
/// (offered as `m`). "Always" is offered only where it grants more than this call.
pub fn approval_prompt(call: &OmniMessage, more: usize) -> String {
    let (name, args) = match call.model() {
        Some(ModelPayload::ToolCall(c)) => (c.name.as_str(), c.arguments.as_str()),
        _ => ("?", ""),
    };
    let from = call
        .origin
        .as_ref()
        .map(|o| format!(" (from subagent {})", o.join("/")))
        .unwrap_or_default();
    let always = match Scope::for_call(name, args) {
        Some(scope) => format!(" / [a]lways ({})", scope.describe()),
        None => " (asked each time: not one plain command)".into(),
    };
    let more = match more {
        0 => String::new(),
        n => format!(" / [m]ore ({n} lines not shown)"),
    };
    format!("Allow {name}{from}? [y]es / [n]o{always}{more}: ")
}

/// The question for a command that may run once outside the sandbox.
fn bypass_prompt(call: &OmniMessage, more: usize) -> String {
    let prompt = approval_prompt(call, more);
    let head = prompt.trim_end_matches(": ");
    format!("{head} / [u]nsandboxed, this once: ")
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        self.ask_about(call, true).await
    }

    async fn ask_person(
        &self,
        call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        // A hook wanted this very call seen: an earlier "always" does not answer for it.
        Some(self.ask_about(call, false).await)
    }
}

impl TerminalApprover {
    /// Asks about `call`; `always` lets an earlier "always" answer allow it unasked.
    async fn ask_about(
        &self,
        call: &OmniMessage,
        always: bool,
    ) -> Result<ApprovalDecision, ApprovalError> {
        let tool_call = match call.model() {
            Some(ModelPayload::ToolCall(c)) => Some(c),
            _ => None,
        };
        let (id, name, args) = tool_call
            .map(|c| (c.tool_call_id.clone(), c.name.clone(), c.arguments.clone()))
            .unwrap_or_default();
        if always && self.scopes().iter().any(|s| s.covers(&name, &args)) {
            return Ok(ApprovalDecision::Allow);
        }
        self.console.until_shown(&id).await;
        // The call `u` would run outside the sandbox, when it is offered.
        let unsandboxable = tool_call.filter(|c| self.may_run_unsandboxed(c));
        let preview = match (&self.tools, tool_call) {
            (Some(tools), Some(c)) => tools.preview(c).await,
            _ => None,
        };
        let view = call_view(&name, &args, preview.as_deref());
        let view: Vec<&str> = view.lines().collect();
        let mut seen = PAGE.min(view.len());
        self.console.show_view(&view[..seen].join("\n"));
        let mut not_an_answer = None;
        // Anything but an offered answer asks again; only the end of input denies.
        let answer = loop {
            let more = view.len() - seen;
            let prompt = match unsandboxable {
                Some(_) => bypass_prompt(call, more),
                None => approval_prompt(call, more),
            };
            let mut offered = vec!["y", "yes", "n", "no"];
            if Scope::for_call(&name, &args).is_some() {
                offered.extend(["a", "always"]);
            }
            if unsandboxable.is_some() {
                offered.extend(["u", "unsandboxed"]);
            }
            if more > 0 {
                offered.extend(["m", "more"]);
            }
            let question = match not_an_answer.take() {
                Some(given) => {
                    let keys: Vec<&str> =
                        offered.iter().copied().filter(|k| k.len() == 1).collect();
                    format!("{given:?} is not an answer: {}. {prompt}", keys.join(", "))
                }
                None => prompt,
            };
            let Some(answer) = self.console.ask(&question).await else {
                self.console.note(
                    "(no answer: input has ended, so the call is denied; pass --yes to allow tool calls without asking)",
                );
                break None;
            };
            let answer = answer.trim().to_ascii_lowercase();
            match answer.as_str() {
                "m" | "more" if more > 0 => {
                    let next = (seen + PAGE).min(view.len());
                    self.console.show_view(&view[seen..next].join("\n"));
                    seen = next;
                }
                a if offered.contains(&a) => break Some(answer),
                _ => not_an_answer = Some(answer),
            }
        };
        Ok(match answer.as_deref() {
            Some("y" | "yes") => ApprovalDecision::Allow,
            // Offered only where the call has a scope.
            Some("a" | "always") => {
                if let Some(scope) = Scope::for_call(&name, &args) {
                    self.console.note(&format!(
                        "  from now on {} is allowed without asking (/approvals to review or clear)",
                        match &scope {
                            Scope::Tool(t) => format!("every {t} call"),
                            Scope::Command(p) => format!("a command starting `{}`", shown_prefix(p)),
                        }
                    ));
                    let mut always = self.always.lock().unwrap_or_else(|p| p.into_inner());
                    if !always.contains(&scope) {
                        always.push(scope);
                    }
                }
                self.publish();
                ApprovalDecision::Allow
            }
            Some("u" | "unsandboxed") => match (unsandboxable, &self.tools) {
                (Some(c), Some(tools)) if tools.grant_unsandboxed(c) => ApprovalDecision::Allow,
                // Not offered for this call: an answer to a question not asked is no.
                _ => ApprovalDecision::Deny,
            },
            _ => ApprovalDecision::Deny,
        })
    }
}

/// `--approve deny-all`: every call is denied, nobody is asked.
pub struct DenyAll;

#[async_trait]
impl Approver for DenyAll {
    async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        Ok(ApprovalDecision::Deny)
    }

    async fn ask_person(
        &self,
        _call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        // The user denied every call beforehand: that is their answer to this one too.
        Some(Ok(ApprovalDecision::Deny))
    }
}

/// `--approve allow-all` (`--yes`) at a terminal: every call is allowed unasked, except one a
/// hook asks about, which the person at the terminal answers.
pub struct AllowAllAsking(pub Arc<TerminalApprover>);

#[async_trait]
impl Approver for AllowAllAsking {
    async fn approve(&self, _call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        Ok(ApprovalDecision::Allow)
    }

    async fn ask_person(
        &self,
        call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        self.0.ask_person(call).await
    }
}

/// `--approve read-only`: a call of a read-only tool (the session's tools say which) runs
/// without asking; the rest are asked as usual.
pub struct ReadOnly {
    /// The session's tools.
    pub tools: Arc<dyn Environment>,
    /// Who is asked about the rest.
    pub ask: Arc<dyn Approver>,
}

#[async_trait]
impl Approver for ReadOnly {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        if let Some(ModelPayload::ToolCall(c)) = call.model() {
            if self.tools.permission(&c.name) == penguin::engine::Permission::Read {
                return Ok(ApprovalDecision::Allow);
            }
        }
        self.ask.approve(call).await
    }

    async fn ask_person(
        &self,
        call: &OmniMessage,
    ) -> Option<Result<ApprovalDecision, ApprovalError>> {
        self.ask.ask_person(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::{build, StopReason};

    fn cmd(c: &str, id: &str) -> OmniMessage {
        let args = serde_json::json!({ "cmd": c }).to_string();
        build::tool_call("exec_command", args, id, StopReason::Completed, None)
    }

    #[tokio::test]
    async fn answers_map_to_decisions_and_always_sticks_to_its_scope() {
        let console = Console::from_lines(vec!["n".into(), "y".into(), "a".into()]);
        let approver = TerminalApprover::new(console);
        let call = cmd("cargo test -p x", "c");
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Deny));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert_eq!(
            approver.scopes(),
            [Scope::Command(vec!["cargo".into(), "test".into()])]
        );
        // No input left, but "always" answers without asking, within its scope only.
        assert_eq!(
            approver.approve(&cmd("cargo test", "d")).await,
            Ok(ApprovalDecision::Allow)
        );
        for other in [
            "cargo build",
            "cargo testing",
            "cargo test && rm -rf ~",
            "rm -rf ~",
        ] {
            assert_eq!(
                approver.approve(&cmd(other, "e")).await,
                Ok(ApprovalDecision::Deny),
                "{other} was asked (and denied: input has ended)"
            );
        }
        let write = build::tool_call("write_file", "{}", "w", StopReason::Completed, None);
        assert_eq!(approver.approve(&write).await, Ok(ApprovalDecision::Deny));
        assert_eq!(approver.summary(), "auto-approved: `cargo test`");
        approver.clear();
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Deny));
        let denied_at_eof = TerminalApprover::new(Console::from_lines(vec![]));
        assert_eq!(
            denied_at_eof.approve(&call).await,
            Ok(ApprovalDecision::Deny)
        );
    }

    #[tokio::test]
    async fn an_unrecognised_answer_asks_again_and_never_denies() {
        let console = Console::from_lines(vec!["x".into(), "".into(), "Y".into()]);
        let approver = TerminalApprover::new(console);
        assert_eq!(
            approver.approve(&cmd("ls", "c")).await,
            Ok(ApprovalDecision::Allow)
        );
    }

    #[tokio::test]
    async fn always_for_a_file_tool_covers_that_tool_only() {
        let approver = TerminalApprover::new(Console::from_lines(vec!["a".into()]));
        let write = build::tool_call("write_file", "{}", "w1", StopReason::Completed, None);
        assert_eq!(approver.approve(&write).await, Ok(ApprovalDecision::Allow));
        assert_eq!(approver.approve(&write).await, Ok(ApprovalDecision::Allow));
        assert_eq!(
            approver.approve(&cmd("ls", "c")).await,
            Ok(ApprovalDecision::Deny)
        );
        assert_eq!(approver.scopes(), [Scope::Tool("write_file".into())]);
    }

    #[tokio::test]
    async fn always_for_git_status_asks_again_for_a_second_line() {
        // The issue's reproduction: `a` for `git status`, then a newline smuggles `touch X`.
        let approver = TerminalApprover::new(Console::from_lines(vec!["a".into()]));
        assert_eq!(
            approver.approve(&cmd("git status", "c1")).await,
            Ok(ApprovalDecision::Allow)
        );
        for smuggled in [
            "git status\ntouch X",
            "git status\r\ntouch X",
            "git status\n\ntouch X",
        ] {
            assert_eq!(
                approver.approve(&cmd(smuggled, "c2")).await,
                Ok(ApprovalDecision::Deny),
                "{smuggled:?} was asked (and denied: input has ended)"
            );
        }
        assert_eq!(
            approver.approve(&cmd("git status --short", "c3")).await,
            Ok(ApprovalDecision::Allow)
        );
    }

    /// Tools whose commands may run outside their sandbox, noting each grant.
    #[derive(Default)]
    struct Sandboxed {
        grants: StdMutex<Vec<(String, String)>>,
    }

    #[async_trait]
    impl Environment for Sandboxed {
        async fn execute(
            &self,
            _request: penguin::engine::ToolCallRequest,
            _sink: &mut dyn penguin::llm_providers::MessageSink,
        ) {
        }

        fn tools(&self) -> Vec<penguin_omni_protocol::ToolDefinition> {
            Vec::new()
        }

        fn permission(&self, _name: &str) -> penguin::engine::Permission {
            penguin::engine::Permission::ReadWrite
        }

        fn unsandboxed_tools(&self) -> Vec<String> {
            vec!["exec_command".into()]
        }

        fn grant_unsandboxed(&self, call: &ToolCall) -> bool {
            let grant = (call.tool_call_id.clone(), call.arguments.clone());
            self.grants.lock().unwrap().push(grant);
            true
        }
    }

    #[tokio::test]
    async fn u_grants_one_command_outside_the_sandbox() {
        let tools = Arc::new(Sandboxed::default());
        let console = Console::from_lines(vec!["u".into(), "u".into(), "u".into()]);
        let approver = TerminalApprover::new(console).offering_unsandboxed(tools.clone());
        let args = r#"{"cmd":"make install"}"#;
        let call = build::tool_call("exec_command", args, "c1", StopReason::Completed, None);
        assert!(bypass_prompt(&call, 0)
            .ends_with("[a]lways (commands starting `make install`) / [u]nsandboxed, this once: "));
        assert_eq!(approver.approve(&call).await, Ok(ApprovalDecision::Allow));
        assert_eq!(
            *tools.grants.lock().unwrap(),
            [("c1".to_owned(), args.to_owned())],
            "granted for this call, by the session's tools"
        );
        // `u` for a file tool is not offered, so it is no.
        let file = build::tool_call("write_file", "{}", "c2", StopReason::Completed, None);
        assert_eq!(approver.approve(&file).await, Ok(ApprovalDecision::Deny));
        assert_eq!(tools.grants.lock().unwrap().len(), 1);
        // Without a sandbox there is nothing to run outside of.
        let plain = TerminalApprover::new(Console::from_lines(vec!["u".into()]));
        assert_eq!(plain.approve(&call).await, Ok(ApprovalDecision::Deny));
    }

    #[test]
    fn a_command_is_shown_as_typed_with_where_it_runs_and_always_only_where_it_grants_more() {
        let view = |args: serde_json::Value| call_view("exec_command", &args.to_string(), None);
        assert_eq!(
            view(serde_json::json!({"cmd": "cargo test"})),
            "$ cargo test\n  (in the workspace root)"
        );
        assert_eq!(
            view(
                serde_json::json!({"cmd": "make\nmake install", "workdir": "app", "run_in_background": true})
            ),
            "$ make\n> make install\n  (in app, in the background)"
        );
        // An edit shows what it would change; anything else its arguments.
        assert_eq!(
            call_view("edit_file", "{}", Some("--- a/x\n+++ b/x")),
            "--- a/x\n+++ b/x"
        );
        assert_eq!(call_view("mcp__x", r#"{"q":1}"#, None), r#"mcp__x {"q":1}"#);

        let prompt = approval_prompt(&cmd("ls -la", "c1"), 0);
        assert_eq!(
            prompt,
            "Allow exec_command? [y]es / [n]o / [a]lways (commands starting `ls`): "
        );
        // A chain gets no "always" at all, rather than an "always" that means "this once".
        let prompt = approval_prompt(&cmd("ls && rm -rf x", "c1"), 0);
        assert!(!prompt.contains("[a]"), "{prompt}");
        assert!(
            prompt.contains("(asked each time: not one plain command)"),
            "{prompt}"
        );
        let prompt = approval_prompt(&cmd("ls", "c1"), 12);
        assert!(
            prompt.ends_with(" / [m]ore (12 lines not shown): "),
            "{prompt}"
        );
    }

    /// Tools that preview an edit as a long diff.
    struct Previewing;

    #[async_trait]
    impl Environment for Previewing {
        async fn execute(
            &self,
            _request: penguin::engine::ToolCallRequest,
            _sink: &mut dyn penguin::engine::MessageSink,
        ) {
        }
        fn tools(&self) -> Vec<penguin_omni_protocol::ToolDefinition> {
            Vec::new()
        }
        fn permission(&self, _name: &str) -> penguin::engine::Permission {
            penguin::engine::Permission::ReadWrite
        }
        async fn preview(&self, _call: &ToolCall) -> Option<String> {
            let lines: Vec<String> = (0..PAGE + 5).map(|i| format!("+line {i}")).collect();
            Some(format!(
                "--- /dev/null\n+++ b/x\n@@ -0,0 +1,{} @@\n{}",
                PAGE + 5,
                lines.join("\n")
            ))
        }
    }

    #[tokio::test]
    async fn a_long_preview_is_paged_and_more_shows_the_rest() {
        let call = build::tool_call(
            "write_file",
            r#"{"path":"x"}"#,
            "c1",
            StopReason::Completed,
            None,
        );
        let ask = |answers: &[&str]| {
            let console = Console::from_lines(answers.iter().map(|a| a.to_string()).collect());
            TerminalApprover::new(console).offering_unsandboxed(Arc::new(Previewing))
        };
        // The 38-line diff is two pages: `m` shows the second, then the question is answered.
        assert_eq!(
            ask(&["m", "y"]).approve(&call).await,
            Ok(ApprovalDecision::Allow)
        );
        // Once all is shown `m` is no longer offered: the second is not an answer, and the
        // input ends unanswered.
        assert_eq!(
            ask(&["m", "m"]).approve(&call).await,
            Ok(ApprovalDecision::Deny)
        );
    }
}
