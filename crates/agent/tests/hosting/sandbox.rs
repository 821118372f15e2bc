//! The sandbox over the API with the facade's pieces: a `ModelFactory` over the real built-in
//! tools (Landlock where the kernel has it): `POST /api/sessions` may ask for a sandbox, the
//! session info shows the effective one (`penguin_agent::hosting::sandbox_info`), a restarted server
//! loads a session with the sandbox it asked for, and `allow_unsandboxed` grants a real
//! command a run outside it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use penguin_agent::hosting::ModelFactory;
use penguin_agent::models::ModelSpec;
use penguin_engine::{EngineConfig, Environment, MessageSink, Permission, ToolCallRequest};
use penguin_omni_protocol::{ToolCall, ToolDefinition};
use penguin_tools::sandbox::Landlock;
use penguin_tools::{BuiltinTools, Sandbox, SandboxRequest, ToolsConfig};
use serde_json::{json, Value};

use penguin_server::testing::{serve, Reply, TestDir, TestServer};

/// The calls a session's tools were asked to run outside the sandbox: (id, arguments).
type Grants = Arc<Mutex<Vec<(String, String)>>>;

/// The built-in tools, noting what they grant.
struct Recording {
    tools: BuiltinTools,
    grants: Grants,
}

#[async_trait::async_trait]
impl Environment for Recording {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        self.tools.execute(request, sink).await
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.tools.tools()
    }

    fn permission(&self, name: &str) -> Permission {
        self.tools.permission(name)
    }

    fn unsandboxed_tools(&self) -> Vec<String> {
        self.tools.unsandboxed_tools()
    }

    fn grant_unsandboxed(&self, call: &ToolCall) -> bool {
        let granted = self.tools.grant_unsandboxed(call);
        if granted {
            let grant = (call.tool_call_id.clone(), call.arguments.clone());
            self.grants.lock().unwrap().push(grant);
        }
        granted
    }
}

/// A server whose sessions run the demo model over the real built-in tools.
async fn start(root: &std::path::Path, network: bool) -> TestServer {
    start_recording(root, network, Grants::default()).await
}

async fn start_recording(root: &std::path::Path, network: bool, grants: Grants) -> TestServer {
    let factory = ModelFactory {
        spec: ModelSpec::demo(),
        models: Vec::new(),
        system_prompt: "You are a test.".into(),
        default_workspace: root.join("ws"),
        engine: EngineConfig::default(),
        environment: Arc::new(
            move |ws: &std::path::Path,
                  sandbox: &Sandbox,
                  _: &[penguin_tools::mcp::McpServerConfig]| {
                let config = ToolsConfig {
                    sandbox: sandbox.clone(),
                    ..ToolsConfig::default()
                };
                let grants = grants.clone();
                BuiltinTools::new(ws, config)
                    .map(|tools| Arc::new(Recording { tools, grants }) as Arc<dyn Environment>)
                    .map_err(|e| e.to_string())
            },
        ),
        policy: Default::default(),
        sandbox: SandboxRequest {
            network,
            ..SandboxRequest::default()
        },
        data_root: None,
        hooks: Default::default(),
        checkpoints: Default::default(),
        live: None,
    };
    let data_root = root.join("data");
    serve(TestDir::new(), Arc::new(factory), |o| {
        o.data_root = data_root
    })
    .await
}

