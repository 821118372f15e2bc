//! `penguin show`: a stored session rendered from its trace, offline, with its subagents'
//! sessions nested where they ran; and the recap printed when a session is resumed.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use penguin::agent::Agent;
use penguin::omni_protocol::{EventPayload, Frame, ModelPayload, OmniMessage, Role};
use penguin::trace_store::{read_trace, ReadMode, TraceLines};

use crate::render::{user_text_display, Renderer, UserText};
use crate::setup::resolve_session_id;
use crate::untrusted::{errln, json_line, Untrusted};

pub(crate) fn show(
    id: Option<String>,
    last: bool,
    jsonl: bool,
    verbose: bool,
) -> Result<ExitCode, String> {
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let id = resolve_session_id(&agent, id.as_deref(), last)?;
    let files = trace_files(&agent, &id)?;
    let mut out = std::io::stdout().lock();
    let written = if jsonl {
        files.iter().try_for_each(|f| {
            // Line by line, so that no record past the store's limit is ever held whole.
            let mut lines = TraceLines::open(f).map_err(std::io::Error::other)?;
            while let Some((_, line)) = lines.next_line().map_err(std::io::Error::other)? {
                match line {
                    Ok(bytes) => {
                        // A trace is a file anyone with the data root may have written.
                        let line = String::from_utf8_lossy(bytes);
                        out.write_all(json_line(&line).as_bytes())?;
                        out.write_all(b"\n")?;
                    }
                    Err(too_large) => {
                        errln!("penguin: skipped {}", Untrusted(&too_large.to_string()))
                    }
                }
            }
            Ok(())
        })
    } else {
        let color = crate::render::color_for(std::io::stdout().is_terminal());
        let text = render_session(&agent, &id, color, verbose)?;
        out.write_all(text.as_bytes())
    };
    match written {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.to_string()),
    }
}

fn trace_files(agent: &Agent, id: &str) -> Result<Vec<PathBuf>, String> {
    agent
        .sessions()
        .map_err(|e| format!("cannot list the sessions: {e}"))?
        .into_iter()
        .find(|s| s.id == id)
        .map(|s| s.files)
        .ok_or_else(|| format!("no trace for session {id}"))
}

fn messages(agent: &Agent, id: &str) -> Result<Vec<OmniMessage>, String> {
    let mut all = Vec::new();
    for f in trace_files(agent, id)? {
        let read = read_trace(&f, ReadMode::Tolerant).map_err(|e| e.to_string())?;
        all.extend(read.messages);
    }
    Ok(all)
}

/// The session as the live renderer showed it, preceded by a header line and followed by a
/// totals line. A subagent's session is rendered where its pointer is, its lines marked
/// with the child's short id.
pub(crate) fn render_session(
    agent: &Agent,
    id: &str,
    color: bool,
    verbose: bool,
) -> Result<String, String> {
    let msgs = messages(agent, id)?;
    let mut r = Renderer::new(Vec::new(), color).verbose(verbose);
    let mut header = format!("session {}", Untrusted(id));
    if let Some(meta) = msgs.iter().find_map(OmniMessage::session_meta) {
        header.push_str(&format!(
            " · {}/{} · {}",
            Untrusted(&meta.provider),
            Untrusted(&meta.model_id),
            Untrusted(&meta.workspace)
        ));
    }
    let mut requests = 0u32;
    let mut last_context_file = None;
    for m in &msgs {
        match m.event() {
            Some(EventPayload::Subagent { session_id }) => {
                let child = messages(agent, session_id).unwrap_or_default();
                for c in child {
                    // The child's meta and bookkeeping say nothing a reader needs.
                    if c.session_meta().is_some() {
                        continue;
                    }
                    let nested = c.with_origin(session_id.clone());
                    r.frame(&Frame::new(nested)).map_err(|e| e.to_string())?;
                }
                continue;
            }
            Some(EventPayload::RequestBegin) => requests += 1,
            _ => {}
        }
        if let Some(meta) = m.session_meta() {
            // Each compacted context's file opens with the meta again.
            if last_context_file.replace(meta.session_id.clone()).is_some() {
                r.note("(context compacted here)")
                    .map_err(|e| e.to_string())?;
            }
            continue;
        }
        r.frame(&Frame::new(m.clone())).map_err(|e| e.to_string())?;
    }
    let summary = r.summary().clone();
    let body = String::from_utf8_lossy(&r.into_inner()).into_owned();
    let t = summary.tokens;
    Ok(format!(
        "{header}\n{body}— {requests} request(s), {} tool call(s), {} tokens ({} in, {} out)\n",
        summary.tool_calls,
        t.total,
        t.cache_read + t.uncached_prompt,
        t.output
    ))
}

