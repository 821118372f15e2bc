//! Background commands of a served session: listed and killed over the API, and a background
//! launch that settles while the session is idle starts a task carrying its notice.

use std::sync::Arc;
use std::time::Duration;

use penguin::engine::EngineConfig;
use penguin::llm_providers::scripted::ScriptedModel;
use penguin::server::{
    router, AppState, CreateSession, FactoryError, HostedSession, LoadSession, ServeOptions,
    SessionFactory,
};
use penguin::session::{Session, SessionSpec};
use penguin::tools::{BuiltinTools, ToolsConfig};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789";

fn model(p: Value) -> Value {
    json!({"type": "model_msg", "payload": p})
}

fn step(m: Value) -> Value {
    json!({"delay_ms": 0, "message": m})
}

fn usage() -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": 1, "total": 10});
    json!({"type": "event_msg", "payload": {"type": "token_usage", "session": c, "request": c}})
}

fn text_turn(text: &str) -> Value {
    json!({"stream": [
        step(model(json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"}))),
        step(usage()),
    ]})
}

fn call_turn(id: &str, args: Value) -> Value {
    json!({"stream": [
        step(model(json!({"type": "tool_call", "role": "assistant", "name": "exec_command", "arguments": args.to_string(), "tool_call_id": id, "stop_reason": "completed"}))),
        step(usage()),
    ]})
}

/// A scripted model with the real built-in tools: its calls run real commands.
struct RealTools {
    llm: Value,
}

impl SessionFactory for RealTools {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let workspace = req
            .workspace
            .clone()
            .ok_or_else(|| FactoryError::InvalidRequest("workspace: needed here".into()))?;
        let llm = ScriptedModel::from_json(&self.llm)
            .map_err(|e| FactoryError::Internal(e.to_string()))?;
        let env = BuiltinTools::new(&workspace, ToolsConfig::default())
            .map_err(|e| FactoryError::Internal(e.to_string()))?;
        let spec = SessionSpec {
            location: req.location.clone(),
            provider: "scripted".into(),
            model_id: "scenario".into(),
            context_window: None,
            system_prompt: String::new(),
            workspace,
            source: None,
            durability: req.durability,
            engine: EngineConfig::default(),
        };
        let session = Session::create(spec, Box::new(llm), Arc::new(env))
            .map_err(|e| FactoryError::Internal(e.to_string()))?;
        Ok(Box::new(session))
    }

    fn load(&self, _req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        Err(FactoryError::Unrecoverable("not in this test".into()))
    }
}

struct Server {
    base: String,
    http: reqwest::Client,
    state: AppState,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.state.shutdown();
    }
}

async fn start(llm: Value) -> (Server, String) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut opts = ServeOptions::new(Arc::new(RealTools { llm }));
    opts.data_root = dir.path().join("data");
    let state = AppState::new(&opts, TOKEN);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let srv = Server {
        base,
        http: reqwest::Client::new(),
        state,
        _dir: dir,
    };
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string()}),
        )
        .await;
    let id = created["session"]["id"].as_str().unwrap().to_owned();
    (srv, id)
}

impl Server {
    async fn post(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap_or(Value::Null)
    }

    async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Bounded polling of the history until `done` holds.
    async fn history_until(&self, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        for _ in 0..400 {
            let h = self.get(&format!("/api/sessions/{id}/messages")).await;
            let msgs = h["messages"].as_array().cloned().unwrap_or_default();
            let idle = self.get(&format!("/api/sessions/{id}")).await["session"]["state"] == "idle";
            if idle && done(&msgs) {
                return msgs;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for the history");
    }
}

fn texts(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .filter_map(|m| m["payload"]["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_command_that_settles_while_idle_starts_a_task_with_its_notice() {
    let llm = json!([
        call_turn(
            "c1",
            json!({"cmd": "sleep 0.5; echo built", "run_in_background": true})
        ),
        text_turn("Started the build."),
        text_turn("The build finished."),
    ]);
    let (srv, id) = start(llm).await;
    srv.post(
        &format!("/api/sessions/{id}/tasks"),
        json!({"input": [{"type": "text", "text": "build it in the background"}]}),
    )
    .await;
    let msgs = srv
        .history_until(&id, |m| texts(m).iter().any(|t| t == "The build finished."))
        .await;
    let texts = texts(&msgs);
    let notice = texts
        .iter()
        .position(|t| t.starts_with("[background_task_done]"))
        .expect("the notice is in the history");
    assert!(texts[notice].contains("Background command finished: `sleep 0.5; echo built`"));
    assert!(texts[notice].contains("built"), "{}", texts[notice]);
    assert_eq!(texts[notice + 1], "The build finished.");
    assert!(
        texts
            .iter()
            .position(|t| t == "Started the build.")
            .unwrap()
            < notice,
        "the notice came after the first task ended"
    );
    let sender = msgs
        .iter()
        .find(|m| {
            m["payload"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("[background_task_done]"))
        })
        .map(|m| m["payload"]["sender"].clone());
    assert_eq!(sender, Some(json!("harness")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_commands_are_listed_and_killed_over_the_api() {
    let llm = json!([
        call_turn("c1", json!({"cmd": "sleep 300", "run_in_background": true})),
        text_turn("Running."),
    ]);
    let (srv, id) = start(llm).await;
    srv.post(
        &format!("/api/sessions/{id}/tasks"),
        json!({"input": [{"type": "text", "text": "start it"}]}),
    )
    .await;
    srv.history_until(&id, |m| texts(m).iter().any(|t| t == "Running."))
        .await;
    let list = srv.get(&format!("/api/sessions/{id}/processes")).await;
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{list}");
    assert_eq!(procs[0]["command"], "sleep 300");
    assert_eq!(procs[0]["running"], true);
    let pid = procs[0]["processId"].as_str().unwrap().to_owned();
    let r = srv
        .http
        .post(format!(
            "{}/api/sessions/{id}/processes/{pid}/kill",
            srv.base
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let list = srv.get(&format!("/api/sessions/{id}/processes")).await;
    assert_eq!(list["processes"], json!([]));
    let r = srv
        .http
        .post(format!(
            "{}/api/sessions/{id}/processes/{pid}/kill",
            srv.base
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}
