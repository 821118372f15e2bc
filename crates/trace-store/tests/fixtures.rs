//! Traces written by the reference implementation resume to the state protocol §3.5
//! (`docs/protocol.md#s3.5`) prescribes.

use std::path::{Path, PathBuf};

use penguin_omni_protocol::{ModelPayload, OmniMessage, StopReason, TokenCounts};
use penguin_trace_store::{check_trace, read_trace, resume_trace, ReadMode, Resumed, Severity};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.trace.jsonl"))
}

fn resume(name: &str) -> Resumed {
    let path = fixture(name);
    let read = read_trace(&path, ReadMode::Strict).unwrap();
    assert!(read.skipped.is_empty() && read.torn_tail.is_none());
    assert!(check_trace(&path).is_empty(), "{:?}", check_trace(&path));
    resume_trace(&read.messages)
}

/// A compact rendering: `role:type:content[:id][:stop]`, so the expected sequences read like
/// the trace.
fn summary(msgs: &[OmniMessage]) -> Vec<String> {
    msgs.iter()
        .map(|m| match m.model() {
            Some(p) => {
                let role = p.role();
                let mut s = format!("{role}:{}:{}", p.type_name(), p.content().unwrap_or(""));
                if let Some(id) = p.tool_call_id() {
                    s.push_str(&format!(":{id}"));
                }
                if let Some(ModelPayload::ToolCallOutput(o)) = Some(p) {
                    s.push_str(&format!(
                        ":{}",
                        o.stop_reason.unwrap_or(StopReason::Completed)
                    ));
                }
                s
            }
            None => format!("event:{}", m.payload_type()),
        })
        .collect()
}

fn tokens(output: u64, total: u64) -> TokenCounts {
    TokenCounts {
        cache_read: 0,
        uncached_prompt: 0,
        output,
        total,
    }
}

#[test]
fn seed_two_tools() {
    let r = resume("seed-two-tools");
    assert_eq!(
        summary(&r.history),
        [
            "user:text:Read a.txt and b.txt",
            "assistant:thinking:Need two files.",
            "assistant:text:Reading both.",
            "assistant:tool_call:{\"path\":\"a.txt\"}:call_a",
            "assistant:tool_call:{\"path\":\"b.txt\"}:call_b",
            // Trace order is completion order; §3.5 keeps the snapshot's order.
            "user:tool_call_output:beta:call_b:completed",
            "user:tool_call_output:alpha done:call_a:completed",
            "assistant:text:A and B read.",
        ]
    );
    assert!(r.carry_over.is_empty());
    assert_eq!(r.render_messages, r.history);
    assert_eq!(r.session_turns, 2);
    assert_eq!(r.session_tokens, tokens(5, 280));
    assert_eq!(r.last_request_total, 160);
    assert!(!r.context_closed && r.pending_summary.is_none() && r.dangling_compaction.is_none());
    // The reference scenarios carry no session_meta.
    assert!(r.meta.is_none());
}

#[test]
fn interrupt_mid_stream() {
    let r = resume("interrupt-mid-stream");
    // The aborted request is dropped: its prompt goes back to pending and is sent with the next
    // prompt; the partial assistant text is lost.
    assert_eq!(
        summary(&r.history),
        [
            "user:text:explain the repo",
            "user:text:never mind, say hi",
            "assistant:text:Okay, switching to the new request.",
        ]
    );
    assert!(r.carry_over.is_empty());
    assert_eq!(
        summary(&r.render_messages),
        [
            "user:text:explain the repo",
            "assistant:text:I will sta",
            "event:abort",
            "user:text:never mind, say hi",
            "assistant:text:Okay, switching to the new request.",
        ]
    );
    assert_eq!(r.session_turns, 1);
    assert_eq!(r.session_tokens, tokens(5, 50));
    assert_eq!(r.last_request_total, 50);
}

#[test]
fn deny_one() {
    let r = resume("deny-one");
    assert_eq!(
        summary(&r.history),
        [
            "user:text:list then delete",
            "assistant:tool_call:{\"cmd\":\"ls\"}:call_1",
            "assistant:tool_call:{\"cmd\":\"rm -rf /\"}:call_2",
            "user:tool_call_output:Tool call denied by user.:call_2:aborted",
            "user:tool_call_output:a b c:call_1:completed",
            "assistant:text:Listed; the delete was refused.",
        ]
    );
    assert!(r.carry_over.is_empty());
    assert_eq!(r.session_turns, 2);
    assert_eq!(r.session_tokens, tokens(5, 210));
    assert_eq!(r.last_request_total, 120);
}

#[test]
fn reconnect_timeout_then_ok() {
    let r = resume("reconnect-timeout-then-ok");
    // The timed-out attempt is dropped; the retry resends the same prompt and commits.
    assert_eq!(
        summary(&r.history),
        ["user:text:answer please", "assistant:text:Full answer."]
    );
    assert_eq!(
        summary(&r.render_messages),
        [
            "user:text:answer please",
            "assistant:text:Partial answer that got",
            "assistant:text:Full answer.",
        ]
    );
    assert!(r.carry_over.is_empty());
    assert_eq!(r.session_turns, 1);
    assert_eq!(r.session_tokens, tokens(5, 40));
    assert_eq!(r.last_request_total, 40);
}

