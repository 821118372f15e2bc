//! The files panel's routes over a served facade session with the real built-in tools
//! (issue 42, item 2): a folder listed with the ignore files honoured and penguin's data root
//! left out, a file's bytes served with the headers that keep it from running as part of the
//! page, every escape (`..`, an absolute path, a link out, a link into the data root) refused
//! naming why, a FIFO refused without hanging, a large file sent only as a download; and the
//! files a session's tasks changed, with their diffs, from its checkpoints.

use std::sync::Arc;

use penguin_server::testing::{serve, within, TestDir, TestServer, TOKEN};
use serde_json::{json, Value};

use crate::background::{named_call_turn, text_turn, RealTools};

/// A raw answer: status, headers and bytes (a file's content is no JSON).
struct Raw {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn error(&self) -> (u16, String, String) {
        let v: Value = serde_json::from_slice(&self.body).unwrap_or(Value::Null);
        (
            self.status,
            v["error"]["code"].as_str().unwrap_or("").to_owned(),
            v["error"]["message"].as_str().unwrap_or("").to_owned(),
        )
    }
}

async fn raw(srv: &TestServer, path: &str) -> Raw {
    let res = within(srv.http.get(srv.url(path)).bearer_auth(TOKEN).send())
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = within(res.bytes()).await.unwrap().to_vec();
    Raw {
        status,
        headers,
        body,
    }
}

