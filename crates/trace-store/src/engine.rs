//! The engine's side of a trace (feature `engine`): the [`Writer`] is the engine's
//! [`TraceSink`], and a [`Resumed`] trace becomes the engine's [`InitialState`].
//!
//! The impls live here, in the store, rather than in the engine: the engine defines the traits
//! its collaborators implement (`Environment` in `penguin-tools`, `TraceSink` here) and knows
//! no file format, and without this feature the store needs no async runtime at all.
//!
//! # A session by hand, and its resume
//!
//! What a session layer does, in order: write `session_meta` first (the engine never writes
//! it, and [`resume_session`](crate::resume_session) refuses a trace without one with
//! [`TraceError::MissingMeta`](crate::TraceError::MissingMeta)), hand the writer to the
//! engine, and on resume give the history to the model and the rest to the engine.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use futures::StreamExt;
//! use penguin_engine::llm::scripted::{ScriptedModel, ScriptedRequest, Step};
//! use penguin_engine::{
//!     build, AllowAll, Engine, EngineConfig, InitialState, Llm, LlmOutcome, RunOptions,
//!     StopReason,
//! };
//! use penguin_engine::protocol::{ContextWindow, SessionMeta};
//! use penguin_trace_store::{new_session_id, resume_session, Durability, TraceLocation, Writer};
//! # use penguin_engine::scripted::ScriptedEnvironment;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let root = std::env::temp_dir().join(format!("penguin-doc-engine-{}", std::process::id()));
//! let location = TraceLocation::new(&root, "project", "agent");
//! let id = new_session_id();
//! let say = |text: &str| ScriptedRequest {
//!     stream: vec![Step {
//!         delay: Duration::from_millis(1),
//!         message: build::assistant_text(text, StopReason::Completed),
//!     }],
//!     outcome: LlmOutcome::completed(),
//!     end_delay: Duration::ZERO,
//! };
//! let env = Arc::new(ScriptedEnvironment::new(Default::default()));
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let _inside = runtime.enter(); // Engine::run spawns on the current runtime
//!
//! // A new session: session_meta first, then the engine writes each run.
//! let writer = Writer::create(&location, &id, Durability::Never)?;
//! writer.record_session_meta(SessionMeta {
//!     session_id: id.clone(),
//!     provider: "scripted".into(),
//!     model_id: "scripted".into(),
//!     model_context_window: ContextWindow::Other("unknown".into()),
//!     system_prompt: String::new(),
//!     agent_state: String::new(),
//!     workspace: root.display().to_string(),
//!     source: None,
//!     forked_from: None,
//! });
//! let model = ScriptedModel::new(vec![say("hello")]);
//! let engine = Engine::with_parts(
//!     Box::new(model),
//!     env.clone(),
//!     EngineConfig::default(),
//!     Some(Arc::new(writer.clone())), // the Writer is a TraceSink
//!     InitialState::default(),
//! );
//! let options = RunOptions::new(Arc::new(AllowAll));
//! runtime.block_on(engine.run(vec![build::user_text("hi")], options.clone())?.count());
//! writer.flush()?;
//! drop((engine, writer));
//!
//! // Resume: the history goes to the model, the rest to the engine.
//! let session = resume_session(&location, &id, Durability::Never)?;
//! let mut resumed = session.resumed;
//! assert_eq!(resumed.history.len(), 2); // the prompt and the answer
//! let mut model = ScriptedModel::new(vec![say("hello again")]);
//! model.set_history(&std::mem::take(&mut resumed.history));
//! let initial = InitialState::from(resumed);
//! assert_eq!(initial.counters.session_turns, 1);
//! let engine = Engine::with_parts(
//!     Box::new(model),
//!     env,
//!     EngineConfig::default(),
//!     Some(Arc::new(session.writer)),
//!     initial,
//! );
//! runtime.block_on(engine.run(vec![build::user_text("again")], options)?.count());
//! # drop(engine);
//! # std::fs::remove_dir_all(&root)?;
//! # Ok(())
//! # }
//! ```

use penguin_engine::{Counters, InitialState, TraceSink};
use penguin_omni_protocol::Frame;

use crate::resume::Resumed;
use crate::writer::Writer;

/// The engine's Trace: [`Writer::record`] (recordable messages only, never blocking) and
/// [`Writer::rotate`].
impl TraceSink for Writer {
    fn record(&self, frame: &Frame) {
        Writer::record(self, frame);
    }

    fn rotate(&self) {
        Writer::rotate(self);
    }
}

