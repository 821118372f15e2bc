//! `run_subagent`, `input_subagent` and `kill_subagent`, and the collect window the first two
//! share.

use std::sync::Arc;
use std::time::Duration;

use penguin_engine::{Approver, CancellationToken, MessageSink, ThinkingLevel, ToolCallRequest};
use penguin_omni_protocol::{build, OmniMessage, StopReason, TextSender};
use penguin_tools::{notes, CallOutput, Limits};
use serde_json::Value;

use super::child::{Child, Exit};
use super::registry::Children;
use super::SubagentSpawner;

/// How long `run_subagent` (and a follow-up prompt) waits for the child by default.
pub const DEFAULT_YIELD: Duration = Duration::from_secs(300);
/// How long an empty `input_subagent` poll waits by default.
pub const DEFAULT_POLL_YIELD: Duration = Duration::from_secs(10);
/// A shorter wait is not worth a round trip.
const MIN_YIELD: Duration = Duration::from_millis(250);
/// The reference's timeout of `run_subagent` and `input_subagent`: a window ends a second
/// before it.
const TOOL_TIMEOUT: Duration = Duration::from_secs(600);
const TIMEOUT_MARGIN: Duration = Duration::from_secs(1);

/// The thinking levels `run_subagent` takes (the reference's selectable tiers: never `none`).
pub const THINKING_LEVELS: [&str; 5] = ["low", "medium", "high", "xhigh", "max"];

/// `thinking_level`: absent or `null` inherits; anything but one of [`THINKING_LEVELS`] is
/// refused with them.
pub(crate) fn thinking_arg(args: &Value) -> Result<Option<ThinkingLevel>, String> {
    match args.get("thinking_level") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if THINKING_LEVELS.contains(&s.as_str()) => {
            s.parse().map(Some).map_err(|e: String| e)
        }
        Some(other) => Err(format!(
            "[run_subagent error: invalid `thinking_level` {other}; use one of {}, or omit it to inherit the parent session's level]",
            THINKING_LEVELS.join(" / ")
        )),
    }
}

pub(crate) const TOO_MANY: &str =
    "[run_subagent error: too many background subagents; poll or finish existing ones first]";

/// `yield_time_ms`, or the default, within [250 ms, timeout - 1 s].
pub(crate) fn yield_time(args: &Value, default: Duration) -> Duration {
    let asked = args
        .get("yield_time_ms")
        .and_then(Value::as_f64)
        .filter(|ms| ms.is_finite())
        .map_or(default, |ms| Duration::from_millis(ms.max(0.0) as u64));
    asked
        .max(MIN_YIELD)
        .min(TOOL_TIMEOUT.saturating_sub(TIMEOUT_MARGIN).max(MIN_YIELD))
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

/// Starts a round of the child with `input`, which goes out first, tagged with the child's
/// origin, so a host sees the prompt before anything the child answers.
async fn send(
    child: &Arc<Child>,
    out: &mut CallOutput<'_>,
    input: OmniMessage,
    request: &ToolCallRequest,
) {
    out.forward(input.clone().with_origin(child.hop())).await;
    // A level chosen at launch holds for every round of the child.
    let level = child.thinking().or(request.thinking_level);
    child.launch(input, request.approver.is_some(), level);
}

/// Forwards what the child has produced: its messages as they are, its answer text as this
/// call's output.
async fn forward(child: &Child, out: &mut CallOutput<'_>) {
    for msg in child.drain_messages() {
        out.forward(msg).await;
    }
    out.text(child.drain_text()).await;
}

/// The collect window: forwards the child's output for up to `yield_for`, while the call's
/// approver answers the child's requests. Ends early when the round ends or `cancel` fires;
/// what to do with a child still running is the caller's.
async fn collect(
    child: &Arc<Child>,
    out: &mut CallOutput<'_>,
    yield_for: Duration,
    cancel: &CancellationToken,
    approver: Option<Arc<dyn Approver>>,
) {
    let _window = approver.map(|a| child.attach_window(a));
    let deadline = tokio::time::Instant::now() + yield_for;
    loop {
        let woken = child.woken();
        tokio::pin!(woken);
        woken.as_mut().enable();
        forward(child, out).await;
        if !child.running() || cancel.is_cancelled() || tokio::time::Instant::now() >= deadline {
            break;
        }
        if child.has_pending() {
            continue;
        }
        tokio::select! {
            () = &mut woken => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = cancel.cancelled() => {}
        }
    }
    forward(child, out).await;
}

/// Kills a child still owned by its call when the call goes away (interrupted, or its future
/// dropped): only a registered child outlives its call.
struct Owned(Option<Arc<Child>>);

impl Owned {
    fn release(&mut self) {
        self.0 = None;
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            child.kill();
        }
    }
}

