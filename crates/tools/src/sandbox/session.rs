//! A session of its own for every process penguin starts for a session (commands, MCP stdio
//! servers), in every mode, `off` and a call run "unsandboxed, this once" included.
//!
//! A process in penguin's session shares penguin's controlling terminal: it can open
//! `/dev/tty` and, where the kernel still allows `ioctl(TIOCSTI)` (`dev.tty.legacy_tiocsti`),
//! type into it. A background command could answer the next approval prompt ("unsandboxed,
//! this once"), put a line in `penguin chat` that reaches the model as the user's, or leave a
//! shell command for when `penguin serve` exits. A process group of its own does not help:
//! the terminal belongs to the session. The leader of a new session has no controlling
//! terminal (`/dev/tty` fails with `ENXIO`), and TIOCSTI on a terminal that is not the
//! caller's controlling one needs `CAP_SYS_ADMIN`.
//!
//! `setsid(2)` has to run in the child between fork and exec, which std offers only through
//! the `unsafe` `pre_exec` hook (its `CommandExt::setsid` is unstable). The child instead
//! execs util-linux's (or busybox's) `setsid` program (from the system's directories, never
//! from `PATH`), which calls `setsid(2)` and execs the command in the same process: it only forks when it leads a process group, and penguin
//! never makes it one. So the pid penguin tracks is the command's, and the new session's
//! process group has that id: signalling the group (interrupt, kill, timeout) reaches the
//! command and everything it started, as before.
//!
//! The spawn returns once `setsid` is exec'd, a moment before it has called `setsid(2)`; until
//! then there is no group to signal, and a kill in that moment would miss. So the start waits
//! for the child to lead its session ([`await_leader`]) before anyone gets its pid.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How a started process is kept off penguin's terminal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Leader {
    /// Exec'd through the `setsid` program at this path: a new session, no controlling
    /// terminal.
    Setsid(PathBuf),
    /// No `setsid` program, and penguin has no controlling terminal that could be shared: a
    /// process group of its own is all it needs.
    Group,
}

/// Why a process cannot be kept off penguin's terminal.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start a process outside penguin's terminal: the `setsid` program (util-linux) is not installed in {}, and a process that shares penguin's controlling terminal could type into it",
    super::namespace::SYSTEM_DIRS.join(", ")
)]
pub(super) struct NoSession;

/// How processes are started on this machine, found once per process (penguin's controlling
/// terminal is asked each time: a server may lose or never have one).
pub(super) fn leader() -> Result<Leader, NoSession> {
    static SETSID: OnceLock<Option<PathBuf>> = OnceLock::new();
    let setsid = SETSID.get_or_init(|| super::namespace::find_system_program("setsid"));
    choose(setsid.as_deref(), has_terminal)
}

fn choose(setsid: Option<&Path>, has_terminal: impl FnOnce() -> bool) -> Result<Leader, NoSession> {
    match setsid {
        Some(path) => Ok(Leader::Setsid(path.to_path_buf())),
        None if has_terminal() => Err(NoSession),
        None => Ok(Leader::Group),
    }
}

/// Whether penguin has a controlling terminal. `/dev/tty` is the opener's controlling
/// terminal and fails with `ENXIO` for a process without one; any other failure is taken to
/// mean there may be one, so that only a sure answer relaxes anything.
#[allow(
    clippy::disallowed_methods,
    reason = "/dev/tty is the kernel's name for the caller's terminal, nothing a command can change"
)]
fn has_terminal() -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY)
        .open("/dev/tty")
    {
        Ok(_) => true,
        Err(e) => e.raw_os_error() != Some(libc::ENXIO),
    }
}

/// How long a child may take to call `setsid(2)` after its exec before the start fails.
const LEADER_DEADLINE: Duration = Duration::from_secs(10);

/// Returns once the process `pid` (a child just spawned through `setsid`) leads its own
/// session, or has ended before it could. The kernel announces neither, so `/proc/PID/stat`
/// is read with a growing pause (the wait is normally well under a millisecond).
pub(super) fn await_leader(pid: u32) -> io::Result<()> {
    let deadline = Instant::now() + LEADER_DEADLINE;
    let mut pause = Duration::from_micros(50);
    loop {
        match stat(pid) {
            // Gone (or a zombie): there is nothing left to signal, and its parent reaps it.
            None => return Ok(()),
            Some(Stat {
                state: 'Z' | 'X', ..
            }) => return Ok(()),
            Some(Stat { session, .. }) if session == pid => return Ok(()),
            Some(_) if Instant::now() > deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "process {pid} did not lead a session of its own within {} s of its start",
                        LEADER_DEADLINE.as_secs()
                    ),
                ))
            }
            Some(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
        }
    }
}

