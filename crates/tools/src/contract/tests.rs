use std::sync::Arc;

use super::*;
use crate::call_output::ArchiveBudget;
use crate::call_output::ARCHIVE_DIR;
use penguin_omni_protocol::build;
use penguin_omni_protocol::{ModelPayload, OmniMessage, StreamEventType};
use proptest::prelude::*;

/// Emits its chunks, then returns its result.
struct Chunks {
    chunks: Vec<String>,
    result: ToolResult,
}

#[async_trait]
impl Tool for Chunks {
    async fn run(&self, _args: Value, out: Output) -> ToolResult {
        for c in &self.chunks {
            out.emit(c.clone()).await;
        }
        self.result.clone()
    }
}

struct Panics;

#[async_trait]
impl Tool for Panics {
    async fn run(&self, _args: Value, out: Output) -> ToolResult {
        out.emit("before").await;
        panic!("boom");
    }
}

struct Hangs;

#[async_trait]
impl Tool for Hangs {
    async fn run(&self, _args: Value, out: Output) -> ToolResult {
        out.emit("partial").await;
        std::future::pending().await
    }
}

fn chunks(chunks: &[&str], result: ToolResult) -> Chunks {
    Chunks {
        chunks: chunks.iter().map(|s| (*s).to_owned()).collect(),
        result,
    }
}

fn limits(cap: Option<usize>) -> Limits {
    Limits {
        max_output_chars: cap,
        timeout: None,
        archive_root: None,
        archive_budget: Arc::new(ArchiveBudget::new(u64::MAX, u64::MAX)),
    }
}

async fn run_with(
    tool: Option<&dyn Tool>,
    args: &str,
    limits: &Limits,
    cancel: &CancellationToken,
) -> Vec<OmniMessage> {
    let call = build::tool_call("t", args, "call_1", StopReason::Completed, None);
    let Some(ModelPayload::ToolCall(call)) = call.model() else {
        unreachable!()
    };
    let mut sink = Vec::new();
    execute(tool, call, cancel, limits, &mut sink).await;
    sink
}

async fn run(tool: &dyn Tool, limits: &Limits) -> Vec<OmniMessage> {
    run_with(Some(tool), "{}", limits, &CancellationToken::new()).await
}

/// Checks start → delta* → stop → complete, that the deltas concatenate to the complete
/// output, that it is not empty and the stop fragment agrees; returns the complete payload.
fn check(msgs: &[OmniMessage]) -> (String, StopReason, Option<Vec<String>>) {
    let partial = |m: &OmniMessage| match m.model() {
        Some(ModelPayload::PartialToolCallOutput(p)) => p.clone(),
        other => panic!("expected a partial tool output, got {other:?}"),
    };
    assert!(msgs.len() >= 3, "{msgs:?}");
    assert_eq!(partial(&msgs[0]).event_type, StreamEventType::Start);
    let stop = partial(&msgs[msgs.len() - 2]);
    assert_eq!(stop.event_type, StreamEventType::Stop);
    let mut streamed = String::new();
    let mut images = None;
    for m in &msgs[1..msgs.len() - 2] {
        let p = partial(m);
        assert_eq!(p.event_type, StreamEventType::Delta);
        streamed.push_str(&p.output);
        if p.images.is_some() {
            images = p.images;
        }
    }
    let Some(ModelPayload::ToolCallOutput(done)) = msgs[msgs.len() - 1].model() else {
        panic!("expected the complete output last: {msgs:?}");
    };
    assert_eq!(done.tool_call_id, "call_1");
    assert!(!done.output.is_empty());
    assert_eq!(
        streamed, done.output,
        "deltas must concatenate to the output"
    );
    assert_eq!(stop.stop_reason, done.stop_reason);
    assert_eq!(images, done.images);
    (done.output.clone(), done.stop_reason.unwrap(), images)
}

#[tokio::test]
async fn plain_output_completes_without_notes() {
    let tool = chunks(&["a", "b"], Ok(ToolOutcome::default()));
    let msgs = run(&tool, &limits(None)).await;
    assert_eq!(msgs.len(), 5); // start, a, b, stop, complete
    assert_eq!(check(&msgs), ("ab".to_owned(), StopReason::Completed, None));
}

#[tokio::test]
async fn nothing_produced_is_no_output() {
    let tool = chunks(&[], Ok(ToolOutcome::default()));
    let (out, stop, _) = check(&run(&tool, &limits(None)).await);
    assert_eq!((out.as_str(), stop), ("[no output]", StopReason::Completed));
}

