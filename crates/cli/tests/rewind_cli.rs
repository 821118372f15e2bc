//! `penguin rewind` end to end: two real tasks through the stub model and the real tools
//! (commands that create, change, chmod, link, rename and delete), then the files put back as before
//! each task, byte for byte with modes and links, and the conversation forked where asked.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

#[path = "support/penguin.rs"]
mod run;
use run::{penguin, said};

#[path = "support/stub_model.rs"]
mod stub_model;

fn ok(out: &Output) -> String {
    let text = said(out);
    assert!(out.status.success(), "{text}");
    text
}

fn call(cmd: &str) -> stub_model::Reply {
    stub_model::tool_call(
        "exec_command",
        &serde_json::json!({ "cmd": cmd }).to_string(),
    )
}

#[test]
fn files_and_conversation_go_back_to_before_a_task() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("keep.txt"), "here before\n").unwrap();
    let (url, _) = stub_model::serve_script(vec![
        call("mkdir d && echo one > d/a.txt && chmod 755 d/a.txt && ln -s d/a.txt l"),
        stub_model::text("Made them."),
        call("echo two > d/a.txt && rm l && echo new > n.txt && mv keep.txt kept.txt"),
        stub_model::text("Changed them."),
    ]);
    run::stub_config(home.path(), &url, "");
    ok(&penguin(
        home.path(),
        &root,
        &["run", "--yes", "--sandbox", "off", "make them"],
    ));
    ok(&penguin(
        home.path(),
        &root,
        &[
            "resume",
            "--last",
            "--yes",
            "--sandbox",
            "off",
            "change them",
        ],
    ));
    assert_eq!(
        std::fs::read_to_string(root.join("d/a.txt")).unwrap(),
        "two\n"
    );

    // Without a terminal it asks nobody, so it refuses unless told.
    let refused = penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "2", "--code"],
    );
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("pass --yes"));
    assert_eq!(
        std::fs::read_to_string(root.join("d/a.txt")).unwrap(),
        "two\n"
    );

    // As before task 2: task 1's files, modes and link; task 2's gone.
    let said = ok(&penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "2", "--code", "--yes"],
    ));
    assert!(
        said.contains("restore d/a.txt") && said.contains("remove  n.txt"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("d/a.txt")).unwrap(),
        "one\n"
    );
    let mode = std::fs::metadata(root.join("d/a.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(root.join("l")).unwrap(),
        Path::new("d/a.txt")
    );
    assert!(!root.join("n.txt").exists());
    // The rename undone: the old name back, the new one gone.
    assert_eq!(
        std::fs::read_to_string(root.join("keep.txt")).unwrap(),
        "here before\n"
    );
    assert!(!root.join("kept.txt").exists());

    // As before task 1: only what was there; the conversation was empty then.
    let said = ok(&penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "1", "--yes"],
    ));
    assert!(said.contains("the conversation was empty"), "{said}");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["keep.txt"]);

    // The conversation as before task 2: a fork holding task 1 only.
    let out = penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "2", "--conversation", "--yes"],
    );
    ok(&out);
    let fork = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let shown = ok(&penguin(home.path(), &root, &["show", &fork]));
    assert!(
        shown.contains("make them") && !shown.contains("change them"),
        "{shown}"
    );

    let err = penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "9", "--yes"],
    );
    assert!(!err.status.success());
    assert!(
        String::from_utf8_lossy(&err.stderr).contains("--to takes 1 to"),
        "{err:?}"
    );
}

#[test]
fn a_session_killed_mid_task_and_resumed_rewinds_to_before_the_task_that_crashed() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Condvar, Mutex};
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    // The stub answers in turn; the fourth request (task 2's answer after its command) is
    // held until the test has killed penguin.
    let replies = [
        call("echo one > a.txt"),
        stub_model::text("Wrote one."),
        call("echo two > a.txt && echo made > b.txt"),
    ];
    let served = Arc::new(AtomicUsize::new(0));
    let held = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let url = {
        let (served, held) = (served.clone(), held.clone());
        stub_model::serve(move |_| {
            let n = served.fetch_add(1, Ordering::SeqCst);
            if n == 3 {
                let (lock, cv) = &*held;
                let mut state = lock.lock().unwrap();
                state.0 = true;
                cv.notify_all();
                while !state.1 {
                    state = cv.wait(state).unwrap();
                }
            }
            match n {
                0..=2 => replies[n].clone(),
                _ => stub_model::text("Went on."),
            }
        })
    };
    run::stub_config(home.path(), &url, "");
    ok(&penguin(
        home.path(),
        &root,
        &["run", "--yes", "--sandbox", "off", "write one"],
    ));
    let mut crashed = run::command(
        home.path(),
        &root,
        &["resume", "--last", "--yes", "--sandbox", "off", "write two"],
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    {
        // Task 2's command ran; its next request is in flight: the process dies there.
        let (lock, cv) = &*held;
        let mut state = lock.lock().unwrap();
        while !state.0 {
            state = cv.wait(state).unwrap();
        }
        crashed.kill().unwrap();
        crashed.wait().unwrap();
        state.1 = true;
        cv.notify_all();
    }
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "two\n"
    );
    ok(&penguin(
        home.path(),
        &root,
        &["resume", "--last", "--yes", "--sandbox", "off", "go on"],
    ));

    // Before task 2 (the one that crashed): a.txt as task 1 left it, b.txt gone.
    let told = ok(&penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "2", "--code", "--yes"],
    ));
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "one\n",
        "{told}"
    );
    assert!(!root.join("b.txt").exists(), "{told}");
    // Before task 1: nothing of the session's.
    ok(&penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "1", "--code", "--yes"],
    ));
    assert!(!root.join("a.txt").exists());
}

