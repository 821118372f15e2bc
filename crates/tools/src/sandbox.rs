//! The command sandbox: what a session's commands may read, write and connect to, and that
//! penguin's own powers stay out of their reach, enforced by the kernel (namespaces, Landlock,
//! seccomp), never by trusting the command. `docs/security.md` is the map.
//!
//! A [`SandboxRequest`] (from `config.toml`, a flag or an API request) is resolved once
//! against the running kernel into a [`Sandbox`]: the effective policy, which says what is
//! enforced and what the kernel cannot enforce. [`Sandbox::start`] (or [`Sandbox::confine`]
//! for any other way of starting a process) starts a process under it.
//!
//! Resolving starts no process: Landlock and seccomp are asked of the kernel directly, but
//! whether bubblewrap can set up namespaces is only known by starting it, so the first command
//! that needs them finds out, once for the process ([`Namespaces::Untried`] until then; a
//! session that never runs a command never pays for it). A strict request finds out at once.
//!
//! # How it is applied
//!
//! Three layers, each from the kernel, none trusting the command:
//!
//! - **Namespaces** (bubblewrap, where installed and the kernel allows; see [`Namespaces`]):
//!   the command sees `/` read-only, its writable roots writable, penguin's own state
//!   ([`SandboxRequest::protected`]: its data root, with the config, the server token and the
//!   traces) as an empty read-only directory, and no process but its own. Metadata calls
//!   (`chmod`, `touch -d`, `setxattr`) outside the writable roots fail with `EROFS`, and all
//!   capabilities are dropped, root's included.
//! - **Landlock**: TCP `connect` and `bind` by port, signals and abstract Unix sockets scoped
//!   to the sandbox (ABI 6), and, where there are no namespaces, the filesystem rights below.
//! - **seccomp** (see `seccomp.rs`): io_uring, the kernel keyring and typing into a terminal
//!   (`TIOCSTI`, `TIOCLINUX`) refused, and with the network off every socket but Unix and TCP
//!   (MPTCP, UDP, raw, packet, netlink) refused.
//!
//! Landlock and seccomp restrict the calling *thread* and everything it forks afterwards. The
//! sandbox starts a short-lived thread, restricts that thread, forks the command (or
//! bubblewrap, which then starts the command) from it and lets the thread end: the command is
//! confined from its first instruction, its children and grandchildren inherit the
//! restriction, and no other thread of the host process is ever restricted. This needs no
//! `unsafe` `pre_exec` hook. `no_new_privs` is set on that thread, so setuid programs (`sudo`)
//! do not gain privileges inside the sandbox.
//!
//! A command's environment is built from an allowlist ([`EnvPolicy`]), never inherited whole:
//! provider keys and penguin's token stay out. And every process started for a session leads
//! a session of its own, in every mode: it never shares penguin's controlling terminal, so it
//! cannot type into it (`ioctl(TIOCSTI)`) to answer an approval prompt or steer the model.
//!
//! # What each mode allows
//!
//! - `workspace-write`: read and execute anywhere but penguin's own state; write, create,
//!   remove, link and rename only beneath the workspace, the temp directory and configured
//!   extra writable directories. Symlinks are resolved by the kernel before the check, so a
//!   link pointing outside does not help, and a file from outside cannot be hard-linked or
//!   moved into the workspace. Where there are namespaces, the `.git` of the repositories in
//!   those roots stays read-only ([`SandboxRequest::git_writable`] lets commands commit):
//!   the user's own git runs what a repository's config and hooks say.
//! - `read-only`: the same, with only the temp directory writable.
//! - `off`: no filesystem restriction.
//! - `network = false` (the default, with any mode): TCP `connect` and `bind` are refused
//!   except for the allowed ports, and every other kind of network socket is refused. Landlock
//!   filters by port, not by address, so an allowed port is allowed on every host, loopback
//!   included. Unix sockets by path stay reachable where file permissions allow.
//!
//! `/dev/null`, `/dev/zero` and `/dev/full` stay writable in every mode.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

pub use env::{EnvPolicy, CORE_ENV};
pub use kernel::{Gap, Host, Landlock};
pub use namespace::Namespaces;

/// The filesystem rights are those of this ABI (write, refer, truncate, device ioctl); rights
/// of later ABIs (e.g. connecting to Unix sockets by path) are not handled, so they stay
/// allowed.
const FS_ABI: ABI = ABI::V5;
/// TCP bind and connect.
const NET_ABI: ABI = ABI::V4;
/// Signals and abstract Unix sockets scoped to the sandbox.
const SCOPE_ABI: ABI = ABI::V6;
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

