//! Every scenario in `tests/scenarios/` runs through the real engine and matches the three
//! observables (stream, trace, requests; `docs/scenario-format.md`) the prior implementation
//! (PenguinHarness) produced for it: its conformance scenarios, the regressions random
//! differential testing found, and same-instant cases (`abort-*`, `same-instant-*`).

use std::path::{Path, PathBuf};

use penguin::scenario::{run_scenario_blocking, Scenario};
use serde_json::Value;

fn normalize(mut v: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        obj.remove("timestamp");
        if let Some(Value::Object(p)) = obj.get_mut("payload") {
            let partial = p
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.starts_with("partial_"));
            if !partial && p.get("stop_reason").and_then(Value::as_str) == Some("completed") {
                p.remove("stop_reason");
            }
        }
    }
    v
}

fn kept(v: &Value) -> bool {
    let t = v.get("type").and_then(Value::as_str);
    let pt = v
        .get("payload")
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str);
    !matches!(t, Some("session_meta" | "trace_rotate")) && pt != Some("tool_list_ready")
}

/// `strict` keeps `session_meta`, `tool_list_ready` and `trace_rotate` records (v2).
fn lines_to_values(text: &str, requests: bool, strict: bool) -> Vec<Value> {
    let kept = |v: &Value| strict || kept(v);
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("expected files are JSON lines"))
        .map(|v| {
            if requests {
                let input = v["input"].as_array().cloned().unwrap_or_default();
                Value::Array(
                    input
                        .into_iter()
                        .filter(|v| kept(v))
                        .map(normalize)
                        .collect(),
                )
            } else {
                v
            }
        })
        .filter(|v| requests || kept(v))
        .map(|v| if requests { v } else { normalize(v) })
        .collect()
}

fn scenario_files() -> Vec<PathBuf> {
    scenario_files_in("scenarios")
}

