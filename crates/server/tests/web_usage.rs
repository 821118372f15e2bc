//! Usage and cost over HTTP (issue 38): `GET /api/usage` added up from the traces on disk and
//! priced by the factory, `GET /api/price`, bad queries refused naming the parameter, and the
//! web app's usage page in a real headless Chromium at desktop and phone widths (opt-in, like
//! `web.rs`: `scripts/install-browser.sh`, then `--ignored`).
#![cfg(feature = "testing")]

mod support;

use std::io::Write;
use std::sync::Arc;

use penguin_server::testing::TOKEN;
use serde_json::{json, Value};
use support::browser::Browser;
use support::{FakeFactory, TestDir};

/// One session's trace: its `session_meta` on `model`, then a request of `prompt` and `output`
/// tokens `days_ago` days back (at noon UTC, or now for today) for each entry of `requests`.
fn write_trace(data_root: &std::path::Path, id: &str, model: &str, requests: &[(i64, u64, u64)]) {
    let dir = data_root.join("default/agents/penguin/traces/2026-12-01");
    std::fs::create_dir_all(&dir).unwrap();
    let mut f = std::fs::File::create(dir.join(format!("{id}_001.jsonl"))).unwrap();
    let meta = json!({"timestamp": "2026-12-01T10:00:00.000Z", "type": "session_meta", "payload": {"session_id": id, "provider": "openai-chat", "model_id": model, "model_context_window": "unknown", "system_prompt": "", "agent_state": "", "workspace": "/tmp"}});
    writeln!(f, "{meta}").unwrap();
    let mut session = (0, 0);
    for &(days_ago, prompt, output) in requests {
        let at = chrono::Utc::now() - chrono::Duration::days(days_ago);
        session = (session.0 + prompt, session.1 + output);
        let counts = |p: u64, o: u64| json!({"cache_read": 0, "cache_write": p, "output": o, "total": p + o});
        let usage = json!({"timestamp": at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(), "type": "event_msg", "payload": {"type": "token_usage", "session": counts(session.0, session.1), "request": counts(prompt, output)}});
        writeln!(f, "{usage}").unwrap();
    }
}

async fn start() -> support::TestServer {
    let dir = TestDir::new();
    write_trace(
        &dir.data_root(),
        "session-2026-12-01-10-00-00-aaaaaaaa",
        "priced",
        &[(0, 400_000, 20_000), (2, 100_000, 10_000)],
    );
    write_trace(
        &dir.data_root(),
        "session-2026-12-01-11-00-00-bbbbbbbb",
        "local-llama",
        &[(0, 5_000, 500)],
    );
    let factory = FakeFactory::new(json!({"llm": [], "runs": []}), dir.workspace());
    support::serve(dir, Arc::new(factory), |_| {}).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_added_up_from_the_traces_and_priced_by_the_factory() {
    let srv = start().await;
    let r = srv
        .call(reqwest::Method::GET, "/api/usage?groupBy=model", None)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rows = r.body["rows"].as_array().unwrap();
    let row = |g: &str| rows.iter().find(|r| r["group"] == g).cloned().unwrap();
    let priced = row("openai-chat/priced");
    assert_eq!(priced["requests"], 2);
    assert_eq!(priced["tokens"]["uncachedPrompt"], 500_000);
    // 500k in × $2 + 30k out × $10, per million.
    assert!(
        (priced["cost"].as_f64().unwrap() - 1.3).abs() < 1e-9,
        "{priced}"
    );
    let free = row("openai-chat/local-llama");
    assert_eq!(free["unpriced"], json!(["openai-chat/local-llama"]));
    assert_eq!(r.body["total"]["requests"], 3);

    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let r = srv
        .call(
            reqwest::Method::GET,
            &format!("/api/usage?from={today}&to={today}"),
            None,
        )
        .await;
    assert_eq!(r.body["groupBy"], "day");
    assert_eq!(r.body["rows"].as_array().unwrap().len(), 1, "{}", r.body);
    assert_eq!(r.body["total"]["requests"], 2);

    for (query, names) in [
        ("groupBy=week", "groupBy: \"week\" is not a grouping"),
        ("from=yesterday", "from: \"yesterday\" is not a date"),
        ("to=2026-13-45", "to: \"2026-13-45\" is not a date"),
        ("limit=5", "\"limit\" is not a parameter of /api/usage"),
    ] {
        let r = srv
            .call(reqwest::Method::GET, &format!("/api/usage?{query}"), None)
            .await;
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(names), "{query}: {message}");
    }

    let r = srv
        .call(
            reqwest::Method::GET,
            "/api/price?provider=openai-chat&model=priced",
            None,
        )
        .await;
    assert_eq!(r.body["price"]["output"], 10.0);
    let r = srv
        .call(reqwest::Method::GET, "/api/price?model=local-llama", None)
        .await;
    assert_eq!(r.body, json!({"price": null}));
    let r = srv.call(reqwest::Method::GET, "/api/price", None).await;
    assert_eq!(r.status, 400);
}

