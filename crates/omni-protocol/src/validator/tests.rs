use super::*;
use crate::build;
use crate::StreamEventType::*;
use state::DENIED_BY_USER;
use std::collections::HashSet;

fn usage() -> OmniMessage {
    let c = TokenCounts::new(0, 1, 1);
    build::token_usage(c, c)
}

fn end(status: StopReason) -> OmniMessage {
    build::request_end(status, Default::default())
}

fn rules(stream: &[OmniMessage]) -> Vec<Rule> {
    StreamValidator::validate(stream)
        .into_iter()
        .map(|v| v.rule)
        .collect()
}

#[test]
fn rule_names_are_unique_snake_case() {
    let names: HashSet<_> = Rule::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(names.len(), Rule::ALL.len());
    assert!(names
        .iter()
        .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
}

#[test]
fn tool_output_between_usage_and_request_end_is_per_producer() {
    let stream = [
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        build::approval_decision(ApprovalDecision::Allow, "a"),
        usage(),
        build::tool_call_output("x", "a", StopReason::Completed),
        end(StopReason::Completed),
    ];
    assert_eq!(rules(&stream), vec![]);
    let mut strict = StreamValidator::with_config(ValidatorConfig {
        strict_adjacency: true,
    });
    let found: Vec<Rule> = stream
        .iter()
        .flat_map(|m| strict.push(m))
        .map(|v| v.rule)
        .collect();
    assert_eq!(found, vec![Rule::RequestEndFollowsUsage]);
}

#[test]
fn strict_adjacency_rejects_what_per_producer_tolerates() {
    let stream = [
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        build::approval_decision(ApprovalDecision::Allow, "a"),
        build::tool_call("t", "{}", "b", StopReason::Completed, None),
        build::approval_decision(ApprovalDecision::Deny, "b"),
        // Tool a lands between the denial and its synthetic output ...
        build::partial_tool_call_output(Start, "", "a", StopReason::Completed),
        build::tool_call_output(DENIED_BY_USER, "b", StopReason::Aborted),
        build::partial_text(Start, "", StopReason::Completed),
        build::partial_text(Stop, "ok", StopReason::Completed),
        // ... and between a text stop and its complete.
        build::partial_tool_call_output(Stop, "x", "a", StopReason::Completed),
        build::assistant_text("ok", StopReason::Completed),
        build::tool_call_output("x", "a", StopReason::Completed),
        usage(),
        end(StopReason::Completed),
    ];
    assert_eq!(rules(&stream), vec![]);
    let mut strict = StreamValidator::with_config(ValidatorConfig {
        strict_adjacency: true,
    });
    let found: Vec<Rule> = stream
        .iter()
        .flat_map(|m| strict.push(m))
        .map(|v| v.rule)
        .collect();
    assert_eq!(
        found,
        vec![
            Rule::DenialOutput,
            Rule::CompleteAfterStop,
            Rule::CompleteAfterStop
        ]
    );
}

#[test]
fn tool_call_arguments_may_be_reserialized_json() {
    let stream = [
        build::request_begin(),
        build::partial_tool_call(Start, "t", "", "a", StopReason::Completed),
        build::partial_tool_call(
            Delta,
            "",
            r#"{ "b": 1, "a": [1, 2] }"#,
            "a",
            StopReason::Completed,
        ),
        build::partial_tool_call(Stop, "", "", "a", StopReason::Completed),
        build::tool_call(
            "t",
            r#"{"a":[1,2],"b":1}"#,
            "a",
            StopReason::Completed,
            None,
        ),
        build::approval_decision(ApprovalDecision::Deny, "a"),
        build::tool_call_output(DENIED_BY_USER, "a", StopReason::Aborted),
        usage(),
        end(StopReason::Completed),
    ];
    assert_eq!(rules(&stream), vec![]);
    let mut text = stream.to_vec();
    text[4] = build::tool_call(
        "t",
        r#"{"a":[2,1],"b":1}"#,
        "a",
        StopReason::Completed,
        None,
    );
    assert_eq!(rules(&text), vec![Rule::DeltaConcat]);
}

#[test]
fn forbidden_needs_the_policy_text() {
    let stream = [
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        build::approval_decision(ApprovalDecision::Forbidden, "a"),
        build::tool_call_output(DENIED_BY_USER, "a", StopReason::Aborted),
        usage(),
        end(StopReason::Completed),
    ];
    assert_eq!(rules(&stream), vec![Rule::DenialOutput]);
}

#[test]
fn a_hooks_denial_needs_its_reason_in_the_output() {
    let decision = build::approval_decision_by(
        ApprovalDecision::Deny,
        "a",
        Some("hook:no-rm".into()),
        Some("not here".into()),
        None,
    );
    let stream = |output: &str| {
        [
            build::request_begin(),
            build::tool_call("t", "{}", "a", StopReason::Completed, None),
            decision.clone(),
            build::tool_call_output(output, "a", StopReason::Aborted),
            usage(),
            end(StopReason::Completed),
        ]
    };
    assert_eq!(
        rules(&stream("Tool call denied by hook:no-rm: not here")),
        vec![]
    );
    // The user's text would hide from the model why it was refused.
    assert_eq!(rules(&stream(DENIED_BY_USER)), vec![Rule::DenialOutput]);
}

#[test]
fn abort_excuses_unanswered_calls_but_not_a_missing_request_begin() {
    let stream = [
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        end(StopReason::Aborted),
        build::abort(Some("aborted by user".into())),
        build::user_text_from("notice", TextSender::Harness),
        build::request_begin(),
        usage(),
        end(StopReason::Completed),
    ];
    assert_eq!(rules(&stream), vec![]);
    let mut late = stream[..4].to_vec();
    late.push(build::tool_call_output("x", "a", StopReason::Completed));
    let found = rules(&late);
    assert!(found.contains(&Rule::AbortLast), "{found:?}");
}

#[test]
fn missing_output_is_flagged_at_the_next_request_begin() {
    let stream = [
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        build::approval_decision(ApprovalDecision::Allow, "a"),
        usage(),
        end(StopReason::Completed),
        build::request_begin(),
        usage(),
        end(StopReason::Completed),
    ];
    let found = StreamValidator::validate(&stream);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rule, Rule::PairingMissingOutput);
    assert_eq!(found[0].index, Some(5));
}

