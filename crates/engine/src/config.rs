use std::time::Duration;

use penguin_omni_protocol::CompactionMode;

/// The compaction prompt of the reference: a summary in `[summary]…[/summary]`, no tool calls.
pub const DEFAULT_COMPACTION_PROMPT: &str = "The conversation so far is about to be replaced by a summary, because the context is full. \
Write that summary now: the user's goals and constraints, what has been done and decided, the state of files and commands that matter, \
open questions, and the next steps, with every detail needed to continue without the old context. \
Do not call any tools. Reply in exactly this format and nothing after it:\n\n[summary]put the summary text here...[/summary]";

/// When and how a context is compacted (protocol [§2.12](penguin_omni_protocol::spec#s2.12)
/// *Compaction*).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Compact when the last request's total reaches this; 0 disables it.
    pub max_context_length: u64,
    /// Compact after this many completed requests in the context; `<= 0` disables it.
    pub max_session_turns: i64,
    /// Summarize the old context, or discard it.
    pub mode: CompactionMode,
    /// The request sent to produce the summary.
    pub prompt: String,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            max_context_length: CompactionConfig::effective_max_context_length(256_000, None),
            max_session_turns: -1,
            mode: CompactionMode::Summarize,
            prompt: DEFAULT_COMPACTION_PROMPT.to_owned(),
        }
    }
}

impl CompactionConfig {
    /// `min(configured, window - 2048)`, where the window is the model's when it is at least
    /// 4096 and 128000 otherwise; `configured <= 0` disables compaction by size (0).
    pub fn effective_max_context_length(configured: i64, context_window: Option<u64>) -> u64 {
        if configured <= 0 {
            return 0;
        }
        let window = context_window.filter(|w| *w >= 4096).unwrap_or(128_000);
        (configured as u64).min(window - 2048)
    }
}

/// Engine settings (protocol [§2.1](penguin_omni_protocol::spec#s2.1) *Settings and state*). The
/// defaults are those of the implementation penguin is compatible with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// LLM turns per run; `<= 0` disables the limit.
    pub max_turns: i64,
    /// In-run retries per turn: a turn makes at most `max_reconnects + 1` requests.
    pub max_reconnects: u32,
    /// Backoff base.
    pub reconnect_backoff: Duration,
    /// Backoff ceiling.
    pub reconnect_backoff_max: Duration,
    /// Compaction; `None` never compacts.
    pub compaction: Option<CompactionConfig>,
    /// Retry budget of a compaction (all failure kinds together); defaults to `max_reconnects`.
    pub compaction_max_reconnects: Option<u32>,
    /// For replays on a paused clock (scenarios): what a turn's producers emit at one instant
    /// is held until the clock moves on and released in the reference's order (see
    /// `instant.rs`). Every wait must then be on the clock, as a scripted approver's is: an
    /// approver waiting for a person to see the call would wait for a message still held. Off,
    /// messages go out as they come, the only meaningful order on a running clock.
    pub same_instant_order: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_turns: -1,
            max_reconnects: 5,
            reconnect_backoff: Duration::from_millis(2000),
            reconnect_backoff_max: Duration::from_millis(30_000),
            compaction: None,
            compaction_max_reconnects: None,
            same_instant_order: false,
        }
    }
}

impl EngineConfig {
    /// The retry budget of a compaction.
    pub fn compaction_cap(&self) -> u32 {
        self.compaction_max_reconnects
            .unwrap_or(self.max_reconnects)
    }

    /// `reconnectDelayMs(base, max, n) = min(base * 2^(n-1), max)` for the n-th reconnect.
    pub fn reconnect_delay(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.saturating_sub(1));
        self.reconnect_backoff
            .saturating_mul(factor)
            .min(self.reconnect_backoff_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_matches_the_reference() {
        let c = EngineConfig::default();
        let ms: Vec<u128> = (1..=6).map(|n| c.reconnect_delay(n).as_millis()).collect();
        assert_eq!(ms, [2000, 4000, 8000, 16000, 30000, 30000]);
    }

    #[test]
    fn effective_context_length() {
        assert_eq!(CompactionConfig::default().max_context_length, 125_952);
        assert_eq!(
            CompactionConfig::effective_max_context_length(256_000, Some(200_000)),
            197_952
        );
        assert_eq!(
            CompactionConfig::effective_max_context_length(50_000, Some(200_000)),
            50_000
        );
        assert_eq!(
            CompactionConfig::effective_max_context_length(50_000, Some(1000)),
            50_000
        );
        assert_eq!(
            CompactionConfig::effective_max_context_length(0, Some(200_000)),
            0
        );
    }
}
