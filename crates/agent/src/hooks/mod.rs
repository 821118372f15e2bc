//! Hooks: the user's own programs at a session's decision points (`docs/hooks.md`).
//!
//! A hook is a command in a `[[hooks.EVENT]]` table of `config.toml` (or of a workspace's
//! `.penguin/hooks.toml`, once the user trusts its content: [`trust`]). It gets the event as
//! one JSON object on stdin and answers by its exit status and optional JSON on stdout, as
//! Claude Code's hooks do ([`answer`]), so their scripts run unchanged. It runs the way
//! `exec_command` runs a command ([`runner`]): under the session's sandbox (unless the user's
//! own config says `sandbox = false`), with the environment allowlist, in a session of its
//! own, with a timeout and bounded output.
//!
//! Where each decision lands in the protocol:
//!
//! - `pre_tool_use` answers through the run's approver ([`HookApprover`]): a deny is the
//!   call's `approval_decision` with `decided_by: "hook:<command>"` and the reason, followed
//!   by the synthetic output carrying the reason to the model
//!   ([§2.5](penguin_omni_protocol::spec#s2.5) *One turn*); a rewrite is the allow's
//!   `updated_arguments`. A hook that fails denies the call (fails closed).
//! - added context (`additionalContext`) reaches the model only, as a harness text
//!   (`[hook_context]`, `sender: "harness"`): with the prompt's input for `session_start`
//!   and `user_prompt_submit` (written with it, never streamed), as a notice after the turn
//!   for `post_tool_use` ([§2.11](penguin_omni_protocol::spec#s2.11)).
//! - `stop` keeps a task going by a `[hook_stop]` notice that starts one more run on the
//!   same stream, at most `max_stop_continuations` times in a row; `subagent_stop` does the
//!   same in a subagent ([`Hooks::for_subagent`]).
//! - `pre_tool_use` sees a subagent's calls too: they are approved through the parent's
//!   approver. A hook's `ask` goes to a person ([`Approver::ask_person`](penguin_engine::Approver::ask_person)),
//!   never to the approval mode.
//! - `pre_compact` runs before a compaction the user asks for and before one the engine starts
//!   ([`Engine::before_compaction`](penguin_engine::Engine::before_compaction)); `session_end`
//!   once per load, when the host ends the session.
//! - every other failure fails open, and the user is told once per session per hook.

pub mod answer;
mod approver;
pub mod config;
mod drive;
mod env;
mod payload;
pub mod runner;
pub mod trust;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use penguin_engine::Notifier;
use penguin_omni_protocol::markers::marker_block;
use penguin_omni_protocol::{build, OmniMessage, TextSender};
use penguin_tools::Sandbox;
use serde_json::{json, Value};

pub use answer::{HookAnswer, Permission};
pub use approver::HookApprover;
pub use config::{
    Hook, HookConfigError, HookEntry, HookEvent, HookOrigin, HooksConfig, DEFAULT_TIMEOUT,
};
pub(crate) use drive::{drive, Start};
pub(crate) use env::HookSlot;
pub use env::HookedEnv;
pub use runner::{Finished, HookFailure};

use payload::Common;

/// Where a session's hooks say something to its user (a hook that failed, a stop hook held
/// back): the CLI prints it, a server logs it.
pub type HookNotices = Arc<dyn Fn(&str) + Send + Sync>;

/// How many times in a row `stop` hooks may keep one task going when the config says nothing.
pub const DEFAULT_MAX_STOP_CONTINUATIONS: u32 = 3;

/// A session's hooks: what runs at each event, and where. Cheap to clone.
#[derive(Clone)]
pub struct Hooks {
    inner: Arc<Inner>,
}

struct Inner {
    hooks: Vec<Hook>,
    workspace: PathBuf,
    sandbox: Sandbox,
    max_stop: u32,
    notices: Mutex<HookNotices>,
    common: Mutex<Common>,
    notifier: Mutex<Option<Notifier>>,
    /// Hooks whose failure the user was told of (by command and event).
    warned: Mutex<HashSet<(String, HookEvent)>>,
    /// A prompt's hooks or a stop hook run between the engine's runs.
    busy: AtomicBool,
    /// `session_start` ran in this load.
    started: AtomicBool,
    /// The session was resumed (`session_start`'s `source`).
    resumed: AtomicBool,
    /// A subagent's hooks: its `subagent_stop` hooks are what `stop` hooks are to a session
    /// ([`Hooks::for_subagent`]).
    subagent: bool,
    /// `session_end` ran: a host that ends a session twice (an unload racing a shutdown)
    /// runs it once.
    ended: AtomicBool,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("hooks", &self.inner.hooks)
            .field("workspace", &self.inner.workspace)
            .finish_non_exhaustive()
    }
}

