//! The reference implementation's own output (copied from the shared scenarios): every line
//! must survive a parse/serialize round trip byte for byte, and every stream must validate.

use std::path::{Path, PathBuf};

use penguin_omni_protocol::validator::{
    validate_jsonl, validate_jsonl_with, Rule, StreamValidator, ValidatorConfig,
};
use penguin_omni_protocol::OmniMessage;

fn fixtures(suffix: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn there_are_fixtures_of_both_kinds() {
    assert_eq!(fixtures(".stream.jsonl").len(), 4);
    assert_eq!(fixtures(".trace.jsonl").len(), 4);
}

#[test]
fn every_fixture_line_round_trips_byte_for_byte() {
    let mut lines = 0;
    for path in fixtures(".jsonl") {
        for (n, line) in read(&path).lines().enumerate() {
            let msg = OmniMessage::from_json(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
            assert_eq!(msg.to_json(), line, "{}:{}", path.display(), n + 1);
            lines += 1;
        }
    }
    assert!(lines > 100, "only {lines} lines read");
}

#[test]
fn every_reference_stream_validates() {
    for path in fixtures(".stream.jsonl") {
        let report = validate_jsonl(read(&path).as_bytes());
        assert!(report.is_ok(), "{}: {report}", path.display());
        assert!(report.messages > 10, "{}", path.display());
    }
}

#[test]
fn every_reference_trace_validates() {
    // The Trace is the stream minus partials and origin messages, so the same rules hold.
    for path in fixtures(".trace.jsonl") {
        let report = validate_jsonl(read(&path).as_bytes());
        assert!(report.is_ok(), "{}: {report}", path.display());
    }
}

#[test]
fn interrupt_fixture_holds_two_runs() {
    let path = fixtures("interrupt-mid-stream.stream.jsonl").remove(0);
    let messages: Vec<OmniMessage> = read(&path)
        .lines()
        .map(|l| OmniMessage::from_json(l).expect("parses"))
        .collect();
    let aborts: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.payload_type() == "abort")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(aborts.len(), 1);
    assert_eq!(messages[aborts[0] + 1].payload_type(), "request_begin");

    // Cut the second run's request_begin: the abort is then no longer the run's last message.
    let mut cut = messages.clone();
    cut.remove(aborts[0] + 1);
    let found = StreamValidator::validate(&cut);
    assert!(found.iter().any(|v| v.rule == Rule::AbortLast), "{found:?}");
}

#[test]
fn seed_timeline_mutations_are_caught_with_line_numbers() {
    let path = fixtures("seed-two-tools.stream.jsonl").remove(0);
    let lines: Vec<String> = read(&path).lines().map(str::to_owned).collect();
    // Line 24 starts call_b's output; moving it before call_b's approval (line 23) breaks the
    // approval position.
    let mut moved = lines.clone();
    let out = moved.remove(23);
    moved.insert(22, out);
    let report = validate_jsonl(moved.join("\n").as_bytes());
    let first = report
        .of(Rule::ApprovalPosition)
        .next()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(first.index, Some(22));
    assert_eq!(first.line, Some(23));
    assert_eq!(
        first.to_string(),
        "line 23: approval_position: partial_tool_call_output start for call_b before its approval_decision"
    );
}

#[test]
fn parse_errors_are_reported_with_line_numbers_and_skipped() {
    let path = fixtures("deny-one.stream.jsonl").remove(0);
    let mut text = read(&path);
    text.insert_str(0, "\n{\"type\":\"event_msg\"}\nnot json\n");
    let report = validate_jsonl(text.as_bytes());
    let parse: Vec<_> = report.of(Rule::Parse).collect();
    assert_eq!(parse.len(), 2, "{report}");
    assert_eq!(parse[0].line, Some(2));
    assert!(
        // No timestamp is fine; no payload is not.
        parse[0].to_string().starts_with("line 2: parse: payload"),
        "{}",
        parse[0]
    );
    assert_eq!(parse[1].line, Some(3));
    assert_eq!(report.violations.len(), 2, "{report}");
    assert_eq!(report.messages, 28);
}

#[test]
fn reference_streams_also_pass_strict_adjacency() {
    // The reference happens to keep these pairs adjacent in the recorded scenarios; strict mode
    // must not reject what per-producer mode accepts here.
    let strict = ValidatorConfig {
        strict_adjacency: true,
    };
    for path in fixtures(".jsonl") {
        let report = validate_jsonl_with(read(&path).as_bytes(), strict);
        assert!(report.is_ok(), "{}: {report}", path.display());
    }
}

#[test]
fn unreadable_lines_are_parse_violations_and_reading_goes_on() {
    let path = fixtures("reconnect-timeout-then-ok.stream.jsonl").remove(0);
    let mut bytes = b"\xff\xfe not utf-8\n".to_vec();
    bytes.extend(read(&path).into_bytes());
    let report = validate_jsonl(bytes.as_slice());
    assert_eq!(report.messages, 15, "{report}");
    assert_eq!(report.lines, 16);
    let only: Vec<_> = report.violations.iter().collect();
    assert_eq!(only.len(), 1, "{report}");
    assert_eq!(only[0].rule, Rule::Parse);
    assert!(
        only[0]
            .to_string()
            .starts_with("line 1: parse: cannot read line"),
        "{}",
        only[0]
    );
}

#[test]
fn report_display_lists_every_violation() {
    let path = fixtures("deny-one.stream.jsonl").remove(0);
    let ok = validate_jsonl(read(&path).as_bytes());
    assert_eq!(ok.to_string(), "ok: 28 messages, no violations");

    // Drop the synthetic denial output (line 14).
    let text = read(&path);
    let lines: Vec<&str> = text.lines().collect();
    let broken: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 13)
        .map(|(_, l)| *l)
        .collect();
    let report = validate_jsonl(broken.join("\n").as_bytes());
    let text = report.to_string();
    assert!(
        text.starts_with(&format!(
            "{} violation(s) in 27 messages:",
            report.violations.len()
        )),
        "{text}"
    );
    assert!(text.contains("\n  line 14: denial_output: deny for call_2 at line 13 is not followed by its synthetic tool_call_output; got token_usage"), "{text}");
    assert!(
        text.contains("pairing_missing_output: tool_call call_2 (line 12)"),
        "{text}"
    );
}

/// The typed fast path of `from_json` and the JSON-tree path read every reference line the
/// same, byte for byte on the way back out.
#[test]
fn the_typed_and_the_tree_parse_agree_on_every_reference_line() {
    for path in fixtures(".jsonl") {
        for line in read(&path).lines().filter(|l| !l.trim().is_empty()) {
            let fast = OmniMessage::from_json(line).unwrap();
            let tree = OmniMessage::from_value(serde_json::from_str(line).unwrap()).unwrap();
            assert_eq!(fast.to_json(), tree.to_json(), "{}", path.display());
            assert_eq!(fast.to_json(), line, "{}", path.display());
        }
    }
}
