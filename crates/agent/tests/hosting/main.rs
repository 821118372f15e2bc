//! The facade's hosting pieces behind penguin-server: its factories (`ScenarioFactory`,
//! `ModelFactory`), `Session` as the server's `HostedSession` (background commands and
//! subagents, the sandbox it reports), MCP servers a session brings, and `penguin watch`.
//!
//! The server itself is tested with fake sessions in `crates/server/tests/`; these check that
//! the facade's real pieces work behind it, through the same harness
//! (`penguin_server::testing`, feature `testing`).

// Tests build and inspect their trees by hand; the door (clippy.toml) is for the crate's own code.
#![allow(clippy::disallowed_methods)]

mod approvals;
mod background;
mod files;
mod goal;
mod hooks;
mod model_edits;
mod models;
mod sandbox;
