//! The server under test: `penguin serve --provider scripted` as a child process on a free
//! loopback port, with a data root of its own, and what `/proc` says about it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::{Error, Target};

/// A running `penguin serve`; stopped when dropped.
#[derive(Debug)]
pub struct Served {
    child: Child,
    /// Where to reach it.
    pub target: Target,
    /// How long it took from spawn to its first accepted connection.
    pub started_in: Duration,
}

/// What starts a server: the binary, its data root, workspace and scenario.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The release `penguin` binary.
    pub penguin: PathBuf,
    /// `PENGUIN_HOME`.
    pub home: PathBuf,
    /// Workspace (and workspace root) of its sessions.
    pub workspace: PathBuf,
    /// The scenario every session plays.
    pub scenario: PathBuf,
    /// `PENGUIN_TOKEN`.
    pub token: String,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// More arguments of `penguin serve` (the cluster workload's `--cluster URLS --node N`).
    pub args: Vec<String>,
}

impl Launch {
    /// Starts the server and waits until it accepts connections.
    pub async fn start(&self) -> Result<Served, Error> {
        std::fs::create_dir_all(&self.home).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&self.workspace).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let began = Instant::now();
        let child = Command::new(&self.penguin)
            .arg("serve")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--provider", "scripted", "--scenario"])
            .arg(&self.scenario)
            .arg("--workspace")
            .arg(&self.workspace)
            .arg("--workspace-root")
            .arg(&self.workspace)
            .args(&self.args)
            .current_dir(&self.workspace)
            .env("PENGUIN_HOME", &self.home)
            .env("PENGUIN_TOKEN", &self.token)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.penguin.display()))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut served = Served {
            child,
            target: Target {
                addr,
                auth: format!("Bearer {}", self.token),
            },
            started_in: Duration::ZERO,
        };
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                served.started_in = began.elapsed();
                return Ok(served);
            }
            if let Ok(Some(status)) = served.child.try_wait() {
                return Err(format!(
                    "penguin serve exited ({status}); see {}",
                    self.log.display()
                ));
            }
            if began.elapsed() > Duration::from_secs(30) {
                return Err("penguin serve did not listen within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Served {
    fn proc_file(&self, name: &str) -> Result<String, Error> {
        std::fs::read_to_string(format!("/proc/{}/{name}", self.child.id()))
            .map_err(|e| format!("/proc/{}/{name}: {e}", self.child.id()))
    }

    /// Resident memory, KiB (`VmRSS`).
    pub fn rss_kib(&self) -> Result<u64, Error> {
        rss_of(self.pid())
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Threads (`Threads`).
    pub fn threads(&self) -> Result<u64, Error> {
        status_field(&self.proc_file("status")?, "Threads:")
    }

    /// Open descriptors.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| d.count())
    }

    /// CPU time used so far (user + system).
    pub fn cpu(&self) -> Result<Duration, Error> {
        self.cpu_split().map(|(u, s)| u + s)
    }

    /// CPU time used so far: user, system.
    pub fn cpu_split(&self) -> Result<(Duration, Duration), Error> {
        cpu_split_of(self.pid())
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops it: SIGTERM, then SIGKILL after 10 s.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if !self.alive() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// CPU time process `pid` used so far: user, system.
pub fn cpu_split_of(pid: u32) -> Result<(Duration, Duration), Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces) start at ") ".
    let after = stat
        .rsplit_once(") ")
        .map(|(_, a)| a)
        .ok_or("unreadable /proc stat")?;
    let f: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15 of stat; here 12 and 13 (state is 3 -> 0).
    let ticks = |i: usize| f.get(i).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    // USER_HZ is 100 on every Linux.
    Ok((
        Duration::from_millis(ticks(11) * 10),
        Duration::from_millis(ticks(12) * 10),
    ))
}

/// Resident memory of process `pid`, KiB (`VmRSS`).
pub fn rss_of(pid: u32) -> Result<u64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status_field(&status, "VmRSS:")
}

fn status_field(status: &str, key: &str) -> Result<u64, Error> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no {key} in /proc status"))
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// This process's CPU time (user + system).
pub fn own_cpu() -> Duration {
    let (u, s) = own_cpu_split();
    u + s
}

/// This process's CPU time: user, system.
pub fn own_cpu_split() -> (Duration, Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF).map_or((Duration::ZERO, Duration::ZERO), |u| {
        let t = |tv: nix::sys::time::TimeVal| {
            Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
        };
        (t(u.user_time()), t(u.system_time()))
    })
}

/// Raises this process's open-file limit to the hard limit; returns the new soft limit.
pub fn raise_open_files() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    }
}

/// `dir/name`, created.
pub fn subdir(dir: &Path, name: &str) -> Result<PathBuf, Error> {
    let p = dir.join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}