/// One hook's run: the hook and what came of it.
#[derive(Clone, Debug)]
pub struct HookResult {
    /// The hook.
    pub hook: Hook,
    /// Its answer, or why it gave none.
    pub answer: Result<HookAnswer, HookFailure>,
}

impl Hooks {
    /// `hooks`, run in `workspace` under `sandbox` (the session's: the one its commands run
    /// under), at most `max_stop` continuations by `stop` hooks in a row; failures are
    /// logged until [`Hooks::with_notices`].
    pub fn new(hooks: Vec<Hook>, workspace: &Path, sandbox: Sandbox, max_stop: u32) -> Hooks {
        Hooks::build(hooks, workspace, sandbox, max_stop, false)
    }

    /// The hooks of a subagent of a session with these: its `subagent_stop` hooks, run when
    /// the subagent ends a run and able to keep it going as `stop` hooks keep a session going
    /// (bounded alike). `None` when there are none. The subagent's calls meet the session's
    /// `pre_tool_use` hooks where they are approved, through the session's approver.
    pub fn for_subagent(&self) -> Option<Hooks> {
        let own: Vec<Hook> = self
            .inner
            .hooks
            .iter()
            .filter(|h| h.event == HookEvent::SubagentStop)
            .cloned()
            .collect();
        if own.is_empty() {
            return None;
        }
        let inner = &self.inner;
        let hooks = Hooks::build(
            own,
            &inner.workspace,
            inner.sandbox.clone(),
            inner.max_stop,
            true,
        );
        Some(hooks.with_notices(lock(&inner.notices).clone()))
    }

    fn build(
        hooks: Vec<Hook>,
        workspace: &Path,
        sandbox: Sandbox,
        max_stop: u32,
        subagent: bool,
    ) -> Hooks {
        Hooks {
            inner: Arc::new(Inner {
                hooks,
                workspace: workspace.to_path_buf(),
                sandbox,
                max_stop,
                notices: Mutex::new(Arc::new(|n| tracing::warn!("[penguin] {n}"))),
                common: Mutex::new(Common {
                    cwd: workspace.display().to_string(),
                    ..Common::default()
                }),
                notifier: Mutex::new(None),
                warned: Mutex::default(),
                busy: AtomicBool::new(false),
                started: AtomicBool::new(false),
                resumed: AtomicBool::new(false),
                subagent,
                ended: AtomicBool::new(false),
            }),
        }
    }

    /// These hooks, telling the user through `notices`.
    pub fn with_notices(self, notices: HookNotices) -> Hooks {
        *lock(&self.inner.notices) = notices;
        self
    }

    /// Every hook, in event then config order.
    pub fn hooks(&self) -> &[Hook] {
        &self.inner.hooks
    }

    /// How many hooks are active.
    pub fn len(&self) -> usize {
        self.inner.hooks.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.inner.hooks.is_empty()
    }

    /// Whether any hook of `event` is configured.
    pub fn has(&self, event: HookEvent) -> bool {
        self.inner.hooks.iter().any(|h| h.event == event)
    }

    /// Ties these hooks to a session: its id and trace file (in every payload), and the engine
    /// that delivers their context as notices.
    pub(crate) fn bind(
        &self,
        session_id: &str,
        transcript: &Path,
        notifier: Notifier,
        resumed: bool,
    ) {
        self.inner.resumed.store(resumed, Ordering::Release);
        let mut common = lock(&self.inner.common);
        common.session_id = session_id.to_owned();
        common.transcript_path = transcript.display().to_string();
        *lock(&self.inner.notifier) = Some(notifier);
    }

    /// Whether hooks run around each run (`session_start`, `user_prompt_submit`, `stop`).
    pub(crate) fn drives_runs(&self) -> bool {
        [
            HookEvent::SessionStart,
            HookEvent::UserPromptSubmit,
            self.stop_event(),
        ]
        .into_iter()
        .any(|e| self.has(e))
    }

    /// The event that may keep a run going: `stop`, or a subagent's `subagent_stop`.
    pub(crate) fn stop_event(&self) -> HookEvent {
        match self.inner.subagent {
            true => HookEvent::SubagentStop,
            false => HookEvent::Stop,
        }
    }

    pub(crate) fn busy(&self) -> bool {
        self.inner.busy.load(Ordering::Acquire)
    }

    /// Runs every hook of `event` that `applies` to, one after the other in config order
    /// (all of them, as Claude Code runs them all), each with the common keys and `fields` in
    /// its payload; what each answered is for the caller to weigh.
    pub async fn run(
        &self,
        event: HookEvent,
        fields: Value,
        applies: impl Fn(&Hook) -> bool,
    ) -> Vec<HookResult> {
        let common = lock(&self.inner.common).clone();
        let input = payload::payload(event, &common, fields).to_string();
        let mut results = Vec::new();
        for hook in self.inner.hooks.iter().filter(|h| h.event == event) {
            if !applies(hook) {
                continue;
            }
            let answer = self.run_one(hook, input.as_bytes()).await;
            results.push(HookResult {
                hook: hook.clone(),
                answer,
            });
        }
        results
    }

