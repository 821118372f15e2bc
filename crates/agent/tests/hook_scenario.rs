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
    // The conformance scenario of a denied call, with its decisions made by hooks.
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/scenarios/deny-one.json"
    ));
    let mut scenario: Value = serde_json::from_str(text).unwrap();
    scenario["approvals"] = json!({
        "default": "allow",
        "by_id": {
            "call_1": {"decision": "allow", "hook": "rewrite.sh", "updated_arguments": "{\"cmd\":\"ls -la\"}"},
            "call_2": {"decision": "deny", "hook": "no-rm.sh", "reason": "rm -rf is not allowed here"}
        }
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
