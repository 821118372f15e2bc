//! Project automation: `cargo xtask ci`, `tidy`, `package`, `e2e`, `web`, `bench`.
//!
//! Each step prints the command it runs and the first failure stops everything.

mod deps;
mod resume_bench;
mod testrun;
mod tidy;
mod workloads;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("tidy") => tidy_steps(&root),
        Some("package") => package(&root),
        Some("e2e") => e2e(&root),
        Some("web") => web(&root),
        Some("bench") => bench(&root, args.get(1).map(String::as_str)),
        _ => {
            eprintln!("usage: cargo xtask <ci|tidy|package|e2e|web|bench>\n  ci     formatting, clippy, the MCP test servers, tests, the real-model e2e, the web app in a browser, docs, the packages and the scenario check\n  tidy   only the quick first steps of ci: formatting, the tidy checks and the dependency checks\n  package  only the packages: each library crate packaged, and the unpacked packages built and test-compiled together (target/package-check)\n  e2e    only the real-model end-to-end tests (starts and stops a local llama.cpp server)\n  web    only the web app's tests in headless Chromium (installs it when missing)\n  bench  the benchmarks: micro, whole-process, serving and the cluster (`bench serve`: the server workload alone; `bench cluster`: 1,000 sessions on a plain server and on cluster nodes (1 on one nats-server, 1 and 3 on three); `bench resume`: the 28.5 MB resume beside the reference)");
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

/// The checks that need no build: formatting, tidy, dependencies.
fn tidy_steps(root: &Path) -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(root, "format", fmt)?;

    println!("\n==> tidy: no module imports its way round in a loop");
    tidy::check(root).map_err(|e| format!("tidy:\n{e}"))?;
    println!("<== tidy: ok");

    println!("\n==> dependencies: every declared dependency used, versions in the workspace");
    deps::check(root).map_err(|e| format!("dependencies:\n{e}"))?;
    println!("<== dependencies: ok");
    Ok(())
}

