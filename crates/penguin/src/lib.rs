//! penguin, an agent harness: sessions that compose the engine, a model, the built-in tools and
//! a Trace, and the factories `penguin serve` hosts them with.
//!
//! - [`agent::Agent`]: where sessions live and how they are created, listed and resumed;
//! - [`session::Session`]: an engine with its Trace and `session_meta`;
//! - [`config`] and [`models`]: `config.toml`, flags and environment, and building the model;
//! - [`prompt`]: the system prompt (workspace, OS, shell, date, tools, `AGENTS.md` files);
//! - [`subagent`]: `run_subagent`, `input_subagent`, `kill_subagent`: child sessions, in the
//!   foreground or the background;
//! - [`hosting`]: sessions for [`server`];
//! - [`scenario`]: scenario files (scripted model, tools and approvals) through the real engine;
//! - [`watch`]: following a served session as the web client does.
//!
//! The `penguin` binary's CLI lives in `src/bin/penguin`, not here.

pub use penguin_engine as engine;
pub use penguin_llm_providers as llm_providers;
pub use penguin_omni_protocol as omni_protocol;
pub use penguin_server as server;
pub use penguin_sse_transport as sse_transport;
pub use penguin_tools as tools;
pub use penguin_trace_store as trace_store;

pub mod agent;
pub mod config;
pub mod hosting;
pub mod models;
pub mod prompt;
pub mod scenario;
pub mod session;
pub mod subagent;
pub mod watch;

/// Frees `value` on a thread named `name` rather than make the caller wait for it (a large
/// history or a played scenario takes milliseconds to free); when no thread can be started,
/// it is freed here after all.
pub(crate) fn free_elsewhere<T: Send + 'static>(name: &str, value: T) {
    let _ = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || drop(value));
}
