//! Subagents with scripted models: a foreground run (origin-tagged child messages on the parent
//! stream, only the pointer in the parent trace, the child's answer as the tool output); a
//! background run (live messages to the host, its report as a harness notice at the parent's
//! next input assembly, approvals asked of the launching call's approver); kill; the cap on
//! kept children; a foreground child that outlives its window, polled and prompted again with
//! `input_subagent`.
//!
//! Mid-run points are reached by explicit synchronisation: tools that wait for the test
//! ("gates"), approvals the test answers, and the paused clock for the one window that must
//! end while the child waits.

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use penguin_agent::agent::{Agent, SessionModel};
use penguin_agent::session::Session;
use penguin_agent::subagent::{SubagentEnvironment, SubagentSpawner, MAX_CHILDREN};
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::{
    AllowAll, ApprovalError, Approver, CancellationToken, Environment, MessageSink, Permission,
    RunOptions, ToolCallRequest,
};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest, Step};
use penguin_llm_providers::LlmOutcome;
use penguin_omni_protocol::background::BackgroundKind;
use penguin_omni_protocol::validator::StreamValidator;
use penguin_omni_protocol::{
    build, ApprovalDecision, EventPayload, ModelPayload, OmniMessage, StopReason, StreamEventType,
    TextSender, TokenCounts, ToolDefinition,
};
use penguin_tools::{notes, BuiltinTools, ToolsConfig};
use penguin_trace_store::{read_trace, ReadMode};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};

/// Bounds every wait on something the test cannot schedule itself.
const WAIT: Duration = Duration::from_secs(20);

fn step(message: OmniMessage) -> Step {
    Step {
        delay: Duration::from_millis(2),
        message,
    }
}

fn usage() -> Step {
    step(build::token_usage(
        TokenCounts::new(0, 10, 2),
        TokenCounts::new(0, 10, 2),
    ))
}

fn text_turn(text: &str) -> ScriptedRequest {
    use StreamEventType::*;
    let ok = StopReason::Completed;
    ScriptedRequest {
        stream: vec![
            step(build::partial_text(Start, "", ok)),
            step(build::partial_text(Delta, &text[..3], ok)),
            step(build::partial_text(Delta, &text[3..], ok)),
            step(build::partial_text(Stop, "", ok)),
            step(build::assistant_text(text, ok)),
            usage(),
        ],
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    }
}

fn call_turn(name: &str, args: Value, id: &str) -> ScriptedRequest {
    ScriptedRequest {
        stream: vec![
            step(build::tool_call(
                name,
                args.to_string(),
                id,
                StopReason::Completed,
                None,
            )),
            usage(),
        ],
        outcome: LlmOutcome::completed(),
        end_delay: std::time::Duration::ZERO,
    }
}

/// A tool that says when it starts and ends when the test releases it (or its call is
/// interrupted).
#[derive(Clone)]
struct Gate {
    name: &'static str,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

impl Gate {
    fn new(name: &'static str) -> Gate {
        Gate {
            name,
            entered: Arc::new(Notify::new()),
            release: Arc::new(Notify::new()),
        }
    }
}

#[async_trait]
impl Environment for Gate {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let id = request.tool_call().tool_call_id.clone();
        self.entered.notify_one();
        let (output, status) = tokio::select! {
            () = self.release.notified() => ("released", StopReason::Completed),
            () = request.cancel.cancelled() => ("", StopReason::Aborted),
        };
        sink.emit(build::tool_call_output(output, id, status)).await;
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        vec![ToolDefinition {
            name: self.name.into(),
            description: "Waits for the test.".into(),
            parameters: None,
        }]
    }

    fn permission(&self, _name: &str) -> Permission {
        Permission::ReadWrite
    }
}

/// Children of `script`, with the tools `tools` gives each; counts the spawns and keeps a
/// weak handle on each child's environment (alive while its session is).
struct Kids {
    spawner: Arc<dyn SubagentSpawner>,
    spawned: Arc<AtomicUsize>,
    alive: Arc<Mutex<Vec<Weak<dyn Environment>>>>,
}

