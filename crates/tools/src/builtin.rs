//! The built-in tools' names, permissions and the definitions offered to the model.

mod compact;
mod workspace;

use penguin_engine::Permission;
use penguin_omni_protocol::ToolDefinition;
use serde_json::json;

/// Which of the edit tools a session offers: models trained on codex's patch format do their
/// best work with `apply_patch`, others with `edit_file` and `write_file`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EditTools {
    /// `write_file` and `edit_file`.
    Classic,
    /// `apply_patch` alone.
    ApplyPatch,
    /// All three (the default): the model picks.
    #[default]
    Both,
}

impl EditTools {
    /// Whether a tool of the `kind` [`BuiltinTool::edit_tools`] gives is offered.
    pub fn offers(self, kind: EditTools) -> bool {
        self == EditTools::Both || self == kind
    }
}

/// Which definitions the model is shown: the full ones, or the compact ones for a model with a
/// small context window (one sentence a tool, schemas without descriptions). The tools take
/// the same arguments and answer the same way either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Descriptions {
    /// Every tool's whole description, and a description for each argument (the default).
    #[default]
    Full,
    /// One sentence a tool, and only what a call needs in its schema (about a third of the
    /// size of [`Descriptions::Full`]).
    Compact,
}

/// One built-in tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BuiltinTool {
    /// `exec_command {cmd, workdir?, yield_time_ms?, run_in_background?, timeout_ms?}`:
    /// `sh -c cmd` in the workspace; a command still running at its wait runs on.
    ExecCommand,
    /// `input_command {process_id, chars?, yield_time_ms?}`: writes to (or polls) a command.
    InputCommand,
    /// `kill_command {process_id}`: ends a command's process group.
    KillCommand,
    /// `read_file {path, offset?, limit?}`: numbered lines, a window at a time.
    ReadFile,
    /// `list_files {pattern?, path?, max_results?}`: files by glob, `.gitignore` honoured.
    ListFiles,
    /// `grep_files {pattern, path?, glob?, case_insensitive?, max_results?}`: regex search.
    GrepFiles,
    /// `read_image {path}`: a PNG, JPEG, GIF or WebP file shown to the model.
    ReadImage,
    /// `write_file {path, content}`: creates or overwrites, answered with a diff.
    WriteFile,
    /// `edit_file {path, old_string, new_string, replace_all?}`: answered with a diff.
    EditFile,
    /// `apply_patch {input}`: codex's patch format, several files, all or nothing.
    ApplyPatch,
    /// `update_plan {explanation?, plan: [{step, status}]}`: the model's checklist.
    UpdatePlan,
}

impl BuiltinTool {
    /// Every built-in tool, in the order they are offered.
    pub const ALL: [BuiltinTool; 11] = [
        BuiltinTool::ExecCommand,
        BuiltinTool::InputCommand,
        BuiltinTool::KillCommand,
        BuiltinTool::ReadFile,
        BuiltinTool::ListFiles,
        BuiltinTool::GrepFiles,
        BuiltinTool::ReadImage,
        BuiltinTool::WriteFile,
        BuiltinTool::EditFile,
        BuiltinTool::ApplyPatch,
        BuiltinTool::UpdatePlan,
    ];

