//! A fake [`SessionFactory`] and [`HostedSession`]: the real engine with a scripted model and
//! scripted tools, its Trace written by the trace store's writer. Nothing of the `penguin`
//! facade: what a hosted session owes the server (`session_meta` written first, a first run
//! that yields `tool_list_ready` first, resume from the trace, background work routed to the
//! host) is done here in a few lines, and the rest is the engine's.
//!
//! Knobs give sessions what some tests need: a sandbox whose commands can be granted a run
//! outside it, a `wait` tool the test releases, subagents (`run_subagent`, in the foreground or
//! in the background, children being fake sessions of their own), background work the test
//! drives ([`FakeBackground`]), and compaction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use futures::stream::{self, BoxStream};
use futures::StreamExt;
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::{
    Approver, BackgroundForward, BackgroundListener, BackgroundTask, BackgroundWork,
    CancellationToken, Compactability, Counters, Engine, EngineBusy, EngineConfig, Environment,
    InitialState, MessageSink, Permission, RunOptions, ToolCallRequest,
};
use penguin_llm_providers::scripted::ScriptedModel;
use penguin_omni_protocol::background::{report_label, BackgroundKind, BackgroundTaskDone};
use penguin_omni_protocol::{
    build, ApprovalDecision, ContextWindow, Frame, ModelPayload, OmniMessage, Role, SessionMeta,
    StopReason, StreamEventType, TextSender, ToolCall, ToolDefinition,
};
use penguin_server::api::{SandboxInfo, SandboxSettings};
use penguin_server::ModelsError;
use penguin_server::{CreateSession, FactoryError, HostedSession, LoadSession, SessionFactory};
use penguin_trace_store::{new_session_id, resume_session, Durability, TraceLocation, Writer};
use serde_json::Value;
use tokio::sync::Notify;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Scripts

/// What a session plays: the `llm`, `tools` and `engine` parts of a scenario file (other keys,
/// `description` or `runs`, are ignored).
#[derive(Clone, Debug)]
pub struct Script {
    llm: Value,
    tools: Value,
    engine: EngineConfig,
    /// `hook_approvals`: what a session's `pre_tool_use` hooks answer, in the scenario
    /// format's approvals (`{"by_id": {ID: {"decision": …, "hook": …, "reason": …}}}`);
    /// they decide in place of the server's approver.
    hook_approvals: Option<Value>,
}

impl Script {
    /// The scripted hooks' approver, when the scenario has `hook_approvals`.
    fn hook_approver(&self) -> Option<Arc<dyn Approver>> {
        let approvals = self.hook_approvals.as_ref()?;
        let approver = penguin_engine::scripted::ScriptedApprover::from_json(approvals)
            .expect("hook_approvals");
        Some(Arc::new(approver))
    }

    /// Reads `scenario`; panics on anything it cannot play.
    pub fn new(scenario: &Value) -> Script {
        let llm = scenario.get("llm").cloned().unwrap_or(Value::Array(vec![]));
        let tools = scenario
            .get("tools")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        let mut engine = EngineConfig::default();
        let ms = |v: &Value| std::time::Duration::from_millis(v.as_u64().expect("milliseconds"));
        for (key, v) in scenario
            .get("engine")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            match key.as_str() {
                "max_turns" => engine.max_turns = v.as_i64().expect("max_turns"),
                "max_reconnects" => engine.max_reconnects = v.as_u64().expect("a count") as u32,
                "reconnect_backoff_ms" => engine.reconnect_backoff = ms(v),
                "reconnect_backoff_max_ms" => engine.reconnect_backoff_max = ms(v),
                other => panic!("engine.{other}: not played by the fake"),
            }
        }
        let hook_approvals = scenario.get("hook_approvals").cloned();
        let script = Script {
            llm,
            tools,
            engine,
            hook_approvals,
        };
        // Parsed once here, so a bad script fails the test where it is made.
        script.model();
        script.tools();
        script
    }

    /// A fresh model: clones of a `ScriptedModel` share one queue of requests, so each
    /// session (and each load of it) gets its own.
    fn model(&self) -> ScriptedModel {
        ScriptedModel::from_json(&self.llm).expect("the llm script parses")
    }

    fn tools(&self) -> ScriptedEnvironment {
        ScriptedEnvironment::from_json(&self.tools).expect("the tools script parses")
    }
}

// ---------------------------------------------------------------------------------------------
// The factory

fn fake_model(
    name: &str,
    provider: &str,
    id: &str,
    url: &str,
    default: bool,
) -> penguin_server::api::ModelChoice {
    let demo = provider == "demo";
    penguin_server::api::ModelChoice {
        name: name.into(),
        provider: provider.into(),
        model_id: id.into(),
        default,
        base_url: (!demo).then(|| url.into()),
        api_key_env: None,
        key_set: None,
        configured: !demo,
    }
}

/// Calls granted a run outside the sandbox: (tool_call_id, arguments).
pub type Grants = Arc<Mutex<Vec<(String, String)>>>;