fn kids(
    agent: &Agent,
    ws: &Path,
    script: impl Fn() -> Vec<ScriptedRequest> + Send + Sync + 'static,
    tools: impl Fn() -> Arc<dyn Environment> + Send + Sync + 'static,
) -> Kids {
    let spawned = Arc::new(AtomicUsize::new(0));
    let alive: Arc<Mutex<Vec<Weak<dyn Environment>>>> = Arc::default();
    let (agent, ws, count, envs) = (
        agent.clone(),
        ws.to_path_buf(),
        spawned.clone(),
        alive.clone(),
    );
    let spawner: Arc<dyn SubagentSpawner> = Arc::new(move || {
        count.fetch_add(1, Ordering::SeqCst);
        let env = tools();
        envs.lock().unwrap().push(Arc::downgrade(&env));
        let model = SessionModel {
            llm: Box::new(ScriptedModel::new(script())),
            provider: "scripted".into(),
            model_id: "child".into(),
            context_window: None,
        };
        agent.create_session_with(model, &ws, env, None, Some("subagent".into()))
    });
    Kids {
        spawner,
        spawned,
        alive,
    }
}

impl Kids {
    /// Waits until no child session is left: each was killed and released.
    async fn all_released(&self) {
        let alive = self.alive.clone();
        tokio::time::timeout(WAIT, async move {
            while alive.lock().unwrap().iter().any(|w| w.strong_count() > 0) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("every child session is released");
    }
}

fn parent(
    agent: &Agent,
    ws: &Path,
    script: Vec<ScriptedRequest>,
    env: Arc<dyn Environment>,
) -> (Session, ScriptedModel) {
    let llm = ScriptedModel::new(script);
    let model = SessionModel {
        llm: Box::new(llm.clone()),
        provider: "scripted".into(),
        model_id: "parent".into(),
        context_window: None,
    };
    let session = agent
        .create_session_with(model, ws, env, None, None)
        .unwrap();
    (session, llm)
}

async fn run(session: &mut Session, text: &str, approver: Arc<dyn Approver>) -> Vec<OmniMessage> {
    let options = RunOptions::new(approver);
    let frames: Vec<_> = session
        .run(vec![build::user_text(text)], options)
        .unwrap()
        .collect()
        .await;
    session.writer().flush().unwrap();
    frames.iter().map(|f| f.message().clone()).collect()
}

/// What a tool emits.
#[derive(Default)]
struct Collect(Vec<OmniMessage>);

#[async_trait]
impl MessageSink for Collect {
    async fn emit(&mut self, msg: OmniMessage) {
        self.0.push(msg);
    }
}

/// Executes one call directly, as the engine would after approving it.
async fn call(
    env: &dyn Environment,
    name: &str,
    args: Value,
    id: &str,
    approver: Option<Arc<dyn Approver>>,
) -> Vec<OmniMessage> {
    call_with_text(env, name, &args.to_string(), id, approver).await
}

/// [`call`] with the arguments as the model wrote them, JSON or not.
async fn call_with_text(
    env: &dyn Environment,
    name: &str,
    arguments: &str,
    id: &str,
    approver: Option<Arc<dyn Approver>>,
) -> Vec<OmniMessage> {
    let request = ToolCallRequest {
        call: build::tool_call(name, arguments, id, StopReason::Completed, None),
        cancel: CancellationToken::new(),
        approver,
        thinking_level: None,
    };
    let mut sink = Collect::default();
    env.execute(request, &mut sink).await;
    sink.0
}

/// The complete output of call `id` (not a child's) and its status.
fn output(msgs: &[OmniMessage], id: &str) -> (String, StopReason) {
    msgs.iter()
        .find_map(|m| match m.model() {
            Some(ModelPayload::ToolCallOutput(o)) if !m.has_origin() && o.tool_call_id == id => {
                Some((
                    o.output.clone(),
                    o.stop_reason.unwrap_or(StopReason::Completed),
                ))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no output for {id}: {msgs:#?}"))
}

/// The `subagent_id` a note hands out.
fn subagent_id(note: &str) -> String {
    let at = note.find("subagent_id ").expect("a subagent_id") + "subagent_id ".len();
    note[at..]
        .split(|c: char| c == ';' || c == ']' || c.is_whitespace())
        .next()
        .unwrap()
        .to_owned()
}

fn origin_of(msgs: &[OmniMessage]) -> Vec<&OmniMessage> {
    msgs.iter().filter(|m| m.has_origin()).collect()
}

fn assert_valid<'a>(what: &str, msgs: impl IntoIterator<Item = &'a OmniMessage>) {
    let violations = StreamValidator::validate(msgs);
    assert!(violations.is_empty(), "{what}: {violations:?}");
}

/// Allows everything and remembers what it was asked.
#[derive(Default)]
struct Recording(Mutex<Vec<OmniMessage>>);

#[async_trait]
impl Approver for Recording {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        self.0.lock().unwrap().push(call.clone());
        Ok(ApprovalDecision::Allow)
    }
}

/// Hands each request to the test, which answers when it likes.
struct Manual(mpsc::UnboundedSender<(OmniMessage, oneshot::Sender<ApprovalDecision>)>);

#[async_trait]
impl Approver for Manual {
    async fn approve(&self, call: &OmniMessage) -> Result<ApprovalDecision, ApprovalError> {
        let (tx, rx) = oneshot::channel();
        self.0
            .send((call.clone(), tx))
            .map_err(|_| ApprovalError::Unavailable("the test is gone".into()))?;
        rx.await
            .map_err(|_| ApprovalError::Unavailable("unanswered".into()))
    }
}

fn trace_of(home: &Path, session_id: &str) -> Vec<OmniMessage> {
    let file = walk(home)
        .into_iter()
        .find(|p| p.to_string_lossy().contains(session_id))
        .unwrap_or_else(|| panic!("no trace for {session_id}"));
    read_trace(&file, ReadMode::Strict).unwrap().messages
}

#[tokio::test]
async fn subagent_messages_are_forwarded_with_origin_and_only_the_pointer_is_recorded() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();

    let child_agent = agent.clone();
    let child_ws = ws.path().to_path_buf();
    let spawner: Arc<dyn SubagentSpawner> = Arc::new(move || {
        let model = SessionModel {
            llm: Box::new(ScriptedModel::new(vec![text_turn("Hi from the child.")])),
            provider: "scripted".into(),
            model_id: "child".into(),
            context_window: None,
        };
        child_agent.create_session_with(
            model,
            &child_ws,
            Arc::new(ScriptedEnvironment::default()),
            None,
            Some("subagent".into()),
        )
    });
    let env: Arc<dyn Environment> = Arc::new(SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        spawner,
    ));
    assert!(env.tools().iter().any(|t| t.name == "run_subagent"));

    let call = build::tool_call(
        "run_subagent",
        r#"{"prompt":"say hi"}"#,
        "call_sub",
        StopReason::Completed,
        None,
    );
    let parent_model = ScriptedModel::new(vec![
        ScriptedRequest {
            stream: vec![step(call), usage()],
            outcome: LlmOutcome::completed(),
            end_delay: std::time::Duration::ZERO,
        },
        text_turn("The child said hi."),
    ]);
    let model = SessionModel {
        llm: Box::new(parent_model.clone()),
        provider: "scripted".into(),
        model_id: "parent".into(),
        context_window: None,
    };
    let mut session = agent
        .create_session_with(model, ws.path(), env, None, None)
        .unwrap();
    let parent_id = session.id().to_owned();
    let options = RunOptions::new(Arc::new(AllowAll));
    let frames: Vec<_> = session
        .run(vec![build::user_text("delegate")], options)
        .unwrap()
        .collect()
        .await;
    session.writer().flush().unwrap();
    let msgs: Vec<&OmniMessage> = frames.iter().map(|f| f.message()).collect();

    let violations = StreamValidator::validate(msgs.iter().copied());
    assert!(violations.is_empty(), "{violations:?}");

    // The child's stream, tagged with its id: session_meta first, then its prompt.
    let child: Vec<&&OmniMessage> = msgs.iter().filter(|m| m.has_origin()).collect();
    let child_id = child[0]
        .session_meta()
        .expect("the child's first message is its session_meta")
        .session_id
        .clone();
    assert_eq!(child[0].origin.as_deref(), Some(&[child_id.clone()][..]));
    assert_eq!(
        child[0].session_meta().unwrap().source.as_deref(),
        Some("subagent")
    );
    assert_eq!(child[1].model().and_then(|p| p.content()), Some("say hi"));
    assert!(child
        .iter()
        .all(|m| m.origin.as_deref() == Some(&[child_id.clone()][..])));
    assert!(child
        .iter()
        .any(|m| matches!(m.event(), Some(EventPayload::RequestEnd { .. }))));

    // The tool output is the child's answer, and the parent model got it.
    let output = msgs.iter().find_map(|m| match m.model() {
        Some(ModelPayload::ToolCallOutput(o)) if !m.has_origin() => Some(o.output.clone()),
        _ => None,
    });
    assert_eq!(output.as_deref(), Some("Hi from the child."));
    assert_eq!(
        parent_model.requests()[1][0].model().unwrap().content(),
        Some("Hi from the child.")
    );

    // Parent trace: the pointer, nothing with an origin. Child trace: its own session.
    let files: Vec<_> = walk(home.path());
    let parent_file = files
        .iter()
        .find(|p| p.to_string_lossy().contains(&parent_id))
        .unwrap();
    let child_file = files
        .iter()
        .find(|p| p.to_string_lossy().contains(&child_id))
        .unwrap();
    let parent_trace = read_trace(parent_file, ReadMode::Strict).unwrap().messages;
    assert!(parent_trace.iter().all(|m| !m.has_origin()));
    let pointers: Vec<_> = parent_trace
        .iter()
        .filter_map(|m| match m.event() {
            Some(EventPayload::Subagent { session_id }) => Some(session_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(pointers, std::slice::from_ref(&child_id));
    let child_trace = read_trace(child_file, ReadMode::Strict).unwrap().messages;
    assert_eq!(child_trace[0].session_meta().unwrap().session_id, child_id);
    assert!(child_trace
        .iter()
        .any(|m| m.model().and_then(|p| p.content()) == Some("Hi from the child.")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_subagent_streams_live_to_the_host_and_reports_at_the_next_assembly() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();

    // The child finishes only once the parent sits in its `wait` tool, which ends only once
    // the child's report was queued: so the report is delivered at the assembly after it.
    let hold = Gate::new("hold");
    let mut wait = Gate::new("wait");
    wait.entered = hold.release.clone();
    let noticed = wait.release.clone();
    let child_gate = hold.clone();
    let kids = kids(
        &agent,
        ws.path(),
        || {
            vec![
                call_turn("hold", json!({}), "c_hold"),
                text_turn("Child answer."),
            ]
        },
        move || Arc::new(child_gate.clone()),
    );
    let env = Arc::new(SubagentEnvironment::new(
        Arc::new(wait),
        kids.spawner.clone(),
    ));
    let (mut session, llm) = parent(
        &agent,
        ws.path(),
        vec![
            call_turn(
                "run_subagent",
                json!({"prompt": "summarize the logs", "run_in_background": true}),
                "call_bg",
            ),
            call_turn("wait", json!({}), "call_wait"),
            text_turn("Noted."),
        ],
        env,
    );
    let live: Arc<Mutex<Vec<OmniMessage>>> = Arc::default();
    let sink = live.clone();
    session.on_background_message(Arc::new(move |m| sink.lock().unwrap().push(m)));
    session.on_notice(Arc::new(move || noticed.notify_one()));
    let approver = Arc::new(Recording::default());
    let msgs = run(&mut session, "delegate", approver.clone()).await;
    assert_valid("parent stream", &msgs);

    let (note, status) = output(&msgs, "call_bg");
    assert_eq!(status, StopReason::Completed);
    let forwarded = origin_of(&msgs);
    let child_id = forwarded[0]
        .session_meta()
        .expect("meta first")
        .session_id
        .clone();
    let id = subagent_id(&note);
    assert_eq!(id, format!("subagent-{}", &child_id[child_id.len() - 8..]));
    assert_eq!(
        note,
        format!("[subagent running in background with subagent_id {id}; its completion will arrive as a user message — no need to poll. Use input_subagent to interact or kill_subagent to stop it]")
    );
    // Through the parent's stream: only the meta and the prompt. The rest went live.
    assert_eq!(forwarded.len(), 2, "{forwarded:#?}");
    assert_eq!(
        forwarded[1].model().and_then(|p| p.content()),
        Some("summarize the logs")
    );
    let live = live.lock().unwrap().clone();
    assert!(live
        .iter()
        .all(|m| m.origin.as_deref() == Some(std::slice::from_ref(&child_id))));
    assert!(live
        .iter()
        .any(|m| matches!(m.model(), Some(ModelPayload::Text(t)) if t.text == "Child answer.")));
    assert!(!msgs
        .iter()
        .any(|m| matches!(m.model(), Some(ModelPayload::Text(t)) if t.text == "Child answer.")));
    assert_valid("child stream", forwarded.iter().copied().chain(&live));

    // The child's call went to the launching call's approver, tagged with the child's id,
    // after that call had returned.
    let asked = approver.0.lock().unwrap().clone();
    let child_call = asked
        .iter()
        .find(|c| c.has_origin())
        .expect("the child asked");
    assert_eq!(
        child_call.origin.as_deref(),
        Some(std::slice::from_ref(&child_id))
    );
    assert_eq!(child_call.tool_call_id(), Some("c_hold"));

    // The report: a harness notice, delivered before the third request.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let notice = requests[2]
        .iter()
        .find_map(|m| match m.model() {
            Some(ModelPayload::Text(t)) if t.text.starts_with("[background_task_done]") => {
                Some(t.clone())
            }
            _ => None,
        })
        .expect("the third request carries the notice");
    assert_eq!(notice.sender, Some(TextSender::Harness));
    assert!(notice.text.contains(&format!(
        "Background subagent finished: `summarize the logs` (subagent_id {id})\n\nChild answer."
    )));
    assert!(!requests[1].iter().any(|m| m
        .model()
        .and_then(|p| p.content())
        .is_some_and(|t| t.starts_with("[background_task_done]"))));

    // The parent trace: the pointer and the notice, nothing of the child's own stream.
    let trace = trace_of(home.path(), session.id());
    assert!(trace.iter().all(|m| !m.has_origin()));
    assert!(trace.iter().any(|m| matches!(m.event(), Some(EventPayload::Subagent { session_id }) if *session_id == child_id)));
    assert!(trace
        .iter()
        .any(|m| m.model().and_then(|p| p.content()) == Some(notice.text.as_str())));

    // Kept, idle, for a follow-up.
    let tasks = session.environment().background().unwrap().tasks();
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        (tasks[0].kind, tasks[0].running),
        (BackgroundKind::Subagent, false)
    );
    assert_eq!(tasks[0].id, id);
    assert_eq!(kids.spawned.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_subagent_aborts_the_child_and_no_report_comes() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    let hold = Gate::new("hold");
    let entered = hold.entered.clone();
    let kids = kids(
        &agent,
        ws.path(),
        || {
            vec![
                call_turn("hold", json!({}), "c_hold"),
                text_turn("Never said."),
            ]
        },
        move || Arc::new(hold.clone()),
    );
    let env = Arc::new(SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        kids.spawner.clone(),
    ));
    let (mut session, _llm) = parent(
        &agent,
        ws.path(),
        vec![
            call_turn(
                "run_subagent",
                json!({"prompt": "watch the build", "run_in_background": true}),
                "call_bg",
            ),
            text_turn("Watching."),
        ],
        env,
    );
    let (tx, mut live) = mpsc::unbounded_channel();
    session.on_background_message(Arc::new(move |m| {
        let _ = tx.send(m);
    }));
    let notices = Arc::new(AtomicUsize::new(0));
    let heard = notices.clone();
    session.on_notice(Arc::new(move || {
        heard.fetch_add(1, Ordering::SeqCst);
    }));
    run(&mut session, "watch it", Arc::new(AllowAll)).await;
    tokio::time::timeout(WAIT, entered.notified())
        .await
        .expect("the child reached its tool");

    let background = session.environment().background().unwrap();
    let tasks = background.tasks();
    assert_eq!(tasks.len(), 1);
    assert!(tasks[0].running);
    assert!(kids.alive.lock().unwrap()[0].strong_count() > 0);
    let id = tasks[0].id.clone();
    let out = call(
        session.environment().as_ref(),
        "kill_subagent",
        json!({"subagent_id": id}),
        "call_kill",
        None,
    )
    .await;
    assert_eq!(
        output(&out, "call_kill"),
        (
            format!(
                "[subagent {id} aborted and removed; its own trace keeps the work done so far]"
            ),
            StopReason::Completed
        )
    );
    assert!(background.tasks().is_empty());

    // The child's run was aborted (its abort event still streams live)...
    let abort = tokio::time::timeout(WAIT, async {
        while let Some(m) = live.recv().await {
            if matches!(m.event(), Some(EventPayload::Abort { .. })) {
                return m;
            }
        }
        panic!("the live stream ended without an abort");
    })
    .await
    .expect("the child was aborted");
    assert_eq!(abort.origin.as_ref().map(Vec::len), Some(1));
    // ...and its session released, after which a report would have been sent: none was.
    kids.all_released().await;
    assert_eq!(notices.load(Ordering::SeqCst), 0);
    assert_eq!(session.engine().pending_notices(), 0);
    let out = call(
        session.environment().as_ref(),
        "kill_subagent",
        json!({"subagent_id": id}),
        "call_again",
        None,
    )
    .await;
    assert_eq!(
        output(&out, "call_again"),
        (
            format!("[kill_subagent error: unknown subagent_id {id} (the session may have finished and been cleared)]"),
            StopReason::Failed
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_children_die_with_their_parent_session() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    let hold = Gate::new("hold");
    let entered = hold.entered.clone();
    let kids = kids(
        &agent,
        ws.path(),
        || {
            vec![
                call_turn("hold", json!({}), "c_hold"),
                text_turn("Never said."),
            ]
        },
        move || Arc::new(hold.clone()),
    );
    let env = Arc::new(SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        kids.spawner.clone(),
    ));
    let (mut session, _llm) = parent(
        &agent,
        ws.path(),
        vec![
            call_turn(
                "run_subagent",
                json!({"prompt": "serve the docs", "run_in_background": true}),
                "call_bg",
            ),
            text_turn("Serving."),
        ],
        env,
    );
    run(&mut session, "serve", Arc::new(AllowAll)).await;
    tokio::time::timeout(WAIT, entered.notified())
        .await
        .expect("the child reached its tool");
    assert!(kids.alive.lock().unwrap()[0].strong_count() > 0);
    drop(session);
    kids.all_released().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_eight_children_are_kept_and_a_running_one_is_never_evicted() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    let kids = kids(
        &agent,
        ws.path(),
        || {
            vec![
                call_turn("hold", json!({}), "c_hold"),
                text_turn("Never said."),
            ]
        },
        || Arc::new(Gate::new("hold")),
    );
    let env: Arc<dyn Environment> = Arc::new(SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        kids.spawner.clone(),
    ));
    let launch = |n: usize| {
        let env = env.clone();
        async move {
            let id = format!("call_{n}");
            let msgs = call(
                env.as_ref(),
                "run_subagent",
                json!({"prompt": format!("task {n}"), "run_in_background": true}),
                &id,
                Some(Arc::new(AllowAll)),
            )
            .await;
            output(&msgs, &id)
        }
    };
    for n in 0..MAX_CHILDREN {
        assert_eq!(launch(n).await.1, StopReason::Completed);
    }
    assert_eq!(
        launch(8).await,
        (
            "[run_subagent error: too many background subagents; poll or finish existing ones first]".to_owned(),
            StopReason::Failed
        )
    );
    assert_eq!(kids.spawned.load(Ordering::SeqCst), MAX_CHILDREN);
    let background = env.background().unwrap();
    let tasks = background.tasks();
    assert_eq!(tasks.len(), MAX_CHILDREN);
    assert!(tasks
        .iter()
        .all(|t| t.running && t.kind == BackgroundKind::Subagent));
    assert_eq!(tasks[0].label, "task 0");

    // A kill frees a slot.
    assert!(background.kill(&tasks[0].id));
    assert!(!background.kill(&tasks[0].id));
    assert_eq!(launch(9).await.1, StopReason::Completed);
    assert_eq!(background.tasks().len(), MAX_CHILDREN);

    // The environment going away (its session ended) ends every child.
    drop(background);
    drop(env);
    kids.all_released().await;
}

#[tokio::test]
async fn a_childs_long_answer_is_capped_and_archived_like_any_tool_output() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    let answer = "The answer is forty-two, said at length.";
    let kids = kids(
        &agent,
        ws.path(),
        move || vec![text_turn(answer)],
        || Arc::new(ScriptedEnvironment::default()),
    );
    let config = ToolsConfig {
        max_output_chars: 10,
        ..ToolsConfig::default()
    };
    let limits = BuiltinTools::new(ws.path(), config).unwrap().limits();
    let env = SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        kids.spawner.clone(),
    )
    .with_limits(limits);
    let msgs = call(
        &env,
        "run_subagent",
        json!({"prompt": "answer"}),
        "c1",
        Some(Arc::new(AllowAll)),
    )
    .await;
    let announced = [
        build::tool_call("run_subagent", "{}", "c1", StopReason::Completed, None),
        build::approval_decision(ApprovalDecision::Allow, "c1"),
    ];
    assert_valid("capped", announced.iter().chain(&msgs));
    let (out, status) = output(&msgs, "c1");
    assert_eq!(status, StopReason::Completed);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..2],
        [&answer[..10], "[output truncated: exceeded 10 chars]"]
    );
    let archived = lines[2]
        .strip_prefix("[output archived: ")
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join(archived)).unwrap(),
        answer
    );
    assert_eq!(lines.len(), 3, "{out}");
    // The child's own messages are passed on whole, not cut.
    assert!(origin_of(&msgs)
        .iter()
        .any(|m| m.model().and_then(|p| p.content()) == Some(answer)));
}

