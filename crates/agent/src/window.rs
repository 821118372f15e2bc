//! A model's context window, and the prompt profile it calls for.
//!
//! penguin knows a window three ways, in this order: configured (`context_window` in
//! `config.toml`), asked from the model's server (llama.cpp's `GET /props`, Ollama's
//! `POST /api/show`), or the window of a well-known hosted model id ([`known_window`]). The
//! server is asked only when the model is not one of the hosted APIs (its base URL is not the
//! protocol's default), within [`DISCOVERY_TIMEOUT`]; a server that does not answer, or answers
//! something else, leaves the window unknown, quietly.
//!
//! The window picks a [`Profile`]: the full prompt and tool definitions, or under a small
//! window ([`COMPACT_WINDOW`] tokens or fewer) the compact ones, and at [`ESSENTIAL_WINDOW`] or
//! fewer the essential tools only. [`check_fit`] refuses, before any request, a prompt that
//! cannot fit even so, naming the window and the prompt's size in one line.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use penguin_llm_providers::limits::base_input_tokens;
use penguin_omni_protocol::ToolDefinition;
use serde_json::Value;

use crate::models::{default_base_url, ModelSpec, Protocol};

/// A window of this many tokens or fewer gets the compact prompt and tool definitions.
pub const COMPACT_WINDOW: u64 = 8_192;

/// A window of this many tokens or fewer (llama.cpp's and Ollama's usual default) gets only the
/// essential tools ([`penguin_tools::BuiltinTool::ESSENTIAL`]), so the conversation has room.
pub const ESSENTIAL_WINDOW: u64 = 4_096;

/// The least room the conversation needs beside the system prompt and the tool definitions:
/// the first message and a short answer. A prompt that leaves less is refused.
pub const CONVERSATION_RESERVE: u64 = 512;

/// How long the model's server is given to say its window.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Ollama's context window when a model sets no `num_ctx` (its `OLLAMA_CONTEXT_LENGTH`
/// default): what it cuts a prompt at, whatever the model was trained for.
pub const OLLAMA_DEFAULT_WINDOW: u64 = 4_096;

/// Where a window comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WindowSource {
    /// `context_window` of the model's configuration.
    Configured,
    /// llama.cpp's `GET /props` (`default_generation_settings.n_ctx`: one slot's window).
    LlamaCppProps,
    /// Ollama's `POST /api/show` (the model's `num_ctx`, else Ollama's default within the
    /// model's `context_length`).
    OllamaShow,
    /// [`known_window`]'s table of well-known model ids.
    KnownModel,
}

impl std::fmt::Display for WindowSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WindowSource::Configured => "configured",
            WindowSource::LlamaCppProps => "from the server's /props",
            WindowSource::OllamaShow => "from Ollama's /api/show",
            WindowSource::KnownModel => "known for this model id",
        })
    }
}

/// A model's context window in tokens, and where that number comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Tokens.
    pub tokens: u64,
    /// Where the number comes from.
    pub source: WindowSource,
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} tokens ({})", self.tokens, self.source)
    }
}

/// What a session's prompt and tools look like for its model's window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// A large or unknown window: the full prompt, every tool, full definitions.
    #[default]
    Full,
    /// A window of at most [`COMPACT_WINDOW`]: the compact prompt and compact definitions, no
    /// subagent tools.
    Compact,
    /// A window of at most [`ESSENTIAL_WINDOW`]: as [`Profile::Compact`], with only the
    /// essential built-in tools.
    Essential,
}

impl Profile {
    /// The profile of a window of `tokens` (`None`: unknown, so [`Profile::Full`]).
    pub fn for_window(tokens: Option<u64>) -> Profile {
        match tokens {
            Some(w) if w > 0 && w <= ESSENTIAL_WINDOW => Profile::Essential,
            Some(w) if w > 0 && w <= COMPACT_WINDOW => Profile::Compact,
            _ => Profile::Full,
        }
    }

