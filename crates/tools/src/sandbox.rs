//! The command sandbox: what a session's commands may write and whether they may use TCP,
//! enforced by the kernel (Landlock), never by trusting the command.
//!
//! A [`SandboxRequest`] (from `config.toml`, a flag or an API request) is resolved once
//! against the running kernel into a [`Sandbox`]: the effective policy, which says what is
//! enforced and what the kernel cannot enforce. [`Sandbox::spawn`] (or [`Sandbox::confine`]
//! for any other way of starting a process) starts a process under it.
//!
//! # How it is applied
//!
//! Landlock restricts the calling *thread* and everything it forks afterwards. The sandbox
//! starts a short-lived thread, restricts that thread, forks the command from it and lets the
//! thread end: the command is confined from its first instruction, its children and
//! grandchildren inherit the restriction (the kernel offers no way out of a Landlock domain),
//! and no other thread of the host process is ever restricted. This needs no `unsafe`
//! `pre_exec` hook and no helper binary. `no_new_privs` is set on that thread as Landlock
//! requires, so setuid programs (`sudo`) do not gain privileges inside the sandbox.
//!
//! # What each mode allows
//!
//! - `workspace-write`: read and execute anywhere; write, create, remove, link and rename only
//!   beneath the workspace, the temp directory and configured extra writable directories.
//!   Symlinks are resolved by the kernel before the check, so a link pointing outside does not
//!   help, and a file from outside cannot be hard-linked or moved into the workspace (the
//!   source directory lacks the `refer` right).
//! - `read-only`: the same, with only the temp directory writable.
//! - `off`: no filesystem restriction.
//! - `network = false` (with any mode): TCP `connect` and `bind` are refused except for the
//!   allowed ports. Landlock filters by port, not by address, so an allowed port is allowed on
//!   every host, loopback included, and a blocked one is blocked on loopback too. UDP (and so
//!   DNS), Unix sockets and raw sockets are not covered.
//!
//! `/dev/null`, `/dev/zero` and `/dev/full` stay writable in every mode.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI,
};

pub use kernel::{Gap, Landlock};

/// The filesystem rights are those of this ABI (write, refer, truncate, device ioctl); rights
/// of later ABIs (e.g. connecting to Unix sockets by path) are not handled, so they stay
/// allowed.
const FS_ABI: ABI = ABI::V5;
/// TCP bind and connect.
const NET_ABI: ABI = ABI::V4;
/// Device files every command may read and write.
const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// What a command may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SandboxMode {
    /// No filesystem restriction.
    Off,
    /// Writes only in the temp directory.
    ReadOnly,
    /// Writes only in the workspace, the temp directory and extra writable directories.
    WorkspaceWrite,
}

impl SandboxMode {
    /// Every mode, as written in `config.toml`, flags and the API.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::WorkspaceWrite,
        SandboxMode::ReadOnly,
        SandboxMode::Off,
    ];

    /// `off`, `read-only` or `workspace-write`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<SandboxMode, String> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown sandbox mode {s:?} (expected workspace-write, read-only or off)")
            })
    }
}

/// What a session asks for, before the kernel is consulted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxRequest {
    /// `None`: `workspace-write` where the kernel has Landlock, `off` where it has not.
    pub mode: Option<SandboxMode>,
    /// Whether commands may connect to and bind TCP ports.
    pub network: bool,
    /// TCP ports commands may still connect to and bind when `network` is false.
    pub allow_ports: Vec<u16>,
    /// Refuse, rather than run with less, when the kernel cannot enforce everything asked.
    pub strict: bool,
    /// The writable temp directory (default: [`std::env::temp_dir`]); commands get it as
    /// `TMPDIR`.
    pub temp_dir: Option<PathBuf>,
    /// More directories writable in `workspace-write` mode (e.g. a build cache).
    pub writable: Vec<PathBuf>,
}

impl Default for SandboxRequest {
    fn default() -> SandboxRequest {
        SandboxRequest {
            mode: None,
            network: true,
            allow_ports: Vec::new(),
            strict: false,
            temp_dir: None,
            writable: Vec::new(),
        }
    }
}

