//! The files room (issue 42, item 2) over HTTP and in the web app: a session's workspace
//! browsed, a file previewed (text coloured, an image drawn from a blob URL) and downloaded,
//! the files it changed listed with their diffs, in a real headless Chromium at desktop and
//! phone widths (opt-in, like `web.rs`: `scripts/install-browser.sh`, then `--ignored`); and a
//! session that offers no files answering 501. Every escape, the data root, FIFOs and large
//! files over the facade's real sessions are tested in penguin-agent
//! (`tests/hosting/files.rs`).
#![cfg(feature = "testing")]
// Tests build their trees by hand.
#![allow(clippy::disallowed_methods)]

mod support;

use std::sync::Arc;

use penguin_server::testing::TOKEN;
use serde_json::{json, Value};
use support::browser::Browser;
use support::files::FilesFactory;
use support::{FakeFactory, TestDir, TestServer};

/// A 24×24 chequered PNG.
const PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x18\x00\x00\x00\x18\x08\x02\x00\x00\x00\x6f\x15\xaa\xaf\x00\x00\x00\x2e\x49\x44\x41\x54\x78\xda\x63\x50\x4d\x7e\x8d\x86\x7e\x9d\x11\x45\x43\xc4\xa8\x61\x18\x35\x88\x8e\x06\x91\xa7\x0d\x53\xcd\xa8\x41\xf4\x34\x68\x34\x65\x8f\xe6\xb5\x51\x83\xe8\x62\x10\x00\xad\x8f\xb7\xee\xf4\x81\xf7\x93\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

