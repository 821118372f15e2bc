//! `exec_command`: `sh -c CMD` in the workspace, in its own process group, under the session's
//! sandbox.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::contract::{Output, Tool, ToolOutcome, ToolResult};
use crate::notes;
use crate::sandbox::{DenialScan, Sandbox};
use penguin_omni_protocol::StopReason;

/// How long to keep reading after the shell exited and its group was killed. Output already
/// in the pipes is read well within it; only a process that left the group (setsid) and still
/// holds the pipe makes us wait this long before we stop reading.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

#[derive(Deserialize)]
struct Args {
    cmd: String,
    #[serde(default)]
    #[expect(
        dead_code,
        reason = "parsed only to reject a malformed value; the wrapper applies it"
    )]
    timeout_ms: Option<u64>,
}

/// The `exec_command` tool bound to a workspace root.
#[derive(Debug)]
pub(crate) struct ExecCommand {
    pub root: PathBuf,
    /// Confines the command; [`Sandbox::off`] for a call allowed to run outside it.
    pub sandbox: Sandbox,
}

/// Kills the process group with SIGKILL, at the latest when dropped: the wrapper drops a
/// running tool to interrupt it, and this is what takes the whole tree down with it.
struct GroupKill(Option<Pid>);

impl GroupKill {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (everyone already gone) is the normal case after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Decodes a byte stream as UTF-8 across chunk boundaries; invalid bytes become U+FFFD.
#[derive(Default)]
struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete sequence at the end: wait for the next chunk.
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[async_trait]
impl Tool for ExecCommand {
    fn timeout_override(&self, args: &Value) -> Option<Duration> {
        args.get("timeout_ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis)
    }

    async fn run(&self, args: Value, out: Output) -> ToolResult {
        let Args { cmd, .. } = serde_json::from_value(args)
            .map_err(|e| format!("invalid arguments for exec_command: {e}"))?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(&cmd)
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = self
            .sandbox
            .spawn(&mut command, &self.root)
            .map_err(|e| format!("failed to start sh: {e}"))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or("the shell exited before it could be tracked")?;
        let mut group = GroupKill(Some(Pid::from_raw(pid)));
        let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take())
        else {
            return Err("the shell's output pipes are missing".to_owned());
        };

        let (mut out_buf, mut err_buf) = (vec![0u8; 8192], vec![0u8; 8192]);
        let (mut out_dec, mut err_dec) = (Utf8Stream::default(), Utf8Stream::default());
        let (mut out_scan, mut err_scan) = (DenialScan::default(), DenialScan::default());
        let (mut out_open, mut err_open) = (true, true);
        let mut status = None;
        let drain = tokio::time::sleep(Duration::from_secs(86_400));
        tokio::pin!(drain);
        while out_open || err_open || status.is_none() {
            tokio::select! {
                r = stdout.read(&mut out_buf), if out_open => match r {
                    Ok(n) if n > 0 => {
                        let text = out_dec.push(&out_buf[..n]);
                        out_scan.push(&text);
                        out.emit(text).await;
                    }
                    _ => out_open = false,
                },
                r = stderr.read(&mut err_buf), if err_open => match r {
                    Ok(n) if n > 0 => {
                        let text = err_dec.push(&err_buf[..n]);
                        err_scan.push(&text);
                        out.emit(text).await;
                    }
                    _ => err_open = false,
                },
                st = child.wait(), if status.is_none() => {
                    status = Some(st.map_err(|e| format!("waiting for the shell failed: {e}"))?);
                    // Background jobs the command left behind would keep the pipes open
                    // forever; they go down with the group, and we read what is left.
                    group.kill();
                    drain.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
                },
                () = &mut drain, if status.is_some() => break,
            }
        }
        for (dec, scan) in [(&mut out_dec, &mut out_scan), (&mut err_dec, &mut err_scan)] {
            let text = dec.finish();
            scan.push(&text);
            scan.finish();
            out.emit(text).await;
        }
        out_scan.merge(err_scan);

        let Some(status) = status else {
            return Err("the shell's exit status is missing".to_owned());
        };
        let mut outcome = match (status.code(), status.signal()) {
            (Some(0), _) => ToolOutcome::default(),
            (Some(code), _) => ToolOutcome {
                note: Some(notes::exit_code(code)),
                stop: Some(StopReason::Failed),
                images: Vec::new(),
            },
            (None, Some(signal)) => ToolOutcome {
                note: Some(notes::exit_signal(signal)),
                stop: Some(StopReason::Failed),
                images: Vec::new(),
            },
            (None, None) => ToolOutcome {
                note: Some(notes::EXIT_STATUS_UNKNOWN.to_owned()),
                stop: Some(StopReason::Failed),
                images: Vec::new(),
            },
        };
        // Only a failed command gets the note: one that recovered from a refusal needs no help.
        if outcome.stop.is_some() {
            if let Some(denial) = self.sandbox.denial_note(&out_scan, &self.root) {
                outcome.note = Some(match outcome.note {
                    Some(note) => format!("{note}\n{denial}"),
                    None => denial,
                });
            }
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    #[test]
    fn utf8_is_decoded_across_chunk_boundaries() {
        let bytes = "héllo €".as_bytes();
        let mut dec = Utf8Stream::default();
        let mut text = String::new();
        for b in bytes {
            text.push_str(&dec.push(std::slice::from_ref(b)));
        }
        text.push_str(&dec.finish());
        assert_eq!(text, "héllo €");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut dec = Utf8Stream::default();
        let mut text = dec.push(b"a\xffb\xe2\x82");
        text.push_str(&dec.finish());
        assert_eq!(text, "a\u{fffd}b\u{fffd}");
    }
}
