//! The seccomp layer: system calls Landlock does not see.
//!
//! Landlock's network rights cover TCP `connect` and `bind` only. A socket of another protocol
//! walks around them: MPTCP (`socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`) connects to any
//! port while plain TCP gets `EACCES`, and UDP, raw and packet sockets are not covered at all.
//! io_uring can create sockets without calling `socket(2)`. So, on the same short-lived thread
//! that applies Landlock, a seccomp filter is installed that every command inherits:
//!
//! - always: `io_uring_setup`, `io_uring_enter` and `io_uring_register` fail with `EPERM`
//!   (what Docker's default profile does too);
//! - always: `keyctl`, `add_key` and `request_key` fail with `EPERM`: the kernel keyring is
//!   not a namespace bubblewrap can give a command, so a command would reach the user's (and
//!   its session's) keys, tokens a login put there included. Docker refuses them too;
//! - always: `ioctl` with `TIOCSTI` (type a character into a terminal) or `TIOCLINUX` (its
//!   console twin, which can paste the selection) fails with `EPERM`. A command has no
//!   controlling terminal (it leads a session of its own, `session.rs`), but a command running
//!   as root holds `CAP_SYS_ADMIN` where there are no namespaces, which lets it type into any
//!   terminal it can open (`/dev/pts/N` by path). The request number is compared on its low 32
//!   bits, the width the kernel reads, so high bits do not slip past;
//! - with the network off: `socket(2)` fails with `EACCES` for every family but Unix, IPv4 and
//!   IPv6, and for IPv4/IPv6 for every type but `SOCK_STREAM` with protocol 0 or TCP, which
//!   Landlock then filters by port.
//!
//! A system call of another architecture (32-bit `int 0x80` on x86_64) kills the process, and
//! x32 numbers are refused like their 64-bit twins.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Whether this build can install the filter on this architecture.
pub(super) fn supported() -> bool {
    TargetArch::try_from(std::env::consts::ARCH).is_ok()
}

/// Installs the filters on the calling thread (and so on every process it forks from now on).
pub(super) fn apply(network: bool) -> Result<(), String> {
    for program in programs(network)? {
        seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One filter per answer (seccompiler gives a filter one match action); the kernel runs every
/// installed filter and takes the strictest answer.
fn programs(network: bool) -> Result<Vec<BpfProgram>, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    // An empty chain matches unconditionally.
    let mut always: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ]
    .into_iter()
    .map(|nr| (nr, Vec::new()))
    .collect();
    always.insert(libc::SYS_ioctl, terminal_rules()?);
    let mut refused: Vec<(i32, BTreeMap<i64, Vec<SeccompRule>>)> = vec![(libc::EPERM, always)];
    if !network {
        refused.push((
            libc::EACCES,
            BTreeMap::from([(libc::SYS_socket, socket_rules()?)]),
        ));
    }
    refused
        .into_iter()
        .map(|(errno, mut rules)| {
            if matches!(arch, TargetArch::x86_64) {
                const X32: i64 = 0x4000_0000;
                let twins: Vec<_> = rules
                    .iter()
                    .map(|(nr, chain)| (nr | X32, chain.clone()))
                    .collect();
                rules.extend(twins);
            }
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )
            .map_err(|e| e.to_string())?;
            BpfProgram::try_from(filter).map_err(|e| e.to_string())
        })
        .collect()
}

/// The `ioctl(2)` requests that type into a terminal.
fn terminal_rules() -> Result<Vec<SeccompRule>, String> {
    // The request is an `unsigned int` to the kernel: a Dword condition reads those 32 bits.
    [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|request| {
            let cond = SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                u64::from(request as u32),
            )
            .map_err(|e| e.to_string())?;
            SeccompRule::new(vec![cond]).map_err(|e| e.to_string())
        })
        .collect()
}

/// The `socket(2)` calls refused with the network off.
fn socket_rules() -> Result<Vec<SeccompRule>, String> {
    let cond = |arg: u8, op: SeccompCmpOp, value: i32| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value as u64)
            .map_err(|e| e.to_string())
    };
    let rule = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).map_err(|e| e.to_string());
    let mut rules = vec![rule(vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_UNIX)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6)?,
    ])?];
    for family in [libc::AF_INET, libc::AF_INET6] {
        // The type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC ride above them.
        for ty in (0..16).filter(|t| *t != libc::SOCK_STREAM) {
            rules.push(rule(vec![
                cond(0, SeccompCmpOp::Eq, family)?,
                cond(1, SeccompCmpOp::MaskedEq(0xf), ty)?,
            ])?);
        }
        rules.push(rule(vec![
            cond(0, SeccompCmpOp::Eq, family)?,
            cond(2, SeccompCmpOp::Ne, 0)?,
            cond(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP)?,
        ])?);
    }
    Ok(rules)
}
