//! `penguin replay`: a stored session rebuilt as a scenario (`penguin::replay`), run through
//! the engine on a paused clock, and its new Trace compared with the original; or, with
//! `--from N`, its history before task N kept and task N run again live (a counterfactual).

use std::path::PathBuf;
use std::process::ExitCode;

use penguin::agent::Agent;
#[cfg(feature = "scenario")]
use penguin::omni_protocol::OmniMessage;

use crate::setup::resolve_session_id;
use crate::untrusted::{errln, Untrusted};

#[cfg(not(feature = "scenario"))]
pub(crate) fn replay(
    _id: Option<String>,
    _last: bool,
    _check: bool,
    _out: Option<PathBuf>,
) -> Result<ExitCode, String> {
    Err("this penguin was built without the `scenario` feature, which replays run on".into())
}

#[cfg(feature = "scenario")]
pub(crate) fn replay(
    id: Option<String>,
    last: bool,
    check: bool,
    out: Option<PathBuf>,
) -> Result<ExitCode, String> {
    use crate::untrusted::outln;
    use penguin::replay::{compare, scenario_of};
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let id = resolve_session_id(&agent, id.as_deref(), last)?;
    let records = records_of(&agent, &id)?;
    let scenario = scenario_of(&records)
        .map_err(|e| format!("session {id} cannot be replayed exactly: {e}"))?;
    let text = serde_json::to_string_pretty(&scenario).map_err(|e| e.to_string())?;
    if let Some(path) = &out {
        std::fs::write(path, format!("{text}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        errln!("penguin: the scenario is in {}", path.display());
    }
    let parsed = penguin::scenario::Scenario::parse(&text)
        .map_err(|e| format!("the rebuilt scenario does not parse (a bug of penguin's): {e}"))?;
    let output = penguin::scenario::run_scenario_blocking(parsed)
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let replayed: Vec<OmniMessage> = output.trace.iter().map(|f| f.message().clone()).collect();
    match compare(&records, &replayed) {
        Ok(compared) => {
            outln!(
                "replayed {id}: {compared} records, the same as the original (timestamps aside)"
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(d) => {
            let show = |v: &Option<serde_json::Value>| {
                v.as_ref().map_or("(nothing)".to_owned(), |v| v.to_string())
            };
            errln!(
                "replayed {id}: record {} differs\n  original: {}\n  replayed: {}",
                d.record,
                Untrusted(&show(&d.expected)),
                Untrusted(&show(&d.got))
            );
            Ok(if check {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// Every record of session `id`, its files in order.
#[cfg(feature = "scenario")]
fn records_of(agent: &Agent, id: &str) -> Result<Vec<OmniMessage>, String> {
    use penguin::trace_store::{read_trace_tolerant, session_trace_files};
    let files = session_trace_files(&agent.location.traces_dir(), id)
        .map_err(|e| format!("cannot list session {id}'s trace: {e}"))?;
    let mut out = Vec::new();
    for f in files {
        out.extend(
            read_trace_tolerant(&f.path)
                .map_err(|e| format!("cannot read {}: {e}", f.path.display()))?,
        );
    }
    Ok(out)
}

/// What a counterfactual replay starts from: the session, and the task run again.
pub(crate) struct Counterfactual {
    pub(crate) id: Option<String>,
    pub(crate) last: bool,
    /// The task (from 1) run again.
    pub(crate) from: usize,
    /// Sent instead of the task's recorded input.
    pub(crate) prompt: Option<String>,
}

/// `penguin replay ID --from N [--model NAME] [--prompt TEXT]`: a fork after task N-1 (a new
/// session in the same workspace, named as come from ID, for N = 1) runs task N's recorded
/// input, or `--prompt`, live on the model the flags name. The recorded tool outputs before
/// task N are history, never run again.
pub(crate) async fn counterfactual(
    what: Counterfactual,
    model: crate::args::ModelArgs,
    task: crate::args::TaskArgs,
    sandbox: crate::args::SandboxArgs,
) -> Result<ExitCode, String> {
    use crate::setup::{ready, Which};
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let id = resolve_session_id(&agent, what.id.as_deref(), what.last)?;
    let Some(before) = what.from.checked_sub(1) else {
        return Err("--from counts tasks from 1".into());
    };
    let traces = agent.location.traces_dir();
    let recorded =
        penguin::trace_store::next_task_input(&traces, &id, before).map_err(|e| e.to_string())?;
    let input = match what.prompt {
        Some(text) if text.trim().is_empty() => return Err("--prompt is blank".into()),
        Some(text) => vec![penguin::omni_protocol::build::user_text(text)],
        None => recorded,
    };
    let (agent, mut session) = if before == 0 {
        let workspace = crate::rewind::workspace_of(&agent, &id)?;
        let (agent, mut session) = ready(&model, &sandbox, Which::New(Some(workspace)))?;
        session.set_forked_from(&id);
        (agent, session)
    } else {
        // The fork goes on on the model the flags name; the session records it
        // (`session_meta`) before the run.
        let forked = agent
            .fork_session(&id, penguin::session::ForkPoint::Task(before))
            .map_err(|e| e.to_string())?;
        ready(&model, &sandbox, Which::Stored(Some(forked.session_id)))?
    };
    let meta = session.session_meta();
    errln!(
        "penguin: session {} runs task {} of {id} again on {}/{} (the history before it kept, not run again)",
        session.id(),
        what.from,
        Untrusted(&meta.provider),
        Untrusted(&meta.model_id)
    );
    let task = task.configured(&agent);
    crate::run::announce(&session, &task);
    crate::run::one_input(&mut session, input, &task).await
}
