//! One command started by `exec_command`: `sh -c CMD` leading its own session (so its own
//! process group, whose id is its pid, and no controlling terminal), its output
//! kept in a capped buffer until someone collects it, its exit observed in the background so
//! the command can outlive the tool call that started it.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::Notify;

use super::buffer::CappedText;
use crate::contract::Output;
use crate::sandbox::{DenialScan, Sandbox};

/// Output a command may hold undelivered; older output is dropped (and says so).
const OUTPUT_CAP: usize = 1024 * 1024;

/// How long to keep reading after the shell exited and its group was killed: only a process
/// that left the group (setsid) and still holds the pipe makes us wait this long.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Between SIGTERM and SIGKILL when a command is killed on purpose.
const KILL_GRACE: Duration = Duration::from_secs(1);

/// How the foreground process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// Its status could not be had.
    Unknown(String),
}

impl Exit {
    /// Whether the command succeeded.
    pub(crate) fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }

    /// `exit code 2`, `terminated by signal 9`, ...: the detail line of a completion report.
    pub(crate) fn detail(&self) -> String {
        match self {
            Exit::Code(c) => format!("exit code {c}"),
            Exit::Signal(s) => format!("terminated by signal {s}"),
            Exit::Unknown(e) => format!("exit status unknown: {e}"),
        }
    }
}

/// Called once when a background command settles: its exit and the output nobody collected.
pub(crate) type ExitWatcher = Box<dyn FnOnce(&Exit, String) + Send>;

/// Bytes of a command's latest output kept for a person to glance at (the processes card),
/// apart from what the model collects.
const RECENT_BYTES: usize = 4096;

struct State {
    buffer: CappedText,
    /// Its latest output, whoever collected it.
    recent: String,
    /// One per pipe, so lines of stdout and stderr are never mixed.
    scans: [DenialScan; 2],
    exit: Option<Exit>,
    /// Exited and its output read (or given up on): nothing more will arrive.
    settled: bool,
    watcher: Option<ExitWatcher>,
    killed: bool,
}

/// A running (or finished) command. Shared by the tool call that started it and, once it runs
/// past that call, the session's registry.
pub(crate) struct ManagedProcess {
    pub(crate) cmd: String,
    pgid: Pid,
    /// The group's leader is the sandbox's bubblewrap, not the shell.
    wrapped: bool,
    /// When it started.
    pub(crate) started: std::time::SystemTime,
    state: Mutex<State>,
    wake: Notify,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
}

