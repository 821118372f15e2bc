//! `penguin-serve-load`: the server workload of `cargo xtask bench` (docs/performance.md,
//! "Serving"). It starts the real `penguin serve` binary with the zero-delay scripted model on
//! a free loopback port and drives it through sockets: sessions created per second, tasks per
//! second and their latency at 10/100/500 concurrent clients, listing 10,000 sessions, memory
//! per idle session, the fan-out of one burst to 100 and to 10,000 subscribers, and what a
//! create and a task cost after 100, 1,000 and 10,000 sessions served (`served.rs`). Asked for
//! alone (`--only cluster`): the same server as a cluster on three nats-servers, on one node
//! and on three (`cluster.rs`).
//!
//! ```text
//! penguin-serve-load PENGUIN_BINARY [--dir DIR] [--out FILE.json] [--subscribers N] [--served N] [--only sessions|tasks|fanout|served|cluster]
//! ```

mod client;
mod cluster;
mod replication;
mod report;
mod served;
mod server;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut cfg = workloads::Config {
        penguin: PathBuf::new(),
        dir: PathBuf::from("target/bench/serve"),
        subscribers: 10_000,
        burst_deltas: 2_000,
        served: 10_000,
        only: None,
    };
    let mut out = None;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let parsed: Result<(), String> = match a.as_str() {
            "--dir" => value("--dir").map(|v| cfg.dir = v.into()),
            "--out" => value("--out").map(|v| out = Some(PathBuf::from(v))),
            "--only" => value("--only").and_then(|v| match v.as_str() {
                "sessions" | "tasks" | "fanout" | "served" | "cluster" => {
                    cfg.only = Some(v);
                    Ok(())
                }
                _ => Err(format!(
                    "--only {v:?}: sessions, tasks, fanout, served or cluster"
                )),
            }),
            "--subscribers" => value("--subscribers").and_then(|v| {
                cfg.subscribers = v.parse().map_err(|e| format!("--subscribers: {e}"))?;
                Ok(())
            }),
            "--served" => value("--served").and_then(|v| {
                cfg.served = v.parse().map_err(|e| format!("--served: {e}"))?;
                Ok(())
            }),
            "-h" | "--help" => {
                println!("usage: penguin-serve-load PENGUIN_BINARY [--dir DIR] [--out FILE.json] [--subscribers N] [--served N] [--only sessions|tasks|fanout|served|cluster]");
                return ExitCode::SUCCESS;
            }
            _ if !a.starts_with('-') && cfg.penguin.as_os_str().is_empty() => {
                cfg.penguin = a.into();
                Ok(())
            }
            _ => Err(format!("unexpected argument {a:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("penguin-serve-load: {e}");
            return ExitCode::from(2);
        }
    }
    if cfg.penguin.as_os_str().is_empty() {
        eprintln!("penguin-serve-load: give the penguin binary to serve");
        return ExitCode::from(2);
    }
    // The server runs in its workspace: every path it gets must be absolute.
    cfg.penguin = match std::path::absolute(&cfg.penguin) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("penguin-serve-load: {}: {e}", cfg.penguin.display());
            return ExitCode::from(2);
        }
    };
    if let Ok(dir) = std::path::absolute(&cfg.dir) {
        cfg.dir = dir;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("penguin-serve-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut report = report::Report::default();
    // The cluster workload needs nats-servers and runs only when asked for
    // (`--only cluster`, `cargo xtask bench cluster`).
    let result = if cfg.only.as_deref() == Some("cluster") {
        rt.block_on(cluster::run(&cfg, &mut report))
    } else {
        rt.block_on(workloads::run(&cfg, &mut report))
    };
    report.print();
    if let Some(out) = out {
        if let Err(e) = std::fs::write(&out, report.json()) {
            eprintln!("penguin-serve-load: {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
        println!("results written to {}", out.display());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("penguin-serve-load: {e}");
            ExitCode::FAILURE
        }
    }
}