/// A server whose one session works in a small project, then "edits" it as a task would:
/// one file changed, one made, one removed.
async fn start() -> (TestServer, String) {
    let dir = TestDir::new();
    let ws = dir.workspace();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("target")).unwrap();
    std::fs::write(ws.join("target/app"), "built").unwrap();
    std::fs::write(
        ws.join("src/lib.rs"),
        "// The answer.\npub fn answer() -> u32 {\n    41\n}\n",
    )
    .unwrap();
    std::fs::write(ws.join("README.md"), "# demo\n").unwrap();
    std::fs::write(ws.join("old.txt"), "to be removed\n").unwrap();
    std::fs::write(ws.join("logo.png"), PNG).unwrap();
    std::fs::write(
        ws.join("index.html"),
        "<script>document.title = 'ran'</script>",
    )
    .unwrap();
    let factory = FilesFactory::new(FakeFactory::new(json!({"llm": []}), dir.workspace()));
    let srv = support::serve(dir, Arc::new(factory), |_| {}).await;
    let id = srv.create("allow-all").await;
    std::fs::write(
        ws.join("src/lib.rs"),
        "// The answer.\npub fn answer() -> u32 {\n    42\n}\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/new.rs"), "pub const MADE: bool = true;\n").unwrap();
    std::fs::remove_file(ws.join("old.txt")).unwrap();
    (srv, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_listed_served_guarded_and_changes_diffed() {
    let (srv, id) = start().await;
    let root = srv.get(&format!("/api/sessions/{id}/files")).await;
    assert_eq!(root.status, 200, "{}", root.body);
    let names: Vec<&str> = root.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["src", ".gitignore", "README.md", "index.html", "logo.png"]
    );

    let res = srv
        .http
        .get(srv.url(&format!("/api/sessions/{id}/files/content?path=index.html")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let h = |name: &str| {
        res.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(h("content-type"), "text/plain; charset=utf-8");
    assert_eq!(h("x-content-type-options"), "nosniff");
    assert_eq!(h("content-security-policy"), "sandbox; default-src 'none'");
    assert_eq!(h("cache-control"), "no-store");

    let changes = srv.get(&format!("/api/sessions/{id}/files/changes")).await;
    assert_eq!(changes.status, 200, "{}", changes.body);
    let files: Vec<(&str, &str)> = changes.body["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        files,
        [
            ("old.txt", "deleted"),
            ("src/lib.rs", "modified"),
            ("src/new.rs", "added")
        ]
    );
    let diff = changes.body["files"][1]["diff"].as_str().unwrap();
    assert!(diff.contains("-    41\n+    42"), "{diff}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_files_says_so() {
    let srv = support::serve_script(json!({"llm": []})).await;
    let id = srv.create("allow-all").await;
    for route in ["files", "files/content?path=a", "files/changes"] {
        let r = srv.get(&format!("/api/sessions/{id}/{route}")).await;
        assert_eq!(r.status, 501, "{route}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "files_unavailable");
    }
    let r = srv.get("/api/sessions/nope/files").await;
    assert_eq!(r.status, 404, "{}", r.body);
}

async fn layout(b: &Browser) -> Value {
    b.js("return { overflow: document.documentElement.scrollWidth > window.innerWidth + 1, errors: window.penguinErrors,\n\
                   panel: document.querySelector('.files-panel').getBoundingClientRect().width };")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: scripts/install-browser.sh, then --ignored"]
async fn the_files_panel_browses_previews_downloads_and_shows_changes_at_desktop_and_phone_width() {
    let (srv, id) = start().await;
    let mut b = Browser::start("files").await;
    b.goto(&format!("{}/sessions/{id}#token={TOKEN}", srv.base))
        .await;
    b.until(
        "the files panel",
        "return !!document.querySelector('details.files-panel')",
    )
    .await;
    b.click("details.files-panel > summary").await;
    b.until(
        "the workspace's root listed",
        "return document.querySelectorAll('.files-panel li.entry').length === 5",
    )
    .await;
    let listed = b
        .js("return [...document.querySelectorAll('.files-panel li.entry')].map((e) => [e.dataset.name, e.dataset.kind]);")
        .await;
    assert_eq!(
        listed,
        json!([
            ["src", "dir"],
            [".gitignore", "file"],
            ["README.md", "file"],
            ["index.html", "file"],
            ["logo.png", "file"]
        ])
    );

    // Into a folder, then a file: its text, coloured, never markup.
    b.click(".files-panel li.entry[data-name=src] button").await;
    b.until(
        "src listed",
        "return document.querySelector('.files-panel').dataset.dir === 'src' && !!document.querySelector('.files-panel li.entry[data-name=\"lib.rs\"]')",
    )
    .await;
    b.click(".files-panel li.entry[data-name=\"lib.rs\"] button")
        .await;
    let coloured = b
        .until(
            "lib.rs previewed",
            "const pre = document.querySelector('.files-panel pre.file-text'); return pre && pre.textContent.includes('42') && [...pre.querySelectorAll('span')].map((s) => s.className + ':' + s.textContent)",
        )
        .await;
    let spans: Vec<&str> = coloured
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for want in [
        "tok-comment:// The answer.",
        "tok-keyword:pub",
        "tok-keyword:fn",
        "tok-number:42",
    ] {
        assert!(spans.contains(&want), "{want} not in {spans:?}");
    }
    b.shot("desktop-text").await;

    // Back to the root by the crumbs; an HTML file is shown as its text and does not run.
    b.click(".files-panel .files-crumbs a[data-path=\"\"]")
        .await;
    b.until(
        "the root again",
        "return !!document.querySelector('.files-panel li.entry[data-name=\"index.html\"]')",
    )
    .await;
    b.click(".files-panel li.entry[data-name=\"index.html\"] button")
        .await;
    let html = b
        .until(
            "index.html as text",
            "const pre = document.querySelector('.files-panel pre.file-text'); return pre && pre.textContent",
        )
        .await;
    assert_eq!(html, "<script>document.title = 'ran'</script>");
    assert_ne!(b.js("return document.title;").await, "ran");

    // An image, drawn from a blob URL (the page's CSP allows blob: images, nothing else new).
    b.click(".files-panel .files-crumbs a[data-path=\"\"]")
        .await;
    b.until(
        "the root again",
        "return !!document.querySelector('.files-panel li.entry[data-name=\"logo.png\"]')",
    )
    .await;
    b.click(".files-panel li.entry[data-name=\"logo.png\"] button")
        .await;
    let img = b
        .until(
            "the image drawn",
            "const i = document.querySelector('.files-panel img.file-image'); return i && i.complete && i.naturalWidth > 0 && [i.naturalWidth, i.src.slice(0, 5)]",
        )
        .await;
    assert_eq!(img, json!([24, "blob:"]));
    b.shot("desktop-image").await;

    // Download: fetched with the token, saved through a link the page clicks.
    b.js("window.__saved = []; const orig = HTMLAnchorElement.prototype.click;\n\
          HTMLAnchorElement.prototype.click = function () { window.__saved.push(this.download); };\n\
          return null;")
        .await;
    b.click(".files-panel button[data-action=download-file]")
        .await;
    b.until(
        "the download",
        "return window.__saved.length === 1 && window.__saved[0] === 'logo.png'",
    )
    .await;

    // What the session changed, each with its diff.
    b.click(".files-panel .files-tabs button[data-tab=changed]")
        .await;
    b.until(
        "the changed files",
        "return document.querySelectorAll('.files-panel details.changed').length === 3",
    )
    .await;
    let changed = b
        .js("return [...document.querySelectorAll('.files-panel details.changed')].map((d) => [d.dataset.path, d.dataset.status]);")
        .await;
    assert_eq!(
        changed,
        json!([
            ["old.txt", "deleted"],
            ["src/lib.rs", "modified"],
            ["src/new.rs", "added"]
        ])
    );
    b.js("document.querySelector('.files-panel details.changed[data-path=\"src/lib.rs\"]').open = true; return null;")
        .await;
    let lines = b
        .js("return [...document.querySelectorAll('.files-panel details.changed[data-path=\"src/lib.rs\"] .diff-line')].map((l) => l.className.replace('diff-line ', '') + ':' + l.textContent.trimEnd());")
        .await;
    let lines: Vec<&str> = lines
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(lines.contains(&"del:-    41"), "{lines:?}");
    assert!(lines.contains(&"add:+    42"), "{lines:?}");
    let shown = b
        .js("return document.querySelector('.files-panel .files-body').innerText;")
        .await;
    assert!(!shown.as_str().unwrap().contains("null"), "{shown}");
    let state = layout(&b).await;
    assert_eq!(state["overflow"], false, "{state}");
    assert_eq!(state["errors"], json!([]), "{state}");
    b.shot("desktop-changed").await;

    // A phone's width: the panel fits, nothing scrolls sideways; the browser still works.
    b.c().set_window_size(390, 844).await.unwrap();
    // Browse comes back to the file last previewed; its crumbs lead back to the root.
    b.click(".files-panel .files-tabs button[data-tab=browse]")
        .await;
    b.until(
        "the image again",
        "return !!document.querySelector('.files-panel img.file-image')",
    )
    .await;
    b.shot("phone-image").await;
    b.click(".files-panel .files-crumbs a[data-path=\"\"]")
        .await;
    b.until(
        "the listing at phone width",
        "return !!document.querySelector('.files-panel li.entry[data-name=\"README.md\"]')",
    )
    .await;
    let state = layout(&b).await;
    assert_eq!(state["overflow"], false, "{state}");
    assert!(state["panel"].as_f64().unwrap() <= 390.0, "{state}");
    b.shot("phone-browse").await;
    b.click(".files-panel .files-tabs button[data-tab=changed]")
        .await;
    b.until(
        "the changes at phone width",
        "return document.querySelectorAll('.files-panel details.changed').length === 3",
    )
    .await;
    b.js("document.querySelector('.files-panel details.changed[data-path=\"src/lib.rs\"]').open = true; return null;")
        .await;
    let state = layout(&b).await;
    assert_eq!(state["overflow"], false, "{state}");
    b.shot("phone-changed").await;
    b.close().await;
}
