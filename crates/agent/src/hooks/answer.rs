//! What a hook answered, read the way Claude Code reads its hooks: the exit status (0: an
//! answer, 2: block with stderr as the reason) and optional JSON on stdout
//! (`decision` + `reason`, `continue` + `stopReason`, `systemMessage`, and
//! `hookSpecificOutput` with `permissionDecision`, `permissionDecisionReason`, `updatedInput`,
//! `additionalContext`).

use serde_json::{Map, Value};

use super::config::HookEvent;
use super::runner::{clip, Finished, HookFailure};

/// `permissionDecision` of a `pre_tool_use` hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// Run the call without asking.
    Allow,
    /// Refuse it; the reason goes to the model.
    Deny,
    /// Ask the user (the run's approver) whatever its mode.
    Ask,
}

/// One hook's answer, every field optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookAnswer {
    /// Block: deny the call, refuse the prompt, keep the task going (`stop`), mark the
    /// output failed (`post_tool_use`), with this reason.
    pub block: Option<String>,
    /// `pre_tool_use`: the hook's permission decision.
    pub permission: Option<Permission>,
    /// Why (`permissionDecisionReason`).
    pub reason: Option<String>,
    /// Context for the model (`additionalContext`; plain stdout of `user_prompt_submit` and
    /// `session_start`).
    pub context: Option<String>,
    /// `pre_tool_use`: the arguments to run the call with instead.
    pub updated_input: Option<Value>,
    /// `continue: false`: end the task, with `stopReason`.
    pub halt: Option<String>,
    /// `systemMessage`: a line for the user.
    pub system_message: Option<String>,
}

/// Reads `done` as `event`'s answer; an exit code other than 0 and 2 and JSON that is not an
/// answer are failures.
pub fn read(event: HookEvent, done: &Finished) -> Result<HookAnswer, HookFailure> {
    match done.code {
        0 => {}
        2 => {
            let reason = done.stderr.trim();
            return Ok(HookAnswer {
                block: Some(match reason.is_empty() {
                    true => "blocked by a hook (exit 2, no reason on stderr)".to_owned(),
                    false => clip(reason, 4000),
                }),
                ..HookAnswer::default()
            });
        }
        code => {
            return Err(HookFailure::Exit {
                code,
                stderr: done.stderr.clone(),
            });
        }
    }
    let out = done.stdout.trim();
    if !out.starts_with('{') {
        // Plain text is context where Claude Code makes it context, and a log elsewhere.
        let context = matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart)
            && !out.is_empty();
        return Ok(HookAnswer {
            context: context.then(|| clip(out, 16_000)),
            ..HookAnswer::default()
        });
    }
    let garbage = |why: &str| HookFailure::Garbage(format!("{why}: {}", clip(out, 200)));
    let json: Map<String, Value> = match serde_json::from_str(out) {
        Ok(Value::Object(map)) => map,
        Ok(_) | Err(_) if done.truncated => return Err(garbage("JSON cut at the output cap")),
        Ok(_) | Err(_) => return Err(garbage("not a JSON object")),
    };
    let text = |map: &Map<String, Value>, key: &str| -> Result<Option<String>, HookFailure> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(garbage(&format!("{key} is not a string"))),
        }
    };
    let mut answer = HookAnswer {
        system_message: text(&json, "systemMessage")?,
        reason: text(&json, "reason")?,
        ..HookAnswer::default()
    };
    match json.get("continue") {
        None | Some(Value::Null) | Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            answer.halt = Some(text(&json, "stopReason")?.unwrap_or_else(|| "a hook".into()))
        }
        Some(_) => return Err(garbage("continue is not a boolean")),
    }
    match text(&json, "decision")?.as_deref() {
        None | Some("undefined") => {}
        // Claude Code's older spelling of a pre_tool_use allow.
        Some("approve") => answer.permission = Some(Permission::Allow),
        Some("block") => {
            answer.block = Some(
                answer
                    .reason
                    .clone()
                    .unwrap_or_else(|| "blocked by a hook".into()),
            )
        }
        Some(other) => return Err(garbage(&format!("decision {other:?} is not block"))),
    }
    let specific = match json.get("hookSpecificOutput") {
        None | Some(Value::Null) => return Ok(answer),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(garbage("hookSpecificOutput is not an object")),
    };
    answer.context = text(specific, "additionalContext")?.map(|c| clip(&c, 16_000));
    match text(specific, "permissionDecision")?.as_deref() {
        None => {}
        Some("allow") => answer.permission = Some(Permission::Allow),
        Some("deny") => answer.permission = Some(Permission::Deny),
        Some("ask") => answer.permission = Some(Permission::Ask),
        Some(other) => {
            return Err(garbage(&format!(
                "permissionDecision {other:?} is not allow, deny or ask"
            )));
        }
    }
    if let Some(reason) = text(specific, "permissionDecisionReason")? {
        answer.reason = Some(reason);
    }
    match specific.get("updatedInput") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => answer.updated_input = Some(v.clone()),
        Some(_) => return Err(garbage("updatedInput is not an object")),
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(code: i32, stdout: &str, stderr: &str) -> Finished {
        Finished {
            code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            truncated: false,
        }
    }

    #[test]
    fn exit_two_blocks_with_stderr_and_other_codes_fail() {
        let a = read(HookEvent::PreToolUse, &done(2, "", "no rm -rf\n")).unwrap();
        assert_eq!(a.block.as_deref(), Some("no rm -rf"));
        assert!(matches!(
            read(HookEvent::PreToolUse, &done(1, "", "boom")),
            Err(HookFailure::Exit { code: 1, .. })
        ));
    }

    #[test]
    fn claude_codes_json_answers_are_read() {
        let out = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "not here",
            "updatedInput": {"cmd": "ls"}, "additionalContext": "ctx"}}"#;
        let a = read(HookEvent::PreToolUse, &done(0, out, "")).unwrap();
        assert_eq!(a.permission, Some(Permission::Deny));
        assert_eq!(a.reason.as_deref(), Some("not here"));
        assert_eq!(a.updated_input, Some(serde_json::json!({"cmd": "ls"})));
        assert_eq!(a.context.as_deref(), Some("ctx"));
        let block = read(
            HookEvent::Stop,
            &done(0, r#"{"decision": "block", "reason": "keep going"}"#, ""),
        )
        .unwrap();
        assert_eq!(block.block.as_deref(), Some("keep going"));
        let halt = read(
            HookEvent::PostToolUse,
            &done(0, r#"{"continue": false}"#, ""),
        )
        .unwrap();
        assert_eq!(halt.halt.as_deref(), Some("a hook"));
    }

    #[test]
    fn plain_stdout_is_context_only_where_claude_code_makes_it_so() {
        let a = read(HookEvent::UserPromptSubmit, &done(0, "branch: main\n", "")).unwrap();
        assert_eq!(a.context.as_deref(), Some("branch: main"));
        let b = read(HookEvent::PostToolUse, &done(0, "formatted\n", "")).unwrap();
        assert_eq!(b, HookAnswer::default());
    }

    #[test]
    fn garbage_is_a_failure_naming_what_is_wrong() {
        for (out, why) in [
            ("{not json", "not a JSON object"),
            (r#"{"decision": 3}"#, "decision is not a string"),
            (
                r#"{"hookSpecificOutput": {"permissionDecision": "maybe"}}"#,
                "permissionDecision \"maybe\"",
            ),
        ] {
            let e = read(HookEvent::PreToolUse, &done(0, out, "")).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
        }
    }
}