/// What a session asks for, before the kernel is consulted. The default: the strongest mode
/// the kernel offers, network off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxRequest {
    /// `None`: `workspace-write` where the kernel has Landlock, `off` where it has not.
    pub mode: Option<SandboxMode>,
    /// Whether commands may use the network (default: no).
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
    /// penguin's own state (its data root): hidden from commands where namespaces exist, and
    /// never read or written by the file tools, wherever the workspace is.
    pub protected: Vec<PathBuf>,
    /// Variables commands inherit besides [`CORE_ENV`]: names, or prefixes ending in `*`.
    pub inherit_env: Vec<String>,
    /// Let commands write the `.git` of the repositories in their writable roots (commit,
    /// fetch, change the config and hooks). Off by default: the user's own git runs what a
    /// repository's config and hooks say, outside the sandbox.
    pub git_writable: bool,
}

/// Why a sandbox cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    protected: Vec<PathBuf>,
    readable: Vec<PathBuf>,
    env: EnvPolicy,
    git_writable: bool,
    host: Host,
    /// What cannot be enforced, namespaces counted as there while untried.
    gaps: Vec<Gap>,
    /// The same once namespaces turned out unavailable.
    gaps_without_namespaces: Vec<Gap>,
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
            protected: Vec::new(),
            readable: Vec::new(),
            env: EnvPolicy::default(),
            git_writable: false,
            host: Host::from(Landlock::NotImplemented),
            gaps: Vec::new(),
            gaps_without_namespaces: Vec::new(),
        }
    }

    /// This sandbox with nothing confined (for a call an approver let run outside it): the
    /// environment allowlist and penguin's protected paths still hold for penguin's own tools.
    pub fn unconfined(&self) -> Sandbox {
        Sandbox {
            requested: Some(SandboxMode::Off),
            mode: SandboxMode::Off,
            network: true,
            network_asked: true,
            gaps: Vec::new(),
            gaps_without_namespaces: Vec::new(),
            ..self.clone()
        }
    }

    /// Resolves `request` against the running kernel, without starting a process: whether
    /// namespaces work is found out by the first command that needs them (see the module's
    /// documentation), except for a strict request, which needs the answer now.
    pub fn resolve(request: &SandboxRequest) -> Result<Sandbox, SandboxError> {
        Sandbox::resolve_for(request, Host::known())
    }

    /// Resolves `request` as if the machine were `host` (what [`Sandbox::resolve`] does with
    /// the probed one; tests use it to see other kernels).
    pub fn resolve_for(
        request: &SandboxRequest,
        host: impl Into<Host>,
    ) -> Result<Sandbox, SandboxError> {
        let mut host = host.into();
        if request.strict {
            // Refusing is only possible before the first command: find out now.
            host.namespaces = host.namespaces.tried();
        }
        let landlock = host.landlock;
        let abi = landlock.abi();
        let asked = request.mode.unwrap_or(if abi > 0 {
            SandboxMode::WorkspaceWrite
        } else {
            SandboxMode::Off
        });
        let wants_fs = asked != SandboxMode::Off;
        let wants_net = !request.network;
        let gaps_if = |namespaces: bool| {
            let mut gaps = Vec::new();
            if abi == 0 {
                // The default sandbox is whatever the kernel offers: with no Landlock and no
                // mode asked for, nothing was asked that could be missing.
                if request.mode.is_some() && (wants_fs || wants_net) {
                    gaps.push(Gap::Landlock);
                }
                return gaps;
            }
            if wants_fs && abi < 3 {
                gaps.push(Gap::Truncate);
            }
            if wants_net && abi < 4 {
                gaps.push(Gap::Network);
            }
            if wants_fs && abi < 5 {
                gaps.push(Gap::DeviceIoctl);
            }
            if wants_fs && !namespaces {
                gaps.push(Gap::Namespaces);
            }
            if abi < 6 && !(wants_fs && namespaces) {
                gaps.push(Gap::Signals);
            }
            if wants_net && !host.seccomp {
                gaps.push(Gap::Sockets);
            }
            gaps
        };
        let gaps = gaps_if(!matches!(host.namespaces, Namespaces::Unavailable(_)));
        let gaps_without_namespaces = gaps_if(false);
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
        let no_landlock = abi == 0;
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
            // Canonical where it exists, so that every alias of it is refused alike.
            protected: request
                .protected
                .iter()
                .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
                .collect(),
            readable: Vec::new(),
            env: EnvPolicy::new(request.inherit_env.clone()),
            git_writable: request.git_writable,
            host,
            gaps,
            gaps_without_namespaces,
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
        self.requested.unwrap_or(if self.host.landlock.abi() > 0 {
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
        self.host.landlock
    }

    /// What the machine offered when the sandbox was resolved (its namespaces may be
    /// [`Namespaces::Untried`]; [`Sandbox::namespaces`] says what is known now).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Whether commands can get namespaces here, as far as this process knows now, without
    /// starting anything: `Untried` until a command (of any session) needed them.
    pub fn namespaces(&self) -> Namespaces {
        self.host.namespaces.current()
    }

    /// penguin's own state, which commands do not see and the file tools refuse.
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    /// This sandbox with `dirs` readable although they lie beneath a protected path (the
    /// user's skills): commands see them through a read-only bind in the namespace that hides
    /// the rest of the data root (where there are no namespaces the whole data root is
    /// readable anyway, and Landlock keeps it unwritable), and the file tools may read them.
    /// Neither may write there. Kept canonical; a directory that does not exist is left out.
    pub fn with_readable(mut self, dirs: impl IntoIterator<Item = PathBuf>) -> Sandbox {
        self.readable = dirs
            .into_iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter(|p| p.is_dir())
            .collect();
        self
    }

    /// The directories beneath the protected ones that commands and the file tools may read
    /// ([`Sandbox::with_readable`]).
    pub fn readable(&self) -> &[PathBuf] {
        &self.readable
    }

    /// Whether `path` (canonical) is penguin's own state.
    pub fn is_protected(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| path.starts_with(p))
    }

    /// The variables commands inherit.
    pub fn env(&self) -> &EnvPolicy {
        &self.env
    }

    /// Whether commands may write the repositories' `.git` in their writable roots
    /// ([`SandboxRequest::git_writable`]).
    pub fn git_writable(&self) -> bool {
        self.git_writable
    }

    /// The repositories' own files in `roots` that commands see read-only: where namespaces
    /// bind them so, and unless `git_writable` (see `sandbox/git.rs`).
    fn read_only_git(&self, roots: &[PathBuf]) -> Vec<PathBuf> {
        if self.git_writable || !self.uses_namespaces() {
            return Vec::new();
        }
        git::protected(roots)
    }

    /// Whether commands get their own mount and PID namespaces (the filesystem is confined
    /// and bubblewrap works here). Finds out, if this process has not yet: a command is about
    /// to need the answer.
    pub fn uses_namespaces(&self) -> bool {
        self.bubblewrap().is_some()
    }

    /// The bubblewrap that starts commands, when they get namespaces; tries it the first time.
    /// Whether [`Sandbox::start`] runs a program under bubblewrap, which then leads its
    /// process group (and dies of a SIGINT sent to the group, see `command/process.rs`).
    pub fn wraps(&self) -> bool {
        self.bubblewrap().is_some()
    }

    fn bubblewrap(&self) -> Option<PathBuf> {
        if self.mode == SandboxMode::Off {
            return None;
        }
        match self.host.namespaces.tried() {
            Namespaces::Bubblewrap(bwrap) => Some(bwrap),
            Namespaces::Unavailable(_) | Namespaces::Untried(_) => None,
        }
    }

    /// Protections asked for that this kernel cannot give, as far as is known now: namespaces
    /// not yet tried are not counted missing (the [`Sandbox::summary`] says they are untried).
    pub fn gaps(&self) -> &[Gap] {
        match self.namespaces() {
            Namespaces::Unavailable(_) => &self.gaps_without_namespaces,
            Namespaces::Bubblewrap(_) | Namespaces::Untried(_) => &self.gaps,
        }
    }

    /// Whether commands are confined at all.
    pub fn is_active(&self) -> bool {
        self.mode != SandboxMode::Off || !self.network
    }

    /// One line for a status display, e.g. `sandbox: workspace-write, network off (Landlock
    /// ABI 7)`, `sandbox: off (workspace-write asked, but this kernel has no Landlock)`, or
    /// `(Landlock ABI 7; namespaces checked at the first command)` before any command of this
    /// process tried them.
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
                self.host.landlock
            ));
        } else if self.is_active() || self.requested.is_none() {
            notes.push(self.host.landlock.to_string());
        }
        if self.mode != SandboxMode::Off && matches!(self.namespaces(), Namespaces::Untried(_)) {
            notes.push("namespaces checked at the first command".to_owned());
        }
        let missing: Vec<&str> = self
            .gaps()
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

    /// What the kernel cannot enforce of what was asked, as far as is known now
    /// ([`Sandbox::gaps`]), as a warning for the user; `None` when everything asked is enforced.
    pub fn warning(&self) -> Option<String> {
        let gaps = self.gaps();
        if gaps.is_empty() {
            return None;
        }
        let asked = self.intended();
        Some(format!(
            "the {asked} sandbox{} is not fully enforced: {}; {}. Running with what is available (--sandbox strict refuses instead).",
            if self.network { "" } else { " with network off" },
            self.host.landlock,
            gaps_text(gaps),
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
    /// This is Landlock and seccomp only, for a process started some other way than
    /// [`Sandbox::start`]: no namespaces, no environment policy (so penguin's own files stay
    /// readable to it) and no session of its own (so it shares the caller's terminal, if any,
    /// unless the caller starts it in another session). `start`
    /// must only spawn processes: a thread it started would be confined as well. With the
    /// sandbox inactive, `start` runs unconfined on that thread all the same.
    pub fn confine<T, F>(&self, workspace: &Path, start: F) -> io::Result<T>
    where
        T: Send,
        F: FnOnce() -> io::Result<T> + Send,
    {
        self.confine_with(workspace, self.mode != SandboxMode::Off, start)
    }

    fn confine_with<T, F>(&self, workspace: &Path, landlock_fs: bool, start: F) -> io::Result<T>
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
                        self.restrict_current_thread(workspace, landlock_fs)?;
                    }
                    start()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the sandboxed spawn panicked")))
        })
    }

    /// Starts `program` confined by this sandbox for `workspace` (a canonical directory):
    /// inside its namespaces where there are some, under Landlock and seccomp, with the
    /// environment of [`Sandbox::env`] (and `TMPDIR`, the writable temp directory, when the
    /// filesystem is confined). `configure` adds the arguments, directory, pipes and any
    /// further variables; it must not spawn, and must not set a process group.
    ///
    /// In every mode, `off` and [`Sandbox::unconfined`] included, the process leads a session
    /// of its own (see `sandbox/session.rs`): it has no controlling terminal, so it can
    /// neither read from nor type into penguin's, and its process group's id is its pid, so
    /// `killpg` on that pid reaches everything it starts.
    ///
    /// This is how `exec_command` and MCP stdio servers start their processes.
    pub fn start(
        &self,
        program: impl AsRef<OsStr>,
        workspace: &Path,
        configure: impl FnOnce(&mut tokio::process::Command),
    ) -> io::Result<tokio::process::Child> {
        let program = program.as_ref();
        let leader =
            session::leader().map_err(|e| io::Error::new(io::ErrorKind::Unsupported, e))?;
        let mut argv: Vec<OsString> = Vec::new();
        let bwrap = self.bubblewrap();
        if let Some(bwrap) = &bwrap {
            let roots = self.writable_roots(workspace);
            argv.push(bwrap.into());
            argv.extend(namespace::arguments(
                &roots,
                &self.protected,
                &self.readable,
                &self.read_only_git(&roots),
            ));
            argv.push("--".into());
        }
        argv.push(program.into());
        let mut command = match &leader {
            session::Leader::Setsid(setsid) => {
                let mut c = tokio::process::Command::new(setsid);
                c.arg("--").args(&argv);
                c
            }
            session::Leader::Group => {
                let mut c = tokio::process::Command::new(&argv[0]);
                c.args(&argv[1..]).process_group(0);
                c
            }
        };
        self.env.apply(&mut command);
        if self.mode != SandboxMode::Off {
            command.env("TMPDIR", &self.temp_dir);
        }
        configure(&mut command);
        session::check_program(program, command.as_std())?;
        self.confine_with(
            workspace,
            self.mode != SandboxMode::Off && bwrap.is_none(),
            || {
                let mut child = command.spawn()?;
                if let (session::Leader::Setsid(_), Some(pid)) = (&leader, child.id()) {
                    if let Err(e) = session::await_leader(pid) {
                        let _ = child.start_kill();
                        return Err(e);
                    }
                }
                Ok(child)
            },
        )
    }

    /// Applies the rules to the calling thread. Only ever called on a thread made for it.
    /// `confine_fs`: the filesystem is Landlock's to confine (there are no namespaces).
    fn restrict_current_thread(&self, workspace: &Path, confine_fs: bool) -> io::Result<()> {
        let level = if self.strict {
            CompatLevel::HardRequirement
        } else {
            CompatLevel::BestEffort
        };
        let err = |what: &str, e: &dyn fmt::Display| {
            io::Error::other(format!("the sandbox cannot be applied ({what}): {e}"))
        };
        let scoped = self.host.landlock.abi() >= 6;
        if !confine_fs && self.network && !scoped {
            // Nothing for Landlock here: the namespaces and seccomp do it all.
            return self.restrict_syscalls();
        }
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
        if scoped {
            ruleset = ruleset
                .scope(Scope::from_all(SCOPE_ABI))
                .map_err(|e| err("scopes", &e))?;
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
        self.restrict_syscalls()
    }

    fn restrict_syscalls(&self) -> io::Result<()> {
        if !self.host.seccomp {
            return Ok(());
        }
        seccomp::apply(self.network)
            .map_err(|e| io::Error::other(format!("the sandbox cannot be applied (seccomp): {e}")))
    }
}

mod bypass;
mod denial;
mod env;
mod git;
mod kernel;
mod namespace;
mod seccomp;
mod session;

pub use bypass::SandboxBypass;
pub(crate) use denial::DenialScan;
use denial::*;

#[cfg(test)]
mod tests;
