//! Shared helpers for the workspace tests: timeline rendering and scenario plumbing.
#![allow(dead_code)]

use penguin::omni_protocol::{Body, EventPayload, Frame, ModelPayload, OmniMessage};

fn short(s: &str) -> String {
    let one_line = s.replace('\n', "⏎");
    if one_line.chars().count() > 60 {
        format!("{:?}…", one_line.chars().take(60).collect::<String>())
    } else {
        format!("{one_line:?}")
    }
}

fn describe(m: &OmniMessage) -> (&'static str, String) {
    let origin = m
        .origin
        .as_ref()
        .map(|o| format!(" origin={}", o.join("/")))
        .unwrap_or_default();
    let (kind, text) = match &m.body {
        Body::SessionMeta(meta) => ("meta", format!("session_meta {}", meta.session_id)),
        Body::Event(e) => (
            "event",
            match e {
                EventPayload::ApprovalDecision {
                    decision,
                    tool_call_id,
                    ..
                } => format!("approval_decision({decision}, {tool_call_id})"),
                EventPayload::Abort { reason } => format!(
                    "abort({})",
                    reason.as_deref().map(short).unwrap_or("null".into())
                ),
                EventPayload::RequestEnd {
                    status,
                    error_message,
                    attempt,
                    retry_in_ms,
                } => {
                    let mut s = format!("request_end({status}");
                    if let Some(a) = attempt {
                        s += &format!(", attempt {a}");
                    }
                    if let Some(r) = retry_in_ms {
                        s += &format!(", retry in {r}ms");
                    }
                    if let Some(e) = error_message {
                        s += &format!(", {}", short(e));
                    }
                    s + ")"
                }
                EventPayload::TokenUsage { session, request } => {
                    format!(
                        "token_usage(request total {}, session total {})",
                        request.total, session.total
                    )
                }
                other => other.type_name().to_string(),
            },
        ),
        Body::Model(p) => match p {
            ModelPayload::ToolCall(c) => (
                "complete",
                format!(
                    "tool_call {} {}({}) [{}]",
                    c.tool_call_id,
                    c.name,
                    c.arguments,
                    c.stop_reason.map(|r| r.as_str()).unwrap_or("completed")
                ),
            ),
            ModelPayload::ToolCallOutput(o) => (
                "complete",
                format!(
                    "tool_call_output {} {} [{}]",
                    o.tool_call_id,
                    short(&o.output),
                    o.stop_reason.map(|r| r.as_str()).unwrap_or("completed")
                ),
            ),
            other => (
                "complete",
                format!(
                    "{} {}{} [{}]",
                    other.type_name(),
                    if other.role() == penguin::omni_protocol::Role::User {
                        "(user) "
                    } else {
                        ""
                    },
                    short(other.content().unwrap_or("")),
                    other
                        .stop_reason()
                        .map(|r| r.as_str())
                        .unwrap_or("completed")
                ),
            ),
        },
    };
    (kind, text + &origin)
}

/// Renders a stream as §0.4's numbered timeline: one line per message, with each run of
/// consecutive fragments of one segment collapsed to `partial_x id(start → delta×n → stop)`.
pub fn timeline(frames: &[Frame]) -> String {
    let msgs: Vec<&OmniMessage> = frames.iter().map(Frame::message).collect();
    let mut lines: Vec<(&'static str, String)> = Vec::new();
    let mut i = 0;
    while i < msgs.len() {
        let m = msgs[i];
        if let Some(p) = m.model().filter(|p| p.is_partial()) {
            let key = (
                p.type_name(),
                p.tool_call_id().map(str::to_owned),
                m.origin.clone(),
            );
            let mut events = Vec::new();
            let mut stop_reason = None;
            while i < msgs.len() {
                let Some(q) = msgs[i].model().filter(|q| q.is_partial()) else {
                    break;
                };
                if (
                    q.type_name(),
                    q.tool_call_id().map(str::to_owned),
                    msgs[i].origin.clone(),
                ) != key
                {
                    break;
                }
                let (ev, _) = q.partial_parts().unwrap();
                events.push(ev.as_str());
                if ev == penguin::omni_protocol::StreamEventType::Stop {
                    stop_reason = q.stop_reason();
                    i += 1;
                    break;
                }
                i += 1;
            }
            let deltas = events.iter().filter(|e| **e == "delta").count();
            let mut shape: Vec<String> = Vec::new();
            if events.first() == Some(&"start") {
                shape.push("start".into());
            }
            if deltas > 0 {
                shape.push(format!("delta×{deltas}"));
            }
            if events.last() == Some(&"stop") {
                shape.push(format!(
                    "stop {}",
                    stop_reason.map(|r| r.as_str()).unwrap_or("completed")
                ));
            }
            let id = key.1.map(|id| format!(" {id}")).unwrap_or_default();
            let origin = key
                .2
                .map(|o| format!(" origin={}", o.join("/")))
                .unwrap_or_default();
            lines.push((
                "partial",
                format!("{}{id}({}){origin}", key.0, shape.join(" → ")),
            ));
            continue;
        }
        lines.push(describe(m));
        i += 1;
    }
    lines
        .iter()
        .enumerate()
        .map(|(n, (kind, text))| format!("{:>2}  {kind:<8}  {text}\n", n + 1))
        .collect()
}

/// Each model request's input as a numbered timeline, `request N:` before each.
pub fn requests_timeline(requests: &[Vec<OmniMessage>]) -> String {
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "request {}:\n{}",
                i + 1,
                timeline(&r.iter().cloned().map(Frame::new).collect::<Vec<_>>())
            )
        })
        .collect()
}
