//! The models room (issue 42, item 1) over HTTP: `POST/PUT/DELETE /api/models` and
//! `POST /api/models/test` routed to the factory, bad input refused naming what was wrong,
//! a factory without editable models answering 501, and the web app's models page in a real
//! headless Chromium at desktop and phone widths (opt-in, like `web.rs`:
//! `scripts/install-browser.sh`, then `--ignored`). The real editor of config.toml behind
//! these routes is tested in penguin-agent (`tests/hosting/model_edits.rs`).
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;

use penguin_server::testing::TOKEN;
use serde_json::{json, Value};
use support::browser::Browser;
use support::{FakeFactory, TestDir};

async fn start() -> support::TestServer {
    let dir = TestDir::new();
    let factory = FakeFactory::new(json!({"llm": [], "runs": []}), dir.workspace()).with_models(&[
        (
            "local",
            "openai-chat",
            "smollm2",
            "http://127.0.0.1:8080/v1",
        ),
        ("down", "ollama", "qwen", "http://127.0.0.1:9"),
        ("demo", "demo", "demo", ""),
    ]);
    support::serve(dir, Arc::new(factory), |_| {}).await
}

fn refusal(r: &penguin_server::testing::Reply) -> (u16, String, String) {
    (
        r.status,
        r.body["error"]["code"].as_str().unwrap_or("").into(),
        r.body["error"]["message"].as_str().unwrap_or("").into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_edits_and_tests_are_routed_and_bad_input_is_named() {
    let srv = start().await;
    let r = srv
        .post(
            "/api/models",
            json!({"name": "added", "protocol": "ollama", "model": "fake-large", "default": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["models"][0]["name"], "added",
        "the new default first"
    );
    let r = srv
        .call(
            reqwest::Method::PUT,
            "/api/models/added",
            Some(json!({"model": "fake-small"})),
        )
        .await;
    assert_eq!(r.body["models"][0]["modelId"], "fake-small");
    let r = srv.delete("/api/models/added").await;
    assert_eq!(r.status, 200);
    assert!(r.body["models"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["name"] != "added"));

    let r = srv
        .post("/api/models/test", json!({"model": "local"}))
        .await;
    assert_eq!(
        (r.status, r.body["ok"].clone()),
        (200, json!(true)),
        "{}",
        r.body
    );

    for (method, path, body, status, code, names) in [
        (
            "POST",
            "/api/models",
            json!({"name": "x", "protocol": "ollama", "model": "m", "apiKey": "sk-1"}),
            400,
            "invalid_field",
            "apiKey: penguin never stores a key",
        ),
        (
            "POST",
            "/api/models",
            json!({"name": "x", "protocol": "ollama", "model": "m", "temperature": 1}),
            400,
            "invalid_field",
            "\"temperature\" is not a field of a model",
        ),
        (
            "POST",
            "/api/models",
            json!({"protocol": "ollama", "model": "m"}),
            400,
            "invalid_field",
            "name: expected",
        ),
        (
            "POST",
            "/api/models",
            json!({"name": 7}),
            400,
            "invalid_field",
            "name: expected a string",
        ),
        (
            "POST",
            "/api/models",
            json!({"name": "x", "model": "m"}),
            400,
            "invalid_field",
            "protocol: required",
        ),
        (
            "POST",
            "/api/models",
            json!({"name": "local", "protocol": "ollama", "model": "m"}),
            409,
            "model_exists",
            "\"local\"",
        ),
        (
            "PUT",
            "/api/models/nope",
            json!({"model": "m"}),
            404,
            "model_not_found",
            "nope",
        ),
        (
            "PUT",
            "/api/models/local",
            json!({}),
            400,
            "invalid_field",
            "nothing to change",
        ),
        (
            "PUT",
            "/api/models/local",
            json!({"default": false}),
            400,
            "invalid_field",
            "default: expected true",
        ),
        (
            "DELETE",
            "/api/models/nope",
            Value::Null,
            404,
            "model_not_found",
            "nope",
        ),
        (
            "POST",
            "/api/models/test",
            json!({}),
            400,
            "invalid_field",
            "model: expected",
        ),
        (
            "POST",
            "/api/models/test",
            json!({"model": "local", "fast": true}),
            400,
            "invalid_field",
            "\"fast\" is not a field of a test",
        ),
        (
            "POST",
            "/api/models/test",
            json!({"model": "nope"}),
            404,
            "model_not_found",
            "nope",
        ),
        (
            "POST",
            "/api/models/discover",
            json!({"baseUrl": "http://x"}),
            400,
            "invalid_field",
            "protocol: expected",
        ),
        (
            "POST",
            "/api/models/discover",
            json!({"protocol": "ollama", "baseUrl": "http://127.0.0.1:9"}),
            502,
            "endpoint_unreachable",
            "127.0.0.1:9",
        ),
    ] {
        let method: reqwest::Method = method.parse().unwrap();
        let body = (!body.is_null()).then_some(body);
        let r = srv.call(method.clone(), path, body.clone()).await;
        let (s, c, message) = refusal(&r);
        assert_eq!(
            (s, c.as_str()),
            (status, code),
            "{method} {path} {body:?}: {message}"
        );
        assert!(
            message.contains(names),
            "{method} {path} {body:?}: {message}"
        );
    }
    // Without a token, nothing.
    let r = reqwest::Client::new()
        .post(format!("{}/api/models", srv.base))
        .json(&json!({"name": "x", "protocol": "ollama", "model": "m"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_factory_without_editable_models_answers_501() {
    let dir = TestDir::new();
    let factory = FakeFactory::new(json!({"llm": [], "runs": []}), dir.workspace());
    let srv = support::serve(dir, Arc::new(factory), |_| {}).await;
    let r = srv
        .post(
            "/api/models",
            json!({"name": "x", "protocol": "ollama", "model": "m"}),
        )
        .await;
    assert_eq!(refusal(&r).0, 501);
    assert_eq!(refusal(&r).1, "models_not_editable");
    let r = srv.post("/api/models/test", json!({"model": "x"})).await;
    assert_eq!(refusal(&r).0, 501, "{}", r.body);
}

/// Clicks the button labelled `label` in the card of model `name`.
async fn press(b: &Browser, name: &str, label: &str) {
    let clicked = b
        .js(&format!(
            "const card = document.querySelector('article.model[data-name=\"{name}\"]');\n\
             const btn = card && [...card.querySelectorAll('button')].find((x) => x.textContent.startsWith({label:?}));\n\
             if (btn) btn.click();\n\
             return !!btn;"
        ))
        .await;
    assert_eq!(clicked, json!(true), "no {label:?} button on {name}");
}

async fn page_state(b: &Browser) -> Value {
    b.js("return { cards: [...document.querySelectorAll('article.model')].map((a) => [a.dataset.name, a.dataset.default === 'true']),\n\
                   overflow: document.documentElement.scrollWidth > window.innerWidth + 1, errors: window.penguinErrors };")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: scripts/install-browser.sh, then --ignored"]
async fn the_models_page_adds_edits_tests_defaults_and_removes_at_desktop_and_phone_width() {
    let srv = start().await;
    let mut b = Browser::start("models").await;
    b.goto(&format!("{}/#token={TOKEN}", srv.base)).await;
    // Reached from the session list.
    b.until(
        "the link to the models page",
        "return !!document.querySelector('a[href=\"/models\"]')",
    )
    .await;
    b.click("a[href=\"/models\"]").await;
    b.until(
        "the models page",
        "return document.getElementById('app').dataset.loaded === 'models' && document.querySelectorAll('article.model').length === 3",
    )
    .await;
    assert_eq!(
        page_state(&b).await["cards"],
        json!([["local", true], ["down", false], ["demo", false]])
    );

    press(&b, "local", "Test").await;
    let report = b
        .until(
            "local's test report",
            "const r = document.querySelector('article.model[data-name=\"local\"] .model-test[data-ok]'); return r && r.innerText",
        )
        .await;
    let report = report.as_str().unwrap();
    assert!(report.contains("Answers: Hello from smollm2."), "{report}");
    assert!(report.contains("ms to the first token"), "{report}");
    assert!(report.contains("streaming: works"), "{report}");
    assert!(report.contains("tools: works"), "{report}");
    assert!(report.contains("vision: skipped"), "{report}");
    press(&b, "down", "Test").await;
    let failed = b
        .until(
            "down's failure",
            "const r = document.querySelector('article.model[data-name=\"down\"] .model-test[data-ok=\"false\"]'); return r && r.innerText",
        )
        .await;
    assert!(
        failed
            .as_str()
            .unwrap()
            .contains("Fails: connection refused (http://127.0.0.1:9)"),
        "{failed}"
    );
    b.shot("desktop-tested").await;

    // Add one, picking its id from the endpoint's own list.
    b.js("[...document.querySelectorAll('.model-form button')].find((x) => x.textContent === 'Add a model').click(); return null;").await;
    b.type_into(".model-form input[name=name]", "added").await;
    b.js("const s = document.querySelector('.model-form select[name=protocol]'); s.value = 'ollama'; return null;").await;
    b.type_into(".model-form input[name=baseUrl]", "http://127.0.0.1:11434")
        .await;
    b.type_into(".model-form input[name=apiKeyEnv]", "OLLAMA_KEY")
        .await;
    b.js("[...document.querySelectorAll('.model-form button')].find((x) => x.textContent.startsWith('List the endpoint')).click(); return null;").await;
    b.until(
        "the endpoint's models",
        "return !!document.querySelector('.model-form button.chip')",
    )
    .await;
    b.shot("desktop-adding").await;
    b.js("[...document.querySelectorAll('.model-form button.chip')].find((x) => x.textContent === 'fake-large').click(); return null;").await;
    b.click(".model-form input[name=default]").await;
    b.click(".model-form button[type=submit]").await;
    b.until(
        "the added model, the default",
        "const a = document.querySelector('article.model[data-name=\"added\"]'); return a && a.dataset.default === 'true' && a.innerText.includes('fake-large')",
    )
    .await;

    press(&b, "added", "Edit").await;
    b.type_into(".model-form input[name=model]", "fake-small")
        .await;
    b.click(".model-form button[type=submit]").await;
    b.until(
        "the changed model",
        "const a = document.querySelector('article.model[data-name=\"added\"]'); return a && a.innerText.includes('fake-small')",
    )
    .await;

    press(&b, "local", "Make default").await;
    b.until(
        "local the default again",
        "const a = document.querySelector('article.model[data-name=\"local\"]'); return a && a.dataset.default === 'true'",
    )
    .await;

    press(&b, "added", "Remove").await;
    press(&b, "added", "Remove?").await;
    b.until(
        "the removed model gone",
        "return !document.querySelector('article.model[data-name=\"added\"]')",
    )
    .await;
    let state = page_state(&b).await;
    assert_eq!(
        state["cards"],
        json!([["local", true], ["down", false], ["demo", false]])
    );
    assert_eq!(state["errors"], json!([]));
    assert_eq!(state["overflow"], false, "{state}");
    b.shot("desktop-models").await;

    // A phone's width: the cards stack, nothing scrolls sideways, the form still fits.
    b.c().set_window_size(390, 844).await.unwrap();
    b.js("[...document.querySelectorAll('.model-form button')].find((x) => x.textContent === 'Add a model').click(); return null;").await;
    press(&b, "local", "Test").await;
    b.until(
        "local's report at phone width",
        "return !!document.querySelector('article.model[data-name=\"local\"] .model-test[data-ok=\"true\"]')",
    )
    .await;
    let widths = b
        .js("const cards = [...document.querySelectorAll('article.model')].map((a) => a.getBoundingClientRect());\n\
             return { widest: Math.max(...cards.map((r) => r.right)), stacked: cards[1].top > cards[0].bottom - 1,\n\
                      overflow: document.documentElement.scrollWidth > window.innerWidth + 1 };")
        .await;
    assert_eq!(widths["overflow"], false, "{widths}");
    assert_eq!(widths["stacked"], true, "{widths}");
    assert!(widths["widest"].as_f64().unwrap() <= 390.0, "{widths}");
    b.shot("phone-models").await;
    b.close().await;
}
