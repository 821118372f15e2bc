//! Project automation: `cargo xtask ci`, `cargo xtask bench`.
//!
//! Each step prints the command it runs and the first failure stops everything.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("bench") => bench(&root),
        _ => {
            eprintln!("usage: cargo xtask <ci|bench>\n  ci     formatting, clippy, tests, docs and the scenario check\n  bench  the benchmarks");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(root: &Path, label: &str, mut cmd: Command) -> Result<(), String> {
    cmd.current_dir(root);
    let shown = format!("{cmd:?}").replace('"', "");
    println!("\n==> {label}: {shown}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{label}: cannot start: {e}"))?;
    println!(
        "<== {label}: {} in {:.1}s",
        if status.success() { "ok" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if status.success() {
        Ok(())
    } else {
        Err(format!("{label} failed ({status})"))
    }
}

fn ci(root: &Path) -> Result<(), String> {
    let total = Instant::now();
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(root, "format", fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]);
    run(root, "clippy", clippy)?;

    let mut test = cargo();
    test.args(["test", "--workspace", "--all-features"]);
    run(root, "tests", test)?;

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps", "--all-features"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run(root, "docs", doc)?;

    let mut build = cargo();
    build.args(["build", "-p", "penguin"]);
    run(root, "build penguin", build)?;
    let shared_check = root.join("../shared/tools/check-scenarios.sh");
    if shared_check.exists() {
        let mut check = Command::new(shared_check);
        check.arg("target/debug/penguin");
        run(root, "scenarios (shared)", check)?;
    } else {
        // The in-repo copy of the scenarios is checked by `tests/scenarios.rs` above.
        println!("\n--- ../shared/tools/check-scenarios.sh not found; the in-repo scenario copies were checked by the tests");
    }
    println!(
        "\nci: all steps passed in {:.0}s",
        total.elapsed().as_secs_f64()
    );
    Ok(())
}

fn bench(root: &Path) -> Result<(), String> {
    let mut b = cargo();
    b.args(["bench", "--workspace", "--all-features"]);
    run(root, "bench", b)
}
