#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

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