    /// Whether the prompt and the tool definitions are the compact ones.
    pub fn compact(self) -> bool {
        self != Profile::Full
    }
}

/// The window of a well-known hosted model id, as its provider documents it (December 2026).
/// The id may carry a router's prefix (`openai/gpt-4o`); the longest matching prefix wins.
/// Open-weight models are not listed: their window is what their server was started with,
/// which penguin asks the server for.
pub fn known_window(model_id: &str) -> Option<u64> {
    const TABLE: &[(&str, u64)] = &[
        ("gpt-3.5-turbo", 16_385),
        ("gpt-4", 8_192),
        ("gpt-4-32k", 32_768),
        ("gpt-4-turbo", 128_000),
        ("gpt-4o", 128_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4.5", 128_000),
        ("gpt-5", 400_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4-mini", 200_000),
        ("claude-", 200_000),
        ("gemini-1.5-flash", 1_048_576),
        ("gemini-1.5-pro", 2_097_152),
        ("gemini-2.0", 1_048_576),
        ("gemini-2.5", 1_048_576),
    ];
    let id = model_id.rsplit('/').next().unwrap_or(model_id).trim();
    TABLE
        .iter()
        .filter(|(prefix, _)| id.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, tokens)| *tokens)
}

/// llama.cpp's window in the JSON of `GET /props`: `default_generation_settings.n_ctx` (the
/// window of one slot, what a request may fill), else a top-level `n_ctx`.
pub fn window_from_llamacpp_props(props: &Value) -> Option<u64> {
    props
        .pointer("/default_generation_settings/n_ctx")
        .or_else(|| props.get("n_ctx"))
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
}

/// Ollama's window in the JSON of `POST /api/show`: the model's `num_ctx` parameter when it
/// sets one; else Ollama's default ([`OLLAMA_DEFAULT_WINDOW`]), or the model's trained
/// `*.context_length` (in `model_info`) when that is smaller. `None` when the answer has
/// neither (not Ollama's).
pub fn window_from_ollama_show(show: &Value) -> Option<u64> {
    let num_ctx = show
        .get("parameters")
        .and_then(Value::as_str)
        .into_iter()
        .flat_map(str::lines)
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        })
        .filter(|n| *n > 0);
    if num_ctx.is_some() {
        return num_ctx;
    }
    let trained = show
        .get("model_info")
        .and_then(Value::as_object)?
        .iter()
        .find(|(key, _)| key.ends_with(".context_length"))
        .and_then(|(_, v)| v.as_u64())
        .filter(|n| *n > 0)?;
    Some(trained.min(OLLAMA_DEFAULT_WINDOW))
}

