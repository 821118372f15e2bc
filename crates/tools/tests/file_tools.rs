//! read_file, write_file, edit_file and read_image against a temporary workspace: every
//! answer, success and error, as the model reads it.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod ws;

use insta::assert_snapshot;
use penguin_omni_protocol::StopReason;
use penguin_tools::ToolsConfig;
use serde_json::json;
use ws::Ws;

#[tokio::test]
async fn read_file_numbers_lines_and_pages() {
    let ws = Ws::new();
    ws.put("f.txt", "one\ntwo\r\nthree\n\nfive");
    let read = |args| ws.call("read_file", args);
    assert_snapshot!("read_whole", read(json!({"path": "f.txt"})).await.shown());
    assert_snapshot!(
        "read_window",
        read(json!({"path": "f.txt", "offset": 2, "limit": 2}))
            .await
            .shown()
    );
    // The names of earlier versions still work.
    assert_eq!(
        read(json!({"path": "f.txt", "start_line": 2, "end_line": 3}))
            .await
            .text,
        read(json!({"path": "f.txt", "offset": 2, "limit": 2}))
            .await
            .text
    );
    for (name, args) in [
        (
            "read_offset_past_the_end",
            json!({"path": "f.txt", "offset": 6}),
        ),
        ("read_offset_zero", json!({"path": "f.txt", "offset": 0})),
        ("read_limit_zero", json!({"path": "f.txt", "limit": 0})),
        (
            "read_end_before_start",
            json!({"path": "f.txt", "start_line": 3, "end_line": 2}),
        ),
        ("read_bad_arguments", json!({"file": "f.txt"})),
    ] {
        let answer = read(args).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
}

#[tokio::test]
async fn read_file_default_window_and_long_lines() {
    let ws = Ws::with(ToolsConfig {
        max_output_chars: 0,
        ..ToolsConfig::default()
    });
    let many: String = (1..=2500).map(|n| format!("line {n}\n")).collect();
    ws.put("many.txt", many);
    let out = ws.call("read_file", json!({"path": "many.txt"})).await.text;
    assert!(out.starts_with("     1\tline 1\n"), "{out}");
    assert!(out.contains("\n  2000\tline 2000\n"));
    assert_snapshot!("read_default_window_tail", out.lines().last().unwrap());
    ws.put("long.txt", format!("short\n{}\n", "x".repeat(2500)));
    let out = ws.call("read_file", json!({"path": "long.txt"})).await.text;
    assert_snapshot!("read_long_line", out.replace(&"x".repeat(2000), "x{2000}"));
}

#[tokio::test]
async fn read_file_stops_before_the_output_cap_and_says_where_to_go_on() {
    let ws = Ws::with(ToolsConfig {
        max_output_chars: 1000,
        ..ToolsConfig::default()
    });
    let many: String = (1..=300).map(|n| format!("line {n}\n")).collect();
    ws.put("many.txt", many);
    let answer = ws.call("read_file", json!({"path": "many.txt"})).await;
    assert!(
        answer.text.chars().count() <= 1000,
        "not truncated by the cap"
    );
    assert_snapshot!("read_cap_tail", answer.text.lines().last().unwrap());
}

#[tokio::test]
async fn read_file_answers_directories_missing_paths_and_binaries() {
    let ws = Ws::new();
    ws.put("src/main.rs", "fn main() {}\n");
    ws.put("src/lib.rs", "");
    ws.put("src/deep/mod.rs", "");
    ws.put(
        "img.png",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01",
    );
    ws.put("data.bin", b"abc\0def");
    ws.put("latin1.txt", b"caf\xe9\n");
    ws.put("doc.pdf", b"%PDF-1.7\n");
    let cases = [
        ("read_directory", "src"),
        ("read_empty_file", "src/lib.rs"),
        ("read_missing_near_names", "src/mian.rs"),
        ("read_missing_parent", "scr/main.rs"),
        ("read_missing_no_similar_name", "zzzzzz.txt"),
        ("read_png", "img.png"),
        ("read_nul_bytes", "data.bin"),
        ("read_invalid_utf8", "latin1.txt"),
        ("read_pdf", "doc.pdf"),
        ("read_outside", "../x"),
    ];
    for (name, path) in cases {
        assert_snapshot!(
            name,
            ws.call("read_file", json!({"path": path})).await.shown()
        );
    }
}

#[tokio::test]
async fn write_file_says_created_or_overwritten_with_a_diff() {
    let ws = Ws::new();
    let write = |path: &str, content: &str| {
        ws.call("write_file", json!({"path": path, "content": content}))
    };
    assert_snapshot!(
        "write_created",
        write("a/b/c.txt", "héllo\nworld\n").await.shown()
    );
    assert_eq!(ws.get("a/b/c.txt"), "héllo\nworld\n");
    assert_snapshot!(
        "write_overwrote",
        write("a/b/c.txt", "hello\nworld\n").await.shown()
    );
    assert_snapshot!(
        "write_same",
        write("a/b/c.txt", "hello\nworld\n").await.shown()
    );
    let big: String = (1..=300).map(|n| format!("{n}\n")).collect();
    assert_snapshot!("write_created_large", write("big.txt", &big).await.shown());
    let bigger: String = (1..=900).map(|n| format!("{n}!\n")).collect();
    assert_snapshot!(
        "write_overwrote_large",
        write("big.txt", &bigger).await.shown()
    );
    ws.put("blob", b"\0\x01\x02");
    assert_snapshot!("write_over_binary", write("blob", "text\n").await.shown());
    assert_snapshot!("write_directory", write("a", "x").await.shown());
    assert_snapshot!("write_outside", write("../escape.txt", "x").await.shown());
    // No temporary file is left next to the targets.
    let names: Vec<String> = std::fs::read_dir(ws.root.join("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["c.txt"]);
}

#[tokio::test]
async fn write_and_edit_keep_a_files_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Ws::new();
    ws.put("run.sh", "echo hi\n");
    let path = ws.root.join("run.sh");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
    ws.call(
        "edit_file",
        json!({"path": "run.sh", "old_string": "hi", "new_string": "ho"}),
    )
    .await;
    ws.call(
        "write_file",
        json!({"path": "run.sh", "content": "echo hu\n"}),
    )
    .await;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode, ws.get("run.sh").as_str()), (0o750, "echo hu\n"));
}

