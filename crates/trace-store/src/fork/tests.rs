use super::*;
use penguin_omni_protocol::{build, ContextWindow, SessionMeta};

fn meta(id: &str) -> OmniMessage {
    build::session_meta(SessionMeta {
        session_id: id.into(),
        provider: "openai-chat".into(),
        model_id: "m".into(),
        model_context_window: ContextWindow::Tokens(8192),
        system_prompt: format!("You are {id}."),
        agent_state: String::new(),
        workspace: "/w".into(),
        source: Some("subagent".into()),
        forked_from: None,
    })
}

/// One completed task: the prompt, a tool call and its output, the reply.
fn task(prompt: &str, reply: &str, call: &str) -> Vec<OmniMessage> {
    vec![
        build::user_text(prompt),
        build::request_begin(),
        build::tool_call("read_file", "{}", call, StopReason::Completed, None),
        build::request_end(StopReason::Completed, Default::default()),
        build::tool_call_output("contents", call, StopReason::Completed),
        build::request_begin(),
        build::assistant_text(reply, StopReason::Completed),
        build::request_end(StopReason::Completed, Default::default()),
    ]
}

fn write(dir: &Path, id: &str, index: u32, msgs: &[OmniMessage]) {
    let path = trace_file_path(dir, "2026-01-02", id, index);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body: String = msgs.iter().map(|m| m.to_json() + "\n").collect();
    std::fs::write(path, body).unwrap();
}

fn read(path: &Path) -> Vec<OmniMessage> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| OmniMessage::from_json(l).unwrap())
        .collect()
}

fn source(dir: &Path) -> Vec<OmniMessage> {
    let mut msgs = vec![meta("session-src")];
    msgs.extend(task("first", "one", "c1"));
    msgs.extend(task("second", "two", "c2"));
    // A third task that never finished: its call has no output.
    msgs.extend([
        build::user_text("third"),
        build::request_begin(),
        build::tool_call("read_file", "{}", "c3", StopReason::Completed, None),
        build::request_end(StopReason::Completed, Default::default()),
    ]);
    write(dir, "session-src", 1, &msgs);
    msgs
}

#[test]
fn a_fork_at_a_task_copies_the_trace_up_to_that_task_with_a_new_meta() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let forked = fork_session(dir.path(), "session-src", ForkPoint::Task(1)).unwrap();
    assert_ne!(forked.session_id, "session-src");
    assert_eq!(forked.tasks, 1);
    assert_eq!((forked.file_index, forked.ordinal), (1, 7));
    let copied = read(&forked.files[0]);
    // session_meta and the first task: nothing of the second.
    assert_eq!(copied.len(), 9);
    let m = copied[0].session_meta().unwrap();
    assert_eq!(m.session_id, forked.session_id);
    assert_eq!(m.system_prompt, format!("You are {}.", forked.session_id));
    assert_eq!(m.source, None);
    assert_eq!(m.forked_from.as_deref(), Some("session-src"));
    assert_eq!(&copied[1..], &src[1..9]);
    // Listed apart from its source: the same first prompt, marked a fork.
    let (fork_head, src_head) = (
        crate::read_session_head(&forked.files[0]).unwrap(),
        crate::read_session_head(&session_trace_files(dir.path(), "session-src").unwrap()[0].path)
            .unwrap(),
    );
    assert_eq!(
        fork_head.title.unwrap(),
        format!("{}{}", src_head.title.unwrap(), crate::FORK_MARK)
    );
    // The source is untouched.
    let files = session_trace_files(dir.path(), "session-src").unwrap();
    assert_eq!(read(&files[0].path), src);
}

#[test]
fn the_end_is_the_last_completed_task_and_a_position_must_be_a_final_reply() {
    let dir = tempfile::tempdir().unwrap();
    source(dir.path());
    let end = fork_session(dir.path(), "session-src", ForkPoint::End).unwrap();
    assert_eq!(end.tasks, 2);
    assert_eq!(read(&end.files[0]).len(), 17);
    // The second task's reply, by its tracePosition.
    let at = fork_session(
        dir.path(),
        "session-src",
        ForkPoint::Position {
            file_index: 1,
            ordinal: 15,
        },
    )
    .unwrap();
    assert_eq!(at.tasks, 2);
    for (ordinal, why) in [(2, "not an assistant reply"), (99, "has no record 99")] {
        let err = fork_session(
            dir.path(),
            "session-src",
            ForkPoint::Position {
                file_index: 1,
                ordinal,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    let err = fork_session(dir.path(), "session-src", ForkPoint::Task(3)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "session session-src has 2 completed task(s); --at takes 1 to 2"
    );
    assert!(matches!(
        fork_session(dir.path(), "session-none", ForkPoint::End),
        Err(ForkError::NotFound(_))
    ));
}

#[test]
fn earlier_files_are_copied_whole_and_a_reply_mid_task_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = vec![meta("session-src")];
    first.extend(task("first", "one", "c1"));
    write(dir.path(), "session-src", 1, &first);
    let mut second = vec![meta("session-src")];
    second.extend([
        build::user_text("second"),
        build::request_begin(),
        build::assistant_text("let me look", StopReason::Completed),
        build::request_end(StopReason::Completed, Default::default()),
        build::request_begin(),
        build::assistant_text("two", StopReason::Completed),
        build::request_end(StopReason::Completed, Default::default()),
    ]);
    write(dir.path(), "session-src", 2, &second);
    let forked = fork_session(dir.path(), "session-src", ForkPoint::End).unwrap();
    assert_eq!(forked.files.len(), 2);
    assert_eq!(read(&forked.files[0]).len(), first.len());
    assert_eq!(read(&forked.files[1]).len(), second.len());
    for f in &forked.files {
        let head = read(f);
        assert_eq!(
            head[0].session_meta().unwrap().session_id,
            forked.session_id
        );
    }
    let err = fork_session(
        dir.path(),
        "session-src",
        ForkPoint::Position {
            file_index: 2,
            ordinal: 3,
        },
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("not the final assistant reply"),
        "{err}"
    );
}
