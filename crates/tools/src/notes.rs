//! The exact note texts the built-in tools write after a call's content (protocol
//! [§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out* step 6).
//!
//! Each note sits on its own line after the content, in this order: truncation (with its
//! archive line), the tool's own note, the interruption/timeout/error note, and `[no output]`.

/// Written when the call produced neither content nor any other note.
pub const NO_OUTPUT: &str = "[no output]";

/// Written when the user's interrupt stopped the tool (stop reason `aborted`): the text the
/// engine puts in place of an interrupted call's output, so both read the same.
pub const INTERRUPTED: &str = penguin_engine::texts::INTERRUPTED_BY_USER;

/// `[output truncated: exceeded N chars]`, `N` being the configured cap.
pub fn truncated(max_chars: usize) -> String {
    format!("[output truncated: exceeded {max_chars} chars]")
}

/// `[output archived: <path>]`, `path` relative to the workspace root.
pub fn archived(path: &str) -> String {
    format!("[output archived: {path}]")
}

/// `[output archive failed: <code>]`, `code` being an errno name such as `EACCES` when the
/// OS reported one, otherwise the I/O error kind.
pub fn archive_failed(code: &str) -> String {
    format!("[output archive failed: {code}]")
}

/// Follows the archive line when the archive caps cut the output short.
pub fn archive_capped(kept: u64, dropped: u64) -> String {
    format!("[output archive capped: kept the first {kept} bytes, dropped {dropped}]")
}

/// Written instead of an archive line once the session's archive budget is used up.
pub const ARCHIVE_BUDGET_SPENT: &str =
    "[output not archived: this session's archive limit is used up]";

/// `[tool timeout: exceeded Nms]`.
pub fn timeout(ms: u128) -> String {
    format!("[tool timeout: exceeded {ms}ms]")
}

/// `[tool error] <msg>`: the tool failed (refused a path, bad arguments, I/O error, panic).
pub fn tool_error(msg: &str) -> String {
    format!("[tool error] {msg}")
}

/// `exec_command`'s note for a non-zero exit: `[exit code: N]`.
pub fn exit_code(code: i32) -> String {
    format!("[exit code: {code}]")
}

/// `exec_command`'s note when the shell was killed by a signal it did not get from us:
/// `[exit signal: N]`.
pub fn exit_signal(signal: i32) -> String {
    format!("[exit signal: {signal}]")
}

/// `exec_command`'s note when the OS reported neither an exit code nor a signal.
pub const EXIT_STATUS_UNKNOWN: &str = "[exit status unknown]";

/// The explanation for a call whose `arguments` field is empty
/// ([§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out* step 2).
pub fn empty_arguments(tool: &str) -> String {
    format!(
        "Tool call \"{tool}\" failed: the arguments field is empty. Re-issue the call with a complete JSON object."
    )
}

/// The explanation for a call whose `arguments` are not valid JSON
/// ([§2.16](penguin_omni_protocol::spec#s2.16) *Tool close-out* step 2).
pub fn invalid_arguments(tool: &str, err: &str) -> String {
    format!(
        "Tool call \"{tool}\" failed: the arguments are not valid JSON ({err}). Re-issue the call with one complete, valid JSON object."
    )
}

/// A call's arguments as every tool reads them ([§2.16](penguin_omni_protocol::spec#s2.16) *Tool
/// close-out* step 2), or the explanation its output gives instead ([`empty_arguments`],
/// [`invalid_arguments`]).
///
/// ```
/// use penguin_tools::notes;
/// assert_eq!(notes::arguments("t", r#"{"a": 1}"#).unwrap()["a"], 1);
/// assert_eq!(notes::arguments("t", " "), Err(notes::empty_arguments("t")));
/// assert!(notes::arguments("t", "{").unwrap_err().contains("not valid JSON (EOF while parsing"));
/// ```
pub fn arguments(tool: &str, arguments: &str) -> Result<serde_json::Value, String> {
    if arguments.trim().is_empty() {
        return Err(empty_arguments(tool));
    }
    serde_json::from_str(arguments).map_err(|e| invalid_arguments(tool, &e.to_string()))
}

/// The whole output of a call to a tool this environment does not offer.
pub fn unknown_tool(name: &str) -> String {
    format!("Unknown tool: {name}")
}

/// `exec_command` with `run_in_background`: the command runs on and reports when it settles.
pub fn command_in_background(id: &str) -> String {
    format!("[command running in background with process_id {id}; its completion will arrive as a user message — no need to poll. Use input_command to interact or kill_command to stop it]")
}

/// A command still running at the end of `exec_command`'s wait.
pub fn command_still_running(id: &str) -> String {
    format!("[process running with process_id {id}; use input_command to send input or poll for output]")
}

/// A command still running at the end of `input_command`'s wait.
pub fn process_still_running(id: &str) -> String {
    format!("[process still running with process_id {id}]")
}

/// A `process_id` this session does not know.
pub fn unknown_process(id: &str) -> String {
    format!("unknown process_id {id} (the session may have exited and been cleared)")
}

/// `kill_command` on a running command.
pub fn process_killed(id: &str) -> String {
    format!("[process {id} killed (SIGTERM to the process group, SIGKILL after a grace period)]")
}

/// `kill_command` on a command that had already exited.
pub fn process_had_exited(id: &str, status: &str) -> String {
    format!("[process {id} had already exited ({status}); session removed]")
}