/// The last `n` exchanges of a stored session, briefly: each prompt and the first lines of
/// the reply.
///
/// Only texts count, so the trace is streamed and only the lines that may hold one are
/// parsed: a resume of a long session reads its tool outputs once (for the context), not twice.
pub(crate) fn recap(agent: &Agent, id: &str, n: usize) -> String {
    let Ok(files) = trace_files(agent, id) else {
        return String::new();
    };
    let mut texts = Vec::new();
    for f in files {
        let Ok(mut lines) = TraceLines::open(&f) else {
            return String::new();
        };
        while let Ok(Some((_, line))) = lines.next_line() {
            let Ok(bytes) = line else { continue };
            if !may_be_text(bytes) {
                continue;
            }
            let parsed = std::str::from_utf8(bytes)
                .ok()
                .and_then(|line| OmniMessage::from_json(line).ok());
            texts.extend(parsed);
        }
    }
    let mut exchanges: Vec<(String, String)> = Vec::new();
    for m in texts.iter().filter(|m| !m.has_origin()) {
        match m.model() {
            Some(ModelPayload::Text(t)) if t.role == Role::User => {
                if let UserText::Prompt(p) = user_text_display(&t.text) {
                    exchanges.push((p, String::new()));
                }
            }
            Some(ModelPayload::Text(t)) if t.role == Role::Assistant => {
                if let Some(last) = exchanges.last_mut() {
                    last.1 = t.text.clone();
                }
            }
            _ => {}
        }
    }
    let start = exchanges.len().saturating_sub(n);
    let mut out = String::new();
    for (prompt, reply) in &exchanges[start..] {
        out.push_str(&format!("› {}\n", one_line(prompt, 100)));
        let lines: Vec<&str> = reply.lines().filter(|l| !l.trim().is_empty()).collect();
        for l in lines.iter().take(3) {
            out.push_str(&format!("  {}\n", one_line(l, 100)));
        }
        if lines.len() > 3 {
            out.push_str(&format!("  (+{} lines)\n", lines.len() - 3));
        }
        if lines.is_empty() {
            out.push_str("  (no reply)\n");
        }
    }
    out
}

/// Whether a trace line may hold a complete text message. penguin writes each record as
/// `{"timestamp":"<24 characters>","type":"KIND"…`, a model message's payload type first: those
/// of another kind are known without parsing them. Any other line is parsed.
fn may_be_text(line: &[u8]) -> bool {
    const STAMPED: &[u8] = br#"{"timestamp":""#;
    const KIND: &[u8] = br#"","type":""#;
    let at = STAMPED.len() + 24;
    if !line.starts_with(STAMPED) || line.get(at..at + KIND.len()) != Some(KIND) {
        return true;
    }
    let kind = &line[at + KIND.len()..];
    if kind.starts_with(br#"event_msg""#) || kind.starts_with(br#"session_meta""#) {
        return false;
    }
    match kind.strip_prefix(br#"model_msg","payload":{"type":""#) {
        Some(payload) => payload.starts_with(br#"text""#),
        None => true,
    }
}

/// `s` on one line, cut to `max` characters, [`neutralise`](crate::untrusted::neutralise)d: a
/// recap quotes prompts and replies.
fn one_line(s: &str, max: usize) -> String {
    let s = crate::untrusted::neutralise(s);
    let one = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > max {
        format!("{}…", one.chars().take(max - 1).collect::<String>())
    } else {
        one
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin::omni_protocol::{build, StopReason};

    #[test]
    fn only_lines_that_may_hold_a_text_are_parsed_for_the_recap() {
        let line = |m: OmniMessage| m.to_json();
        assert!(may_be_text(line(build::user_text("go")).as_bytes()));
        assert!(may_be_text(
            line(build::assistant_text("done", StopReason::Completed)).as_bytes()
        ));
        // A text whose origin is a subagent is parsed too (the recap then leaves it out).
        assert!(may_be_text(
            line(build::user_text("child").with_origin("sub")).as_bytes()
        ));
        for other in [
            build::tool_call_output("a \"text\" in the output", "c1", StopReason::Completed),
            build::request_begin(),
        ] {
            assert!(!may_be_text(line(other).as_bytes()));
        }
        // Not as penguin writes them: parsed, whatever they hold.
        assert!(may_be_text(br#"{"type":"model_msg","timestamp":"2026-12-06T05:00:09.900Z","payload":{"type":"text","role":"user","text":"hi"}}"#));
        assert!(may_be_text(
            br#"{"timestamp":"2026-12-06T05:00:09Z","type":"event_msg"}"#
        ));
        assert!(may_be_text(b"not json"));
    }
}