fn exit_note(exit: Option<Exit>) -> (Option<String>, StopReason) {
    match exit {
        Some(exit) => {
            let status = exit.status();
            (exit.note, status)
        }
        None => (None, StopReason::Completed),
    }
}

pub(crate) async fn run_subagent(
    children: &Children,
    spawner: &dyn SubagentSpawner,
    request: ToolCallRequest,
    limits: &Limits,
    sink: &mut dyn MessageSink,
) {
    let call = request.tool_call().clone();
    let mut out = CallOutput::start(sink, &call.tool_call_id, limits).await;
    let args = match notes::arguments(&call.name, &call.arguments) {
        Ok(args) => args,
        Err(explained) => return out.fail(explained).await,
    };
    let Some(prompt) = string_arg(&args, "prompt").filter(|p| !p.trim().is_empty()) else {
        return out
            .fail("[run_subagent error: missing required string argument `prompt`]".to_owned())
            .await;
    };
    let thinking = match thinking_arg(&args) {
        Ok(level) => level,
        Err(explained) => return out.fail(explained).await,
    };
    let model = match args.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.as_str()),
        Some(other) => {
            return out
                .fail(format!(
                    "[run_subagent error: `model` must be a model name, not {other}]"
                ))
                .await
        }
    };
    let background = args.get("run_in_background").and_then(Value::as_bool) == Some(true);
    let yield_for = yield_time(&args, DEFAULT_YIELD);
    if request.cancel.is_cancelled() {
        return out.interrupted().await;
    }
    if !children.make_room() {
        return out.fail(TOO_MANY.to_owned()).await;
    }
    let session = match spawner.spawn_with(model) {
        Ok(s) => s,
        Err(e) => return out.fail(format!("[run_subagent error: {e}]")).await,
    };
    let child = Child::new(session, prompt, children.hooks.clone());
    if let Some(level) = thinking {
        child.pin_thinking(level);
    }
    let mut owned = Owned(Some(child.clone()));
    out.forward(child.meta()).await;
    let input = build::user_text_from(prompt, TextSender::ParentAgent);
    if let Err(e) = child.claim_round() {
        return out.fail(format!("[run_subagent error: {e}]")).await;
    }

    if background {
        let id = children.register(child.clone());
        owned.release();
        child.arm_report(id.clone());
        // A standing approver: no window will ever be open for a child nobody waits on.
        child.set_standing(request.approver.clone());
        child.go_live();
        // The prompt goes the way the meta went, so a host sees both before the child's
        // first live message.
        send(&child, &mut out, input, &request).await;
        let note = format!(
            "[subagent running in background with subagent_id {id}; its completion will arrive as a user message — no need to poll. Use input_subagent to interact or kill_subagent to stop it]"
        );
        return out.close([note], Vec::new(), StopReason::Completed).await;
    }

    send(&child, &mut out, input, &request).await;
    collect(
        &child,
        &mut out,
        yield_for,
        &request.cancel,
        request.approver.clone(),
    )
    .await;
    if request.cancel.is_cancelled() {
        // Dropping `owned` kills the child: an interrupt during its window ends it.
        return out.interrupted().await;
    }
    if child.running() {
        let id = children.register(child.clone());
        owned.release();
        let note = format!(
            "[subagent running with subagent_id {id}; use input_subagent to poll for progress or send a follow-up prompt]{}",
            child.approval_hint()
        );
        return out.close([note], Vec::new(), StopReason::Completed).await;
    }
    let (note, status) = exit_note(child.exit());
    out.close(note, Vec::new(), status).await;
}

fn unknown(tool: &str, id: &str) -> String {
    format!(
        "[{tool} error: unknown subagent_id {id} (the session may have finished and been cleared)]"
    )
}

/// How `input_subagent` and `kill_subagent` start: the call's output, its arguments, and the
/// kept child its `subagent_id` names; `None` once the call is closed with what was wrong.
async fn kept_child<'a>(
    children: &Children,
    request: &ToolCallRequest,
    limits: &'a Limits,
    sink: &'a mut dyn MessageSink,
) -> Option<(CallOutput<'a>, Value, String, Arc<Child>)> {
    let call = request.tool_call();
    let out = CallOutput::start(sink, &call.tool_call_id, limits).await;
    let args = match notes::arguments(&call.name, &call.arguments) {
        Ok(args) => args,
        Err(explained) => {
            out.fail(explained).await;
            return None;
        }
    };
    let Some(id) = string_arg(&args, "subagent_id").filter(|s| !s.is_empty()) else {
        let missing = format!(
            "Missing required argument \"subagent_id\" for {}.",
            call.name
        );
        out.fail(missing).await;
        return None;
    };
    let id = id.to_owned();
    let Some(child) = children.get(&id) else {
        out.fail(unknown(&call.name, &id)).await;
        return None;
    };
    Some((out, args, id, child))
}

