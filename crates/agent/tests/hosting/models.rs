//! The facade's factories behind the server: `ScenarioFactory` (the scripted sessions of
//! `penguin serve --provider scripted`), `ModelFactory` with the demo model (compaction
//! included) and with a session's own MCP servers, and `penguin watch` following a served
//! session.

use std::sync::Arc;

use penguin_agent::hosting::ScenarioFactory;
use serde_json::{json, Value};

use penguin_server::testing::{kinds, low_open_file_limit, serve, within, TestDir, TOKEN};

// ---------------------------------------------------------------------------------------------
// Scenario

fn model(payload: Value) -> Value {
    json!({"type": "model_msg", "payload": payload})
}

fn step(delay_ms: u64, message: Value) -> Value {
    json!({"delay_ms": delay_ms, "message": message})
}

fn partial_text(event: &str, text: &str) -> Value {
    model(
        json!({"type": "partial_text", "role": "assistant", "event_type": event, "text": text, "stop_reason": "completed"}),
    )
}

fn text_steps(text: &str) -> Vec<Value> {
    vec![
        step(5, partial_text("start", "")),
        step(5, partial_text("delta", text)),
        step(5, partial_text("stop", "")),
        step(
            2,
            model(
                json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"}),
            ),
        ),
    ]
}

fn usage(total: u64) -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": 5, "total": total});
    json!({"type": "event_msg", "payload": {"type": "token_usage", "session": c, "request": c}})
}

/// Request 1 streams text (pausing `pause_ms` inside it) and calls `read_file` as `call_1`;
/// request 2 answers "Done."; requests 3 and 4 (follow-up runs) answer plain text.
fn scenario(pause_ms: u64) -> String {
    let call = |event: &str, name: &str, args: &str| {
        model(
            json!({"type": "partial_tool_call", "role": "assistant", "event_type": event, "name": name, "arguments": args, "tool_call_id": "call_1", "stop_reason": "completed"}),
        )
    };
    let first = vec![
        step(5, partial_text("start", "")),
        step(5, partial_text("delta", "Hello")),
        step(pause_ms, partial_text("delta", " there")),
        step(5, partial_text("stop", "")),
        step(
            2,
            model(
                json!({"type": "text", "role": "assistant", "text": "Hello there", "stop_reason": "completed"}),
            ),
        ),
        step(5, call("start", "read_file", "")),
        step(5, call("delta", "", "{\"path\":\"a.txt\"}")),
        step(5, call("stop", "", "")),
        step(
            2,
            model(
                json!({"type": "tool_call", "role": "assistant", "name": "read_file", "arguments": "{\"path\":\"a.txt\"}", "tool_call_id": "call_1", "stop_reason": "completed"}),
            ),
        ),
        step(5, usage(100)),
    ];
    let out = |event: &str, text: &str| {
        model(
            json!({"type": "partial_tool_call_output", "role": "user", "event_type": event, "output": text, "tool_call_id": "call_1", "stop_reason": "completed"}),
        )
    };
    let tool = vec![
        step(5, out("start", "")),
        step(5, out("delta", "alpha")),
        step(5, out("stop", "")),
        step(
            2,
            model(
                json!({"type": "tool_call_output", "role": "user", "output": "alpha", "tool_call_id": "call_1", "stop_reason": "completed"}),
            ),
        ),
    ];
    let plain = |text: &str, total: u64| {
        let mut s = text_steps(text);
        s.push(step(2, usage(total)));
        json!({"stream": s})
    };
    json!({
        "description": "server test",
        "llm": [{"stream": first}, plain("Done.", 200), plain("Again.", 300), plain("Once more.", 400)],
        "tools": {"call_1": {"stream": tool}},
        "runs": []
    })
    .to_string()
}

// ---------------------------------------------------------------------------------------------
// Tests

