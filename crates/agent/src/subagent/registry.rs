//! The children a session keeps past the call that started them, reached again by their
//! `subagent_id`; and the session's background work as a host sees it (these children plus
//! the inner environment's commands).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};

use penguin_engine::{BackgroundForward, BackgroundListener, BackgroundTask, BackgroundWork};
use penguin_omni_protocol::background::BackgroundKind;

use super::child::{lock, Child, Hooks};

/// Children one session may keep at once.
pub const MAX_CHILDREN: usize = 8;

/// The registered children, oldest first. Dropping it (the session went away) kills them.
#[derive(Default)]
pub(crate) struct Children {
    pub(crate) hooks: Arc<Hooks>,
    entries: Mutex<Vec<(String, Arc<Child>)>>,
}

impl Drop for Children {
    fn drop(&mut self) {
        self.kill_all();
    }
}

fn random_suffix() -> String {
    let n = RandomState::new().build_hasher().finish();
    format!("{:08x}", n as u32)
}

impl Children {
    /// Whether a new child may start: below the cap, or once the oldest idle child is
    /// removed. A running child is never evicted: that would throw away work in progress.
    pub(crate) fn make_room(&self) -> bool {
        let evicted = {
            let mut entries = lock(&self.entries);
            if entries.len() < MAX_CHILDREN {
                return true;
            }
            match entries.iter().position(|(_, c)| !c.running()) {
                Some(pos) => entries.remove(pos).1,
                None => return false,
            }
        };
        evicted.kill();
        true
    }

    /// Keeps a child under `subagent-<last 8 chars of its session id>` (a random suffix on a
    /// collision), so the handle matches the origin a host nests its messages under. Parallel
    /// launches admitted before any registered may overshoot the cap briefly: a running child
    /// is kept rather than thrown away.
    pub(crate) fn register(&self, child: Arc<Child>) -> String {
        self.make_room();
        let hop = child.hop();
        let tail = &hop[hop.len().saturating_sub(8)..];
        let mut entries = lock(&self.entries);
        let mut id = format!("subagent-{tail}");
        while entries.iter().any(|(e, _)| *e == id) {
            id = format!("subagent-{}", random_suffix());
        }
        entries.push((id.clone(), child));
        id
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Child>> {
        lock(&self.entries)
            .iter()
            .find(|(e, _)| e == id)
            .map(|(_, c)| c.clone())
    }

    /// Forgets a child and kills it; false when the id is unknown.
    pub(crate) fn remove(&self, id: &str) -> bool {
        let removed = {
            let mut entries = lock(&self.entries);
            entries
                .iter()
                .position(|(e, _)| e == id)
                .map(|pos| entries.remove(pos).1)
        };
        match removed {
            Some(child) => {
                child.kill();
                true
            }
            None => false,
        }
    }

    pub(crate) fn list(&self) -> Vec<BackgroundTask> {
        lock(&self.entries)
            .iter()
            .map(|(id, c)| BackgroundTask {
                id: id.clone(),
                kind: BackgroundKind::Subagent,
                label: c.label().to_owned(),
                running: c.running(),
                detail: c.exit().and_then(|x| x.note),
                pid: None,
                started_at_ms: None,
                recent: None,
                ports: Vec::new(),
            })
            .collect()
    }

    pub(crate) fn kill_all(&self) {
        let all: Vec<_> = lock(&self.entries).drain(..).collect();
        for (_, child) in all {
            child.kill();
        }
    }
}

/// A session's background work: its children, then the inner environment's.
pub(crate) struct SubagentWork {
    pub(crate) children: Arc<Children>,
    pub(crate) inner: Option<Arc<dyn BackgroundWork>>,
}

impl BackgroundWork for SubagentWork {
    fn set_listener(&self, listener: BackgroundListener) {
        *lock(&self.children.hooks.listener) = Some(listener.clone());
        if let Some(inner) = &self.inner {
            inner.set_listener(listener);
        }
    }

    fn set_forward(&self, forward: BackgroundForward) {
        *lock(&self.children.hooks.forward) = Some(forward.clone());
        if let Some(inner) = &self.inner {
            inner.set_forward(forward);
        }
    }

    fn tasks(&self) -> Vec<BackgroundTask> {
        let mut tasks = self.children.list();
        if let Some(inner) = &self.inner {
            tasks.extend(inner.tasks());
        }
        tasks
    }

    fn kill(&self, id: &str) -> bool {
        // A killed child sends no report.
        self.children.remove(id) || self.inner.as_ref().is_some_and(|i| i.kill(id))
    }

    fn kill_all(&self) {
        self.children.kill_all();
        if let Some(inner) = &self.inner {
            inner.kill_all();
        }
    }
}