/// The server root of a model's base URL: `http://host:8080/v1` → `http://host:8080`.
fn server_root(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// Whether penguin asks `spec`'s server for its window: a model of a protocol a local server
/// speaks (llama.cpp serves OpenAI chat and Responses and Anthropic messages, Ollama its own
/// and OpenAI chat), at a base URL that is not the protocol's hosted API.
fn asks_server(spec: &ModelSpec) -> bool {
    let local_protocol = [
        Protocol::OPENAI_CHAT,
        Protocol::OPENAI_RESPONSES,
        Protocol::ANTHROPIC_MESSAGES,
        Protocol::OLLAMA,
    ]
    .contains(&spec.protocol);
    let base = spec.base_url.trim();
    let hosted = spec.protocol != Protocol::OLLAMA
        && server_root(base) == server_root(&default_base_url(&spec.protocol));
    local_protocol && base.starts_with("http") && !hosted
}

/// Asks `spec`'s server for its window (llama.cpp's `/props`, then Ollama's `/api/show`;
/// Ollama's first for the `ollama` protocol), each within `timeout`. `None` when the model is a
/// hosted API's or no server answers with a window.
pub async fn ask_server(spec: &ModelSpec, timeout: Duration) -> Option<Window> {
    if !asks_server(spec) {
        return None;
    }
    let client = penguin_llm_providers::http::client_builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .ok()?;
    let root = server_root(&spec.base_url).to_owned();
    let props = || async {
        let answer = client.get(format!("{root}/props")).send().await.ok()?;
        let json: Value =
            serde_json::from_slice(&answer.error_for_status().ok()?.bytes().await.ok()?).ok()?;
        window_from_llamacpp_props(&json).map(|tokens| Window {
            tokens,
            source: WindowSource::LlamaCppProps,
        })
    };
    let show = || async {
        let body = serde_json::json!({ "model": spec.model_id }).to_string();
        let answer = client
            .post(format!("{root}/api/show"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .ok()?;
        let json: Value =
            serde_json::from_slice(&answer.error_for_status().ok()?.bytes().await.ok()?).ok()?;
        window_from_ollama_show(&json).map(|tokens| Window {
            tokens,
            source: WindowSource::OllamaShow,
        })
    };
    if spec.protocol == Protocol::OLLAMA {
        return show().await;
    }
    match props().await {
        Some(window) => Some(window),
        None => show().await,
    }
}

/// What the server of a base URL and model id said, and when: asked again after a minute, so a
/// server restarted with another window is seen, while a session's subagents and a server's
/// sessions do not ask for every session.
type Answers = HashMap<(String, String, String), (Instant, Option<Window>)>;

static ANSWERS: Mutex<Option<Answers>> = Mutex::new(None);

const ANSWER_TTL: Duration = Duration::from_secs(60);

/// `spec`'s window: configured, else its server's answer ([`ask_server`], within
/// [`DISCOVERY_TIMEOUT`]), else [`known_window`]; `None` when none says. Blocking: the server is
/// asked on a thread of its own (so this may be called from within an async runtime too).
///
/// A spec whose window [`sized`] filled in from its server's answer keeps that answer's source.
pub fn resolve(spec: &ModelSpec) -> Option<Window> {
    if let Some(tokens) = spec.context_window.filter(|w| *w > 0) {
        let answered = ANSWERS
            .lock()
            .ok()
            .and_then(|answers| answers.as_ref()?.get(&answer_key(spec)).copied())
            .and_then(|(_, window)| window)
            .filter(|w| w.tokens == tokens);
        let known = (spec.context_window == known_window(&spec.model_id)).then_some(Window {
            tokens,
            source: WindowSource::KnownModel,
        });
        return Some(answered.or(known).unwrap_or(Window {
            tokens,
            source: WindowSource::Configured,
        }));
    }
    server_window(spec).or_else(|| {
        known_window(&spec.model_id).map(|tokens| Window {
            tokens,
            source: WindowSource::KnownModel,
        })
    })
}

fn answer_key(spec: &ModelSpec) -> (String, String, String) {
    (
        spec.protocol.as_str().to_owned(),
        spec.base_url.clone(),
        spec.model_id.clone(),
    )
}

fn server_window(spec: &ModelSpec) -> Option<Window> {
    if !asks_server(spec) {
        return None;
    }
    let key = answer_key(spec);
    let cached = ANSWERS
        .lock()
        .ok()
        .and_then(|answers| answers.as_ref()?.get(&key).copied())
        .filter(|(at, _)| at.elapsed() < ANSWER_TTL);
    if let Some((_, window)) = cached {
        return window;
    }
    let asked = spec.clone();
    let window = std::thread::Builder::new()
        .name("penguin-window".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(ask_server(&asked, DISCOVERY_TIMEOUT))
        })
        .ok()?
        .join()
        .ok()
        .flatten();
    if let Ok(mut answers) = ANSWERS.lock() {
        answers
            .get_or_insert_with(HashMap::new)
            .insert(key, (Instant::now(), window));
    }
    window
}

/// `spec` with its window filled in when it had none and [`resolve`] found one, so the model's
/// requests (output tokens, Ollama's `num_ctx`), compaction and the [`Profile`] follow it too;
/// and that window. A window only [`known_window`] gives is filled in when it is small (at most
/// [`COMPACT_WINDOW`]): a hosted model's large window would move compaction's threshold
/// (`window - 2048`, capped by `max_context_length`) past the 126k it keeps for an unknown one,
/// and make long sessions cost more, which is the configuration's to ask for.
pub fn sized(mut spec: ModelSpec) -> (ModelSpec, Option<Window>) {
    let window = resolve(&spec);
    if spec.context_window.is_none() {
        spec.context_window = window
            .filter(|w| w.source != WindowSource::KnownModel || w.tokens <= COMPACT_WINDOW)
            .map(|w| w.tokens);
    }
    (spec, window)
}

/// A system prompt and tool definitions that leave the conversation less than
/// [`CONVERSATION_RESERVE`] tokens of the model's window: no request of the session could
/// succeed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the prompt does not fit the model's context window: the window is {window} and the {profile}system prompt with {definitions} takes ~{prompt_tokens} tokens, leaving less than the {reserve} a conversation needs; give the model a larger context (llama.cpp: -c, Ollama: num_ctx) and set context_window in config.toml to match, or shorten AGENTS.md",
    profile = if *.compact { "compact " } else { "" },
    definitions = match .tools { 1 => "1 tool definition".to_owned(), n => format!("{n} tool definitions") },
    reserve = CONVERSATION_RESERVE
)]
pub struct PromptTooLarge {
    /// The model's window.
    pub window: Window,
    /// The estimate of the system prompt and the tool definitions, in tokens.
    pub prompt_tokens: u64,
    /// How many tool definitions.
    pub tools: usize,
    /// Whether the prompt was already the compact one.
    pub compact: bool,
}