#[tokio::test]
async fn edit_file_replaces_one_match_and_answers_with_a_diff() {
    let ws = Ws::new();
    let body: String = (1..=12).map(|n| format!("line {n}\n")).collect();
    ws.put("e.txt", &body);
    let edit = |args| ws.call("edit_file", args);
    let answer =
        edit(json!({"path": "e.txt", "old_string": "line 6\n", "new_string": "six\n"})).await;
    assert_snapshot!("edit_one", answer.shown());
    ws.put("r.txt", "a x\nb\na y\n");
    let answer =
        edit(json!({"path": "r.txt", "old_string": "a", "new_string": "A", "replace_all": true}))
            .await;
    assert_snapshot!("edit_replace_all", answer.shown());
    assert_eq!(ws.get("r.txt"), "A x\nb\nA y\n");
    ws.put("crlf.txt", "one\r\ntwo\r\nthree\r\n");
    let answer =
        edit(json!({"path": "crlf.txt", "old_string": "one\ntwo", "new_string": "1\n2"})).await;
    assert_eq!(answer.stop, StopReason::Completed, "{}", answer.text);
    assert_eq!(ws.get("crlf.txt"), "1\r\n2\r\nthree\r\n");
}

#[tokio::test]
async fn edit_file_explains_what_it_did_not_change() {
    let ws = Ws::new();
    let text = "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n\nfn other() {\n    let x = 1;\n}\n";
    ws.put("m.rs", text);
    let cases = [
        (
            "edit_several",
            json!({"path": "m.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
        ),
        (
            "edit_several_on_one_line",
            json!({"path": "m.rs", "old_string": "x", "new_string": "y"}),
        ),
        (
            "edit_whitespace_differs",
            json!({"path": "m.rs", "old_string": "fn main() {\n  let x = 1;", "new_string": "z"}),
        ),
        (
            "edit_first_line_found",
            json!({"path": "m.rs", "old_string": "fn main() {\n    let x = 3;", "new_string": "z"}),
        ),
        (
            "edit_close_lines",
            json!({"path": "m.rs", "old_string": "fn othr() {", "new_string": "z"}),
        ),
        (
            "edit_nothing_alike",
            json!({"path": "m.rs", "old_string": "qqqq wwww", "new_string": "z"}),
        ),
        (
            "edit_empty_old",
            json!({"path": "m.rs", "old_string": "", "new_string": "z"}),
        ),
        (
            "edit_same_strings",
            json!({"path": "m.rs", "old_string": "fn", "new_string": "fn"}),
        ),
        (
            "edit_missing_file",
            json!({"path": "m.sr", "old_string": "a", "new_string": "b"}),
        ),
    ];
    for (name, args) in cases {
        let answer = ws.call("edit_file", args).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
    assert_eq!(ws.get("m.rs"), text, "nothing was changed");
}

#[tokio::test]
async fn read_image_attaches_the_image_with_what_it_is() {
    let ws = Ws::new();
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend([0, 0, 2, 128, 0, 0, 1, 224, 8, 6, 0, 0, 0]);
    ws.put("shot.png", &png);
    let answer = ws.call("read_image", json!({"path": "shot.png"})).await;
    assert_snapshot!("image_png", answer.shown());
    assert_eq!(answer.images.len(), 1);
    assert!(answer.images[0].starts_with("data:image/png;base64,iVBORw0KGgo"));

    ws.put("cut.png", b"\x89PNG\r\n\x1a\n\0\0");
    ws.put("notes.txt", "text\n");
    ws.put("doc.pdf", b"%PDF-1.4\n");
    ws.put("huge.gif", vec![b'G'; 11 << 20]);
    for (name, path) in [
        ("image_cut_short", "cut.png"),
        ("image_text", "notes.txt"),
        ("image_pdf", "doc.pdf"),
        ("image_too_large", "huge.gif"),
        ("image_missing", "shot.jpg"),
        ("image_outside", "/etc/passwd"),
    ] {
        let answer = ws.call("read_image", json!({"path": path})).await;
        assert_eq!(
            (answer.stop, answer.images.len()),
            (StopReason::Failed, 0),
            "{name}"
        );
        assert_snapshot!(name, answer.shown());
    }
}

/// The diff an edit would make, as its approval shows it: the same answer the call gives,
/// computed without touching the workspace, for all three edit tools; a call that would fail
/// says why; other tools have nothing to preview.
#[tokio::test]
async fn an_edit_is_previewed_without_writing() {
    use penguin_engine::Environment;
    use penguin_omni_protocol::{build, ModelPayload};
    let ws = Ws::new();
    ws.put("a.txt", "one\ntwo\n");
    let preview = |name: &str, args: serde_json::Value| {
        let msg = build::tool_call(name, args.to_string(), "c", StopReason::Completed, None);
        let tools = &ws.tools;
        async move {
            let Some(ModelPayload::ToolCall(call)) = msg.model() else {
                unreachable!("built as a tool call")
            };
            tools.preview(call).await
        }
    };
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&ws.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    let edit = json!({"path": "a.txt", "old_string": "two", "new_string": "2"});
    let shown = preview("edit_file", edit.clone()).await.unwrap();
    assert!(shown.contains("-two\n+2"), "{shown}");
    assert_eq!(ws.get("a.txt"), "one\ntwo\n", "the preview wrote nothing");
    // What the approval showed is what the call then does.
    assert_eq!(ws.call("edit_file", edit).await.text, shown);
    assert_eq!(ws.get("a.txt"), "one\n2\n");

    let shown = preview(
        "write_file",
        json!({"path": "new/b.txt", "content": "hi\n"}),
    )
    .await
    .unwrap();
    assert!(
        shown.contains("+++ b/new/b.txt") && shown.contains("+hi"),
        "{shown}"
    );
    let patch = "*** Begin Patch\n*** Add File: c/d.txt\n+x\n*** Delete File: a.txt\n*** End Patch";
    let shown = preview("apply_patch", json!({ "input": patch }))
        .await
        .unwrap();
    assert!(
        shown.contains("A c/d.txt") && shown.contains("D a.txt"),
        "{shown}"
    );
    assert_eq!(
        listing(),
        ["a.txt"],
        "no file or folder was made or deleted"
    );

    let shown = preview(
        "edit_file",
        json!({"path": "a.txt", "old_string": "nine", "new_string": "9"}),
    )
    .await
    .unwrap();
    assert!(shown.starts_with("this call would fail: "), "{shown}");
    let shown = preview(
        "edit_file",
        json!({"path": "../outside", "old_string": "a", "new_string": "b"}),
    )
    .await
    .unwrap();
    assert!(shown.starts_with("this call would fail: "), "{shown}");
    assert_eq!(preview("read_file", json!({"path": "a.txt"})).await, None);
    assert_eq!(
        preview("exec_command", json!({"cmd": "rm a.txt"})).await,
        None
    );
}