/// Builds [`FakeSession`]s playing one script, each with its own copy of it.
pub struct FakeFactory {
    script: Script,
    workspace: PathBuf,
    sandbox: Option<Grants>,
    gate: Option<Arc<Notify>>,
    child: Option<Script>,
    background: bool,
    compaction: Option<Value>,
    // What `skills` and `memory` answer (`with_knowledge`).
    knowledge: (Vec<Value>, Vec<Value>),
    /// The sandbox and MCP servers of every load request, in order.
    pub loads: Mutex<Vec<(Option<SandboxSettings>, Vec<Value>)>>,
    work: Mutex<HashMap<String, Weak<FakeBackground>>>,
    // The models `/api/models` edits (`with_models`); `None`: the trait's defaults.
    models: Option<Mutex<Vec<penguin_server::api::ModelChoice>>>,
}

impl std::fmt::Debug for FakeFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeFactory")
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl FakeFactory {
    /// Sessions playing `scenario` (see [`Script::new`]), in `workspace` unless a request
    /// names another. Provider `scripted`, model `scenario` (or the request's).
    pub fn new(scenario: Value, workspace: impl Into<PathBuf>) -> FakeFactory {
        FakeFactory {
            script: Script::new(&scenario),
            workspace: workspace.into(),
            sandbox: None,
            gate: None,
            child: None,
            background: false,
            compaction: None,
            knowledge: (Vec::new(), Vec::new()),
            loads: Mutex::default(),
            work: Mutex::default(),
            models: None,
        }
    }

    /// Models the API may add, change, remove and test, kept in memory as a config file
    /// would keep them: `(name, provider, model id, base URL)`, the first the default. A
    /// model at `127.0.0.1:9` fails its test (nothing listens there), as does its endpoint's
    /// list; the others answer.
    pub fn with_models(mut self, models: &[(&str, &str, &str, &str)]) -> FakeFactory {
        let list = models
            .iter()
            .enumerate()
            .map(|(i, (name, provider, id, url))| fake_model(name, provider, id, url, i == 0))
            .collect();
        self.models = Some(Mutex::new(list));
        self
    }

    /// Sessions whose commands run in a sandbox (a request's `sandbox` sets its mode and
    /// network; `off` confines nothing): `exec_command` calls may be granted a run outside it,
    /// and each grant is noted in `grants`.
    pub fn with_sandbox(mut self, grants: Grants) -> FakeFactory {
        self.sandbox = Some(grants);
        self
    }

    /// A `wait` tool (it only reads) that ends when `gate` is notified.
    pub fn with_gate(mut self, gate: Arc<Notify>) -> FakeFactory {
        self.gate = Some(gate);
        self
    }

    /// A `run_subagent` tool (it only reads) whose children play `child`, in the foreground
    /// (their messages forwarded on the call's stream, their answer its output) or with
    /// `run_in_background` (see [`FakeFactory::with_background`]).
    pub fn with_subagents(mut self, child: Value) -> FakeFactory {
        self.child = Some(Script::new(&child));
        self
    }

    /// Sessions with background work ([`FakeFactory::background`]): background children of
    /// `run_subagent`, and whatever the test starts itself.
    pub fn with_background(mut self) -> FakeFactory {
        self.background = true;
        self
    }

    /// Skills and memory scopes the factory reports, as the facade's would.
    pub fn with_knowledge(mut self, skills: Vec<Value>, memory: Vec<Value>) -> FakeFactory {
        self.knowledge = (skills, memory);
        self
    }

    /// Sessions that compact: the summary is the script's next request, and each new context's
    /// model plays `next`.
    pub fn with_compaction(mut self, next: Value) -> FakeFactory {
        ScriptedModel::from_json(&next).expect("the next context's script parses");
        self.compaction = Some(next);
        self
    }

    /// The background work of session `id`, while it is loaded.
    pub fn background(&self, id: &str) -> Arc<FakeBackground> {
        lock(&self.work)
            .get(id)
            .and_then(Weak::upgrade)
            .unwrap_or_else(|| panic!("session {id} has no background work loaded"))
    }

    fn tools(
        &self,
        location: &TraceLocation,
        durability: Durability,
        workspace: &Path,
        sandbox: Option<&SandboxInfo>,
    ) -> Arc<FakeTools> {
        let sandboxed = sandbox.is_some_and(|s| s.mode != "off");
        Arc::new(FakeTools {
            inner: self.script.tools(),
            unsandboxed: match sandboxed {
                true => vec!["exec_command".into()],
                false => Vec::new(),
            },
            grants: self.sandbox.clone(),
            gate: self.gate.clone(),
            background: self.background.then(Arc::default),
            children: self.child.clone().map(|script| Children {
                script,
                location: location.clone(),
                durability,
                workspace: workspace.to_path_buf(),
            }),
        })
    }

    /// The sandbox a session reports, for a request's `sandbox`.
    fn sandbox(
        &self,
        asked: Option<&SandboxSettings>,
    ) -> Result<Option<SandboxInfo>, FactoryError> {
        if self.sandbox.is_none() {
            return Ok(None);
        }
        let requested = asked.and_then(|s| s.mode.clone());
        let mode = requested.clone().unwrap_or("workspace-write".into());
        if !["workspace-write", "read-only", "off"].contains(&mode.as_str()) {
            return Err(FactoryError::invalid_request(
                "sandbox.mode",
                format!("{mode:?} is not workspace-write, read-only or off"),
            ));
        }
        let network = asked.and_then(|s| s.network).unwrap_or(false);
        let unsandboxed_tools = match mode.as_str() {
            "off" => Vec::new(),
            _ => vec!["exec_command".to_owned()],
        };
        Ok(Some(SandboxInfo {
            summary: format!(
                "sandbox: {mode}, network {} (fake)",
                if network { "on" } else { "off" }
            ),
            mode,
            requested,
            network,
            allow_ports: Vec::new(),
            landlock_abi: None,
            not_enforced: Vec::new(),
            unsandboxed_tools,
        }))
    }

    fn assemble(&self, session: FakeSession, tools: Arc<FakeTools>) -> Box<dyn HostedSession> {
        if let Some(work) = &tools.background {
            lock(&self.work).insert(session.id.clone(), Arc::downgrade(work));
        }
        if let Some(next) = self.compaction.clone() {
            session.engine.enable_compaction(Arc::new(move |_| {
                Box::new(ScriptedModel::from_json(&next).expect("checked"))
            }));
        }
        Box::new(session)
    }

    fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            compaction: self
                .compaction
                .as_ref()
                .map(|_| penguin_engine::CompactionConfig::default()),
            ..self.script.engine.clone()
        }
    }
}

