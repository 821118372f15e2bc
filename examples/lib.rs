//! Programs that build on penguin's crates as a dependency would, one job each:
//!
//! - `minimal_agent`: the engine, an OpenAI-compatible provider and the built-in tools in the
//!   current directory, approving each call at the terminal;
//! - `custom_tool`: a tool of one's own beside the built-in ones, under their contract;
//! - `custom_environment`: an `Environment` of one's own (a calculator tool) driven by the
//!   engine;
//! - `embed_server`: `penguin-server` embedded in a program with its own `SessionFactory`.
//! - `session_agent`: a minimal agent with a Trace and a resume on the session layer alone
//!   (engine, trace store, built-in tools, a scripted model), without the facade.
//!
//! `cargo run -p penguin-examples --example NAME`; each file says what it needs.