#[tokio::test]
async fn the_tools_note_and_stop_reason_are_kept() {
    let outcome = ToolOutcome {
        note: Some("[exit code: 3]".to_owned()),
        stop: Some(StopReason::Failed),
        images: vec!["data:image/png;base64,AA==".to_owned()],
    };
    let tool = chunks(&["out"], Ok(outcome));
    let (out, stop, images) = check(&run(&tool, &limits(None)).await);
    assert_eq!(out, "out\n[exit code: 3]");
    assert_eq!(stop, StopReason::Failed);
    assert_eq!(images, None, "images go out only when completed");
}

#[tokio::test]
async fn images_are_delivered_when_completed() {
    let outcome = ToolOutcome {
        images: vec!["data:image/png;base64,AA==".to_owned()],
        ..ToolOutcome::default()
    };
    let msgs = run(&chunks(&["pic"], Ok(outcome)), &limits(None)).await;
    let (out, stop, images) = check(&msgs);
    assert_eq!((out.as_str(), stop), ("pic", StopReason::Completed));
    assert_eq!(images, Some(vec!["data:image/png;base64,AA==".to_owned()]));
}

#[tokio::test]
async fn a_thrown_error_is_a_failed_tool_error_after_the_content() {
    let tool = chunks(&["half"], Err("disk on fire".to_owned()));
    let (out, stop, _) = check(&run(&tool, &limits(None)).await);
    assert_eq!(out, "half\n[tool error] disk on fire");
    assert_eq!(stop, StopReason::Failed);
}

#[tokio::test]
async fn a_panic_is_a_tool_error() {
    let (out, stop, _) = check(&run(&Panics, &limits(None)).await);
    assert_eq!(out, "before\n[tool error] tool panicked: boom");
    assert_eq!(stop, StopReason::Failed);
}

#[tokio::test]
async fn a_self_reported_abort_is_an_interruption() {
    let outcome = ToolOutcome {
        stop: Some(StopReason::Aborted),
        ..ToolOutcome::default()
    };
    let (out, stop, _) = check(&run(&chunks(&[], Ok(outcome)), &limits(None)).await);
    assert_eq!(out, "[interrupted: tool aborted by user]");
    assert_eq!(stop, StopReason::Aborted);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_tool_times_out() {
    let mut l = limits(None);
    l.timeout = Some(Duration::from_millis(250));
    let (out, stop, _) = check(&run(&Hangs, &l).await);
    assert_eq!(out, "partial\n[tool timeout: exceeded 250ms]");
    assert_eq!(stop, StopReason::Failed);
}

#[tokio::test]
async fn a_cancelled_tool_is_aborted() {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        trigger.cancel();
    });
    let msgs = run_with(Some(&Hangs), "{}", &limits(None), &cancel).await;
    let (out, stop, _) = check(&msgs);
    assert_eq!(stop, StopReason::Aborted);
    assert!(
        out.ends_with("[interrupted: tool aborted by user]"),
        "{out}"
    );
}

#[tokio::test]
async fn the_chunk_crossing_the_cap_is_compensated() {
    let tool = chunks(&["abc", "defgh", "ijk"], Ok(ToolOutcome::default()));
    let msgs = run(&tool, &limits(Some(5))).await;
    let (out, _, _) = check(&msgs);
    assert_eq!(out, "abcde\n[output truncated: exceeded 5 chars]");
    let deltas: Vec<String> = msgs[1..msgs.len() - 2]
        .iter()
        .filter_map(|m| match m.model() {
            Some(ModelPayload::PartialToolCallOutput(p)) => Some(p.output.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        ["abc", "de", "\n[output truncated: exceeded 5 chars]"]
    );
}

#[tokio::test]
async fn the_cap_counts_chars_not_bytes() {
    let tool = chunks(&["ééé", "ü"], Ok(ToolOutcome::default()));
    let (out, _, _) = check(&run(&tool, &limits(Some(3))).await);
    assert_eq!(out, "ééé\n[output truncated: exceeded 3 chars]");
}

#[tokio::test]
async fn truncated_output_is_archived_under_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits {
        archive_root: Some(dir.path().to_path_buf()),
        ..limits(Some(4))
    };
    let tool = chunks(&["12", "345", "678"], Ok(ToolOutcome::default()));
    let (out, _, _) = check(&run(&tool, &l).await);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("1234"));
    assert_eq!(lines.next(), Some("[output truncated: exceeded 4 chars]"));
    let archived = lines.next().unwrap();
    let rel = archived
        .strip_prefix("[output archived: ")
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{archived}"));
    assert!(rel.starts_with(ARCHIVE_DIR), "{rel}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(rel)).unwrap(),
        "12345678"
    );
    assert_eq!(lines.next(), None);
}

