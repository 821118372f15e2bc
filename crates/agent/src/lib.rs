#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Unit tests set up their trees by hand; the door (clippy.toml) binds the crate's own code,
// which the non-test build checks.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod agent;
pub mod config;
pub mod goal;
#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
pub mod hooks;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod hosting;
pub mod images;
#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
pub mod launch;
pub mod memory;
pub mod models;
pub mod pricing;
pub mod prompt;
pub mod replay;
#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
pub mod rewind;
pub mod scenario;
pub mod session;
pub mod skills;
pub mod subagent;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod watch;
pub mod window;

/// Frees `value` on a thread named `name` rather than make the caller wait for it (a large
/// history or a played scenario takes milliseconds to free); when no thread can be started,
/// it is freed here after all.
pub(crate) fn free_elsewhere<T: Send + 'static>(name: &str, value: T) {
    let _ = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || drop(value));
}
