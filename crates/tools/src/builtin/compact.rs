//! The compact definitions ([`Descriptions::Compact`](super::Descriptions::Compact)): for a model
//! with a small context window, where every token of the tool definitions is a token the
//! conversation cannot have. One sentence per tool, and schemas holding only what a call needs
//! to be right: the arguments, their types, which are required and the few descriptions a name
//! does not say (the patch format). The tools themselves are unchanged: they take the same
//! arguments and answer the same way whichever definitions the model was shown.

use serde_json::{json, Value};

use super::BuiltinTool;

/// `tool`'s compact description and schema.
pub(super) fn definition(tool: BuiltinTool) -> (&'static str, Value) {
    match tool {
        BuiltinTool::ExecCommand => (
            "Run a shell command (sh -c) in the workspace; answers its output and exit code.",
            object(
                json!({
                    "cmd": {"type": "string"},
                    "workdir": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1}
                }),
                &["cmd"],
            ),
        ),
        BuiltinTool::InputCommand => (
            "Write chars to a running command's stdin, or without chars wait for its output.",
            object(
                json!({
                    "process_id": {"type": "string"},
                    "chars": {"type": "string"}
                }),
                &["process_id"],
            ),
        ),
        BuiltinTool::KillCommand => (
            "Stop a running command and what it started.",
            object(
                json!({"process_id": {"type": "string"}}),
                &["process_id"],
            ),
        ),
        BuiltinTool::ReadFile => (
            "Read a text file of the workspace as numbered lines; offset and limit pick the lines.",
            object(
                json!({
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1}
                }),
                &["path"],
            ),
        ),
        BuiltinTool::ListFiles => (
            "List the workspace's files, optionally matching a glob such as *.rs or src/**/*.ts.",
            object(
                json!({
                    "pattern": {"type": "string"},
                    "path": {"type": "string"}
                }),
                &[],
            ),
        ),
        BuiltinTool::GrepFiles => (
            "Search the workspace's files for a regular expression; answers path:line:text lines.",
            object(
                json!({
                    "pattern": {"type": "string"},
                    "path": {"type": "string"},
                    "glob": {"type": "string"}
                }),
                &["pattern"],
            ),
        ),
        BuiltinTool::ReadImage => (
            "Look at an image file (PNG, JPEG, GIF, WebP) of the workspace.",
            object(json!({"path": {"type": "string"}}), &["path"]),
        ),
        BuiltinTool::WriteFile => (
            "Create a file of the workspace or replace all its content.",
            object(
                json!({
                    "path": {"type": "string"},
                    "content": {"type": "string"}
                }),
                &["path", "content"],
            ),
        ),
        BuiltinTool::EditFile => (
            "Replace old_string, which must occur exactly once, with new_string in a file of the workspace.",
            object(
                json!({
                    "path": {"type": "string"},
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean"}
                }),
                &["path", "old_string", "new_string"],
            ),
        ),
        BuiltinTool::ApplyPatch => (
            "Change files with a patch, all or nothing:\n\
             *** Begin Patch\n\
             *** Update File: path\n\
             @@ a line above the change\n\
             \x20context\n\
             -removed\n\
             +added\n\
             *** Add File: path (every line +)\n\
             *** Delete File: path\n\
             *** End Patch",
            object(json!({"input": {"type": "string"}}), &["input"]),
        ),
        BuiltinTool::UpdatePlan => (
            "Set the task's checklist: every step with its status.",
            object(
                json!({
                    "plan": {
                        "type": "array",
                        "items": object(
                            json!({
                                "step": {"type": "string"},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                            }),
                            &["step", "status"],
                        )
                    }
                }),
                &["plan"],
            ),
        ),
    }
}

/// An object schema of `properties`, `required`, and no other property.
fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}
