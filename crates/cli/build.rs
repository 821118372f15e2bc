//! Links the `penguin` binary with packed relative relocations (`DT_RELR`) where the C library
//! it runs on can apply them (glibc 2.36 and later).
//!
//! A position-independent binary carries one relocation for every pointer in its static data
//! (vtables, panic locations, string tables): 33,000 of them here, 800 KB that the dynamic
//! loader reads at every start, resident for the whole run, and a quarter of a millisecond to apply. Packed, they
//! are 13 KB. A resume of a long session is a short process, so this is a visible part of its
//! memory (docs/performance.md).
//!
//! Only for a native glibc build: the linker then marks the binary as needing the C library's
//! `GLIBC_ABI_DT_RELR`, which an older glibc refuses to load, and a cross build cannot ask the
//! target's C library its version here.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    if !native || var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    if glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo:rustc-link-arg-bin=penguin=-Wl,-z,pack-relative-relocs");
    }
}

/// The version of the C library this machine runs, as `getconf` says it (`glibc 2.36`).
fn glibc_version() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
    let minor = minor.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}