impl std::fmt::Debug for ManagedProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedProcess")
            .field("cmd", &self.cmd)
            .field("pgid", &self.pgid)
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ManagedProcess {
    /// Starts `sh -c cmd` in `cwd`, confined by `sandbox` (whose workspace is `root`), as the
    /// leader of a new session (the sandbox's doing, in every mode): the group to signal.
    pub(crate) fn spawn(
        cmd: &str,
        cwd: &Path,
        root: &Path,
        sandbox: &Sandbox,
    ) -> Result<Arc<ManagedProcess>, String> {
        let mut child = sandbox
            .start("sh", root, |command| {
                command
                    .arg("-c")
                    .arg(cmd)
                    .current_dir(cwd)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    // Pagers and prompts would wait for a terminal nobody types into.
                    .env("PAGER", "cat")
                    .env("GIT_PAGER", "cat")
                    .env("GIT_TERMINAL_PROMPT", "0")
                    .env("GIT_EDITOR", "true");
            })
            .map_err(|e| format!("failed to start sh: {e}"))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or("the shell exited before it could be tracked")?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err("the shell's output pipes are missing".to_owned());
        };
        let process = Arc::new(ManagedProcess {
            cmd: cmd.to_owned(),
            pgid: Pid::from_raw(pid),
            wrapped: sandbox.wraps(),
            started: std::time::SystemTime::now(),
            state: Mutex::new(State {
                buffer: CappedText::new(OUTPUT_CAP, "earlier output"),
                recent: String::new(),
                scans: Default::default(),
                exit: None,
                settled: false,
                watcher: None,
                killed: false,
            }),
            wake: Notify::new(),
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
        });
        let readers = [
            tokio::spawn(read_into(stdout, 0, process.clone())),
            tokio::spawn(read_into(stderr, 1, process.clone())),
        ];
        let aborts: Vec<_> = readers.iter().map(|r| r.abort_handle()).collect();
        let waiter = process.clone();
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(st) => match (st.code(), st.signal()) {
                    (Some(c), _) => Exit::Code(c),
                    (None, Some(s)) => Exit::Signal(s),
                    (None, None) => Exit::Unknown("no code and no signal".into()),
                },
                Err(e) => Exit::Unknown(e.to_string()),
            };
            lock(&waiter.state).exit = Some(exit);
            // Nobody can write to an exited shell: its pipe must not outlive it while the
            // session keeps the finished command listed.
            waiter.stdin.lock().await.take();
            waiter.wake.notify_waiters();
            // The foreground process decides completion: jobs it left behind go down with
            // the group, and what they already wrote is read.
            waiter.signal(Signal::SIGKILL);
            let drained = tokio::time::timeout(DRAIN_GRACE, async {
                for r in readers {
                    let _ = r.await;
                }
            })
            .await;
            if drained.is_err() {
                // A process that left the group holds the pipes: stop reading them.
                for a in aborts {
                    a.abort();
                }
            }
            waiter.settle();
        });
        Ok(process)
    }

    fn settle(&self) {
        let report = {
            let mut st = lock(&self.state);
            st.settled = true;
            let exit = st.exit.clone();
            match (st.watcher.take(), exit) {
                (Some(w), Some(exit)) => Some((w, exit, st.buffer.drain())),
                _ => None,
            }
        };
        self.wake.notify_waiters();
        if let Some((watcher, exit, output)) = report {
            watcher(&exit, output);
        }
    }

    fn push(&self, pipe: usize, text: &str) {
        {
            let mut st = lock(&self.state);
            st.scans[pipe].push(text);
            st.buffer.push(text);
            st.recent.push_str(text);
            if st.recent.len() > RECENT_BYTES {
                let cut = st.recent.len() - RECENT_BYTES;
                let cut = (cut..st.recent.len())
                    .find(|i| st.recent.is_char_boundary(*i))
                    .unwrap_or(st.recent.len());
                st.recent.drain(..cut);
            }
        }
        self.wake.notify_waiters();
    }

    fn signal(&self, signal: Signal) {
        // ESRCH (everyone already gone) is the normal case after an exit.
        let _ = killpg(self.pgid, signal);
    }

    /// Whether the foreground process still runs.
    pub(crate) fn running(&self) -> bool {
        lock(&self.state).exit.is_none()
    }

    /// How it ended, once it has.
    pub(crate) fn exit(&self) -> Option<Exit> {
        lock(&self.state).exit.clone()
    }

    /// The process group id (the shell's pid).
    pub(crate) fn pid(&self) -> i32 {
        self.pgid.as_raw()
    }

    /// Its last `lines` lines of output, whoever collected them.
    pub(crate) fn recent(&self, lines: usize) -> String {
        let st = lock(&self.state);
        let all: Vec<&str> = st.recent.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The TCP ports its processes listen on now (a dev server's), from `/proc`: what the
    /// sandbox let it bind.
    pub(crate) fn listening_ports(&self) -> Vec<u16> {
        if self.exit().is_some() {
            return Vec::new();
        }
        let inodes: Vec<String> = group_members(self.pgid)
            .into_iter()
            .flat_map(|pid| socket_inodes(pid.as_raw()))
            .collect();
        let mut ports: Vec<u16> = listening_sockets()
            .into_iter()
            .filter(|(inode, _)| inodes.contains(inode))
            .map(|(_, port)| port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// What the sandbox refusals in its output suggest, for the exit note.
    pub(crate) fn denials(&self) -> DenialScan {
        let st = lock(&self.state);
        let [mut out, mut err] = st.scans.clone();
        out.finish();
        err.finish();
        out.merge(err);
        out
    }

    /// Calls `watcher` once the command settles (at once when it already has), unless
    /// [`disarm`](Self::disarm)ed first: a background launch's completion report.
    pub(crate) fn on_settled(&self, watcher: ExitWatcher) {
        let ready = {
            let mut st = lock(&self.state);
            if st.settled {
                st.exit.clone().map(|e| (e, st.buffer.drain()))
            } else {
                st.watcher = Some(watcher);
                return;
            }
        };
        if let Some((exit, output)) = ready {
            watcher(&exit, output);
        }
    }

    /// Drops an armed completion report: a deliberate kill reports its own outcome.
    pub(crate) fn disarm(&self) {
        lock(&self.state).watcher = None;
    }

    /// The output nobody has collected yet.
    pub(crate) fn drain(&self) -> String {
        lock(&self.state).buffer.drain()
    }

    /// Streams output to `out` as it arrives, until the command has settled or `yield_for` has
    /// passed. The process is left running (an interrupted call drops this future).
    pub(crate) async fn collect(&self, yield_for: Duration, out: &Output) {
        let deadline = tokio::time::Instant::now() + yield_for;
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            // Registered before the state is read, so no wake-up between the two is lost.
            notified.as_mut().enable();
            let (chunk, settled) = {
                let mut st = lock(&self.state);
                (st.buffer.drain(), st.settled)
            };
            if !chunk.is_empty() {
                out.emit(chunk).await;
                continue;
            }
            if settled {
                return;
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => {
                    let tail = self.drain();
                    if !tail.is_empty() {
                        out.emit(tail).await;
                    }
                    return;
                }
            }
        }
    }

    /// Writes to the command's stdin.
    pub(crate) async fn write(&self, chars: &str) -> Result<(), String> {
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err("its stdin is closed".into());
        };
        let written = async {
            pipe.write_all(chars.as_bytes()).await?;
            pipe.flush().await
        }
        .await;
        written.map_err(|e| {
            *stdin = None;
            format!("cannot write to its stdin: {e}")
        })
    }

    /// Ctrl-C: SIGINT to the whole group, as a terminal sends it. Under bubblewrap, to all
    /// of it but the leader: bubblewrap would die of it at once and report the command killed
    /// by SIGINT while the command, which got it too, may be running its `trap` (its own exit
    /// status is what bubblewrap reports when it lives). The namespace's init, bubblewrap's
    /// child, ignores it, as a PID namespace's init does a signal it has no handler for.
    pub(crate) fn interrupt(&self) {
        if !self.wrapped {
            return self.signal(Signal::SIGINT);
        }
        for pid in group_members(self.pgid) {
            if pid != self.pgid {
                let _ = nix::sys::signal::kill(pid, Signal::SIGINT);
            }
        }
    }

    /// Ends the whole group: SIGTERM, then SIGKILL after a grace period. Idempotent.
    pub(crate) fn kill(self: &Arc<Self>) {
        {
            let mut st = lock(&self.state);
            if st.killed {
                return;
            }
            st.killed = true;
        }
        self.signal(Signal::SIGTERM);
        let me = self.clone();
        let escalate = async move {
            tokio::time::sleep(KILL_GRACE).await;
            me.signal(Signal::SIGKILL);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(escalate);
            }
            // No runtime (a drop at exit): no grace period either.
            Err(_) => self.kill_now(),
        }
    }

    /// SIGKILL to the whole group at once (a session or penguin going away).
    pub(crate) fn kill_now(&self) {
        lock(&self.state).killed = true;
        self.signal(Signal::SIGKILL);
    }
}