/// The engine state a trace rebuilds. Field by field:
///
/// - `carry_over` and `pending_summary` keep their names: what the next run sends before its
///   prompt, and the `[context_summary]` a summarize compaction left to send first;
/// - [`Counters`] gathers `session_turns`, `last_request_total` and `session_tokens`;
/// - `context_closed` (the file ends with a completed compaction) is two things for the
///   engine: `pending_trace_rotation` (the first write starts the next file, so loading a
///   session never writes) and `from_compaction` (a fresh context: the compaction triggers
///   wait for a turn of it);
/// - `bootstrap_records` stays empty: they are records the *session* owes after the next
///   input (its `tool_list_ready`, MCP connect events), which no trace says; a session layer
///   that records its tool list on each load sets them itself;
/// - `history` is dropped: the model holds the conversation, so take it first and give it to
///   [`Llm::set_history`](penguin_engine::Llm::set_history) (see the module example).
///   `meta`, `render_messages` and `dangling_compaction` are the caller's (a dangling
///   compaction is closed by [`resume_session`](crate::resume_session) already).
impl<M> From<Resumed<M>> for InitialState {
    fn from(resumed: Resumed<M>) -> InitialState {
        InitialState {
            carry_over: resumed.carry_over,
            counters: Counters {
                session_turns: resumed.session_turns,
                last_request_total: resumed.last_request_total,
                session_tokens: resumed.session_tokens,
            },
            pending_summary: resumed.pending_summary,
            bootstrap_records: Vec::new(),
            pending_trace_rotation: resumed.context_closed,
            from_compaction: resumed.context_closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use penguin_omni_protocol::{build, StopReason, TokenCounts};

    use super::*;
    use crate::resume::resume_trace;

    fn turn(text: &str, usage: TokenCounts) -> Vec<penguin_omni_protocol::OmniMessage> {
        vec![
            build::user_text(text),
            build::request_begin(),
            build::assistant_text(text, StopReason::Completed),
            build::token_usage(usage, usage),
            build::request_end(StopReason::Completed, Default::default()),
        ]
    }

    #[test]
    fn counters_carry_over_and_open_context() {
        let usage = TokenCounts::new(0, 10, 2);
        let mut records = turn("a", usage);
        records.extend(turn("b", usage));
        // A prompt that never reached the model: carried over.
        records.push(build::user_text("pending"));
        let resumed = resume_trace(&records);
        let history = resumed.history.len();
        let initial = InitialState::from(resumed.clone());
        assert_eq!(history, 4);
        assert_eq!(
            initial.counters,
            Counters {
                session_turns: 2,
                last_request_total: usage.total,
                session_tokens: usage,
            }
        );
        assert_eq!(initial.carry_over, resumed.carry_over);
        assert_eq!(initial.carry_over.len(), 1);
        assert!(initial.pending_summary.is_none());
        assert!(initial.bootstrap_records.is_empty());
        assert!(!initial.pending_trace_rotation);
        assert!(!initial.from_compaction);
    }

    #[test]
    fn closed_context_rotates_and_counts_as_fresh() {
        use penguin_omni_protocol::{CompactionMode, CompactionReason};
        let mut records = turn("a", TokenCounts::new(0, 10, 2));
        records.push(build::compaction_begin(
            CompactionReason::Manual,
            CompactionMode::Discard,
            10,
            1,
        ));
        records.push(build::compaction_end(
            CompactionReason::Manual,
            CompactionMode::Discard,
            StopReason::Completed,
            Default::default(),
        ));
        let resumed = resume_trace(&records);
        assert!(resumed.context_closed);
        let initial = InitialState::from(resumed);
        assert!(initial.pending_trace_rotation);
        assert!(initial.from_compaction);
        assert!(initial.carry_over.is_empty());
    }

    #[test]
    fn writer_is_a_trace_sink() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::open(
            crate::writer::WriterConfig::new(dir.path(), "session-x")
                .date_dir("2026-01-01")
                .durability(crate::writer::Durability::Never),
        )
        .unwrap();
        let sink: std::sync::Arc<dyn TraceSink> = std::sync::Arc::new(writer.clone());
        sink.record(&Frame::new(build::user_text("one")));
        // Not recordable: filtered as Writer::record does.
        sink.record(&Frame::new(build::partial_text(
            penguin_omni_protocol::StreamEventType::Start,
            "",
            StopReason::Completed,
        )));
        sink.rotate();
        sink.record(&Frame::new(build::user_text("two")));
        writer.flush().unwrap();
        assert_eq!(writer.written(), 2);
        assert_eq!(writer.index(), 2);
    }
}