#[test]
fn origins_are_independent() {
    let child = |m: OmniMessage| m.with_origin("child");
    let stream = [
        build::request_begin(),
        child(build::request_begin()),
        build::partial_text(Start, "", StopReason::Completed),
        child(build::partial_text(Start, "", StopReason::Completed)),
        child(build::partial_text(Delta, "kid", StopReason::Completed)),
        build::partial_text(Delta, "parent", StopReason::Completed),
        build::partial_text(Stop, "", StopReason::Completed),
        child(build::partial_text(Stop, "", StopReason::Completed)),
        child(build::assistant_text("kid", StopReason::Completed)),
        build::assistant_text("parent", StopReason::Completed),
        child(usage()),
        usage(),
        child(end(StopReason::Completed)),
        end(StopReason::Completed),
    ];
    assert_eq!(rules(&stream), vec![]);
}

#[test]
fn compaction_yields_partials_and_usage_without_request() {
    let stream = [
        build::compaction_begin(CompactionReason::Context, CompactionMode::Summarize, 10, 1),
        build::partial_text(Start, "", StopReason::Completed),
        build::partial_text(Delta, "[summary]x[/summary]", StopReason::Completed),
        build::partial_text(Stop, "", StopReason::Completed),
        usage(),
        build::compaction_end(
            CompactionReason::Context,
            CompactionMode::Summarize,
            StopReason::Completed,
            build::RetryDetail {
                attempt: Some(1),
                ..Default::default()
            },
        ),
    ];
    assert_eq!(rules(&stream), vec![]);
}

#[test]
fn compaction_trace_calls_need_no_approval() {
    let reason = CompactionReason::Context;
    let mode = CompactionMode::Summarize;
    let stream = [
        build::compaction_begin(reason, mode, 10, 1),
        build::user_text("summarize"),
        build::request_begin(),
        build::tool_call("t", "{}", "a", StopReason::Completed, None),
        usage(),
        end(StopReason::Completed),
        build::tool_call_output(
            "[tool error] the compaction request expects a summary, not tool calls",
            "a",
            StopReason::Failed,
        ),
        build::compaction_end(reason, mode, StopReason::Failed, Default::default()),
    ];
    assert_eq!(rules(&stream), vec![]);
    let mut twice = stream.to_vec();
    twice.insert(7, stream[6].clone());
    assert_eq!(rules(&twice), vec![Rule::PairingDuplicateOutput]);
}

