//! The browser side of the web app's tests (`web.rs`, and `web_cluster.rs` against the nodes
//! of a cluster): building scenarios for the fake sessions, a headless Chromium driven over
//! chromedriver ([`Browser`]: polled waits with a bound, screenshots under
//! `target/web-screenshots/<test>/`), and the comparison of a page with a session's history
//! ([`assert_page_matches`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use super::script::{model, step};
use super::{TOKEN, WAIT};

/// How often a wait polls the page.
pub const POLL: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// Scenario building

/// A streamed segment of `kind` (`text` or `thinking`): start, one delta per piece, stop, and
/// the complete message.
pub fn segment(kind: &str, pieces: &[&str]) -> Vec<Value> {
    let partial = |event: &str, s: &str| {
        model(
            json!({"type": format!("partial_{kind}"), "role": "assistant", "event_type": event, kind: s, "stop_reason": "completed"}),
        )
    };
    let mut out = vec![step(5, partial("start", ""))];
    out.extend(pieces.iter().map(|p| step(5, partial("delta", p))));
    out.push(step(5, partial("stop", "")));
    out.push(step(
        2,
        model(json!({"type": kind, "role": "assistant", kind: pieces.concat(), "stop_reason": "completed"})),
    ));
    out
}

pub fn tool_call(name: &str, id: &str, args: &str) -> Vec<Value> {
    let partial = |event: &str, n: &str, a: &str| {
        model(
            json!({"type": "partial_tool_call", "role": "assistant", "event_type": event, "name": n, "arguments": a, "tool_call_id": id, "stop_reason": "completed"}),
        )
    };
    vec![
        step(5, partial("start", name, "")),
        step(5, partial("delta", "", args)),
        step(5, partial("stop", "", "")),
        step(
            2,
            model(
                json!({"type": "tool_call", "role": "assistant", "name": name, "arguments": args, "tool_call_id": id, "stop_reason": "completed"}),
            ),
        ),
    ]
}

/// A tool's script: output deltas with the given delays, then the complete output.
pub fn tool_output(id: &str, pieces: &[(u64, &str)]) -> Value {
    let partial = |event: &str, s: &str| {
        model(
            json!({"type": "partial_tool_call_output", "role": "user", "event_type": event, "output": s, "tool_call_id": id, "stop_reason": "completed"}),
        )
    };
    let mut s = vec![step(5, partial("start", ""))];
    s.extend(pieces.iter().map(|(d, p)| step(*d, partial("delta", p))));
    s.push(step(5, partial("stop", "")));
    let whole: String = pieces.iter().map(|(_, p)| *p).collect();
    s.push(step(
        2,
        model(json!({"type": "tool_call_output", "role": "user", "output": whole, "tool_call_id": id, "stop_reason": "completed"})),
    ));
    json!({"stream": s})
}

pub fn usage(total: u64) -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": 7, "total": total});
    step(
        2,
        json!({"type": "event_msg", "payload": {"type": "token_usage", "session": c, "request": c}}),
    )
}

pub fn request(parts: Vec<Vec<Value>>, total: u64) -> Value {
    let mut s: Vec<Value> = parts.into_iter().flatten().collect();
    s.push(usage(total));
    json!({"stream": s})
}

pub fn text_request(text: &str, total: u64) -> Value {
    request(vec![segment("text", &[text])], total)
}

// ---------------------------------------------------------------------------------------------
// The browser

pub fn chromium_binary() -> &'static str {
    // Debian's /usr/bin/chromium is a wrapper script; the real binary avoids its environment
    // probing when present.
    if Path::new("/usr/lib/chromium/chromium").exists() {
        "/usr/lib/chromium/chromium"
    } else {
        "/usr/bin/chromium"
    }
}

pub struct Browser {
    client: Option<Client>,
    driver: Child,
    shots: PathBuf,
    count: usize,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started share the process group made for it.
        let pgid = nix::unistd::Pid::from_raw(self.driver.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
    }
}

