//! `GET /api/sessions`: the loaded sessions and those on disk (from the index), most recently
//! active first, one page at a time.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::Uri;
use penguin_omni_protocol::Timestamp;
use penguin_sse_transport::SessionStatus;

use crate::api::{PageInfo, SessionInfo, SessionList};
use crate::error::ApiError;
use crate::index::Indexed;
use crate::requests::query_pairs;
use crate::sessions::Sessions;

/// Where a page ends: the sort key and id of its last session. Sessions that become active
/// meanwhile move to the front, so a cursor of values, not of positions, never repeats or
/// skips a session that kept its place.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cursor {
    active: String,
    id: String,
}

impl Cursor {
    fn parse(s: &str) -> Option<Cursor> {
        let (active, id) = s.rsplit_once('~')?;
        Some(Cursor {
            active: active.to_owned(),
            id: id.to_owned(),
        })
    }

    fn render(&self) -> String {
        format!("{}~{}", self.active, self.id)
    }
}

/// The parsed query of a listing.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
    before: Option<Cursor>,
}

pub(crate) fn parse_list_query(uri: &Uri) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery::default();
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
            "access_token" => {}
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
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
            active: sort_key(info.last_active_at.as_deref(), info.created_at.as_deref()),
            id: info.id.clone(),
        }
    }
}

/// One page of `sessions` (or all), newest first: a cluster's listing, whose rows are all
/// known already.
pub(crate) fn paginate(sessions: Vec<SessionInfo>, q: &ListQuery) -> SessionList {
    let rows = sessions.into_iter().map(|i| (Cursor::of(&i), i)).collect();
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

/// One page (or all) of the sessions. The index is read off the async workers; only the
/// sessions on the page have their settings read.
pub(crate) async fn list(sessions: &Arc<Sessions>, q: ListQuery) -> Result<SessionList, ApiError> {
    let me = sessions.clone();
    let on_disk = tokio::task::spawn_blocking(move || me.index.sessions())
        .await
        .map_err(|e| ApiError::internal(format!("the trace index failed: {e}")))?
        .map_err(|e| ApiError::internal(format!("cannot list the traces: {e}")))?;
    let mut rows: Vec<(Cursor, Row)> = sessions
        .loaded()
        .into_iter()
        .map(|e| {
            let info = e.info();
            (Cursor::of(&info), Row::Loaded(Box::new(info)))
        })
        .collect();
    for (id, s) in on_disk {
        // A loaded session is listed as it is now, not as its files were.
        if sessions.is_loaded(&id) {
            continue;
        }
        let written = s.written.and_then(timestamp);
        let created = s.head.as_ref().and_then(|h| h.created_at.as_deref());
        let active = sort_key(written.as_deref(), created);
        rows.push((Cursor { active, id }, Row::OnDisk(s)));
    }
    Ok(page(rows, &q, |cursor, row| match row {
        Row::Loaded(info) => *info,
        Row::OnDisk(s) => on_disk_info(sessions, cursor.id, s),
    }))
}

fn on_disk_info(sessions: &Sessions, id: String, s: Indexed) -> SessionInfo {
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
        for (bad, why) in [
            ("limit=0", "limit: expected a positive integer"),
            ("limit=x", "limit: expected a positive integer"),
            ("before=a~b", "before is only allowed together with limit"),
            (
                "limit=1&before=nocursor",
                "before: expected the page.before",
            ),
            ("page=2", "unknown query parameter \"page\""),
        ] {
            let err = q(bad).unwrap_err();
            assert!(err.message.contains(why), "{bad}: {err:?}");
        }
    }
}
