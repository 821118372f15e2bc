//! Usage from the traces (`GET /api/usage`, `penguin usage`): every request's token counts
//! are in its session's Trace (`token_usage`, the LLM stream's last message, protocol
//! [§6.3](penguin_omni_protocol::spec#s6.3)), under the model of the `session_meta` before it,
//! so adding them up needs nothing else and survives restarts.
//!
//! - Each trace file is read line by line; only lines naming `token_usage` or `session_meta`
//!   are parsed. A subagent's requests are in its own trace (origin-tagged messages are never
//!   written to the parent's), so nothing is counted twice.
//! - A fork copies its source's records byte for byte: a request whose timestamp and counts
//!   (its own and the session's so far) were already seen is the same request, counted once,
//!   for the session that made it (session ids sort by creation).
//! - Requests that failed or were cut off report no usage and are not counted.
//! - Days are UTC days of the `token_usage` timestamp.
//!
//! Prices are not known here: the caller hands a function that costs a model's tokens (the
//! session layer's `pricing`).

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use penguin_omni_protocol::{Body, EventPayload, OmniMessage, TokenCounts};
use serde::Serialize;

/// How rows are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// By UTC day, `YYYY-MM-DD`.
    #[default]
    Day,
    /// By model, `provider/model_id`.
    Model,
    /// By session id.
    Session,
}

impl std::str::FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<GroupBy, String> {
        match s {
            "day" => Ok(GroupBy::Day),
            "model" => Ok(GroupBy::Model),
            "session" => Ok(GroupBy::Session),
            other => Err(format!(
                "{other:?} is not a grouping: day, model or session"
            )),
        }
    }
}

/// Parses a date bound: `YYYY-MM-DD` (midnight UTC starting that day, or with `end` the
/// midnight ending it) or an RFC 3339 timestamp (`2026-12-06T18:00:00Z`).
pub fn parse_bound(text: &str, end: bool) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(day) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        let day = if end {
            day.succ_opt().unwrap_or(day)
        } else {
            day
        };
        return Ok(day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    DateTime::parse_from_rfc3339(t)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|_| {
            format!("{text:?} is not a date: give YYYY-MM-DD or an RFC 3339 time (2026-12-06T18:00:00Z)")
        })
}

/// What to add up: requests from `from` (included) to `to` (excluded), grouped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageQuery {
    /// The earliest request counted.
    pub from: Option<DateTime<Utc>>,
    /// The first instant not counted.
    pub to: Option<DateTime<Utc>>,
    /// How rows are grouped.
    pub group_by: GroupBy,
}

/// One request's usage, as its session's Trace holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestUsage {
    /// The session that made it.
    pub session_id: String,
    /// When its `token_usage` was written.
    pub at: DateTime<Utc>,
    /// The adapter (`session_meta.provider`).
    pub provider: String,
    /// The upstream model id.
    pub model_id: String,
    /// Its token counts.
    pub tokens: TokenCounts,
}

/// Token counts as the usage API spells them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTokens {
    /// Prompt tokens read from the provider's cache.
    pub cache_read: u64,
    /// The rest of the prompt (the wire's `cache_write`).
    pub uncached_prompt: u64,
    /// Thinking and response tokens.
    pub output: u64,
    /// All three.
    pub total: u64,
}

impl From<TokenCounts> for UsageTokens {
    fn from(t: TokenCounts) -> UsageTokens {
        UsageTokens {
            cache_read: t.cache_read,
            uncached_prompt: t.uncached_prompt,
            output: t.output,
            total: t.total,
        }
    }
}

/// One group's usage (`GET /api/usage`'s rows).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// The day (`YYYY-MM-DD`), model (`provider/model_id`) or session id.
    pub group: String,
    /// Requests counted.
    pub requests: u64,
    /// Their tokens.
    pub tokens: UsageTokens,
    /// What the priced requests cost, in dollars.
    pub cost: f64,
    /// Models of the group without a price: their requests are in `tokens` but not in
    /// `cost`, which is then a lower bound.
    pub unpriced: Vec<String>,
}

/// `GET /api/usage`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// The grouping: `day`, `model` or `session`.
    pub group_by: &'static str,
    /// The rows, in order of their group (days oldest first).
    pub rows: Vec<UsageRow>,
    /// Every row added up (`group` is `total`).
    pub total: UsageRow,
}

/// Costs a model's tokens: `(provider, model_id, tokens)`, `None` without a price.
pub type CostFn<'a> = dyn Fn(&str, &str, &TokenCounts) -> Option<f64> + 'a;

