//! A message serialized once, shared by every consumer.

use std::fmt;
use std::sync::Arc;

use crate::OmniMessage;

/// A message together with its single-line JSON, built once.
///
/// The stream consumer, the SSE channel, its replay buffer and the trace file all take the same
/// bytes from here, so clients can deduplicate by exact JSON. Cloning is a reference-count bump.
#[derive(Clone)]
pub struct Frame(Arc<Inner>);

struct Inner {
    message: OmniMessage,
    json: Box<str>,
}

impl Frame {
    /// Serializes `message` once.
    pub fn new(message: OmniMessage) -> Frame {
        let json = message.to_json().into_boxed_str();
        Frame(Arc::new(Inner { message, json }))
    }

    /// The message.
    pub fn message(&self) -> &OmniMessage {
        &self.0.message
    }

    /// Its single-line JSON (no trailing newline).
    pub fn json(&self) -> &str {
        &self.0.json
    }
}

impl From<OmniMessage> for Frame {
    fn from(m: OmniMessage) -> Frame {
        Frame::new(m)
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.json)
    }
}
