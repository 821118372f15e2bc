//! The namespace layer: a command's own view of the filesystem and of processes, set up by
//! bubblewrap (`bwrap`, Debian's `bubblewrap` package).
//!
//! Landlock decides what a command may *write*, but it cannot hide what it may read, and
//! metadata calls (`chmod`, `utimensat`, `setxattr`) are outside its rights. A mount namespace
//! answers all three at once: `/` is bound read-only, the writable roots are bound writable on
//! top, and penguin's own state (its data root: config, server token, traces) is covered by
//! an empty read-only tmpfs. A PID namespace hides penguin and every other process (no
//! `kill -STOP $PPID`, no `/proc/$PPID/environ`); all capabilities are dropped, so even root
//! cannot unmount what hides penguin's files.
//!
//! Landlock cannot go beneath bubblewrap (a thread with a Landlock filesystem domain may not
//! mount), so with namespaces the filesystem is confined by the mounts, while Landlock's
//! network rights and scopes and the seccomp filter still apply to bubblewrap and everything
//! it starts. Without bubblewrap, or where the kernel refuses namespaces, Landlock confines
//! writes as before and the resolution names what is left unprotected.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

/// Whether commands can get their own mount and PID namespaces on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// bubblewrap at this path set up a namespace here when probed.
    Bubblewrap(PathBuf),
    /// Not available, and why (no `bwrap` in the system's directories, or what it said when
    /// it failed).
    Unavailable(String),
    /// bubblewrap is installed at this path, and whether the kernel lets it set up namespaces
    /// is not known yet: finding out starts a process, so it is left to the first command that
    /// needs it ([`Namespaces::probe`], once per process). Not claimed available meanwhile.
    Untried(PathBuf),
}

/// The answer of the one probe of this process, once a command (or a strict sandbox) asked.
static PROBED: OnceLock<Namespaces> = OnceLock::new();

impl Namespaces {
    /// Tries bubblewrap once per process, the way commands will use it (under
    /// `no_new_privs` and the seccomp filter, which a setuid bubblewrap would not survive).
    /// Starts a process the first time: [`Namespaces::known`] does not.
    pub fn probe() -> Namespaces {
        PROBED.get_or_init(probe_now).clone()
    }

    /// What is known without starting a process: the probe's answer when this process has
    /// already tried, `Unavailable` when no bubblewrap is installed, else `Untried`.
    pub fn known() -> Namespaces {
        if let Some(probed) = PROBED.get() {
            return probed.clone();
        }
        match find_system_program("bwrap") {
            Some(bwrap) => Namespaces::Untried(bwrap),
            None => Namespaces::Unavailable(not_installed()),
        }
    }

    /// Whether commands run in namespaces (`Untried`: not known yet, so no).
    pub fn available(&self) -> bool {
        matches!(self, Namespaces::Bubblewrap(_))
    }

    /// This answer, or for `Untried` what this process's probe has found since, if it ran:
    /// never starts anything.
    pub fn current(&self) -> Namespaces {
        match self {
            Namespaces::Untried(_) => PROBED.get().cloned().unwrap_or_else(|| self.clone()),
            known => known.clone(),
        }
    }

    /// This answer, an `Untried` one found out now ([`Namespaces::probe`]).
    pub fn tried(&self) -> Namespaces {
        match self {
            Namespaces::Untried(_) => Namespaces::probe(),
            known => known.clone(),
        }
    }
}

fn not_installed() -> String {
    format!(
        "bubblewrap (bwrap) is not installed in {}: scripts/install-sandbox.sh installs it",
        SYSTEM_DIRS.join(", ")
    )
}

