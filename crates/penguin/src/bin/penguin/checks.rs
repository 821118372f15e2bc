//! Offline commands: `scenario run`, `check-stream`, `trace check`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use penguin::omni_protocol::validator::validate_jsonl;
use penguin::scenario::Scenario;
use penguin::trace_store::{check_trace, Severity};

#[cfg(not(feature = "scenario"))]
pub(crate) fn scenario_run(
    _path: PathBuf,
    _trace: Option<PathBuf>,
    _requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    Err("this penguin was built without the `scenario` feature; build it with `cargo build -p penguin` (the feature is on by default)".into())
}

#[cfg(feature = "scenario")]
pub(crate) fn scenario_run(
    path: PathBuf,
    trace: Option<PathBuf>,
    requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let scenario = Scenario::from_file(&path).map_err(|e| e.to_string())?;
    let trace_sink = penguin::scenario::MemoryTrace::default();
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut written = Ok(());
    let requests_log = penguin::scenario::run_scenario_streaming(
        scenario,
        std::sync::Arc::new(trace_sink.clone()),
        &mut |frame| {
            if written.is_ok() {
                // Bytes, not `writeln!`: the formatting machinery cost 6% of a 227,000-line run.
                written = stdout
                    .write_all(frame.json().as_bytes())
                    .and_then(|()| stdout.write_all(b"\n"));
            }
        },
    )
    .map_err(|e| format!("cannot start the runtime: {e}"))?;
    written
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    if let Some(p) = trace {
        let records = trace_sink.records();
        let body: String = penguin::scenario::trace_lines(&records, &trace_sink.rotations())
            .into_iter()
            .map(|line| format!("{line}\n"))
            .collect();
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = requests {
        let body: String = requests_log
            .iter()
            .map(|input| format!("{}\n", serde_json::json!({ "input": input })))
            .collect();
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn check_stream(path: &Path) -> Result<ExitCode, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report = validate_jsonl(std::io::BufReader::new(file));
    for v in &report.violations {
        println!("{}: {v}", path.display());
    }
    if report.is_ok() {
        println!("{}: ok, {} messages", path.display(), report.messages);
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

pub(crate) fn trace_check(files: &[PathBuf]) -> Result<ExitCode, String> {
    let mut failed = false;
    for f in files {
        let problems = check_trace(f);
        for p in &problems {
            println!("{p}");
            failed |= p.severity == Severity::Error;
        }
        if problems.is_empty() {
            println!("{}: ok", f.display());
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