fn ci(root: &Path) -> Result<(), String> {
    let total = Instant::now();
    tidy_steps(root)?;

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

    // The MCP tests talk to real servers (npm packages); installed once, idempotently.
    let mcp_servers = root.join("target/mcp-servers");
    let mut install = Command::new("bash");
    install
        .arg("scripts/install-mcp-servers.sh")
        .arg(&mcp_servers);
    run(root, "MCP test servers", install)?;

    // The sandbox tests hold commands to every layer, namespaces included.
    let mut sandbox = Command::new("bash");
    sandbox.arg("scripts/install-sandbox.sh");
    run(root, "install sandbox", sandbox)?;

    // The cluster tests start real nats-servers (a 3-node JetStream cluster on loopback).
    let mut nats = Command::new("bash");
    nats.arg("scripts/install-nats.sh");
    run(root, "install nats-server", nats)?;

    // The browser tests run among the test binaries (`testrun.rs` gives them their flags).
    install_browser(root)?;

    // The test binaries run two at a time (`testrun.rs`); meanwhile cargo checks the
    // smaller feature sets, runs the doc tests and builds the docs.
    let mut build = cargo();
    build.args(["test", "--workspace", "--all-features", "--no-run"]);
    let mut doc_tests = cargo();
    doc_tests
        .args(["test", "--workspace", "--all-features", "--doc"])
        .env("PENGUIN_MCP_SERVERS", &mcp_servers);
    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps", "--all-features"])
        .env("RUSTDOCFLAGS", "-D warnings");
    let mut alongside = feature_checks();
    alongside.push(("doc tests".to_owned(), doc_tests));
    alongside.push(("docs".to_owned(), doc));
    testrun::run(
        root,
        build,
        &[("PENGUIN_MCP_SERVERS", mcp_servers.as_os_str())],
        2,
        alongside,
    )?;

    e2e(root)?;

    package(root)?;

    // The binary the tests step built (for penguin-cli's tests), with its feature set: asking
    // for `--bin penguin` alone would unify features without the dev-dependencies and build
    // it all again.
    let mut build = cargo();
    build.args(["test", "--workspace", "--all-features", "--no-run"]);
    run(root, "build penguin", build)?;
    let shared_check = root.join("../shared/tools/check-scenarios.sh");
    if shared_check.exists() {
        // The binary the build step just made, wherever cargo put it.
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let mut check = Command::new(shared_check);
        // Every shared scenario: the base set, v2 (compaction, notices, bootstrap records,
        // compared strictly) and the regressions random differential testing found.
        check.arg("--all").arg(target.join("debug").join("penguin"));
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

/// Each provider feature must build alone, and the trait with none of them; the embedder's
/// smallest builds (the facade and the session layer without server, built-in tools or TLS;
/// the tools' light core) must build too, with the session layer's tests.
fn feature_checks() -> Vec<(String, Command)> {
    let mut features: Vec<(&str, Vec<&str>)> = vec![(
        "penguin-llm-providers",
        vec!["--lib", "--no-default-features"],
    )];
    for f in [
        "openai-chat",
        "anthropic-messages",
        "openai-responses",
        "gemini",
        "ollama",
    ] {
        features.push((
            "penguin-llm-providers",
            vec!["--lib", "--no-default-features", "--features", f],
        ));
    }
    features.push(("penguin-harness", vec!["--no-default-features"]));
    features.push((
        "penguin-agent",
        vec!["--no-default-features", "--all-targets"],
    ));
    features.push(("penguin-tools", vec!["--lib", "--no-default-features"]));
    features
        .into_iter()
        .map(|(package, args)| {
            let mut check = cargo();
            check.args(["check", "-p", package]).args(&args);
            (format!("{package} features"), check)
        })
        .collect()
}

/// The packages published: every workspace package but these (`publish = false`).
const UNPUBLISHED: [&str; 3] = ["xtask", "penguin-tests", "penguin-serve-load"];

/// Every library crate can be picked as a dependency: each packages, and what it packages
/// builds on its own, dependencies on the others resolved to their packaged sources as the
/// registry would give them. `cargo package` would verify each crate with a build of its own
/// (twelve builds of the same dependencies); instead the packages are made unverified and
/// their unpacked sources built together once, in a throwaway workspace under
/// `target/package-check` whose members are the unpacked packages, patched to each other. A
/// file a package leaves out fails that build as it failed cargo's own verification.
fn package(root: &Path) -> Result<(), String> {
    let target = target_dir(root);
    let packaged = target.join("package");
    // Only this run's packages are unpacked below: a crate renamed or removed since an
    // earlier run must not be checked from its stale `.crate`.
    if let Ok(entries) = std::fs::read_dir(&packaged) {
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "crate") {
                std::fs::remove_file(e.path())
                    .map_err(|err| format!("removing {}: {err}", e.path().display()))?;
            }
        }
    }
    let mut package = cargo();
    package.args(["package", "--workspace", "--no-verify", "--allow-dirty"]);
    for name in UNPUBLISHED {
        package.args(["--exclude", name]);
    }
    run(root, "package", package)?;

    let check = target.join("package-check");
    if check.exists() {
        std::fs::remove_dir_all(&check)
            .map_err(|e| format!("removing {}: {e}", check.display()))?;
    }
    std::fs::create_dir_all(&check).map_err(|e| format!("{}: {e}", check.display()))?;
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&packaged)
        .map_err(|e| format!("{}: {e}", packaged.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "crate"))
        .collect();
    crates.sort();
    if crates.is_empty() {
        return Err(format!("package: no .crate in {}", packaged.display()));
    }
    let mut members = Vec::new();
    for file in &crates {
        let mut untar = Command::new("tar");
        untar.arg("-xzf").arg(file).arg("-C").arg(&check);
        let status = untar
            .status()
            .map_err(|e| format!("tar: cannot start: {e}"))?;
        if !status.success() {
            return Err(format!("unpacking {} failed ({status})", file.display()));
        }
        // `<name>-<version>.crate` unpacks into `<name>-<version>/`.
        let dir = file
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| format!("{}: not a crate file name", file.display()))?
            .to_owned();
        let manifest = std::fs::read_to_string(check.join(&dir).join("Cargo.toml"))
            .map_err(|e| format!("{dir}/Cargo.toml: {e}"))?;
        let name = package_name(&manifest).ok_or_else(|| format!("{dir}: no package name"))?;
        members.push((name, dir, manifest));
    }
    std::fs::write(check.join("Cargo.toml"), check_manifest(root, &members)?)
        .map_err(|e| format!("{}: {e}", check.display()))?;
    // The versions the workspace was tested with (cargo drops the entries of the packages
    // that are not here).
    std::fs::copy(root.join("Cargo.lock"), check.join("Cargo.lock"))
        .map_err(|e| format!("copying Cargo.lock: {e}"))?;

    // What a user of each crate builds (the libraries, the binary, the examples) and their
    // unit tests, in one build: the binary's test harness compiles the binary's code. The
    // integration tests are left to the tests step: several include a harness shared through
    // the repository (`#[path = "../../…"]`), which no package carries.
    let mut build = cargo();
    build
        .args(["test", "--no-run", "--lib", "--bins", "--examples"])
        .args(["--workspace", "--all-features", "--manifest-path"])
        .arg(check.join("Cargo.toml"))
        // The workspace's target directory and profile, so the dependencies the earlier steps
        // built are reused and only the unpacked crates are compiled. Their debug info and
        // incremental state would be thrown away unread (neither changes the dependencies'
        // build: their profile turns debug info off anyway).
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0");
    run(root, "packaged crates build", build)
}

