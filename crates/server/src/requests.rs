//! Reading request bodies and query strings into typed values, with errors that name the
//! field (`input[2].imageUrl`) and what it should have been.

use axum::http::Uri;
use penguin_omni_protocol::{build, OmniMessage};
use serde_json::{Map, Value};

use crate::api::{ApprovalMode, SandboxSettings};
use crate::auth::percent_decode;
use crate::error::{kind, opt_bool, opt_str, ApiError};
use crate::history::{TracePosition, Window};

pub(crate) fn parse_mode(obj: &Map<String, Value>) -> Result<Option<ApprovalMode>, ApiError> {
    match opt_str(obj, "approvalMode")? {
        None => Ok(None),
        Some(s) => ApprovalMode::parse(s).map(Some).ok_or_else(|| {
            ApiError::field(
                "approvalMode",
                &format!("allow-all, deny-all, read-only or always-ask, got {s:?}"),
            )
        }),
    }
}

/// `sandbox: {"mode"?: string, "network"?: bool}`; the factory checks the mode's value.
pub(crate) fn parse_sandbox(obj: &Map<String, Value>) -> Result<Option<SandboxSettings>, ApiError> {
    match obj.get("sandbox") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(fields)) => {
            if let Some(other) = fields.keys().find(|k| *k != "mode" && *k != "network") {
                return Err(ApiError::field(
                    "sandbox",
                    &format!("only mode and network, got {other:?}"),
                ));
            }
            let mode = opt_str(fields, "mode").map_err(|_| {
                ApiError::field("sandbox.mode", "workspace-write, read-only or off")
            })?;
            let network = opt_bool(fields, "network")
                .map_err(|_| ApiError::field("sandbox.network", "a boolean"))?;
            Ok(Some(SandboxSettings {
                mode: mode.map(str::to_owned),
                network,
            }))
        }
        Some(v) => Err(ApiError::field(
            "sandbox",
            &format!("an object {{mode, network}}, got {}", kind(v)),
        )),
    }
}

/// `mcpServers`: an array of objects, each checked by the session factory.
pub(crate) fn parse_mcp_servers(obj: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
    match obj.get("mcpServers") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => Ok(items.clone()),
        Some(v) => Err(ApiError::field(
            "mcpServers",
            &format!("an array of server objects, got {}", kind(v)),
        )),
    }
}

fn query_usize(k: &str, v: &str) -> Result<usize, ApiError> {
    v.parse::<usize>().map_err(|_| {
        ApiError::bad_request(
            "invalid_query",
            format!("{k}: expected a non-negative integer, got {v:?}"),
        )
    })
}

/// The query's `key=value` pairs, values percent-decoded (a browser's `URLSearchParams` or
/// `encodeURIComponent` writes `:` as `%3A`); a key without `=` has an empty value.
pub(crate) fn query_pairs(uri: &Uri) -> impl Iterator<Item = (&str, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, raw) = pair.split_once('=').unwrap_or((pair, ""));
            (k, percent_decode(raw))
        })
}

pub(crate) fn parse_query(uri: &Uri) -> Result<Window, ApiError> {
    let mut tail = None;
    let mut before = None;
    let mut limit = None;
    for (k, decoded) in query_pairs(uri) {
        let v = decoded.as_str();
        match k {
            "tailLimit" => tail = Some(query_usize(k, v)?),
            "limit" => limit = Some(query_usize(k, v)?),
            "before" => {
                before = Some(TracePosition::parse(v).ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!(
                            "before: expected <fileIndex>:<ordinal> (a tracePosition), got {v:?}"
                        ),
                    )
                })?)
            }
            // The stream's token parameter may be reused on every URL by a client.
            "access_token" => {}
            other => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("unknown query parameter {other:?}"),
                ))
            }
        }
    }
    match (tail, before, limit) {
        (Some(_), Some(_), _) => Err(ApiError::bad_request(
            "invalid_query",
            "tailLimit and before cannot be combined",
        )),
        (_, None, Some(_)) => Err(ApiError::bad_request(
            "invalid_query",
            "limit is only allowed together with before",
        )),
        (_, Some(position), limit) => Ok(Window::Before { position, limit }),
        (Some(n), None, None) => Ok(Window::Tail(n)),
        (None, None, None) => Ok(Window::All),
    }
}

