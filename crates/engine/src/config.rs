use std::time::Duration;

/// Engine settings (§2.1 of the reference behaviour). The defaults are the reference's.
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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_turns: -1,
            max_reconnects: 5,
            reconnect_backoff: Duration::from_millis(2000),
            reconnect_backoff_max: Duration::from_millis(30_000),
        }
    }
}

impl EngineConfig {
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
}
