//! Reading scenario files (v1 and v2), naming the field path of anything wrong.

use std::collections::HashSet;
use std::time::Duration;

use penguin_engine::scripted::{ScriptedApprover, ScriptedEnvironment};
use penguin_engine::{CompactionConfig, EngineConfig};
use penguin_llm_providers::scripted::{
    exact_message, json_tree, parse_requests_json, parse_steps, parse_tool_streams_json,
    ScriptError, ScriptedModel,
};
use penguin_omni_protocol::{CompactionMode, OmniMessage};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Scenario, ScenarioGoal, ScenarioRun, ScenarioSession};

fn check_keys(
    obj: &serde_json::Map<String, Value>,
    path: &str,
    allowed: &[&str],
) -> Result<(), ScriptError> {
    let allowed: HashSet<&str> = allowed.iter().copied().collect();
    match obj.keys().find(|k| !allowed.contains(k.as_str())) {
        Some(k) => {
            let at = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            Err(ScriptError::new(at, "unknown field"))
        }
        None => Ok(()),
    }
}

fn ms(v: &Value, path: &str) -> Result<Duration, ScriptError> {
    v.as_u64()
        .map(Duration::from_millis)
        .ok_or_else(|| ScriptError::new(path, "expected a non-negative integer (milliseconds)"))
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a serde_json::Map<String, Value>, ScriptError> {
    v.as_object()
        .ok_or_else(|| ScriptError::new(path, "expected an object"))
}

/// v2 `engine.compaction`.
fn compaction(v: &Value) -> Result<CompactionConfig, ScriptError> {
    let path = "engine.compaction";
    let c = object(v, path)?;
    check_keys(
        c,
        path,
        &["mode", "max_context_length", "max_session_turns", "prompt"],
    )?;
    let int = |key: &str| -> Result<i64, ScriptError> {
        match c.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| ScriptError::new(format!("{path}.{key}"), "expected an integer")),
        }
    };
    let mode = match c.get("mode").and_then(Value::as_str) {
        None | Some("summarize") => CompactionMode::Summarize,
        Some("discard") => CompactionMode::Discard,
        Some(other) => {
            return Err(ScriptError::new(
                format!("{path}.mode"),
                format!("expected \"summarize\" or \"discard\", got {other:?}"),
            ))
        }
    };
    let prompt = match c.get("prompt") {
        None | Some(Value::Null) => "Summarize the conversation so far.".to_owned(),
        Some(Value::String(p)) => p.clone(),
        Some(_) => {
            return Err(ScriptError::new(
                format!("{path}.prompt"),
                "expected a string",
            ))
        }
    };
    Ok(CompactionConfig {
        // ≤ 0 or absent: that trigger is off.
        max_context_length: u64::try_from(int("max_context_length")?).unwrap_or(0),
        max_session_turns: int("max_session_turns")?.max(0),
        mode,
        prompt,
    })
}

/// v2 `session`.
fn session(v: &Value) -> Result<ScenarioSession, ScriptError> {
    let s = object(v, "session")?;
    check_keys(
        s,
        "session",
        &["session_meta", "tool_list", "bootstrap_records"],
    )?;
    let one = |key: &str| -> Result<Option<OmniMessage>, ScriptError> {
        match s.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(m) => exact_message(m, &format!("session.{key}")).map(Some),
        }
    };
    Ok(ScenarioSession {
        session_meta: one("session_meta")?,
        tool_list: one("tool_list")?,
        bootstrap_records: match s.get("bootstrap_records") {
            None | Some(Value::Null) => None,
            Some(v) => Some(messages(v, "session.bootstrap_records")?),
        },
    })
}

/// `llm`.
fn llm_requests(raw: &RawValue) -> Result<ScriptedModel, ScriptError> {
    Ok(ScriptedModel::new(parse_requests_json(raw.get())?))
}

/// `tools`: in one pass when well-formed, else one tool at a time for the error.
fn tool_scripts(raw: &RawValue) -> Result<ScriptedEnvironment, ScriptError> {
    if raw.get().trim() == "null" {
        return Ok(ScriptedEnvironment::default());
    }
    if let Some(scripts) = parse_tool_streams_json(raw.get()) {
        return Ok(ScriptedEnvironment::new(scripts?));
    }
    let items: std::collections::BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())
        .map_err(|_| ScriptError::new("tools", "expected an object keyed by tool_call_id"))?;
    let mut scripts = std::collections::HashMap::with_capacity(items.len());
    for (id, item) in items {
        let path = format!("tools.{id}");
        let v = json_tree(item.get(), &path)?;
        let script = object(&v, &path)?;
        check_keys(script, &path, &["stream"])?;
        let stream = script
            .get("stream")
            .ok_or_else(|| ScriptError::new(format!("{path}.stream"), "missing"))?;
        scripts.insert(id, parse_steps(stream, &format!("{path}.stream"))?);
    }
    Ok(ScriptedEnvironment::new(scripts))
}

