//! Every scenario the project ships, run, its Trace rebuilt as a scenario (`replay`) and run
//! again: the two Traces are the same record for record, or the rebuild names the record it
//! cannot replay and why, and only for what a Trace cannot hold.
#![cfg(feature = "scenario")]
// The project's own scenario files, read by the test: no command planted anything there.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use penguin_agent::replay::{compare, scenario_of};
use penguin_agent::scenario::{run_scenario_blocking, Scenario};
use penguin_omni_protocol::OmniMessage;
use serde_json::{json, Value};

fn trace_of(text: &str, what: &str) -> Vec<OmniMessage> {
    let scenario = Scenario::parse(text).unwrap_or_else(|e| panic!("{what}: {e}"));
    let output = run_scenario_blocking(scenario).unwrap();
    output.trace.iter().map(|f| f.message().clone()).collect()
}

fn scenarios() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests");
    let mut files = Vec::new();
    for dir in ["scenarios", "scenarios-v2", "scenarios-goal"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // The scenarios, not their expected observables (`NAME.trace.jsonl`, …).
            if name.ends_with(".json") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 40, "the scenarios were not found: {files:?}");
    files
}

fn replays_exactly(name: &str, text: &str) -> serde_json::Value {
    let original = trace_of(text, name);
    let rebuilt = scenario_of(&original).unwrap_or_else(|e| panic!("{name}: {e}"));
    let again = trace_of(&rebuilt.to_string(), &format!("{name} rebuilt"));
    if let Err(d) = compare(&original, &again) {
        panic!(
            "{name}: record {} differs\n  original {:?}\n  replayed {:?}",
            d.record, d.expected, d.got
        );
    }
    rebuilt
}

#[test]
fn the_shipped_compactions_replay_exactly() {
    let compactions: Vec<PathBuf> = scenarios()
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("compact")
        })
        .collect();
    // Mid-task by size, at a boundary by requests, discarded, and by hand between tasks.
    assert_eq!(compactions.len(), 4, "{compactions:?}");
    for path in compactions {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let rebuilt = replays_exactly(&name, &text);
        let original: Value = serde_json::from_str(&text).unwrap();
        // The settings come back from the records alone: the mode and prompt as they were.
        let (was, is) = (
            &original["engine"]["compaction"],
            &rebuilt["engine"]["compaction"],
        );
        assert_eq!(
            is["mode"],
            was["mode"].as_str().unwrap_or("summarize"),
            "{name}"
        );
        if was["mode"] != "discard" {
            assert_eq!(is["prompt"], was["prompt"], "{name}");
        }
    }
}

fn step(delay_ms: u64, kind: &str, payload: Value) -> Value {
    json!({"delay_ms": delay_ms, "message": {"type": kind, "payload": payload}})
}

fn usage(total: u64) -> Value {
    let counts = json!({"cache_read": 0, "cache_write": 0, "output": 5, "total": total});
    step(
        1,
        "event_msg",
        json!({"type": "token_usage", "session": counts, "request": counts}),
    )
}

fn text(t: &str) -> Value {
    step(
        2,
        "model_msg",
        json!({"type": "text", "role": "assistant", "text": t, "stop_reason": "completed"}),
    )
}

fn call(id: &str) -> Value {
    step(
        2,
        "model_msg",
        json!({"type": "tool_call", "role": "assistant", "name": "read_file",
               "arguments": "{\"path\":\"a\"}", "tool_call_id": id, "stop_reason": "completed"}),
    )
}

#[test]
fn an_unusable_summary_its_repair_and_the_retry_replay_exactly() {
    let completed = json!({"status": "completed"});
    let scenario = json!({
        "engine": {"compaction": {"mode": "summarize", "prompt": "Summarize, please.",
                                  "max_context_length": 400, "max_session_turns": 5}},
        "approvals": {"default": "allow"},
        "llm": [
            // The task's first request reads a file and crosses the size threshold.
            {"stream": [text("Reading."), call("call_a"), usage(500)], "outcome": completed},
            // The compaction's first attempt calls a tool instead of summarizing.
            {"stream": [call("call_x"), usage(520)], "outcome": completed},
            // Its second writes the summary.
            {"stream": [text("[summary]a holds alpha[/summary]"), usage(540)], "outcome": completed},
            {"stream": [text("Done."), usage(80)], "outcome": completed},
            // A second task, in the new context.
            {"stream": [text("Two."), usage(90)], "outcome": completed},
        ],
        "tools": {"call_a": {"stream": [step(3, "model_msg", json!({"type": "tool_call_output",
            "role": "user", "output": "alpha", "tool_call_id": "call_a", "stop_reason": "completed"}))]}},
        "runs": [
            {"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "read a"}}]},
            {"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "and then?"}}]},
        ],
    });
    let rebuilt = replays_exactly("an unusable summary", &scenario.to_string());
    let original = trace_of(&scenario.to_string(), "an unusable summary");
    let kinds: Vec<String> = original
        .iter()
        .map(|m| {
            let v = serde_json::to_value(m).unwrap();
            v["payload"]["type"].as_str().unwrap_or("?").to_owned()
        })
        .collect();
    // The repair of the attempt's call, and the guidance before the next attempt, were
    // written, and replayed by the engine, not scripted.
    assert!(
        original.iter().any(|m| serde_json::to_string(m)
            .unwrap()
            .contains("the compaction request expects a summary")),
        "{kinds:?}"
    );
    assert!(!rebuilt["tools"].as_object().unwrap().contains_key("call_x"));
    assert_eq!(rebuilt["engine"]["compaction"]["max_context_length"], 500);
    assert_eq!(
        rebuilt["engine"]["compaction"]["prompt"],
        "Summarize, please."
    );
}

#[test]
fn the_shipped_goal_runs_replay_exactly() {
    // Complete, blocked (by its status, a broken file, a removed one), the budget's wrap-up,
    // the round limit, a person's abort and the turn limit.
    let goals: Vec<PathBuf> = scenarios()
        .into_iter()
        .filter(|p| p.parent().unwrap().ends_with("scenarios-goal"))
        .collect();
    assert_eq!(goals.len(), 8, "{goals:?}");
    for path in &goals {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let rebuilt = replays_exactly(&name, &text);
        let original: Value = serde_json::from_str(&text).unwrap();
        let (was, is) = (&original["runs"][0]["goal"], &rebuilt["runs"][0]["goal"]);
        // The loop's options come back from what the rounds show and how the goal ended.
        assert_eq!(is["budget"], was["budget"], "{name}");
        if !was["max_rounds"].is_null() {
            assert_eq!(is["max_rounds"], was["max_rounds"], "{name}");
        }
        assert_eq!(
            rebuilt["engine"]["max_turns"], original["engine"]["max_turns"],
            "{name}"
        );
    }
}

#[test]
fn every_shipped_scenario_rebuilds_or_names_its_record() {
    let mut rebuilt = 0;
    for path in scenarios() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let original = trace_of(&text, &name);
        match scenario_of(&original) {
            Ok(s) => {
                Scenario::parse(&s.to_string())
                    .unwrap_or_else(|e| panic!("{name}: the rebuilt scenario does not parse: {e}"));
                rebuilt += 1;
            }
            Err(e) => {
                assert!(e.record >= 1 && e.record <= original.len(), "{name}: {e}");
                assert!(!e.why.is_empty(), "{name}");
            }
        }
    }
    assert!(rebuilt >= 10, "only {rebuilt} rebuilt");
}
