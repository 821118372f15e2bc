//! What a checkpoint costs on a workspace of 10,000 files (40 MB) in 100 folders, with a
//! 20,000-file ignored `target/` beside them: the first (every file hashed and stored), another
//! session's first (every file hashed, nothing stored), one with nothing changed (a listing and a `stat` per file: what most tasks pay twice), one after
//! 10 files changed, and planning a rewind to the first.
//!
//! Run with `cargo bench -p penguin-tools --bench checkpoint_bench` (plain `std::time::Instant`,
//! no harness). The tree goes under the target directory, not `/tmp` (often a tmpfs).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

use penguin_tools::checkpoint::{self, Limits, Store};

const FOLDERS: usize = 100;
const FILES_PER_FOLDER: usize = 100;
const FILE_BYTES: usize = 4096;

fn write_tree(root: &Path) {
    for d in 0..FOLDERS {
        let dir = root.join(format!("src/m{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_FOLDER {
            let line = format!("// module {d} file {f}\n");
            let body = line.repeat(FILE_BYTES / line.len() + 1);
            std::fs::write(dir.join(format!("f{f}.rs")), &body.as_bytes()[..FILE_BYTES]).unwrap();
        }
    }
    // Build output, excluded by the ignore file: walked past, never read.
    std::fs::write(root.join(".gitignore"), "/target/\n").unwrap();
    for d in 0..200 {
        let dir = root.join(format!("target/debug/deps/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("o{f}.o")), b"object").unwrap();
        }
    }
}

fn best_of(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..n).map(|_| f()).min().unwrap()
}

fn main() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench/checkpoint");
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("workspace");
    let data = base.join("data");
    std::fs::create_dir_all(&ws).unwrap();
    write_tree(&ws);
    let limits = Limits::default();

    let store = Store::new(&data);
    let t = Instant::now();
    let first = checkpoint::take(&ws, &store, None, &limits).unwrap();
    let first_took = t.elapsed();
    assert_eq!(
        first
            .entries
            .values()
            .filter(|e| matches!(e, checkpoint::Entry::File { .. }))
            .count(),
        FOLDERS * FILES_PER_FOLDER + 1
    );

    // Another session's first in the same workspace: every file read and hashed, none stored.
    let warm = best_of(3, || {
        let t = Instant::now();
        checkpoint::take(&ws, &store, None, &limits).unwrap();
        t.elapsed()
    });

    let unchanged = best_of(5, || {
        let t = Instant::now();
        checkpoint::take(&ws, &store, Some(&first), &limits).unwrap();
        t.elapsed()
    });

    let mut k = 0;
    let ten_changed = best_of(5, || {
        k += 1;
        for f in 0..10 {
            std::fs::write(ws.join(format!("src/m{f}/f0.rs")), format!("changed {k}")).unwrap();
        }
        let t = Instant::now();
        checkpoint::take(&ws, &store, Some(&first), &limits).unwrap();
        t.elapsed()
    });

    let plan = best_of(5, || {
        let t = Instant::now();
        let plan = checkpoint::plan(&ws, &store, &first).unwrap();
        assert_eq!(plan.restore.len(), 10);
        t.elapsed()
    });

    let stored: u64 = walk_size(&data);
    println!(
        "checkpoint of {} files ({} MB), 20,000 ignored:",
        FOLDERS * FILES_PER_FOLDER,
        (FOLDERS * FILES_PER_FOLDER * FILE_BYTES) >> 20
    );
    println!(
        "  first (all hashed and stored)   {:>8.1} ms",
        ms(first_took)
    );
    println!("  a new session's first           {:>8.1} ms", ms(warm));
    println!(
        "  nothing changed                 {:>8.1} ms",
        ms(unchanged)
    );
    println!(
        "  10 files changed                {:>8.1} ms",
        ms(ten_changed)
    );
    println!("  planning a rewind to the first  {:>8.1} ms", ms(plan));
    println!(
        "  store on disk                   {:>8.1} MB",
        stored as f64 / 1e6
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn walk_size(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| walk_size(&e.unwrap().path()))
        .sum()
}