#[test]
fn a_call_committed_twice_without_output_is_missing_its_output() {
    let call = build::tool_call("t", "{}", "a", StopReason::Completed, None);
    let stream = [build::request_begin(), call.clone(), call];
    let found = StreamValidator::validate(&stream);
    assert!(found
        .iter()
        .any(|v| v.rule == Rule::PairingMissingOutput && v.index == Some(2)));
}

#[test]
fn display_forms() {
    let v = Violation {
        index: Some(12),
        line: Some(13),
        rule: Rule::ApprovalPosition,
        detail: "tool_call_output for call_a before its approval_decision".into(),
    };
    assert_eq!(
        v.to_string(),
        "line 13: approval_position: tool_call_output for call_a before its approval_decision"
    );
    let pushed = Violation { line: None, ..v };
    assert!(pushed
        .to_string()
        .starts_with("message 12: approval_position"));
    let end = Violation {
        index: None,
        line: None,
        rule: Rule::RequestPairing,
        detail: "x".into(),
    };
    assert_eq!(end.to_string(), "end of stream: request_pairing: x");
}

/// The JSON line of a message, without its `timestamp`, as scenario files write messages.
fn untimed(msg: &OmniMessage) -> String {
    let mut value = serde_json::to_value(msg).expect("a message serializes");
    value
        .as_object_mut()
        .expect("an object")
        .remove("timestamp");
    value.to_string()
}

#[test]
fn jsonl_lines_without_a_timestamp_are_accepted() {
    let c = TokenCounts::new(0, 1, 1);
    let stream = [
        build::request_begin(),
        build::assistant_text("hi", StopReason::Completed),
        build::token_usage(c, c),
        end(StopReason::Completed),
    ];
    let text: Vec<String> = stream.iter().map(untimed).collect();
    let report = validate_jsonl(text.join("\n").as_bytes());
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.messages, report.lines), (4, 4));

    // A timestamp that is there must still be a string.
    let bad = r#"{"timestamp":7,"type":"event_msg","payload":{"type":"request_begin"}}"#;
    let report = validate_jsonl(bad.as_bytes());
    assert_eq!(report.messages, 0);
    assert_eq!(report.violations[0].rule, Rule::Parse);
    assert_eq!(report.violations[0].line, Some(1));
    assert!(
        report.violations[0].detail.contains("timestamp"),
        "{report}"
    );
}

#[test]
fn jsonl_reports_name_every_message_by_its_line() {
    let c = TokenCounts::new(0, 1, 1);
    let call = build::tool_call("read_file", "{}", "call_a", StopReason::Completed, None);
    // Line 1 is blank and line 3 does not parse, so lines and message indices differ.
    let lines = [
        String::new(),
        untimed(&build::request_begin()),
        "not json".to_owned(),
        untimed(&call),
        untimed(&build::approval_decision(ApprovalDecision::Deny, "call_a")),
        untimed(&build::token_usage(c, c)),
        untimed(&end(StopReason::Completed)),
    ];
    let report = validate_jsonl(lines.join("\n").as_bytes());
    let text = report.to_string();
    assert!(text.contains("\n  line 3: parse: "), "{text}");
    let denial = report.of(Rule::DenialOutput).next().expect("{text}");
    assert_eq!((denial.line, denial.index), (Some(6), Some(3)));
    assert_eq!(
        denial.to_string(),
        "line 6: denial_output: deny for call_a at line 5 is not followed by its synthetic tool_call_output; got token_usage"
    );
    let missing = report
        .of(Rule::PairingMissingOutput)
        .next()
        .expect("{text}");
    assert_eq!(missing.line, None);
    assert!(
        missing
            .detail
            .starts_with("tool_call call_a (line 4) has no tool_call_output"),
        "{text}"
    );
    assert!(!text.contains("message "), "one numbering only: {text}");
}