struct Stat {
    state: char,
    session: u32,
}

/// The state and session of process `pid`, from `/proc/PID/stat`.
#[allow(
    clippy::disallowed_methods,
    reason = "/proc is the kernel's, nothing a command can change"
)]
fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold anything: the fields follow the last `)`.
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // ppid, pgrp, then the session.
    let session = fields.nth(2)?.parse().ok()?;
    Some(Stat { state, session })
}

/// Fails, as std's spawn would, when `program` is not an executable file: a bare name that
/// `command`'s `PATH` does not lead to, or a path (with a `/`) to nothing executable. Behind
/// the `setsid` program (or bubblewrap) the spawn itself succeeds, and the caller would only
/// see the wrapper exit.
#[allow(
    clippy::disallowed_methods,
    reason = "only asks whether exec would find a program, following links as exec does; nothing is opened"
)]
pub(super) fn check_program(program: &OsStr, command: &std::process::Command) -> io::Result<()> {
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let cwd = || {
        command
            .get_current_dir()
            .map(Path::to_path_buf)
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_default()
    };
    if program.as_encoded_bytes().contains(&b'/') {
        return if executable(&cwd().join(program)) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such program", program.to_string_lossy()),
            ))
        };
    }
    // The environment was cleared, so the child has only the PATH set on the command; without
    // one, exec searches the C library's default.
    let path: OsString = command
        .get_envs()
        .find(|(k, _)| *k == OsStr::new("PATH"))
        .and_then(|(_, v)| v.map(OsStr::to_os_string))
        .unwrap_or_else(|| "/bin:/usr/bin".into());
    let cwd = cwd();
    // An empty entry is the current directory, as for exec.
    let found = std::env::split_paths(&path).any(|dir| executable(&cwd.join(dir).join(program)));
    if found {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}: no such program on PATH ({})",
                program.to_string_lossy(),
                path.to_string_lossy()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_setsid_only_a_process_without_a_terminal_starts_commands() {
        let setsid = Path::new("/usr/bin/setsid");
        assert_eq!(
            choose(Some(setsid), || true).unwrap(),
            Leader::Setsid(setsid.to_path_buf())
        );
        assert_eq!(choose(None, || false).unwrap(), Leader::Group);
        let err = choose(None, || true).unwrap_err();
        assert!(err.to_string().contains("`setsid` program"), "{err}");
    }

    #[test]
    fn a_child_started_through_setsid_leads_its_session_once_awaited() {
        let Ok(Leader::Setsid(setsid)) = leader() else {
            panic!("the tests need the setsid program (util-linux)");
        };
        let mut child = std::process::Command::new(setsid)
            .args(["--", "sleep", "30"])
            .spawn()
            .unwrap();
        await_leader(child.id()).unwrap();
        let own = stat(std::process::id()).unwrap().session;
        let theirs = stat(child.id()).unwrap().session;
        assert_eq!(theirs, child.id());
        assert_ne!(theirs, own);
        child.kill().unwrap();
        child.wait().unwrap();
        // Ended (a zombie until reaped, then gone): no wait.
        let mut done = std::process::Command::new("true").spawn().unwrap();
        done.wait().unwrap();
        await_leader(done.id()).unwrap();
    }

    #[test]
    fn a_bare_program_must_be_on_the_commands_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let mut command = std::process::Command::new("x");
        command.env_clear().env("PATH", dir.path());
        // Not executable yet: exec would refuse it too.
        assert!(check_program(OsStr::new("tool"), &command).is_err());
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_program(OsStr::new("tool"), &command).is_ok());
        let err = check_program(OsStr::new("no-such-tool"), &command).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("no-such-tool"), "{err}");
        // A path must lead to an executable file, relative to the command's directory.
        let err = check_program(OsStr::new("./anything"), &command).unwrap_err();
        assert!(err.to_string().contains("./anything"), "{err}");
        assert!(check_program(tool.as_os_str(), &command).is_ok());
        command.current_dir(dir.path());
        assert!(check_program(OsStr::new("./tool"), &command).is_ok());
        // No PATH at all: the C library's default.
        let mut bare = std::process::Command::new("x");
        bare.env_clear();
        assert!(check_program(OsStr::new("sh"), &bare).is_ok());
    }
}
