//! The engine handle (protocol [§2.3](penguin_omni_protocol::spec#s2.3) *A run*): starting runs and
//! compactions, steering and notices, and the
//! stream a run is read through. The top of the engine's modules: the loop itself is in
//! `task.rs`, the state every layer shares in `shared.rs`.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use penguin_llm_providers::{CancellationToken, Llm, ThinkingLevel};
use penguin_merge_queue::{merge_queue_with_hook, Consumer, Producer};
use penguin_omni_protocol::{Frame, ModelPayload, OmniMessage};

use crate::compaction::{self, Compactability};
use crate::config::EngineConfig;
use crate::environment::{Approver, Environment, TraceSink};
use crate::shared::{BeforeCompaction, Counters, Item, LlmFactory, Shared, State, SteerId};
use crate::task::run_to_completion;

/// Options of one run.
///
/// There is no default: every run names its approver ([`RunOptions::new`]), so a host that
/// forgot one is a compile error rather than a run whose every tool call is denied. A run
/// that must not run tools says so with [`DenyAll`](crate::DenyAll).
///
/// ```
/// use std::sync::Arc;
/// use penguin_engine::{AllowAll, CancellationToken, RunOptions, ThinkingLevel};
///
/// let cancel = CancellationToken::new();
/// let options = RunOptions::new(Arc::new(AllowAll))
///     .with_cancel(cancel.clone())
///     .with_thinking_level(Some(ThinkingLevel::High));
/// assert_eq!(options.thinking_level, Some(ThinkingLevel::High));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct RunOptions {
    /// Decides each tool call.
    pub approver: Arc<dyn Approver>,
    /// The user's interrupt. Dropping the run's stream also interrupts the run.
    pub cancel: CancellationToken,
    /// Thinking effort for this run's requests.
    pub thinking_level: Option<ThinkingLevel>,
    /// Sees each message as the run emits it (before it is streamed), see
    /// [`RunOptions::with_observer`].
    pub observer: Option<Observer>,
}

/// A function that sees each message of a run as the engine emits it.
pub type Observer = Arc<dyn Fn(&OmniMessage) + Send + Sync>;

impl RunOptions {
    /// A run whose tool calls `approver` decides, with a fresh interrupt and the model's
    /// default thinking level.
    pub fn new(approver: Arc<dyn Approver>) -> RunOptions {
        RunOptions {
            approver,
            cancel: CancellationToken::new(),
            thinking_level: None,
            observer: None,
        }
    }

    /// These options, interrupted by `cancel`.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> RunOptions {
        self.cancel = cancel;
        self
    }

    /// These options, with `level` for the run's requests (`None`: the model's default).
    pub fn with_thinking_level(mut self, level: Option<ThinkingLevel>) -> RunOptions {
        self.thinking_level = level;
        self
    }

    /// These options, with `observer` called on each message as the engine emits it, in
    /// stream order and before the run goes on. A stream's consumer lags the engine: a
    /// budget checked there can see a request's `token_usage` only after the engine has
    /// started the next request. One checked here that cancels the run's token
    /// ([`RunOptions::with_cancel`]) stops the run before anything after the message that
    /// reached it. It runs while the run's queue is locked: keep it short and never block.
    pub fn with_observer(mut self, observer: Observer) -> RunOptions {
        self.observer = Some(observer);
        self
    }
}

impl fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("cancelled", &self.cancel.is_cancelled())
            .field("thinking_level", &self.thinking_level)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// A run was requested while another is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a run is already in progress on this engine")]
pub struct EngineBusy;

/// Queues notices on an engine while it exists (see [`Engine::notifier`]).
#[derive(Clone)]
pub struct Notifier(std::sync::Weak<Shared>);

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Notifier")
    }
}

impl Notifier {
    /// [`Engine::notify`]; false once the engine is gone.
    pub fn notify(&self, notice: OmniMessage) -> bool {
        match self.0.upgrade() {
            Some(shared) => {
                shared.state().notices.push(notice);
                true
            }
            None => false,
        }
    }
}

/// What [`Engine::steer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steered {
    /// No run is in flight; nothing was queued.
    NotRunning,
    /// Accepted, but the input had neither an image nor non-blank text, so nothing was queued.
    Empty,
    /// Queued; delivered as a `[user_steering]` text after the current turn.
    Queued(SteerId),
}

