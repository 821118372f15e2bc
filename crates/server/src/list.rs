//! `GET /api/sessions`: the loaded sessions and those on disk (from the index), pinned first,
//! then most recently active first, one page at a time; archived ones left out unless asked for,
//! and a search of titles and first prompts (`crate::marks`'s rule) done here, before paging.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::Uri;
use penguin_omni_protocol::Timestamp;
use penguin_sse_transport::SessionStatus;

use crate::api::{PageInfo, SessionInfo, SessionList};
use crate::error::ApiError;
use crate::index::Indexed;
use crate::marks::{Archived, SessionFilter};
use crate::requests::query_pairs;
use crate::sessions::Sessions;

/// Where a page ends: the sort key and id of its last session. Sessions that become active
/// meanwhile move to the front, so a cursor of values, not of positions, never repeats or
/// skips a session that kept its place.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cursor {
    /// First in the order: pinned sessions come before all others.
    pinned: bool,
    active: String,
    id: String,
}

// What a pinned session's cursor starts with (a time never does).
const PINNED: &str = "pinned~";

impl Cursor {
    fn parse(s: &str) -> Option<Cursor> {
        let (pinned, rest) = match s.strip_prefix(PINNED) {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (active, id) = rest.rsplit_once('~')?;
        Some(Cursor {
            pinned,
            active: active.to_owned(),
            id: id.to_owned(),
        })
    }

    fn render(&self) -> String {
        let pin = if self.pinned { PINNED } else { "" };
        format!("{pin}{}~{}", self.active, self.id)
    }
}

/// The parsed query of a listing.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
    before: Option<Cursor>,
    filter: SessionFilter,
}

