//! `POST/PUT/DELETE /api/models` and `POST /api/models/test` on the real `ModelFactory`:
//! `config.toml` changed in place (its comments kept, no key ever written), the list and the
//! default following each change, and a model's test report or classified failure.

use std::sync::Arc;

use penguin_agent::config::Config;
use penguin_agent::hosting::{LiveModels, ModelFactory};
use penguin_agent::models::ModelSpec;
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::{EngineConfig, Environment};
use penguin_server::testing::{serve, TestDir};
use serde_json::{json, Value};

// Nothing listens on loopback's discard port on a test machine: a refused connection.
const CONFIG: &str = r#"# My models. This comment stays.

[models.local]   # llama.cpp, when it runs
protocol = "openai-chat"
base_url = "http://127.0.0.1:9/v1"
model = "smollm2"

[compaction]
mode = "discard"   # mine
"#;

fn factory(root: &std::path::Path) -> ModelFactory {
    let config = Config::load(root).unwrap();
    let models: Vec<(String, ModelSpec)> = config
        .named_models()
        .into_iter()
        .map(|(n, s)| (n, s.unwrap()))
        .collect();
    ModelFactory {
        checkpoints: Default::default(),
        live: Some(LiveModels::new(
            root,
            ModelSpec::demo(),
            models.clone(),
            false,
        )),
        spec: ModelSpec::demo(),
        models,
        system_prompt: String::new(),
        default_workspace: root.to_path_buf(),
        engine: EngineConfig::default(),
        environment: Arc::new(
            |_: &std::path::Path,
             _: &penguin_tools::Sandbox,
             _: &[penguin_tools::mcp::McpServerConfig]| {
                Ok(Arc::new(ScriptedEnvironment::default()) as Arc<dyn Environment>)
            },
        ),
        policy: Default::default(),
        sandbox: Default::default(),
        data_root: None,
        hooks: Default::default(),
    }
}