/// State carried in from a resumed trace.
///
/// `penguin-trace-store` (feature `engine`) builds one from its `Resumed`
/// (`InitialState::from(resumed)`), which names some fields differently: its `context_closed`
/// is both [`InitialState::pending_trace_rotation`] and [`InitialState::from_compaction`], its
/// `session_turns`, `last_request_total` and `session_tokens` are the [`Counters`]. The
/// committed `history` is not here: the model keeps the conversation, so it goes to
/// [`Llm::set_history`].
#[derive(Clone, Debug, Default)]
pub struct InitialState {
    /// Messages the next run sends before its prompt.
    pub carry_over: Vec<OmniMessage>,
    /// Counters at the end of the trace.
    pub counters: Counters,
    /// A `[context_summary]` user text from a compacted context: written first and sent first
    /// by the next run.
    pub pending_summary: Option<OmniMessage>,
    /// Trace-only records owed after the next run's input (the session's `tool_list_ready`,
    /// MCP connect events): written once, in order, right after that input, never streamed
    /// and never sent to the model. A trace does not say what is owed, so a resume mapping
    /// leaves it empty; a session layer that records its tool list each time it is loaded
    /// sets `vec![build::tool_list_ready(env.tools())]`.
    pub bootstrap_records: Vec<OmniMessage>,
    /// The trace's last file holds a finished (compacted) context: the first write starts the
    /// next file (through [`TraceSink::rotate`]), so merely loading a session never writes.
    pub pending_trace_rotation: bool,
    /// The context was just compacted (nothing has run in it yet): the size and turn triggers
    /// of compaction wait for a turn of the new context.
    pub from_compaction: bool,
}

/// One conversation's context engine. Cheap to clone; clones share the conversation.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.shared.config)
            .field("counters", &self.counters())
            .finish()
    }
}

impl Engine {
    /// An engine over `llm` and `env`, with no Trace.
    ///
    /// **`env.tools()` is not handed to the model.** The engine dispatches and approves calls
    /// with `env`, but the model offers the tools it was built with: build it with them
    /// (`ModelConfig::tools = env.tools()` for the HTTP models of `penguin-llm-providers`),
    /// or it will never call one. A scripted model needs none: its calls are in its script.
    pub fn new(llm: Box<dyn Llm>, env: Arc<dyn Environment>, config: EngineConfig) -> Engine {
        Engine::with_parts(llm, env, config, None, InitialState::default())
    }

    /// An engine with a Trace and (for resume) an initial state.
    ///
    /// The Trace gets every recordable message of every run, in stream order, starting with
    /// each run's prompt; it never gets the `session_meta` a trace file starts with, which
    /// the caller writes before the first run (a trace without one cannot be resumed). For a
    /// resumed session, `initial` comes from the trace (`InitialState::from(resumed)` with
    /// `penguin-trace-store`'s `engine` feature) and `llm` was given the history
    /// ([`Llm::set_history`]). As with [`Engine::new`], the model must already know
    /// `env.tools()`.
    pub fn with_parts(
        llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
        config: EngineConfig,
        trace: Option<Arc<dyn TraceSink>>,
        initial: InitialState,
    ) -> Engine {
        let state = State {
            pending_carry_over: initial.carry_over,
            pending_bootstrap: initial.bootstrap_records,
            pending_summary: initial.pending_summary,
            from_compaction: initial.from_compaction,
            counters: initial.counters,
            ..State::default()
        };
        Engine {
            shared: Arc::new(Shared::new(
                config,
                llm,
                env,
                trace,
                state,
                initial.pending_trace_rotation,
            )),
        }
    }

