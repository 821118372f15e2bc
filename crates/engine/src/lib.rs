#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod always;
mod carry;
mod compaction;
mod config;
mod environment;
mod instant;
mod request;
mod run;
pub mod scripted;
mod shared;
mod task;
mod turn;

pub use compaction::Compactability;
pub use config::{CompactionConfig, EngineConfig, DEFAULT_COMPACTION_PROMPT};
pub use environment::{
    AllowAll, ApprovalError, ApprovalMode, Approver, BackgroundForward, BackgroundListener,
    BackgroundTask, BackgroundWork, DenyAll, Environment, Permission, ToolCallRequest, TraceSink,
    Verdict,
};
pub use penguin_llm_providers::{
    CancellationToken, Llm, LlmOutcome, LlmRequest, MessageSink, ThinkingLevel,
};
pub use penguin_omni_protocol::{
    build, ApprovalDecision, Frame, ModelPayload, OmniMessage, SessionMeta, StopReason,
    TokenCounts, ToolCall, ToolDefinition,
};

/// The models (`penguin-llm-providers`) as this crate sees them: the [`Llm`] trait and the
/// scripted model ([`llm::scripted`]); the HTTP adapters come with that crate's features.
pub use penguin_llm_providers as llm;
/// The attribute [`Environment`], [`Approver`], [`MessageSink`] and [`Llm`] are declared with,
/// re-exported so an implementer needs no `async-trait` dependency of its own:
/// `use penguin_engine::async_trait;` and put `#[async_trait]` on the `impl` block.
pub use penguin_llm_providers::async_trait;
/// The whole message vocabulary (`penguin-omni-protocol`): the common names are re-exported
/// at the top of this crate (`OmniMessage`, `build`, `StopReason`, `ToolDefinition`, …); the
/// rest (`validator`, `markers`, `background`, every payload type) is here.
pub use penguin_omni_protocol as protocol;
pub use run::{
    Engine, EngineBusy, InitialState, Notifier, Observer, RunOptions, RunStream, Steered,
};
pub use shared::{BeforeCompaction, Counters, LlmFactory, SteerId};

/// The exact texts the engine produces, in one place so tests and docs can refer to them.
pub mod texts {
    /// Synthetic output of a denied call.
    pub const DENIED_BY_USER: &str = penguin_omni_protocol::validator::DENIED_BY_USER;
    /// Synthetic output of a call the command policy forbade.
    pub const DENIED_BY_POLICY: &str = penguin_omni_protocol::validator::DENIED_BY_POLICY;
    /// Case A placeholder for a committed call whose tool was interrupted.
    pub const INTERRUPTED_BY_USER: &str = "[interrupted: tool aborted by user]";
    /// Abort reason of a user interrupt.
    pub const ABORTED_BY_USER: &str = "aborted by user";
    /// Abort reason of an interrupt during a mid-task compaction.
    pub const ABORTED_DURING_COMPACTION: &str = "aborted during compaction";
    /// Abort reason of a failed mid-task compaction.
    pub const COMPACTION_FAILED: &str = "compaction failed";
    /// Repair output for a tool call made by a compaction request.
    pub const COMPACTION_TOOL_REPAIR: &str =
        "[tool error] the compaction request expects a summary, not tool calls";
    /// Sent before a compaction retry after an unusable reply.
    pub const SUMMARY_RETRY_GUIDANCE: &str = "Your previous reply was not a usable summary. Reply again with text only, no tool calls, in exactly this format and nothing after it:\n\n[summary]put the summary text here...[/summary]";
    /// Abort reason of an interrupt during reconnect backoff.
    pub const ABORTED_DURING_BACKOFF: &str = "aborted during reconnect backoff";
}