fn names(list: &Value) -> Vec<(String, bool)> {
    list["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_owned(),
                m["default"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn error(r: &penguin_server::testing::Reply) -> (u16, String, String) {
    (
        r.status,
        r.body["error"]["code"].as_str().unwrap_or("").to_owned(),
        r.body["error"]["message"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_are_added_changed_made_default_and_removed_in_config_toml() {
    let dir = TestDir::new();
    let root = dir.data_root();
    std::fs::create_dir_all(&root).unwrap();
    let file = root.join("config.toml");
    std::fs::write(&file, CONFIG).unwrap();
    let srv = serve(dir, Arc::new(factory(&root)), |_| {}).await;

    let list = srv.get("/api/models").await;
    let local = &list.body["models"][1];
    assert_eq!(local["name"], "local");
    assert_eq!(local["configured"], true);
    assert_eq!(local["baseUrl"], "http://127.0.0.1:9/v1");
    assert_eq!(
        local["apiKeyEnv"], "OPENAI_API_KEY",
        "the protocol's default variable"
    );

    let added = srv
        .post(
            "/api/models",
            json!({"name": "qwen", "protocol": "ollama", "model": "qwen2.5-coder:7b",
                   "apiKeyEnv": "PENGUIN_TEST_QWEN_KEY", "default": true}),
        )
        .await;
    assert_eq!(added.status, 201, "{}", added.body);
    assert_eq!(
        names(&added.body),
        [
            ("qwen".into(), true),
            ("local".into(), false),
            ("demo".into(), false)
        ]
    );
    assert_eq!(
        added.body["models"][0]["apiKeyEnv"],
        "PENGUIN_TEST_QWEN_KEY"
    );
    assert_eq!(added.body["models"][0]["keySet"], false);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("default_model = \"qwen\"\n# My models. This comment stays.\n"),
        "{text}"
    );
    assert!(
        text.contains("[models.local]   # llama.cpp, when it runs\n"),
        "{text}"
    );
    assert!(text.contains("mode = \"discard\"   # mine\n"), "{text}");

    // Refusals name what was wrong, and change nothing.
    let key = "sk-proj-0123456789abcdefABCDEF";
    for (body, status, code, names_it) in [
        (
            json!({"name": "x", "protocol": "openai-chat", "model": "m", "apiKey": key}),
            400,
            "invalid_field",
            "apiKey",
        ),
        (
            json!({"name": "x", "protocol": "openai-chat", "model": "m", "apiKeyEnv": key}),
            400,
            "invalid_field",
            "apiKeyEnv",
        ),
        (
            json!({"name": "x", "protocol": "carrier-pigeon", "model": "m"}),
            400,
            "invalid_field",
            "protocol",
        ),
        (
            json!({"name": "x", "protocol": "ollama", "model": "m", "baseUrl": "localhost"}),
            400,
            "invalid_field",
            "baseUrl",
        ),
        (
            json!({"name": "x y", "protocol": "ollama", "model": "m"}),
            400,
            "invalid_field",
            "name",
        ),
        (
            json!({"protocol": "ollama", "model": "m"}),
            400,
            "invalid_field",
            "name",
        ),
        (
            json!({"name": "x", "protocol": "ollama"}),
            400,
            "invalid_field",
            "model",
        ),
        (
            json!({"name": "x", "protocol": "ollama", "model": "m", "colour": "red"}),
            400,
            "invalid_field",
            "colour",
        ),
        (
            json!({"name": "local", "protocol": "ollama", "model": "m"}),
            409,
            "model_exists",
            "local",
        ),
    ] {
        let r = srv.post("/api/models", body.clone()).await;
        let (s, c, message) = error(&r);
        assert_eq!((s, c.as_str()), (status, code), "{body}: {message}");
        assert!(message.contains(names_it), "{body}: {message}");
        assert!(!message.contains(key), "a key is never echoed: {message}");
    }
    assert!(!std::fs::read_to_string(&file).unwrap().contains(key));

    let changed = srv
        .call(
            reqwest::Method::PUT,
            "/api/models/local",
            Some(json!({"model": "qwen3", "default": true})),
        )
        .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(names(&changed.body)[0], ("local".into(), true));
    assert_eq!(changed.body["models"][0]["modelId"], "qwen3");
    for (path, body, status, code) in [
        (
            "/api/models/nope",
            json!({"model": "m"}),
            404,
            "model_not_found",
        ),
        ("/api/models/local", json!({}), 400, "invalid_field"),
        (
            "/api/models/local",
            json!({"default": false}),
            400,
            "invalid_field",
        ),
    ] {
        let r = srv.call(reqwest::Method::PUT, path, Some(body)).await;
        assert_eq!((r.status, error(&r).1.as_str()), (status, code), "{path}");
    }

    // The model answers or its failure is classified: nothing listens on port 9.
    let r = srv
        .post("/api/models/test", json!({"model": "local"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["ok"], false);
    assert_eq!(
        r.body["failure"]["kind"], "connection_refused",
        "{}",
        r.body
    );
    assert_eq!(r.body["tools"]["status"], "skipped");
    let r = srv.post("/api/models/test", json!({"model": "demo"})).await;
    assert_eq!(
        (r.body["ok"].clone(), r.body["streaming"]["status"].clone()),
        (json!(true), json!("works")),
        "{}",
        r.body
    );
    assert!(r.body["latencyMs"].as_u64().is_some(), "{}", r.body);
    let r = srv.post("/api/models/test", json!({"model": "nope"})).await;
    assert_eq!((r.status, error(&r).1.as_str()), (404, "model_not_found"));
    let r = srv.post("/api/models/test", json!({})).await;
    assert_eq!((r.status, error(&r).1.as_str()), (400, "invalid_field"));

    let r = srv.delete("/api/models/qwen").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = srv.delete("/api/models/local").await;
    assert_eq!(
        names(&r.body),
        [("demo".into(), true)],
        "the default is the demo again"
    );
    let r = srv.delete("/api/models/local").await;
    assert_eq!((r.status, error(&r).1.as_str()), (404, "model_not_found"));
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        text, "# My models. This comment stays.\n\n[compaction]\nmode = \"discard\"   # mine\n",
        "what the user wrote, less the models taken out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_is_down_is_a_502_naming_it() {
    let dir = TestDir::new();
    let root = dir.data_root();
    std::fs::create_dir_all(&root).unwrap();
    let srv = serve(dir, Arc::new(factory(&root)), |_| {}).await;
    let r = srv
        .post(
            "/api/models/discover",
            json!({"protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1"}),
        )
        .await;
    let (status, code, message) = error(&r);
    assert_eq!((status, code.as_str()), (502, "endpoint_unreachable"));
    assert!(
        message.contains("http://127.0.0.1:9/v1/models"),
        "{message}"
    );
    let r = srv
        .post("/api/models/discover", json!({"baseUrl": "http://x"}))
        .await;
    assert_eq!(
        (r.status, error(&r).2.starts_with("protocol:")),
        (400, true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_chosen_at_start_stays_while_default_model_changes() {
    let dir = TestDir::new();
    let root = dir.data_root();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("config.toml"), CONFIG).unwrap();
    let mut f = factory(&root);
    // As `penguin serve --model local` starts it: the default pinned by the flag.
    let local = f.models[0].1.clone();
    f.live = Some(LiveModels::new(
        &root,
        local.clone(),
        f.models.clone(),
        true,
    ));
    f.spec = local;
    let srv = serve(dir, Arc::new(f), |_| {}).await;
    let r = srv
        .post(
            "/api/models",
            json!({"name": "other", "protocol": "ollama", "model": "m", "default": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(names(&r.body)[0], ("local".into(), true), "{}", r.body);
    let text = std::fs::read_to_string(root.join("config.toml")).unwrap();
    assert!(
        text.starts_with("default_model = \"other\"\n"),
        "the next start's default: {text}"
    );
}