#[test]
fn changes_made_between_the_sessions_tasks_are_kept_unless_asked_for() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("k.txt"), "as found\n").unwrap();
    let (url, _) = stub_model::serve_script(vec![
        call("echo one > a.txt"),
        stub_model::text("One."),
        call("echo two > a.txt"),
        stub_model::text("Two."),
        call("echo three > c.txt"),
        stub_model::text("Three."),
    ]);
    run::stub_config(home.path(), &url, "");
    let run = |prompt: &str| {
        ok(&penguin(
            home.path(),
            &root,
            &["run", "--yes", "--sandbox", "off", prompt],
        ))
    };
    run("one");
    ok(&penguin(
        home.path(),
        &root,
        &["resume", "--last", "--yes", "--sandbox", "off", "two"],
    ));
    // The person works between tasks 2 and 3, and after task 3.
    std::fs::write(root.join("u.txt"), "mine\n").unwrap();
    std::fs::write(root.join("k.txt"), "edited by me\n").unwrap();
    ok(&penguin(
        home.path(),
        &root,
        &["resume", "--last", "--yes", "--sandbox", "off", "three"],
    ));
    std::fs::write(root.join("v.txt"), "later\n").unwrap();

    let told = ok(&penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "2", "--code", "--yes"],
    ));
    assert!(
        told.contains("remove  u.txt (yours: made between tasks)"),
        "{told}"
    );
    assert!(
        told.contains("restore k.txt (yours: changed between tasks)"),
        "{told}"
    );
    assert!(
        told.contains("remove  v.txt (yours: made between tasks)"),
        "{told}"
    );
    assert!(told.contains("remove  c.txt (made since)"), "{told}");
    assert!(
        told.contains("kept 3 path(s) changed between the session's tasks"),
        "{told}"
    );
    // The session's work is undone, the person's kept.
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!root.join("c.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("u.txt")).unwrap(),
        "mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("k.txt")).unwrap(),
        "edited by me\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("v.txt")).unwrap(),
        "later\n"
    );

    // A second rewind still tells them apart: the first one's changes count as the
    // session's, the person's edits stay theirs.
    let told = ok(&penguin(
        home.path(),
        &root,
        &["rewind", "--last", "--to", "2", "--code", "--yes"],
    ));
    assert!(told.contains("remove  u.txt (yours"), "{told}");
    assert!(told.contains("remove  v.txt (yours"), "{told}");
    assert!(told.contains("kept 3 path(s)"), "{told}");
    assert!(root.join("u.txt").exists() && root.join("v.txt").exists());

    // Asked for, they go too.
    ok(&penguin(
        home.path(),
        &root,
        &[
            "rewind",
            "--last",
            "--to",
            "2",
            "--code",
            "--yes",
            "--with-yours",
        ],
    ));
    assert!(!root.join("u.txt").exists());
    assert!(!root.join("v.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("k.txt")).unwrap(),
        "as found\n"
    );
}

#[test]
fn checkpoints_keep_ignored_trees_only_when_configured_and_can_be_turned_off() {
    let run_twice = |extra: &str| {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n").unwrap();
        let (url, _) = stub_model::serve_script(vec![
            call("mkdir -p build && echo out > build/out.txt && echo src > src.txt"),
            stub_model::text("Built."),
        ]);
        run::stub_config(home.path(), &url, extra);
        ok(&penguin(
            home.path(),
            &root,
            &["run", "--yes", "--sandbox", "off", "build"],
        ));
        let out = penguin(
            home.path(),
            &root,
            &["rewind", "--last", "--to", "1", "--code", "--yes"],
        );
        (home, ws, root, out)
    };
    // By default an ignored tree is neither kept nor rewound.
    let (_h, _w, root, out) = run_twice("");
    ok(&out);
    assert!(!root.join("src.txt").exists());
    assert!(root.join("build/out.txt").exists(), "ignored: left alone");
    // Configured, it is kept and rewound like the rest.
    let (_h, _w, root, out) = run_twice("[checkpoints]\ninclude_ignored = true\n");
    ok(&out);
    assert!(!root.join("src.txt").exists());
    assert!(!root.join("build").exists(), "{}", said(&out));
    // Turned off, there is nothing to rewind to, and the rewind says why.
    let (_h, _w, root, out) = run_twice("[checkpoints]\nenabled = false\n");
    assert!(!out.status.success());
    assert!(said(&out).contains("no checkpoint"), "{}", said(&out));
    assert!(root.join("src.txt").exists());
}
