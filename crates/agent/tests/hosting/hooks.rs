//! Hooks in served sessions: `ModelFactory::hooks` (the user's `[hooks]`) reach every session
//! it makes, so a `pre_tool_use` hook's deny is the call's `approval_decision`, naming the hook,
//! on the session's channel as in its Trace; a hook's `ask` is asked of the session's clients
//! whatever its approval mode.

use std::sync::Arc;

use penguin_agent::hooks::HooksConfig;
use penguin_agent::hosting::ModelFactory;

use penguin_server::testing::{kinds, low_open_file_limit, serve, TestDir};

/// The demo model's factory with `hooks`, its sessions in `dir` with scripted tools.
fn factory(dir: &TestDir, hooks: HooksConfig) -> ModelFactory {
    use penguin_agent::models::ModelSpec;
    use penguin_engine::scripted::ScriptedEnvironment;
    use penguin_engine::{EngineConfig, Environment};

    ModelFactory {
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
        // The hook runs with the server's sandbox: off here, where the kernel is not the point.
        sandbox: penguin_tools::SandboxRequest {
            mode: Some(penguin_tools::SandboxMode::Off),
            ..Default::default()
        },
        data_root: None,
        hooks,
        checkpoints: Default::default(),
        live: None,
    }
}

/// One `pre_tool_use` hook running `command`.
fn pre_tool_use(command: &str) -> HooksConfig {
    HooksConfig {
        pre_tool_use: vec![penguin_agent::hooks::HookEntry {
            command: command.into(),
            ..Default::default()
        }],
        ..HooksConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_sessions_pre_tool_use_hook_denies_with_its_reason() {
    low_open_file_limit(256);
    let dir = TestDir::new();
    let hooks = pre_tool_use("echo 'not in a served session' >&2; exit 2");
    let factory = factory(&dir, hooks);
    let srv = serve(dir, Arc::new(factory), |_| {}).await;
    let id = srv.create("allow-all").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    let decision = run
        .iter()
        .map(|e| e.json())
        .find(|m| m["payload"]["type"] == "approval_decision")
        .unwrap_or_else(|| panic!("{:?}", kinds(&run)));
    assert_eq!(decision["payload"]["decision"], "deny");
    assert_eq!(
        decision["payload"]["decided_by"],
        "hook:echo 'not in a served session' >&2; exit 2"
    );
    assert_eq!(decision["payload"]["reason"], "not in a served session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hooks_ask_is_asked_of_the_clients_even_under_allow_all() {
    low_open_file_limit(256);
    let dir = TestDir::new();
    let ask = r#"cat >/dev/null; echo '{"hookSpecificOutput": {"permissionDecision": "ask"}}'"#;
    let factory = factory(&dir, pre_tool_use(ask));
    let srv = serve(dir, Arc::new(factory), |_| {}).await;
    let id = srv.create("allow-all").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    let request = s
        .until(|e| e.is_server() && e.kind() == "approval_request")
        .await
        .pop()
        .unwrap()
        .json();
    let call = request["toolCall"]["payload"]["tool_call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(srv.decide(&id, &call, "deny").await.status, 204);
    let run = s.until(|e| e.is_state("idle")).await;
    let decision = run
        .iter()
        .map(|e| e.json())
        .find(|m| m["payload"]["type"] == "approval_decision")
        .unwrap_or_else(|| panic!("{:?}", kinds(&run)));
    // The person's answer, not the mode's allow.
    assert_eq!(decision["payload"]["decision"], "deny");
}