/// Why a sandbox cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `strict` was asked and the kernel cannot enforce everything.
    #[error("the {mode} sandbox was asked for strictly, but {landlock}: {}", gaps_text(.gaps))]
    NotEnforceable {
        /// The mode asked for.
        mode: SandboxMode,
        /// What the kernel offers.
        landlock: Landlock,
        /// What it cannot enforce.
        gaps: Vec<Gap>,
    },
    /// A writable directory cannot be used.
    #[error("sandbox: {}: {source}", path.display())]
    Path {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

fn gaps_text(gaps: &[Gap]) -> String {
    gaps.iter()
        .map(|g| g.describe())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The effective sandbox of a session: what its commands are confined by on this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    requested: Option<SandboxMode>,
    mode: SandboxMode,
    network: bool,
    network_asked: bool,
    allow_ports: Vec<u16>,
    strict: bool,
    temp_dir: PathBuf,
    writable: Vec<PathBuf>,
    landlock: Landlock,
    gaps: Vec<Gap>,
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::off()
    }
}

impl Sandbox {
    /// No sandbox: commands run as the user, as they always did.
    pub fn off() -> Sandbox {
        Sandbox {
            requested: Some(SandboxMode::Off),
            mode: SandboxMode::Off,
            network: true,
            network_asked: true,
            allow_ports: Vec::new(),
            strict: false,
            temp_dir: std::env::temp_dir(),
            writable: Vec::new(),
            landlock: Landlock::NotImplemented,
            gaps: Vec::new(),
        }
    }

    /// Resolves `request` against the running kernel.
    pub fn resolve(request: &SandboxRequest) -> Result<Sandbox, SandboxError> {
        Sandbox::resolve_for(request, Landlock::probe())
    }

    /// Resolves `request` as if the kernel offered `landlock` (what [`Sandbox::resolve`] does
    /// with the probed value; tests use it to see other kernels).
    pub fn resolve_for(
        request: &SandboxRequest,
        landlock: Landlock,
    ) -> Result<Sandbox, SandboxError> {
        let abi = landlock.abi();
        let asked = request.mode.unwrap_or(if abi > 0 {
            SandboxMode::WorkspaceWrite
        } else {
            SandboxMode::Off
        });
        let wants_fs = asked != SandboxMode::Off;
        let wants_net = !request.network;
        let mut gaps = Vec::new();
        if abi == 0 {
            if wants_fs || wants_net {
                gaps.push(Gap::Landlock);
            }
        } else {
            if wants_fs && abi < 3 {
                gaps.push(Gap::Truncate);
            }
            if wants_net && abi < 4 {
                gaps.push(Gap::Network);
            }
            if wants_fs && abi < 5 {
                gaps.push(Gap::DeviceIoctl);
            }
        }
        if request.strict && !gaps.is_empty() {
            return Err(SandboxError::NotEnforceable {
                mode: asked,
                landlock,
                gaps,
            });
        }
        let canonical = |p: &Path| {
            std::fs::canonicalize(p).map_err(|source| SandboxError::Path {
                path: p.to_path_buf(),
                source,
            })
        };
        let temp_dir = request.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
        let no_landlock = gaps.contains(&Gap::Landlock);
        Ok(Sandbox {
            requested: request.mode,
            mode: if no_landlock { SandboxMode::Off } else { asked },
            network: request.network || no_landlock || gaps.contains(&Gap::Network),
            network_asked: request.network,
            allow_ports: request.allow_ports.clone(),
            strict: request.strict,
            temp_dir: if wants_fs {
                canonical(&temp_dir)?
            } else {
                temp_dir
            },
            writable: if wants_fs {
                request
                    .writable
                    .iter()
                    .map(|p| canonical(p))
                    .collect::<Result<_, _>>()?
            } else {
                Vec::new()
            },
            landlock,
            gaps,
        })
    }

    /// The effective mode: `off` when the kernel cannot confine commands at all.
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The mode the session asked for (`None`: the default).
    pub fn requested(&self) -> Option<SandboxMode> {
        self.requested
    }

