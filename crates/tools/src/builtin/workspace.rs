//! What the model reads about the workspace tools: each one's description and the JSON
//! Schema of its arguments.

use serde_json::{json, Value};

const PATH: &str =
    "Path relative to the workspace root (an absolute path inside the workspace also works).";

/// `read_file`.
pub(super) fn read_file() -> (&'static str, Value) {
    (
        "Read a UTF-8 text file in the workspace. Lines come numbered like `cat -n` (the line number, a tab, the line), \
         2000 lines from `offset` by default; when more follow, the last line says so and which offset reads on. \
         Lines over 2000 characters are cut with a note. The numbers are not part of the file: leave them out of \
         edit_file's old_string. A directory is answered with its entries; a binary file is refused, saying what it \
         is (use read_image for images); a path that does not exist is answered with the nearest existing names.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": PATH},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to return (default 2000)."}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    )
}

/// `list_files`.
pub(super) fn list_files() -> (&'static str, Value) {
    (
        "List the files under a directory of the workspace, sorted by path, one workspace-relative path a line. \
         Files that .gitignore (or .ignore) excludes and the .git directory are left out; symlinks are listed, \
         not followed. A pattern without '/' matches file names at any depth (`*.rs`, `Cargo.toml`); one with \
         '/' matches the path below `path` (`src/**/*.ts`, where `*` stays within one directory and `**` spans \
         several). At most max_results paths come back; the last line says how many more there are.",
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob the files must match (default: every file)."},
                "path": {"type": "string", "description": "Directory to list, relative to the workspace root (default: the root)."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "Most paths to return (default 500)."}
            },
            "required": [],
            "additionalProperties": false
        }),
    )
}

/// `grep_files`.
pub(super) fn grep_files() -> (&'static str, Value) {
    (
        "Search the workspace's text files for a regular expression (Rust regex syntax, as ripgrep: `fn \\w+`, \
         `TODO|FIXME`; escape literal `(`, `.`, `{`). Each match is one line `path:line:text` (path relative to \
         the workspace root, line 1-based, long lines cut), files in path order. Files that .gitignore excludes, \
         binary files and .git are skipped. At most max_results matches come back; a last line says when the \
         search stopped early. Use it to find definitions and uses before reading files.",
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "The regular expression, matched within single lines."},
                "path": {"type": "string", "description": "File or directory to search, relative to the workspace root (default: the root)."},
                "glob": {"type": "string", "description": "Only files matching this glob: `*.rs` matches names at any depth, `src/**/*.rs` paths below `path`."},
                "case_insensitive": {"type": "boolean", "description": "Ignore case.", "default": false},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 2000, "description": "Most matching lines to return (default 200)."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
    )
}

/// `read_image`.
pub(super) fn read_image() -> (&'static str, Value) {
    (
        "Look at an image file of the workspace (PNG, JPEG, GIF or WebP, up to 10 MiB): the image is attached to \
         the result, with a line giving its format, its size in pixels and in bytes. Other files are refused, \
         saying what they are.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": PATH}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    )
}

/// `write_file`.
pub(super) fn write_file() -> (&'static str, Value) {
    (
        "Write a whole file in the workspace: create it (and its missing directories) or replace all of its content. \
         The answer says whether the file was created or overwritten and shows the change as a unified diff (a new \
         file over 200 lines is summarised). For a change to part of an existing file prefer edit_file, which needs \
         only the lines that change.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": PATH},
                "content": {"type": "string", "description": "The complete new content of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
    )
}

/// `edit_file`.
pub(super) fn edit_file() -> (&'static str, Value) {
    (
        "Replace text in a workspace file. old_string must match the file exactly (whitespace and indentation \
         included, without read_file's line numbers) and exactly once, unless replace_all is true; include enough \
         surrounding lines to make it unique. When it matches no or several places nothing is changed and the \
         answer says where the nearest candidates or the matches are. The change is written whole or not at all, \
         and answered with a unified diff.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": PATH},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The text to put in its place (must differ from old_string)."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring exactly one.", "default": false}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        }),
    )
}

/// `apply_patch`.
pub(super) fn apply_patch() -> (&'static str, Value) {
    (
        "Change several files at once with a patch: add, delete, update or move them. All of it applies or none of \
         it does; an error names the patch line, the file and the hunk at fault. Paths are relative to the \
         workspace root. Format:\n\
         *** Begin Patch\n\
         *** Add File: path/new.txt\n\
         +every line of the new file, each starting with +\n\
         *** Delete File: path/old.txt\n\
         *** Update File: path/file.py\n\
         *** Move to: path/renamed.py   (optional)\n\
         @@ def some_function():   (optional: a line above the change, to place it; several @@ lines narrow it)\n\
         \x20context line (starts with a space)\n\
         -removed line\n\
         +added line\n\
         \x20context line\n\
         *** End of File   (optional: the hunk ends at the end of the file)\n\
         *** End Patch\n\
         Give about 3 lines of context above and below each change, copied exactly from the file; hunks of one \
         file come in file order. The answer lists each file as A (added), M (modified) or D (deleted), with \
         the diffs.",
        json!({
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "The whole patch, from *** Begin Patch to *** End Patch."}
            },
            "required": ["input"],
            "additionalProperties": false
        }),
    )
}

/// `update_plan`.
pub(super) fn update_plan() -> (&'static str, Value) {
    (
        "Keep a short plan of the task as a checklist the user sees. Send the whole plan each time: every step with \
         its status (pending, in_progress or completed), at most one step in_progress. Use it for work of several \
         steps: set it up at the start, mark a step in_progress when starting it and completed when it is done. \
         explanation says briefly why the plan changed.",
        json!({
            "type": "object",
            "properties": {
                "explanation": {"type": "string", "description": "Why the plan changed (optional)."},
                "plan": {
                    "type": "array",
                    "description": "The steps, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "step": {"type": "string", "description": "What the step does, in a few words."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["step", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["plan"],
            "additionalProperties": false
        }),
    )
}
