//! What a session is created with over the API: `POST /api/sessions` may ask for a sandbox
//! and MCP servers, the session info shows the sandbox its tools report, a restarted server
//! hands what was asked for back to the factory when it loads the session, and
//! `allow_unsandboxed` lets a call out of the sandbox once through the session's tools.
//!
//! The sessions are fakes (`support::fake`) reporting a sandbox; the facade's real one
//! (Landlock, the built-in tools) behind the server is tested in `crates/agent/tests/hosting/`.
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;

use penguin_server::api::SandboxSettings;
use serde_json::{json, Value};
use support::fake::Grants;
use support::script::{call_turn, text_turn};
use support::{FakeFactory, TestDir, TestServer};

/// A server whose sessions report a sandbox (see [`FakeFactory::with_sandbox`]) over `dir`'s
/// data root, their model calling `exec_command` as `c_exec`, then `read_file` as `c_read`.
async fn start(dir: TestDir, grants: Grants) -> (TestServer, Arc<FakeFactory>) {
    let script = json!({"llm": [
        call_turn("exec_command", "c_exec", json!({"cmd": "make install"})),
        call_turn("read_file", "c_read", json!({"path": "notes.md"})),
        text_turn("Installed, and read the notes."),
    ]});
    let factory = Arc::new(FakeFactory::new(script, dir.workspace()).with_sandbox(grants));
    (support::serve(dir, factory.clone(), |_| {}).await, factory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_their_sandbox_and_a_restart_keeps_the_one_they_asked_for() {
    let (srv, _) = start(TestDir::new(), Grants::default()).await;

    let r = srv.create_with(json!({"approvalMode": "allow-all"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let sandbox = &r.body["session"]["sandbox"];
    assert_eq!(sandbox["mode"], "workspace-write", "{}", r.body);
    assert_eq!(sandbox["requested"], Value::Null);
    assert_eq!(sandbox["network"], false, "the factory's default");
    assert!(sandbox["summary"]
        .as_str()
        .unwrap()
        .starts_with("sandbox: workspace-write, network off"));
    assert_eq!(sandbox["unsandboxedTools"], json!(["exec_command"]));

    let r = srv
        .create_with(
            json!({"approvalMode": "allow-all", "sandbox": {"mode": "read-only", "network": true}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["session"]["id"].as_str().unwrap().to_owned();
    let sandbox = &r.body["session"]["sandbox"];
    assert_eq!(
        (&sandbox["mode"], &sandbox["requested"], &sandbox["network"]),
        (&json!("read-only"), &json!("read-only"), &json!(true))
    );

    // The shape is the server's to check, the mode's value the factory's: both are 400s that
    // name the field.
    for (bad, field) in [
        (json!({"sandbox": {"mode": "jail"}}), "sandbox.mode"),
        (json!({"sandbox": {"mode": 3}}), "sandbox.mode"),
        (json!({"sandbox": {"network": "no"}}), "sandbox.network"),
        (json!({"sandbox": {"modes": "off"}}), "sandbox"),
        (json!({"sandbox": "off"}), "sandbox"),
    ] {
        let r = srv.create_with(bad.clone()).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{bad}: {message}");
    }

    // A task leaves a trace, so a restarted server loads the session from disk; a title
    // change in between must not lose the sandbox it asked for.
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    srv.until_history(&id, |m| {
        m.iter()
            .any(|m| m["payload"]["text"] == "Installed, and read the notes.")
    })
    .await;
    assert_eq!(srv.session(&id).await["hasTrace"], true);
    let r = srv
        .patch(&format!("/api/sessions/{id}"), json!({"title": "kept"}))
        .await;
    assert!(r.status < 300, "{}", r.body);
    let data = srv.data_root.clone();
    let _kept = srv.stop();

    // The factory's default has the network off: the stored request must win.
    let dir = TestDir::new();
    let factory =
        Arc::new(FakeFactory::new(json!({}), dir.workspace()).with_sandbox(Grants::default()));
    let again = support::serve(dir, factory.clone(), |o| o.data_root = data).await;
    let s = again.session(&id).await;
    assert_eq!(s["title"], "kept");
    assert_eq!(
        (&s["sandbox"]["mode"], &s["sandbox"]["network"]),
        (&json!("read-only"), &json!(true)),
        "{s}"
    );
    let asked = SandboxSettings {
        mode: Some("read-only".into()),
        network: Some(true),
    };
    assert_eq!(*factory.loads.lock().unwrap(), [(Some(asked), vec![])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_servers_a_session_asked_for_are_checked_and_kept_across_a_restart() {
    let (srv, _) = start(TestDir::new(), Grants::default()).await;
    for (body, field) in [
        // The shape is the server's to check; an entry, the factory's.
        (json!({"mcpServers": "fx"}), "mcpServers"),
        (json!({"mcpServers": ["fx"]}), "mcpServers"),
        (
            json!({"mcpServers": [{"name": "fx", "colour": "red"}]}),
            "mcpServers[0]",
        ),
    ] {
        let r = srv.create_with(body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(field), "{field}: {msg}");
    }
    let servers = json!([{"name": "fx", "command": "node", "args": ["fixture.mjs", "tools"]}]);
    let r = srv
        .create_with(json!({"approvalMode": "allow-all", "mcpServers": servers}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.body["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    srv.until_idle(&id).await;
    let data = srv.data_root.clone();
    let _kept = srv.stop();

    // A restarted server loads the session with the servers it was created with.
    let dir = TestDir::new();
    let factory = Arc::new(FakeFactory::new(json!({}), dir.workspace()));
    let again = support::serve(dir, factory.clone(), |o| o.data_root = data).await;
    assert_eq!(again.session(&id).await["id"], id.as_str());
    let loads = factory.loads.lock().unwrap().clone();
    assert_eq!(loads, [(None, servers.as_array().unwrap().clone())]);
}

/// `allow_unsandboxed` grants the call through the session's tools before allowing it; where
/// the tools have nothing to grant, or the decision or call is wrong, the answer says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_may_be_allowed_once_outside_the_sandbox() {
    let grants = Grants::default();
    let (srv, _) = start(TestDir::new(), grants.clone()).await;
    let ask = |sandbox: &str| json!({"approvalMode": "always-ask", "sandbox": {"mode": sandbox, "network": true}});
    // The call is published before its approval is asked for: retry while it is not yet.
    let decide = |id: String, call: &'static str, decision: &'static str| {
        let srv = &srv;
        async move {
            let deadline = std::time::Instant::now() + support::WAIT;
            loop {
                let r = srv.decide(&id, call, decision).await;
                if r.status != 404 || std::time::Instant::now() > deadline {
                    return r;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };

    let r = srv.create_with(ask("workspace-write")).await;
    let id = r.body["session"]["id"].as_str().unwrap().to_owned();
    // The session says which calls may run outside its sandbox: its commands.
    assert_eq!(
        r.body["session"]["sandbox"]["unsandboxedTools"],
        json!(["exec_command"]),
        "{}",
        r.body
    );
    assert_eq!(srv.task(&id, "install").await.status, 202);
    let r = decide(id.clone(), "c_exec", "allow_once").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "\"allow\", \"allow_always\", \"allow_unsandboxed\" or \"deny\", got \"allow_once\""
        ),
        "{message}"
    );
    let r = decide(id.clone(), "c_exec", "allow_unsandboxed").await;
    assert_eq!(r.status, 204, "{}", r.body);
    let args = json!({"cmd": "make install"}).to_string();
    assert_eq!(*grants.lock().unwrap(), [("c_exec".to_owned(), args)]);
    assert_eq!(
        srv.decide(&id, "c_exec", "allow_unsandboxed").await.status,
        404,
        "answered already"
    );
    // A file read is not a command: nothing to let out, and it is still pending.
    let r = decide(id.clone(), "c_read", "allow_unsandboxed").await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "not_sandboxed", "{}", r.body);
    assert_eq!(decide(id.clone(), "c_read", "allow").await.status, 204);
    srv.until_idle(&id).await;
    assert_eq!(grants.lock().unwrap().len(), 1);

    // Commands that run unsandboxed anyway cannot be let out of anything.
    let r = srv.create_with(ask("off")).await;
    let off = r.body["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        r.body["session"]["sandbox"]["unsandboxedTools"],
        Value::Null,
        "{}",
        r.body
    );
    assert_eq!(srv.task(&off, "install").await.status, 202);
    let r = decide(off.clone(), "c_exec", "allow_unsandboxed").await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "not_sandboxed", "{}", r.body);
    assert_eq!(grants.lock().unwrap().len(), 1);
    let r = decide(off, "c_exec", "allow").await;
    assert_eq!(
        r.status, 204,
        "still pending, and allowed normally: {}",
        r.body
    );
}