    /// The mode the session asked for, the default resolved (`workspace-write` where Landlock
    /// exists): penguin's own file tools honour it even where the kernel cannot.
    pub fn intended(&self) -> SandboxMode {
        self.requested.unwrap_or(if self.landlock.abi() > 0 {
            SandboxMode::WorkspaceWrite
        } else {
            SandboxMode::Off
        })
    }

    /// Whether commands may use TCP (effective: true when it cannot be blocked here).
    pub fn network(&self) -> bool {
        self.network
    }

    /// TCP ports allowed while the network is blocked.
    pub fn allow_ports(&self) -> &[u16] {
        &self.allow_ports
    }

    /// The writable temp directory.
    pub fn temp_dir(&self) -> &Path {
        &self.temp_dir
    }

    /// Landlock on this kernel, as found when the sandbox was resolved ([`Sandbox::off`] does
    /// not ask, and says `NotImplemented`).
    pub fn landlock(&self) -> Landlock {
        self.landlock
    }

    /// Protections asked for that this kernel cannot give.
    pub fn gaps(&self) -> &[Gap] {
        &self.gaps
    }

    /// Whether commands are confined at all.
    pub fn is_active(&self) -> bool {
        self.mode != SandboxMode::Off || !self.network
    }

    /// One line for a status display, e.g. `sandbox: workspace-write, network off (Landlock
    /// ABI 7)`, `sandbox: off (workspace-write asked, but this kernel has no Landlock)`.
    pub fn summary(&self) -> String {
        let mut s = format!("sandbox: {}", self.mode);
        if !self.network {
            s.push_str(", network off");
            if !self.allow_ports.is_empty() {
                s.push_str(&format!(
                    " (ports {} allowed)",
                    ports_text(&self.allow_ports)
                ));
            }
        }
        let mut notes = Vec::new();
        if self.gaps.contains(&Gap::Landlock) {
            let net = if self.network_asked {
                ""
            } else {
                ", network off"
            };
            notes.push(format!(
                "{}{net} asked, but {}",
                self.intended(),
                self.landlock
            ));
        } else if self.is_active() || self.requested.is_none() {
            notes.push(self.landlock.to_string());
        }
        let missing: Vec<&str> = self
            .gaps
            .iter()
            .filter(|g| **g != Gap::Landlock)
            .map(|g| g.as_str())
            .collect();
        if !missing.is_empty() {
            notes.push(format!("not enforced: {}", missing.join(", ")));
        }
        if !notes.is_empty() {
            s.push_str(&format!(" ({})", notes.join("; ")));
        }
        s
    }

    /// What the kernel cannot enforce of what was asked, as a warning for the user; `None`
    /// when everything asked is enforced.
    pub fn warning(&self) -> Option<String> {
        if self.gaps.is_empty() {
            return None;
        }
        let asked = self.intended();
        Some(format!(
            "the {asked} sandbox{} is not fully enforced: {}; {}. Running with what is available (--sandbox strict refuses instead).",
            if self.network { "" } else { " with network off" },
            self.landlock,
            gaps_text(&self.gaps),
        ))
    }

    /// [`Sandbox::warning`], but only the first time this process sees that text: a server
    /// resolving a sandbox per session says it once.
    pub fn warning_once(&self) -> Option<String> {
        static SAID: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
        let text = self.warning()?;
        let mut said = SAID
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        said.insert(text.clone()).then_some(text)
    }

    /// The directories commands may write beneath (besides the device files), for `workspace`.
    pub fn writable_roots(&self, workspace: &Path) -> Vec<PathBuf> {
        match self.mode {
            SandboxMode::Off => Vec::new(),
            SandboxMode::ReadOnly => vec![self.temp_dir.clone()],
            SandboxMode::WorkspaceWrite => {
                let mut roots = vec![workspace.to_path_buf(), self.temp_dir.clone()];
                roots.extend(self.writable.iter().cloned());
                roots
            }
        }
    }

