//! What the running machine can enforce: its Landlock version, namespaces and seccomp, and
//! the protections a mode asks for that it cannot give.

use std::fmt;
use std::sync::OnceLock;

use landlock::{LandlockStatus, RestrictSelf, ABI};

use super::Namespaces;

/// What the machine offers the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Landlock on the running kernel.
    pub landlock: Landlock,
    /// Mount and PID namespaces for commands.
    pub namespaces: Namespaces,
    /// Whether the seccomp filter can be installed (this architecture is supported).
    pub seccomp: bool,
}

impl Host {
    /// Asks the running machine (each part once per process), bubblewrap included: the first
    /// call in a process starts it once to see whether namespaces work.
    pub fn probe() -> Host {
        Host {
            namespaces: Namespaces::probe(),
            ..Host::known()
        }
    }

    /// What the machine offers as far as is known without starting a process: Landlock and
    /// seccomp are asked of the kernel, namespaces are [`Namespaces::known`] (`Untried` until
    /// a command of this process needed them, when bubblewrap is installed).
    pub fn known() -> Host {
        Host {
            landlock: Landlock::probe(),
            namespaces: Namespaces::known(),
            seccomp: super::seccomp::supported(),
        }
    }
}

/// A host with this Landlock and every other layer (namespaces, seccomp): how tests describe
/// kernels that differ only in Landlock.
impl From<Landlock> for Host {
    fn from(landlock: Landlock) -> Host {
        Host {
            landlock,
            namespaces: Namespaces::Bubblewrap("bwrap".into()),
            seccomp: true,
        }
    }
}

/// Landlock on the running kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landlock {
    /// Available, with this ABI version (capped at the newest the `landlock` crate knows).
    Abi(u8),
    /// Built into the kernel but not enabled at boot (`lsm=` lacks `landlock`).
    NotEnabled,
    /// Not built into the kernel.
    NotImplemented,
}

impl Landlock {
    /// Asks the running kernel, once per process.
    pub fn probe() -> Landlock {
        static PROBED: OnceLock<Landlock> = OnceLock::new();
        *PROBED.get_or_init(|| {
            // Applying no flags without no_new_privs makes no change to the thread: this is
            // only the crate's public way to read the kernel's Landlock status.
            match RestrictSelf::default().no_new_privs(false).apply() {
                Ok(status) => match status.landlock {
                    LandlockStatus::Available { effective_abi, .. } => {
                        Landlock::Abi(abi_number(effective_abi))
                    }
                    LandlockStatus::NotEnabled => Landlock::NotEnabled,
                    LandlockStatus::NotImplemented => Landlock::NotImplemented,
                },
                Err(_) => Landlock::NotImplemented,
            }
        })
    }

    pub(super) fn abi(self) -> u8 {
        match self {
            Landlock::Abi(n) => n,
            Landlock::NotEnabled | Landlock::NotImplemented => 0,
        }
    }
}

impl fmt::Display for Landlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Landlock::Abi(n) => write!(f, "Landlock ABI {n}"),
            Landlock::NotEnabled => f.write_str("Landlock is not enabled in this kernel"),
            Landlock::NotImplemented => f.write_str("this kernel has no Landlock"),
        }
    }
}

/// `ABI` is non-exhaustive, so it cannot be cast; its versions are ordered.
fn abi_number(abi: ABI) -> u8 {
    const KNOWN: [ABI; 10] = [
        ABI::V1,
        ABI::V2,
        ABI::V3,
        ABI::V4,
        ABI::V5,
        ABI::V6,
        ABI::V7,
        ABI::V8,
        ABI::V9,
        ABI::V10,
    ];
    KNOWN.iter().filter(|known| abi >= **known).count() as u8
}

/// A protection asked for that the kernel cannot give.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Gap {
    /// No Landlock: commands run unconfined.
    Landlock,
    /// Landlock ABI < 3: `truncate(2)` on a file outside the writable paths is not refused.
    Truncate,
    /// Landlock ABI < 4: TCP is not blocked although `network = false`.
    Network,
    /// Landlock ABI < 5: ioctls on device files opened for reading are not refused.
    DeviceIoctl,
    /// No namespaces (bubblewrap missing, or the kernel refuses them): penguin's own files
    /// and its `/proc/PID/environ` stay readable, metadata outside the writable paths
    /// (`chmod`, timestamps, xattrs) is not protected, and the `.git` of a repository in a
    /// writable root is writable (Landlock cannot take a subtree back from a granted tree).
    Namespaces,
    /// Landlock ABI < 6 and no namespaces: commands can signal processes outside the sandbox
    /// (penguin itself) and reach abstract Unix sockets.
    Signals,
    /// No seccomp here: with the network off, UDP, raw and MPTCP sockets are not refused.
    Sockets,
}

impl Gap {
    /// A short name, as shown in the API (`truncate`, `network`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Gap::Landlock => "landlock",
            Gap::Truncate => "truncate",
            Gap::Network => "network",
            Gap::DeviceIoctl => "device-ioctl",
            Gap::Namespaces => "namespaces",
            Gap::Signals => "signals",
            Gap::Sockets => "sockets",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Gap::Landlock => "commands run unconfined",
            Gap::Truncate => {
                "truncating files outside the writable paths is not blocked (needs ABI 3)"
            }
            Gap::Network => "TCP connections are not blocked (needs ABI 4)",
            Gap::DeviceIoctl => "ioctls on device files are not blocked (needs ABI 5)",
            Gap::Namespaces => "without namespaces (install bubblewrap) penguin's data root and its process environment stay readable, chmod, timestamps and xattrs outside the writable paths are not blocked, and a repository's .git in the workspace stays writable",
            Gap::Signals => "signals to penguin and abstract Unix sockets are not blocked (needs ABI 6 or namespaces)",
            Gap::Sockets => "UDP, raw and MPTCP sockets are not blocked (no seccomp on this architecture)",
        }
    }
}