/// `goal` of a task: absent or `null` (a plain task), `true` or `{}` (a goal with no token
/// budget), `{"budget": N}` (a goal of at most N tokens; 0 is no budget).
pub(crate) fn parse_goal(obj: &Map<String, Value>) -> Result<Option<Option<u64>>, ApiError> {
    let expected = "true, or {\"budget\": tokens} (a non-negative integer)";
    match obj.get("goal") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(None)),
        Some(Value::Object(g)) => {
            if let Some(other) = g.keys().find(|k| *k != "budget") {
                return Err(ApiError::field(
                    "goal",
                    &format!("only budget, got {other:?}"),
                ));
            }
            match g.get("budget") {
                None | Some(Value::Null) => Ok(Some(None)),
                Some(v) => match v.as_u64() {
                    Some(0) => Ok(Some(None)),
                    Some(n) => Ok(Some(Some(n))),
                    None => Err(ApiError::field("goal.budget", expected)),
                },
            }
        }
        Some(_) => Err(ApiError::field("goal", expected)),
    }
}

/// `skills: ["name", …]` of a task: the skills it pins, as a `[use_skills]` block before its
/// first text (one is added when the input has none).
pub(crate) fn pin_skills(
    obj: &Map<String, Value>,
    mut input: Vec<OmniMessage>,
    text: String,
) -> Result<(Vec<OmniMessage>, String), ApiError> {
    use penguin_omni_protocol::markers::use_skills_message;
    let names: Vec<String> = match obj.get("skills") {
        None | Some(Value::Null) => return Ok((input, text)),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::field("skills", "a list of skill names"))?,
        Some(_) => return Err(ApiError::field("skills", "a list of skill names")),
    };
    if names.is_empty() {
        return Ok((input, text));
    }
    let first_text = input.iter().enumerate().find_map(|(i, m)| match m.model() {
        Some(penguin_omni_protocol::ModelPayload::Text(t)) => Some((i, t.text.clone())),
        _ => None,
    });
    match first_text {
        Some((i, first)) => input[i] = build::user_text(use_skills_message(&names, &first)),
        None => input.insert(0, build::user_text(use_skills_message(&names, ""))),
    }
    Ok((input, use_skills_message(&names, &text)))
}

/// The parsed `input` of a task: messages, the text for the follow-up mirror, image count.
pub(crate) fn parse_input(v: Option<&Value>) -> Result<(Vec<OmniMessage>, String, u32), ApiError> {
    let items = match v {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(ApiError::field(
                "input",
                &format!("an array of input parts, got {}", kind(other)),
            ))
        }
        None => {
            return Err(ApiError::field(
                "input",
                "an array of input parts (missing)",
            ))
        }
    };
    let mut msgs = Vec::new();
    let mut texts = Vec::new();
    let mut images = 0u32;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| ApiError::field(&at, &format!("an object, got {}", kind(item))))?;
        match opt_str(obj, "type")
            .map_err(|_| ApiError::field(&format!("{at}.type"), "a string"))?
        {
            Some("text") => {
                let text = opt_str(obj, "text")
                    .map_err(|_| ApiError::field(&format!("{at}.text"), "a string"))?
                    .ok_or_else(|| ApiError::field(&format!("{at}.text"), "a string (missing)"))?;
                texts.push(text.to_owned());
                msgs.push(build::user_text(text));
            }
            Some("image_url") => {
                let url = opt_str(obj, "imageUrl")
                    .map_err(|_| ApiError::field(&format!("{at}.imageUrl"), "a string"))?
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| {
                        ApiError::field(&format!("{at}.imageUrl"), "a non-empty string")
                    })?;
                images += 1;
                msgs.push(build::image_url(url));
            }
            Some(other) => {
                return Err(ApiError::field(
                    &format!("{at}.type"),
                    &format!("\"text\" or \"image_url\", got {other:?}"),
                ))
            }
            None => return Err(ApiError::field(&format!("{at}.type"), "a string (missing)")),
        }
    }
    let meaningful = images > 0 || texts.iter().any(|t| !t.trim().is_empty());
    if !meaningful {
        return Err(ApiError::bad_request(
            "empty_input",
            "input: needs non-blank text or an image",
        ));
    }
    Ok((msgs, texts.join("\n\n"), images))
}
