//! Event payloads (protocol [§1.6](crate::spec#s1.6) *Events*): what the engine, the
//! session and the server say about a run.

use serde::{Deserialize, Serialize};

use super::*;

/// Token counts of a request or of the session. There is no input field: input is
/// `cache_read + uncached_prompt`.
///
/// The wire names the uncached prompt `cache_write` (the format penguin is compatible with
/// chose it); the Rust field says what it holds, and serializes under the wire's key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Cached prompt tokens.
    pub cache_read: u64,
    /// Prompt tokens not read from a cache: the rest of the input. JSON key `cache_write`.
    #[serde(rename = "cache_write")]
    pub uncached_prompt: u64,
    /// Thinking plus response tokens.
    pub output: u64,
    /// `cache_read + uncached_prompt + output`.
    pub total: u64,
}

impl TokenCounts {
    /// Builds counts with `total` computed.
    pub fn new(cache_read: u64, uncached_prompt: u64, output: u64) -> TokenCounts {
        TokenCounts {
            cache_read,
            uncached_prompt,
            output,
            total: cache_read + uncached_prompt + output,
        }
    }
}

/// Field-wise sum.
impl std::ops::Add for TokenCounts {
    type Output = TokenCounts;

    fn add(self, o: TokenCounts) -> TokenCounts {
        TokenCounts {
            cache_read: self.cache_read + o.cache_read,
            uncached_prompt: self.uncached_prompt + o.uncached_prompt,
            output: self.output + o.output,
            total: self.total + o.total,
        }
    }
}

/// A tool as announced in `tool_list_ready`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

/// One server's result in `mcp_connect_end`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpConnectResult {
    /// Server name.
    pub server: String,
    /// `stdio`, `http` or `sse`.
    pub transport: String,
    /// How the connect ended.
    pub status: McpConnectStatus,
    /// How long it took.
    pub duration_ms: u64,
    /// The tools it offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every `event_msg` payload, discriminated by `payload.type` ([§1.6](crate::spec#s1.6) *Events*).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventPayload {
    /// An approval answer for one tool call.
    ApprovalDecision {
        /// allow, deny or forbidden.
        decision: ApprovalDecision,
        /// The call decided on.
        tool_call_id: String,
        /// Who decided when it was not the run's approver itself: a hook, as
        /// `hook:<its command>` (penguin's own; absent in the format penguin is compatible
        /// with, [§2.5](crate::spec#s2.5)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_by: Option<String>,
        /// Why, in the decider's words: the model gets it in a denial's synthetic output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The arguments the call runs with when the decider rewrote them (JSON text); the
        /// `tool_call` keeps what the model sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        updated_arguments: Option<String>,
    },
    /// The last message of an interrupted run. `reason` serializes as `null` when absent.
    Abort {
        /// Why the run ended.
        reason: Option<String>,
    },
    /// A model request starts.
    RequestBegin,
    /// A model request ended.
    RequestEnd {
        /// The request's outcome.
        status: StopReason,
        /// Failure detail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
        /// 1-based ordinal within the retry run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        /// The planned backoff before the next attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
    },
    /// Token counts; the LLM stream's last message.
    TokenUsage {
        /// Cumulative over the session.
        session: TokenCounts,
        /// This request.
        request: TokenCounts,
    },
    /// A compaction starts.
    CompactionBegin {
        /// Why.
        reason: CompactionReason,
        /// How.
        mode: CompactionMode,
        /// The last request total.
        context: u64,
        /// Turns in the current context.
        turns: u64,
    },
    /// A compaction ended. Key order differs from request_end: attempt before error_message.
    CompactionEnd {
        /// Why.
        reason: CompactionReason,
        /// How.
        mode: CompactionMode,
        /// Outcome.
        status: StopReason,
        /// Attempts made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        /// Failure detail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
    },
    /// The last message of a goal-mode run.
    GoalFinished {
        /// How the goal ended.
        outcome: GoalOutcomeStatus,
        /// Rounds run.
        rounds: u64,
        /// Tokens used.
        tokens_used: u64,
    },
    /// Pointer to a direct child session. Written to the Trace only, never streamed.
    Subagent {
        /// The child session id.
        session_id: String,
    },
    /// The tools the session offers.
    ToolListReady {
        /// Tool definitions.
        tools: Vec<ToolDefinition>,
    },
    /// MCP servers are being connected.
    McpConnectBegin {
        /// Server names in config order.
        servers: Vec<String>,
    },
    /// MCP connect finished.
    McpConnectEnd {
        /// Overall status.
        status: McpConnectStatus,
        /// Per-server results.
        results: Vec<McpConnectResult>,
    },
}

impl EventPayload {
    /// The `payload.type` string.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventPayload::ApprovalDecision { .. } => "approval_decision",
            EventPayload::Abort { .. } => "abort",
            EventPayload::RequestBegin => "request_begin",
            EventPayload::RequestEnd { .. } => "request_end",
            EventPayload::TokenUsage { .. } => "token_usage",
            EventPayload::CompactionBegin { .. } => "compaction_begin",
            EventPayload::CompactionEnd { .. } => "compaction_end",
            EventPayload::GoalFinished { .. } => "goal_finished",
            EventPayload::Subagent { .. } => "subagent",
            EventPayload::ToolListReady { .. } => "tool_list_ready",
            EventPayload::McpConnectBegin { .. } => "mcp_connect_begin",
            EventPayload::McpConnectEnd { .. } => "mcp_connect_end",
        }
    }
}
