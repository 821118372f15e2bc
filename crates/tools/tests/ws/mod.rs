//! What the workspace-tool tests share: a temporary workspace with the built-in tools, and a
//! call that checks the close-out discipline and renders the answer for a snapshot.

#![allow(dead_code)]

use std::path::PathBuf;

use penguin_engine::{CancellationToken, Environment, ToolCallRequest};
use penguin_omni_protocol::{build, ModelPayload, StopReason, StreamEventType};
use penguin_tools::{BuiltinTools, ToolsConfig};
use serde_json::Value;

pub const ID: &str = "call_ws";

/// A temporary workspace and the tools working in it.
pub struct Ws {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub tools: BuiltinTools,
}

/// One call's answer.
#[derive(Debug)]
pub struct Answer {
    pub text: String,
    pub stop: StopReason,
    pub images: Vec<String>,
}

impl Answer {
    /// The stop reason, a line, then the text: what a snapshot holds.
    pub fn shown(&self) -> String {
        let stop = serde_json::to_value(self.stop).unwrap();
        format!("[{}]\n{}", stop.as_str().unwrap(), self.text)
    }
}

impl Ws {
    pub fn new() -> Ws {
        Ws::with(ToolsConfig::default())
    }

    pub fn with(config: ToolsConfig) -> Ws {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        let tools = BuiltinTools::new(&root, config).expect("workspace");
        Ws {
            _dir: dir,
            root,
            tools,
        }
    }

    /// A workspace of tools made elsewhere, in `dir` (kept alive with them).
    pub fn with_tools(dir: tempfile::TempDir, tools: BuiltinTools) -> Ws {
        Ws {
            root: tools.root().to_path_buf(),
            _dir: dir,
            tools,
        }
    }

    /// Writes `rel` (and its directories) in the workspace.
    pub fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// `rel`'s content.
    pub fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }

    /// Runs one call: start → delta* → stop → one complete output, the deltas adding up to it.
    pub async fn call(&self, name: &str, args: Value) -> Answer {
        let request = ToolCallRequest {
            call: build::tool_call(name, args.to_string(), ID, StopReason::Completed, None),
            cancel: CancellationToken::new(),
            approver: None,
            thinking_level: None,
        };
        let mut sink = Vec::new();
        self.tools.execute(request, &mut sink).await;
        let mut streamed = String::new();
        let mut events = Vec::new();
        let (last, body) = sink.split_last().expect("messages");
        for m in body {
            let Some(ModelPayload::PartialToolCallOutput(p)) = m.model() else {
                panic!("expected partial_tool_call_output, got {m:?}");
            };
            assert_eq!(p.tool_call_id, ID);
            events.push(p.event_type);
            if p.event_type == StreamEventType::Delta {
                streamed.push_str(&p.output);
            }
        }
        assert_eq!(events.first(), Some(&StreamEventType::Start));
        assert_eq!(events.last(), Some(&StreamEventType::Stop));
        let Some(ModelPayload::ToolCallOutput(done)) = last.model() else {
            panic!("expected the complete output last, got {last:?}");
        };
        assert_eq!(done.output, streamed, "the deltas add up to the output");
        Answer {
            text: done.output.clone(),
            stop: done.stop_reason.expect("stop reason"),
            images: done.images.clone().unwrap_or_default(),
        }
    }
}