fn probe_now() -> Namespaces {
    let Some(bwrap) = find_system_program("bwrap") else {
        return Namespaces::Unavailable(not_installed());
    };
    let root = Path::new("/");
    let args = arguments(&[root.to_path_buf()], &[], &[], &[]);
    let probe = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if super::seccomp::supported() {
                    super::seccomp::apply(true)?;
                }
                std::process::Command::new(&bwrap)
                    .args(&args)
                    // No init of bubblewrap's own in the namespace: its init outlives the
                    // bubblewrap penguin waits for, so nobody but the system's init reaps it,
                    // and it lingered in penguin's process group after penguin had exited.
                    // Here `true` is the namespace's first process and bubblewrap reaps it.
                    .arg("--as-pid-1")
                    .arg("--")
                    .arg("true")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .output()
                    .map_err(|e| e.to_string())
            })
            .join()
            .unwrap_or_else(|_| Err("the probe panicked".into()))
    });
    match probe {
        Ok(out) if out.status.success() => Namespaces::Bubblewrap(bwrap),
        Ok(out) => Namespaces::Unavailable(format!(
            "bubblewrap cannot create namespaces here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Namespaces::Unavailable(format!("bubblewrap cannot be started: {e}")),
    }
}

/// Where the programs that set a command's confinement up (bubblewrap, `setsid`) are looked
/// for: the system's own directories (NixOS's included), writable by root alone.
pub(super) const SYSTEM_DIRS: [&str; 6] = [
    "/usr/bin",
    "/bin",
    "/usr/local/bin",
    "/usr/sbin",
    "/sbin",
    "/run/current-system/sw/bin",
];

/// `name` in the first of [`SYSTEM_DIRS`] that has it. Never from `PATH`: it often holds a
/// directory in the home folder (`~/.local/bin`, `~/.cargo/bin`), which a command whose
/// workspace is the home folder may write, and a `bwrap` or `setsid` planted there would start
/// every later command outside its namespaces.
pub(super) fn find_system_program(name: &str) -> Option<PathBuf> {
    SYSTEM_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// bubblewrap's arguments (before `--` and the program) for these writable roots, hidden
/// paths, the read-only directories beneath hidden ones, and the paths inside writable roots
/// that stay read-only (the repositories' `.git`). Mounts go shallowest first so that a deeper
/// one wins: a data root inside the workspace is hidden although the workspace is writable,
/// and a workspace (or the skills folder) inside a hidden directory stays visible. Each hidden
/// directory is an empty tmpfs made read-only last, once everything beneath it is mounted
/// (bubblewrap cannot make a mount point in a read-only tmpfs; the remount does not reach the
/// mounts beneath).
///
/// There is no `--new-session`: [`Sandbox::start`](super::Sandbox::start) already starts
/// bubblewrap as the leader of a session of its own, and bubblewrap's own `setsid` would
/// move the command out of the process group penguin signals (interrupt, kill, timeout).
pub(super) fn arguments(
    writable: &[PathBuf],
    hidden: &[PathBuf],
    readable: &[PathBuf],
    read_only: &[PathBuf],
) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-pid",
        "--unshare-ipc",
        "--cap-drop",
        "ALL",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    enum Mount<'a> {
        Writable(&'a Path),
        Hidden(&'a Path),
        Readable(&'a Path),
        ReadOnly(&'a Path),
    }
    let mut mounts: Vec<Mount<'_>> = writable
        .iter()
        .filter(|p| p.as_path() != Path::new("/"))
        .map(|p| Mount::Writable(p))
        .chain(hidden.iter().map(|p| Mount::Hidden(p)))
        // Only beneath a hidden path: elsewhere `/` is readable already.
        .chain(
            readable
                .iter()
                .filter(|r| r.is_dir() && hidden.iter().any(|h| r.starts_with(h) && *r != h))
                .map(|p| Mount::Readable(p)),
        )
        // Last, so that at an equal depth the read-only bind wins.
        .chain(
            read_only
                .iter()
                .filter(|p| p.exists())
                .map(|p| Mount::ReadOnly(p)),
        )
        .collect();
    let depth = |m: &Mount<'_>| match m {
        Mount::Writable(p) | Mount::Hidden(p) | Mount::Readable(p) | Mount::ReadOnly(p) => {
            p.components().count()
        }
    };
    mounts.sort_by_key(depth);
    let mut remount = Vec::new();
    for mount in mounts {
        match mount {
            Mount::Writable(p) => {
                args.extend(["--bind".into(), p.into(), p.into()]);
            }
            Mount::Readable(p) | Mount::ReadOnly(p) => {
                args.extend(["--ro-bind".into(), p.into(), p.into()]);
            }
            Mount::Hidden(p) if p.is_dir() => {
                args.extend(["--tmpfs".into(), p.into()]);
                remount.push(p);
            }
            Mount::Hidden(p) if p.exists() => {
                args.extend(["--ro-bind".into(), "/dev/null".into(), p.into()]);
            }
            // Nothing there to hide.
            Mount::Hidden(_) => {}
        }
    }
    for p in remount {
        args.extend(["--remount-ro".into(), p.into()]);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_hidden_directory_inside_the_workspace_is_mounted_after_it() {
        let ws = tempfile::tempdir().unwrap();
        let data = ws.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let args = text(&arguments(
            &[ws.path().to_path_buf()],
            std::slice::from_ref(&data),
            &[],
            &[],
        ));
        let ws = ws.path().display().to_string();
        let data = data.display().to_string();
        let bind = args.find(&format!("--bind {ws} {ws}")).unwrap();
        let hide = args.find(&format!("--tmpfs {data}")).unwrap();
        assert!(bind < hide, "{args}");
        assert!(args.ends_with(&format!("--remount-ro {data}")), "{args}");
        assert!(
            args.starts_with("--ro-bind / / --dev /dev --proc /proc"),
            "{args}"
        );
        assert!(args.contains("--cap-drop ALL"), "{args}");
    }

    #[test]
    fn a_missing_path_is_not_mounted_and_a_file_is_covered_by_dev_null() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "secret").unwrap();
        let missing = dir.path().join("nothing");
        let args = text(&arguments(&[], &[file.clone(), missing.clone()], &[], &[]));
        assert!(
            args.ends_with(&format!("--ro-bind /dev/null {}", file.display())),
            "{args}"
        );
        assert!(!args.contains(&missing.display().to_string()), "{args}");
    }

    #[test]
    fn a_readable_folder_in_a_hidden_one_is_bound_read_only_before_the_remount() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let skills = data.join("skills");
        std::fs::create_dir_all(&skills).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let args = text(&arguments(
            &[],
            std::slice::from_ref(&data),
            &[skills.clone(), elsewhere.clone(), data.join("missing")],
            &[],
        ));
        let (data, skills) = (data.display().to_string(), skills.display().to_string());
        let tmpfs = args.find(&format!("--tmpfs {data}")).unwrap();
        let bind = args.find(&format!("--ro-bind {skills} {skills}")).unwrap();
        let remount = args.find(&format!("--remount-ro {data}")).unwrap();
        assert!(tmpfs < bind && bind < remount, "{args}");
        // Not beneath a hidden path, or not there: nothing to bind.
        assert!(
            !args.contains("elsewhere") && !args.contains("missing"),
            "{args}"
        );
    }

    #[test]
    fn a_repository_in_a_writable_root_is_bound_read_only_over_it() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir(&git).unwrap();
        let args = text(&arguments(
            &[ws.path().to_path_buf()],
            &[],
            &[],
            &[git.clone(), ws.path().join("missing/.git")],
        ));
        let (ws, git) = (ws.path().display().to_string(), git.display().to_string());
        let bind = args.find(&format!("--bind {ws} {ws}")).unwrap();
        let read_only = args.find(&format!("--ro-bind {git} {git}")).unwrap();
        assert!(bind < read_only, "{args}");
        // Nothing there: no mount point is made for it.
        assert!(!args.contains("missing"), "{args}");
        assert!(!args.contains("--new-session"), "{args}");
    }
}
