//! apply_patch against a temporary workspace: additions, updates (with the whitespace ladder,
//! context headers and moves), deletions, all or nothing, and every error text.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod ws;

use insta::assert_snapshot;
use penguin_engine::Environment;
use penguin_omni_protocol::StopReason;
use penguin_tools::{BuiltinTools, EditTools, ToolsConfig};
use serde_json::json;
use ws::Ws;

fn patch(body: &str) -> serde_json::Value {
    json!({"input": format!("*** Begin Patch\n{body}*** End Patch\n")})
}

const SOURCE: &str =
    "def f():\n    return 1\n\n\ndef g():\n    return 2\n\n\ndef h():\n    return 3\n";

#[tokio::test]
async fn a_patch_adds_updates_moves_and_deletes_at_once() {
    let ws = Ws::new();
    ws.put("src/app.py", SOURCE);
    ws.put("old/name.txt", "keep\nme\n");
    ws.put("gone.txt", "bye\n");
    let body = "*** Add File: docs/new.md\n+# New\n+\n+text\n\
                *** Update File: src/app.py\n@@ def g():\n-    return 2\n+    return 20\n@@ def h():\n     return 3\n+# end\n\
                *** Update File: old/name.txt\n*** Move to: renamed/name.txt\n@@\n keep\n-me\n+you\n\
                *** Delete File: gone.txt\n";
    let answer = ws.call("apply_patch", patch(body)).await;
    assert_snapshot!("patch_all_kinds", answer.shown());
    assert_eq!(ws.get("docs/new.md"), "# New\n\ntext\n");
    assert_eq!(
        ws.get("src/app.py"),
        SOURCE
            .replace("return 2", "return 20")
            .replace("return 3\n", "return 3\n# end\n")
    );
    assert_eq!(ws.get("renamed/name.txt"), "keep\nyou\n");
    assert!(!ws.root.join("old/name.txt").exists());
    assert!(!ws.root.join("gone.txt").exists());
}

#[tokio::test]
async fn hunks_match_through_the_whitespace_ladder_and_at_the_end_of_file() {
    let ws = Ws::new();
    ws.put("w.txt", "a  \n\tb\nc\nc\n");
    // Trailing spaces differ on `a`, indentation on `b`; `*** End of File` takes the last `c`.
    let body = "*** Update File: w.txt\n@@\n a\n-b\n+B\n@@\n-c\n+C\n*** End of File\n";
    let answer = ws.call("apply_patch", patch(body)).await;
    assert_eq!(answer.stop, StopReason::Completed, "{}", answer.text);
    assert_eq!(ws.get("w.txt"), "a  \nB\nc\nC\n");
    // The patch's `\n` lines keep a CRLF file CRLF.
    ws.put("crlf.txt", "one\r\ntwo\r\n");
    let body = "*** Update File: crlf.txt\n-two\n+2\n";
    ws.call("apply_patch", patch(body)).await;
    assert_eq!(ws.get("crlf.txt"), "one\r\n2\r\n");
}

#[tokio::test]
async fn a_failing_file_changes_nothing_and_says_which_file_and_hunk() {
    let ws = Ws::new();
    ws.put("src/app.py", SOURCE);
    ws.put("b.txt", "b\n");
    let cases = [
        ("patch_hunk_not_found", "*** Add File: first.txt\n+x\n*** Update File: src/app.py\n@@ def g():\n-    return 2\n+    return 20\n@@\n-    return 4\n+    return 40\n"),
        ("patch_context_not_found", "*** Update File: src/app.py\n@@ def nope():\n-    return 1\n+    return 0\n"),
        ("patch_update_missing_file", "*** Update File: src/ap.py\n-x\n+y\n"),
        ("patch_delete_missing_file", "*** Add File: first.txt\n+x\n*** Delete File: c.txt\n"),
        ("patch_delete_directory", "*** Delete File: src\n"),
        ("patch_same_file_twice", "*** Update File: b.txt\n-b\n+c\n*** Delete File: ./b.txt\n"),
        ("patch_outside", "*** Add File: ../escape.txt\n+x\n"),
        ("patch_move_onto_directory", "*** Update File: b.txt\n*** Move to: src\n-b\n+c\n"),
    ];
    for (name, body) in cases {
        let answer = ws.call("apply_patch", patch(body)).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
    assert_eq!(ws.get("src/app.py"), SOURCE);
    assert_eq!(ws.get("b.txt"), "b\n");
    assert!(!ws.root.join("first.txt").exists());
}

#[tokio::test]
async fn a_malformed_patch_is_refused_with_its_line() {
    let ws = Ws::new();
    ws.put("f.txt", "x\n");
    let cases = [
        (
            "parse_no_begin",
            "*** Update File: f.txt\n-x\n+y\n*** End Patch",
        ),
        ("parse_no_end", "*** Begin Patch\n*** Delete File: f.txt\n"),
        ("parse_empty", ""),
        ("parse_no_files", "*** Begin Patch\n*** End Patch"),
        (
            "parse_bad_header",
            "*** Begin Patch\n*** Change File: f.txt\n*** End Patch",
        ),
        (
            "parse_add_line_without_plus",
            "*** Begin Patch\n*** Add File: n.txt\n+one\ntwo\n*** End Patch",
        ),
        (
            "parse_bad_update_line",
            "*** Begin Patch\n*** Update File: f.txt\n@@\n x\n*y\n*** End Patch",
        ),
        (
            "parse_empty_update",
            "*** Begin Patch\n*** Update File: f.txt\n*** End Patch",
        ),
        (
            "parse_header_without_lines",
            "*** Begin Patch\n*** Update File: f.txt\n@@ x\n*** End Patch",
        ),
        (
            "parse_missing_path",
            "*** Begin Patch\n*** Delete File:\n*** End Patch",
        ),
        (
            "parse_end_of_file_alone",
            "*** Begin Patch\n*** Update File: f.txt\n*** End of File\n*** End Patch",
        ),
    ];
    for (name, text) in cases {
        let answer = ws.call("apply_patch", json!({"input": text})).await;
        assert_eq!(answer.stop, StopReason::Failed, "{name}");
        assert_snapshot!(name, answer.shown());
    }
    assert_eq!(ws.get("f.txt"), "x\n");
}

#[tokio::test]
async fn the_edit_tools_offered_follow_the_knob() {
    let names = |edit_tools| {
        let dir = tempfile::tempdir().unwrap();
        let config = ToolsConfig {
            edit_tools,
            ..ToolsConfig::default()
        };
        let tools = BuiltinTools::new(dir.path(), config).unwrap();
        let names: Vec<String> = tools.tools().into_iter().map(|d| d.name).collect();
        names
            .into_iter()
            .filter(|n| ["write_file", "edit_file", "apply_patch"].contains(&n.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(EditTools::Both),
        ["write_file", "edit_file", "apply_patch"]
    );
    assert_eq!(names(EditTools::Classic), ["write_file", "edit_file"]);
    assert_eq!(names(EditTools::ApplyPatch), ["apply_patch"]);
    // A tool not offered is not callable either.
    let ws = Ws::with(ToolsConfig {
        edit_tools: EditTools::Classic,
        ..ToolsConfig::default()
    });
    let answer = ws.call("apply_patch", patch("*** Add File: a\n+a\n")).await;
    assert_eq!(
        (answer.text.as_str(), answer.stop),
        ("Unknown tool: apply_patch", StopReason::Failed)
    );
}
