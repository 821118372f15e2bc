//! Goal mode over the API: `goal: {budget}` on `POST …/tasks` runs the facade's goal loop on a
//! served session, `goal_state` events follow it, `GET …/goal` answers its state, and a
//! restarted server rebuilds that state from the trace.

use std::sync::Arc;

use penguin_agent::session::{Session, SessionSpec};
use penguin_engine::EngineConfig;
use penguin_llm_providers::scripted::ScriptedModel;
use penguin_server::{CreateSession, FactoryError, HostedSession, LoadSession, SessionFactory};
use penguin_tools::{BuiltinTools, ToolsConfig};
use penguin_trace_store::Durability;
use serde_json::{json, Value};

use penguin_server::testing::{serve, TestDir};

fn step(m: Value) -> Value {
    json!({"delay_ms": 0, "message": m})
}

fn usage() -> Value {
    let c = json!({"cache_read": 0, "cache_write": 0, "output": 5, "total": 50});
    json!({"type": "event_msg", "payload": {"type": "token_usage", "session": c, "request": c}})
}

fn turn(payload: Value) -> Value {
    json!({"stream": [step(json!({"type": "model_msg", "payload": payload})), step(usage())]})
}

/// The scripted model with the real built-in tools, in one workspace; loads from the trace.
struct GoalTools {
    llm: Value,
    workspace: std::path::PathBuf,
}

impl GoalTools {
    fn env(&self) -> Result<Arc<BuiltinTools>, FactoryError> {
        BuiltinTools::new(&self.workspace, ToolsConfig::default())
            .map(Arc::new)
            .map_err(|e| FactoryError::internal(e.to_string()))
    }

    fn llm(&self) -> Result<Box<ScriptedModel>, FactoryError> {
        ScriptedModel::from_json(&self.llm)
            .map(Box::new)
            .map_err(|e| FactoryError::internal(e.to_string()))
    }
}

impl SessionFactory for GoalTools {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let spec = SessionSpec::new(req.location.clone(), self.workspace.clone())
            .with_model("scripted", "scenario")
            .with_durability(req.durability);
        let session = Session::create(spec, self.llm()?, self.env()?)
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        Ok(Box::new(session))
    }

    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let (resumed, writer) = Session::load(&req.location, &req.session_id, Durability::Never)
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        let session = Session::resume(
            resumed,
            writer,
            EngineConfig::default(),
            self.llm()?,
            self.env()?,
        )
        .map_err(|e| FactoryError::internal(e.to_string()))?;
        Ok(Box::new(session))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_runs_over_the_api_and_its_state_outlives_the_server() {
    let dir = TestDir::new();
    let ws = dir.workspace();
    let data = dir.data_root();
    // Round 1: the model marks the goal complete in its GOAL.yaml, then says so.
    let mark = "sed -i 's/^status: active/status: complete/' .penguin/scratchpad/*/GOAL.yaml";
    let llm = json!([
        turn(
            json!({"type": "tool_call", "role": "assistant", "name": "exec_command",
            "arguments": json!({"cmd": mark}).to_string(), "tool_call_id": "c1", "stop_reason": "completed"})
        ),
        turn(
            json!({"type": "text", "role": "assistant", "text": "Counted: 3 penguins.", "stop_reason": "completed"})
        ),
    ]);
    let factory = |llm: &Value| GoalTools {
        llm: llm.clone(),
        workspace: ws.clone(),
    };
    let srv = serve(TestDir::new(), Arc::new(factory(&llm)), |o| {
        o.data_root = data.clone()
    })
    .await;
    let id = srv.create("allow-all").await;
    assert_eq!(
        srv.get(&format!("/api/sessions/{id}/goal")).await.body,
        json!({"goal": null})
    );
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    let tasks = format!("/api/sessions/{id}/tasks");
    let bad = srv
        .post(
            &tasks,
            json!({"input": [{"type": "text", "text": "x"}], "goal": {"budget": "lots"}}),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("goal.budget"));
    let r = srv
        .post(
            &tasks,
            json!({"input": [{"type": "text", "text": "Count the penguins"}], "goal": {"budget": 100000}}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let run = s.until(|e| e.is_state("idle")).await;
    let states: Vec<Value> = run
        .iter()
        .filter(|e| e.kind() == "goal_state")
        .map(|e| e.json()["goal"].clone())
        .collect();
    assert_eq!(states.first().unwrap()["status"], "active", "{states:?}");
    assert_eq!(states.first().unwrap()["objective"], "Count the penguins");
    assert_eq!(states.last().unwrap()["status"], "complete", "{states:?}");
    let finished = run.iter().filter(|e| e.kind() == "goal_finished").count();
    assert_eq!(finished, 1, "exactly one goal_finished");
    let goal = srv.get(&format!("/api/sessions/{id}/goal")).await.body["goal"].clone();
    assert_eq!(goal["status"], "complete");
    assert_eq!(goal["budget"], 100000);
    assert_eq!(goal["rounds"], 1);
    drop(s);
    drop(srv);

    // A new server loads the session from its trace: the goal's state is rebuilt from it.
    let srv = serve(dir, Arc::new(factory(&json!([]))), |_| {}).await;
    let goal = srv.get(&format!("/api/sessions/{id}/goal")).await.body["goal"].clone();
    assert_eq!(goal["status"], "complete", "{goal}");
    assert_eq!(goal["objective"], "Count the penguins");
}