/// The chart's bars: `{day: value}` of those drawn above zero, and whether the page scrolls
/// sideways.
async fn bars(b: &mut Browser) -> Value {
    b.until(
        "the usage page",
        "return document.getElementById('app').dataset.loaded === 'usage' && !!document.querySelector('svg.usage-chart rect.bar')",
    )
    .await;
    b.js("const bars = [...document.querySelectorAll('svg.usage-chart rect.bar')];\n\
          const drawn = Object.fromEntries(bars.filter((r) => Number(r.dataset.value) > 0).map((r) => [r.dataset.day, Number(r.dataset.value)]));\n\
          const svg = document.querySelector('svg.usage-chart').getBoundingClientRect();\n\
          return { drawn, count: bars.length, svgWidth: svg.width, total: document.querySelector('.usage-total').textContent,\n\
                   models: document.querySelector('.usage-models').innerText,\n\
                   overflow: document.documentElement.scrollWidth > window.innerWidth + 1, errors: window.penguinErrors };")
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: scripts/install-browser.sh, then --ignored"]
async fn the_usage_page_plots_cost_per_day_at_desktop_and_phone_width() {
    let srv = start().await;
    let mut b = Browser::start("usage").await;
    b.goto(&format!("{}/usage#token={TOKEN}", srv.base)).await;
    let got = bars(&mut b).await;
    let day = |ago: i64| {
        (chrono::Utc::now() - chrono::Duration::days(ago))
            .format("%Y-%m-%d")
            .to_string()
    };
    assert_eq!(got["count"], 30, "a bar per day of the last 30: {got}");
    // Cost: today 400k×2 + 20k×10 = $1.00 (the unpriced model adds none), two days ago $0.30.
    let drawn = got["drawn"].as_object().unwrap();
    assert_eq!(drawn.len(), 2, "{got}");
    assert!(
        (drawn[&day(0)].as_f64().unwrap() - 1.0).abs() < 1e-9,
        "{got}"
    );
    assert!(
        (drawn[&day(2)].as_f64().unwrap() - 0.3).abs() < 1e-9,
        "{got}"
    );
    let total = got["total"].as_str().unwrap();
    assert!(total.contains("3 requests"), "{total}");
    assert!(
        total.contains("$1.30 + no price for openai-chat/local-llama"),
        "{total}"
    );
    assert!(got["models"]
        .as_str()
        .unwrap()
        .contains("openai-chat/priced"));
    assert_eq!(got["errors"], json!([]));
    assert_eq!(got["overflow"], false, "{got}");
    b.shot("desktop-usage").await;

    // The tokens instead of the cost.
    b.js("const s = document.querySelector('select[aria-label=metric]'); s.value = 'tokens'; s.dispatchEvent(new Event('change')); return null;")
        .await;
    b.until(
        "the tokens chart",
        &format!("return Number(document.querySelector('rect.bar[data-day=\"{}\"]').dataset.value) === 425500", day(0)),
    )
    .await;

    // A phone's width: the chart shrinks with the page, nothing scrolls sideways.
    b.c().set_window_size(390, 844).await.unwrap();
    let got = bars(&mut b).await;
    let width = got["svgWidth"].as_f64().unwrap();
    assert!(width > 300.0 && width <= 390.0, "{got}");
    assert_eq!(got["overflow"], false, "{got}");
    b.shot("phone-usage").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium: scripts/install-browser.sh, then --ignored"]
async fn a_requests_usage_line_shows_its_cost_or_that_the_model_has_no_price() {
    let dir = TestDir::new();
    let scenario = json!({"llm": [support::browser::text_request("Hello.", 100)], "runs": []});
    let factory = FakeFactory::new(scenario, dir.workspace());
    let srv = support::serve(dir, Arc::new(factory), |_| {}).await;
    let mut b = Browser::start("usage-line").await;
    for (model, says) in [("priced", " · $0.0001"), ("other", " · no price for model")] {
        let r = srv
            .create_with(json!({"approvalMode": "allow-all", "model": model}))
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.body["session"]["id"].as_str().unwrap().to_owned();
        b.open_session_url(&format!("{}/sessions/{id}", srv.base))
            .await;
        b.send("Hi").await;
        // 7 tokens out at $10 per million.
        let line = b
            .until(
                "the priced usage line",
                &format!("const e = document.querySelector('.usage'); return e && e.textContent.includes({says:?}) ? e.textContent : null"),
            )
            .await;
        assert!(
            line.as_str()
                .unwrap()
                .starts_with("100 tokens in context · 7 out"),
            "{line}"
        );
        b.shot(&format!("usage-line-{model}")).await;
    }
    b.close().await;
}
