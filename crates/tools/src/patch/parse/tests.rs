use super::*;

/// A hunk of `lines` written as in a patch: ` x`, `-x`, `+x`.
fn hunk(line: usize, context: &[&str], lines: &[&str]) -> Hunk {
    let lines = lines
        .iter()
        .map(|l| match l.split_at(1) {
            ("-", t) => Line::Removed(t.to_owned()),
            ("+", t) => Line::Added(t.to_owned()),
            (_, t) => Line::Context(t.to_owned()),
        })
        .collect();
    Hunk {
        line,
        context: context.iter().map(|s| (*s).to_owned()).collect(),
        lines,
        end_of_file: false,
    }
}

#[test]
fn every_section_kind_parses() {
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+one\n+\n*** Delete File: b.txt\n*** Update File: c.py\n*** Move to: d.py\n@@ def f():\n-    pass\n+    return 1\n@@\n x\n\n+y\n*** End of File\n*** End Patch\n";
    let parsed = parse(patch).unwrap();
    assert_eq!(
        parsed.changes,
        [
            Change {
                path: "a.txt".into(),
                line: 2,
                op: Op::Add {
                    content: "one\n\n".into()
                }
            },
            Change {
                path: "b.txt".into(),
                line: 5,
                op: Op::Delete
            },
            Change {
                path: "c.py".into(),
                line: 6,
                op: Op::Update {
                    move_to: Some("d.py".into()),
                    hunks: vec![
                        hunk(8, &["def f():"], &["-    pass", "+    return 1"]),
                        Hunk {
                            end_of_file: true,
                            ..hunk(11, &[], &[" x", " ", "+y"])
                        },
                    ],
                },
            },
        ]
    );
}

#[test]
fn the_first_hunk_may_omit_its_header_and_contexts_stack() {
    let patch =
        "*** Begin Patch\n*** Update File: f\n a\n-b\n+c\n@@ class A\n@@ def g\n-d\n*** End Patch";
    let Op::Update { hunks, .. } = &parse(patch).unwrap().changes[0].op else {
        panic!("an update")
    };
    assert_eq!(
        hunks,
        &[
            hunk(3, &[], &[" a", "-b", "+c"]),
            hunk(6, &["class A", "def g"], &["-d"]),
        ]
    );
}

#[test]
fn a_here_document_and_padded_markers_are_accepted() {
    let patch = "<<'EOF'\n  *** Begin Patch \n*** Delete File: x\n *** End Patch\nEOF\n";
    assert_eq!(parse(patch).unwrap().changes.len(), 1);
}