/// Every request of every session under `traces_dir`, oldest session first.
pub fn read_requests(traces_dir: &Path) -> std::io::Result<Vec<RequestUsage>> {
    let mut sessions: BTreeMap<String, Vec<(u32, PathBuf)>> = BTreeMap::new();
    let dates = match std::fs::read_dir(traces_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for date in dates.flatten() {
        if !date.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(date.path()) else {
            continue;
        };
        for file in files.flatten() {
            let name = file.file_name();
            let Some((id, index)) = name
                .to_str()
                .and_then(penguin_trace_store::parse_trace_file_name)
            else {
                continue;
            };
            if penguin_trace_store::is_regular_entry(&file) {
                sessions
                    .entry(id.to_owned())
                    .or_default()
                    .push((index, file.path()));
            }
        }
    }
    let mut ledger = Ledger::default();
    for (id, mut files) in sessions {
        files.sort();
        for (_, path) in files {
            // A file that vanished or cannot be opened (deleted meanwhile) counts nothing.
            let Ok(file) = penguin_trace_store::open_trace(&path) else {
                continue;
            };
            let mut reader = std::io::BufReader::new(file);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line)? > 0 {
                ledger.line(&id, &line);
                line.clear();
            }
        }
    }
    Ok(ledger.requests)
}

/// The requests found so far, fed one trace line at a time, each session's lines in order
/// (a session's model is the `session_meta` before its `token_usage`). A cluster node keeps
/// one across usage reads and feeds it only the records replicated since the last.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The model of each session's latest `session_meta`.
    models: std::collections::HashMap<String, (String, String)>,
    /// Requests seen, by timestamp and counts: a fork's copy of its source's is not counted.
    seen: HashSet<(String, [u64; 6])>,
    /// Every request, in the order its line came.
    pub requests: Vec<RequestUsage>,
}

impl Ledger {
    /// Adds `line` of `session`'s Trace: its request, when it is a `token_usage`.
    pub fn line(&mut self, session: &str, line: &[u8]) {
        let wanted = |key: &[u8]| memchr::memmem::find(line, key).is_some();
        if !wanted(b"\"token_usage\"") && !wanted(b"\"session_meta\"") {
            return;
        }
        // A torn or malformed line counts nothing.
        let Some(msg) = std::str::from_utf8(line)
            .ok()
            .and_then(|text| OmniMessage::from_json(text.trim_end()).ok())
        else {
            return;
        };
        match &msg.body {
            Body::SessionMeta(meta) => {
                self.models.insert(
                    session.to_owned(),
                    (meta.provider.clone(), meta.model_id.clone()),
                );
            }
            Body::Event(EventPayload::TokenUsage {
                session: sofar,
                request,
            }) if !msg.has_origin() => {
                let stamp = msg.timestamp.as_str().to_owned();
                let Ok(at) = DateTime::parse_from_rfc3339(&stamp) else {
                    return;
                };
                let counts = |t: &TokenCounts| [t.cache_read, t.uncached_prompt, t.output];
                let [a, b, c] = counts(sofar);
                let [d, e, f] = counts(request);
                if !self.seen.insert((stamp, [a, b, c, d, e, f])) {
                    return;
                }
                let (provider, model_id) = self.models.get(session).cloned().unwrap_or_default();
                self.requests.push(RequestUsage {
                    session_id: session.to_owned(),
                    at: at.with_timezone(&Utc),
                    provider,
                    model_id,
                    tokens: *request,
                });
            }
            _ => {}
        }
    }
}