async fn start_task(srv: &TestServer, id: &str, text: &str) {
    let r = srv.task(id, text).await;
    assert_eq!(r.status, 202, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_their_sandbox_and_may_ask_for_another() {
    let Landlock::Abi(abi) = Landlock::probe() else {
        assert!(std::env::var_os("CI").is_none(), "{}", Landlock::probe());
        eprintln!(
            "SKIPPED: {} (the API's sandbox needs Landlock to show one)",
            Landlock::probe()
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let srv = start(dir.path(), false).await;

    let Reply { status, body } = srv.create_with(json!({"approvalMode": "allow-all"})).await;
    assert_eq!(status, 201, "{body}");
    let sandbox = &body["session"]["sandbox"];
    assert_eq!(sandbox["mode"], "workspace-write", "{body}");
    assert_eq!(sandbox["requested"], Value::Null);
    assert_eq!(sandbox["network"], false, "the server's default");
    assert_eq!(sandbox["landlockAbi"], abi);
    assert!(sandbox["summary"]
        .as_str()
        .unwrap()
        .starts_with("sandbox: workspace-write, network off"));

    let Reply { status, body } = srv
        .create_with(
            json!({"approvalMode": "allow-all", "sandbox": {"mode": "read-only", "network": true}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["session"]["id"].as_str().unwrap().to_owned();
    let sandbox = &body["session"]["sandbox"];
    assert_eq!(
        (&sandbox["mode"], &sandbox["requested"], &sandbox["network"]),
        (&json!("read-only"), &json!("read-only"), &json!(true))
    );

    for (bad, field) in [
        (json!({"sandbox": {"mode": "jail"}}), "sandbox.mode"),
        (json!({"sandbox": {"mode": 3}}), "sandbox.mode"),
        (json!({"sandbox": {"network": "no"}}), "sandbox.network"),
        (json!({"sandbox": {"modes": "off"}}), "sandbox"),
        (json!({"sandbox": "off"}), "sandbox"),
    ] {
        let Reply { status, body } = srv.create_with(bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{bad}: {message}");
    }

    // A task leaves a trace, so a restarted server loads the session from disk; a title
    // change in between must not lose the sandbox it asked for.
    start_task(&srv, &id, "hi").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = srv.session(&id).await;
        if s["state"] == "idle" && s["hasTrace"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the demo task did not finish: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = srv
        .call(
            reqwest::Method::PATCH,
            &format!("/api/sessions/{id}"),
            Some(json!({"title": "kept"})),
        )
        .await
        .status;
    assert!(status < 300);
    drop(srv);

    // This server blocks the network by default: the stored request must win.
    let again = start(dir.path(), false).await;
    let s = again.session(&id).await;
    assert_eq!(s["title"], "kept");
    assert_eq!(
        (&s["sandbox"]["mode"], &s["sandbox"]["network"]),
        (&json!("read-only"), &json!(true)),
        "{s}"
    );
}

/// `allow_unsandboxed` grants the call through the session's tools before allowing it; where
/// the tools have nothing to grant, or the decision or call is wrong, the answer says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_may_be_allowed_once_outside_the_sandbox() {
    if !matches!(Landlock::probe(), Landlock::Abi(_)) {
        assert!(std::env::var_os("CI").is_none(), "{}", Landlock::probe());
        eprintln!("SKIPPED: {} (nothing to run outside of)", Landlock::probe());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let grants = Grants::default();
    let srv = start_recording(dir.path(), false, grants.clone()).await;

    // The demo model lists the workspace with exec_command, which waits for a human.
    let ask = |sandbox: &str| json!({"approvalMode": "always-ask", "sandbox": {"mode": sandbox, "network": true}});
    let waiting_call = |id: String| {
        let srv = &srv;
        async move {
            start_task(srv, &id, "look").await;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let h = srv.history(&id).await;
                let call = h["messages"].as_array().into_iter().flatten().find(|m| {
                    m["payload"]["type"] == "tool_call" && m["payload"]["name"] == "exec_command"
                });
                if let Some(call) = call {
                    return (
                        call["payload"]["tool_call_id"].as_str().unwrap().to_owned(),
                        call["payload"]["arguments"].as_str().unwrap().to_owned(),
                    );
                }
                assert!(Instant::now() < deadline, "no exec_command call: {h}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // The call is published before its approval is asked for: retry while it is not yet.
    let decide = |id: String, call: String, decision: &'static str| {
        let srv = &srv;
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let Reply { status, body } = srv.decide(&id, &call, decision).await;
                if status != 404 || Instant::now() > deadline {
                    return (status, body);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    let Reply { status: _, body } = srv.create_with(ask("workspace-write")).await;
    let id = body["session"]["id"].as_str().unwrap().to_owned();
    // The session says which calls may run outside its sandbox: its commands.
    assert_eq!(
        body["session"]["sandbox"]["unsandboxedTools"],
        json!(["exec_command"]),
        "{body}"
    );
    let (call, args) = waiting_call(id.clone()).await;
    let Reply { status, body } = srv.decide(&id, &call, "allow_once").await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "\"allow\", \"allow_always\", \"allow_unsandboxed\" or \"deny\", got \"allow_once\""
        ),
        "{message}"
    );
    let (status, body) = decide(id.clone(), call.clone(), "allow_unsandboxed").await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(*grants.lock().unwrap(), [(call.clone(), args)]);
    let Reply { status, body: _ } = srv.decide(&id, &call, "allow_unsandboxed").await;
    assert_eq!(status, 404, "answered already");

    // Commands that run unsandboxed anyway cannot be let out of anything.
    let Reply { status: _, body } = srv.create_with(ask("off")).await;
    let off = body["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        body["session"]["sandbox"]["unsandboxedTools"],
        Value::Null,
        "{body}"
    );
    let (call, _) = waiting_call(off.clone()).await;
    let (status, body) = decide(off.clone(), call.clone(), "allow_unsandboxed").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "not_sandboxed", "{body}");
    assert_eq!(grants.lock().unwrap().len(), 1);
    let (status, body) = decide(off, call, "allow").await;
    assert_eq!(status, 204, "still pending, and allowed normally: {body}");
}
