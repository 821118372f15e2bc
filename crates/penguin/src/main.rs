//! The `penguin` command.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use penguin::scenario::{run_scenario_blocking, Scenario};

#[derive(Parser, Debug)]
#[command(
    name = "penguin",
    version,
    about = "An agent harness: one ordered stream between you, a model and its tools."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Scenario files: a scripted model and tools driving the real engine.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
}

#[derive(Subcommand, Debug)]
enum ScenarioCommand {
    /// Run a scenario; the stream goes to stdout as JSON lines.
    Run {
        /// The scenario file.
        scenario: PathBuf,
        /// Write every trace record here, one per line.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Write each model request's new messages here, one `{"input": [...]}` per line.
        #[arg(long)]
        requests: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Scenario {
            command:
                ScenarioCommand::Run {
                    scenario,
                    trace,
                    requests,
                },
        } => scenario_run(scenario, trace, requests),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("penguin: {e}");
            ExitCode::FAILURE
        }
    }
}

fn scenario_run(
    path: PathBuf,
    trace: Option<PathBuf>,
    requests: Option<PathBuf>,
) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let scenario =
        Scenario::parse(&text).map_err(|e| format!("invalid scenario {}: {e}", path.display()))?;
    let out =
        run_scenario_blocking(scenario).map_err(|e| format!("cannot start the runtime: {e}"))?;
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    for frame in &out.stream {
        writeln!(stdout, "{}", frame.json()).map_err(|e| format!("stdout: {e}"))?;
    }
    stdout.flush().map_err(|e| format!("stdout: {e}"))?;
    if let Some(p) = trace {
        let body: String = out
            .trace
            .iter()
            .map(|f| format!("{}\n", f.json()))
            .collect();
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = requests {
        let body: String = out
            .requests
            .iter()
            .map(|input| format!("{}\n", serde_json::json!({ "input": input })))
            .collect();
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
