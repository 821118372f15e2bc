//! What every layer of a run shares: the engine's state (one per [`Engine`](crate::Engine)), the
//! run's queue item and the ways into it, and the delivery of queued notices and steering (protocol
//! [§2.11](penguin_omni_protocol::spec#s2.11) *Steering and notices*) at an input assembly.
//!
//! The bottom of the engine's modules: it imports none of them but `config` and
//! `environment`, so the run loop (`task.rs`), compaction, the turn and the same-instant
//! orderer can all use it without importing each other.

use std::sync::{Arc, Mutex, MutexGuard};

use penguin_llm_providers::Llm;
use penguin_merge_queue::Producer;
use penguin_omni_protocol::markers::marker_block;
use penguin_omni_protocol::{build, Frame, ModelPayload, OmniMessage, Role, TokenCounts};
use tokio::sync::oneshot;

use crate::config::EngineConfig;
use crate::environment::{Environment, TraceSink};

/// Identifies a queued steering input, for [`Engine::unsteer`](crate::Engine::unsteer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SteerId(u64);

/// Turn and token counters of the current context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Completed requests in the current context (across runs).
    pub session_turns: u64,
    /// `request.total` of the last token_usage.
    pub last_request_total: u64,
    /// `session` of the last token_usage.
    pub session_tokens: TokenCounts,
}

/// Builds the model of a new context from the session's cumulative token counts.
pub type LlmFactory = Arc<dyn Fn(TokenCounts) -> Box<dyn Llm> + Send + Sync>;

/// Runs before the engine compacts a context on its own (a size or turn limit reached), with
/// the limit that triggered it; the compaction waits for it. A host's place for what the user
/// runs before any compaction (its hooks), which the engine knows nothing of.
pub type BeforeCompaction = Arc<
    dyn Fn(penguin_omni_protocol::CompactionReason) -> futures::future::BoxFuture<'static, ()>
        + Send
        + Sync,
>;

#[derive(Default)]
pub(crate) struct State {
    pub(crate) pending_carry_over: Vec<OmniMessage>,
    pub(crate) pending_bootstrap: Vec<OmniMessage>,
    pub(crate) pending_summary: Option<OmniMessage>,
    pub(crate) counters: Counters,
    pub(crate) steering: Vec<(SteerId, Vec<OmniMessage>)>,
    pub(crate) next_steer_id: u64,
    /// Harness notices (settled background work) waiting for the next input assembly.
    pub(crate) notices: Vec<OmniMessage>,
    pub(crate) task_running: bool,
    /// A run (not a compaction) is in flight: only a run takes steering.
    pub(crate) run_in_flight: bool,
    pub(crate) backoff_wake: Option<oneshot::Sender<()>>,
    pub(crate) from_compaction: bool,
    pub(crate) create_llm: Option<LlmFactory>,
    pub(crate) before_compaction: Option<BeforeCompaction>,
}

impl State {
    /// Queues a steering input under the next id.
    pub(crate) fn queue_steering(&mut self, input: Vec<OmniMessage>) -> SteerId {
        let id = SteerId(self.next_steer_id);
        self.next_steer_id += 1;
        self.steering.push((id, input));
        id
    }
}

pub(crate) struct Shared {
    pub(crate) config: EngineConfig,
    pub(crate) llm: tokio::sync::Mutex<Box<dyn Llm>>,
    pub(crate) env: Arc<dyn Environment>,
    trace: Option<Arc<dyn TraceSink>>,
    state: Mutex<State>,
    head: Mutex<Head>,
}

/// What a rotated trace file starts with, and whether the next write rotates.
#[derive(Default)]
pub(crate) struct Head {
    pub(crate) pending_rotation: bool,
    session_meta: Option<OmniMessage>,
    tool_list: Option<OmniMessage>,
}

impl Head {
    /// Sets the records rewritten at the head of every file after a rotation.
    pub(crate) fn set_records(
        &mut self,
        session_meta: OmniMessage,
        tool_list: Option<OmniMessage>,
    ) {
        self.session_meta = Some(session_meta);
        self.tool_list = tool_list;
    }
}

