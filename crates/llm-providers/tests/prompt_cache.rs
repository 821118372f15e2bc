//! Prompt caching, per adapter (issue 38): the fields each request carries for it, held to
//! request fixtures (`tests/fixtures/requests/<adapter>_cache.json`: the first two requests of
//! a session), and the byte-stable prefix every provider's cache needs, over a ten-request
//! session (`testkit::requests::session_requests`, `assert_prefix_stable`).
//!
//! - Anthropic: `cache_control` breakpoints on the last tool, the system prompt, the newest
//!   turn and where the previous request's newest turn was; at most four; the prefix is
//!   byte-stable once they are taken out (they move; the cache matches what they mark).
//! - OpenAI Responses and Chat: `prompt_cache_key`, the session's key, on every request.
//! - Gemini and Ollama: nothing (implicit caching, and a runner that reuses its KV cache).
//! - `prompt_cache = false`: no caching field in any request.
//!
//! `PENGUIN_RECORD_FIXTURES=1` rewrites the fixtures.

// The packaged crate has no test kit unless asked (`--features testkit`).
#![cfg(feature = "testkit")]

use penguin_llm_providers::testkit::requests::{
    assert_prefix_stable, assert_request_fixture, session_requests, without_cache_control,
};
use penguin_llm_providers::wire::{ModelConfig, WireProtocol};
use penguin_omni_protocol::ToolDefinition;
use serde_json::{json, Value};

#[allow(unused_imports)]
mod common;

/// Requests per session: ten, as the issue asks.
const REQUESTS: usize = 10;

fn config() -> ModelConfig {
    let mut config = ModelConfig::new("http://127.0.0.1:9", "m");
    config.max_output_tokens = 1024;
    config.system_prompt = "You are penguin, a coding agent.".into();
    config.cache_key = Some("6f1c0e9a-session".into());
    config.tools = vec![
        ToolDefinition {
            name: "exec_command".into(),
            description: "Runs a command.".into(),
            parameters: Some(json!({
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"]
            })),
        },
        ToolDefinition {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: Some(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"]
            })),
        },
    ];
    config
}

