//! Images in a prompt end to end: `penguin run --image FILE` and an `@shot.png` mention against
//! the stub OpenAI-compatible model, checking what the request carries; and a model configured
//! without vision, which gets the image saved in the workspace and its path instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

#[path = "support/stub_model.rs"]
mod stub_model;

use stub_model::messages;

/// A 2×1 PNG (a red and a green pixel).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x7b, 0x40, 0xe8,
    0xdd, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0x00, 0x04,
    0xff, 0x01, 0x07, 0x00, 0x01, 0xff, 0xe2, 0x23, 0x9e, 0x59, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

const PNG_URL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4zwAE/wEHAAH/4iOeWQAAAABJRU5ErkJggg==";

struct Ran {
    _base: tempfile::TempDir,
    ws: PathBuf,
    stderr: String,
    /// The one request the model received.
    request: Value,
}

impl Ran {
    /// The user message's content parts (one text is a plain string: made a part here).
    fn user_parts(&self) -> Vec<Value> {
        let users = messages(&self.request, "user");
        assert_eq!(users.len(), 1, "{:#}", self.request);
        match &users[0]["content"] {
            Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
            Value::Array(parts) => parts.clone(),
            other => panic!("{other}"),
        }
    }
}

/// `penguin run ARGS` in a workspace holding `img/dot.png` (and `outside.png` beside it), with
/// the stub model (`[models.stub]` plus `model_extra`) answering `done`.
fn run(model_extra: &str, args: &[&str]) -> Ran {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir_all(ws.join("img")).unwrap();
    std::fs::create_dir(&home).unwrap();
    std::fs::write(ws.join("img/dot.png"), PNG).unwrap();
    std::fs::write(root.join("outside.png"), PNG).unwrap();
    let (url, requests) = stub_model::serve_script(vec![stub_model::text("done")]);
    std::fs::write(
        home.join("config.toml"),
        format!("default_model = \"stub\"\n[models.stub]\nprotocol = \"openai-chat\"\nbase_url = \"{url}\"\nmodel = \"stub\"\napi_key_env = \"STUB_KEY\"\n{model_extra}\n"),
    )
    .unwrap();
    let out = penguin(&home, &ws, &root, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let mut requests = requests.all();
    assert_eq!(requests.len(), 1, "{stderr}");
    Ran {
        _base: base,
        ws,
        stderr,
        request: requests.remove(0),
    }
}

fn penguin(home: &Path, ws: &Path, cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_penguin"))
        .current_dir(cwd)
        .env("PENGUIN_HOME", home)
        .env("STUB_KEY", "k")
        .env_remove("PENGUIN_MODEL")
        .env_remove("PENGUIN_PROVIDER")
        .args(["run", "--yes", "--sandbox", "off", "--workspace"])
        .arg(ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn image_url(url: &str) -> Value {
    serde_json::json!({"type": "image_url", "image_url": {"url": url}})
}

fn text(text: &str) -> Value {
    serde_json::json!({"type": "text", "text": text})
}

#[test]
fn run_image_sends_the_file_as_an_image_part_after_the_prompt() {
    // --image is relative to the current directory (here the workspace's parent).
    let r = run(
        "",
        &[
            "--image",
            "ws/img/dot.png",
            "--image",
            "outside.png",
            "what are these?",
        ],
    );
    assert_eq!(
        r.user_parts(),
        [
            text("what are these?"),
            image_url(PNG_URL),
            image_url(PNG_URL)
        ]
    );
    assert!(
        r.stderr
            .contains("attached: ws/img/dot.png (PNG, 70 B), outside.png (PNG, 70 B)"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_at_mention_of_a_workspace_image_attaches_it() {
    let r = run(
        "",
        &["what is in @img/dot.png? and @../outside.png, @nope.png"],
    );
    assert_eq!(
        r.user_parts(),
        [
            text("what is in @img/dot.png? and @../outside.png, @nope.png"),
            image_url(PNG_URL)
        ]
    );
    for said in [
        "attached: @img/dot.png (PNG, 70 B)",
        "@../outside.png: outside the workspace: not attached",
        "@nope.png: no such file: not attached",
    ] {
        assert!(r.stderr.contains(said), "{said}: {}", r.stderr);
    }
}

#[test]
fn a_model_without_vision_gets_the_image_saved_in_the_workspace_and_its_path() {
    let r = run("vision = false", &["--image", "outside.png", "what is it?"]);
    let parts = r.user_parts();
    assert!(
        !r.request.to_string().contains("image_url"),
        "{:#}",
        r.request
    );
    assert_eq!(parts[0], text("what is it?"));
    let line = parts[1]["text"].as_str().unwrap();
    let path = line
        .strip_prefix("[attached image: ")
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        path.starts_with(".penguin/images/") && path.ends_with(".png"),
        "{path}"
    );
    assert_eq!(std::fs::read(r.ws.join(path)).unwrap(), PNG);
}

#[test]
fn a_file_that_is_not_an_image_is_refused_before_the_model_is_asked() {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("notes.png"), "plain text").unwrap();
    let out = penguin(
        base.path(),
        &ws,
        &ws,
        &["--model", "demo", "--image", "notes.png", "hi"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--image notes.png: not a PNG, JPEG, GIF or WebP image"),
        "{stderr}"
    );
}