/// `mcpServers` entries: objects with a `name` and a `command` (none is connected).
fn check_mcp_servers(raw: &[Value]) -> Result<(), FactoryError> {
    for (i, entry) in raw.iter().enumerate() {
        let has = |key: &str| entry.get(key).is_some_and(Value::is_string);
        let known = entry.as_object().is_some_and(|o| {
            o.keys()
                .all(|k| ["name", "command", "args"].contains(&k.as_str()))
        });
        if !(has("name") && has("command") && known) {
            return Err(FactoryError::invalid_request(
                format!("mcpServers[{i}]"),
                format!("expected {{name, command, args?}}, got {entry}"),
            ));
        }
    }
    Ok(())
}

impl SessionFactory for FakeFactory {
    // Model "priced" costs $2 per million prompt tokens and $10 per million out (the usage
    // tests); every other model has no price.
    fn cost(
        &self,
        _provider: &str,
        model_id: &str,
        t: &penguin_omni_protocol::TokenCounts,
    ) -> Option<f64> {
        (model_id == "priced")
            .then(|| ((t.cache_read + t.uncached_prompt) * 2 + t.output * 10) as f64 / 1e6)
    }

    fn price(&self, _provider: &str, model_id: &str) -> Option<Value> {
        (model_id == "priced").then(
            || serde_json::json!({"input": 2.0, "cachedInput": 2.0, "cacheWrite": 2.0, "output": 10.0}),
        )
    }

    fn skills(&self, _workspace: &Path) -> Vec<Value> {
        self.knowledge.0.clone()
    }

    fn models(&self) -> Vec<penguin_server::api::ModelChoice> {
        self.models
            .as_ref()
            .map(|m| lock(m).clone())
            .unwrap_or_default()
    }

