//! The harness every test file of penguin-server shares: the crate's own
//! [`penguin_server::testing`] (a server on a loopback port, a client for its API, a reader of
//! its SSE streams), with sessions from [`fake::FakeFactory`], built from the server's own
//! dependencies only (the engine with a scripted model and scripted tools, the trace store's
//! writer), so these tests need nothing of the session layer.
//!
//! Each test binary uses a part of it.
#![allow(dead_code)]

pub mod browser;
pub mod fake;
pub mod files;
pub mod script;

use std::sync::Arc;

use penguin_server::ServeOptions;
use serde_json::Value;

pub use fake::FakeFactory;
pub use penguin_server::testing::*;

/// Serves `script` (see [`FakeFactory::new`]) in a fresh [`TestDir`].
pub async fn serve_script(script: Value) -> TestServer {
    serve_script_with(script, |_| {}).await
}

/// [`serve_script`], with the options changed by `tweak` first.
pub async fn serve_script_with(script: Value, tweak: impl FnOnce(&mut ServeOptions)) -> TestServer {
    let dir = TestDir::new();
    let factory = FakeFactory::new(script, dir.workspace());
    serve(dir, Arc::new(factory), tweak).await
}
