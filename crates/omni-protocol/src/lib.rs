#![doc = include_str!("../README.md")]

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