/// The `name` of a manifest's `[package]`.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some((key, value)) = line.split_once('=') {
                if key.trim() == "name" {
                    return Some(value.trim().trim_matches('"').to_owned());
                }
            }
        }
    }
    None
}

/// The throwaway workspace's manifest: the unpacked packages as members, each one another
/// depends on patched in for the registry's, and the workspace's own profiles (so the
/// dependencies' build is the one the other steps made).
fn check_manifest(root: &Path, members: &[(String, String, String)]) -> Result<String, String> {
    let workspace =
        std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    let mut out = String::from(
        "# Written by `cargo xtask package`: the unpacked packages, built together.\n[workspace]\nresolver = \"2\"\nmembers = [\n",
    );
    for (_, dir, _) in members {
        out.push_str(&format!("    {dir:?},\n"));
    }
    out.push_str("]\n\n[patch.crates-io]\n");
    for (name, dir, _) in members {
        // A patch nothing uses (the CLI's) would only be warned about.
        // A dependency renamed (`penguin = { package = "penguin-harness" }`) names it in
        // `package`.
        let used = members.iter().any(|(other, _, manifest)| {
            other != name
                && (manifest.contains(&format!(".{name}]"))
                    || manifest.contains(&format!("package = \"{name}\"")))
        });
        if used {
            out.push_str(&format!("{name} = {{ path = {dir:?} }}\n"));
        }
    }
    let mut in_profile = false;
    for line in workspace.lines() {
        if line.starts_with('[') {
            in_profile = line.starts_with("[profile.");
            if in_profile {
                out.push('\n');
            }
        }
        if in_profile {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// Stops the model server when dropped, so a failed or panicking step still stops it.
struct ModelServer<'a> {
    root: &'a Path,
}

impl Drop for ModelServer<'_> {
    fn drop(&mut self) {
        let stopped = Command::new(python())
            .args(["scripts/model-server.py", "stop"])
            .current_dir(self.root)
            .status();
        if !matches!(stopped, Ok(s) if s.success()) {
            eprintln!(
                "xtask: could not stop the model server ({stopped:?}); see target/model-server/pid"
            );
        }
    }
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// A real llama.cpp server (SmolLM2-135M through the `xllamacpp` wheel, set up by
/// `scripts/model-server.py` in `target/model-venv`) driven by every adapter it speaks.
fn e2e(root: &Path) -> Result<(), String> {
    let label = "e2e model server";
    // The script bounds its own wait for /health; 180 s covers a cold pip download too.
    let mut start = Command::new(python());
    start
        .args(["scripts/model-server.py", "start", "--timeout", "180"])
        .current_dir(root)
        .stderr(std::process::Stdio::inherit());
    println!("\n==> {label}: {}", format!("{start:?}").replace('"', ""));
    let began = Instant::now();
    let output = start
        .output()
        .map_err(|e| format!("{label}: cannot start: {e}"))?;
    // From here on the server may be running, whatever the exit status says.
    let _server = ModelServer { root };
    if !output.status.success() {
        return Err(format!("{label} failed ({})", output.status));
    }
    let url = String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_owned();
    if !url.starts_with("http://") {
        return Err(format!("{label}: expected a base URL, got {url:?}"));
    }
    println!(
        "<== {label}: {url} in {:.1}s",
        began.elapsed().as_secs_f64()
    );
    let mut test = cargo();
    // The workspace's own feature set, so the tests step's build is reused.
    test.args([
        "test",
        "--workspace",
        "--all-features",
        "--test",
        "real_server",
        "--test",
        "real_model",
        "--",
        "--ignored",
    ])
    .env("PENGUIN_MODEL_SERVER", &url);
    run(root, "e2e tests", test)
}

/// The browser tests of the server's web app (ignored by a plain `cargo test`): against one
/// server (`web`), its models, usage, files and session-list pages, and against two nodes of a
/// cluster over a 3-node nats-server cluster (`web_cluster`, feature `cluster`).
pub(crate) const WEB_TESTS: [&str; 6] = [
    "web",
    "web_models",
    "web_usage",
    "web_files",
    "web_sessions",
    "web_cluster",
];

/// Installs what the browser tests need: Debian's chromium and chromedriver, and nats-server
/// for the cluster's page.
fn install_browser(root: &Path) -> Result<(), String> {
    let mut install = Command::new("bash");
    install.arg("scripts/install-browser.sh");
    run(root, "install browser", install)?;
    let mut nats = Command::new("bash");
    nats.arg("scripts/install-nats.sh");
    run(root, "install nats-server", nats)
}

/// The web app in a real headless Chromium: installs Debian's chromium and chromedriver (and
/// nats-server, for the cluster's page) when missing, then runs the browser tests (ignored by
/// a plain `cargo test`). One test at a time: each drives its own browser, and two cores are
/// better spent on one.
fn web(root: &Path) -> Result<(), String> {
    install_browser(root)?;
    let mut test = cargo();
    // The tests step's flags, so its build serves this one too.
    test.args(["test", "--workspace", "--all-features"]);
    for name in WEB_TESTS {
        test.args(["--test", name]);
    }
    test.args(["--", "--ignored", "--test-threads=1"]);
    run(root, "web app in Chromium", test)
}

/// `cargo xtask bench [serve|cluster|resume]`: everything, or the server workload alone, or the
/// cluster workload alone (1,000 sessions on a node over 1 nats-server, and on 1 and on 3 nodes
/// over 3), or the resume workload alone (`resume_bench.rs`).
fn bench(root: &Path, only: Option<&str>) -> Result<(), String> {
    let (serve_only, cluster_only) = match only {
        None => (false, false),
        Some("serve") => (true, false),
        Some("cluster") => (false, true),
        Some("resume") => return resume_bench::alone(root),
        Some(other) => {
            return Err(format!(
                "bench: unknown part {other:?} (only `serve`, `cluster` or `resume`)"
            ))
        }
    };
    if !serve_only && !cluster_only {
        let mut b = cargo();
        b.args(["bench", "--workspace", "--all-features"]);
        run(root, "bench", b)?;
    }
    // Two packages in one build: the load client adds nothing to penguin's features (its
    // hyper client and nix features are already in penguin's tree).
    let mut release = cargo();
    release.args([
        "build",
        "--release",
        "-p",
        "penguin-cli",
        "-p",
        "penguin-serve-load",
    ]);
    run(root, "release build", release)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let penguin = target.join("release").join("penguin");
    if cluster_only {
        return cluster(root, &target, &penguin);
    }
    if !serve_only {
        workloads::run(root, &penguin)?;
        resume_bench::run(root, &penguin)?;
    }
    serve(root, &target, &penguin)?;
    if !serve_only {
        cluster(root, &target, &penguin)?;
    }
    Ok(())
}

/// The cluster workload (`benches/serve-load/src/cluster.rs`): the same load client against
/// one plain server, then one cluster node on one nats-server, and one and three on three
/// nats-servers (skipped when nats-server is missing); written to `target/bench/cluster.json`.
fn cluster(root: &Path, target: &Path, penguin: &Path) -> Result<(), String> {
    let bench = root.join("target/bench");
    std::fs::create_dir_all(&bench).map_err(|e| format!("{}: {e}", bench.display()))?;
    let mut load = Command::new(target.join("release").join("penguin-serve-load"));
    load.arg(penguin)
        .args(["--only", "cluster", "--dir"])
        .arg(bench.join("serve"))
        .arg("--out")
        .arg(bench.join("cluster.json"));
    run(root, "cluster workload", load)
}

/// The server workload (`benches/serve-load`): the release `penguin serve` driven through
/// sockets by the release load client; the table is printed and written to
/// `target/bench/serve.json`.
fn serve(root: &Path, target: &Path, penguin: &Path) -> Result<(), String> {
    let bench = root.join("target/bench");
    std::fs::create_dir_all(&bench).map_err(|e| format!("{}: {e}", bench.display()))?;
    let mut load = Command::new(target.join("release").join("penguin-serve-load"));
    load.arg(penguin)
        .arg("--dir")
        .arg(bench.join("serve"))
        .arg("--out")
        .arg(bench.join("serve.json"));
    run(root, "serve workload", load)
}