    fn edit_models(&self, edit: &penguin_server::api::ModelEdit) -> Result<(), ModelsError> {
        use penguin_server::api::ModelEdit;
        let Some(models) = &self.models else {
            return Err(ModelsError::NotEditable);
        };
        let mut models = lock(models);
        let invalid = |field: &str, reason: &str| ModelsError::Invalid {
            field: field.into(),
            reason: reason.into(),
        };
        let find = |models: &[penguin_server::api::ModelChoice], name: &str| {
            models
                .iter()
                .position(|m| m.name == name && m.configured)
                .ok_or_else(|| ModelsError::NotFound(format!("no model named {name:?}")))
        };
        let make_default = |models: &mut Vec<penguin_server::api::ModelChoice>, name: &str| {
            for m in models.iter_mut() {
                m.default = m.name == name;
            }
            // The default comes first, as the factory's list has it.
            models.sort_by_key(|m| !m.default);
        };
        match edit {
            ModelEdit::Add {
                name,
                fields,
                default,
            } => {
                if name.is_empty() || name.contains(' ') {
                    return Err(invalid("name", "not a model name"));
                }
                if models.iter().any(|m| m.name == *name) {
                    return Err(ModelsError::Exists(format!(
                        "{name:?} is already configured"
                    )));
                }
                let protocol = fields
                    .protocol
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| invalid("protocol", "required"))?;
                let id = fields
                    .model
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .ok_or_else(|| invalid("model", "required"))?;
                let url = fields
                    .base_url
                    .as_deref()
                    .filter(|u| !u.is_empty())
                    .unwrap_or("http://127.0.0.1:11434");
                let at = models
                    .iter()
                    .position(|m| m.name == "demo")
                    .unwrap_or(models.len());
                models.insert(at, fake_model(name, protocol, id, url, false));
                if *default {
                    make_default(&mut models, name);
                }
            }
            ModelEdit::Change {
                name,
                fields,
                default,
            } => {
                let i = find(&models, name)?;
                let m = &mut models[i];
                if let Some(p) = fields.protocol.clone() {
                    m.provider = p;
                }
                if let Some(id) = fields.model.clone() {
                    m.model_id = id;
                }
                if let Some(url) = fields.base_url.clone().filter(|u| !u.is_empty()) {
                    m.base_url = Some(url);
                }
                if let Some(var) = fields.api_key_env.clone() {
                    m.api_key_env = Some(var).filter(|v| !v.is_empty());
                }
                if *default {
                    make_default(&mut models, name);
                }
            }
            ModelEdit::Remove { name } => {
                let i = find(&models, name)?;
                let was_default = models.remove(i).default;
                if was_default {
                    make_default(&mut models, "demo");
                }
            }
            other => return Err(invalid("model", &format!("{other:?}"))),
        }
        Ok(())
    }

    fn test_model(
        &self,
        name: &str,
    ) -> futures::future::BoxFuture<'static, Result<Value, ModelsError>> {
        let editable = self.models.is_some();
        let found = self.models().into_iter().find(|m| m.name == name);
        let name = name.to_owned();
        Box::pin(async move {
            if !editable {
                return Err(ModelsError::NotEditable);
            }
            let m =
                found.ok_or_else(|| ModelsError::NotFound(format!("no model named {name:?}")))?;
            let url = m.base_url.clone().unwrap_or_default();
            Ok(
                if url.contains("127.0.0.1:9/") || url.ends_with("127.0.0.1:9") {
                    serde_json::json!({"model": name, "ok": false, "failure": {"kind": "connection_refused", "cause": format!("connection refused ({url})"), "hint": "is the server running?"}})
                } else {
                    let works =
                        |detail: &str| serde_json::json!({"status": "works", "detail": detail});
                    serde_json::json!({"model": name, "ok": true, "latencyMs": 12, "totalMs": 40, "reply": format!("Hello from {}.", m.model_id),
                    "streaming": works("3 pieces"), "tools": works("called ping({\"text\":\"hi\"})"),
                    "vision": {"status": "skipped", "detail": "vision = false in config.toml"}})
                },
            )
        })
    }

    fn endpoint_models(
        &self,
        fields: &penguin_server::api::ModelFields,
    ) -> futures::future::BoxFuture<'static, Result<Vec<String>, ModelsError>> {
        let url = fields.base_url.clone().unwrap_or_default();
        Box::pin(async move {
            if url.contains("127.0.0.1:9") {
                return Err(ModelsError::Unreachable(format!(
                    "{url}/models: connection refused"
                )));
            }
            Ok(vec!["fake-large".into(), "fake-small".into()])
        })
    }

    fn memory(&self) -> Vec<Value> {
        self.knowledge.1.clone()
    }

    fn create(&self, req: &CreateSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        if let Some(p) = req.provider.as_deref().filter(|p| *p != "scripted") {
            return Err(FactoryError::invalid_request(
                "provider",
                format!("this server only offers \"scripted\", not {p:?}"),
            ));
        }
        let asked = req.workspace.clone().unwrap_or(self.workspace.clone());
        let workspace = match asked.canonicalize() {
            Ok(abs) if abs.is_dir() => abs,
            _ => {
                return Err(FactoryError::invalid_request(
                    "workspace",
                    format!("{} is not an existing directory", asked.display()),
                ))
            }
        };
        let sandbox = self.sandbox(req.sandbox.as_ref())?;
        check_mcp_servers(&req.mcp_servers)?;
        let tools = self.tools(&req.location, req.durability, &workspace, sandbox.as_ref());
        let spec = Spec {
            location: req.location.clone(),
            durability: req.durability,
            workspace,
            model_id: req.model.clone().unwrap_or("scenario".into()),
            source: None,
        };
        let session = FakeSession::create(
            spec,
            self.script.model(),
            tools.clone(),
            self.engine_config(),
        )
        .map_err(FactoryError::internal)?;
        let hooks = self.script.hook_approver();
        Ok(self.assemble(session.with_sandbox(sandbox).with_hooks(hooks), tools))
    }

    fn load(&self, req: &LoadSession) -> Result<Box<dyn HostedSession>, FactoryError> {
        lock(&self.loads).push((req.sandbox.clone(), req.mcp_servers.clone()));
        let resumed = resume_session(&req.location, &req.session_id, req.durability)
            .map_err(FactoryError::unrecoverable)?;
        let meta = resumed.resumed.meta.clone();
        let workspace = PathBuf::from(&meta.workspace);
        if !workspace.is_dir() {
            return Err(FactoryError::WorkspaceMissing(meta.workspace));
        }
        let sandbox = self
            .sandbox(req.sandbox.as_ref())
            .map_err(|e| FactoryError::unrecoverable(format!("stored {e}")))?;
        let tools = self.tools(&req.location, req.durability, &workspace, sandbox.as_ref());
        let session = FakeSession::resume(
            resumed,
            self.script.model(),
            tools.clone(),
            self.engine_config(),
        );
        let hooks = self.script.hook_approver();
        Ok(self.assemble(session.with_sandbox(sandbox).with_hooks(hooks), tools))
    }
}

// ---------------------------------------------------------------------------------------------
// The session

type Hook<T> = Arc<Mutex<Option<Arc<T>>>>;

