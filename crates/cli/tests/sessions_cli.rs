//! `penguin sessions` as the list grows: archive and unarchive, pin and unpin (by a unique part
//! of the id), `--archived`, `--search`; the marks written where `penguin serve` reads them.

use std::path::Path;
use std::time::{Duration, SystemTime};

#[path = "support/penguin.rs"]
mod run;
use run::{penguin, said};

/// Writes a session's trace as a run would leave it: its `session_meta` and first prompt, its
/// file written `age` ago.
fn write_session(home: &Path, n: u32, prompt: &str, age: Duration) -> String {
    let id = format!("session-2026-01-01-00-00-0{n}-0000000{n}");
    let day = home.join("default/agents/penguin/traces/2026-01-01");
    std::fs::create_dir_all(&day).unwrap();
    let meta = serde_json::json!({
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "session_meta",
        "payload": {"session_id": id, "provider": "p", "model_id": "m",
            "model_context_window": "unknown", "system_prompt": "", "agent_state": "",
            "workspace": "/w"}
    });
    let user = serde_json::json!({
        "timestamp": "2026-01-01T00:00:01.000Z",
        "type": "model_msg",
        "payload": {"type": "text", "role": "user", "text": prompt}
    });
    let path = day.join(format!("{id}_000.jsonl"));
    std::fs::write(&path, format!("{meta}\n{user}\n")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - age)
        .unwrap();
    id
}

/// The ids `penguin ARGS` lists, in order.
fn listed(home: &Path, ws: &Path, args: &[&str]) -> Vec<String> {
    let out = penguin(home, ws, args);
    assert!(out.status.success(), "{}", said(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("session-"))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect()
}

fn mark(home: &Path, ws: &Path, what: &str, id: &str) -> String {
    let out = penguin(home, ws, &["sessions", what, id]);
    assert!(out.status.success(), "{}", said(&out));
    said(&out)
}

#[test]
fn sessions_are_archived_pinned_and_searched() {
    let (home, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (home, ws) = (home.path(), ws.path());
    let hour = Duration::from_secs(3600);
    let count = write_session(home, 1, "Count the penguins", 3 * hour);
    let feed = write_session(home, 2, "Feed the PUFFINS", 2 * hour);
    let watch = write_session(home, 3, "Watch the walrus", hour);
    assert_eq!(
        listed(home, ws, &["sessions"]),
        [watch.clone(), feed.clone(), count.clone()]
    );

    // A unique part of the id names it; the list leaves an archived session out.
    assert_eq!(
        mark(home, ws, "archive", "00000003"),
        format!("archived {watch}\n")
    );
    assert_eq!(
        listed(home, ws, &["sessions"]),
        [feed.clone(), count.clone()]
    );
    assert_eq!(
        listed(home, ws, &["sessions", "--archived"]),
        std::slice::from_ref(&watch)
    );
    // Pinned first, however old, and said so in its title.
    mark(home, ws, "pin", &count);
    let out = penguin(home, ws, &["sessions"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().nth(1).unwrap();
    assert!(
        first.starts_with(&count) && first.ends_with("[pinned] Count the penguins"),
        "{text}"
    );
    // Even past the page: the pinned one is read first.
    assert_eq!(
        listed(home, ws, &["sessions", "--limit", "1"]),
        std::slice::from_ref(&count)
    );

    // A search reads titles and prompts, whatever the case; archived ones with --archived.
    assert_eq!(
        listed(home, ws, &["sessions", "--search", "puffins"]),
        std::slice::from_ref(&feed)
    );
    assert_eq!(
        listed(home, ws, &["sessions", "--search", "the"]),
        [count.clone(), feed.clone()]
    );
    let none = penguin(home, ws, &["sessions", "--search", "walrus"]);
    assert!(
        said(&none).starts_with("no sessions that match under "),
        "{}",
        said(&none)
    );
    assert_eq!(
        listed(home, ws, &["sessions", "--search", "WALRUS", "--archived"]),
        std::slice::from_ref(&watch)
    );

    // Written where the server reads them: one rule for both.
    let location = penguin::trace_store::TraceLocation::new(home, "default", "penguin");
    let marks = penguin::server::marks::read_marks(&location);
    assert!(marks[&watch].archived && !marks[&watch].pinned);
    assert!(marks[&count].pinned && !marks[&count].archived);

    // Taken back.
    mark(home, ws, "unarchive", &watch);
    mark(home, ws, "unpin", &count);
    assert_eq!(
        listed(home, ws, &["sessions"]),
        [watch.clone(), feed.clone(), count.clone()]
    );

    // An id that names nothing is refused, and a mark with list flags is a usage error.
    let unknown = penguin(home, ws, &["sessions", "pin", "nope"]);
    assert!(!unknown.status.success());
    assert!(
        said(&unknown).contains("no session matches \"nope\""),
        "{}",
        said(&unknown)
    );
    let mixed = penguin(home, ws, &["sessions", "--archived", "pin", &count]);
    assert_eq!(mixed.status.code(), Some(2), "{}", said(&mixed));
}
