//! penguin: an agent harness.
pub use penguin_engine as engine;
pub use penguin_llm_providers as llm_providers;
pub use penguin_merge_queue as merge_queue;
pub use penguin_omni_protocol as omni_protocol;
pub use penguin_sse_transport as sse_transport;
pub use penguin_trace_store as trace_store;

pub mod agent;
pub mod config;
pub mod console;
pub mod models;
pub mod policy;
pub mod render;
pub mod scenario;
pub mod server;
pub mod session;
pub mod subagent;
pub mod tools;
pub mod watch;