/// Every place `key` occurs in `value`, as JSON pointers, sorted.
fn paths_of(value: &Value, key: &str) -> Vec<String> {
    fn walk(v: &Value, key: &str, path: String, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    let here = format!("{path}/{k}");
                    if k == key {
                        out.push(here.clone());
                    }
                    walk(v, key, here, out);
                }
            }
            Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(v, key, format!("{path}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, key, String::new(), &mut out);
    out.sort();
    out
}

/// The session's bodies, checked for a byte-stable prefix, its first two held to the cache
/// fixture; and the same session with caching off, checked to carry no caching field.
fn check<P: WireProtocol>(name: &str, protocol: fn() -> P, conversation: &str) -> Vec<Value> {
    let bodies = session_requests(protocol(), &config(), REQUESTS);
    assert_eq!(bodies.len(), REQUESTS);
    assert_prefix_stable(&bodies, conversation);
    let path = common::fixture_dir("requests").join(format!("{name}_cache.json"));
    assert_request_fixture(path, &json!({"first": bodies[0], "second": bodies[1]}));

    let mut off = config();
    off.prompt_cache = false;
    let plain = session_requests(protocol(), &off, REQUESTS);
    assert_prefix_stable(&plain, conversation);
    for body in &plain {
        assert!(paths_of(body, "cache_control").is_empty(), "{name}: {body}");
        assert!(body.get("prompt_cache_key").is_none(), "{name}: {body}");
    }
    bodies
}

/// The caching fields an adapter that caches by key sends: `prompt_cache_key` on every
/// request, the session's, and nothing else.
fn sends_the_key_only(bodies: &[Value]) {
    for body in bodies {
        assert_eq!(body["prompt_cache_key"], "6f1c0e9a-session");
        assert!(paths_of(body, "cache_control").is_empty());
    }
}

/// No caching field at all.
fn sends_nothing(bodies: &[Value]) {
    for body in bodies {
        assert!(paths_of(body, "cache_control").is_empty());
        assert!(paths_of(body, "prompt_cache_key").is_empty());
    }
}

#[cfg(feature = "openai-chat")]
#[test]
fn openai_chat_sends_the_session_key_and_a_stable_prefix() {
    let bodies = check(
        "openai_chat",
        penguin_llm_providers::openai_chat::OpenAiChat::new,
        "messages",
    );
    sends_the_key_only(&bodies);
    // No key configured, none sent (caching stays on: OpenAI's is automatic).
    let mut keyless = config();
    keyless.cache_key = None;
    let body = session_requests(
        penguin_llm_providers::openai_chat::OpenAiChat::new(),
        &keyless,
        1,
    );
    assert!(body[0].get("prompt_cache_key").is_none());
}

#[cfg(feature = "openai-responses")]
#[test]
fn openai_responses_sends_the_session_key_and_a_stable_prefix() {
    let bodies = check(
        "openai_responses",
        penguin_llm_providers::openai_responses::OpenAiResponses::new,
        "input",
    );
    sends_the_key_only(&bodies);
}

#[cfg(feature = "gemini")]
#[test]
fn gemini_sends_nothing_and_a_stable_prefix() {
    let bodies = check(
        "gemini",
        penguin_llm_providers::gemini::Gemini::new,
        "contents",
    );
    sends_nothing(&bodies);
}

#[cfg(feature = "ollama")]
#[test]
fn ollama_sends_nothing_and_a_stable_prefix() {
    let bodies = check(
        "ollama",
        penguin_llm_providers::ollama::Ollama::new,
        "messages",
    );
    sends_nothing(&bodies);
}

/// Where each Anthropic body marks its newest turn: the last marked block of the last
/// message, as (message, block).
#[cfg(feature = "anthropic-messages")]
fn newest_breakpoint(body: &Value) -> (usize, usize) {
    let messages = body["messages"].as_array().unwrap();
    let last = messages.len() - 1;
    let blocks = messages[last]["content"].as_array().unwrap();
    let block = blocks
        .iter()
        .rposition(|b| b.get("cache_control").is_some())
        .unwrap_or_else(|| panic!("the newest turn carries no breakpoint: {body}"));
    (last, block)
}

#[cfg(feature = "anthropic-messages")]
#[test]
fn anthropic_moves_its_breakpoints_and_keeps_a_stable_prefix() {
    let bodies = check(
        "anthropic_messages",
        penguin_llm_providers::anthropic_messages::AnthropicMessages::new,
        "messages",
    );
    for body in &bodies {
        assert!(body.get("prompt_cache_key").is_none());
    }
    let mut previous: Option<(usize, usize)> = None;
    for (n, body) in bodies.iter().enumerate() {
        let marks = paths_of(body, "cache_control");
        assert!(
            marks.len() <= penguin_llm_providers::anthropic_messages::MAX_CACHE_BREAKPOINTS,
            "request {}: {marks:?}",
            n + 1
        );
        // The stable prefix: the last tool and the system prompt, every time.
        assert!(marks.contains(&"/tools/1/cache_control".to_owned()));
        assert!(marks.contains(&"/system/0/cache_control".to_owned()));
        // The newest turn: its last block (the session's user turns end in a block that may
        // carry one).
        let (message, block) = newest_breakpoint(body);
        let last_block = body["messages"][message]["content"]
            .as_array()
            .unwrap()
            .len()
            - 1;
        assert_eq!(block, last_block, "request {}", n + 1);
        // The entry the previous request wrote is read here: its newest turn is marked still.
        if let Some((m, b)) = previous {
            assert!(
                marks.contains(&format!("/messages/{m}/content/{b}/cache_control")),
                "request {} lost the breakpoint of request {n} at message {m}: {marks:?}",
                n + 1
            );
            assert_eq!(marks.len(), 4, "request {}: {marks:?}", n + 1);
        }
        // Nothing else is marked: the breakpoints move on.
        let messages_marked = marks.iter().filter(|p| p.starts_with("/messages/")).count();
        assert_eq!(
            messages_marked,
            1 + usize::from(previous.is_some()),
            "request {}: {marks:?}",
            n + 1
        );
        previous = Some((message, block));
    }
    // Taken out, the breakpoints leave exactly the request sent with caching off.
    let mut off = config();
    off.prompt_cache = false;
    let plain = session_requests(
        penguin_llm_providers::anthropic_messages::AnthropicMessages::new(),
        &off,
        REQUESTS,
    );
    for (cached, plain) in bodies.iter().zip(&plain) {
        let mut stripped = without_cache_control(cached);
        // The system prompt is a one-block list when it carries a breakpoint.
        stripped["system"] = stripped["system"][0]["text"].clone();
        assert_eq!(&stripped, plain);
    }
}

/// The check is not blind: a byte changed early (a tool), or the same keys in another order,
/// is caught even though every message is kept.
#[test]
fn a_changed_byte_or_a_reordered_key_early_is_caught() {
    let first = json!({"tools": [{"name": "a"}], "messages": [{"role": "user"}]});
    let changed =
        json!({"tools": [{"name": "b"}], "messages": [{"role": "user"}, {"role": "assistant"}]});
    let reordered =
        json!({"messages": [{"role": "user"}, {"role": "assistant"}], "tools": [{"name": "a"}]});
    for later in [changed, reordered] {
        let caught = std::panic::catch_unwind(|| {
            assert_prefix_stable(&[first.clone(), later.clone()], "messages")
        });
        assert!(
            caught.is_err(),
            "{later} passed as a prefix-stable successor of {first}"
        );
    }
    let grown =
        json!({"tools": [{"name": "a"}], "messages": [{"role": "user"}, {"role": "assistant"}]});
    assert_prefix_stable(&[first, grown], "messages");
}
