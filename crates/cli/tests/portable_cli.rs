//! A session taken away: `penguin export` on one machine, `penguin import` on another (checked
//! first), and the session is there to show and resume; a broken or duplicate one is refused.

#[path = "support/penguin.rs"]
mod run;
use run::{penguin, said};

#[test]
fn a_session_exported_here_imports_there_and_shows() {
    let (here, there) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ws = tempfile::tempdir().unwrap();
    let run = penguin(
        here.path(),
        ws.path(),
        &["run", "--yes", "--model", "demo", "look around"],
    );
    assert!(run.status.success(), "{}", said(&run));
    let file = here.path().join("taken.jsonl");
    let out = penguin(
        here.path(),
        ws.path(),
        &["export", "--last", "-o", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", said(&out));

    let out = penguin(there.path(), ws.path(), &["import", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", said(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let shown = penguin(there.path(), ws.path(), &["show", &id]);
    assert!(said(&shown).contains("look around"), "{}", said(&shown));
    // The same twice, or a broken file: refused, saying why.
    let again = penguin(there.path(), ws.path(), &["import", file.to_str().unwrap()]);
    assert!(!again.status.success());
    assert!(said(&again).contains("is here already"), "{}", said(&again));
    let broken = here.path().join("broken.jsonl");
    std::fs::write(&broken, "{\"type\": \"nonsense\"}\n{oops\n").unwrap();
    let out = penguin(
        there.path(),
        ws.path(),
        &["import", broken.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(said(&out).contains("broken.jsonl"), "{}", said(&out));
}
