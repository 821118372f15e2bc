//! Command sessions: commands that run past the `exec_command` call that started them, kept by
//! one registry per session, reached again with `input_command` and `kill_command`, and reported
//! to the model when a background launch settles.
//!
//! Every process of a registry dies with it (its session ended or was unloaded), and
//! [`kill_all_background_processes`] ends every one of every registry (penguin exiting).

mod buffer;
mod process;

pub use buffer::CappedText;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use penguin_engine::{BackgroundListener, BackgroundTask, BackgroundWork};
use penguin_omni_protocol::background::{
    report_label, report_tail, BackgroundKind, BackgroundTaskDone,
};

pub(crate) use process::{Exit, ManagedProcess};

/// Background commands one session may keep at once.
pub const MAX_PROCESSES: usize = 64;

/// Output of a settled background command that goes into its report, in chars.
pub const REPORT_OUTPUT_CAP: usize = 4000;

/// Lines of a background command's latest output a listing shows.
const RECENT_LINES: usize = 5;

struct Entry {
    id: String,
    process: Arc<ManagedProcess>,
    last_used: u64,
}

#[derive(Default)]
struct Registry {
    entries: Mutex<Vec<Entry>>,
    listener: Mutex<Option<BackgroundListener>>,
    clock: std::sync::atomic::AtomicU64,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let entries = self
            .entries
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for e in entries.drain(..) {
            e.process.kill_now();
        }
    }
}

fn live() -> MutexGuard<'static, Vec<Weak<Registry>>> {
    static LIVE: OnceLock<Mutex<Vec<Weak<Registry>>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Ends every background command of every session at once (SIGKILL to each group): for a
/// process about to exit without running its destructors.
pub fn kill_all_background_processes() {
    for registry in live().iter().filter_map(Weak::upgrade) {
        for e in registry.lock().drain(..) {
            e.process.kill_now();
        }
    }
}

fn random_suffix() -> String {
    let n = RandomState::new().build_hasher().finish();
    format!("{:08x}", n as u32)
}

/// The background commands of one session. Cheap to clone: clones share the registry, and the
/// last one dropped kills what is left.
#[derive(Clone, Default)]
pub struct CommandSessions {
    inner: Arc<Registry>,
}

impl std::fmt::Debug for CommandSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandSessions")
            .field("processes", &self.inner.lock().len())
            .finish()
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CommandSessions {
    /// An empty registry.
    pub fn new() -> CommandSessions {
        let sessions = CommandSessions::default();
        let mut live = live();
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&sessions.inner));
        sessions
    }

    /// Where reports of settled background launches go (the session turns them into harness
    /// notices). Without a listener they are dropped.
    pub fn set_listener(&self, listener: BackgroundListener) {
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(listener);
    }

    fn tick(&self) -> u64 {
        self.inner
            .clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps a process past its call; `None` when the registry is full of running commands
    /// (finished ones are forgotten first to make room).
    pub(crate) fn register(&self, process: Arc<ManagedProcess>) -> Option<String> {
        let last_used = self.tick();
        let mut entries = self.inner.lock();
        if entries.len() >= MAX_PROCESSES {
            if let Some(pos) = entries.iter().position(|e| !e.process.running()) {
                entries.remove(pos).process.kill_now();
            } else {
                return None;
            }
        }
        let mut id = format!("proc-{}", random_suffix());
        while entries.iter().any(|e| e.id == id) {
            id = format!("proc-{}", random_suffix());
        }
        entries.push(Entry {
            id: id.clone(),
            process,
            last_used,
        });
        Some(id)
    }

    /// The process with this id.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        let now = self.tick();
        let mut entries = self.inner.lock();
        let e = entries.iter_mut().find(|e| e.id == id)?;
        e.last_used = now;
        Some(e.process.clone())
    }

    /// Forgets a process, ending what is left of its group.
    pub(crate) fn remove(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        let mut entries = self.inner.lock();
        let pos = entries.iter().position(|e| e.id == id)?;
        let process = entries.remove(pos).process;
        drop(entries);
        process.kill();
        Some(process)
    }

    /// The background commands, oldest first.
    pub fn list(&self) -> Vec<BackgroundTask> {
        self.inner
            .lock()
            .iter()
            .map(|e| BackgroundTask {
                id: e.id.clone(),
                kind: BackgroundKind::Command,
                label: e.process.cmd.clone(),
                running: e.process.running(),
                detail: e.process.exit().map(|x| x.detail()),
                pid: Some(e.process.pid()),
                started_at_ms: e
                    .process
                    .started
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .and_then(|d| u64::try_from(d.as_millis()).ok()),
                recent: Some(e.process.recent(RECENT_LINES)),
                ports: e.process.listening_ports(),
            })
            .collect()
    }

    /// Kills a background command (SIGTERM to its group, SIGKILL after a grace period) and
    /// forgets it; a killed command sends no report. False when the id is unknown.
    pub fn kill(&self, id: &str) -> bool {
        match self.get(id) {
            Some(p) => {
                p.disarm();
                self.remove(id);
                true
            }
            None => false,
        }
    }

    /// Kills every background command at once (the session is going away).
    pub fn kill_all(&self) {
        for e in self.inner.lock().drain(..) {
            e.process.disarm();
            e.process.kill_now();
        }
    }

    /// Reports the process when it settles: a background launch.
    pub(crate) fn arm_report(&self, id: &str, process: &Arc<ManagedProcess>) {
        let listener = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(listener) = listener else {
            return;
        };
        let (id, label) = (id.to_owned(), report_label(&process.cmd));
        process.on_settled(Box::new(move |exit: &Exit, output: String| {
            listener(BackgroundTaskDone {
                kind: BackgroundKind::Command,
                id,
                label,
                completed: exit.success(),
                detail: exit.detail(),
                output: report_tail(&output, REPORT_OUTPUT_CAP),
            });
        }));
    }
}

impl BackgroundWork for CommandSessions {
    fn set_listener(&self, listener: BackgroundListener) {
        CommandSessions::set_listener(self, listener);
    }

    fn tasks(&self) -> Vec<BackgroundTask> {
        self.list()
    }

    fn kill(&self, id: &str) -> bool {
        CommandSessions::kill(self, id)
    }

    fn kill_all(&self) {
        CommandSessions::kill_all(self);
    }
}