/// Reads one pipe into the process's buffer, decoding UTF-8 across chunk boundaries.
async fn read_into(mut pipe: impl AsyncRead + Unpin, index: usize, process: Arc<ManagedProcess>) {
    let mut buf = vec![0u8; 8192];
    let mut decoder = super::buffer::Utf8Stream::default();
    loop {
        match pipe.read(&mut buf).await {
            Ok(n) if n > 0 => {
                let text = decoder.push(&buf[..n]);
                if !text.is_empty() {
                    process.push(index, &text);
                }
            }
            _ => break,
        }
    }
    let rest = decoder.finish();
    if !rest.is_empty() {
        process.push(index, &rest);
    }
}

/// The processes of group `pgid` now, from `/proc` (a process gone meanwhile is skipped).
fn group_members(pgid: Pid) -> Vec<Pid> {
    // `/proc` is the kernel's, not a folder a command can change.
    #[allow(clippy::disallowed_methods)]
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .map(Pid::from_raw)
        .filter(|pid| nix::unistd::getpgid(Some(*pid)) == Ok(pgid))
        .collect()
}

/// The socket inodes process `pid` holds (`socket:[N]` links under `/proc/PID/fd`).
fn socket_inodes(pid: i32) -> Vec<String> {
    // `/proc` is the kernel's, not a folder a command can change.
    #[allow(clippy::disallowed_methods)]
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| {
        let target = std::fs::read_link(fd.ok()?.path()).ok()?;
        let target = target.to_str()?;
        Some(
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .to_owned(),
        )
    })
    .collect()
}

/// Every TCP socket listening on this machine (IPv4 and IPv6): its inode and port.
fn listening_sockets() -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        #[allow(clippy::disallowed_methods)]
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // local_address is `ADDR:PORT` in hex; state 0A is LISTEN; the inode is column 9.
            let (Some(local), Some(&"0A"), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            if let Some(port) = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                out.push(((*inode).to_owned(), port));
            }
        }
    }
    out
}
