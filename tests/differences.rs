//! Where penguin differs from the reference on purpose (`docs/differences.md`), one test each,
//! run through the scenario runner like the conformance scenarios.

use penguin::omni_protocol::validator::StreamValidator;
use penguin::omni_protocol::{EventPayload, Frame, ModelPayload, OmniMessage, StopReason};
use penguin::scenario::{run_scenario_blocking, Scenario, ScenarioOutput};
use serde_json::{json, Value};

fn model(payload: Value) -> Value {
    json!({"type": "model_msg", "payload": payload})
}

fn run(file: Value) -> ScenarioOutput {
    let out = run_scenario_blocking(Scenario::parse(&file.to_string()).unwrap()).unwrap();
    let violations = StreamValidator::validate(out.stream.iter().map(Frame::message));
    assert!(violations.is_empty(), "{violations:?}");
    out
}

fn messages(frames: &[Frame]) -> Vec<&OmniMessage> {
    frames.iter().map(Frame::message).collect()
}

fn output_of<'a>(msgs: &[&'a OmniMessage], id: &str) -> Option<&'a OmniMessage> {
    msgs.iter().copied().find(
        |m| matches!(m.model(), Some(ModelPayload::ToolCallOutput(o)) if o.tool_call_id == id),
    )
}

fn usage() -> Value {
    let counts = json!({"cache_read": 0, "cache_write": 10, "output": 2, "total": 12});
    json!({"delay_ms": 0, "message": {"type": "event_msg", "payload": {"type": "token_usage", "session": counts, "request": counts}}})
}

fn tool_call(id: &str, stop_reason: Option<&str>) -> Value {
    let mut p = json!({"type": "tool_call", "role": "assistant", "name": "write_file", "arguments": "{}", "tool_call_id": id});
    if let Some(r) = stop_reason {
        p["stop_reason"] = json!(r);
    }
    model(p)
}

/// The reference leaves a call whose tool ended without output unanswered, so the next request
/// would carry a tool_use without its result. penguin answers it with a `[tool error]` output.
#[test]
fn a_tool_that_ends_without_output_gets_a_tool_error_output() {
    let out = run(json!({
        "approvals": {"default": "allow"},
        "llm": [
            {"stream": [{"delay_ms": 0, "message": tool_call("c1", Some("completed"))}, usage()]},
            {"stream": [usage()]}
        ],
        // The script ends before the tool answers.
        "tools": {"c1": {"stream": []}},
        "runs": [{"input": [model(json!({"type": "text", "role": "user", "text": "go"}))]}]
    }));
    let msgs = messages(&out.stream);
    let answer = output_of(&msgs, "c1").expect("the call is answered");
    let Some(ModelPayload::ToolCallOutput(o)) = answer.model() else {
        unreachable!()
    };
    assert_eq!(
        o.output,
        "[tool error] the environment ended without a tool_call_output"
    );
    assert_eq!(o.stop_reason, Some(StopReason::Failed));
    // The answer is recorded and sent, so the pairing holds in the next request.
    assert!(messages(&out.trace).contains(&answer));
    assert_eq!(out.requests.len(), 2);
    assert_eq!(out.requests[1].len(), 1);
    assert_eq!(out.requests[1][0].tool_call_id(), Some("c1"));
}

/// The reference skips a complete tool_call whose `stop_reason` is absent as if it were an
/// interruption's synthetic closure. penguin reads an absent stop_reason as `completed`, as the
/// protocol and the scenario comparison do, and runs the call.
#[test]
fn a_complete_tool_call_without_stop_reason_counts_as_completed() {
    let out = run(json!({
        "approvals": {"default": "allow"},
        "llm": [
            {"stream": [{"delay_ms": 0, "message": tool_call("c1", None)}, usage()]},
            {"stream": [usage()]}
        ],
        "tools": {"c1": {"stream": [
            {"delay_ms": 5, "message": model(json!({"type": "tool_call_output", "role": "user", "output": "done", "tool_call_id": "c1", "stop_reason": "completed"}))}
        ]}},
        "runs": [{"input": []}]
    }));
    let msgs = messages(&out.stream);
    assert!(msgs.iter().any(|m| matches!(
        m.event(),
        Some(EventPayload::ApprovalDecision { tool_call_id, .. }) if tool_call_id == "c1"
    )));
    assert_eq!(
        output_of(&msgs, "c1").and_then(|m| m.model()?.content()),
        Some("done")
    );
    assert_eq!(out.requests[1][0].tool_call_id(), Some("c1"));
}

/// A model message carrying an `origin` belongs to another session (a child's stream passed
/// through). The reference's driver treats it as the model's own: it approves and runs such a
/// tool_call and transcribes such a text. penguin streams it and does nothing else with it:
/// no approval, no dispatch, no trace record, no place in carry-over.
#[test]
fn origin_tagged_model_messages_are_not_the_engines_own() {
    let mut child_call = tool_call("child_c1", Some("completed"));
    child_call["origin"] = json!(["child-session"]);
    let mut child_decision = json!({"type": "event_msg", "payload": {"type": "approval_decision", "decision": "allow", "tool_call_id": "child_c1"}});
    child_decision["origin"] = json!(["child-session"]);
    let mut child_output = model(
        json!({"type": "tool_call_output", "role": "user", "output": "child's own", "tool_call_id": "child_c1", "stop_reason": "completed"}),
    );
    child_output["origin"] = json!(["child-session"]);
    let mut child_text = model(
        json!({"type": "text", "role": "assistant", "text": "from the child", "stop_reason": "completed"}),
    );
    child_text["origin"] = json!(["child-session"]);
    let out = run(json!({
        "approvals": {"default": "allow"},
        "llm": [
            {"stream": [
                {"delay_ms": 0, "message": child_text},
                {"delay_ms": 0, "message": child_call},
                {"delay_ms": 0, "message": child_decision},
                {"delay_ms": 0, "message": child_output},
                {"delay_ms": 0, "message": model(json!({"type": "text", "role": "assistant", "text": "mine", "stop_reason": "completed"}))},
                {"delay_ms": 100, "message": model(json!({"type": "text", "role": "assistant", "text": "never", "stop_reason": "completed"}))}
            ]},
            {"stream": [usage()]}
        ],
        "runs": [
            {"input": [model(json!({"type": "text", "role": "user", "text": "go"}))], "abort_after_ms": 50},
            {"input": []}
        ]
    }));
    let msgs = messages(&out.stream);
    assert_eq!(
        msgs.iter().filter(|m| m.has_origin()).count(),
        4,
        "streamed"
    );
    let own = |m: &&&OmniMessage| !m.has_origin();
    assert!(
        !msgs
            .iter()
            .filter(own)
            .any(|m| matches!(m.event(), Some(EventPayload::ApprovalDecision { .. }))),
        "not approved"
    );
    let own_msgs: Vec<&OmniMessage> = msgs.iter().filter(own).copied().collect();
    assert!(output_of(&own_msgs, "child_c1").is_none(), "not dispatched");
    assert!(
        !out.trace.iter().any(|f| f.message().has_origin()),
        "not recorded"
    );
    // The interrupted turn's transcript holds the model's own text only.
    let carried = out.requests[1][0].model().and_then(ModelPayload::content);
    assert_eq!(
        carried,
        Some("[turn_aborted]\n  [user_input]go[/user_input]\n  [text]mine[/text]\n[/turn_aborted]")
    );
}
