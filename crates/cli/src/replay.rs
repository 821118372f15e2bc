//! `penguin replay`: a stored session rebuilt as a scenario (`penguin::replay`), run through
//! the engine on a paused clock, and its new Trace compared with the original.

use std::path::PathBuf;
use std::process::ExitCode;

use penguin::agent::Agent;
use penguin::omni_protocol::OmniMessage;
use penguin::replay::{comparable, first_difference, scenario_of};
use penguin::trace_store::{read_trace_tolerant, session_trace_files};

use crate::setup::resolve_session_id;
use crate::untrusted::{errln, outln, Untrusted};

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
    let (expected, got) = (comparable(&records), comparable(&replayed));
    match first_difference(&expected, &got) {
        None => {
            outln!(
                "replayed {id}: {} records, the same as the original (timestamps aside)",
                expected.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(d) => {
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
fn records_of(agent: &Agent, id: &str) -> Result<Vec<OmniMessage>, String> {
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