/// What a new session is.
struct Spec {
    location: TraceLocation,
    durability: Durability,
    workspace: PathBuf,
    model_id: String,
    source: Option<String>,
}

/// An engine and its Trace, as the server hosts them.
pub struct FakeSession {
    id: String,
    meta: SessionMeta,
    meta_message: OmniMessage,
    tool_list: OmniMessage,
    engine: Engine,
    writer: Writer,
    env: Arc<dyn Environment>,
    meta_written: bool,
    announced: bool,
    sandbox: Option<SandboxInfo>,
    notice_hook: Hook<dyn Fn() + Send + Sync>,
    message_hook: Hook<dyn Fn(OmniMessage) + Send + Sync>,
    // A stand-in for goal mode (the facade has the real loop): one round, the scripted run,
    // then `complete`. Enough for the web app's banner.
    goal: Arc<Mutex<Option<Value>>>,
    /// Scripted `pre_tool_use` hooks, deciding in place of the run's approver.
    hooks: Option<Arc<dyn Approver>>,
}

impl FakeSession {
    fn create(
        spec: Spec,
        model: ScriptedModel,
        env: Arc<dyn Environment>,
        config: EngineConfig,
    ) -> Result<FakeSession, String> {
        let id = new_session_id();
        let writer =
            Writer::create(&spec.location, &id, spec.durability).map_err(|e| e.to_string())?;
        let meta = SessionMeta {
            session_id: id.clone(),
            provider: "scripted".into(),
            model_id: spec.model_id,
            model_context_window: ContextWindow::Other("unknown".into()),
            system_prompt: String::new(),
            agent_state: spec
                .location
                .root
                .join(&spec.location.project)
                .join("agents")
                .join(&spec.location.agent)
                .join("agent_state")
                .display()
                .to_string(),
            workspace: spec.workspace.display().to_string(),
            source: spec.source,
            forked_from: None,
        };
        let initial = InitialState::default();
        Ok(FakeSession::assemble(
            meta, writer, model, env, config, initial, false,
        ))
    }

    fn resume(
        resumed: penguin_trace_store::ResumedSession,
        model: ScriptedModel,
        env: Arc<dyn Environment>,
        config: EngineConfig,
    ) -> FakeSession {
        let r = resumed.resumed;
        let initial = InitialState {
            carry_over: r.carry_over,
            pending_summary: r.pending_summary,
            counters: Counters {
                session_turns: r.session_turns,
                last_request_total: r.last_request_total,
                session_tokens: r.session_tokens,
            },
            bootstrap_records: Vec::new(),
            pending_trace_rotation: r.context_closed,
            from_compaction: r.context_closed,
        };
        let meta = r.meta;
        FakeSession::assemble(meta, resumed.writer, model, env, config, initial, true)
    }

    fn assemble(
        meta: SessionMeta,
        writer: Writer,
        model: ScriptedModel,
        env: Arc<dyn Environment>,
        config: EngineConfig,
        mut initial: InitialState,
        meta_written: bool,
    ) -> FakeSession {
        let meta_message = build::session_meta(meta.clone());
        // The engine writes the tool list after the first run's input.
        let tool_list = build::tool_list_ready(env.tools());
        initial.bootstrap_records = vec![tool_list.clone()];
        let sink = Arc::new(writer.clone());
        let engine = Engine::with_parts(Box::new(model), env.clone(), config, Some(sink), initial);
        engine.set_context_head(meta_message.clone(), Some(tool_list.clone()));
        let notice_hook: Hook<dyn Fn() + Send + Sync> = Arc::default();
        let message_hook: Hook<dyn Fn(OmniMessage) + Send + Sync> = Arc::default();
        if let Some(work) = env.background() {
            // Weak, both: the listeners live in the environment the engine owns.
            let (notifier, hook) = (engine.notifier(), Arc::downgrade(&notice_hook));
            work.set_listener(Arc::new(move |done: BackgroundTaskDone| {
                if notifier.notify(done.notice()) {
                    if let Some(host) = hook.upgrade().and_then(|h| lock(&h).clone()) {
                        host();
                    }
                }
            }));
            let hook = Arc::downgrade(&message_hook);
            work.set_forward(Arc::new(move |msg| {
                if let Some(host) = hook.upgrade().and_then(|h| lock(&h).clone()) {
                    host(msg);
                }
            }));
        }
        FakeSession {
            id: meta.session_id.clone(),
            meta,
            meta_message,
            tool_list,
            engine,
            writer,
            env,
            meta_written,
            announced: false,
            sandbox: None,
            notice_hook,
            message_hook,
            goal: Arc::default(),
            hooks: None,
        }
    }

    fn with_sandbox(mut self, sandbox: Option<SandboxInfo>) -> FakeSession {
        self.sandbox = sandbox;
        self
    }

    fn with_hooks(mut self, hooks: Option<Arc<dyn Approver>>) -> FakeSession {
        self.hooks = hooks;
        self
    }
}

impl HostedSession for FakeSession {
    fn id(&self) -> &str {
        &self.id
    }

    fn meta(&self) -> &SessionMeta {
        &self.meta
    }

