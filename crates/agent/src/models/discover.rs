//! An endpoint's own list of models, offered when a model is added (`penguin models add`, the
//! web app's models page): `GET {base}/models` for OpenAI-style servers (OpenAI, llama.cpp,
//! vLLM, Ollama's `/v1`), Ollama's `GET /api/tags`, Anthropic's `GET /v1/models` and Gemini's
//! `GET /models`. The key, when the endpoint wants one, is read from its variable here and
//! sent in a header, never in the URL.

use std::time::Duration;

use super::{ModelSpec, Protocol};

/// The model ids the endpoint of `spec` (its protocol, base URL and key variable) lists,
/// sorted; or why it could not be asked, in a line.
pub async fn endpoint_models(spec: &ModelSpec, timeout: Duration) -> Result<Vec<String>, String> {
    let base = spec.base_url.trim_end_matches('/');
    if base.is_empty() {
        return Err("no base URL to ask".into());
    }
    let key = spec
        .key_env()
        .and_then(|var| std::env::var(var).ok())
        .filter(|k| !k.trim().is_empty());
    let client = penguin_llm_providers::http::client_builder()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot create the HTTP client: {e}"))?;
    let p = &spec.protocol;
    let (url, list, field) = if *p == Protocol::OLLAMA {
        (format!("{base}/api/tags"), "models", "name")
    } else if *p == Protocol::ANTHROPIC_MESSAGES {
        (format!("{base}/v1/models"), "data", "id")
    } else if *p == Protocol::GEMINI {
        (format!("{base}/models"), "models", "name")
    } else {
        (format!("{base}/models"), "data", "id")
    };
    let mut request = client.get(&url);
    if let Some(key) = key.as_deref() {
        request = if *p == Protocol::ANTHROPIC_MESSAGES {
            request
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
        } else if *p == Protocol::GEMINI {
            request.header("x-goog-api-key", key)
        } else {
            request.bearer_auth(key)
        };
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("{url}: {}", penguin_llm_providers::http::describe_error(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}"));
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{url}: {}", penguin_llm_providers::http::describe_error(&e)))?;
    let json: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not a model list ({e})"))?;
    let mut ids: Vec<String> = json
        .get(list)
        .and_then(|v| v.as_array())
        .ok_or_else(|| format!("{url}: not a model list (no {list:?} array)"))?
        .iter()
        .filter_map(|m| m.get(field).and_then(|v| v.as_str()))
        // Gemini names its models `models/gemini-…`; requests name them without the prefix.
        .map(|id| id.strip_prefix("models/").unwrap_or(id).to_owned())
        .collect();
    ids.sort();
    ids.dedup();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Answers one request with `body`, and gives back the request's head.
    fn once(body: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(reply.as_bytes()).unwrap();
            head
        });
        (url, handle)
    }

    #[tokio::test]
    async fn ollama_tags_and_openai_models_are_read() {
        let (url, head) =
            once(r#"{"models":[{"name":"qwen2.5-coder:7b"},{"name":"llama3.2:1b"}]}"#);
        let spec = ModelSpec {
            protocol: Protocol::OLLAMA,
            base_url: url,
            ..ModelSpec::demo()
        };
        let ids = endpoint_models(&spec, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(ids, ["llama3.2:1b", "qwen2.5-coder:7b"]);
        assert!(head.join().unwrap().starts_with("GET /api/tags "));

        let (url, head) = once(r#"{"object":"list","data":[{"id":"smollm2"},{"id":"gpt-x"}]}"#);
        let spec = ModelSpec {
            protocol: Protocol::OPENAI_CHAT,
            base_url: format!("{url}/v1/"),
            ..ModelSpec::demo()
        };
        let ids = endpoint_models(&spec, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(ids, ["gpt-x", "smollm2"]);
        assert!(head.join().unwrap().starts_with("GET /v1/models "));
    }

    #[tokio::test]
    async fn an_endpoint_that_is_down_says_where() {
        let spec = ModelSpec {
            protocol: Protocol::OPENAI_CHAT,
            base_url: "http://127.0.0.1:9/v1".into(),
            ..ModelSpec::demo()
        };
        let e = endpoint_models(&spec, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(e.starts_with("http://127.0.0.1:9/v1/models: "), "{e}");
    }
}