/// `runs[i].goal`: `{budget, max_rounds, file, writes: {tool_call_id: text | null}}`.
fn goal(v: &Value, path: &str) -> Result<ScenarioGoal, ScriptError> {
    let g = object(v, path)?;
    check_keys(g, path, &["budget", "max_rounds", "file", "writes"])?;
    let count = |key: &str| -> Result<Option<u64>, ScriptError> {
        match g.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ScriptError::new(format!("{path}.{key}"), "expected a non-negative integer")
            }),
        }
    };
    let file = match g.get("file") {
        None | Some(Value::Null) => ScenarioGoal::DEFAULT_FILE.to_owned(),
        Some(Value::String(f)) => f.clone(),
        Some(_) => {
            return Err(ScriptError::new(
                format!("{path}.file"),
                "expected a string",
            ))
        }
    };
    let mut writes = std::collections::HashMap::new();
    if let Some(w) = g.get("writes").filter(|v| !v.is_null()) {
        let wp = format!("{path}.writes");
        for (id, text) in object(w, &wp)? {
            let text = match text {
                Value::Null => None,
                Value::String(t) => Some(t.clone()),
                _ => {
                    return Err(ScriptError::new(
                        format!("{wp}.{id}"),
                        "expected the file's text, or null to remove it",
                    ))
                }
            };
            writes.insert(id.clone(), text);
        }
    }
    Ok(ScenarioGoal {
        budget: count("budget")?,
        max_rounds: count("max_rounds")?,
        file,
        writes,
    })
}

fn messages(v: &Value, path: &str) -> Result<Vec<OmniMessage>, ScriptError> {
    let items = v
        .as_array()
        .ok_or_else(|| ScriptError::new(path, "expected an array of OmniMessages"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, m)| exact_message(m, &format!("{path}[{i}]")))
        .collect()
}

