//! Request bodies held to fixtures: how an adapter sends what the model reads, images first.
//!
//! A response fixture is a body the provider sent; a request fixture is the JSON body the
//! adapter builds, written once from the provider's documentation (or recorded) and compared
//! exactly afterwards, so a change of wire form is a visible diff of a fixture file.
//! `PENGUIN_RECORD_FIXTURES=1` writes the fixtures anew (then read the diff).

use std::path::Path;

use penguin_omni_protocol::{build, Fidelity, OmniMessage, StopReason};
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

/// The bodies of a `requests`-request session, in order, each built on the history the ones
/// before committed, the way a real session grows: a user's task; replies that think (with a
/// signature), say something and call one or two tools; the tools' outputs (one with an
/// image); every third reply a plain answer, then the user's next prompt. Headers are left
/// out (they hold the key).
///
/// What prompt caching needs from them is [`assert_prefix_stable`]; the first two are what a
/// cache fixture holds.
pub fn session_requests<P: WireProtocol>(
    mut protocol: P,
    config: &ModelConfig,
    requests: usize,
) -> Vec<Value> {
    let mut bodies = Vec::with_capacity(requests);
    let mut input = vec![build::user_text("Fix the failing test in src/lib.rs.")];
    let mut call = 0;
    for i in 0..requests {
        bodies.push(protocol.build_request(config, &input, None).body);
        let mut signature = Fidelity::new();
        signature.insert("signature".into(), json!(format!("sig-{i}")));
        let mut reply = vec![
            build::thinking(
                format!("Step {i}: what next?"),
                StopReason::Completed,
                Some(signature),
            ),
            build::assistant_text(format!("Working on step {i}."), StopReason::Completed),
        ];
        let calls = match i % 3 {
            0 => 2,
            1 => 1,
            _ => 0,
        };
        let mut outputs: Vec<OmniMessage> = Vec::new();
        for _ in 0..calls {
            call += 1;
            let id = format!("call_{call}");
            reply.push(build::tool_call(
                "exec_command",
                format!(r#"{{"cmd":"cargo test -- step{call}"}}"#),
                &id,
                StopReason::Completed,
                None,
            ));
            outputs.push(if call == 3 {
                build::tool_call_output_with_images(
                    "Image shot.png: PNG, 1×1 pixels",
                    &id,
                    StopReason::Completed,
                    vec![PNG_DATA_URL.to_owned()],
                )
            } else {
                build::tool_call_output(
                    format!("test step{call} ... ok"),
                    &id,
                    StopReason::Completed,
                )
            });
        }
        protocol.commit(&input, &reply);
        input = if outputs.is_empty() {
            vec![build::user_text(format!("Good. Now step {}.", i + 1))]
        } else {
            outputs
        };
    }
    bodies
}

/// Every `cache_control` key taken out of `value`, at any depth: what Anthropic's cache
/// matches on (a breakpoint marks where an entry ends; it is not part of the entry).
pub fn without_cache_control(value: &Value) -> Value {
    match value {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), without_cache_control(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_cache_control).collect()),
        other => other.clone(),
    }
}

/// Asserts that each of `bodies` is, byte for byte, the start of the next: serialized as
/// the HTTP shell sends it, a body equals the next one with its `conversation` array (the
/// key holding the messages: `messages`, `input`, `contents`) cut to the earlier one's
/// length. So the tools, the system prompt, every other setting and every earlier message
/// serialize to exactly the same bytes in each next request, which is what a provider's
/// prefix cache needs: one byte changed early costs the whole cache. `cache_control` keys are
/// taken out first ([`without_cache_control`]): Anthropic's breakpoints move, its cache
/// matches the content they mark.
pub fn assert_prefix_stable(bodies: &[Value], conversation: &str) {
    let bodies: Vec<Value> = bodies.iter().map(without_cache_control).collect();
    for (n, pair) in bodies.windows(2).enumerate() {
        let (earlier, later) = (&pair[0], &pair[1]);
        let held = earlier[conversation]
            .as_array()
            .unwrap_or_else(|| panic!("request {} has no {conversation:?} array", n + 1))
            .len();
        let mut cut = later.clone();
        let grown = cut[conversation]
            .as_array_mut()
            .unwrap_or_else(|| panic!("request {} has no {conversation:?} array", n + 2));
        assert!(
            grown.len() > held,
            "request {} does not extend the conversation of request {}",
            n + 2,
            n + 1
        );
        grown.truncate(held);
        let want = serde_json::to_string(earlier).expect("a JSON value serializes");
        let got = serde_json::to_string(&cut).expect("a JSON value serializes");
        if want != got {
            let pretty = |v: &Value| {
                serde_json::to_string_pretty(v)
                    .expect("a JSON value serializes")
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            };
            panic!(
                "request {} does not start with the bytes of request {}; by line of the pretty JSON, {}",
                n + 2,
                n + 1,
                super::lines_diff(&pretty(earlier), &pretty(&cut))
            );
        }
    }
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