    /// The tools a session on a model with a very small context window (4,096 tokens) is
    /// offered by default: a command, reading a file and the edit tools ([`EditTools`] still
    /// chooses among these). Listing, searching and the other tools are left out: a command
    /// (`ls`, `grep`) does their work, and their definitions would take the room the
    /// conversation needs.
    pub const ESSENTIAL: [BuiltinTool; 5] = [
        BuiltinTool::ExecCommand,
        BuiltinTool::ReadFile,
        BuiltinTool::WriteFile,
        BuiltinTool::EditFile,
        BuiltinTool::ApplyPatch,
    ];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            BuiltinTool::ExecCommand => "exec_command",
            BuiltinTool::InputCommand => "input_command",
            BuiltinTool::KillCommand => "kill_command",
            BuiltinTool::ReadFile => "read_file",
            BuiltinTool::ListFiles => "list_files",
            BuiltinTool::GrepFiles => "grep_files",
            BuiltinTool::ReadImage => "read_image",
            BuiltinTool::WriteFile => "write_file",
            BuiltinTool::EditFile => "edit_file",
            BuiltinTool::ApplyPatch => "apply_patch",
            BuiltinTool::UpdatePlan => "update_plan",
        }
    }

    /// The tool called `name`, if any.
    pub fn from_name(name: &str) -> Option<BuiltinTool> {
        BuiltinTool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `Read` for the tools that change nothing (reading, listing, searching, the plan),
    /// `ReadWrite` for the others.
    pub fn permission(self) -> Permission {
        match self {
            BuiltinTool::ReadFile
            | BuiltinTool::ListFiles
            | BuiltinTool::GrepFiles
            | BuiltinTool::ReadImage
            | BuiltinTool::UpdatePlan => Permission::Read,
            _ => Permission::ReadWrite,
        }
    }

    /// Whether it is one of the edit tools [`EditTools`] chooses between.
    pub fn edit_tools(self) -> Option<EditTools> {
        match self {
            BuiltinTool::WriteFile | BuiltinTool::EditFile => Some(EditTools::Classic),
            BuiltinTool::ApplyPatch => Some(EditTools::ApplyPatch),
            _ => None,
        }
    }

    /// The definition offered to the model, with the JSON Schema of its arguments.
    pub fn definition(self) -> ToolDefinition {
        self.definition_with(Descriptions::Full)
    }

    /// The definition offered to the model, full or compact.
    pub fn definition_with(self, descriptions: Descriptions) -> ToolDefinition {
        let (description, parameters) = match descriptions {
            Descriptions::Compact => compact::definition(self),
            Descriptions::Full => self.full_parts(),
        };
        ToolDefinition {
            name: self.name().to_owned(),
            description: description.to_owned(),
            parameters: Some(parameters),
        }
    }

    /// The full description and schema.
    fn full_parts(self) -> (&'static str, serde_json::Value) {
        match self {
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
            BuiltinTool::ReadFile => workspace::read_file(),
            BuiltinTool::ListFiles => workspace::list_files(),
            BuiltinTool::GrepFiles => workspace::grep_files(),
            BuiltinTool::ReadImage => workspace::read_image(),
            BuiltinTool::WriteFile => workspace::write_file(),
            BuiltinTool::EditFile => workspace::edit_file(),
            BuiltinTool::ApplyPatch => workspace::apply_patch(),
            BuiltinTool::UpdatePlan => workspace::update_plan(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(d: &ToolDefinition) -> Vec<String> {
        let schema = d.parameters.as_ref().unwrap();
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn a_compact_definition_asks_for_what_the_full_one_requires_in_a_fraction_of_its_size() {
        let size = |d: &ToolDefinition| serde_json::to_string(d).unwrap().len();
        let (mut full_total, mut compact_total) = (0, 0);
        for tool in BuiltinTool::ALL {
            let (full, compact) = (
                tool.definition(),
                tool.definition_with(Descriptions::Compact),
            );
            assert_eq!(compact.name, full.name);
            // Every argument shown is one the tool takes, and every required one is shown
            // and required.
            let shown = properties(&compact);
            let taken = properties(&full);
            assert!(shown.iter().all(|p| taken.contains(p)), "{}", full.name);
            let required = |d: &ToolDefinition| d.parameters.as_ref().unwrap()["required"].clone();
            assert_eq!(required(&compact), required(&full), "{}", full.name);
            assert!(size(&compact) < size(&full), "{}", full.name);
            full_total += size(&full);
            compact_total += size(&compact);
        }
        assert!(
            compact_total * 5 < full_total * 2,
            "compact {compact_total} bytes, full {full_total}"
        );
    }

    #[test]
    fn tools_configured_compact_offer_the_compact_definitions() {
        use penguin_engine::Environment;
        let dir = tempfile::tempdir().unwrap();
        let config = crate::ToolsConfig {
            descriptions: Descriptions::Compact,
            enabled: BuiltinTool::ESSENTIAL.to_vec(),
            edit_tools: EditTools::Classic,
            memory: vec![dir.path().to_path_buf()],
            sandbox: crate::Sandbox::off(),
            ..crate::ToolsConfig::default()
        };
        let tools = crate::BuiltinTools::new(dir.path(), config).unwrap();
        let offered = tools.tools();
        let names: Vec<_> = offered.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "exec_command",
                "read_file",
                "write_file",
                "edit_file",
                "memory_forget"
            ]
        );
        assert_eq!(
            offered[1],
            BuiltinTool::ReadFile.definition_with(Descriptions::Compact)
        );
        assert_eq!(offered[4], crate::memory::forget_definition_compact());
    }

    #[test]
    fn the_essential_tools_are_a_command_reading_and_editing() {
        let names: Vec<_> = BuiltinTool::ESSENTIAL.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            [
                "exec_command",
                "read_file",
                "write_file",
                "edit_file",
                "apply_patch"
            ]
        );
        assert_eq!(
            Descriptions::default(),
            Descriptions::Full,
            "embedders keep the full definitions unless they ask"
        );
    }
}
