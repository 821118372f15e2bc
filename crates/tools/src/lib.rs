#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Unit tests set up their trees by hand; the door (clippy.toml) binds the crate's own code,
// which the non-test build checks.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

// Without `builtin` the crate is its light core: the door (`confined`), the close-out
// contract and its output side, notes, memory and the command policy. Parts of `path`,
// `fs_tool` and `memory` serve only the built-in file tools, and the contract's driver and
// the command buffer's stream decoder only tools this crate runs; they are compiled either
// way (one code path), so the cut-down build allows them to go unused.
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub mod browse;
#[cfg(feature = "builtin")]
mod builtin;
#[cfg_attr(not(feature = "builtin"), allow(dead_code))]
mod call_output;
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub mod checkpoint;
#[cfg(feature = "builtin")]
mod command;
#[cfg(not(feature = "builtin"))]
#[path = "command/buffer.rs"]
#[allow(dead_code)]
mod command_buffer;
pub mod confined;
#[cfg_attr(not(feature = "builtin"), allow(dead_code))]
mod contract;
#[cfg(feature = "builtin")]
mod environment;
#[cfg(feature = "builtin")]
mod exec;
#[cfg(feature = "builtin")]
mod files;
#[cfg_attr(not(feature = "builtin"), allow(dead_code))]
mod fs_tool;
#[cfg(feature = "builtin")]
mod image;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
#[cfg_attr(not(feature = "builtin"), allow(dead_code))]
pub mod memory;
pub mod notes;
#[cfg(feature = "builtin")]
mod patch;
#[cfg_attr(not(feature = "builtin"), allow(dead_code))]
mod path;
#[cfg(feature = "builtin")]
mod plan;
pub mod policy;
#[cfg(all(test, feature = "builtin"))]
mod races;
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub mod sandbox;
#[cfg(feature = "builtin")]
mod search;
pub mod workspace_dir;

use std::time::Duration;

#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub use builtin::{BuiltinTool, Descriptions, EditTools};
pub use call_output::{CallOutput, ARCHIVE_DIR};
#[cfg(feature = "builtin")]
pub use command::CappedText;
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub use command::{kill_all_background_processes, CommandSessions, MAX_PROCESSES};
#[cfg(not(feature = "builtin"))]
pub use command_buffer::CappedText;
pub use contract::{Limits, Output, Tool, ToolOutcome, ToolResult};
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub use environment::{BuiltinTools, ToolNameError, ToolsConfig};
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub use plan::{Plan, PlanStep, StepStatus, MAX_STEPS, MAX_STEP_CHARS};
#[cfg(feature = "builtin")]
#[cfg_attr(docsrs, doc(cfg(feature = "builtin")))]
pub use sandbox::{Sandbox, SandboxBypass, SandboxMode, SandboxRequest};

/// The reference's default output cap, in chars.
pub const DEFAULT_MAX_OUTPUT_CHARS: i64 = 16_000;

/// The reference's default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
