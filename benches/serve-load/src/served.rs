//! **served**: what a create and a task cost as a long-running server serves more sessions
//! (issue 45). One server; sessions served one after another, each created, then opened as the
//! web app opens one (its stream, then `/messages?tailLimit=200`) and given one task, awaited
//! on its stream. At 100, 1,000 and 10,000 sessions served: the server's CPU per create and per
//! task over the next [`WINDOW`] sessions, and the memory each session served left behind (all
//! but the idle cache are unloaded). A cost that grows with the sessions served shows here as
//! a growing row.

use std::time::{Duration, Instant};

use crate::client::{Conn, Error, Target};
use crate::report::{kib, Report};
use crate::server::Served;
use crate::workloads::{create, launch, per_second, post_task, settle, tiny, Config, Stream};

/// Sessions created before their tasks run: fewer than the idle cache (32), so each task finds
/// its session loaded, as it would right after creating it, while creates and tasks are timed
/// apart: the server's CPU time (`/proc`) counts in 10 ms ticks, too coarse for one request.
const BATCH: usize = 25;
/// Sessions measured at each point: 40 batches, so the ticks split between creates and tasks
/// are off by a few percent at most.
const WINDOW: usize = 1_000;

/// Sessions served before each measurement; the last is `Config::served`.
fn points(last: usize) -> Vec<usize> {
    let mut p: Vec<usize> = [100, 1_000].into_iter().filter(|p| *p < last).collect();
    p.push(last);
    p
}

/// Server CPU spent in creates and in tasks over some batches, and the wall time.
#[derive(Default)]
struct Spent {
    sessions: usize,
    create: Duration,
    task: Duration,
    wall: Duration,
}

/// A server and a connection for requests.
struct Serving {
    srv: Served,
    target: Target,
    conn: Conn,
}

impl Serving {
    /// One batch: [`BATCH`] sessions created one by one, then a task in each, one at a time.
    async fn batch(&mut self, spent: &mut Spent) -> Result<(), Error> {
        let began = Instant::now();
        let cpu0 = self.srv.cpu()?;
        let mut ids = Vec::with_capacity(BATCH);
        for _ in 0..BATCH {
            ids.push(create(&mut self.conn).await?);
        }
        let cpu1 = self.srv.cpu()?;
        for id in &ids {
            // As a client watching the session does: its stream open while the task runs.
            let mut stream =
                Stream::open(&self.target, &format!("/api/sessions/{id}/stream")).await?;
            self.conn
                .ok(
                    "GET",
                    &format!("/api/sessions/{id}/messages?tailLimit=200"),
                    None,
                )
                .await?;
            post_task(&mut self.conn, id).await?;
            stream.task_end().await?;
        }
        let cpu2 = self.srv.cpu()?;
        spent.sessions += BATCH;
        spent.create += cpu1.saturating_sub(cpu0);
        spent.task += cpu2.saturating_sub(cpu1);
        spent.wall += began.elapsed();
        Ok(())
    }
}

/// Runs the workload up to `cfg.served` sessions served (plus the last window).
pub async fn run(cfg: &Config, report: &mut Report) -> Result<(), Error> {
    const S: &str = "served";
    let launch = launch(cfg, S, vec![tiny()])?;
    let srv = launch.start().await?;
    let target = srv.target.clone();
    let conn = Conn::open(&target).await?;
    let mut s = Serving { srv, target, conn };
    let mut served = 0;
    let mut rows = Vec::new();
    let mut rss_at = Vec::new();
    for at in points(cfg.served) {
        while served < at {
            s.batch(&mut Spent::default()).await?;
            served += BATCH;
        }
        settle().await;
        rss_at.push((served, s.srv.rss_kib()?));
        let from = served;
        let mut spent = Spent::default();
        while spent.sessions < WINDOW {
            s.batch(&mut spent).await?;
        }
        served += spent.sessions;
        let n = spent.sessions as f64;
        let (create_ms, task_ms) = (
            spent.create.as_secs_f64() * 1e3 / n,
            spent.task.as_secs_f64() * 1e3 / n,
        );
        report.row(
            S,
            &format!("after {from} sessions served, the next {WINDOW}"),
            format!(
                "server CPU per create {create_ms:.2} ms, per task {task_ms:.2} ms; {:.0} sessions/s (a create and a task each, one at a time)",
                per_second(spent.sessions, spent.wall)
            ),
        );
        report.figure(&format!("served_{at}_create_cpu_ms"), create_ms);
        report.figure(&format!("served_{at}_task_cpu_ms"), task_ms);
        rows.push((from, create_ms, task_ms));
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        if rows.len() > 1 {
            report.row(
                S,
                &format!("after {} vs after {} served", last.0, first.0),
                format!(
                    "create {:.2}x, task {:.2}x",
                    last.1 / first.1.max(1e-9),
                    last.2 / first.2.max(1e-9)
                ),
            );
        }
    }
    // Memory: what each session served left in the process once unloaded (all but the idle
    // cache are), between the first point past 1,000 and the last.
    if let (Some(from), Some(to)) = (rss_at.iter().find(|(n, _)| *n >= 1_000), rss_at.last()) {
        if to.0 > from.0 {
            let per = (to.1 as f64 - from.1 as f64) / (to.0 - from.0) as f64;
            report.row(
                S,
                &format!("memory per session served, {} to {}", from.0, to.0),
                format!(
                    "{} ({} -> {} RSS)",
                    kib(per),
                    kib(from.1 as f64),
                    kib(to.1 as f64)
                ),
            );
            report.figure("served_memory_per_session_kib", per);
        }
    }
    s.srv.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::points;

    #[test]
    fn points_end_at_the_last() {
        assert_eq!(points(10_000), [100, 1_000, 10_000]);
        assert_eq!(points(1_000), [100, 1_000]);
        assert_eq!(points(50), [50]);
    }
}