    fn run(
        &mut self,
        input: Vec<OmniMessage>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        if self.engine.is_running() {
            return Err(EngineBusy);
        }
        if !self.meta_written {
            self.writer.record_message(self.meta_message.clone());
            self.meta_written = true;
        }
        let mut options = options;
        if let Some(hooks) = &self.hooks {
            options.approver = hooks.clone();
        }
        let stream = self.engine.run(input, options)?;
        if self.announced {
            return Ok(stream.boxed());
        }
        // The first run of each load yields the session's tool list first.
        self.announced = true;
        let head = Frame::new(self.tool_list.clone());
        Ok(stream::iter([head]).chain(stream).boxed())
    }

    fn compact(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<BoxStream<'static, Frame>, EngineBusy> {
        if self.engine.compactability() != Compactability::Ok {
            return Ok(stream::empty().boxed());
        }
        if !self.meta_written {
            self.writer.record_message(self.meta_message.clone());
            self.meta_written = true;
        }
        Ok(self.engine.compact(cancel)?.boxed())
    }

    fn engine(&self) -> &Engine {
        &self.engine
    }

    fn writer(&self) -> &Writer {
        &self.writer
    }

    fn environment(&self) -> Arc<dyn Environment> {
        self.env.clone()
    }

    fn on_notice(&self, hook: Arc<dyn Fn() + Send + Sync>) {
        *lock(&self.notice_hook) = Some(hook);
    }

    fn on_background_message(&self, hook: Arc<dyn Fn(OmniMessage) + Send + Sync>) {
        *lock(&self.message_hook) = Some(hook);
    }

    fn sandbox(&self) -> Option<SandboxInfo> {
        self.sandbox.clone()
    }

    /// A fixed plan (the real one is penguin-tools' checkpoints, tested there and behind the
    /// facade's factory): what the page makes of it is tested here.
    fn rewind_files(
        &self,
        to: usize,
        _apply: bool,
        _with_yours: bool,
    ) -> Option<Result<penguin_server::api::RewindFiles, String>> {
        Some(Ok(penguin_server::api::RewindFiles {
            restore: vec![format!("notes-{to}.md")],
            remove: vec!["made.txt".into(), "mine.txt".into()],
            yours: vec!["mine.txt".into()],
            ..Default::default()
        }))
    }

    fn run_goal(
        &mut self,
        input: Vec<OmniMessage>,
        budget: Option<u64>,
        options: RunOptions,
    ) -> Result<BoxStream<'static, Frame>, penguin_server::GoalRefusal> {
        let objective: String = input
            .iter()
            .filter_map(|m| match m.model() {
                Some(penguin_omni_protocol::ModelPayload::Text(t)) => Some(t.text.clone()),
                _ => None,
            })
            .collect();
        *lock(&self.goal) = Some(serde_json::json!({
            "objective": objective, "status": "active", "budget": budget.map_or(-1, |b| b as i64),
            "used": 0, "rounds": 1, "updatedAt": "2026-01-01T00:00:00.000Z"
        }));
        let run = self.run(input, options)?;
        let goal = self.goal.clone();
        let done = stream::once(async move {
            if let Some(g) = lock(&goal).as_mut() {
                g["status"] = "complete".into();
                g["used"] = 107.into();
            }
            None::<Frame>
        })
        .filter_map(|f| async move { f });
        Ok(run.chain(done).boxed())
    }

    fn goal(&self) -> Option<Value> {
        lock(&self.goal).clone()
    }
}

// ---------------------------------------------------------------------------------------------
// The tools

/// The script's tools, and what the factory's knobs add.
struct FakeTools {
    inner: ScriptedEnvironment,
    unsandboxed: Vec<String>,
    grants: Option<Grants>,
    gate: Option<Arc<Notify>>,
    background: Option<Arc<FakeBackground>>,
    children: Option<Children>,
}

#[async_trait]
impl Environment for FakeTools {
    async fn execute(&self, request: ToolCallRequest, sink: &mut dyn MessageSink) {
        let call = request.tool_call().clone();
        match (call.name.as_str(), &self.gate, &self.children) {
            ("wait", Some(gate), _) => {
                gate.notified().await;
                sink.emit(build::tool_call_output(
                    "released",
                    call.tool_call_id,
                    StopReason::Completed,
                ))
                .await;
            }
            ("run_subagent", _, Some(children)) => {
                children.run(request, self.background.as_ref(), sink).await
            }
            _ => self.inner.execute(request, sink).await,
        }
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        self.inner.tools()
    }

    fn permission(&self, name: &str) -> Permission {
        match name {
            "wait" | "run_subagent" => Permission::Read,
            other => self.inner.permission(other),
        }
    }

    fn background(&self) -> Option<Arc<dyn BackgroundWork>> {
        self.background
            .clone()
            .map(|b| b as Arc<dyn BackgroundWork>)
    }

    fn unsandboxed_tools(&self) -> Vec<String> {
        self.unsandboxed.clone()
    }

    fn grant_unsandboxed(&self, call: &ToolCall) -> bool {
        let granted = self.unsandboxed.contains(&call.name);
        if let (true, Some(grants)) = (granted, &self.grants) {
            lock(grants).push((call.tool_call_id.clone(), call.arguments.clone()));
        }
        granted
    }