impl Shared {
    pub(crate) fn new(
        config: EngineConfig,
        llm: Box<dyn Llm>,
        env: Arc<dyn Environment>,
        trace: Option<Arc<dyn TraceSink>>,
        state: State,
        pending_rotation: bool,
    ) -> Shared {
        Shared {
            config,
            llm: tokio::sync::Mutex::new(llm),
            env,
            trace,
            state: Mutex::new(state),
            head: Mutex::new(Head {
                pending_rotation,
                ..Head::default()
            }),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn observe_token_usage(&self, session: TokenCounts, request: TokenCounts) {
        let mut st = self.state();
        st.counters.last_request_total = request.total;
        st.counters.session_tokens = session;
        st.counters.session_turns += 1;
    }

    pub(crate) fn head(&self) -> MutexGuard<'_, Head> {
        self.head.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a recordable frame. After a compaction the first write rotates the file and
    /// rewrites the session's head records first, so a compaction with nothing after it
    /// leaves no empty file.
    pub(crate) fn write(&self, frame: &Frame) {
        let Some(trace) = &self.trace else { return };
        if !frame.message().is_recordable() {
            return;
        }
        let mut head = self.head();
        if head.pending_rotation {
            head.pending_rotation = false;
            trace.rotate();
            for m in head.session_meta.iter().chain(&head.tool_list) {
                trace.record(&Frame::new(m.clone()));
            }
        }
        trace.record(frame);
    }

    /// Writes a message to the Trace without streaming it (the prompt, the subagent pointer,
    /// a compaction's request).
    pub(crate) fn record_only(&self, msg: OmniMessage) {
        self.write(&Frame::new(msg));
    }
}

/// What the run's merge queue carries: a frame, and whether the Trace records it (a
/// compaction's `token_usage` is streamed after the fact, having been recorded in place).
pub(crate) type Item = (Frame, bool);

/// Streams and records `msg` (the Trace skips what is not recordable).
pub(crate) fn emit(producer: &Producer<Item>, msg: OmniMessage) {
    producer.push((Frame::new(msg), true));
}

/// Streams `msg` without recording it.
pub(crate) fn emit_stream_only(producer: &Producer<Item>, msg: OmniMessage) {
    producer.push((Frame::new(msg), false));
}

/// Ends a run early: its `abort`, the last message of the run.
pub(crate) fn abort(producer: &Producer<Item>, reason: impl Into<String>) {
    emit(producer, build::abort(Some(reason.into())));
}

/// Drains the harness notices ([§2.11](penguin_omni_protocol::spec#s2.11) *Steering and notices*):
/// each is streamed and written, and returned for the next input.
pub(crate) fn deliver_notices(shared: &Shared, producer: &Producer<Item>) -> Vec<OmniMessage> {
    let notices = std::mem::take(&mut shared.state().notices);
    for msg in &notices {
        emit(producer, msg.clone());
    }
    notices
}

/// Drains the steering queue, each queued input becoming one `[user_steering]` user text
/// (its user texts joined) followed by the rest of that input unchanged, and returns them for
/// the next input. Every message is streamed and written.
///
/// The steering text is there even when the input had no user text (an image alone): it is
/// what marks the images after it as steering rather than the start of a new task.
pub(crate) fn deliver_steering(shared: &Shared, producer: &Producer<Item>) -> Vec<OmniMessage> {
    let queued = std::mem::take(&mut shared.state().steering);
    let mut delivered = Vec::new();
    for (_, input) in queued {
        let mut texts = Vec::new();
        let mut rest = Vec::new();
        for msg in input {
            match msg.model() {
                Some(ModelPayload::Text(t)) if t.role == Role::User => texts.push(t.text.clone()),
                _ => rest.push(msg),
            }
        }
        delivered.push(build::user_text(marker_block(
            "user_steering",
            &texts.join("\n\n"),
        )));
        delivered.extend(rest);
    }
    for msg in &delivered {
        emit(producer, msg.clone());
    }
    delivered
}
