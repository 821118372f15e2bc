//! A scripted Environment and approver: the `tools` and `approvals` parts of a scenario file
//! (`docs/scenario-format.md`).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use penguin_llm_providers::scripted::{
    check_keys, parse_steps, play, OpenSegments, Played, ScriptError, Step,
};
use penguin_llm_providers::MessageSink;
use penguin_omni_protocol::{
    build, ApprovalDecision, ModelPayload, OmniMessage, StopReason, ToolDefinition,
};
use serde_json::Value;

use crate::environment::{
    ApprovalError, Approver, Environment, Permission, ToolCallRequest, Verdict,
};

/// Plays each tool call's script, keyed by tool_call_id.
#[derive(Debug, Default, Clone)]
pub struct ScriptedEnvironment {
    scripts: HashMap<String, Vec<Step>>,
}

impl ScriptedEnvironment {
    /// An environment playing `scripts`.
    pub fn new(scripts: HashMap<String, Vec<Step>>) -> ScriptedEnvironment {
        ScriptedEnvironment { scripts }
    }

    /// Parses a scenario's `tools` object: `{tool_call_id: {stream: [...]}}`.
    pub fn from_json(tools: &Value) -> Result<ScriptedEnvironment, ScriptError> {
        let obj = tools
            .as_object()
            .ok_or_else(|| ScriptError::new("tools", "expected an object keyed by tool_call_id"))?;
        let mut scripts = HashMap::new();
        for (id, script) in obj {
            let path = format!("tools.{id}");
            let script = script
                .as_object()
                .ok_or_else(|| ScriptError::new(&path, "expected an object {stream}"))?;
            check_keys(script, &path, &["stream"])?;
            let stream = script
                .get("stream")
                .ok_or_else(|| ScriptError::new(format!("{path}.stream"), "missing"))?;
            scripts.insert(id.clone(), parse_steps(stream, &format!("{path}.stream"))?);
        }
        Ok(ScriptedEnvironment { scripts })
    }
}

#[async_trait]
impl Environment for ScriptedEnvironment {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let id = request.tool_call().tool_call_id.clone();
        let Some(steps) = self.scripts.get(&id) else {
            sink.emit(build::tool_call_output(
                "unscripted tool call",
                id,
                StopReason::Failed,
            ))
            .await;
            return;
        };
        let mut open = OpenSegments::default();
        // The output streamed so far, for the aborted close-out.
        let mut streamed = String::new();
        let accumulate = |msg: &OmniMessage| {
            if let Some(ModelPayload::PartialToolCallOutput(p)) = msg.model() {
                streamed.push_str(&p.output);
            }
        };
        if play(
            steps.iter().cloned(),
            &request.cancel,
            &mut open,
            sink,
            accumulate,
        )
        .await
            == Played::Aborted
        {
            // As in the reference: any open segment is closed instead of answering with the
            // streamed output; only a tool with nothing open answers itself.
            if open.any_open() {
                for msg in open.close_all(StopReason::Aborted) {
                    sink.emit_closure(msg).await;
                }
            } else {
                sink.emit(build::tool_call_output(streamed, id, StopReason::Aborted))
                    .await;
            }
        }
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    /// Scripts stand in for penguin's built-in tools, so they report the same permissions:
    /// `read_file` only reads; anything else may write.
    fn permission(&self, name: &str) -> Permission {
        if name == "read_file" {
            Permission::Read
        } else {
            Permission::ReadWrite
        }
    }
}

/// One scripted answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptedDecision {
    /// Answer with this decision.
    Decide(ApprovalDecision),
    /// The approver fails (the engine must treat it as deny).
    Throw,
}

/// Answers approvals from a scenario's `approvals` object.
#[derive(Clone, Debug)]
pub struct ScriptedApprover {
    default: (ScriptedDecision, Option<Duration>),
    by_id: HashMap<String, (ScriptedDecision, Option<Duration>)>,
    /// Decisions a hook made (`"hook"` in the object form), by call id; `""`: the default's.
    hooks: HashMap<String, HookAnswer>,
}

/// A hook's scripted answer: who decided, why, and the arguments the call runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HookAnswer {
    hook: String,
    reason: Option<String>,
    updated_arguments: Option<String>,
}

impl ScriptedApprover {
    /// Parses `{"default": D, "by_id": {id: D | {"decision": D, "delay_ms": N}}}`.
    pub fn from_json(approvals: &Value) -> Result<ScriptedApprover, ScriptError> {
        let obj = approvals
            .as_object()
            .ok_or_else(|| ScriptError::new("approvals", "expected an object"))?;
        check_keys(obj, "approvals", &["default", "by_id"])?;
        let default = match obj.get("default") {
            None | Some(Value::Null) => (ScriptedDecision::Decide(ApprovalDecision::Deny), None),
            Some(v) => parse_decision(v, "approvals.default")?,
        };
        let mut hooks = HashMap::new();
        if let Some(hook) = obj.get("default").and_then(parse_hook) {
            hooks.insert(String::new(), hook);
        }
        let mut by_id = HashMap::new();
        if let Some(map) = obj.get("by_id").filter(|v| !v.is_null()) {
            let map = map
                .as_object()
                .ok_or_else(|| ScriptError::new("approvals.by_id", "expected an object"))?;
            // A null entry falls back to the default, as the reference's `??` does.
            for (id, v) in map.iter().filter(|(_, v)| !v.is_null()) {
                by_id.insert(
                    id.clone(),
                    parse_decision(v, &format!("approvals.by_id.{id}"))?,
                );
                if let Some(hook) = parse_hook(v) {
                    hooks.insert(id.clone(), hook);
                }
            }
        }
        Ok(ScriptedApprover {
            default,
            by_id,
            hooks,
        })
    }
}