    /// An `edit_file` call's one-line diff, as the real tools would preview it (they are
    /// tested in penguin-tools; this is for what the server and the page make of it).
    async fn preview(&self, call: &ToolCall) -> Option<String> {
        if call.name != "edit_file" {
            return None;
        }
        let args: Value = serde_json::from_str(&call.arguments).ok()?;
        let (path, old, new) = (
            args["path"].as_str()?,
            args["old_string"].as_str()?,
            args["new_string"].as_str()?,
        );
        Some(format!(
            "Edited {path}: replaced 1 occurrence\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}"
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Subagents

/// Makes the children of `run_subagent`: fake sessions of their own (their own Trace, in the
/// same place, `source: "subagent"`), playing the child script with its tools.
#[derive(Clone)]
struct Children {
    script: Script,
    location: TraceLocation,
    durability: Durability,
    workspace: PathBuf,
}

/// Asks `inner` for a child's calls, tagged with the child's origin.
struct Tagged {
    inner: Arc<dyn Approver>,
    hop: String,
}

#[async_trait]
impl Approver for Tagged {
    async fn approve(
        &self,
        call: &OmniMessage,
    ) -> Result<ApprovalDecision, penguin_engine::ApprovalError> {
        self.inner
            .approve(&call.clone().with_origin(self.hop.clone()))
            .await
    }
}

/// Drops a session off the async workers: dropping one joins its trace writer thread.
fn release(session: FakeSession) {
    tokio::task::spawn_blocking(move || drop(session));
}

/// Where a child's answer goes: the text of its assistant deltas, turns apart.
#[derive(Default)]
struct Answer {
    text: String,
    wrote: bool,
}

impl Answer {
    /// The answer text `msg` adds, if any.
    fn add(&mut self, msg: &OmniMessage) -> Option<String> {
        if msg.has_origin() {
            return None;
        }
        let Some(ModelPayload::PartialText(t)) = msg.model() else {
            return None;
        };
        if t.role != Role::Assistant {
            return None;
        }
        let piece = match t.event_type {
            StreamEventType::Start if self.wrote => "\n\n".to_owned(),
            StreamEventType::Delta if !t.text.is_empty() => {
                self.wrote = true;
                t.text.clone()
            }
            _ => return None,
        };
        self.text.push_str(&piece);
        Some(piece)
    }
}

impl Children {
    async fn run(
        &self,
        request: ToolCallRequest,
        background: Option<&Arc<FakeBackground>>,
        sink: &mut dyn MessageSink,
    ) {
        let call = request.tool_call().clone();
        let id = call.tool_call_id.clone();
        let part = |event, text: &str| {
            build::partial_tool_call_output(event, text, &id, StopReason::Completed)
        };
        sink.emit(part(StreamEventType::Start, "")).await;
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or_default();
        let prompt = args["prompt"].as_str().unwrap_or_default().to_owned();
        let spec = Spec {
            location: self.location.clone(),
            durability: self.durability,
            workspace: self.workspace.clone(),
            model_id: "scenario".into(),
            source: Some("subagent".into()),
        };
        let tools = Arc::new(self.script.tools());
        let mut child =
            FakeSession::create(spec, self.script.model(), tools, self.script.engine.clone())
                .expect("a child session");
        let hop = child.id.clone();
        // Its meta first (the parent engine writes the `subagent` pointer for it), then its
        // prompt, so a host sees both before anything the child answers.
        sink.emit(child.meta_message.clone().with_origin(hop.clone()))
            .await;
        let input = build::user_text_from(prompt.clone(), TextSender::ParentAgent);
        sink.emit(input.clone().with_origin(hop.clone())).await;
        // Without a parent approver the child's calls are denied, as a real child's are.
        let approver = match request.approver.clone() {
            Some(inner) => Arc::new(Tagged {
                inner,
                hop: hop.clone(),
            }) as Arc<dyn Approver>,
            None => Arc::new(penguin_engine::DenyAll),
        };
        let cancel = CancellationToken::new();
        let options = RunOptions::new(approver)
            .with_cancel(cancel.clone())
            .with_thinking_level(request.thinking_level);
        let mut stream = child
            .run(vec![input], options)
            .expect("a fresh child is idle");

        match (args["run_in_background"].as_bool(), background) {
            (Some(true), Some(work)) => {
                let subagent_id = format!("subagent-{}", &hop[hop.len() - 8..]);
                // Listed before it can settle.
                work.start_with(BackgroundTask {
                    id: subagent_id.clone(),
                    kind: BackgroundKind::Subagent,
                    label: report_label(&prompt),
                    running: true,
                    detail: None,
                    pid: None,
                    started_at_ms: None,
                    recent: None,
                    ports: Vec::new(),
                });
                let (work_ref, task_id) = (Arc::downgrade(work), subagent_id.clone());
                let pump = tokio::spawn(async move {
                    let mut answer = Answer::default();
                    while let Some(frame) = stream.next().await {
                        let msg = frame.message().clone();
                        answer.add(&msg);
                        let Some(work) = work_ref.upgrade() else {
                            return;
                        };
                        work.forward(msg.with_origin(hop.clone()));
                    }
                    drop(stream);
                    release(child);
                    if let Some(work) = work_ref.upgrade() {
                        work.settle(&task_id, true, "", &answer.text);
                    }
                });
                work.attach(&subagent_id, cancel, pump.abort_handle());
                let note =
                    format!("[subagent running in background with subagent_id {subagent_id}]");
                sink.emit(part(StreamEventType::Delta, &note)).await;
                sink.emit(part(StreamEventType::Stop, "")).await;
                sink.emit(build::tool_call_output(note, id, StopReason::Completed))
                    .await;
            }
            _ => {
                // In the foreground: an interrupt of the call ends the child.
                let _stop = cancel.clone().drop_guard();
                let mut answer = Answer::default();
                loop {
                    let frame = tokio::select! {
                        f = stream.next() => f,
                        () = request.cancel.cancelled() => None,
                    };
                    let Some(frame) = frame else { break };
                    let msg = frame.message().clone();
                    let piece = answer.add(&msg);
                    sink.emit(msg.with_origin(hop.clone())).await;
                    if let Some(piece) = piece {
                        sink.emit(part(StreamEventType::Delta, &piece)).await;
                    }
                }
                drop(stream);
                let writer = child.writer.clone();
                let _ = tokio::task::spawn_blocking(move || writer.flush()).await;
                release(child);
                sink.emit(part(StreamEventType::Stop, "")).await;
                let stop = match request.cancel.is_cancelled() {
                    true => StopReason::Aborted,
                    false => StopReason::Completed,
                };
                sink.emit(build::tool_call_output(answer.text, id, stop))
                    .await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Background work

#[derive(Default)]
struct Work {
    listener: Option<BackgroundListener>,
    forward: Option<BackgroundForward>,
    tasks: Vec<(
        BackgroundTask,
        Option<(CancellationToken, tokio::task::AbortHandle)>,
    )>,
}

/// Background work a test drives: tasks it starts and settles itself, and the background
/// children of `run_subagent`.
#[derive(Default)]
pub struct FakeBackground {
    work: Mutex<Work>,
}

impl FakeBackground {
    /// A running command, `label` its command line.
    pub fn start_command(&self, id: &str, label: &str, pid: i32) {
        self.start_with(BackgroundTask {
            id: id.into(),
            kind: BackgroundKind::Command,
            label: label.into(),
            running: true,
            detail: None,
            pid: Some(pid),
            // What a dev server shows: a start, its last lines, the port it listens on.
            started_at_ms: Some(1_700_000_000_000),
            recent: Some("ready in 42 ms\nlistening on 127.0.0.1:5173".into()),
            ports: vec![5173],
        });
    }

    fn start_with(&self, task: BackgroundTask) {
        lock(&self.work).tasks.push((task, None));
    }

    /// What ends task `id` when it is killed: its cancel token and its task.
    fn attach(&self, id: &str, cancel: CancellationToken, pump: tokio::task::AbortHandle) {
        let mut work = lock(&self.work);
        match work.tasks.iter_mut().find(|(t, _)| t.id == id) {
            Some((_, handle)) => *handle = Some((cancel, pump)),
            // Settled already.
            None => pump.abort(),
        }
    }

    /// Ends task `id` and reports it (as a command or a subagent reports) to the listener;
    /// false when `id` does not run.
    pub fn settle(&self, id: &str, completed: bool, detail: &str, output: &str) -> bool {
        let (task, listener) = {
            let mut work = lock(&self.work);
            let Some(pos) = work.tasks.iter().position(|(t, _)| t.id == id && t.running) else {
                return false;
            };
            let task = work.tasks.remove(pos).0;
            (task, work.listener.clone())
        };
        if let Some(listener) = listener {
            listener(BackgroundTaskDone {
                kind: task.kind,
                id: task.id,
                label: task.label,
                completed,
                detail: detail.into(),
                output: output.into(),
            });
        }
        true
    }

    /// Hands `msg` to the host, as a background child's live message.
    pub fn forward(&self, msg: OmniMessage) {
        let forward = lock(&self.work).forward.clone();
        if let Some(forward) = forward {
            forward(msg);
        }
    }
}

impl BackgroundWork for FakeBackground {
    fn set_listener(&self, listener: BackgroundListener) {
        lock(&self.work).listener = Some(listener);
    }

    fn set_forward(&self, forward: BackgroundForward) {
        lock(&self.work).forward = Some(forward);
    }

    fn tasks(&self) -> Vec<BackgroundTask> {
        lock(&self.work)
            .tasks
            .iter()
            .map(|(t, _)| t.clone())
            .collect()
    }

    fn kill(&self, id: &str) -> bool {
        let mut work = lock(&self.work);
        let Some(pos) = work.tasks.iter().position(|(t, _)| t.id == id) else {
            return false;
        };
        if let (_, Some((cancel, pump))) = work.tasks.remove(pos) {
            cancel.cancel();
            pump.abort();
        }
        true
    }

    fn kill_all(&self) {
        for (_, handle) in lock(&self.work).tasks.drain(..) {
            if let Some((cancel, pump)) = handle {
                cancel.cancel();
                pump.abort();
            }
        }
    }
}

impl Drop for FakeBackground {
    fn drop(&mut self) {
        self.kill_all();
    }
}