impl Scenario {
    /// Parses a scenario file's text.
    pub fn parse(text: &str) -> Result<Scenario, ScriptError> {
        // The scripts (`llm`, `tools`) are most of a large file: each request and tool is
        // turned into a JSON tree and then into messages one at a time, never the whole file
        // at once.
        let top: std::collections::BTreeMap<String, &RawValue> = serde_json::from_str(text)
            .map_err(|e| match serde_json::from_str::<Value>(text) {
                Ok(_) => ScriptError::new("(file)", "expected a JSON object"),
                Err(_) => ScriptError::new("(file)", format!("invalid JSON: {e}")),
            })?;
        let obj = top
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "llm" | "tools"))
            .map(|(k, raw)| Ok((k.clone(), json_tree(raw.get(), k)?)))
            .collect::<Result<serde_json::Map<String, Value>, ScriptError>>()?;
        let obj = &obj;
        let allowed = [
            "description",
            "engine",
            "approvals",
            "llm",
            "tools",
            "runs",
            "session",
        ];
        if let Some(k) = top.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ScriptError::new(k.clone(), "unknown field"));
        }
        let description = match obj.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ScriptError::new("description", "expected a string")),
        };
        let mut engine = EngineConfig::default();
        if let Some(e) = obj.get("engine").filter(|v| !v.is_null()) {
            let e = e
                .as_object()
                .ok_or_else(|| ScriptError::new("engine", "expected an object"))?;
            check_keys(
                e,
                "engine",
                &[
                    "max_turns",
                    "max_reconnects",
                    "reconnect_backoff_ms",
                    "reconnect_backoff_max_ms",
                    "compaction",
                    "compaction_max_reconnects",
                ],
            )?;
            if let Some(c) = e.get("compaction").filter(|v| !v.is_null()) {
                engine.compaction = Some(compaction(c)?);
            }
            if let Some(v) = e.get("compaction_max_reconnects").filter(|v| !v.is_null()) {
                engine.compaction_max_reconnects = Some(
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            ScriptError::new(
                                "engine.compaction_max_reconnects",
                                "expected a non-negative integer",
                            )
                        })?,
                );
            }
            if let Some(v) = e.get("max_turns") {
                engine.max_turns = v
                    .as_i64()
                    .ok_or_else(|| ScriptError::new("engine.max_turns", "expected an integer"))?;
            }
            if let Some(v) = e.get("max_reconnects") {
                engine.max_reconnects =
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            ScriptError::new(
                                "engine.max_reconnects",
                                "expected a non-negative integer",
                            )
                        })?;
            }
            if let Some(v) = e.get("reconnect_backoff_ms") {
                engine.reconnect_backoff = ms(v, "engine.reconnect_backoff_ms")?;
            }
            if let Some(v) = e.get("reconnect_backoff_max_ms") {
                engine.reconnect_backoff_max = ms(v, "engine.reconnect_backoff_max_ms")?;
            }
        }
        let approvals = match obj.get("approvals") {
            None | Some(Value::Null) => None,
            Some(a) => Some(ScriptedApprover::from_json(a)?),
        };
        let llm = top
            .get("llm")
            .ok_or_else(|| ScriptError::new("llm", "missing"))?;
        // The two scripts are most of a large file, and independent: one each per core. An
        // error in `llm` is named first, as it would be read first.
        let (llm, tools) = std::thread::scope(|s| {
            let tools = s.spawn(|| match top.get("tools") {
                None => Ok(ScriptedEnvironment::default()),
                Some(raw) => tool_scripts(raw),
            });
            let llm = llm_requests(llm);
            let tools = tools
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (llm, tools)
        });
        let (llm, tools) = (llm?, tools?);
        let runs_v = obj
            .get("runs")
            .ok_or_else(|| ScriptError::new("runs", "missing"))?;
        let runs_a = runs_v
            .as_array()
            .ok_or_else(|| ScriptError::new("runs", "expected an array"))?;
        let mut runs = Vec::new();
        for (i, r) in runs_a.iter().enumerate() {
            let path = format!("runs[{i}]");
            let r = r
                .as_object()
                .ok_or_else(|| ScriptError::new(&path, "expected an object"))?;
            check_keys(
                r,
                &path,
                &[
                    "input",
                    "abort_after_ms",
                    "steer",
                    "notices",
                    "compact",
                    "goal",
                ],
            )?;
            let compact = match r.get("compact") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ScriptError::new(
                        format!("{path}.compact"),
                        "expected a boolean",
                    ))
                }
            };
            // A compaction run takes no input.
            let input = match r.get("input") {
                None if compact => Vec::new(),
                v => messages(
                    v.ok_or_else(|| ScriptError::new(format!("{path}.input"), "missing"))?,
                    &format!("{path}.input"),
                )?,
            };
            let mut notices = Vec::new();
            if let Some(n) = r.get("notices").filter(|v| !v.is_null()) {
                let n = n.as_array().ok_or_else(|| {
                    ScriptError::new(format!("{path}.notices"), "expected an array")
                })?;
                for (j, entry) in n.iter().enumerate() {
                    let np = format!("{path}.notices[{j}]");
                    let e = object(entry, &np)?;
                    check_keys(e, &np, &["after_ms", "message"])?;
                    let after = ms(
                        e.get("after_ms")
                            .ok_or_else(|| ScriptError::new(format!("{np}.after_ms"), "missing"))?,
                        &format!("{np}.after_ms"),
                    )?;
                    let msg = exact_message(
                        e.get("message")
                            .ok_or_else(|| ScriptError::new(format!("{np}.message"), "missing"))?,
                        &format!("{np}.message"),
                    )?;
                    notices.push((after, msg));
                }
            }
            let abort_after = match r.get("abort_after_ms") {
                None | Some(Value::Null) => None,
                Some(v) => Some(ms(v, &format!("{path}.abort_after_ms"))?),
            };
            let mut steer = Vec::new();
            if let Some(s) = r.get("steer").filter(|v| !v.is_null()) {
                let s = s.as_array().ok_or_else(|| {
                    ScriptError::new(format!("{path}.steer"), "expected an array")
                })?;
                for (j, entry) in s.iter().enumerate() {
                    let sp = format!("{path}.steer[{j}]");
                    let e = entry.as_object().ok_or_else(|| {
                        ScriptError::new(&sp, "expected an object {after_ms, input}")
                    })?;
                    check_keys(e, &sp, &["after_ms", "input"])?;
                    let after = ms(
                        e.get("after_ms")
                            .ok_or_else(|| ScriptError::new(format!("{sp}.after_ms"), "missing"))?,
                        &format!("{sp}.after_ms"),
                    )?;
                    let input = messages(
                        e.get("input")
                            .ok_or_else(|| ScriptError::new(format!("{sp}.input"), "missing"))?,
                        &format!("{sp}.input"),
                    )?;
                    steer.push((after, input));
                }
            }
            let goal = match r.get("goal") {
                None | Some(Value::Null) => None,
                Some(g) => Some(goal(g, &format!("{path}.goal"))?),
            };
            runs.push(ScenarioRun {
                input,
                abort_after,
                steer,
                notices,
                compact,
                goal,
            });
        }
        let session = match obj.get("session") {
            None | Some(Value::Null) => ScenarioSession::default(),
            Some(v) => session(v)?,
        };
        Ok(Scenario {
            description,
            engine,
            approvals,
            llm,
            tools,
            runs,
            session,
        })
    }
}
