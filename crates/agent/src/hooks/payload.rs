//! The JSON object a hook gets on stdin, in Claude Code's shape: `session_id`,
//! `transcript_path`, `cwd`, `hook_event_name` (`PreToolUse`, …), then the event's own keys
//! (`tool_name`, `tool_input`, `tool_use_id`, `tool_response`, `prompt`, `stop_hook_active`,
//! `source`, `reason`, `trigger`). penguin's extras sit beside them: `penguin_event`
//! (`pre_tool_use`), and, in `tool_input`, Claude Code's names of penguin's arguments
//! (`command` beside `cmd`, `file_path` beside `path`), so its scripts read them unchanged.

use serde_json::{json, Map, Value};

use super::config::{claude_alias, HookEvent};

/// Who and where: the keys every payload has.
#[derive(Clone, Debug, Default)]
pub(crate) struct Common {
    pub(crate) session_id: String,
    pub(crate) transcript_path: String,
    pub(crate) cwd: String,
}

/// `event`'s payload: the common keys, then `fields`.
pub(crate) fn payload(event: HookEvent, common: &Common, fields: Value) -> Value {
    let mut map = Map::new();
    map.insert("session_id".into(), json!(common.session_id));
    map.insert("transcript_path".into(), json!(common.transcript_path));
    map.insert("cwd".into(), json!(common.cwd));
    map.insert("permission_mode".into(), json!("default"));
    map.insert("hook_event_name".into(), json!(event.claude_name()));
    map.insert("penguin_event".into(), json!(event.as_str()));
    if let Value::Object(fields) = fields {
        map.extend(fields);
    }
    Value::Object(map)
}

/// The keys about one tool call: its name (and Claude Code's, as `tool_alias`), its arguments
/// with Claude Code's names beside penguin's, and its id.
pub(crate) fn tool_fields(name: &str, arguments: &str, id: &str) -> Map<String, Value> {
    let mut input = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => map,
        // Arguments that are not an object still reach the hook, as they were sent.
        Ok(other) => Map::from_iter([("arguments".to_owned(), other)]),
        Err(_) => Map::from_iter([("arguments".to_owned(), json!(arguments))]),
    };
    for (ours, theirs) in ALIASES {
        if let Some(v) = input.get(*ours).cloned() {
            input.entry(theirs.to_string()).or_insert(v);
        }
    }
    let mut map = Map::new();
    map.insert("tool_name".into(), json!(name));
    if let Some(alias) = claude_alias(name) {
        map.insert("tool_alias".into(), json!(alias));
    }
    map.insert("tool_input".into(), Value::Object(input));
    map.insert("tool_use_id".into(), json!(id));
    map
}

/// penguin's argument names and Claude Code's for the same thing.
const ALIASES: &[(&str, &str)] = &[("cmd", "command"), ("path", "file_path")];

/// A hook's `updatedInput` as penguin's arguments: a Claude Code name that was changed
/// (`command`) sets penguin's (`cmd`); the mirrored names penguin added are dropped again.
pub(crate) fn arguments_from(updated: &Value, sent: &str) -> String {
    let mut map = match updated {
        Value::Object(map) => map.clone(),
        other => return other.to_string(),
    };
    let sent: Map<String, Value> = serde_json::from_str(sent).unwrap_or_default();
    for (ours, theirs) in ALIASES {
        let Some(theirs_value) = map.remove(*theirs) else {
            continue;
        };
        match map.get(*ours) {
            // The hook changed penguin's name: that is its answer.
            Some(v) if Some(v) != sent.get(*ours) => {}
            // A key of theirs penguin never sent is the tool's own argument: kept.
            None if !sent.contains_key(*ours) => {
                map.insert(theirs.to_string(), theirs_value);
            }
            _ => {
                map.insert(ours.to_string(), theirs_value);
            }
        }
    }
    Value::Object(map).to_string()
}

/// The command of an `exec_command` call, for `command_prefix`.
pub(crate) fn command_of(name: &str, arguments: &str) -> Option<String> {
    if name != "exec_command" {
        return None;
    }
    let v: Value = serde_json::from_str(arguments).ok()?;
    v.get("cmd")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_reads_like_claude_codes_with_penguins_names_kept() {
        let f = tool_fields("exec_command", r#"{"cmd":"rm -rf /","workdir":"."}"#, "c1");
        assert_eq!(f["tool_alias"], "Bash");
        assert_eq!(f["tool_input"]["command"], "rm -rf /");
        assert_eq!(f["tool_input"]["cmd"], "rm -rf /");
        let p = payload(HookEvent::PreToolUse, &Common::default(), Value::Object(f));
        assert_eq!(p["hook_event_name"], "PreToolUse");
        assert_eq!(p["penguin_event"], "pre_tool_use");
    }

    #[test]
    fn an_updated_input_in_either_names_becomes_penguins_arguments() {
        let sent = r#"{"cmd":"rm -rf build"}"#;
        let theirs = json!({"cmd": "rm -rf build", "command": "rm -ri build"});
        assert_eq!(arguments_from(&theirs, sent), r#"{"cmd":"rm -ri build"}"#);
        let ours = json!({"cmd": "ls", "command": "rm -rf build"});
        assert_eq!(arguments_from(&ours, sent), r#"{"cmd":"ls"}"#);
        let only_ours = json!({"cmd": "ls"});
        assert_eq!(arguments_from(&only_ours, sent), r#"{"cmd":"ls"}"#);
        let only_theirs = json!({"command": "ls"});
        assert_eq!(arguments_from(&only_theirs, sent), r#"{"cmd":"ls"}"#);
    }
}
