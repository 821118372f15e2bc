//! `cargo xtask ci`'s dependency hygiene: every dependency a manifest declares is used by that
//! package's code, and versions are declared once, in the workspace; every library crate states
//! the Rust version it is built with (the workspace's `rust-version`, which must be the
//! toolchain `rust-toolchain.toml` pins), and no manifest carries placeholder metadata.
//!
//! The facade stays thin ([`facade_budget`]): with `--no-default-features` (an agent with a
//! tool of its own, no server, no built-in tools) it pulls at most [`FACADE_MAX_CRATES`]
//! crates, and its own code stays under [`FACADE_MAX_LINES`] lines.
//!
//! "Used" means the crate's name appears as a path root (`name::`, `use name`, `extern crate
//! name`, or a `#[name::…]` attribute) in one of the package's Rust files. That is what
//! cargo-machete checks too; it needs no nightly compiler and no download.

use std::path::{Path, PathBuf};

/// One `[dependencies]`-like entry.
#[derive(Debug, PartialEq)]
struct Dep {
    name: String,
    section: String,
    /// The line declares its own version instead of `workspace = true`.
    own_version: bool,
}

/// The dependency entries of a manifest.
fn dependencies(manifest: &str) -> Vec<Dep> {
    let mut out = Vec::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_owned();
            continue;
        }
        let is_deps = matches!(
            section.as_str(),
            "dependencies" | "dev-dependencies" | "build-dependencies"
        );
        if !is_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let (name, workspace) = match key.strip_suffix(".workspace") {
            Some(n) => (n, true),
            None => (key, value.contains("workspace = true")),
        };
        out.push(Dep {
            name: name.to_owned(),
            section: section.clone(),
            own_version: !workspace && !value.contains("path ="),
        });
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n == "target" || n == "snapshots")
            {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `ident` is used as a crate path in `code`.
fn uses(code: &str, ident: &str) -> bool {
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(pos) = code[from..].find(ident) {
        let start = from + pos;
        let end = start + ident.len();
        from = end;
        let before_ok = start == 0 || {
            let b = bytes[start - 1];
            !(b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        };
        if !before_ok {
            continue;
        }
        let rest = &code[end..];
        let prefix = code[..start].trim_end();
        if rest.starts_with("::")
            || prefix.ends_with("use")
            || prefix.ends_with("extern crate")
            || (prefix.ends_with("#[") && rest.starts_with("::"))
        {
            return true;
        }
    }
    false
}

/// Checks every package under `root` (its `crates/*`, `benches/*`, `tests`, `examples` and
/// `xtask`).
pub fn check(root: &Path) -> Result<(), String> {
    let mut packages: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .map_err(|e| format!("cannot list crates/: {e}"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    if let Ok(benches) = std::fs::read_dir(root.join("benches")) {
        packages.extend(benches.flatten().map(|e| e.path()));
    }
    packages.push(root.join("tests"));
    packages.push(root.join("examples"));
    packages.push(root.join("xtask"));
    packages.sort();
    let mut problems = Vec::new();
    for dir in packages {
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        let mut code: String = files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .collect::<Vec<_>>()
            .join("\n");
        // A README the crate's docs include is a doctest like any other: its examples use
        // dev-dependencies too.
        if code.contains("include_str!(\"../README.md\")") {
            if let Ok(readme) = std::fs::read_to_string(dir.join("README.md")) {
                code.push('\n');
                code.push_str(&readme);
            }
        }
        for dep in dependencies(&text) {
            let shown = manifest.strip_prefix(root).unwrap_or(&manifest).display();
            if !uses(&code, &dep.name.replace('-', "_")) {
                problems.push(format!(
                    "{shown}: [{}] {} is not used by the package's code",
                    dep.section, dep.name
                ));
            }
            if dep.own_version {
                problems.push(format!(
                    "{shown}: [{}] {} declares its own version; declare it once in the workspace's [workspace.dependencies]",
                    dep.section, dep.name
                ));
            }
        }
    }
    problems.extend(publishing(root));
    problems.extend(facade_budget(root));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Most crates (itself included) `penguin-harness --no-default-features` may pull: what an
/// embedder of an agent with a custom tool and no HTTP server gets.
pub const FACADE_MAX_CRATES: usize = 120;

/// Most lines of the facade's own code (`crates/penguin/src`): re-exports and wiring, no
/// session logic.
pub const FACADE_MAX_LINES: usize = 1_000;

/// The facade's budgets: the crates its smallest build pulls (normal dependencies, each name
/// and version once, as `cargo tree -e normal --prefix none | sort -u` lists them) and the
/// lines of its own code.
fn facade_budget(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let tree =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root)
            .args([
                "tree",
                "-p",
                "penguin-harness",
                "--no-default-features",
                "-e",
                "normal",
                "--prefix",
                "none",
            ])
            .output();
    match tree {
        Ok(out) if out.status.success() => {
            let crates = distinct_crates(&String::from_utf8_lossy(&out.stdout));
            if crates > FACADE_MAX_CRATES {
                problems.push(format!(
                    "crates/penguin: `cargo tree -p penguin-harness --no-default-features -e normal` lists {crates} crates, over the budget of {FACADE_MAX_CRATES}: an embedder without the server and the built-in tools pulls what no feature leaves out"
                ));
            }
        }
        Ok(out) => problems.push(format!(
            "crates/penguin: cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => problems.push(format!("crates/penguin: cannot run cargo tree: {e}")),
    }
    let mut files = Vec::new();
    rust_files(&root.join("crates/penguin/src"), &mut files);
    let lines: usize = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .map(|text| text.lines().count())
        .sum();
    if lines >= FACADE_MAX_LINES {
        problems.push(format!(
            "crates/penguin/src: {lines} lines of the facade's own code, at or over the budget of {FACADE_MAX_LINES}: what it does belongs in the crate below it"
        ));
    }
    problems
}

/// The distinct crates of `cargo tree --prefix none` output: each line names one, repeats
/// marked ` (*)`, proc macros ` (proc-macro)`.
fn distinct_crates(tree: &str) -> usize {
    tree.lines()
        .map(|l| l.replace(" (*)", "").replace(" (proc-macro)", ""))
        .filter(|l| !l.trim().is_empty())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// The value of `key = "…"` in `text`, at the start of a line.
fn string_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// What a registry user reads of the manifests: every crate under `crates/` states the
/// workspace's `rust-version`, that version is the pinned toolchain's, and nothing says
/// `example.invalid`.
fn publishing(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let workspace = read(&root.join("Cargo.toml"));
    let toolchain = read(&root.join("rust-toolchain.toml"));
    match (
        string_value(&workspace, "rust-version"),
        string_value(&toolchain, "channel"),
    ) {
        (Some(msrv), Some(channel)) if channel.starts_with(&format!("{msrv}.")) || channel == msrv => {}
        (msrv, channel) => problems.push(format!(
            "Cargo.toml: [workspace.package] rust-version {msrv:?} is not the toolchain rust-toolchain.toml pins ({channel:?})"
        )),
    }
    let mut manifests = vec![root.join("Cargo.toml")];
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        manifests.extend(crates.flatten().map(|e| e.path().join("Cargo.toml")));
    }
    manifests.sort();
    for manifest in manifests {
        let text = read(&manifest);
        let shown = manifest.strip_prefix(root).unwrap_or(&manifest).display();
        if text.contains("example.invalid") {
            problems.push(format!(
                "{shown}: placeholder metadata (example.invalid): leave out what has no true value"
            ));
        }
        if manifest != root.join("Cargo.toml") && !text.contains("rust-version.workspace = true") {
            problems.push(format!(
                "{shown}: no `rust-version.workspace = true`: a registry user must see the Rust version it builds with"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_crate_once() {
        let tree = "penguin-harness v0.1.0 (/w/crates/penguin)\nserde v1.0.0\nserde_derive v1.0.0 (proc-macro)\nserde v1.0.0 (*)\nsyn v2.0.0\nsyn v3.0.0\n";
        assert_eq!(distinct_crates(tree), 5);
    }

    #[test]
    fn reads_dependency_sections() {
        let m = "[package]\nname = \"x\"\n[dependencies]\nfoo.workspace = true\nbar = { workspace = true, features = [\"a\"] }\nbaz = \"1\"\nown = { path = \"../own\" }\n[features]\ndefault = []\n[dev-dependencies]\nqux.workspace = true\n";
        let deps = dependencies(m);
        let names: Vec<(&str, bool)> = deps
            .iter()
            .map(|d| (d.name.as_str(), d.own_version))
            .collect();
        assert_eq!(
            names,
            [
                ("foo", false),
                ("bar", false),
                ("baz", true),
                ("own", false),
                ("qux", false)
            ]
        );
        assert_eq!(deps[4].section, "dev-dependencies");
    }

    #[test]
    fn the_workspaces_manifests_state_the_pinned_rust_version() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert_eq!(publishing(root), Vec::<String>::new());
        assert_eq!(
            string_value("[package]\nrust-version = \"1.95\"\n", "rust-version"),
            Some("1.95")
        );
    }

    #[test]
    fn finds_crate_paths_only() {
        assert!(uses("use serde_json::Value;", "serde_json"));
        assert!(uses("let v = serde_json::json!({});", "serde_json"));
        assert!(uses("#[tokio::test]\nfn t() {}", "tokio"));
        assert!(uses("use futures;", "futures"));
        assert!(!uses("let serde_json_like = 1;", "serde_json"));
        assert!(!uses("my_tokio::spawn()", "tokio"));
        assert!(!uses("// mentions tokio in prose", "tokio"));
    }
}