/// Sessions from a scenario file's scripts (here its text): the router needs the token, and
/// creates and lists them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scenario_factory_serves_scripted_sessions() {
    let dir = TestDir::new();
    let script = r#"{"llm": [{"stream": [{"delay_ms": 0, "message":
        {"type": "model_msg", "payload": {"type": "text", "role": "assistant",
         "text": "Hello from the script.", "stop_reason": "completed"}}}]}],
        "runs": []}"#;
    let factory = ScenarioFactory::from_text(script, dir.path()).unwrap();
    let srv = serve(dir, Arc::new(factory), |_| {}).await;

    // Without the token: 401. With it: a new session, then the list.
    let denied = srv
        .http
        .get(format!("{}/api/sessions", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    let r = srv
        .post("/api/sessions", json!({"provider": "openai-chat"}))
        .await;
    assert_eq!(r.status, 400, "only \"scripted\" is offered: {}", r.body);
    let id = srv.create("allow-all").await;
    let listed = srv.get("/api/sessions").await.body;
    assert_eq!(listed["sessions"][0]["id"], id.as_str());
    assert_eq!(listed["sessions"][0]["provider"], "scripted");
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    assert!(
        run.iter()
            .any(|e| !e.is_server() && e.json()["payload"]["text"] == "Hello from the script."),
        "{:?}",
        kinds(&run)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_model_runs_behind_a_model_factory() {
    low_open_file_limit(256);
    use penguin_agent::hosting::ModelFactory;
    use penguin_agent::models::ModelSpec;
    use penguin_engine::scripted::ScriptedEnvironment;
    use penguin_engine::{EngineConfig, Environment};

    let dir = TestDir::new();
    let factory = ModelFactory {
        spec: ModelSpec::demo(),
        models: Vec::new(),
        system_prompt: "You are a test.".into(),
        default_workspace: dir.path().to_path_buf(),
        engine: EngineConfig {
            compaction: Some(penguin_engine::CompactionConfig::default()),
            ..EngineConfig::default()
        },
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
        checkpoints: Default::default(),
        live: None,
    };
    let srv = serve(dir, Arc::new(factory), |_| {}).await;

    let r = srv
        .post("/api/sessions", json!({"provider": "openai-chat"}))
        .await;
    assert_eq!(r.status, 400, "a provider this server does not serve");
    // The web app's model list: what a request may name, the default first.
    let models = srv.get("/api/models").await;
    assert_eq!(models.status, 200);
    assert_eq!(
        models.body,
        json!({"models": [{"name": "demo", "provider": "demo", "modelId": "demo", "default": true, "configured": false}]})
    );
    let id = srv.create("allow-all").await;
    let r = srv.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(r.body["session"]["provider"], "demo");
    // Named as configured (the default, as none was asked for), in the list too.
    assert_eq!(r.body["session"]["modelName"], "demo");
    let list = srv.get("/api/sessions").await;
    assert!(
        list.body.to_string().contains(r#""modelName":"demo""#),
        "{}",
        list.body
    );
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    let compact = format!("/api/sessions/{id}/compact");
    let r = srv.post(&compact, json!({})).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("nothing_to_compact"))
    );
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    let k = kinds(&run);
    assert!(k.contains(&"tool_call".to_string()), "{k:?}");
    assert_eq!(k.iter().filter(|x| *x == "request_end").count(), 2, "{k:?}");

    // A manual compaction: its own task, announced as `compacting`.
    let r = srv.post(&compact, json!({})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let compaction = s.until(|e| e.is_state("idle")).await;
    let k = kinds(&compaction);
    assert!(compaction.iter().any(|e| e.is_state("compacting")), "{k:?}");
    assert!(
        k.contains(&"compaction_begin".to_string()) && k.contains(&"compaction_end".to_string()),
        "{k:?}"
    );
    let r = srv.post(&compact, json!({})).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("already_compacted"))
    );

    // The next task opens the new context with the summary, in a new trace file.
    assert_eq!(srv.task(&id, "and now?").await.status, 202);
    s.until(|e| e.is_state("idle")).await;
    let history = srv.history(&id).await;
    let msgs = history["messages"].as_array().unwrap();
    let files: std::collections::BTreeSet<u64> = msgs
        .iter()
        .filter_map(|m| m["tracePosition"]["fileIndex"].as_u64())
        .collect();
    assert_eq!(files.into_iter().collect::<Vec<_>>(), [1, 2]);
    assert!(msgs.iter().any(|m| m["payload"]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("[context_summary]"))));
}