    /// Runs `start` on a fresh thread confined by this sandbox for `workspace`, and returns
    /// what it returns. Every process `start` spawns (with `std` or `tokio`, which is entered
    /// when the caller runs inside a runtime) is confined, with all its descendants; the
    /// calling thread and the rest of the process are not.
    ///
    /// `start` must only spawn processes: a thread it started would be confined as well. With
    /// the sandbox inactive, `start` runs unconfined on that thread all the same.
    ///
    /// This is what background command sessions and MCP stdio servers call to start their
    /// process under the session's sandbox.
    pub fn confine<T, F>(&self, workspace: &Path, start: F) -> io::Result<T>
    where
        T: Send,
        F: FnOnce() -> io::Result<T> + Send,
    {
        let runtime = tokio::runtime::Handle::try_current().ok();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let _entered = runtime.as_ref().map(|r| r.enter());
                    if self.is_active() {
                        self.restrict_current_thread(workspace)?;
                    }
                    start()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the sandboxed spawn panicked")))
        })
    }

    /// Spawns `command` confined by this sandbox for `workspace` (see [`Sandbox::confine`]).
    /// With the filesystem confined, `TMPDIR` is set to the writable temp directory.
    pub fn spawn(
        &self,
        command: &mut tokio::process::Command,
        workspace: &Path,
    ) -> io::Result<tokio::process::Child> {
        if self.mode != SandboxMode::Off {
            command.env("TMPDIR", &self.temp_dir);
        }
        self.confine(workspace, || command.spawn())
    }

    /// Applies the rules to the calling thread. Only ever called on a thread made for it.
    fn restrict_current_thread(&self, workspace: &Path) -> io::Result<()> {
        let level = if self.strict {
            CompatLevel::HardRequirement
        } else {
            CompatLevel::BestEffort
        };
        let err = |what: &str, e: &dyn fmt::Display| {
            io::Error::other(format!("the sandbox cannot be applied ({what}): {e}"))
        };
        let confine_fs = self.mode != SandboxMode::Off;
        let mut ruleset = Ruleset::default().set_compatibility(level);
        if confine_fs {
            ruleset = ruleset
                .handle_access(AccessFs::from_all(FS_ABI))
                .map_err(|e| err("filesystem", &e))?;
        }
        if !self.network {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(NET_ABI))
                .map_err(|e| err("network", &e))?;
        }
        let mut rules = ruleset.create().map_err(|e| err("ruleset", &e))?;
        if confine_fs {
            let open =
                |path: &Path| PathFd::new(path).map_err(|e| err(&path.display().to_string(), &e));
            rules = rules
                .add_rule(PathBeneath::new(
                    open(Path::new("/"))?,
                    AccessFs::from_read(FS_ABI),
                ))
                .map_err(|e| err("/", &e))?;
            for root in self.writable_roots(workspace) {
                rules = rules
                    .add_rule(PathBeneath::new(open(&root)?, AccessFs::from_all(FS_ABI)))
                    .map_err(|e| err(&root.display().to_string(), &e))?;
            }
            for device in DEVICES {
                // A container may lack one of them; nothing to allow then.
                if let Ok(fd) = PathFd::new(device) {
                    rules = rules
                        .add_rule(PathBeneath::new(fd, AccessFs::from_file(FS_ABI)))
                        .map_err(|e| err(device, &e))?;
                }
            }
        }
        if !self.network {
            for port in &self.allow_ports {
                rules = rules
                    .add_rule(NetPort::new(*port, AccessNet::from_all(NET_ABI)))
                    .map_err(|e| err(&format!("port {port}"), &e))?;
            }
        }
        let status = rules.restrict_self().map_err(|e| err("restrict", &e))?;
        if status.ruleset == RulesetStatus::NotEnforced {
            // Resolution found Landlock, so this means it vanished or failed: never run a
            // command unconfined while the session shows it confined.
            return Err(err("restrict", &"the kernel enforced none of the rules"));
        }
        Ok(())
    }
}

mod bypass;
mod denial;
mod kernel;

pub use bypass::SandboxBypass;
pub(crate) use denial::DenialScan;
use denial::*;

#[cfg(test)]
mod tests;
