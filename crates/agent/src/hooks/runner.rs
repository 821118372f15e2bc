//! Running one hook: `sh -c COMMAND` started the way `exec_command` starts its commands
//! ([`Sandbox::start`]: the session's sandbox, the environment allowlist, a session of its
//! own), the event's JSON on stdin, a timeout, and at most [`OUTPUT_CAP`] bytes kept of each
//! of stdout and stderr however much it prints.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use penguin_tools::Sandbox;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// What is kept of each of a hook's stdout and stderr; the rest is read and dropped, so a
/// hook that prints without end costs no memory (and its timeout ends it).
pub const OUTPUT_CAP: usize = 64 * 1024;

/// A hook that ran to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// Its exit code.
    pub code: i32,
    /// Its stdout (at most [`OUTPUT_CAP`] bytes, lossily UTF-8).
    pub stdout: String,
    /// Its stderr, likewise.
    pub stderr: String,
    /// Whether either was cut at the cap.
    pub truncated: bool,
}

/// Why a hook gave no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HookFailure {
    /// It could not be started (the sandbox refused, no `sh`).
    #[error("could not start: {0}")]
    Start(String),
    /// It ran past its timeout and was killed.
    #[error("timed out after {0} ms")]
    TimedOut(u128),
    /// A signal ended it.
    #[error("killed by signal {0}")]
    Signal(i32),
    /// It exited with a code that is neither an answer (0) nor a block (2).
    #[error("exited with code {code}{}", stderr_note(stderr))]
    Exit {
        /// The exit code.
        code: i32,
        /// What it said on stderr.
        stderr: String,
    },
    /// Its stdout was JSON penguin cannot read as an answer.
    #[error("answered what is not a hook answer: {0}")]
    Garbage(String),
}

fn stderr_note(stderr: &str) -> String {
    let line = stderr.trim().lines().next().unwrap_or("");
    match line.is_empty() {
        true => String::new(),
        false => format!(": {}", clip(line, 200)),
    }
}

/// `s` cut to `max` characters, marked when cut.
pub(crate) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// Runs `command` with `sh -c` in `workspace` under `sandbox`, `stdin` on its stdin, for at
/// most `timeout`. Whatever it started is killed when it ends or times out (its process
/// group), so a hook leaves nothing running.
pub async fn run(
    command: &str,
    stdin: &[u8],
    workspace: &Path,
    sandbox: &Sandbox,
    timeout: Duration,
) -> Result<Finished, HookFailure> {
    let mut child = sandbox
        .start("sh", workspace, |c| {
            c.arg("-c")
                .arg(command)
                .current_dir(workspace)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // Claude Code's scripts find the project here.
                .env("CLAUDE_PROJECT_DIR", workspace)
                .env("PENGUIN_PROJECT_DIR", workspace)
                .kill_on_drop(true);
        })
        .map_err(|e| HookFailure::Start(e.to_string()))?;
    let group = Group(child.id().and_then(|p| i32::try_from(p).ok()));
    let (input, out, err) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let stdout = tokio::spawn(read_capped(out));
    let stderr = tokio::spawn(read_capped(err));
    let stdin = stdin.to_vec();
    let feed = async move {
        if let Some(mut pipe) = input {
            // A hook that does not read its stdin closes it early: not an error.
            let _ = pipe.write_all(&stdin).await;
        }
    };
    let waited = tokio::time::timeout(timeout, async {
        let ((), status) = tokio::join!(feed, child.wait());
        status
    })
    .await;
    // What it left running (a `sleep &`) ends with it, and frees the pipes we read.
    drop(group);
    let status = match waited {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Err(HookFailure::Start(e.to_string())),
        Err(_) => {
            let _ = child.kill().await;
            return Err(HookFailure::TimedOut(timeout.as_millis()));
        }
    };
    let (stdout, out_cut) = stdout.await.unwrap_or_default();
    let (stderr, err_cut) = stderr.await.unwrap_or_default();
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => return Err(HookFailure::Signal(signal)),
        (None, None) => return Err(HookFailure::Signal(0)),
    };
    Ok(Finished {
        code,
        stdout,
        stderr,
        truncated: out_cut || err_cut,
    })
}

/// A hook's process group (the sandbox makes each hook lead its own), killed when this is
/// dropped: at the hook's end, at its timeout, and when the caller stops waiting (an
/// interrupt drops the approval that runs it), so a hook never outlives its answer.
struct Group(Option<i32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // Already gone is fine: nothing is left to end.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Reads a pipe to its end, keeping the first [`OUTPUT_CAP`] bytes; true when more came.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>) -> (String, bool) {
    let Some(mut pipe) = pipe else {
        return (String::new(), false);
    };
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off() -> Sandbox {
        Sandbox::off()
    }

    #[tokio::test]
    async fn a_hook_reads_its_stdin_and_answers_on_stdout_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let done = run(
            "cat; echo oops >&2; exit 2",
            b"{\"a\":1}",
            dir.path(),
            &off(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(done.code, 2);
        assert_eq!(done.stdout, "{\"a\":1}");
        assert_eq!(done.stderr, "oops\n");
        assert!(!done.truncated);
    }

    #[tokio::test]
    async fn ten_megabytes_of_output_keep_only_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let done = run(
            "head -c 10485760 /dev/zero | tr '\\0' x",
            b"",
            dir.path(),
            &off(),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(done.code, 0);
        assert_eq!(done.stdout.len(), OUTPUT_CAP);
        assert!(done.truncated);
    }

    #[tokio::test]
    async fn a_hook_that_hangs_is_killed_at_its_timeout_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let failure = run(
            "sleep 30 & sleep 30",
            b"",
            dir.path(),
            &off(),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
        assert_eq!(failure, HookFailure::TimedOut(300));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_hook_whose_caller_stops_waiting_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        assert!(std::process::Command::new("mkfifo")
            .arg(&ready)
            .status()
            .unwrap()
            .success());
        let hook = tokio::spawn({
            let dir = dir.path().to_path_buf();
            async move {
                let cmd = "sleep 30 & echo $! > bg.pid; echo > ready; wait";
                run(cmd, b"", &dir, &off(), Duration::from_secs(60)).await
            }
        });
        // The hook has started its child once it writes to the FIFO.
        let fifo = ready.clone();
        tokio::task::spawn_blocking(move || std::fs::read(fifo).unwrap())
            .await
            .unwrap();
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // An interrupt drops the future that waits for the hook.
        hook.abort();
        assert!(hook.await.unwrap_err().is_cancelled());
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| !stat.contains(") Z "))
        };
        // SIGKILL was sent when the future dropped; the kernel ends the process at once, and
        // a zombie left for its reaper counts as ended.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!alive(), "the hook's child {pid} outlived it");
    }

    #[tokio::test]
    async fn a_crash_is_a_signal_and_the_project_dir_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let failure = run(
            "kill -SEGV $$",
            b"",
            dir.path(),
            &off(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert_eq!(failure, HookFailure::Signal(11));
        let done = run(
            "echo \"$CLAUDE_PROJECT_DIR\"",
            b"",
            dir.path(),
            &off(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(done.stdout, format!("{}\n", dir.path().display()));
    }
}
