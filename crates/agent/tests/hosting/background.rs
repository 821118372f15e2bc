//! Background work of a served facade session: real commands (the built-in tools) listed and
//! killed over the API; a background launch that settles while the session is idle starts a
//! task carrying its notice; a background subagent (the facade's `SubagentEnvironment`) whose
//! messages are published live on the session's channel, whose approval requests wait for
//! their human past the end of the task that launched it, and are withdrawn when the child is
//! killed.

use std::sync::Arc;
use std::time::Duration;

use penguin_agent::session::{Session, SessionSpec};
use penguin_llm_providers::scripted::ScriptedModel;
use penguin_server::{CreateSession, FactoryError, HostedSession, LoadSession, SessionFactory};
use penguin_tools::{BuiltinTools, ToolsConfig};
use serde_json::{json, Value};

use penguin_server::testing::{files_under, serve, Ev, Sse, TestDir, TestServer, TOKEN};

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

pub(crate) fn text_turn(text: &str) -> Value {
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
pub(crate) struct RealTools {
    pub(crate) llm: Value,
}

impl SessionFactory for RealTools {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let workspace = req
            .workspace
            .clone()
            .ok_or_else(|| FactoryError::invalid_request("workspace", "needed here"))?;
        let llm = ScriptedModel::from_json(&self.llm)
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        let env = BuiltinTools::new(&workspace, ToolsConfig::default())
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        let spec = SessionSpec::new(req.location.clone(), workspace)
            .with_model("scripted", "scenario")
            .with_durability(req.durability);
        let mut session = Session::create(spec, Box::new(llm), Arc::new(env))
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        session.enable_checkpoints(penguin_agent::rewind::checkpoint_store(&req.location));
        Ok(Box::new(session))
    }

    /// A stored session (a fork) resumes with the same script, from its start.
    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        let (resumed, writer) = Session::load(&req.location, &req.session_id, req.durability)
            .map_err(|e| FactoryError::unrecoverable(e.to_string()))?;
        let llm = ScriptedModel::from_json(&self.llm)
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        let env = BuiltinTools::new(&resumed.meta.workspace, ToolsConfig::default())
            .map_err(|e| FactoryError::internal(e.to_string()))?;
        let session = Session::resume(
            resumed,
            writer,
            penguin_engine::EngineConfig::default(),
            Box::new(llm),
            Arc::new(env),
        )
        .map_err(|e| FactoryError::internal(e.to_string()))?;
        Ok(Box::new(session))
    }
}

async fn start(llm: Value) -> (TestServer, String) {
    let dir = TestDir::new();
    let ws = dir.workspace();
    let srv = serve(dir, Arc::new(RealTools { llm }), |_| {}).await;
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string(), "approvalMode": "allow-all"}),
        )
        .await
        .body;
    let id = created["session"]["id"].as_str().unwrap().to_owned();
    (srv, id)
}

