//! Request bodies held to fixtures: how an adapter sends what the model reads, images first.
//!
//! A response fixture is a body the provider sent; a request fixture is the JSON body the
//! adapter builds, written once from the provider's documentation (or recorded) and compared
//! exactly afterwards, so a change of wire form is a visible diff of a fixture file.
//! `PENGUIN_RECORD_FIXTURES=1` writes the fixtures anew (then read the diff).

use std::path::Path;

use penguin_omni_protocol::{build, StopReason};
use serde_json::{json, Value};

use crate::wire::{ModelConfig, WireProtocol};

/// A 1×1 PNG as a `data:` URL: what `read_image` and `penguin run --image` hand a model.
pub const PNG_DATA_URL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// An image by reference (a provider that takes only inline images leaves it out).
pub const IMAGE_HTTP_URL: &str = "https://example.com/diagram.png";

/// The two requests every adapter's image forms are checked with, as
/// `{"user_images": {path, body}, "tool_output_images": {path, body}}`:
///
/// 1. the user's input: a text, an inline image and an image by URL (`penguin run --image`,
///    `@shot.png` in chat, an API `image_url` part);
/// 2. after the model called `read_image` (committed), the tool's output carrying the image
///    as a `data:` URL in its `images`, the way the built-in tool answers.
///
/// Headers are left out (they hold the key).
pub fn image_requests<P: WireProtocol>(mut protocol: P, config: &ModelConfig) -> Value {
    let first = vec![
        build::user_text("What is in these pictures?"),
        build::image_url(PNG_DATA_URL),
        build::image_url(IMAGE_HTTP_URL),
    ];
    let user_images = protocol.build_request(config, &first, None);
    let reply = vec![build::tool_call(
        "read_image",
        r#"{"path":"shot.png"}"#,
        "call_1",
        StopReason::Completed,
        None,
    )];
    protocol.commit(&first, &reply);
    let second = vec![build::tool_call_output_with_images(
        "Image shot.png: PNG, 1×1 pixels, 67 B (attached to this result)",
        "call_1",
        StopReason::Completed,
        vec![PNG_DATA_URL.to_owned()],
    )];
    let tool_output = protocol.build_request(config, &second, None);
    json!({
        "user_images": {"path": user_images.path, "body": user_images.body},
        "tool_output_images": {"path": tool_output.path, "body": tool_output.body},
    })
}

/// Asserts that `got` equals the JSON in the fixture at `path`; with
/// `PENGUIN_RECORD_FIXTURES` set, writes `got` there instead (pretty-printed).
pub fn assert_request_fixture(path: impl AsRef<Path>, got: &Value) {
    let path = path.as_ref();
    let pretty = serde_json::to_string_pretty(got).expect("a JSON value serializes") + "\n";
    if std::env::var_os("PENGUIN_RECORD_FIXTURES").is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        }
        std::fs::write(path, &pretty)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "cannot read the request fixture {} ({e}); PENGUIN_RECORD_FIXTURES=1 writes it",
            path.display()
        )
    });
    let want: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    if *got != want {
        let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
        let want_pretty = serde_json::to_string_pretty(&want).expect("a JSON value serializes");
        panic!(
            "the request differs from {} (PENGUIN_RECORD_FIXTURES=1 rewrites it); by line of the pretty JSON, {}",
            path.display(),
            super::lines_diff(&lines(&want_pretty), &lines(&pretty))
        );
    }
}
