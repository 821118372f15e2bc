//! The OmniMessage protocol: the vocabulary every penguin crate shares.
//!
//! - [`OmniMessage`] and its payloads serialize to the reference implementation's exact bytes
//!   (key order, omitted optionals, `"reason":null`, millisecond `Z` timestamps).
//! - [`build`] holds the builders, [`markers`] the marker blocks and transcript lines.
//! - [`PartialAggregator`] folds partial fragments back into complete messages.
//! - [`validator::StreamValidator`] checks a stream against the seed's guarantees.
//! - [`Frame`] is a message serialized once, so every consumer shares the same bytes.
//!
//! No I/O and no async runtime: this crate is safe to use anywhere.
//!
//! ```
//! use penguin_omni_protocol::{build, OmniMessage, StopReason};
//! let msg = build::assistant_text("hello", StopReason::Completed);
//! let json = msg.to_json();
//! assert!(json.ends_with(r#""type":"model_msg","payload":{"type":"text","role":"assistant","text":"hello","stop_reason":"completed"}}"#));
//! assert_eq!(OmniMessage::from_json(&json).unwrap(), msg);
//! ```

mod aggregate;
pub mod background;
pub mod build;
mod frame;
pub mod markers;
mod message;
mod timestamp;
pub mod validator;

pub use aggregate::PartialAggregator;
pub use frame::Frame;
pub use message::*;
pub use timestamp::Timestamp;
