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

/// The specification these crates implement, shipped with them: a section cited in penguin's
/// docs by its number, as in [§2.16](crate::spec#s2.16), is the section of this page with
/// that number, whose anchor is `#s` and the number.
#[doc = include_str!("../PROTOCOL.md")]
pub mod spec {}

pub use aggregate::PartialAggregator;
pub use frame::Frame;
pub use message::*;
pub use timestamp::Timestamp;