fn names(listing: &Value) -> Vec<(String, String)> {
    listing["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {listing}"))
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn q(s: &str) -> String {
    s.replace('%', "%25")
        .replace('&', "%26")
        .replace('/', "%2F")
        .replace(' ', "%20")
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspace_is_listed_and_read_through_the_door_and_escapes_are_refused() {
    let dir = TestDir::new();
    let ws = std::fs::canonicalize(dir.workspace()).unwrap();
    // penguin's data root inside the workspace: never listed, never read, whatever the path.
    let data = ws.join("state");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("secret.txt"), "the token").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("passwd"), "root:x:0:0").unwrap();

    std::fs::write(ws.join(".gitignore"), "target/\n*.log\n").unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(ws.join("target")).unwrap();
    std::fs::write(ws.join("target/app"), "built").unwrap();
    std::fs::write(ws.join("debug.log"), "noise").unwrap();
    std::fs::write(
        ws.join("page.html"),
        "<html><script>fetch('/api/sessions')</script></html>",
    )
    .unwrap();
    std::fs::write(ws.join("logo.svg"), "<svg><script>alert(1)</script></svg>").unwrap();
    std::fs::write(ws.join("pic.png"), PNG).unwrap();
    std::fs::write(ws.join("blob.bin"), [0u8, 1, 2, 3]).unwrap();
    std::fs::write(ws.join("big.txt"), "x".repeat(3 << 20)).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink(outside.path(), ws.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("passwd"), ws.join("passwd")).unwrap();
    std::os::unix::fs::symlink("src", ws.join("linked")).unwrap();
    std::os::unix::fs::symlink(data.join("secret.txt"), ws.join("tok")).unwrap();

    let srv = serve(dir, Arc::new(RealTools { llm: json!([]) }), |o| {
        o.data_root = data.clone();
    })
    .await;
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string()}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["session"]["id"].as_str().unwrap().to_owned();
    let files = |query: &str| format!("/api/sessions/{id}/files{query}");

    // The root: folders first, then by name; ignored files, .git and the data root left out.
    let root = srv.get(&files("")).await;
    assert_eq!(root.status, 200, "{}", root.body);
    assert_eq!(root.body["path"], "");
    let listed = names(&root.body);
    let kinds: Vec<(&str, &str)> = listed
        .iter()
        .map(|(n, k)| (n.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("src", "dir"),
            (".gitignore", "file"),
            ("big.txt", "file"),
            ("blob.bin", "file"),
            ("linked", "symlink"),
            ("logo.svg", "file"),
            ("out", "symlink"),
            ("page.html", "file"),
            ("passwd", "symlink"),
            ("pic.png", "file"),
            ("pipe", "other"),
            ("tok", "symlink"),
        ],
        "{}",
        root.body
    );
    let big = &root.body["entries"][2];
    assert_eq!(big["size"], 3 << 20);
    assert!(
        big["mtimeMs"].as_u64().unwrap() > 1_600_000_000_000,
        "{big}"
    );
    assert_eq!(root.body["entries"][4]["target"], "src");

    let src = srv.get(&files("?path=src")).await;
    assert_eq!(names(&src.body), [("main.rs".into(), "file".into())]);
    // A link to a folder inside the workspace is followed as the file tools follow it.
    let linked = srv.get(&files("?path=linked")).await;
    assert_eq!(linked.status, 200, "{}", linked.body);
    assert_eq!(linked.body["path"], "src");

    let refused = |r: penguin_server::testing::Reply| {
        (
            r.status,
            r.body["error"]["code"].as_str().unwrap_or("").to_owned(),
            r.body["error"]["message"].as_str().unwrap_or("").to_owned(),
        )
    };
    for (path, why) in [
        ("..", "outside the workspace"),
        ("src/../..", "outside the workspace"),
        ("/etc", "outside the workspace"),
        ("out", "outside the workspace"),
        ("state", "penguin's own state"),
    ] {
        let (status, code, message) = refused(srv.get(&files(&format!("?path={}", q(path)))).await);
        assert_eq!(
            (status, code.as_str()),
            (400, "path_refused"),
            "{path}: {message}"
        );
        assert!(message.contains(why), "{path}: {message}");
    }
    let (status, code, message) = refused(srv.get(&files("?path=nowhere")).await);
    assert_eq!(
        (status, code.as_str()),
        (404, "file_not_found"),
        "{message}"
    );
    assert!(message.contains("nowhere"), "{message}");
    let (status, code, message) = refused(srv.get(&files("?path=big.txt")).await);
    assert_eq!(
        (status, code.as_str()),
        (400, "not_a_directory"),
        "{message}"
    );
    assert!(
        message.contains("big.txt is a file, not a directory"),
        "{message}"
    );
    let (status, code, message) = refused(srv.get(&files("?path=src&depth=2")).await);
    assert_eq!((status, code.as_str()), (400, "invalid_query"), "{message}");
    assert!(message.contains("depth"), "{message}");

    // Content: text as text/plain whatever it holds, a raster image as itself, anything else
    // an attachment; every answer sandboxed and not sniffed.
    let content = |path: &str| format!("/api/sessions/{id}/files/content?path={}", q(path));
    let main = raw(&srv, &content("src/main.rs")).await;
    assert_eq!(main.status, 200);
    assert_eq!(main.body, b"fn main() {}\n");
    assert_eq!(main.header("content-type"), "text/plain; charset=utf-8");
    assert_eq!(main.header("x-content-type-options"), "nosniff");
    assert_eq!(
        main.header("content-security-policy"),
        "sandbox; default-src 'none'"
    );
    for page in ["page.html", "logo.svg"] {
        let r = raw(&srv, &content(page)).await;
        assert_eq!(r.status, 200, "{page}");
        assert_eq!(
            r.header("content-type"),
            "text/plain; charset=utf-8",
            "{page}"
        );
        assert!(r.header("content-security-policy").starts_with("sandbox;"));
    }
    let pic = raw(&srv, &content("pic.png")).await;
    assert_eq!(pic.header("content-type"), "image/png");
    assert!(pic
        .header("content-security-policy")
        .starts_with("sandbox;"));
    assert!(pic.header("content-disposition").starts_with("inline"));
    let blob = raw(&srv, &content("blob.bin")).await;
    assert_eq!(blob.header("content-type"), "application/octet-stream");
    assert!(
        blob.header("content-disposition")
            .starts_with("attachment; filename=\"blob.bin\""),
        "{}",
        blob.header("content-disposition")
    );
    let through = raw(&srv, &content("linked/main.rs")).await;
    assert_eq!(
        (through.status, through.body.as_slice()),
        (200, &b"fn main() {}\n"[..])
    );
    let download = raw(&srv, &format!("{}&download=1", content("src/main.rs"))).await;
    assert_eq!(download.status, 200);
    assert_eq!(download.header("content-type"), "application/octet-stream");
    assert!(download
        .header("content-disposition")
        .starts_with("attachment"));

    for (path, why) in [
        ("../x", "outside the workspace"),
        ("/etc/passwd", "outside the workspace"),
        ("passwd", "outside the workspace"),
        ("out/passwd", "outside the workspace"),
        ("tok", "penguin's own state"),
        ("state/secret.txt", "penguin's own state"),
    ] {
        let (status, code, message) = raw(&srv, &content(path)).await.error();
        assert_eq!(
            (status, code.as_str()),
            (400, "path_refused"),
            "{path}: {message}"
        );
        assert!(message.contains(why), "{path}: {message}");
    }
    // A FIFO is refused at once, never opened for a read that would wait for a writer.
    let (status, code, message) = raw(&srv, &content("pipe")).await.error();
    assert_eq!((status, code.as_str()), (400, "not_a_file"), "{message}");
    assert!(message.contains("FIFO"), "{message}");
    let (status, code, message) = raw(&srv, &content("src")).await.error();
    assert_eq!((status, code.as_str()), (400, "not_a_file"), "{message}");
    assert!(message.contains("a directory"), "{message}");
    let (status, code, message) = raw(&srv, &content("missing.txt")).await.error();
    assert_eq!(
        (status, code.as_str()),
        (404, "file_not_found"),
        "{message}"
    );
    let (status, code, message) = raw(&srv, &format!("/api/sessions/{id}/files/content"))
        .await
        .error();
    assert_eq!((status, code.as_str()), (400, "invalid_query"), "{message}");
    assert!(message.starts_with("path:"), "{message}");
    let (status, code, message) = raw(&srv, &format!("{}&download=maybe", content("big.txt")))
        .await
        .error();
    assert_eq!((status, code.as_str()), (400, "invalid_query"), "{message}");

    // A large file: no preview, but downloaded whole.
    let (status, code, message) = raw(&srv, &content("big.txt")).await.error();
    assert_eq!(
        (status, code.as_str()),
        (413, "file_too_large"),
        "{message}"
    );
    assert!(message.contains("download=1"), "{message}");
    let whole = raw(&srv, &format!("{}&download=1", content("big.txt"))).await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body.len(), 3 << 20);
    assert_eq!(whole.header("content-length"), (3 << 20).to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_a_session_changed_are_listed_with_their_diffs() {
    let exec = |id: &str, cmd: &str| named_call_turn("exec_command", id, json!({ "cmd": cmd }));
    let llm = json!([
        named_call_turn("read_file", "c_read", json!({"path": "notes.txt"})),
        named_call_turn(
            "edit_file",
            "c_edit",
            json!({"path": "notes.txt", "old_string": "two", "new_string": "2"})
        ),
        named_call_turn(
            "write_file",
            "c_write",
            json!({"path": "src/new.rs", "content": "pub fn made() {}\n"})
        ),
        exec("c_rm", "rm gone.txt"),
        text_turn("Done."),
        text_turn("Nothing more."),
    ]);
    let dir = TestDir::new();
    let ws = dir.workspace();
    std::fs::write(ws.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(ws.join("kept.txt"), "as it was\n").unwrap();
    std::fs::write(ws.join("mine.txt"), "a\n").unwrap();
    let srv = serve(dir, Arc::new(RealTools { llm }), |_| {}).await;
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string(), "approvalMode": "allow-all"}),
        )
        .await;
    let id = created.body["session"]["id"].as_str().unwrap().to_owned();
    let changes = format!("/api/sessions/{id}/files/changes");

    // Before any task there is no checkpoint to compare with: said, not guessed.
    let none = srv.get(&changes).await;
    assert_eq!(none.status, 409, "{}", none.body);
    assert_eq!(none.body["error"]["code"], "no_checkpoints");

    assert_eq!(srv.task(&id, "edit things").await.status, 202);
    srv.until_idle(&id).await;
    // A person's change between the session's tasks is marked as such.
    std::fs::write(ws.join("mine.txt"), "a\nb\n").unwrap();
    assert_eq!(srv.task(&id, "anything else?").await.status, 202);
    srv.until_idle(&id).await;

    let r = srv.get(&changes).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["sinceMs"].as_u64().unwrap() > 0, "{}", r.body);
    let files = r.body["files"].as_array().unwrap();
    let by_path = |p: &str| {
        files
            .iter()
            .find(|f| f["path"] == p)
            .unwrap_or_else(|| panic!("{p} not in {}", r.body))
    };
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["gone.txt", "mine.txt", "notes.txt", "src/new.rs"],
        "{}",
        r.body
    );

    let notes = by_path("notes.txt");
    assert_eq!(notes["status"], "modified");
    assert_eq!(
        (notes["added"].clone(), notes["removed"].clone()),
        (json!(1), json!(1))
    );
    let diff = notes["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("--- a/notes.txt\n+++ b/notes.txt\n@@"),
        "{diff}"
    );
    assert!(diff.contains("-two\n+2\n"), "{diff}");
    assert!(notes.get("others").is_none(), "{notes}");

    let made = by_path("src/new.rs");
    assert_eq!(made["status"], "added");
    let diff = made["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("--- /dev/null\n+++ b/src/new.rs"),
        "{diff}"
    );
    assert!(diff.contains("+pub fn made() {}"), "{diff}");

    let gone = by_path("gone.txt");
    assert_eq!(gone["status"], "deleted");
    assert!(
        gone["diff"].as_str().unwrap().contains("+++ /dev/null\n"),
        "{gone}"
    );

    let mine = by_path("mine.txt");
    assert_eq!(mine["status"], "modified");
    assert_eq!(mine["others"], true, "{mine}");
}