/// The hook of a decision's object form (`"hook"`, with `"reason"` and `"updated_arguments"`),
/// so a scenario replays what a `pre_tool_use` hook decided.
fn parse_hook(v: &Value) -> Option<HookAnswer> {
    let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    Some(HookAnswer {
        hook: text("hook")?,
        reason: text("reason"),
        updated_arguments: text("updated_arguments"),
    })
}

/// A decision, and the delay of the object form (absent for a bare decision string).
fn parse_decision(
    v: &Value,
    path: &str,
) -> Result<(ScriptedDecision, Option<Duration>), ScriptError> {
    let (word, delay) = match v {
        Value::String(s) => (s.as_str(), None),
        Value::Object(o) => {
            check_keys(
                o,
                path,
                &[
                    "decision",
                    "delay_ms",
                    "hook",
                    "reason",
                    "updated_arguments",
                ],
            )?;
            let word = o.get("decision").and_then(Value::as_str).ok_or_else(|| {
                ScriptError::new(format!("{path}.decision"), "missing or not a string")
            })?;
            let delay = match o.get("delay_ms") {
                None => 0,
                Some(d) => d.as_u64().ok_or_else(|| {
                    ScriptError::new(
                        format!("{path}.delay_ms"),
                        "expected a non-negative integer",
                    )
                })?,
            };
            (word, Some(Duration::from_millis(delay)))
        }
        _ => {
            return Err(ScriptError::new(
                path,
                "expected a decision string or {decision, delay_ms}",
            ))
        }
    };
    let decision = match word {
        "throw" => ScriptedDecision::Throw,
        other => ScriptedDecision::Decide(
            other
                .parse()
                .map_err(|e: String| ScriptError::new(path, format!("{e} or throw")))?,
        ),
    };
    Ok((decision, delay))
}

#[async_trait]
impl Approver for ScriptedApprover {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        let id = call.tool_call_id().unwrap_or_default();
        let (decision, delay) = self.by_id.get(id).copied().unwrap_or(self.default);
        if let Some(delay) = delay {
            // The reference answers a delayed decision from a timer, and a timer never fires
            // at the instant it was set: node runs it 1 ms later at the earliest.
            tokio::time::sleep(delay.max(Duration::from_millis(1))).await;
            // A timer of the run due at this same instant (its interrupt) was set before this
            // one and goes first in the reference; let it.
            tokio::task::yield_now().await;
        }
        match decision {
            ScriptedDecision::Decide(d) => Ok(d),
            ScriptedDecision::Throw => Err(ApprovalError::Unavailable(format!(
                "scripted approver throws for {id}"
            ))),
        }
    }

    async fn verdict(&self, call: &OmniMessage) -> Result<Verdict, ApprovalError> {
        let decision = self.approve(call).await?;
        let id = call.tool_call_id().unwrap_or_default();
        let hook = match self.by_id.contains_key(id) {
            true => self.hooks.get(id),
            false => self.hooks.get(""),
        };
        Ok(match hook {
            Some(h) => Verdict::by(decision, format!("hook:{}", h.hook), h.reason.clone())
                .with_updated_arguments(h.updated_arguments.clone()),
            None => decision.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> OmniMessage {
        build::tool_call("write_file", "{}", id, StopReason::Completed, None)
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_fall_back_like_the_reference() {
        let approver = ScriptedApprover::from_json(
            &json!({"default": "allow", "by_id": {"a": null, "b": "forbidden"}}),
        )
        .unwrap();
        assert_eq!(
            approver.approve(&call("a")).await,
            Ok(ApprovalDecision::Allow)
        );
        assert_eq!(
            approver.approve(&call("b")).await,
            Ok(ApprovalDecision::Forbidden)
        );
        let silent = ScriptedApprover::from_json(&json!({})).unwrap();
        assert_eq!(silent.approve(&call("a")).await, Ok(ApprovalDecision::Deny));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_decision_never_answers_at_once() {
        let approver =
            ScriptedApprover::from_json(&json!({"default": {"decision": "deny", "delay_ms": 0}}))
                .unwrap();
        let start = tokio::time::Instant::now();
        assert_eq!(
            approver.approve(&call("a")).await,
            Ok(ApprovalDecision::Deny)
        );
        assert_eq!(start.elapsed(), Duration::from_millis(1));
    }
}
