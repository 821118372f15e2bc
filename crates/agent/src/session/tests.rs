//! A resumed session hands the trace's history to its model and the rest to its engine.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use penguin_engine::scripted::ScriptedEnvironment;
use penguin_engine::{async_trait, AllowAll, LlmOutcome, LlmRequest, MessageSink};
use penguin_llm_providers::scripted::{ScriptedModel, ScriptedRequest};

use super::*;

/// A model that remembers the history it was given.
#[derive(Debug)]
struct Remembers(Arc<Mutex<Vec<OmniMessage>>>);

#[async_trait]
impl Llm for Remembers {
    async fn stream_generate(&mut self, _: LlmRequest, _: &mut dyn MessageSink) -> LlmOutcome {
        LlmOutcome::completed()
    }

    fn set_history(&mut self, history: &[OmniMessage]) {
        *lock(&self.0) = history.to_vec();
    }
}

fn content(m: &OmniMessage) -> &str {
    m.model().and_then(|p| p.content()).unwrap_or_default()
}

#[tokio::test]
async fn resume_gives_the_history_to_the_model_and_the_counters_to_the_engine() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let location = TraceLocation::new(home.path(), "project", "agent");
    let spec = SessionSpec::new(location.clone(), ws.path().to_path_buf())
        .with_model("scripted", "m")
        .with_durability(Durability::Never);
    let env: Arc<dyn Environment> = Arc::new(ScriptedEnvironment::new(Default::default()));
    let model = ScriptedModel::new(vec![ScriptedRequest::builder()
        .text("hello")
        .usage(10, 2)
        .build()]);
    let mut session = Session::create(spec, Box::new(model), env.clone()).unwrap();
    let id = session.id().to_owned();
    let options = RunOptions::new(Arc::new(AllowAll));
    let run = session.run(vec![build::user_text("hi")], options).unwrap();
    run.count().await;
    drop(session); // the last writer: everything queued is appended

    let (resumed, writer) = Session::load(&location, &id, Durability::Never).unwrap();
    assert_eq!(resumed.meta.session_id, id);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = Box::new(Remembers(seen.clone()));
    let session = Session::resume(resumed, writer, EngineConfig::default(), model, env).unwrap();
    let history = lock(&seen).clone();
    assert_eq!(
        history.iter().map(content).collect::<Vec<_>>(),
        ["hi", "hello"]
    );
    assert_eq!(session.engine().counters().session_turns, 1);
    assert_eq!(session.engine().counters().last_request_total, 12);
}

/// A session's model gets its id as its prompt cache key, and the spec's `prompt_cache`.
#[test]
fn the_session_id_is_the_models_prompt_cache_key() {
    use crate::models::{register_adapter, Adapter, AdapterInput, ModelSpec, Protocol};
    static SEEN: Mutex<Vec<(bool, Option<String>)>> = Mutex::new(Vec::new());
    register_adapter(Adapter::new("cache-key-probe", |input: AdapterInput| {
        SEEN.lock()
            .unwrap()
            .push((input.config.prompt_cache, input.config.cache_key.clone()));
        Ok(Box::new(ScriptedModel::new(Vec::new())) as Box<dyn penguin_llm_providers::Llm>)
    }));
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let location = TraceLocation::new(home.path(), "project", "agent");
    let spec = SessionSpec::new(location, ws.path().to_path_buf());
    let env: Arc<dyn Environment> = Arc::new(ScriptedEnvironment::new(Default::default()));
    let model = ModelSpec {
        protocol: Protocol::new("cache-key-probe"),
        prompt_cache: false,
        ..ModelSpec::demo()
    };
    let session = Session::create_for_model(spec, &model, env).unwrap();
    let id = session.session_meta().session_id.clone();
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen, [(false, Some(id))]);
}
