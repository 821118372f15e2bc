//! The connect phase of a session's first run (see the parent module's docs): the trace sink
//! that writes the connect pair and the real tool list in the owed `tool_list_ready`'s place,
//! the model swapped for one built for the connected tools, and the phase itself.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use penguin_engine::{
    Engine, EngineBusy, Environment, Llm, LlmOutcome, LlmRequest, MessageSink, RunOptions,
    TraceSink,
};
use penguin_omni_protocol::{build, EventPayload, Frame, OmniMessage, TokenCounts, ToolDefinition};
use penguin_trace_store::Writer;

use super::lock;
use crate::models::ModelRebuild;

/// The session's trace sink: the writer, plus what the connect phase changes about the
/// engine's first records (see the module docs).
#[derive(Debug)]
pub(super) struct SessionSink {
    pub(super) writer: Writer,
    pub(super) owed: Mutex<Owed>,
}

#[derive(Debug, Default)]
pub(super) struct Owed {
    /// The serialized `tool_list_ready` the engine owes, and what to write in its place.
    pub(super) placeholder: Option<(String, Vec<OmniMessage>)>,
    /// Serialized inputs already written by a run aborted during its connect: skipped once.
    pub(super) skip: Vec<String>,
}

impl TraceSink for SessionSink {
    fn record(&self, frame: &Frame) {
        let mut owed = lock(&self.owed);
        if let Some(at) = owed.skip.iter().position(|s| s == frame.json()) {
            owed.skip.remove(at);
            return;
        }
        if owed
            .placeholder
            .as_ref()
            .is_some_and(|(json, _)| json == frame.json())
        {
            let (_, records) = owed.placeholder.take().unwrap_or_default();
            for m in records {
                self.writer.record_message(m);
            }
            return;
        }
        self.writer.record(frame);
    }

    fn rotate(&self) {
        self.writer.rotate();
    }
}

/// The model the engine holds when the tools are only known after connecting: the current
/// one, replaced by a rebuilt one before the first request that follows the connect.
#[derive(Debug)]
pub(super) struct SwapLlm {
    pub(super) current: Box<dyn Llm>,
    pub(super) next: Arc<Mutex<Option<Box<dyn Llm>>>>,
}

#[async_trait]
impl Llm for SwapLlm {
    async fn stream_generate(
        &mut self,
        request: LlmRequest,
        sink: &mut dyn MessageSink,
    ) -> LlmOutcome {
        if let Some(next) = lock(&self.next).take() {
            self.current = next;
        }
        self.current.stream_generate(request, sink).await
    }

    fn session_tokens(&self) -> TokenCounts {
        self.current.session_tokens()
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        self.current.set_history(history);
    }
}

/// What the first run of this load still has to do, shared with the run's stream.
#[derive(Default)]
pub(super) struct Boot {
    /// `tool_list_ready` was yielded (after the connect, when there is one).
    pub(super) announced: bool,
    /// A connect phase is in flight.
    pub(super) connecting: bool,
    /// Input of runs aborted during their connect, sent with the next run.
    pub(super) carry_input: Vec<OmniMessage>,
    /// Those of them already written, serialized.
    pub(super) persisted: Vec<String>,
    /// Rebuilds the model for the connected tools.
    pub(super) rebuild: Option<ModelRebuild>,
    /// The model of compacted contexts, rebuilt with the connected tools.
    pub(super) compaction: Option<crate::models::ModelSpec>,
}

/// Clears `connecting` however the connect phase ends, dropped streams included.
pub(super) struct Connecting(pub(super) Arc<Mutex<Boot>>);

impl Drop for Connecting {
    fn drop(&mut self) {
        lock(&self.0).connecting = false;
    }
}

pub(super) fn tools_of(tool_list: &OmniMessage) -> Vec<ToolDefinition> {
    match tool_list.event() {
        Some(EventPayload::ToolListReady { tools }) => tools.clone(),
        _ => Vec::new(),
    }
}

/// The connect phase of a first run, from after `mcp_connect_begin` was yielded.
pub(super) struct ConnectPhase {
    pub(super) guard: Connecting,
    pub(super) engine: Engine,
    pub(super) env: Arc<dyn Environment>,
    pub(super) writer: Writer,
    pub(super) sink: Arc<SessionSink>,
    pub(super) next_llm: Arc<Mutex<Option<Box<dyn Llm>>>>,
    pub(super) tool_list: Arc<Mutex<OmniMessage>>,
    pub(super) meta: OmniMessage,
    pub(super) input: Vec<OmniMessage>,
    pub(super) options: RunOptions,
}

impl ConnectPhase {
    pub(super) async fn finish(self, begin: OmniMessage) -> BoxStream<'static, Frame> {
        let Some(results) = self.env.connect(&self.options.cancel).await else {
            return self.aborted(begin);
        };
        let end = build::mcp_connect_end(results, false);
        let tools = self.env.tools();
        let tool_list = build::tool_list_ready(tools.clone());
        let owed = std::mem::replace(&mut *lock(&self.tool_list), tool_list.clone());
        let boot = self.guard.0.clone();
        {
            let mut boot = lock(&boot);
            if tools != tools_of(&owed) {
                if let Some(rebuild) = &boot.rebuild {
                    *lock(&self.next_llm) = Some(rebuild(tools.clone()));
                }
                if let Some(spec) = &boot.compaction {
                    let meta = self.meta.session_meta();
                    let cx = crate::models::ModelContext {
                        system_prompt: meta.map(|m| m.system_prompt.clone()).unwrap_or_default(),
                        tools: tools.clone(),
                        workspace: meta.map(|m| m.workspace.clone().into()),
                        cache_key: meta.map(|m| m.session_id.clone()),
                        ..Default::default()
                    };
                    self.engine
                        .enable_compaction(crate::models::llm_factory(spec, cx));
                }
            }
            let mut sink = lock(&self.sink.owed);
            sink.placeholder = Some((
                Frame::new(owed).json().to_owned(),
                vec![begin, end.clone(), tool_list.clone()],
            ));
            sink.skip = std::mem::take(&mut boot.persisted);
            boot.announced = true;
        }
        self.engine
            .set_context_head(self.meta.clone(), Some(tool_list.clone()));
        drop(self.guard);
        let head = stream::iter([Frame::new(end), Frame::new(tool_list)]);
        match self.engine.run(self.input, self.options) {
            Ok(run) => head.chain(run).boxed(),
            // Only a compaction started from a clone of the engine can get here.
            Err(EngineBusy) => head
                .chain(stream::iter([Frame::new(build::abort(Some(
                    "the session is busy".into(),
                )))]))
                .boxed(),
        }
    }

    /// The run was interrupted while connecting: the Trace gets what the engine would have
    /// written (the input, once) and the pair and the abort; the input waits for the next run.
    fn aborted(self, begin: OmniMessage) -> BoxStream<'static, Frame> {
        let end = build::mcp_connect_end(Vec::new(), true);
        let abort = build::abort(Some("user".into()));
        let mut boot = lock(&self.guard.0);
        for m in &self.input {
            let frame = Frame::new(m.clone());
            if !boot.persisted.iter().any(|p| p == frame.json()) {
                self.writer.record(&frame);
                boot.persisted.push(frame.json().to_owned());
            }
        }
        for m in [&begin, &end, &abort] {
            self.writer.record_message(m.clone());
        }
        boot.carry_input = self.input;
        stream::iter([Frame::new(end), Frame::new(abort)]).boxed()
    }
}
