//! The built-in tools' names, permissions and the definitions offered to the model.

use penguin_engine::Permission;
use penguin_omni_protocol::ToolDefinition;
use serde_json::json;

/// One built-in tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuiltinTool {
    /// `exec_command {cmd, workdir?, yield_time_ms?, run_in_background?, timeout_ms?}`:
    /// `sh -c cmd` in the workspace; a command still running at its wait runs on.
    ExecCommand,
    /// `input_command {process_id, chars?, yield_time_ms?}`: writes to (or polls) a command.
    InputCommand,
    /// `kill_command {process_id}`: ends a command's process group.
    KillCommand,
    /// `read_file {path, start_line?, end_line?}`.
    ReadFile,
    /// `write_file {path, content}`.
    WriteFile,
    /// `edit_file {path, old_string, new_string, replace_all?}`.
    EditFile,
}

impl BuiltinTool {
    /// Every built-in tool, in the order they are offered.
    pub const ALL: [BuiltinTool; 6] = [
        BuiltinTool::ExecCommand,
        BuiltinTool::InputCommand,
        BuiltinTool::KillCommand,
        BuiltinTool::ReadFile,
        BuiltinTool::WriteFile,
        BuiltinTool::EditFile,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            BuiltinTool::ExecCommand => "exec_command",
            BuiltinTool::InputCommand => "input_command",
            BuiltinTool::KillCommand => "kill_command",
            BuiltinTool::ReadFile => "read_file",
            BuiltinTool::WriteFile => "write_file",
            BuiltinTool::EditFile => "edit_file",
        }
    }

    /// The tool called `name`, if any.
    pub fn from_name(name: &str) -> Option<BuiltinTool> {
        BuiltinTool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `Read` for `read_file`, `ReadWrite` for the others.
    pub fn permission(self) -> Permission {
        match self {
            BuiltinTool::ReadFile => Permission::Read,
            _ => Permission::ReadWrite,
        }
    }

    /// The definition offered to the model, with the JSON Schema of its arguments.
    pub fn definition(self) -> ToolDefinition {
        let (description, parameters) = match self {
            BuiltinTool::ExecCommand => (
                "Run a shell command (sh -c) in the workspace directory. stdout and stderr are \
                 returned interleaved; a non-zero exit is reported as [exit code: N]. The call \
                 returns when the command exits (jobs it left behind are killed then) or after \
                 yield_time_ms, whichever is first; a command still running then keeps running \
                 and the output says its process_id, for input_command and kill_command. With \
                 run_in_background the call returns at once and a message reports the command's \
                 end.",
                json!({
                    "type": "object",
                    "properties": {
                        "cmd": {"type": "string", "description": "The shell command."},
                        "workdir": {"type": "string", "description": "Directory to run in, relative to the workspace root (default: the root)."},
                        "yield_time_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for the command before handing back its process_id (default 60000)."},
                        "run_in_background": {"type": "boolean", "description": "Start the command and return at once; its completion arrives as a message.", "default": false},
                        "timeout_ms": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "Timeout for this call in milliseconds; it can shorten the configured timeout, not extend it."
                        }
                    },
                    "required": ["cmd"],
                    "additionalProperties": false
                }),
            ),
            BuiltinTool::InputCommand => (
                "Write to a running command's stdin (chars; send \"\\u0003\" alone for Ctrl-C) or, \
                 with no chars, wait for more of its output. Returns only output not returned \
                 before, and the exit status once it has exited.",
                json!({
                    "type": "object",
                    "properties": {
                        "process_id": {"type": "string", "description": "From exec_command."},
                        "chars": {"type": "string", "description": "Text to write to stdin (include \\n to send a line)."},
                        "yield_time_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for output (default 250 after writing, 120000 for a poll)."}
                    },
                    "required": ["process_id"],
                    "additionalProperties": false
                }),
            ),
            BuiltinTool::KillCommand => (
                "End a running command and everything it started (SIGTERM, then SIGKILL), returning output not returned before.",
                json!({
                    "type": "object",
                    "properties": {
                        "process_id": {"type": "string", "description": "From exec_command."}
                    },
                    "required": ["process_id"],
                    "additionalProperties": false
                }),
            ),
            BuiltinTool::ReadFile => (
                "Read a UTF-8 text file in the workspace, optionally only lines start_line..=end_line (1-based, inclusive).",
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Path relative to the workspace root."},
                        "start_line": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                        "end_line": {"type": "integer", "minimum": 1, "description": "Last line to return (inclusive)."}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
            ),
            BuiltinTool::WriteFile => (
                "Write a file in the workspace, creating parent directories and replacing any existing content.",
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Path relative to the workspace root."},
                        "content": {"type": "string", "description": "The complete new content."}
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false
                }),
            ),
            BuiltinTool::EditFile => (
                "Replace an exact string in a workspace file. old_string must occur exactly once unless replace_all is true.",
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Path relative to the workspace root."},
                        "old_string": {"type": "string", "description": "The exact text to replace."},
                        "new_string": {"type": "string", "description": "The replacement text."},
                        "replace_all": {"type": "boolean", "description": "Replace every occurrence.", "default": false}
                    },
                    "required": ["path", "old_string", "new_string"],
                    "additionalProperties": false
                }),
            ),
        };
        ToolDefinition {
            name: self.name().to_owned(),
            description: description.to_owned(),
            parameters: Some(parameters),
        }
    }
}