#[tokio::test]
async fn the_archive_is_capped_per_call_and_per_session_and_says_what_it_dropped() {
    let dir = tempfile::tempdir().unwrap();
    // 6 bytes per call, 8 for the session.
    let l = Limits {
        archive_root: Some(dir.path().to_path_buf()),
        archive_budget: Arc::new(ArchiveBudget::new(6, 8)),
        ..limits(Some(2))
    };
    let tool = chunks(&["12", "345", "6789"], Ok(ToolOutcome::default()));
    let (out, _, _) = check(&run(&tool, &l).await);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "[output truncated: exceeded 2 chars]");
    let rel = lines[2]
        .strip_prefix("[output archived: ")
        .and_then(|s| s.strip_suffix(']'))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(rel)).unwrap(),
        "123456"
    );
    assert_eq!(
        lines[3],
        "[output archive capped: kept the first 6 bytes, dropped 3]"
    );
    // The second call gets what is left of the session's 8 bytes.
    let (out, _, _) = check(&run(&tool, &l).await);
    assert!(
        out.ends_with("[output archive capped: kept the first 2 bytes, dropped 7]"),
        "{out}"
    );
    // Then nothing is archived any more, and the note says so.
    let (out, _, _) = check(&run(&tool, &l).await);
    assert_eq!(
        out,
        "12\n[output truncated: exceeded 2 chars]\n[output not archived: this session's archive limit is used up]"
    );
}

#[tokio::test]
async fn an_unwritable_archive_is_reported_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let l = Limits {
        archive_root: Some(file),
        ..limits(Some(1))
    };
    let (out, _, _) = check(&run(&chunks(&["xy"], Ok(ToolOutcome::default())), &l).await);
    assert_eq!(
        out,
        "x\n[output truncated: exceeded 1 chars]\n[output archive failed: ENOTDIR]"
    );
}

#[tokio::test]
async fn unknown_tools_and_bad_arguments_fail_fast() {
    let cancel = CancellationToken::new();
    let (out, stop, _) = check(&run_with(None, "{}", &limits(None), &cancel).await);
    assert_eq!(
        (out.as_str(), stop),
        ("Unknown tool: t", StopReason::Failed)
    );

    let tool = chunks(&["never"], Ok(ToolOutcome::default()));
    let msgs = run_with(Some(&tool), "  ", &limits(None), &cancel).await;
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        check(&msgs).0,
        "Tool call \"t\" failed: the arguments field is empty. Re-issue the call with a complete JSON object."
    );
    let (out, stop, _) = check(&run_with(Some(&tool), "{\"a\":", &limits(None), &cancel).await);
    assert!(
        out.starts_with("Tool call \"t\" failed: the arguments are not valid JSON ("),
        "{out}"
    );
    assert!(out.ends_with("). Re-issue the call with one complete, valid JSON object."));
    assert_eq!(stop, StopReason::Failed);
}

proptest! {
    #[test]
    fn deltas_always_concatenate_to_the_output(
        parts in proptest::collection::vec("[a-zé\n]{0,6}", 0..8),
        cap in proptest::option::of(1usize..20),
        fail in proptest::option::of("[a-z ]{1,8}"),
        note in proptest::option::of("\\[[a-z ]{0,8}\\]"),
    ) {
        let result = match fail {
            Some(msg) => Err(msg),
            None => Ok(ToolOutcome { note, ..ToolOutcome::default() }),
        };
        let tool = Chunks { chunks: parts.clone(), result };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let msgs = rt.block_on(run(&tool, &limits(cap)));
        let (out, _, _) = check(&msgs);
        let full: String = parts.concat();
        let kept: String = match cap {
            Some(c) => full.chars().take(c).collect(),
            None => full.clone(),
        };
        prop_assert!(out.starts_with(&kept));
        let truncated = cap.is_some_and(|c| full.chars().count() > c);
        prop_assert_eq!(out.contains("[output truncated: exceeded"), truncated);
    }
}
