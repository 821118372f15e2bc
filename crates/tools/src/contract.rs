//! The execution wrapper: turns any [`Tool`] into a stream that honours protocol
//! [§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out*, whatever the tool does (finishes,
//! fails, panics, hangs, floods).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use penguin_engine::{CancellationToken, MessageSink};
use penguin_omni_protocol::{StopReason, ToolCall};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::call_output::CallOutput;
pub use crate::call_output::Limits;
use crate::notes;

/// How many chunks a tool may run ahead of the sink before its `emit` waits: keeps a flooding
/// command from buffering unbounded output in memory.
const CHANNEL_DEPTH: usize = 64;

/// What a tool reports when it finishes on its own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutcome {
    /// A note such as `[exit code: 2]`, written after the content.
    pub note: Option<String>,
    /// The tool's own stop reason; `None` means completed.
    pub stop: Option<StopReason>,
    /// `data:<mime>;base64,...` URLs, delivered only when the call completes.
    pub images: Vec<String>,
}

/// `Err` is the reference's "the tool threw": it becomes `[tool error] <msg>`.
pub type ToolResult = Result<ToolOutcome, String>;

/// Where a running tool sends its output, chunk by chunk: the wrapper streams it as
/// `partial_tool_call_output` deltas, caps it, archives what the cap cuts, and closes the call.
#[derive(Debug)]
pub struct Output {
    tx: mpsc::Sender<String>,
    timeout: Option<Duration>,
}

impl Output {
    /// The call's effective timeout, so a tool can hand back before it fires.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Sends one chunk; waits while the sink is behind.
    pub async fn emit(&self, chunk: impl Into<String>) {
        let chunk = chunk.into();
        if !chunk.is_empty() {
            // A send only fails once the wrapper stopped listening, when nothing matters anymore.
            let _ = self.tx.send(chunk).await;
        }
    }
}

/// One executable tool, already bound to its workspace: what a built-in tool is, and what a tool of
/// one's own implements to join them ([`BuiltinTools::with_tool`](crate::BuiltinTools::with_tool)).
///
/// The wrapper around it keeps the contract whatever the tool does: the call's timeout, the
/// user's interrupt, a panic, output past the cap, and exactly one complete output. It may drop
/// `run`'s future at any await point (interrupt or timeout), so a tool that owns external
/// resources must release them on drop.
#[async_trait]
pub trait Tool: Send + Sync {
    /// A per-call timeout requested by the arguments, replacing the configured one.
    fn timeout_override(&self, _args: &Value) -> Option<Duration> {
        None
    }

    /// Runs the call, streaming its content through `out`.
    async fn run(&self, args: Value, out: Output) -> ToolResult;
}

/// Executes one call and closes it out: start, deltas, stop, exactly one complete output.
pub(crate) async fn execute(
    tool: Option<&dyn Tool>,
    call: &ToolCall,
    cancel: &CancellationToken,
    limits: &Limits,
    sink: &mut dyn MessageSink,
) {
    let id = call.tool_call_id.as_str();
    let mut out = CallOutput::start(sink, id, limits).await;
    let Some(tool) = tool else {
        return out.fail(notes::unknown_tool(&call.name)).await;
    };
    let args = match notes::arguments(&call.name, &call.arguments) {
        Ok(args) => args,
        Err(text) => return out.fail(text).await,
    };
    // The model may ask for a shorter timeout, never a longer one than the operator set.
    let timeout = match (tool.timeout_override(&args), limits.timeout) {
        (Some(asked), Some(limit)) => Some(asked.min(limit)),
        (asked, limit) => asked.or(limit),
    }
    .filter(|t| !t.is_zero());

    let (tx, mut rx) = mpsc::channel(CHANNEL_DEPTH);
    let mut running =
        Box::pin(AssertUnwindSafe(tool.run(args, Output { tx, timeout })).catch_unwind());
    let mut deadline = Box::pin(async move {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    });
    let end = loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break End::Aborted,
            () = &mut deadline => break End::TimedOut,
            Some(chunk) = rx.recv() => out.text(chunk).await,
            res = &mut running => break End::Finished(res),
        }
    };
    // Dropping the tool is how interrupt and timeout stop it (its resources clean up on
    // drop); it also drops the sender, so the drain below sees everything sent before.
    drop(running);
    while let Ok(chunk) = rx.try_recv() {
        out.text(chunk).await;
    }

    let timed_out = matches!(end, End::TimedOut);
    let user_aborted = matches!(end, End::Aborted);
    let (outcome, thrown) = match end {
        End::Finished(Ok(Ok(outcome))) => (outcome, None),
        End::Finished(Ok(Err(msg))) => (ToolOutcome::default(), Some(msg)),
        End::Finished(Err(panic)) => (
            ToolOutcome::default(),
            Some(format!("tool panicked: {}", panic_message(&*panic))),
        ),
        End::Aborted | End::TimedOut => (ToolOutcome::default(), None),
    };
    let stop = if user_aborted || (!timed_out && outcome.stop == Some(StopReason::Aborted)) {
        StopReason::Aborted
    } else if timed_out || thrown.is_some() {
        StopReason::Failed
    } else {
        outcome.stop.unwrap_or(StopReason::Completed)
    };

    let mut lines: Vec<String> = outcome.note.into_iter().collect();
    if stop == StopReason::Aborted {
        lines.push(notes::INTERRUPTED.to_owned());
    } else if timed_out {
        let ms = timeout.map_or(0, |t| t.as_millis());
        lines.push(notes::timeout(ms));
    } else if let Some(msg) = thrown {
        lines.push(notes::tool_error(&msg));
    }
    let images = if stop == StopReason::Completed {
        outcome.images
    } else {
        Vec::new()
    };
    out.close(lines, images, stop).await;
}

enum End {
    Aborted,
    TimedOut,
    Finished(Result<ToolResult, Box<dyn Any + Send>>),
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests;