fn scenario_files_in(folder: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn scenarios_match_the_reference() {
    let files = scenario_files();
    assert!(files.len() >= 4, "the reference scenarios are present");
    check_all(files, false);
}

/// v2 scenarios (compaction, notices, bootstrap records), compared strictly: session heads,
/// tool lists and rotations count like any record.
#[test]
fn v2_scenarios_match_the_reference_strictly() {
    let files = scenario_files_in("scenarios-v2");
    assert!(files.len() >= 6, "the v2 scenarios are present");
    check_all(files, true);
}

/// Goal runs (`runs[].goal`): the loop's round inputs, GOAL.yaml reads and `goal_finished`,
/// against the reference's goal loop (`scripts/reference-goal/`).
#[test]
fn goal_scenarios_match_the_reference() {
    let files = scenario_files_in("scenarios-goal");
    assert!(files.len() >= 8, "the goal scenarios are present");
    check_all(files, false);
}

fn check_all(files: Vec<PathBuf>, strict: bool) {
    for file in files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let scenario = Scenario::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let out = run_scenario_blocking(scenario).unwrap();
        let join = |frames: &[penguin::omni_protocol::Frame]| {
            frames
                .iter()
                .map(|f| format!("{}\n", f.json()))
                .collect::<String>()
        };
        let requests: String = out
            .requests
            .iter()
            .map(|r| format!("{}\n", serde_json::json!({ "input": r })))
            .collect();
        let dir = file.parent().unwrap();
        let trace: String = out
            .trace_lines()
            .into_iter()
            .map(|l| format!("{l}\n"))
            .collect();
        for (kind, actual, is_req) in [
            ("stream", join(&out.stream), false),
            ("trace", trace, false),
            ("req", requests, true),
        ] {
            let path = dir.join(format!("{name}.{kind}.jsonl"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let expected = lines_to_values(&text, is_req, strict);
            let actual = lines_to_values(&actual, is_req, strict);
            assert_eq!(actual.len(), expected.len(), "{name}.{kind}: record count");
            for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
                assert_eq!(a, e, "{name}.{kind}: record {i} differs");
            }
        }
    }
}

#[test]
fn invalid_scenarios_name_the_field() {
    let cases = [
        ("{not json", "(file)"),
        (r#"{"runs": []}"#, "llm"),
        (
            r#"{"llm": [], "runs": [{"input": [{"type": "model_msg", "payload": {"type": "txt", "role": "user", "text": "hi"}}]}]}"#,
            "runs[0].input[0].payload.type",
        ),
        (
            r#"{"llm": [], "runs": [{"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user"}}]}]}"#,
            "runs[0].input[0].payload.text",
        ),
        (
            r#"{"llm": [], "runs": [], "engine": {"max_turns": "many"}}"#,
            "engine.max_turns",
        ),
        (
            r#"{"llm": [], "runs": [], "approvals": {"default": "maybe"}}"#,
            "approvals.default",
        ),
        (
            r#"{"llm": [], "runs": [], "tools": {"call_a": {"stream": [{"delay_ms": -1}]}}}"#,
            "tools.call_a.stream[0].delay_ms",
        ),
        (r#"{"llm": [], "runs": [], "colour": 1}"#, "colour"),
        // Keys the runner would drop are named, not ignored.
        (
            r#"{"llm": [], "runs": [{"input": [{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "hi", "colour": "red"}}]}]}"#,
            "runs[0].input[0].payload.colour",
        ),
        (
            r#"{"llm": [{"stream": [{"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "tool_call", "role": "assistant", "name": "a", "arguments": "{}", "tool_call_id": "c", "extra": 1}}}]}], "runs": []}"#,
            "llm[0].stream[0].message.payload.extra",
        ),
        (
            r#"{"llm": [], "runs": [], "tools": {"c": {"stream": [{"delay_ms": 0, "message": {"type": "model_msg", "payload": {"type": "tool_call_output", "role": "user", "output": "", "tool_call_id": "c", "images": ["x"], "note": null}}}]}}}"#,
            "tools.c.stream[0].message.payload.note",
        ),
        (
            r#"{"llm": [], "runs": [], "approvals": {"by_id": {"c": {"decision": "allow", "delay": 5}}}}"#,
            "approvals.by_id.c.delay",
        ),
        (
            r#"{"llm": [], "runs": [], "approvals": {"defaults": "allow"}}"#,
            "approvals.defaults",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (text, path) in cases {
        let err = Scenario::parse(text).expect_err(text);
        assert_eq!(err.path, path, "{text}: {err}");
        assert!(!err.message.is_empty());
        // A file is read as it streams; the error is still the one the whole text gives.
        let file = dir.path().join("s.json");
        std::fs::write(&file, text).unwrap();
        match Scenario::from_file(&file) {
            Err(penguin::scenario::ScenarioError::Invalid { source, .. }) => {
                assert_eq!(source, err, "{text}")
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn numbers_no_f64_holds_are_named_where_they_stand() {
    // `1e400` is valid JSON syntax but no number a tree holds: the piece it stands in is named,
    // and what is wrong with it, wherever the file puts it.
    let text =
        r#"{"type": "model_msg", "payload": {"type": "text", "role": "user", "text": "hi"}}"#;
    let cases = [
        (
            format!(r#"{{"llm": [{{"stream": [{{"delay_ms": 1e400, "message": {text}}}]}}], "runs": []}}"#),
            "llm[0]",
        ),
        (
            r#"{"llm": [{"stream": [], "outcome": {"status": "failed", "retry": 1e400}}], "runs": []}"#
                .to_owned(),
            "llm[0].outcome",
        ),
        (
            r#"{"llm": [], "runs": [], "tools": {"c": {"stream": [{"delay_ms": 1e400}]}}}"#.to_owned(),
            "tools.c",
        ),
        (
            r#"{"llm": [], "runs": [], "engine": {"max_turns": 1e400}}"#.to_owned(),
            "engine",
        ),
        (r#"{"llm": [], "runs": [{"abort_after_ms": -1e999}]}"#.to_owned(), "runs"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (text, path) in cases {
        let err = Scenario::parse(&text).expect_err(&text);
        assert_eq!(err.path, path, "{text}: {err}");
        assert_eq!(err.message, "invalid JSON: number out of range", "{text}");
        let file = dir.path().join("s.json");
        std::fs::write(&file, &text).unwrap();
        match Scenario::from_file(&file) {
            Err(penguin::scenario::ScenarioError::Invalid { source, .. }) => {
                assert_eq!(source, err, "{text}")
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}