    /// Starts a run with `new_messages` (the prompt; never echoed on the stream, written to
    /// the Trace). Must be called inside a tokio runtime.
    pub fn run(
        &self,
        new_messages: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<RunStream, EngineBusy> {
        let RunOptions {
            approver,
            cancel,
            thinking_level,
            observer,
        } = options;
        self.start_task(
            cancel,
            true,
            observer,
            move |shared, cancel, producer| async move {
                run_to_completion(
                    &shared,
                    new_messages,
                    Some(approver),
                    cancel,
                    thinking_level,
                    &producer,
                )
                .await;
            },
        )
    }

    /// Compacts the context now (`compact()` of the reference), as a task with its own
    /// stream. Does nothing (an empty stream) unless [`Engine::compactability`] is `Ok`.
    pub fn compact(&self, cancel: CancellationToken) -> Result<RunStream, EngineBusy> {
        self.start_task(cancel, false, None, |shared, cancel, producer| async move {
            compaction::compact_manually(&shared, &producer, &cancel).await;
        })
    }

    /// Whether a manual compaction would do anything, and if not, why.
    pub fn compactability(&self) -> Compactability {
        compaction::compactability(&self.shared)
    }

    /// Enables compaction: `create_llm` builds the fresh model of a new context, seeded with
    /// the session's cumulative token counts. Compaction also needs `EngineConfig::compaction`.
    pub fn enable_compaction(&self, create_llm: LlmFactory) {
        self.shared.state().create_llm = Some(create_llm);
    }

    /// Runs `before` ahead of every compaction the engine starts on its own (not of
    /// [`Engine::compact`], whose caller runs what it wants first); an interrupt stops waiting
    /// for it. Replaces an earlier one.
    pub fn before_compaction(&self, before: BeforeCompaction) {
        self.shared.state().before_compaction = Some(before);
    }

    /// The records rewritten at the head of every file after a rotation: the session's
    /// `session_meta` and `tool_list_ready` (original objects, original timestamps).
    pub fn set_context_head(&self, session_meta: OmniMessage, tool_list: Option<OmniMessage>) {
        self.shared.head().set_records(session_meta, tool_list);
    }

    fn start_task<F, Fut>(
        &self,
        cancel: CancellationToken,
        steerable: bool,
        observer: Option<Observer>,
        body: F,
    ) -> Result<RunStream, EngineBusy>
    where
        F: FnOnce(Arc<Shared>, CancellationToken, Producer<Item>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        {
            let mut st = self.shared.state();
            if st.task_running {
                return Err(EngineBusy);
            }
            st.task_running = true;
            st.run_in_flight = steerable;
        }
        let hook_shared = self.shared.clone();
        let (producer, consumer) = merge_queue_with_hook(move |(frame, record): &Item| {
            if *record {
                hook_shared.write(frame);
            }
            if let Some(observe) = &observer {
                observe(frame.message());
            }
        });
        // A child token: dropping the stream interrupts this run without touching the
        // caller's token.
        let cancel = cancel.child_token();
        let task_cancel = cancel.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let guard = RunGuard(shared.clone());
            let task_producer = producer.clone();
            body(shared, task_cancel, task_producer).await;
            // The engine is idle before the stream ends, so a caller may start the next run
            // as soon as the stream has ended.
            drop(guard);
            drop(producer);
        });
        Ok(RunStream { consumer, cancel })
    }

    /// Queues steering input for delivery after the current turn.
    pub fn steer(&self, input: Vec<OmniMessage>) -> Steered {
        let mut st = self.shared.state();
        if !st.run_in_flight {
            return Steered::NotRunning;
        }
        // The reference's `carriesSteering`: only an image_url or a non-blank text (of any
        // role) makes steering worth delivering.
        let meaningful = input.iter().any(|m| match m.model() {
            Some(ModelPayload::ImageUrl(_)) => true,
            Some(ModelPayload::Text(t)) => !t.text.trim().is_empty(),
            _ => false,
        });
        if !meaningful {
            return Steered::Empty;
        }
        Steered::Queued(st.queue_steering(input))
    }

    /// Queues a harness notice (a `[background_task_done]` user text): a running task delivers
    /// it at its next input assembly, before steering, and takes one more turn for it; an idle
    /// engine delivers it with the next run's input, unless the host takes it first
    /// ([`take_notices`](Self::take_notices)) to start a task of its own.
    pub fn notify(&self, notice: OmniMessage) {
        self.shared.state().notices.push(notice);
    }

    /// A handle that queues notices without keeping the engine alive: what a background
    /// listener held by the engine's own environment must use.
    pub fn notifier(&self) -> Notifier {
        Notifier(Arc::downgrade(&self.shared))
    }

    /// The queued notices, taken out of the engine (an idle host starting a task with them).
    pub fn take_notices(&self) -> Vec<OmniMessage> {
        std::mem::take(&mut self.shared.state().notices)
    }

    /// How many notices wait for delivery.
    pub fn pending_notices(&self) -> usize {
        self.shared.state().notices.len()
    }

    /// Removes a queued steering input; false when it was already delivered or dropped.
    pub fn unsteer(&self, id: SteerId) -> bool {
        let mut st = self.shared.state();
        let before = st.steering.len();
        st.steering.retain(|(i, _)| *i != id);
        st.steering.len() != before
    }

    /// Cuts a reconnect backoff short without using up an attempt. False when no wait is in
    /// progress.
    pub fn skip_reconnect_wait(&self) -> bool {
        match self.shared.state().backoff_wake.take() {
            Some(wake) => wake.send(()).is_ok(),
            None => false,
        }
    }

    /// Turn and token counters.
    pub fn counters(&self) -> Counters {
        self.shared.state().counters
    }

    /// True while a run is in flight.
    pub fn is_running(&self) -> bool {
        self.shared.state().task_running
    }

    /// The carry-over the next run will send before its prompt.
    pub fn pending_carry_over(&self) -> Vec<OmniMessage> {
        self.shared.state().pending_carry_over.clone()
    }
}

/// Marks the engine idle and drops undelivered steering when a run ends, even by panic.
struct RunGuard(Arc<Shared>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.task_running = false;
        st.run_in_flight = false;
        st.steering.clear();
        st.backoff_wake = None;
    }
}

/// The stream of one run: every message in merge order, ending when the run and all its
/// tools are done. Dropping it interrupts the run.
pub struct RunStream {
    consumer: Consumer<Item>,
    cancel: CancellationToken,
}

impl fmt::Debug for RunStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field("consumer", &self.consumer)
            .finish()
    }
}

impl Stream for RunStream {
    type Item = Frame;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        Pin::new(&mut self.consumer)
            .poll_next(cx)
            .map(|item| item.map(|(frame, _)| frame))
    }
}

impl Drop for RunStream {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
