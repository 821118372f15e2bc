//! The hooks around a run: `session_start` (the first run of a load) and `user_prompt_submit`
//! before the engine starts, `stop` after it ends. One stream carries it all; a `stop` hook
//! that keeps the task going starts one more run on it.
//!
//! Positions in the protocol: context from the first two is a harness text after the prompt,
//! in the run's input (written with it, never streamed, [§2.13](penguin_omni_protocol::spec#s2.13));
//! a blocked prompt streams one `abort` naming the hook and writes nothing, so the model never
//! sees it; a `stop` hook's reason is a `[hook_stop]` notice, streamed and written as the
//! next run's input is assembled ([§2.11](penguin_omni_protocol::spec#s2.11)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::stream::{BoxStream, StreamExt};
use futures::SinkExt;
use penguin_engine::{EngineBusy, RunOptions};
use penguin_omni_protocol::markers::marker_block;
use penguin_omni_protocol::{
    build, Body, EventPayload, Frame, ModelPayload, OmniMessage, Role, StreamEventType, TextSender,
};
use serde_json::json;

use super::{context_notice, HookEvent, Hooks};

/// Starts one engine run (the session's own start, policy and approver included).
pub(crate) type Start = Arc<
    dyn Fn(Vec<OmniMessage>, RunOptions) -> Result<BoxStream<'static, Frame>, EngineBusy>
        + Send
        + Sync,
>;

/// Marks the hooks idle when the driving task ends, before its stream does.
struct Idle(Hooks);

impl Drop for Idle {
    fn drop(&mut self) {
        self.0.inner.busy.store(false, Ordering::Release);
    }
}

/// The run of `input`, with the hooks of its life around it. Must be called inside a tokio
/// runtime. Dropping the stream interrupts it, as dropping an engine run's does.
pub(crate) fn drive(
    hooks: Hooks,
    input: Vec<OmniMessage>,
    options: RunOptions,
    start: Start,
) -> BoxStream<'static, Frame> {
    hooks.inner.busy.store(true, Ordering::Release);
    let (tx, rx) = mpsc::channel::<Frame>(16);
    tokio::spawn(async move {
        let mut tx = tx;
        // Declared after the sender, so dropped before it: idle before the stream ends.
        let _idle = Idle(hooks.clone());
        let resumed = hooks.inner.resumed.load(Ordering::Acquire);
        let prompt = input.clone();
        let decided = tokio::select! {
            biased;
            // Interrupted while the hooks ran: the engine takes the prompt as it takes any
            // interrupted one (written, kept as carry-over, `abort` streamed).
            () = options.cancel.cancelled() => Ok(prompt),
            decided = before(&hooks, input, resumed) => decided,
        };
        let input = match decided {
            Ok(input) => input,
            Err(reason) => {
                let _ = tx.send(Frame::new(build::abort(Some(reason)))).await;
                return;
            }
        };
        let mut run = match start(input, options.clone()) {
            Ok(run) => run,
            Err(EngineBusy) => {
                let _ = tx
                    .send(Frame::new(build::abort(Some(EngineBusy.to_string()))))
                    .await;
                return;
            }
        };
        let mut continued = 0;
        loop {
            let mut aborted = false;
            // What the model answered in this run: a subagent's `subagent_output`.
            let mut answered = String::new();
            while let Some(frame) = run.next().await {
                let msg = frame.message();
                aborted = matches!(msg.body, Body::Event(EventPayload::Abort { .. }));
                if let Some(ModelPayload::PartialText(t)) = msg.model() {
                    let own = !msg.has_origin() && t.role == Role::Assistant;
                    if own && t.event_type == StreamEventType::Delta {
                        answered.push_str(&t.text);
                    }
                }
                if tx.send(frame).await.is_err() {
                    // The reader is gone: dropping `run` interrupts the engine.
                    return;
                }
            }
            if aborted || options.cancel.is_cancelled() {
                return;
            }
            let verdict = tokio::select! {
                biased;
                () = options.cancel.cancelled() => None,
                verdict = stop(&hooks, continued, &answered) => verdict,
            };
            let Some(reason) = verdict else {
                return;
            };
            continued += 1;
            hooks.notify(build::user_text_from(
                marker_block(
                    "hook_stop",
                    &format!(
                        "The user's {} hook keeps the task going:\n{reason}",
                        hooks.stop_event()
                    ),
                ),
                TextSender::Harness,
            ));
            run = match start(Vec::new(), options.clone()) {
                Ok(run) => run,
                Err(EngineBusy) => return,
            };
        }
    });
    rx.boxed()
}

/// `session_start` (once per load) and `user_prompt_submit`: the input with their context
/// after it, or why the prompt is refused.
async fn before(
    hooks: &Hooks,
    mut input: Vec<OmniMessage>,
    resumed: bool,
) -> Result<Vec<OmniMessage>, String> {
    let first = !hooks.inner.started.swap(true, Ordering::AcqRel);
    if first && hooks.has(HookEvent::SessionStart) {
        let source = if resumed { "resume" } else { "startup" };
        let results = hooks
            .run(HookEvent::SessionStart, json!({"source": source}), |_| true)
            .await;
        for r in results {
            match r.answer {
                Err(e) => hooks.failed(&r.hook, &e),
                Ok(a) => input.extend(a.context.map(|c| context_notice(&r.hook, &c))),
            }
        }
    }
    if !hooks.has(HookEvent::UserPromptSubmit) {
        return Ok(input);
    }
    let prompt = prompt_of(&input);
    let results = hooks
        .run(
            HookEvent::UserPromptSubmit,
            json!({"prompt": prompt}),
            |_| true,
        )
        .await;
    for r in results {
        let answer = match r.answer {
            Ok(answer) => answer,
            Err(e) => {
                hooks.failed(&r.hook, &e);
                continue;
            }
        };
        if let Some(reason) = answer.block.or(answer.halt) {
            return Err(format!("prompt blocked by {}: {reason}", r.hook.name()));
        }
        input.extend(answer.context.map(|c| context_notice(&r.hook, &c)));
    }
    Ok(input)
}

/// The user's words of an input: its user texts, joined.
fn prompt_of(input: &[OmniMessage]) -> String {
    input
        .iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::Text(t)) if t.role == Role::User && t.sender.is_none() => {
                Some(t.text.as_str())
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The `stop` hooks' verdict after a run (a subagent's `subagent_stop` hooks, given what it
/// `answered`): the reason to keep going, if one blocks and the bound allows it.
async fn stop(hooks: &Hooks, continued: u32, answered: &str) -> Option<String> {
    let event = hooks.stop_event();
    if !hooks.has(event) {
        return None;
    }
    let mut fields = json!({"stop_hook_active": continued > 0});
    if event == HookEvent::SubagentStop {
        fields["subagent_output"] = json!(answered);
    }
    let results = hooks.run(event, fields, |_| true).await;
    for r in results {
        let answer = match r.answer {
            Ok(answer) => answer,
            Err(e) => {
                hooks.failed(&r.hook, &e);
                continue;
            }
        };
        if answer.halt.is_some() {
            return None;
        }
        let Some(reason) = answer.block else {
            continue;
        };
        if continued >= hooks.inner.max_stop {
            // Bounded: a hook that always says "keep going" cannot loop for ever.
            hooks.tell(&format!(
                "{event} hook `{}` asked to keep going again ({reason}); the task stops after {continued} continuation(s) (hooks.max_stop_continuations)",
                r.hook.command
            ));
            return None;
        }
        return Some(reason);
    }
    None
}