/// `mcpServers` of `POST /api/sessions`: the session's own MCP server (the fixture, over node)
/// joins its tools, and its connect phase leads the first task's stream. Needs the MCP test
/// setup (`PENGUIN_MCP_SERVERS`, set by `cargo xtask ci`); says so and does nothing without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_brings_its_own_mcp_servers() {
    low_open_file_limit(256);
    use penguin_agent::hosting::ModelFactory;
    use penguin_agent::models::ModelSpec;
    use penguin_engine::scripted::ScriptedEnvironment;
    use penguin_engine::{EngineConfig, Environment};
    use penguin_tools::mcp::{McpEnvironment, McpServerConfig};

    if std::env::var_os("PENGUIN_MCP_SERVERS").is_none_or(|v| v.is_empty()) {
        let why = "PENGUIN_MCP_SERVERS is not set (scripts/install-mcp-servers.sh)";
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/fixture-server.mjs")
        .display()
        .to_string();
    let dir = TestDir::new();
    let root = dir.path().to_path_buf();
    let start_mcp = || {
        let factory = ModelFactory {
            spec: ModelSpec::demo(),
            models: Vec::new(),
            system_prompt: "You are a test.".into(),
            default_workspace: root.clone(),
            engine: EngineConfig::default(),
            environment: Arc::new(
                |ws: &std::path::Path,
                 sandbox: &penguin_tools::Sandbox,
                 extra: &[McpServerConfig]| {
                    let inner = Arc::new(ScriptedEnvironment::default()) as Arc<dyn Environment>;
                    Ok(Arc::new(McpEnvironment::new(
                        inner,
                        extra,
                        ws,
                        sandbox.clone(),
                        Default::default(),
                    )) as Arc<dyn Environment>)
                },
            ),
            policy: Default::default(),
            sandbox: Default::default(),
            data_root: None,
            hooks: Default::default(),
            checkpoints: Default::default(),
            live: None,
        };
        // The data lives in `dir`, which outlives both servers.
        let data_root = root.join("data");
        serve(TestDir::new(), Arc::new(factory), |o| {
            o.data_root = data_root
        })
    };
    let srv = start_mcp().await;

    for (body, field) in [
        (json!({"mcpServers": "fx"}), "mcpServers"),
        (
            json!({"mcpServers": [{"name": "fx", "colour": "red"}]}),
            "mcpServers[0]",
        ),
    ] {
        let r = srv.post("/api/sessions", body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(field), "{field}: {msg}");
    }
    let r = srv
        .post(
            "/api/sessions",
            json!({"approvalMode": "allow-all", "mcpServers": [
                {"name": "fx", "command": "node", "args": [fixture, "tools"]}
            ]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["session"]["id"].as_str().unwrap().to_owned();
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    let k = kinds(&run);
    let at = |kind: &str| k.iter().position(|x| x == kind).unwrap_or(usize::MAX);
    assert!(
        at("mcp_connect_begin") < at("mcp_connect_end")
            && at("mcp_connect_end") < at("tool_list_ready")
            && at("tool_list_ready") < at("request_begin")
            && at("request_begin") < usize::MAX,
        "{k:?}"
    );
    let tools = run
        .iter()
        .find(|e| e.kind() == "tool_list_ready")
        .unwrap()
        .json();
    assert!(
        tools["payload"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "mcp__fx__pid"),
        "{tools}"
    );
    // The history holds the pair and the tool list right after the task's input.
    let history = srv.history(&id).await;
    let types: Vec<&str> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["payload"]["type"]
                .as_str()
                .unwrap_or(m["type"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        &types[..6],
        [
            "session_meta",
            "text",
            "mcp_connect_begin",
            "mcp_connect_end",
            "tool_list_ready",
            "request_begin"
        ],
        "{types:?}"
    );

    // A restarted server loads the session with the servers it was created with.
    drop(srv);
    let again = start_mcp().await;
    let mut s = again.stream(&id, None).await;
    s.next().await;
    assert_eq!(again.task(&id, "again").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    let tools = run
        .iter()
        .find(|e| e.kind() == "tool_list_ready")
        .unwrap_or_else(|| panic!("{:?}", kinds(&run)))
        .json();
    assert!(
        tools["payload"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "mcp__fx__pid"),
        "{tools}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn penguin_watch_follows_a_session_through_the_client_pattern() {
    low_open_file_limit(256);
    let dir = TestDir::new();
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let factory = ScenarioFactory::from_text(&scenario(0), &workspace).unwrap();
    let srv = serve(dir, Arc::new(factory), |_| {}).await;
    let id = srv.create("always-ask").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "hello").await.status, 202);
    // Mid-task (waiting for an approval): start watching, then let the task finish.
    s.until(|e| e.kind() == "approval_request").await;
    // The short id the CLI shows (the id's tail) names it, as it does for `penguin resume`.
    let short = &id[id.len() - 6..];
    let resolved = penguin_agent::watch::resolve_session_id(&srv.base, TOKEN, short).await;
    assert_eq!(resolved.as_deref().ok(), Some(id.as_str()), "{resolved:?}");
    let missing =
        penguin_agent::watch::resolve_session_id(&srv.base, TOKEN, "no-such-session").await;
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("no session matches"));
    let target = penguin_agent::watch::Target {
        base: srv.base.clone(),
        token: TOKEN.into(),
        session_id: id.clone(),
    };
    let watcher = tokio::spawn(async move {
        let mut seen = Vec::new();
        let state = penguin_agent::watch::watch(&target, false, |m| seen.push(m.to_json())).await;
        (state, seen)
    });
    let r = srv
        .post(
            &format!("/api/sessions/{id}/approvals/call_1"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r.status, 204);
    let (state, seen) = within(watcher).await.unwrap();
    let state = state.unwrap();
    assert_eq!(
        seen.len(),
        state.messages.len(),
        "every complete message shown once"
    );
    let texts: Vec<String> = state
        .messages
        .iter()
        .filter_map(|m| m.model().and_then(|p| p.content()).map(str::to_owned))
        .collect();
    assert!(texts.iter().any(|t| t == "hello"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "Hello there"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "alpha"),
        "the tool output: {texts:?}"
    );
    assert!(
        texts.iter().any(|t| t == "Done."),
        "the final answer: {texts:?}"
    );
    // Nothing twice: the dedup held across history and the live stream.
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len());
}

/// The skills and memory of a served agent over the API, and a task that pins a skill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_and_memory_are_listed_and_a_task_pins_a_skill() {
    low_open_file_limit(256);
    use penguin_agent::hosting::ModelFactory;
    use penguin_agent::models::ModelSpec;
    use penguin_engine::scripted::ScriptedEnvironment;
    use penguin_engine::{EngineConfig, Environment};

    let dir = TestDir::new();
    let data = dir.data_root();
    let skill = data.join("skills/penguin-census");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: penguin-census\ndescription: Count penguins by colony.\n---\nCount each colony twice.\n",
    )
    .unwrap();
    let user = data.join("memory/user");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("MEMORY.md"),
        "- [Colonies](colonies.md): where they nest\n",
    )
    .unwrap();
    std::fs::write(
        user.join("colonies.md"),
        "---\nname: Colonies\ndescription: where they nest\n---\nCape Crozier.\n",
    )
    .unwrap();
    let factory = ModelFactory {
        spec: ModelSpec::demo(),
        models: Vec::new(),
        system_prompt: "You are a test.".into(),
        default_workspace: dir.path().to_path_buf(),
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
        data_root: Some(data.clone()),
        hooks: Default::default(),
        checkpoints: Default::default(),
        live: None,
    };
    let srv = serve(dir, Arc::new(factory), |_| {}).await;
    let id = srv.create("allow-all").await;
    let skills = srv.get(&format!("/api/sessions/{id}/skills")).await;
    assert_eq!(skills.status, 200, "{}", skills.body);
    assert_eq!(skills.body["skills"][0]["name"], "penguin-census");
    assert_eq!(
        skills.body["skills"][0]["description"],
        "Count penguins by colony."
    );
    let memory = srv.get("/api/memory").await;
    assert_eq!(memory.status, 200, "{}", memory.body);
    let user_scope = memory.body["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "user")
        .expect("the user scope")
        .clone();
    assert_eq!(user_scope["notes"][0]["name"], "colonies", "{user_scope}");

    let r = srv
        .post(
            &format!("/api/sessions/{id}/tasks"),
            json!({"input": [{"type": "text", "text": "count them"}], "skills": ["penguin-census"]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let msgs = srv
        .until_history(&id, |m| {
            m.iter().any(|x| x["payload"]["role"] == "assistant")
        })
        .await;
    let prompt = msgs
        .iter()
        .find(|m| m["payload"]["role"] == "user" && m["payload"]["type"] == "text")
        .unwrap()["payload"]["text"]
        .clone();
    assert_eq!(
        prompt,
        "[use_skills]\nskills: penguin-census\n[/use_skills]\n\ncount them"
    );
    let bad = srv
        .post(
            &format!("/api/sessions/{id}/tasks"),
            json!({"input": [{"type": "text", "text": "x"}], "skills": "penguin-census"}),
        )
        .await;
    assert_eq!(bad.status, 400);
}