    async fn run_one(&self, hook: &Hook, input: &[u8]) -> Result<HookAnswer, HookFailure> {
        let unconfined;
        let sandbox = match hook.sandboxed {
            true => &self.inner.sandbox,
            false => {
                unconfined = self.inner.sandbox.unconfined();
                &unconfined
            }
        };
        let done = runner::run(
            &hook.command,
            input,
            &self.inner.workspace,
            sandbox,
            hook.timeout,
        )
        .await?;
        answer::read(hook.event, &done)
    }

    /// Tells the user, once per session per hook and event, that `hook` failed and what
    /// penguin did about it.
    pub(crate) fn failed(&self, hook: &Hook, failure: &HookFailure) {
        let first = lock(&self.inner.warned).insert((hook.command.clone(), hook.event));
        if first {
            let consequence = match hook.event {
                HookEvent::PreToolUse => "the call was denied (a pre_tool_use hook fails closed)",
                _ => "ignored (it fails open)",
            };
            let notices = lock(&self.inner.notices).clone();
            notices(&format!(
                "hook `{}` ({}) failed: {failure}; {consequence}. Said once per session.",
                hook.command, hook.event
            ));
        }
    }

    /// Says `text` to the user.
    pub(crate) fn tell(&self, text: &str) {
        let notices = lock(&self.inner.notices).clone();
        notices(text)
    }

    /// Queues context for the model as a harness notice, delivered at the running task's next
    /// input assembly.
    pub(crate) fn notify(&self, notice: OmniMessage) -> bool {
        lock(&self.inner.notifier)
            .as_ref()
            .is_some_and(|n| n.notify(notice))
    }

    /// `session_end` hooks (`reason`: `exit`, or a server's `unload`, `delete`), at most once;
    /// failures are said and otherwise ignored.
    pub async fn session_end(&self, reason: &str) {
        if !self.has(HookEvent::SessionEnd) || self.inner.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let results = self
            .run(HookEvent::SessionEnd, json!({"reason": reason}), |_| true)
            .await;
        for r in &results {
            if let Err(e) = &r.answer {
                self.failed(&r.hook, e);
            }
        }
    }

    /// `pre_compact` hooks before a compaction (`trigger`: `manual` or `auto`). Context they
    /// add is for the model's next turn; a block is not honoured (a compaction runs when the
    /// user asks for it or the context is full).
    pub async fn pre_compact(&self, trigger: &str) {
        if !self.has(HookEvent::PreCompact) {
            return;
        }
        let results = self
            .run(
                HookEvent::PreCompact,
                json!({"trigger": trigger, "custom_instructions": ""}),
                |_| true,
            )
            .await;
        for r in results {
            match r.answer {
                Err(e) => self.failed(&r.hook, &e),
                Ok(a) => {
                    if let Some(context) = a.context {
                        self.notify(context_notice(&r.hook, &context));
                    }
                }
            }
        }
    }
}

/// The event's own payload keys for a sample run (`penguin hooks test`): a call of `tool` with
/// `arguments` (JSON text) for the tool events, `prompt` for `user_prompt_submit`.
pub fn sample_fields(event: HookEvent, tool: &str, arguments: &str, prompt: &str) -> Value {
    match event {
        HookEvent::PreToolUse => Value::Object(payload::tool_fields(tool, arguments, "call_test")),
        HookEvent::PostToolUse => {
            let mut fields = payload::tool_fields(tool, arguments, "call_test");
            fields.insert(
                "tool_response".into(),
                json!({"output": "", "success": true, "stop_reason": "completed"}),
            );
            Value::Object(fields)
        }
        HookEvent::UserPromptSubmit => json!({"prompt": prompt}),
        HookEvent::SessionStart => json!({"source": "startup"}),
        HookEvent::Stop => json!({"stop_hook_active": false}),
        HookEvent::SubagentStop => json!({"stop_hook_active": false, "subagent_output": ""}),
        HookEvent::PreCompact => json!({"trigger": "manual", "custom_instructions": ""}),
        HookEvent::SessionEnd => json!({"reason": "exit"}),
    }
}

/// The command of an `exec_command` call's arguments, which `command_prefix` is matched on.
pub fn command_of(tool: &str, arguments: &str) -> Option<String> {
    payload::command_of(tool, arguments)
}

/// Context a hook adds, as the model gets it: a harness text, never the user's words.
pub(crate) fn context_notice(hook: &Hook, context: &str) -> OmniMessage {
    build::user_text_from(
        marker_block(
            "hook_context",
            &format!(
                "Automatic context from the user's {} hook `{}`, not the user:\n{context}",
                hook.event, hook.command
            ),
        ),
        TextSender::Harness,
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