/// Refuses a session whose fixed part (the system prompt and the tool definitions, estimated
/// as the requests' output clamping does: `limits::base_input_tokens`) leaves less than
/// [`CONVERSATION_RESERVE`] tokens of `window`. Returns the estimate. An unknown window is
/// never refused.
pub fn check_fit(
    window: Option<Window>,
    system_prompt: &str,
    tools: &[ToolDefinition],
) -> Result<u64, PromptTooLarge> {
    let prompt_tokens = base_input_tokens(system_prompt, tools);
    match window {
        Some(window) if prompt_tokens + CONVERSATION_RESERVE > window.tokens => {
            Err(PromptTooLarge {
                window,
                prompt_tokens,
                tools: tools.len(),
                compact: Profile::for_window(Some(window.tokens)).compact(),
            })
        }
        _ => Ok(prompt_tokens),
    }
}

/// Test support: a model server's canned answers.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on a local port answering each request with `routes`' canned reply for its
    /// request line's method and path (404 for any other); the requests' heads and bodies as
    /// it saw them.
    pub(crate) async fn canned_server(
        routes: Vec<(&'static str, u16, String)>,
    ) -> (String, std::sync::Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head and, when it says so, the body.
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let text = String::from_utf8_lossy(&request).to_string();
                let line = text.lines().next().unwrap_or("").to_owned();
                log.lock().unwrap().push(text);
                let (status, body) = routes
                    .iter()
                    .find(|(route, _, _)| line.starts_with(&format!("{route} ")))
                    .map(|(_, status, body)| (*status, body.clone()))
                    .unwrap_or((404, "not found".into()));
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::canned_server;
    use super::*;
    use serde_json::json;

    #[test]
    fn the_window_picks_the_profile() {
        assert_eq!(Profile::for_window(None), Profile::Full);
        assert_eq!(Profile::for_window(Some(0)), Profile::Full);
        assert_eq!(Profile::for_window(Some(2_048)), Profile::Essential);
        assert_eq!(Profile::for_window(Some(4_096)), Profile::Essential);
        assert_eq!(Profile::for_window(Some(4_097)), Profile::Compact);
        assert_eq!(Profile::for_window(Some(8_192)), Profile::Compact);
        assert_eq!(Profile::for_window(Some(8_193)), Profile::Full);
        assert!(!Profile::Full.compact() && Profile::Compact.compact());
    }

    #[test]
    fn known_ids_take_the_longest_prefix_and_a_router_prefix_is_ignored() {
        assert_eq!(known_window("gpt-4"), Some(8_192));
        assert_eq!(known_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_window("openai/gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(known_window("smollm2"), None);
    }

    #[test]
    fn props_and_show_answers_are_read() {
        let props =
            json!({"default_generation_settings": {"n_ctx": 4096, "id": 0}, "total_slots": 2});
        assert_eq!(window_from_llamacpp_props(&props), Some(4096));
        assert_eq!(
            window_from_llamacpp_props(&json!({"n_ctx": 2048})),
            Some(2048)
        );
        assert_eq!(window_from_llamacpp_props(&json!({"error": "x"})), None);
        let show = |parameters: &str, trained: u64| {
            json!({
                "parameters": parameters,
                "model_info": {"general.architecture": "llama", "llama.context_length": trained}
            })
        };
        // The Modelfile's num_ctx is what Ollama runs with.
        assert_eq!(
            window_from_ollama_show(&show(
                "stop \"<|eot|>\"\nnum_ctx                        16384",
                131_072
            )),
            Some(16_384)
        );
        // Without it, Ollama's default, or the model's own window when smaller.
        assert_eq!(window_from_ollama_show(&show("", 131_072)), Some(4_096));
        assert_eq!(window_from_ollama_show(&show("", 2_048)), Some(2_048));
        assert_eq!(window_from_ollama_show(&json!({"license": "x"})), None);
    }

    fn spec(protocol: Protocol, base_url: String) -> ModelSpec {
        ModelSpec {
            protocol,
            base_url,
            model_id: "qwen3:4b".into(),
            ..ModelSpec::demo()
        }
    }

    #[tokio::test]
    async fn llama_cpp_says_its_window_through_props() {
        let props = json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2});
        let (url, seen) = canned_server(vec![("GET /props", 200, props.to_string())]).await;
        // An OpenAI-compatible base URL ends in /v1; /props is at the server's root.
        let found = ask_server(
            &spec(Protocol::OPENAI_CHAT, format!("{url}/v1")),
            DISCOVERY_TIMEOUT,
        )
        .await;
        assert_eq!(
            found,
            Some(Window {
                tokens: 4096,
                source: WindowSource::LlamaCppProps
            })
        );
        assert!(seen.lock().unwrap()[0].starts_with("GET /props HTTP/1.1"));
        // Anthropic's base URL is the root itself.
        let found = ask_server(&spec(Protocol::ANTHROPIC_MESSAGES, url), DISCOVERY_TIMEOUT).await;
        assert_eq!(found.map(|w| w.tokens), Some(4096));
    }

    #[tokio::test]
    async fn ollama_says_its_window_through_api_show() {
        let show = json!({
            "parameters": "num_ctx 8192\nstop \"<|im_end|>\"",
            "model_info": {"qwen3.context_length": 40960}
        });
        let (url, seen) = canned_server(vec![("POST /api/show", 200, show.to_string())]).await;
        let found = ask_server(&spec(Protocol::OLLAMA, url.clone()), DISCOVERY_TIMEOUT).await;
        assert_eq!(
            found,
            Some(Window {
                tokens: 8192,
                source: WindowSource::OllamaShow
            })
        );
        let request = seen.lock().unwrap()[0].clone();
        assert!(request.starts_with("POST /api/show HTTP/1.1"), "{request}");
        assert!(request.ends_with(r#"{"model":"qwen3:4b"}"#), "{request}");
        // Ollama's OpenAI-compatible endpoint: /props is not found, /api/show answers.
        let found = ask_server(
            &spec(Protocol::OPENAI_CHAT, format!("{url}/v1")),
            DISCOVERY_TIMEOUT,
        )
        .await;
        assert_eq!(found.map(|w| w.source), Some(WindowSource::OllamaShow));
    }

    #[tokio::test]
    async fn a_server_that_says_nothing_useful_leaves_the_window_unknown_quietly() {
        let (url, _) = canned_server(vec![
            ("GET /props", 500, "{\"error\": \"busy\"}".into()),
            ("POST /api/show", 200, "not json".into()),
        ])
        .await;
        let found = ask_server(&spec(Protocol::OPENAI_CHAT, url), DISCOVERY_TIMEOUT).await;
        assert_eq!(found, None);
        // A server that never answers: given up within the timeout.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let began = Instant::now();
        let found = ask_server(
            &spec(Protocol::OPENAI_CHAT, url),
            Duration::from_millis(300),
        )
        .await;
        assert_eq!(found, None);
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
        drop(silent);
        // The hosted APIs are not asked.
        let hosted = spec(
            Protocol::OPENAI_CHAT,
            default_base_url(&Protocol::OPENAI_CHAT),
        );
        assert!(!asks_server(&hosted));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn resolve_prefers_the_configuration_then_the_server_then_the_table() {
        let props = json!({"default_generation_settings": {"n_ctx": 2048}});
        let (url, _) = canned_server(vec![("GET /props", 200, props.to_string())]).await;
        let mut local = spec(Protocol::OPENAI_CHAT, format!("{url}/v1"));
        local.model_id = "gpt-4o".into();
        // Called from within a runtime, as the launcher is.
        let (sized_spec, window) = sized(local.clone());
        assert_eq!(window.map(|w| w.tokens), Some(2048));
        assert_eq!(sized_spec.context_window, Some(2048));
        // The filled-in window keeps its source.
        assert_eq!(
            resolve(&sized_spec).map(|w| w.source),
            Some(WindowSource::LlamaCppProps)
        );
        local.context_window = Some(32_768);
        assert_eq!(
            resolve(&local),
            Some(Window {
                tokens: 32_768,
                source: WindowSource::Configured
            })
        );
        let hosted = ModelSpec {
            model_id: "gpt-4o".into(),
            ..spec(
                Protocol::OPENAI_CHAT,
                default_base_url(&Protocol::OPENAI_CHAT),
            )
        };
        assert_eq!(
            resolve(&hosted),
            Some(Window {
                tokens: 128_000,
                source: WindowSource::KnownModel
            })
        );
        // A large known window is said, not filled in (compaction keeps its threshold); a
        // small one is.
        assert_eq!(sized(hosted.clone()).0.context_window, None);
        let small = ModelSpec {
            model_id: "gpt-4-0613".into(),
            ..hosted
        };
        let (small, window) = sized(small);
        assert_eq!(small.context_window, Some(8_192));
        assert_eq!(resolve(&small), window);
        assert_eq!(window.map(|w| w.source), Some(WindowSource::KnownModel));
    }

    #[test]
    fn a_prompt_that_leaves_no_room_is_refused_in_one_line_naming_the_window_and_its_size() {
        let window = Window {
            tokens: 1_024,
            source: WindowSource::LlamaCppProps,
        };
        let tool = ToolDefinition {
            name: "exec_command".into(),
            description: "Run a command.".into(),
            parameters: None,
        };
        let small = "Be brief.";
        assert!(check_fit(Some(window), small, std::slice::from_ref(&tool)).is_ok());
        let large = "word ".repeat(600);
        let err = check_fit(Some(window), &large, std::slice::from_ref(&tool)).unwrap_err();
        assert_eq!(
            err.prompt_tokens,
            base_input_tokens(&large, std::slice::from_ref(&tool))
        );
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with(&format!(
                "the prompt does not fit the model's context window: the window is 1024 tokens (from the server's /props) and the compact system prompt with 1 tool definition takes ~{} tokens",
                err.prompt_tokens
            )),
            "{line}"
        );
        // An unknown window refuses nothing.
        assert!(check_fit(None, &large, &[tool]).is_ok());
    }
}
