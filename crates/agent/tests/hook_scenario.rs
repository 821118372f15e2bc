//! A scenario file declares what a `pre_tool_use` hook answered (`approvals.by_id.ID.hook`),
//! so a hook's effect replays on the paused clock like any scripted approval: the decision
//! names the hook, a deny's synthetic output carries its reason, and the stream keeps every
//! ordering guarantee (`StreamValidator`).
#![cfg(feature = "scenario")]

use penguin_agent::scenario::{run_scenario_blocking, Scenario};
use penguin_omni_protocol::validator::StreamValidator;
use penguin_omni_protocol::{Body, EventPayload, ModelPayload};
use serde_json::{json, Value};

#[test]
fn a_scenario_replays_a_hooks_deny_and_rewrite() {
    // Two calls, a rewrite and a deny, both decided by hooks; then the model answers.
    let step = |payload: Value| {
        let kind = match payload["type"] == "token_usage" {
            true => "event_msg",
            false => "model_msg",
        };
        json!({"delay_ms": 2, "message": {"type": kind, "payload": payload}})
    };
    let call = |id: &str, cmd: &str| {
        step(
            json!({"type": "tool_call", "role": "assistant", "name": "exec_command",
            "arguments": json!({"cmd": cmd}).to_string(), "tool_call_id": id,
            "stop_reason": "completed"}),
        )
    };
    let usage = |total: u64| {
        let counts =
            json!({"cache_read": 0, "cache_write": total - 5, "output": 5, "total": total});
        step(json!({"type": "token_usage", "session": counts, "request": counts}))
    };
    let scenario = json!({
        "approvals": {
            "default": "allow",
            "by_id": {
                "call_1": {"decision": "allow", "hook": "rewrite.sh", "updated_arguments": "{\"cmd\":\"ls -la\"}"},
                "call_2": {"decision": "deny", "hook": "no-rm.sh", "reason": "rm -rf is not allowed here"}
            }
        },
        "llm": [
            {"stream": [call("call_1", "ls"), call("call_2", "rm -rf /"), usage(90)]},
            {"stream": [
                step(json!({"type": "text", "role": "assistant", "text": "Listed.", "stop_reason": "completed"})),
                usage(210)
            ]}
        ],
        "tools": {"call_1": {"stream": [step(json!({"type": "tool_call_output", "role": "user",
            "output": "a b c", "tool_call_id": "call_1", "stop_reason": "completed"}))]}},
        "runs": [{"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "list then delete"}}]}]
    });
    let scenario = Scenario::parse(&scenario.to_string()).unwrap();
    let out = run_scenario_blocking(scenario).unwrap();
    let mut validator = StreamValidator::new();
    let mut violations = Vec::new();
    for frame in &out.stream {
        violations.extend(validator.push(frame.message()));
    }
    violations.extend(validator.finish());
    assert!(violations.is_empty(), "{violations:?}");
    let decisions: Vec<_> = out
        .stream
        .iter()
        .filter_map(|f| match &f.message().body {
            Body::Event(EventPayload::ApprovalDecision {
                decision,
                tool_call_id,
                decided_by,
                reason,
                updated_arguments,
            }) => Some((
                decision.as_str(),
                tool_call_id.as_str(),
                decided_by.as_deref(),
                reason.as_deref(),
                updated_arguments.as_deref(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            (
                "allow",
                "call_1",
                Some("hook:rewrite.sh"),
                None,
                Some("{\"cmd\":\"ls -la\"}")
            ),
            (
                "deny",
                "call_2",
                Some("hook:no-rm.sh"),
                Some("rm -rf is not allowed here"),
                None
            ),
        ]
    );
    let denial = out
        .stream
        .iter()
        .find_map(|f| match f.message().model() {
            Some(ModelPayload::ToolCallOutput(o)) if o.tool_call_id == "call_2" => {
                Some(o.output.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(
        denial,
        "Tool call denied by hook:no-rm.sh: rm -rf is not allowed here"
    );
    // The Trace has the decision with its hook, as streamed.
    assert!(out
        .trace_lines()
        .iter()
        .any(|l| l.contains("\"decided_by\":\"hook:no-rm.sh\"")));
}
