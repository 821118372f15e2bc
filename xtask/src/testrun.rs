//! The tests step of `cargo xtask ci`: every test binary built once by cargo, then run two at
//! a time by this module (the browser tests among them), while the feature checks, the doc
//! tests and the docs use the cores.
//!
//! `cargo test` runs its binaries one after another; the cluster's (a third of the run) spend
//! their time waiting on leases and on nats-servers, not on the CPU. Running the binaries here,
//! longest first, overlaps those waits with the rest; and since no cargo process holds the
//! build directory meanwhile, `alongside` (cargo commands) runs at the same time. Each binary
//! runs as `cargo test` would run it: in its package's folder, with `CARGO_MANIFEST_DIR` set.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One test binary: what `cargo test --no-run` built.
struct TestBinary {
    /// `package/target` as a person reads it.
    name: String,
    executable: PathBuf,
    package_dir: PathBuf,
}

impl TestBinary {
    /// A browser test of the web app: its ignored tests run too, one at a time (each drives
    /// its own Chromium).
    fn drives_a_browser(&self) -> bool {
        crate::WEB_TESTS
            .iter()
            .any(|t| self.name == format!("server/{t}"))
    }
}

/// The value of the string field `key` in one line of cargo's JSON (`"key":"…"`), unescaped.
fn string_field(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    None
}

/// The test binaries cargo reports building, from its `--message-format=json` lines.
fn test_binaries(json: &str) -> Vec<TestBinary> {
    json.lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        // The test profile: a bin target built for the integration tests has an executable too.
        .filter(|l| {
            l.find("\"profile\":{")
                .and_then(|i| l[i..].find('}').map(|j| &l[i..i + j]))
                .is_some_and(|p| p.contains("\"test\":true"))
        })
        .filter_map(|l| {
            let executable = PathBuf::from(string_field(l, "executable")?);
            let manifest = PathBuf::from(string_field(l, "manifest_path")?);
            let target = l
                .find("\"target\":{")
                .and_then(|i| string_field(&l[i..], "name"))
                .unwrap_or_default();
            let package_dir = manifest.parent()?.to_path_buf();
            let package = package_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Some(TestBinary {
                name: format!("{package}/{target}"),
                executable,
                package_dir,
            })
        })
        .collect()
}

/// The order binaries start in: the long ones that wait on nats-servers first, then the
/// browser tests, then the rest.
fn order(b: &TestBinary) -> u8 {
    if b.name.starts_with("cluster/") || b.name == "cli/cluster" {
        0
    } else if b.drives_a_browser() {
        1
    } else {
        2
    }
}

/// Builds the workspace's test binaries with `build` (a `cargo test --no-run` command), then
/// runs them `workers` at a time with `env`, while `alongside` runs its commands one after
/// another. Every binary runs, whatever the others do; the step fails when any of them, or
/// anything alongside, failed, and a failed binary's output is printed whole.
pub(crate) fn run(
    root: &Path,
    mut build: Command,
    env: &[(&str, &std::ffi::OsStr)],
    workers: usize,
    alongside: Vec<(String, Command)>,
) -> Result<(), String> {
    let started = Instant::now();
    println!("\n==> tests: build, then the binaries {workers} at a time");
    build
        .args(["--message-format=json-render-diagnostics"])
        .current_dir(root)
        .stderr(Stdio::inherit());
    let out = build
        .output()
        .map_err(|e| format!("tests: cannot start the build: {e}"))?;
    if !out.status.success() {
        return Err(format!("tests: the build failed ({})", out.status));
    }
    let mut binaries = test_binaries(&String::from_utf8_lossy(&out.stdout));
    if binaries.is_empty() {
        return Err("tests: cargo reported no test binary".into());
    }
    binaries.sort_by_key(order);
    println!(
        "    built {} test binaries in {:.1}s",
        binaries.len(),
        started.elapsed().as_secs_f64()
    );
    let queue = Arc::new(Mutex::new(VecDeque::from(binaries)));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let env: Vec<(String, std::ffi::OsString)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..workers {
            let (queue, failures, env) = (queue.clone(), failures.clone(), env.clone());
            s.spawn(move || loop {
                let Some(b) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front() else {
                    return;
                };
                let t = Instant::now();
                let browser: &[&str] = match b.drives_a_browser() {
                    true => &["--include-ignored", "--test-threads=1"],
                    false => &[],
                };
                let result = Command::new(&b.executable)
                    .args(browser)
                    .current_dir(&b.package_dir)
                    .env("CARGO_MANIFEST_DIR", &b.package_dir)
                    .envs(env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .output();
                let secs = t.elapsed().as_secs_f64();
                match result {
                    Ok(o) if o.status.success() => println!("    ok {} ({secs:.1}s)", b.name),
                    Ok(o) => {
                        println!(
                            "    FAILED {} ({secs:.1}s, {}):\n{}{}",
                            b.name,
                            o.status,
                            String::from_utf8_lossy(&o.stdout),
                            String::from_utf8_lossy(&o.stderr)
                        );
                        failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(b.name.clone());
                    }
                    Err(e) => {
                        println!("    FAILED {}: cannot start: {e}", b.name);
                        failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(b.name.clone());
                    }
                }
            });
        }
        // Cargo's own work meanwhile: no cargo process holds the build directory now.
        for (label, cmd) in alongside {
            if let Err(e) = crate::run(root, &label, cmd) {
                failures.lock().unwrap_or_else(|p| p.into_inner()).push(e);
            }
        }
    });
    let failures = failures.lock().unwrap_or_else(|p| p.into_inner()).clone();
    println!(
        "<== tests: {} in {:.1}s",
        if failures.is_empty() { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f64()
    );
    match failures.is_empty() {
        true => Ok(()),
        false => Err(format!("tests failed: {}", failures.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_binaries_are_read_from_cargos_json() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/w/crates/cli/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"cluster","src_path":"/w/crates/cli/tests/cluster.rs","test":true},"profile":{"opt_level":"0","debuginfo":1,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/t/cluster-1"],"executable":"/t/cluster-1","fresh":true}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/w/crates/cli/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"penguin","src_path":"/w/crates/cli/src/main.rs","test":true},"profile":{"opt_level":"0","debuginfo":1,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/t/penguin"],"executable":"/t/penguin","fresh":true}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        let found = test_binaries(json);
        assert_eq!(found.len(), 1, "the bin built for the tests is not one");
        assert_eq!(found[0].name, "cli/cluster");
        assert_eq!(found[0].executable, PathBuf::from("/t/cluster-1"));
        assert_eq!(found[0].package_dir, PathBuf::from("/w/crates/cli"));
        assert_eq!(order(&found[0]), 0, "the cluster's binary starts first");
    }

    #[test]
    fn the_browser_tests_run_with_their_ignored_tests_one_at_a_time() {
        let binary = |name: &str| TestBinary {
            name: name.to_owned(),
            executable: PathBuf::from("/t/x"),
            package_dir: PathBuf::from("/w/crates/server"),
        };
        for name in crate::WEB_TESTS {
            let b = binary(&format!("server/{name}"));
            assert!(b.drives_a_browser(), "{name}");
            assert_eq!(order(&b), 1);
        }
        assert!(!binary("server/bounded").drives_a_browser());
        assert_eq!(order(&binary("server/bounded")), 2);
    }
}
