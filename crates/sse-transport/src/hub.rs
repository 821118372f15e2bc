//! The hub: channels by key (a session id, or `user:<userId>`), created lazily and reclaimed
//! when idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::channel::{Channel, ChannelConfig};
use crate::event::{EventData, ServerEvent, SERVER_EVENT};

/// Channels by key (a session id, or `user:<userId>`), created lazily.
#[derive(Debug, Default)]
pub struct ChannelHub {
    config: ChannelConfig,
    channels: Mutex<HashMap<String, Arc<Channel>>>,
}

impl ChannelHub {
    /// A hub whose channels use `config`.
    pub fn new(config: ChannelConfig) -> ChannelHub {
        ChannelHub {
            config,
            channels: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Channel>>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The channel for `key`, created (with a new random epoch) if absent.
    ///
    /// Fetch it again for every publish rather than holding it: it may have been reclaimed.
    pub fn get(&self, key: &str) -> Arc<Channel> {
        self.lock()
            .entry(key.to_owned())
            .or_insert_with(|| Channel::new(self.config.clone()))
            .clone()
    }

    /// Puts `channel` in place for `key` (one [`Channel::continuing`] a stream kept
    /// elsewhere, say), closing the one it replaces.
    pub fn install(&self, key: &str, channel: Arc<Channel>) {
        if let Some(old) = self.lock().insert(key.to_owned(), channel) {
            old.close();
        }
    }

    /// The channel for `key`, if it exists.
    pub fn existing(&self, key: &str) -> Option<Arc<Channel>> {
        self.lock().get(key).cloned()
    }

    /// Removes and closes the channel for `key`; the next [`get`](Self::get) creates a new one
    /// with a new epoch. Returns whether there was one.
    pub fn reclaim(&self, key: &str) -> bool {
        let removed = self.lock().remove(key);
        match removed {
            Some(ch) => {
                ch.close();
                true
            }
            None => false,
        }
    }

    /// Reclaims every channel that is inactive by `is_active`, has no subscribers, and has been
    /// idle for more than `idle_after`. Returns the reclaimed keys.
    pub fn sweep(
        &self,
        now: Instant,
        idle_after: Duration,
        is_active: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut map = self.lock();
        let doomed: Vec<String> = map
            .iter()
            .filter(|(k, ch)| {
                !is_active(k) && ch.subscriber_count() == 0 && ch.idle_for(now) > idle_after
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &doomed {
            if let Some(ch) = map.remove(k) {
                ch.close();
            }
        }
        doomed
    }

    /// Publishes to every existing channel whose key starts with `prefix`; returns how many.
    pub fn broadcast(&self, prefix: &str, event: &ServerEvent) -> usize {
        let data = EventData::from(event);
        let targets: Vec<Arc<Channel>> = self
            .lock()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, ch)| ch.clone())
            .collect();
        for ch in &targets {
            ch.publish(data.clone(), Some(SERVER_EVENT));
        }
        targets.len()
    }

    /// Keys of the existing channels.
    pub fn keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_creates_lazily_reclaims_with_new_epoch_and_sweeps() {
        let hub = ChannelHub::new(ChannelConfig::default());
        let a = hub.get("s1");
        assert!(Arc::ptr_eq(&a, &hub.get("s1")));
        let mut sub = a.subscribe();
        assert!(hub.reclaim("s1"));
        assert!(
            sub.try_next().is_none() && sub.lagged(),
            "reclaim ends streams"
        );
        let b = hub.get("s1");
        assert!(!Arc::ptr_eq(&a, &b));
        // A new epoch (a random 32-bit value; equal with probability 2^-32).
        assert_ne!(a.epoch(), b.epoch());
        drop(sub);

        hub.get("user:u1");
        hub.get("user:u2");
        assert_eq!(hub.broadcast("user:", &ServerEvent::Hello), 2);
        assert_eq!(hub.get("user:u1").buffered(), 1);
        assert_eq!(hub.get("s1").buffered(), 0);

        let _held = hub.get("s2").subscribe();
        let later = Instant::now() + Duration::from_secs(31 * 60);
        let mut swept = hub.sweep(later, Duration::from_secs(30 * 60), |k| k == "user:u2");
        swept.sort();
        assert_eq!(swept, ["s1", "user:u1"]);
        let mut keys = hub.keys();
        keys.sort();
        assert_eq!(keys, ["s2", "user:u2"]);
        assert!(hub
            .sweep(Instant::now(), Duration::from_secs(1800), |_| false)
            .is_empty());
    }
}
