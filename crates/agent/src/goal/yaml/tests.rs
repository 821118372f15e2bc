use super::*;

/// `stringify({objective, status: "active"})` of the reference's YAML library (2.x), for
/// strings that take each of its paths: plain, folded, quoted, blocks.
const SAMPLES: &str = include_str!("samples.json");

#[test]
fn values_are_written_as_the_reference_writes_them() {
    let samples: Vec<(String, String)> = serde_json::from_str(SAMPLES).unwrap();
    let mut wrong = Vec::new();
    for (value, expected) in samples {
        let ours = entry("objective", &value) + &entry("status", "active");
        if ours != expected {
            wrong.push(format!(
                "{value:?}\n  expected {expected:?}\n  got      {ours:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn status_is_read_tolerantly() {
    let ok = |t: &str| read_status(t);
    assert_eq!(
        ok("objective: x\nstatus: complete\n").as_deref(),
        Some("complete")
    );
    assert_eq!(
        ok("objective: |-\n  a\n  status: no\nstatus: blocked").as_deref(),
        Some("blocked")
    );
    assert_eq!(
        ok("status: 'complete'  # done").as_deref(),
        Some("complete")
    );
    assert_eq!(ok("status: \"complete\"").as_deref(), Some("complete"));
    assert_eq!(
        ok("---\nstatus: active # still going\n").as_deref(),
        Some("active")
    );
    assert_eq!(ok("objective: x\n"), None);
    assert_eq!(ok("status: complete\nstatus: active\n"), None);
    assert_eq!(ok("just some text"), None);
    assert_eq!(ok("status: [complete]"), None);
    assert_eq!(ok(""), None);
}