pub(crate) fn parse_list_query(uri: &Uri) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery::default();
    let (mut archived, mut search) = (Archived::default(), None);
    let bad = |msg: String| ApiError::bad_request("invalid_query", msg);
    for (k, v) in query_pairs(uri) {
        match k {
            "limit" => {
                let n = v.parse::<usize>().ok().filter(|n| *n > 0);
                q.limit = Some(n.ok_or_else(|| {
                    bad(format!("limit: expected a positive integer, got {v:?}"))
                })?);
            }
            "before" => {
                q.before = Some(Cursor::parse(&v).ok_or_else(|| {
                    bad(format!(
                        "before: expected the page.before of an earlier page, got {v:?}"
                    ))
                })?);
            }
            "archived" => {
                archived = Archived::parse(&v).ok_or_else(|| {
                    bad(format!("archived: expected true, false or all, got {v:?}"))
                })?;
            }
            "search" => search = Some(v),
            "access_token" => {}
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    q.filter = SessionFilter::new(archived, search.as_deref());
    if q.before.is_some() && q.limit.is_none() {
        return Err(bad("before is only allowed together with limit".into()));
    }
    Ok(q)
}

// What a session is sorted by: `lastActiveAt`, else `createdAt`.
fn sort_key(active: Option<&str>, created: Option<&str>) -> String {
    active.or(created).unwrap_or("").to_owned()
}

fn timestamp(t: SystemTime) -> Option<String> {
    let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis();
    Some(
        Timestamp::from_unix_millis(i64::try_from(ms).ok()?)
            .as_str()
            .to_owned(),
    )
}

impl Cursor {
    fn of(info: &SessionInfo) -> Cursor {
        Cursor {
            pinned: info.pinned,
            active: sort_key(info.last_active_at.as_deref(), info.created_at.as_deref()),
            id: info.id.clone(),
        }
    }
}

/// One page of `sessions` (or all), newest first: a cluster's listing, whose rows are all
/// known already (a search reads their titles: the index holds no prompt).
pub(crate) fn paginate(sessions: Vec<SessionInfo>, q: &ListQuery) -> SessionList {
    let rows = sessions
        .into_iter()
        .filter(|i| q.filter.keeps(i.archived, i.title.as_deref()))
        .map(|i| (Cursor::of(&i), i))
        .collect();
    page(rows, q, |_, info| info)
}

/// The page of `rows` that `q` asks for, each row made a [`SessionInfo`] by `info` (only the
/// rows on the page are).
fn page<T>(
    mut rows: Vec<(Cursor, T)>,
    q: &ListQuery,
    info: impl Fn(Cursor, T) -> SessionInfo,
) -> SessionList {
    // Newest first.
    rows.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    let start = match &q.before {
        Some(c) => rows.partition_point(|(k, _)| k >= c),
        None => 0,
    };
    let end = q.limit.map_or(rows.len(), |n| rows.len().min(start + n));
    let has_more = end < rows.len();
    let page = q.limit.map(|_| PageInfo {
        has_more,
        before: has_more
            .then(|| rows.get(end.wrapping_sub(1)).map(|(c, _)| c.render()))
            .flatten(),
    });
    let out = rows
        .drain(start.min(end)..end)
        .map(|(cursor, row)| info(cursor, row))
        .collect();
    SessionList {
        sessions: out,
        page,
    }
}

enum Row {
    Loaded(Box<SessionInfo>),
    OnDisk(Indexed),
}

/// One page (or all) of the sessions. The index and the marks are read off the async workers;
/// only the sessions on the page have their settings read.
pub(crate) async fn list(sessions: &Arc<Sessions>, q: ListQuery) -> Result<SessionList, ApiError> {
    let me = sessions.clone();
    let (on_disk, marks) = tokio::task::spawn_blocking(move || {
        Ok::<_, std::io::Error>((me.index.sessions()?, me.settings.marks()))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the trace index failed: {e}")))?
    .map_err(|e| ApiError::internal(format!("cannot list the traces: {e}")))?;
    let mut loaded: HashMap<String, SessionInfo> = sessions
        .loaded()
        .into_iter()
        .map(|e| (e.id.clone(), e.info()))
        .collect();
    let mut rows: Vec<(Cursor, Row)> = Vec::new();
    let mut keep_loaded = |info: SessionInfo, prompt: Option<&str>| {
        if q.filter.keeps(
            info.archived,
            info.title.as_deref().into_iter().chain(prompt),
        ) {
            rows.push((Cursor::of(&info), Row::Loaded(Box::new(info))));
        }
    };
    let mut on_disk_rows = Vec::new();
    for (id, s) in on_disk {
        let head = s.head.as_deref();
        let prompt = head.and_then(|h| h.prompt.as_deref());
        // A loaded session is listed as it is now, not as its files were.
        if let Some(info) = loaded.remove(&id) {
            keep_loaded(info, prompt);
            continue;
        }
        let m = marks.get(&id);
        let texts = [
            m.and_then(|m| m.title.as_deref()),
            head.and_then(|h| h.title.as_deref()),
            prompt,
        ];
        if !q
            .filter
            .keeps(m.is_some_and(|m| m.archived), texts.into_iter().flatten())
        {
            continue;
        }
        let written = s.written.and_then(timestamp);
        let created = head.and_then(|h| h.created_at.as_deref());
        let active = sort_key(written.as_deref(), created);
        let pinned = m.is_some_and(|m| m.pinned);
        on_disk_rows.push((Cursor { pinned, active, id }, Row::OnDisk(s)));
    }
    // Loaded and never written: no trace, so nothing on disk to search but its title.
    for info in loaded.into_values() {
        keep_loaded(info, None);
    }
    rows.append(&mut on_disk_rows);
    Ok(page(rows, &q, |cursor, row| match row {
        Row::Loaded(info) => *info,
        Row::OnDisk(s) => on_disk_info(sessions, cursor.id, s),
    }))
}

/// A session nobody has loaded, as its files and settings describe it.
pub(crate) fn on_disk_info(sessions: &Sessions, id: String, s: Indexed) -> SessionInfo {
    let head = s.head.map(Arc::unwrap_or_clone).unwrap_or_default();
    let settings = sessions.settings.load(&id);
    SessionInfo {
        title: settings.title.or(head.title),
        approval_mode: settings.approval_mode.unwrap_or(sessions.cfg.approval_mode),
        state: SessionStatus::Idle,
        queued: 0,
        provider: head.provider,
        model: head.model,
        model_name: settings.model_name,
        workspace: head.workspace,
        source: head.source,
        created_at: head.created_at,
        last_active_at: s.written.and_then(timestamp),
        has_trace: true,
        trace_write_failures: 0,
        sandbox: None,
        plan: None,
        archived: settings.archived,
        pinned: settings.pinned,
        id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Result<ListQuery, ApiError> {
        parse_list_query(&format!("/api/sessions?{s}").parse().unwrap())
    }

    #[test]
    fn the_query_is_checked_and_the_cursor_round_trips() {
        assert_eq!(q("").unwrap(), ListQuery::default());
        let c = Cursor {
            pinned: false,
            active: "2026-01-01T00:00:00.000Z".into(),
            id: "s-1".into(),
        };
        let parsed = q(&format!(
            "limit=5&before={}",
            c.render().replace(':', "%3A")
        ))
        .unwrap();
        assert_eq!(parsed.limit, Some(5));
        assert_eq!(parsed.before, Some(c));
        let pinned = Cursor {
            pinned: true,
            active: "2026-01-01T00:00:00.000Z".into(),
            id: "s-2".into(),
        };
        assert_eq!(Cursor::parse(&pinned.render()), Some(pinned));
        let searched = q("archived=all&search=Fix%20parser").unwrap();
        assert_eq!(
            searched.filter,
            SessionFilter::new(Archived::All, Some("fix PARSER"))
        );
        for (bad, why) in [
            ("limit=0", "limit: expected a positive integer"),
            ("limit=x", "limit: expected a positive integer"),
            ("before=a~b", "before is only allowed together with limit"),
            (
                "limit=1&before=nocursor",
                "before: expected the page.before",
            ),
            ("page=2", "unknown query parameter \"page\""),
            (
                "archived=yes",
                "archived: expected true, false or all, got \"yes\"",
            ),
        ] {
            let err = q(bad).unwrap_err();
            assert!(err.message.contains(why), "{bad}: {err:?}");
        }
    }
}