pub fn is_stale(err: &fantoccini::error::CmdError) -> bool {
    matches!(err, fantoccini::error::CmdError::Standard(e) if e.error == fantoccini::error::ErrorStatus::StaleElementReference)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    pub async fn start(test: &str) -> Browser {
        use std::os::unix::process::CommandExt;
        assert!(
            Path::new("/usr/bin/chromedriver").exists(),
            "chromedriver is missing: run scripts/install-browser.sh"
        );
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap()
            .join("web-screenshots")
            .join(test);
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).unwrap();
        let port = free_port();
        let log = std::fs::File::create(shots.join("chromedriver.log")).unwrap();
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            client: None,
            driver,
            shots,
            count: 0,
            _profile: profile,
        };
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        let http = reqwest::Client::new();
        loop {
            let ready = http.get(format!("{url}/status")).send().await.ok();
            if let Some(r) = ready {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(POLL).await;
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium_binary(),
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--disable-breakpad",
                    "--disable-crash-reporter",
                    "--window-size=1280,1000",
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ]
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a Chromium session");
        browser.client = Some(client);
        browser
    }

    pub fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    pub async fn goto(&self, url: &str) {
        self.c().goto(url).await.unwrap();
    }

    /// Writes `target/web-screenshots/<test>/<NN>-<label>.png`.
    pub async fn shot(&mut self, label: &str) {
        self.count += 1;
        let png = self.c().screenshot().await.unwrap();
        let path = self.shots.join(format!("{:02}-{label}.png", self.count));
        std::fs::write(path, png).unwrap();
    }

    pub async fn js(&self, script: &str) -> Value {
        self.c().execute(script, vec![]).await.unwrap()
    }

    /// Polls `script` (a function body) until it returns something truthy, and returns it.
    pub async fn until(&mut self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.c().execute(script, vec![]).await.unwrap();
            let truthy = match &v {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if Instant::now() > deadline {
                self.shot(&format!("timeout-{}", what.replace(' ', "-")))
                    .await;
                let text = self
                    .js("return document.getElementById('app').innerText")
                    .await;
                let errors = self
                    .js("return [window.penguinErrors, document.getElementById('toast')?.textContent]")
                    .await;
                panic!("timed out waiting for {what}; the page shows:\n{text}\nerrors, toast: {errors}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the element `css` selects. An element redrawn between finding and clicking it
    /// (stale) is found again, as a person would aim again; anything else fails at once.
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let e = self
                .c()
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no element {css}: {e}"));
            match e.click().await {
                Ok(()) => return,
                Err(err) if is_stale(&err) && Instant::now() < deadline => continue,
                Err(err) => panic!("cannot click {css}: {err}"),
            }
        }
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let e = self
                .c()
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no element {css}: {e}"));
            let typed = match e.clear().await {
                Ok(()) => e.send_keys(text).await,
                Err(err) => Err(err),
            };
            match typed {
                // Keys go to whatever has focus when they arrive: on a loaded machine a redraw
                // can take it between the clear and the typing. Typed is what the field holds.
                Ok(()) => match e.prop("value").await {
                    Ok(Some(v)) if v == text => return,
                    Ok(v) if Instant::now() >= deadline => {
                        panic!("{css} holds {v:?} after typing {text:?}")
                    }
                    Ok(_) => continue,
                    Err(err) if is_stale(&err) && Instant::now() < deadline => continue,
                    Err(err) => panic!("cannot read {css}: {err}"),
                },
                Err(err) if is_stale(&err) && Instant::now() < deadline => continue,
                Err(err) => panic!("cannot type into {css}: {err}"),
            }
        }
    }

    pub async fn text_of(&self, css: &str) -> String {
        self.c()
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    /// Opens the web app signed in, on the session page at `session_url` (`…/sessions/{id}`),
    /// and waits for its history.
    pub async fn open_session_url(&mut self, session_url: &str) {
        self.goto(&format!("{session_url}#token={TOKEN}")).await;
        self.until(
            "the session page to load",
            "return document.getElementById('app').dataset.history === 'loaded'",
        )
        .await;
        // Whatever the session lacks (a sandbox, a title) leaves no "null" in its header.
        let meta = self.text_of(".session-meta").await;
        assert!(!meta.contains("null"), "the session header reads {meta:?}");
    }

    pub async fn send(&self, text: &str) {
        self.type_into("textarea[name=input]", text).await;
        self.click("button[data-action=send]").await;
    }

    pub async fn card_status(&mut self, call: &str, status: &str) {
        let script = format!(
            "const c = document.querySelector('.card[data-call-id=\"{call}\"]'); return c && c.dataset.status === '{status}'"
        );
        self.until(&format!("{call} to be {status}"), &script).await;
    }

    pub async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing the page with the trace

/// What `transcript.js` writes in `data-fp`.
pub fn fingerprint(m: &Value) -> String {
    let ty = m["type"].as_str().unwrap_or("");
    let kind = if ty == "session_meta" {
        "session_meta"
    } else {
        m["payload"]["type"].as_str().unwrap_or("")
    };
    let origin: Vec<&str> = m["origin"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    [
        ty,
        kind,
        m["payload"]["tool_call_id"].as_str().unwrap_or(""),
        m["timestamp"].as_str().unwrap_or(""),
        &origin.join("/"),
    ]
    .join("|")
}

/// Every complete message of the session's history is on the page exactly once, and the page
/// shows nothing else; each tool output sits in its own call's card with the recorded text.
///
/// The main session's `session_meta` is left out: it is never streamed (a page that watched
/// the session from its start has not seen it), only recorded.
pub async fn assert_page_matches(b: &mut Browser, history: &[Value]) {
    let shown: Vec<String> = serde_json::from_value(
        b.js(
            "return [...document.querySelectorAll('#transcript [data-fp]')].map(e => e.dataset.fp)",
        )
        .await,
    )
    .unwrap();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for fp in &shown {
        *counts.entry(fp.as_str()).or_default() += 1;
    }
    let dups: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "shown more than once: {dups:?}");
    let expected: Vec<String> = history
        .iter()
        .filter(|m| !(m["type"] == "session_meta" && m.get("origin").is_none()))
        .map(fingerprint)
        .collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|fp| !counts.contains_key(fp.as_str()))
        .collect();
    assert!(missing.is_empty(), "recorded but not shown: {missing:#?}");
    let extra: Vec<_> = shown
        .iter()
        .filter(|fp| !expected.contains(fp))
        .filter(|fp| !(fp.starts_with("session_meta|") && fp.ends_with('|')))
        .collect();
    assert!(extra.is_empty(), "shown but not recorded: {extra:#?}");

    for m in history {
        if m["payload"]["type"] == "tool_call_output" {
            let fp = fingerprint(m);
            let script = format!(
                "const e = document.querySelector('[data-fp=\"{fp}\"]'); const card = e && e.closest('.card'); return e && [e.textContent, card.dataset.callId]"
            );
            let got = b.js(&script).await;
            assert_eq!(
                got,
                json!([m["payload"]["output"], m["payload"]["tool_call_id"]]),
                "the output of {} in its own card",
                m["payload"]["tool_call_id"]
            );
        }
    }
}