#[tokio::test]
async fn subagent_calls_whose_arguments_do_not_parse_are_explained_as_any_tools_are() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    let kids = kids(&agent, ws.path(), Vec::new, || {
        Arc::new(ScriptedEnvironment::default())
    });
    let env = SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        kids.spawner.clone(),
    );
    for name in ["run_subagent", "input_subagent", "kill_subagent"] {
        for arguments in ["", "  ", r#"{"prompt": "half"#] {
            let msgs = call_with_text(&env, name, arguments, "c1", Some(Arc::new(AllowAll))).await;
            let announced = [
                build::tool_call(name, arguments, "c1", StopReason::Completed, None),
                build::approval_decision(ApprovalDecision::Allow, "c1"),
            ];
            assert_valid(name, announced.iter().chain(&msgs));
            let expected = notes::arguments(name, arguments).unwrap_err();
            assert!(expected.starts_with(&format!("Tool call \"{name}\" failed: the arguments")));
            assert_eq!(
                output(&msgs, "c1"),
                (expected, StopReason::Failed),
                "{name} {arguments:?}"
            );
        }
    }
    assert_eq!(kids.spawned.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_foreground_subagent_that_outlives_its_window_is_polled_and_prompted_again() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::at(home.path().to_path_buf()).unwrap();
    let ok = StopReason::Completed;
    let kids = kids(
        &agent,
        ws.path(),
        move || {
            use StreamEventType::*;
            vec![
                ScriptedRequest {
                    stream: vec![
                        step(build::partial_text(Start, "", ok)),
                        step(build::partial_text(Delta, "Looking.", ok)),
                        step(build::partial_text(Stop, "", ok)),
                        step(build::assistant_text("Looking.", ok)),
                        step(build::tool_call("read_logs", "{}", "c_read", ok, None)),
                        usage(),
                    ],
                    outcome: LlmOutcome::completed(),
                    end_delay: std::time::Duration::ZERO,
                },
                text_turn("Done reading."),
                text_turn("Tests pass."),
            ]
        },
        move || {
            let script = vec![step(build::tool_call_output("log lines", "c_read", ok))];
            Arc::new(ScriptedEnvironment::new(HashMap::from([(
                "c_read".to_owned(),
                script,
            )])))
        },
    );
    let env: Arc<dyn Environment> = Arc::new(SubagentEnvironment::new(
        Arc::new(ScriptedEnvironment::default()),
        kids.spawner.clone(),
    ));
    let (tx, mut asked) = mpsc::unbounded_channel();
    let approver: Arc<dyn Approver> = Arc::new(Manual(tx));
    let mut child_stream = Vec::new();

    // The child asks to read the logs and nobody answers within the 250 ms window: it is kept.
    let first = call(
        env.as_ref(),
        "run_subagent",
        json!({"prompt": "read the logs", "yield_time_ms": 250}),
        "call_fg",
        Some(approver.clone()),
    )
    .await;
    let (text, status) = output(&first, "call_fg");
    let id = subagent_id(&text);
    assert_eq!(
        (text.as_str(), status),
        (
            format!("Looking.\n[subagent running with subagent_id {id}; use input_subagent to poll for progress or send a follow-up prompt] [subagent is waiting for approval of 1 tool call(s); poll to review]").as_str(),
            StopReason::Completed
        )
    );
    let (request, answer) = asked.try_recv().expect("the window's approver was asked");
    let child_id = first[1].session_meta().unwrap().session_id.clone();
    assert_eq!(
        request.origin.as_deref(),
        Some(std::slice::from_ref(&child_id))
    );
    assert_eq!(request.tool_call_id(), Some("c_read"));
    child_stream.extend(origin_of(&first).into_iter().cloned());

    // From here on the child runs to its ends: real time, bounded only by the long windows.
    tokio::time::resume();
    // A late answer still counts; the poll collects the rest of the round.
    answer.send(ApprovalDecision::Allow).unwrap();
    let poll = call(
        env.as_ref(),
        "input_subagent",
        json!({"subagent_id": id, "yield_time_ms": 60000}),
        "call_poll",
        Some(approver.clone()),
    )
    .await;
    let (text, status) = output(&poll, "call_poll");
    assert_eq!(
        (text.as_str(), status),
        (
            format!("\n\nDone reading.\n[subagent idle with subagent_id {id}; send a follow-up prompt to continue]").as_str(),
            StopReason::Completed
        )
    );
    assert!(origin_of(&poll).iter().any(
        |m| matches!(m.model(), Some(ModelPayload::ToolCallOutput(o)) if o.output == "log lines")
    ));
    child_stream.extend(origin_of(&poll).into_iter().cloned());

    // A follow-up prompt: a second round of the same child session.
    let again = call(
        env.as_ref(),
        "input_subagent",
        json!({"subagent_id": id, "prompt": "run the tests", "yield_time_ms": 60000}),
        "call_again",
        Some(approver.clone()),
    )
    .await;
    let (text, status) = output(&again, "call_again");
    assert_eq!(
        (text.as_str(), status),
        (
            format!("Tests pass.\n[subagent idle with subagent_id {id}; send a follow-up prompt to continue]").as_str(),
            StopReason::Completed
        )
    );
    let prompt = origin_of(&again)[0].model().cloned();
    assert!(
        matches!(prompt, Some(ModelPayload::Text(t)) if t.text == "run the tests" && t.sender == Some(TextSender::ParentAgent))
    );
    child_stream.extend(origin_of(&again).into_iter().cloned());
    assert_valid("child stream across calls", &child_stream);
    assert!(asked.try_recv().is_err(), "nothing else was asked");

    // An idle child is removed by a kill; then it is gone.
    let kill = call(
        env.as_ref(),
        "kill_subagent",
        json!({"subagent_id": id}),
        "call_kill",
        None,
    )
    .await;
    assert_eq!(
        output(&kill, "call_kill"),
        (
            format!("[subagent {id} was idle; session removed]"),
            StopReason::Completed
        )
    );
    let gone = call(
        env.as_ref(),
        "input_subagent",
        json!({"subagent_id": id}),
        "call_gone",
        None,
    )
    .await;
    assert_eq!(output(&gone, "call_gone").1, StopReason::Failed);
    kids.all_released().await;

    // The child's own trace holds both rounds.
    let trace = trace_of(home.path(), &child_id);
    for said in ["Looking.", "Done reading.", "Tests pass.", "run the tests"] {
        assert!(
            trace
                .iter()
                .any(|m| m.model().and_then(|p| p.content()) == Some(said)),
            "{said}"
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
