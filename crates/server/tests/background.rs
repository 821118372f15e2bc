//! Background work of a served session (`HostedSession::environment().background()`, its
//! notices and live messages): commands listed and killed over the API; work that settles
//! while the session is idle starts a task carrying its notice; a background subagent's
//! messages published live on the session's channel (never in its Trace), its approval
//! requests waiting for their human past the end of the task that launched it, and withdrawn
//! when the child is killed.
//!
//! The sessions are fakes (`support::fake`) whose background work the test drives; the
//! facade's real background commands and subagents behind the server are tested in
//! `crates/agent/tests/hosting/`.
#![cfg(feature = "testing")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use penguin_engine::BackgroundWork;
use penguin_omni_protocol::background::BackgroundKind;
use serde_json::{json, Value};
use support::script::{call_turn, partial_text, step, text, text_turn, usage};
use support::{FakeFactory, Sse, TestDir, TestServer};
use tokio::sync::Notify;

fn texts(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .filter_map(|m| m["payload"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// A server over `factory` (built for its workspace), and a new session of it in `mode`.
async fn start(
    mode: &str,
    factory: impl FnOnce(&TestDir) -> FakeFactory,
) -> (TestServer, Arc<FakeFactory>, String) {
    let dir = TestDir::new();
    let factory = Arc::new(factory(&dir));
    let srv = support::serve(dir, factory.clone(), |_| {}).await;
    let id = srv.create(mode).await;
    (srv, factory, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_work_that_settles_while_idle_starts_a_task_with_its_notice() {
    let build = "while [ ! -e go ]; do sleep .05; done; echo built";
    let llm = json!([
        text_turn("Started the build."),
        text_turn("The build finished.")
    ]);
    let (srv, factory, id) = start("allow-all", |dir| {
        FakeFactory::new(json!({ "llm": llm }), dir.workspace()).with_background()
    })
    .await;
    let work = factory.background(&id);
    work.start_command("proc-0a1b2c3d", build, 4242);
    assert_eq!(
        srv.task(&id, "build it in the background").await.status,
        202
    );
    srv.until_history(&id, |m| texts(m).iter().any(|t| t == "Started the build."))
        .await;

    // Settled while the session is idle: the server starts a task for the notice.
    assert!(work.settle("proc-0a1b2c3d", true, "exit code 0", "built"));
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
    let (srv, factory, id) = start("allow-all", |dir| {
        FakeFactory::new(json!({}), dir.workspace()).with_background()
    })
    .await;
    let work = factory.background(&id);
    work.start_command("proc-1", "sleep 300", 4242);
    let list = srv.get(&format!("/api/sessions/{id}/processes")).await.body;
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{list}");
    assert_eq!(procs[0]["command"], "sleep 300");
    assert_eq!(procs[0]["running"], true);
    assert_eq!(procs[0]["pid"], 4242);
    assert_eq!(procs[0]["ports"], json!([5173]));
    assert_eq!(procs[0]["startedAtMs"], 1_700_000_000_000u64);
    assert!(procs[0]["recent"].as_str().unwrap().contains("listening"));
    let pid = procs[0]["processId"].as_str().unwrap().to_owned();
    let kill = format!("/api/sessions/{id}/processes/{pid}/kill");
    assert_eq!(srv.post(&kill, Value::Null).await.status, 204);
    assert!(work.tasks().is_empty(), "killed through the session's work");
    let list = srv.get(&format!("/api/sessions/{id}/processes")).await.body;
    assert_eq!(list["processes"], json!([]));
    let r = srv.post(&kill, Value::Null).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "process_not_found");
    // DELETE does the same: a command (running or ended) leaves the list.
    work.start_command("proc-2", "make watch", 4343);
    let path = format!("/api/sessions/{id}/processes/proc-2");
    assert_eq!(srv.delete(&path).await.status, 204);
    assert!(work.tasks().is_empty());
    assert_eq!(srv.delete(&path).await.status, 404);
}

// ---------------------------------------------------------------------------------------------
// Background subagents

fn partial_turn(text: &str) -> Value {
    json!({"stream": [
        step(0, partial_text("start", "")),
        step(0, partial_text("delta", text)),
        step(0, partial_text("stop", "")),
        step(0, self::text(text)),
        step(0, usage(1, 10)),
    ]})
}

fn idle(ev: &support::Ev) -> bool {
    ev.is_state("idle")
}

/// A served read-only session whose parent launches `prompt` as a background subagent that
/// plays `child`, then sits in a `wait` the test releases through `gate`, then plays `then`.
/// Returned once the child asks for approval of its first call (the parent's own tools run
/// unasked).
struct Delegated {
    srv: TestServer,
    factory: Arc<FakeFactory>,
    id: String,
    events: Sse,
    gate: Arc<Notify>,
}

async fn delegate(prompt: &str, then: Vec<Value>, child: Value) -> Delegated {
    let gate = Arc::new(Notify::new());
    let mut parent = vec![
        call_turn(
            "run_subagent",
            "call_bg",
            json!({"prompt": prompt, "run_in_background": true}),
        ),
        call_turn("wait", "call_wait", json!({})),
    ];
    parent.extend(then);
    let (srv, factory, id) = start("read-only", |dir| {
        FakeFactory::new(json!({ "llm": parent }), dir.workspace())
            .with_subagents(child)
            .with_background()
            .with_gate(gate.clone())
    })
    .await;
    let mut events = srv.stream(&id, None).await;
    assert_eq!(srv.task(&id, "delegate").await.status, 202);
    events
        .until(|e| e.is_server() && e.kind() == "approval_request")
        .await;
    Delegated {
        srv,
        factory,
        id,
        events,
        gate,
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
        json!({
            "llm": [
                call_turn("exec_command", "c_make", json!({"cmd": "make"})),
                partial_turn("Build is green."),
            ],
            "tools": {"c_make": {"stream": [step(0, support::script::tool_output("c_make", "ok"))]}},
        }),
    )
    .await;
    let request = events.seen.last().unwrap().json();
    let child_id = request["origin"][0].as_str().unwrap().to_owned();
    assert_eq!(request["origin"], json!([child_id]));
    assert_eq!(request["toolCall"]["payload"]["tool_call_id"], "c_make");
    gate.notify_one();
    events.until(idle).await;
    let first_task = events.seen.len();

    // The request outlived that task; allowing it lets the child finish, which starts a task.
    assert_eq!(srv.decide(&id, "c_make", "allow").await.status, 204);
    events.until(|e| e.says("The child reported.")).await;
    events.until(idle).await;

    let messages: Vec<Value> = events
        .seen
        .iter()
        .filter(|e| !e.is_server())
        .map(|e| e.json())
        .collect();
    let from_child = |m: &&Value| m["origin"] == json!([child_id]);
    // Live, while the parent was idle: the child's answer, its approval and its command.
    let after_first: Vec<Value> = events.seen[first_task..]
        .iter()
        .filter(|e| !e.is_server())
        .map(|e| e.json())
        .collect();
    let after_first: Vec<&Value> = after_first.iter().collect();
    let live_answer = after_first
        .iter()
        .position(|m| from_child(m) && m["payload"]["text"] == "Build is green.")
        .expect("the child's answer was published live");
    assert!(after_first
        .iter()
        .any(|m| from_child(m) && m["payload"]["type"] == "approval_decision"));
    assert!(after_first
        .iter()
        .any(|m| from_child(m) && m["payload"]["type"] == "tool_call_output"));
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
    let traces = support::files_under(&srv.data_root);
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
        factory,
        id,
        mut events,
        gate,
    } = delegate(
        "deploy",
        vec![text_turn("Started.")],
        json!({"llm": [
            call_turn("exec_command", "c_deploy", json!({"cmd": "make deploy"})),
            text_turn("Never said."),
        ]}),
    )
    .await;
    gate.notify_one();
    events.until(idle).await;

    // Killed the way the model's kill_subagent or the host would: through its background work.
    let work = factory.background(&id);
    let child = work
        .tasks()
        .into_iter()
        .find(|t| t.running)
        .expect("the child runs");
    assert_eq!(child.kind, BackgroundKind::Subagent);
    assert!(work.kill(&child.id));

    // Its request leaves the pending list, which a connecting client is offered right after
    // the task state. A title change marks the end of that offer on the new stream.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut late = srv.stream(&id, None).await;
        late.until(|e| e.is_server() && e.kind() == "task_state")
            .await;
        let r = srv
            .patch(&format!("/api/sessions/{id}"), json!({"title": "marker"}))
            .await;
        assert!(r.status < 300, "{}", r.body);
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
    assert_eq!(srv.decide(&id, "c_deploy", "allow").await.status, 404);
    assert!(work.tasks().iter().all(|t| !t.running));
}