pub(crate) async fn input_subagent(
    children: &Children,
    request: ToolCallRequest,
    limits: &Limits,
    sink: &mut dyn MessageSink,
) {
    let Some((mut out, args, id, child)) = kept_child(children, &request, limits, sink).await
    else {
        return;
    };
    let prompt = string_arg(&args, "prompt").unwrap_or("");
    let poll = prompt.trim().is_empty();
    let yield_for = yield_time(
        &args,
        if poll {
            DEFAULT_POLL_YIELD
        } else {
            DEFAULT_YIELD
        },
    );
    if request.cancel.is_cancelled() {
        return out.interrupted().await;
    }
    if !poll {
        if child.running() {
            return out
                .fail(format!("[input_subagent error: subagent {id} is still running; poll with an empty prompt to collect progress first]"))
                .await;
        }
        if let Err(e) = child.claim_round() {
            return out.fail(format!("[input_subagent error: {e}]")).await;
        }
        if child.reports() {
            // A background child's later rounds run past this call too.
            child.set_standing(request.approver.clone());
        }
        let input = build::user_text_from(prompt, TextSender::ParentAgent);
        send(&child, &mut out, input, &request).await;
    }
    collect(
        &child,
        &mut out,
        yield_for,
        &request.cancel,
        request.approver.clone(),
    )
    .await;
    // An interrupt ends this look only: the child was launched earlier and keeps running.
    if request.cancel.is_cancelled() {
        return out.interrupted().await;
    }
    if child.running() {
        let note = format!(
            "[subagent still running with subagent_id {id}]{}",
            child.approval_hint()
        );
        return out.close([note], Vec::new(), StopReason::Completed).await;
    }
    let (note, status) = exit_note(child.exit());
    let idle =
        format!("[subagent idle with subagent_id {id}; send a follow-up prompt to continue]");
    let note = match note {
        Some(n) => format!("{n} {idle}"),
        None => idle,
    };
    out.close([note], Vec::new(), status).await;
}

pub(crate) async fn kill_subagent(
    children: &Children,
    request: ToolCallRequest,
    limits: &Limits,
    sink: &mut dyn MessageSink,
) {
    let Some((mut out, _, id, child)) = kept_child(children, &request, limits, sink).await else {
        return;
    };
    // The killer reads the outcome here: the kill sends no report.
    child.disarm_report();
    out.text(child.drain_text()).await;
    let was_running = child.running();
    children.remove(&id);
    let note = if was_running {
        format!("[subagent {id} aborted and removed; its own trace keeps the work done so far]")
    } else {
        format!("[subagent {id} was idle; session removed]")
    };
    out.close([note], Vec::new(), StopReason::Completed).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_thinking_level_is_one_of_the_tiers_or_inherited() {
        assert_eq!(thinking_arg(&json!({})), Ok(None));
        assert_eq!(thinking_arg(&json!({"thinking_level": null})), Ok(None));
        assert_eq!(
            thinking_arg(&json!({"thinking_level": "xhigh"})),
            Ok(Some(ThinkingLevel::Xhigh))
        );
        for wrong in [json!("none"), json!("HIGH"), json!(3)] {
            let err = thinking_arg(&json!({ "thinking_level": wrong })).unwrap_err();
            assert!(
                err.ends_with("use one of low / medium / high / xhigh / max, or omit it to inherit the parent session's level]"),
                "{err}"
            );
        }
    }

    #[test]
    fn windows_are_clamped_between_a_quarter_second_and_the_tool_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(yield_time(&json!({}), DEFAULT_YIELD), DEFAULT_YIELD);
        assert_eq!(
            yield_time(&json!({"yield_time_ms": 10}), DEFAULT_YIELD),
            ms(250)
        );
        assert_eq!(
            yield_time(&json!({"yield_time_ms": 1500}), DEFAULT_YIELD),
            ms(1500)
        );
        assert_eq!(
            yield_time(&json!({"yield_time_ms": 10_000_000}), DEFAULT_YIELD),
            ms(599_000)
        );
        assert_eq!(
            yield_time(&json!({"yield_time_ms": "soon"}), DEFAULT_POLL_YIELD),
            DEFAULT_POLL_YIELD
        );
    }
}