#[test]
fn truncated_fixtures_still_resume_to_paired_histories() {
    for name in [
        "seed-two-tools",
        "deny-one",
        "interrupt-mid-stream",
        "reconnect-timeout-then-ok",
    ] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        for cut in 0..=bytes.len() {
            let read = penguin_trace_store::parse_trace_lines(
                &bytes[..cut],
                ReadMode::Tolerant,
                Path::new(name),
            )
            .unwrap();
            // Only the last line can be broken by a cut.
            assert!(read.skipped.is_empty(), "{name} cut at {cut}");
            let r = resume_trace(&read.messages);
            let all: Vec<OmniMessage> = r.history.iter().chain(&r.carry_over).cloned().collect();
            let calls: Vec<&str> = all
                .iter()
                .filter_map(|m| match m.model() {
                    Some(ModelPayload::ToolCall(tc)) => Some(tc.tool_call_id.as_str()),
                    _ => None,
                })
                .collect();
            for id in calls {
                let n = all
                    .iter()
                    .filter(|m| matches!(m.model(), Some(ModelPayload::ToolCallOutput(o)) if o.tool_call_id == id))
                    .count();
                assert_eq!(n, 1, "{name} cut at {cut}: {id} answered {n} times");
            }
        }
    }
}

/// What a resumed run writes first: its prompt, its bootstrap records, then its request.
fn resumed_run() -> String {
    use penguin_omni_protocol::build;
    let z = tokens(0, 0);
    [
        build::user_text("carry on"),
        build::tool_list_ready(Vec::new()),
        build::request_begin(),
        build::assistant_text("Resumed.", StopReason::Completed),
        build::token_usage(z, z),
        build::request_end(StopReason::Completed, Default::default()),
    ]
    .iter()
    .map(|m| format!("{}\n", m.to_json()))
    .collect()
}

#[test]
fn a_crash_followed_by_a_resumed_run_is_a_warning_at_every_cut() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["seed-two-tools", "deny-one", "interrupt-mid-stream"] {
        let text = std::fs::read_to_string(fixture(name)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Killed after any record (mid-request, with an approval or a tool pending, ...), then
        // resumed: the file checks clean of errors.
        for cut in 1..=lines.len() {
            let mut body: String = lines[..cut].iter().map(|l| format!("{l}\n")).collect();
            body.push_str(&resumed_run());
            let path = dir.path().join(format!("{name}-{cut}.jsonl"));
            std::fs::write(&path, body).unwrap();
            let errors: Vec<String> = check_trace(&path)
                .into_iter()
                .filter(|p| p.severity == Severity::Error)
                .map(|p| p.to_string())
                .collect();
            assert!(errors.is_empty(), "{name} cut after line {cut}: {errors:?}");
        }
    }
}

#[test]
fn an_unclosed_request_without_a_resumed_run_stays_an_error() {
    use penguin_omni_protocol::build;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let body: String = [
        build::user_text("go"),
        build::request_begin(),
        build::request_begin(),
    ]
    .iter()
    .map(|m| format!("{}\n", m.to_json()))
    .collect();
    std::fs::write(&path, body).unwrap();
    let problems = check_trace(&path);
    assert!(
        problems
            .iter()
            .any(|p| p.severity == Severity::Error && p.message.contains("has no request_end")),
        "{problems:?}"
    );
}

#[test]
fn resuming_records_one_by_one_gives_what_resuming_them_all_does() {
    for name in [
        "seed-two-tools",
        "deny-one",
        "interrupt-mid-stream",
        "reconnect-timeout-then-ok",
    ] {
        let read = read_trace(&fixture(name), ReadMode::Strict).unwrap();
        let bytes = std::fs::read(fixture(name)).unwrap();
        for cut in 0..=bytes.len() {
            let part = penguin_trace_store::parse_trace_lines(
                &bytes[..cut],
                ReadMode::Tolerant,
                Path::new(name),
            )
            .unwrap();
            let borrowed = resume_trace(&part.messages);
            // Fed one record at a time and moved, as a resumed session reads its file.
            let mut resumer = penguin_trace_store::Resumer::new(false);
            for m in part.messages {
                resumer.push(m);
            }
            let owned = resumer.finish();
            // Placeholders are stamped when built: compare what they say.
            let bodies = |v: &[OmniMessage]| {
                v.iter()
                    .map(|m| (m.body.clone(), m.origin.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(owned.history, borrowed.history, "{name} at {cut}");
            assert_eq!(
                bodies(&owned.carry_over),
                bodies(&borrowed.carry_over),
                "{name} at {cut}"
            );
            assert_eq!(owned.session_turns, borrowed.session_turns);
            assert_eq!(owned.session_tokens, borrowed.session_tokens);
            assert!(owned.render_messages.is_empty());
        }
        assert!(!read.messages.is_empty());
    }
}
