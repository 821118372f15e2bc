//! The session list as it grows (issue 42, item 4) in a real headless Chromium at desktop and
//! phone widths: sessions grouped by workspace (foldable), pinned ones first in a group of
//! their own, archive and unarchive with an "Archived" view, and the server's search as the
//! reader types (opt-in, like `web.rs`: `scripts/install-browser.sh`, then `--ignored`). The
//! API behind it is tested in `listing.rs`.
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;

use penguin_server::testing::TOKEN;
use serde_json::{json, Value};
use support::browser::Browser;
use support::{FakeFactory, TestDir};

/// Writes a session's trace in `workspace` with its first prompt; `n` orders them (the
/// highest the most recently active).
fn write_session(data_root: &std::path::Path, n: u32, workspace: &str, prompt: &str) -> String {
    let id = format!("session-2026-01-01-00-00-0{n}-0000000{n}");
    let day = data_root.join("default/agents/penguin/traces/2026-01-01");
    std::fs::create_dir_all(&day).unwrap();
    let meta = json!({"timestamp": format!("2026-01-01T00:00:0{n}.000Z"), "type": "session_meta", "payload": {"session_id": id, "provider": "p", "model_id": "m", "model_context_window": "unknown", "system_prompt": "", "agent_state": "", "workspace": workspace}});
    let user = json!({"timestamp": "2026-01-01T00:01:00.000Z", "type": "model_msg", "payload": {"type": "text", "role": "user", "text": prompt}});
    let path = day.join(format!("{id}_000.jsonl"));
    std::fs::write(&path, format!("{meta}\n{user}\n")).unwrap();
    let when =
        std::time::SystemTime::now() - std::time::Duration::from_secs(3600 * (10 - n as u64));
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(when)
        .unwrap();
    id
}

/// What the list shows: each group's name and its sessions' titles, and whether the page
/// scrolls sideways.
async fn shown(b: &Browser) -> Value {
    b.js("return { groups: [...document.querySelectorAll('.session-group')].map((g) => [g.querySelector('.group-name').textContent, [...g.querySelectorAll('li.session-item .title a')].map((a) => a.textContent)]),\n\
                   overflow: document.documentElement.scrollWidth > window.innerWidth + 1, errors: window.penguinErrors };")
        .await
}

async fn press(b: &Browser, id: &str, action: &str) {
    b.click(&format!(
        "li[data-session=\"{id}\"] button[data-action=\"{action}\"]"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: scripts/install-browser.sh, then --ignored"]
async fn the_list_groups_pins_archives_and_searches_at_desktop_and_phone_width() {
    let dir = TestDir::new();
    let root = dir.data_root();
    let alpha = "/home/u/src/alpha";
    let beta = "/home/u/src/beta";
    let count = write_session(&root, 1, alpha, "Count the penguins");
    let _feed = write_session(&root, 2, alpha, "Feed the puffins");
    let glacier = write_session(&root, 3, beta, "Map the glacier");
    let _walrus = write_session(&root, 4, beta, "Watch the walrus");
    let factory = FakeFactory::new(json!({"llm": [], "runs": []}), dir.workspace());
    let srv = support::serve(dir, Arc::new(factory), |_| {}).await;

    let mut b = Browser::start("sessions").await;
    b.goto(&format!("{}/#token={TOKEN}", srv.base)).await;
    b.until(
        "two workspace groups",
        "return document.querySelectorAll('.session-group').length === 2",
    )
    .await;
    assert_eq!(
        shown(&b).await["groups"],
        json!([
            ["…/src/beta", ["Watch the walrus", "Map the glacier"]],
            ["…/src/alpha", ["Feed the puffins", "Count the penguins"]]
        ])
    );

    // Pinned: a group of its own, first.
    press(&b, &glacier, "pin").await;
    b.until(
        "the pinned group",
        "const g = document.querySelector('.session-group'); return g && g.dataset.group === '\\u0000pinned'",
    )
    .await;
    // Archived: out of the list, into the archived view.
    press(&b, &count, "archive").await;
    b.until(
        "the archived session gone",
        &format!("return !document.querySelector('li[data-session=\"{count}\"]')"),
    )
    .await;
    assert_eq!(
        shown(&b).await["groups"],
        json!([
            ["Pinned", ["Map the glacier"]],
            ["…/src/beta", ["Watch the walrus"]],
            ["…/src/alpha", ["Feed the puffins"]]
        ])
    );
    b.shot("desktop-grouped").await;

    // A folded group keeps its sessions out of sight, and comes back.
    b.click(".session-group[data-group=\"/home/u/src/alpha\"] .group-toggle")
        .await;
    let folded = b
        .js("const g = document.querySelector('.session-group[data-group=\"/home/u/src/alpha\"]'); return [g.dataset.folded, g.querySelector('ul').hidden];")
        .await;
    assert_eq!(folded, json!(["true", true]));
    b.click(".session-group[data-group=\"/home/u/src/alpha\"] .group-toggle")
        .await;

    // The server searches as the reader types.
    b.type_into(".list-tools input[type=search]", "PUFFINS")
        .await;
    b.until(
        "one match",
        "return document.querySelectorAll('li.session-item').length === 1",
    )
    .await;
    assert_eq!(
        shown(&b).await["groups"],
        json!([["…/src/alpha", ["Feed the puffins"]]])
    );
    b.shot("desktop-searched").await;
    b.js("const i = document.querySelector('.list-tools input[type=search]'); i.value = ''; i.dispatchEvent(new Event('input')); return null;").await;

    // The archived view, and a session brought back from it.
    b.click("button[data-action=\"archived\"]").await;
    b.until(
        "the archived view",
        &format!("const rows = document.querySelectorAll('li.session-item'); return rows.length === 1 && rows[0].dataset.session === '{count}'"),
    )
    .await;
    b.shot("desktop-archived").await;
    press(&b, &count, "unarchive").await;
    b.until(
        "no archived session left",
        "return document.querySelectorAll('li.session-item').length === 0 && !document.querySelector('main.list p.muted').hidden",
    )
    .await;
    b.click("button[data-action=\"archived\"]").await;
    b.until(
        "the list again, with the session back",
        &format!("return !!document.querySelector('li[data-session=\"{count}\"]')"),
    )
    .await;
    let state = shown(&b).await;
    assert_eq!(state["errors"], json!([]));
    assert_eq!(state["overflow"], false, "{state}");

    // A phone's width: nothing scrolls sideways, each row's buttons fit and are tappable.
    b.c().set_window_size(390, 844).await.unwrap();
    let fit = b
        .js("const buttons = [...document.querySelectorAll('li.session-item .actions button')].map((x) => x.getBoundingClientRect());\n\
             return { widest: Math.max(...buttons.map((r) => r.right)), lowest: Math.min(...buttons.map((r) => r.height)),\n\
                      overflow: document.documentElement.scrollWidth > window.innerWidth + 1 };")
        .await;
    assert_eq!(fit["overflow"], false, "{fit}");
    assert!(fit["widest"].as_f64().unwrap() <= 390.0, "{fit}");
    assert!(fit["lowest"].as_f64().unwrap() >= 24.0, "{fit}");
    b.shot("phone-list").await;
    press(&b, &glacier, "unpin").await;
    b.until(
        "no pinned group",
        "return !document.querySelector('.session-group[data-group=\"\\u0000pinned\"]')",
    )
    .await;
    b.shot("phone-unpinned").await;
    b.close().await;
}