fn texts(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .filter_map(|m| m["payload"]["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_command_that_settles_while_idle_starts_a_task_with_its_notice() {
    // The build finishes only when the test lets it, after the first task ended.
    let build = "while [ ! -e go ]; do sleep .05; done; echo built";
    let llm = json!([
        call_turn("c1", json!({"cmd": build, "run_in_background": true})),
        text_turn("Started the build."),
        text_turn("The build finished."),
    ]);
    let (srv, id) = start(llm).await;
    srv.post(
        &format!("/api/sessions/{id}/tasks"),
        json!({"input": [{"type": "text", "text": "build it in the background"}]}),
    )
    .await;
    srv.until_history(&id, |m| texts(m).iter().any(|t| t == "Started the build."))
        .await;
    std::fs::write(srv.workspace.join("go"), "").unwrap();
    let msgs = srv
        .until_history(&id, |m| texts(m).iter().any(|t| t == "The build finished."))
        .await;
    let texts = texts(&msgs);
    let notice = texts
        .iter()
        .position(|t| t.starts_with("[background_task_done]"))
        .expect("the notice is in the history");
    assert!(
        texts[notice].contains(&format!("Background command finished: `{build}`")),
        "{}",
        texts[notice]
    );
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
    srv.until_history(&id, |m| texts(m).iter().any(|t| t == "Running."))
        .await;
    let list = srv.get(&format!("/api/sessions/{id}/processes")).await.body;
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{list}");
    assert_eq!(procs[0]["command"], "sleep 300");
    assert_eq!(procs[0]["running"], true);
    let pid = procs[0]["processId"].as_str().unwrap().to_owned();
    let kill = format!("/api/sessions/{id}/processes/{pid}/kill");
    assert_eq!(srv.post(&kill, Value::Null).await.status, 204);
    let list = srv.get(&format!("/api/sessions/{id}/processes")).await.body;
    assert_eq!(list["processes"], json!([]));
    assert_eq!(srv.post(&kill, Value::Null).await.status, 404);
}

// ---------------------------------------------------------------------------------------------
// Background subagents

/// A tool that ends when the test releases it.
#[derive(Clone)]
struct Gate(Arc<tokio::sync::Notify>);

#[async_trait::async_trait]
impl penguin_engine::Environment for Gate {
    async fn execute(
        &self,
        request: penguin_engine::ToolCallRequest,
        sink: &mut dyn penguin_engine::MessageSink,
    ) {
        let id = request.tool_call().tool_call_id.clone();
        self.0.notified().await;
        sink.emit(penguin_omni_protocol::build::tool_call_output(
            "released",
            id,
            penguin_omni_protocol::StopReason::Completed,
        ))
        .await;
    }

    fn tools(&self) -> Vec<penguin_omni_protocol::ToolDefinition> {
        Vec::new()
    }

    // `wait` only reads, so a `read-only` session runs it without asking; a child's
    // `exec_command` is looked up here too (the parent's tools answer for its children).
    fn permission(&self, name: &str) -> penguin_engine::Permission {
        if name == "wait" {
            penguin_engine::Permission::Read
        } else {
            penguin_engine::Permission::ReadWrite
        }
    }
}

/// A parent whose tools are the subagent tools plus a gated `wait`; its children play `child`
/// with scripted tools.
struct WithSubagents {
    parent: Value,
    child: Value,
    child_tools: Value,
    gate: Arc<tokio::sync::Notify>,
    /// The parent's tools, for a test that reaches its background work directly.
    env: Arc<std::sync::Mutex<Option<Arc<dyn penguin_engine::Environment>>>>,
}

impl SessionFactory for WithSubagents {
    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        use penguin_agent::subagent::{SubagentEnvironment, SubagentSpawner};
        use penguin_engine::Environment;
        let internal = |e: &dyn std::fmt::Display| FactoryError::internal(e.to_string());
        let workspace = req.workspace.clone().unwrap();
        let spec = |source: Option<String>| {
            SessionSpec::new(req.location.clone(), workspace.clone())
                .with_model("scripted", "scenario")
                .with_source(source)
                .with_durability(req.durability)
        };
        let (child, child_tools, child_spec) = (
            self.child.clone(),
            self.child_tools.clone(),
            spec(Some("subagent".into())),
        );
        let spawner: Arc<dyn SubagentSpawner> = Arc::new(move || {
            let llm = ScriptedModel::from_json(&child).expect("the child script parses");
            let tools = penguin_engine::scripted::ScriptedEnvironment::from_json(&child_tools)
                .expect("the child tools parse");
            Session::create(child_spec.clone(), Box::new(llm), Arc::new(tools))
        });
        let env: Arc<dyn Environment> = Arc::new(SubagentEnvironment::new(
            Arc::new(Gate(self.gate.clone())),
            spawner,
        ));
        *self.env.lock().unwrap() = Some(env.clone());
        let llm = ScriptedModel::from_json(&self.parent).map_err(|e| internal(&e))?;
        let session = Session::create(spec(None), Box::new(llm), env).map_err(|e| internal(&e))?;
        Ok(Box::new(session))
    }

    fn load(&self, _req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        Err(FactoryError::unrecoverable("not in this test"))
    }
}

fn partial_turn(text: &str) -> Value {
    let part = |event: &str, t: &str| {
        step(model(
            json!({"type": "partial_text", "role": "assistant", "event_type": event, "text": t, "stop_reason": "completed"}),
        ))
    };
    json!({"stream": [
        part("start", ""),
        part("delta", text),
        part("stop", ""),
        step(model(json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"}))),
        step(usage()),
    ]})
}

pub(crate) fn named_call_turn(name: &str, id: &str, args: Value) -> Value {
    json!({"stream": [
        step(model(json!({"type": "tool_call", "role": "assistant", "name": name, "arguments": args.to_string(), "tool_call_id": id, "stop_reason": "completed"}))),
        step(usage()),
    ]})
}

/// A served read-only session whose parent launches `prompt` as a background subagent that
/// plays `child`, then sits in a `wait` the test releases through `gate`, then plays `then`.
/// Returned once the child asks for approval of its first call (the parent's own tools run
/// unasked).
struct Delegated {
    srv: TestServer,
    id: String,
    events: Sse,
    gate: Arc<tokio::sync::Notify>,
    env: Arc<std::sync::Mutex<Option<Arc<dyn penguin_engine::Environment>>>>,
}

async fn delegate(prompt: &str, then: Vec<Value>, child: Value, child_tools: Value) -> Delegated {
    let dir = TestDir::new();
    let ws = dir.workspace();
    let gate = Arc::new(tokio::sync::Notify::new());
    let env = Arc::new(std::sync::Mutex::new(None));
    let mut parent = vec![
        named_call_turn(
            "run_subagent",
            "call_bg",
            json!({"prompt": prompt, "run_in_background": true}),
        ),
        named_call_turn("wait", "call_wait", json!({})),
    ];
    parent.extend(then);
    let factory = WithSubagents {
        parent: Value::Array(parent),
        child,
        child_tools,
        gate: gate.clone(),
        env: env.clone(),
    };
    let srv = serve(dir, Arc::new(factory), |_| {}).await;
    let created = srv
        .post(
            "/api/sessions",
            json!({"workspace": ws.display().to_string(), "approvalMode": "read-only"}),
        )
        .await
        .body;
    let id = created["session"]["id"].as_str().unwrap().to_owned();
    let mut events = srv.stream(&id, None).await;
    srv.post(
        &format!("/api/sessions/{id}/tasks"),
        json!({"input": [{"type": "text", "text": "delegate"}]}),
    )
    .await;
    events
        .until(|e| e.is_server() && e.kind() == "approval_request")
        .await;
    Delegated {
        srv,
        id,
        events,
        gate,
        env,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_subagent_streams_live_asks_past_its_launching_task_and_reports_to_an_idle_session(
) {
    // The child asks while the parent sits in `wait`; the parent's task then ends.
    let Delegated {
        srv,
        id,
        mut events,
        gate,
        ..
    } = delegate(
        "check the build",
        vec![text_turn("Started."), text_turn("The child reported.")],
        json!([
            named_call_turn("exec_command", "c_make", json!({"cmd": "make"})),
            partial_turn("Build is green."),
        ]),
        json!({"c_make": {"stream": [step(model(json!({"type": "tool_call_output", "role": "user", "output": "ok", "tool_call_id": "c_make", "stop_reason": "completed"})))]}}),
    )
    .await;
    let request = events.seen.last().unwrap().json();
    let child_id = request["origin"][0].as_str().unwrap().to_owned();
    assert_eq!(request["origin"], json!([child_id]));
    assert_eq!(request["toolCall"]["payload"]["tool_call_id"], "c_make");
    gate.notify_one();
    events.until(|e| e.is_state("idle")).await;
    let first_task = events.seen.len();

    // The request outlived that task; allowing it lets the child finish, which starts a task.
    let allow = srv
        .post(
            &format!("/api/sessions/{id}/approvals/c_make"),
            json!({"decision": "allow"}),
        )
        .await
        .status;
    assert_eq!(allow, 204);
    events.until(|e| e.says("The child reported.")).await;
    events.until(|e| e.is_state("idle")).await;

    let messages: Vec<Value> = events
        .seen
        .iter()
        .filter(|e| !e.is_server())
        .map(Ev::json)
        .collect();
    let from_child = |m: &Value| m["origin"] == json!([child_id]);
    // Live, while the parent was idle: the child's answer, its approval and its command.
    let after_first: Vec<Value> = events.seen[first_task..]
        .iter()
        .filter(|e| !e.is_server())
        .map(Ev::json)
        .collect();
    let live_answer = after_first
        .iter()
        .position(|m| from_child(m) && m["payload"]["text"] == "Build is green.")
        .expect("the child's answer was published live");
    assert!(after_first
        .iter()
        .any(|m| from_child(m) && m["payload"]["type"] == "approval_decision"));
    let notice = after_first
        .iter()
        .position(|m| {
            m["payload"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("[background_task_done]"))
        })
        .expect("the notice was published");
    assert!(live_answer < notice);
    assert_eq!(after_first[notice]["payload"]["sender"], "harness");
    let text = after_first[notice]["payload"]["text"].as_str().unwrap();
    assert!(
        text.contains("Background subagent finished: `check the build`"),
        "{text}"
    );
    assert!(text.ends_with("\n\nBuild is green."), "{text}");
    let omni: Vec<penguin_omni_protocol::OmniMessage> = messages
        .iter()
        .map(|m| serde_json::from_value(m.clone()).unwrap())
        .collect();
    let violations = penguin_omni_protocol::validator::StreamValidator::validate(&omni);
    assert!(violations.is_empty(), "{violations:?}");

    // The parent's trace: the pointer and the notice, nothing of the child's stream.
    let traces = files_under(&srv.data_root);
    let parent = traces
        .iter()
        .find(|p| p.to_string_lossy().contains(&id))
        .unwrap();
    let trace = penguin_trace_store::read_trace(parent, penguin_trace_store::ReadMode::Strict)
        .unwrap()
        .messages;
    assert!(trace.iter().all(|m| !m.has_origin()));
    assert!(trace.iter().any(|m| matches!(
        m.event(),
        Some(penguin_omni_protocol::EventPayload::Subagent { session_id }) if *session_id == child_id
    )));
    assert!(trace
        .iter()
        .any(|m| m.model().and_then(|p| p.content()) == Some(text)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_background_subagent_that_waits_for_approval_withdraws_its_request() {
    let Delegated {
        srv,
        id,
        mut events,
        gate,
        env,
    } = delegate(
        "deploy",
        vec![text_turn("Started.")],
        json!([
            named_call_turn("exec_command", "c_deploy", json!({"cmd": "make deploy"})),
            text_turn("Never said."),
        ]),
        json!({}),
    )
    .await;
    gate.notify_one();
    events.until(|e| e.is_state("idle")).await;

    // Killed the way the model's kill_subagent or the host would: through its background work.
    let parent_env = env
        .lock()
        .unwrap()
        .clone()
        .expect("the session was created");
    let work = parent_env
        .background()
        .expect("the subagent tools keep background work");
    let child = work
        .tasks()
        .into_iter()
        .find(|t| t.running)
        .expect("the child runs");
    assert!(work.kill(&child.id));

    // Its request leaves the pending list, which a connecting client is offered right after
    // the task state. A title change marks the end of that offer on the new stream.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut late = srv.stream(&id, None).await;
        late.until(|e| e.is_server() && e.kind() == "task_state")
            .await;
        let r = srv
            .http
            .patch(format!("{}/api/sessions/{id}", srv.base))
            .bearer_auth(TOKEN)
            .json(&json!({"title": "marker"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        late.until(|e| e.is_server() && e.kind() == "session_title")
            .await;
        let offered = late
            .seen
            .iter()
            .any(|e| e.is_server() && e.kind() == "approval_request");
        if !offered {
            break;
        }
        // The kill reaches the waiting call on the child's own task: poll, bounded.
        assert!(
            std::time::Instant::now() < deadline,
            "a new client is still offered the killed child's call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And nothing is left to answer.
    let allow = srv
        .post(
            &format!("/api/sessions/{id}/approvals/c_deploy"),
            json!({"decision": "allow"}),
        )
        .await
        .status;
    assert_eq!(allow, 404);
    assert!(work.tasks().iter().all(|t| !t.running));
}