/// The requests of `query`'s range added up by its grouping, each priced with `cost`.
pub fn summarize(requests: &[RequestUsage], query: &UsageQuery, cost: &CostFn<'_>) -> UsageReport {
    let mut groups: BTreeMap<String, UsageRow> = BTreeMap::new();
    let row = |group: String| UsageRow {
        group,
        requests: 0,
        tokens: UsageTokens::default(),
        cost: 0.0,
        unpriced: Vec::new(),
    };
    let mut total = row("total".into());
    for r in requests {
        if query.from.is_some_and(|f| r.at < f) || query.to.is_some_and(|t| r.at >= t) {
            continue;
        }
        let model = format!("{}/{}", r.provider, r.model_id);
        let key = match query.group_by {
            GroupBy::Day => r.at.format("%Y-%m-%d").to_string(),
            GroupBy::Model => model.clone(),
            GroupBy::Session => r.session_id.clone(),
        };
        let spent = cost(&r.provider, &r.model_id, &r.tokens);
        for row in [
            groups.entry(key.clone()).or_insert_with(|| row(key)),
            &mut total,
        ] {
            row.requests += 1;
            let t = TokenCounts {
                cache_read: row.tokens.cache_read,
                uncached_prompt: row.tokens.uncached_prompt,
                output: row.tokens.output,
                total: row.tokens.total,
            } + r.tokens;
            row.tokens = t.into();
            match spent {
                Some(c) => row.cost += c,
                None if !row.unpriced.contains(&model) => row.unpriced.push(model.clone()),
                None => {}
            }
        }
    }
    UsageReport {
        group_by: match query.group_by {
            GroupBy::Day => "day",
            GroupBy::Model => "model",
            GroupBy::Session => "session",
        },
        rows: groups.into_values().collect(),
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penguin_omni_protocol::build;
    use std::io::Write;

    fn meta(id: &str, provider: &str, model: &str) -> String {
        build::session_meta(penguin_omni_protocol::SessionMeta {
            session_id: id.into(),
            provider: provider.into(),
            model_id: model.into(),
            model_context_window: penguin_omni_protocol::ContextWindow::Other("unknown".into()),
            system_prompt: String::new(),
            agent_state: String::new(),
            workspace: String::new(),
            source: None,
            forked_from: None,
        })
        .to_json()
    }

    fn usage(at: &str, session: TokenCounts, request: TokenCounts) -> String {
        let mut m = build::token_usage(session, request);
        m.timestamp = penguin_omni_protocol::Timestamp::from_text(at);
        m.to_json()
    }

    fn write(dir: &Path, date: &str, name: &str, lines: &[String]) {
        std::fs::create_dir_all(dir.join(date)).unwrap();
        let mut f = std::fs::File::create(dir.join(date).join(name)).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    #[test]
    fn requests_add_up_by_day_model_and_session_once_each_with_forks_and_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let a = "session-2026-12-05-10-00-00-aaaaaaaa";
        let fork = "session-2026-12-06-09-00-00-bbbbbbbb";
        let r1 = TokenCounts::new(0, 1_000_000, 0);
        let r2 = TokenCounts::new(1_000_000, 0, 100_000);
        let first = usage("2026-12-05T10:00:01.000Z", r1, r1);
        let second = usage("2026-12-06T08:00:00.000Z", r1 + r2, r2);
        write(
            dir.path(),
            "2026-12-05",
            &format!("{a}_001.jsonl"),
            &[
                meta(a, "openai-chat", "gpt-4.1"),
                first.clone(),
                "{\"torn".into(),
            ],
        );
        // After a compaction and a resume on another model.
        write(
            dir.path(),
            "2026-12-05",
            &format!("{a}_002.jsonl"),
            &[
                meta(a, "anthropic-messages", "local-claude"),
                second.clone(),
            ],
        );
        // A fork copies the first request; it makes one of its own.
        let own = usage("2026-12-06T09:00:01.000Z", r1, r1);
        write(
            dir.path(),
            "2026-12-06",
            &format!("{fork}_001.jsonl"),
            &[meta(fork, "openai-chat", "gpt-4.1"), first, own],
        );
        let requests = read_requests(dir.path()).unwrap();
        assert_eq!(requests.len(), 3, "{requests:?}");
        let cost = |_: &str, model: &str, t: &TokenCounts| {
            (model == "gpt-4.1").then(|| (t.uncached_prompt * 2 + t.output * 8) as f64 / 1e6)
        };
        let by = |group_by| {
            summarize(
                &requests,
                &UsageQuery {
                    group_by,
                    ..UsageQuery::default()
                },
                &cost,
            )
        };
        let days = by(GroupBy::Day);
        assert_eq!(
            days.rows
                .iter()
                .map(|r| (r.group.as_str(), r.requests))
                .collect::<Vec<_>>(),
            [("2026-12-05", 1), ("2026-12-06", 2)]
        );
        assert_eq!(days.rows[1].unpriced, ["anthropic-messages/local-claude"]);
        assert_eq!(days.total.tokens.total, 3_100_000);
        assert!((days.total.cost - 4.0).abs() < 1e-9, "{}", days.total.cost);
        let models = by(GroupBy::Model);
        assert_eq!(models.rows[0].group, "anthropic-messages/local-claude");
        assert_eq!(models.rows[0].tokens.cache_read, 1_000_000);
        assert_eq!(models.rows[1].requests, 2);
        let sessions = by(GroupBy::Session);
        assert_eq!(
            sessions
                .rows
                .iter()
                .map(|r| (r.group.as_str(), r.requests))
                .collect::<Vec<_>>(),
            [(a, 2), (fork, 1)]
        );
        let since = summarize(
            &requests,
            &UsageQuery {
                from: Some(parse_bound("2026-12-06", false).unwrap()),
                to: Some(parse_bound("2026-12-06T08:30:00Z", true).unwrap()),
                group_by: GroupBy::Day,
            },
            &cost,
        );
        assert_eq!(since.total.requests, 1);
    }

    #[test]
    fn bad_bounds_and_groupings_say_what_is_expected() {
        assert!(parse_bound("yesterday", false)
            .unwrap_err()
            .contains("give YYYY-MM-DD"));
        assert_eq!(
            parse_bound("2026-12-06", true).unwrap().to_rfc3339(),
            "2026-12-07T00:00:00+00:00"
        );
        assert!("week"
            .parse::<GroupBy>()
            .unwrap_err()
            .contains("day, model or session"));
        assert!(read_requests(Path::new("/nonexistent/traces"))
            .unwrap()
            .is_empty());
    }
}
