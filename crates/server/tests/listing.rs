//! `GET /api/sessions` from the index: every session on disk and in memory, pinned first, then
//! most recently active first, in pages that neither repeat nor skip a session while others are
//! created; archived sessions only when asked for; a search of titles and first prompts.
#![cfg(feature = "testing")]

mod support;

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{json, Value};
use support::script::text_turn;
use support::{serve_script, FakeFactory, TestDir, TestServer};

fn script() -> Value {
    json!({"description": "listing", "llm": [], "tools": {}, "runs": []})
}

/// Writes `n` sessions' traces as another process would (the CLI on the same data root), in a
/// workspace that no longer exists (they cannot be loaded).
fn write_on_disk(srv: &TestServer, n: usize) -> Vec<String> {
    let prompts: Vec<String> = (0..n).map(|i| format!("Count   penguins\n #{i}")).collect();
    write_prompts(srv, &prompts, "/w")
}

/// [`write_on_disk`], one session per first prompt, the last the most recently active.
fn write_prompts(srv: &TestServer, prompts: &[String], workspace: &str) -> Vec<String> {
    let day = srv
        .data_root
        .join("default/agents/penguin/traces/2026-01-01");
    std::fs::create_dir_all(&day).unwrap();
    prompts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let id = format!("session-2026-01-01-00-00-00-{i:08x}");
            let meta = json!({
                "timestamp": format!("2026-01-01T00:{:02}:{:02}.000Z", i / 60, i % 60),
                "type": "session_meta",
                "payload": {"session_id": id, "provider": "p", "model_id": "m",
                    "model_context_window": "unknown", "system_prompt": "", "agent_state": "",
                    "workspace": workspace}
            });
            let prompt = json!({
                "timestamp": "2026-01-01T01:00:00.000Z",
                "type": "model_msg",
                "payload": {"type": "text", "role": "user", "text": text}
            });
            std::fs::write(
                day.join(format!("{id}_000.jsonl")),
                format!("{meta}\n{prompt}\n"),
            )
            .unwrap();
            id
        })
        .collect()
}

async fn ids(srv: &TestServer, query: &str) -> (Vec<String>, Value) {
    let r = srv.get(&format!("/api/sessions{query}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ids = r.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    (ids, r.body["page"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_cover_every_session_once_while_new_ones_are_created() {
    let srv = serve_script(script()).await;
    let on_disk = write_on_disk(&srv, 130);
    let created = [srv.create("allow-all").await, srv.create("allow-all").await];

    let (all, page) = ids(&srv, "").await;
    assert_eq!(page, Value::Null, "no page without a limit");
    assert_eq!(all.len(), 132);
    // The sessions this server created are the most recently active.
    let mut newest: Vec<&str> = all[..2].iter().map(String::as_str).collect();
    newest.sort();
    let mut expected: Vec<&str> = created.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(newest, expected);
    let r = srv.get("/api/sessions?limit=1").await;
    let first = &r.body["sessions"][0];
    assert!(first["createdAt"].is_string() && first["lastActiveAt"].is_string());
    // An on-disk session is described from its session_meta.
    let listed = srv.get("/api/sessions").await.body;
    let disk = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == on_disk[7].as_str())
        .unwrap()
        .clone();
    assert_eq!(disk["model"], "m");
    assert_eq!(
        disk["title"], "Count penguins #7",
        "titled by its first prompt"
    );
    assert_eq!(disk["createdAt"], "2026-01-01T00:00:07.000Z");
    assert_eq!(disk["state"], "idle");

    let mut paged = Vec::new();
    let mut query = "?limit=25".to_owned();
    let mut late = Vec::new();
    loop {
        let (page_ids, page) = ids(&srv, &query).await;
        assert!(page_ids.len() <= 25);
        paged.extend(page_ids);
        // Sessions created meanwhile go to the front, never into a later page.
        late.push(srv.create("allow-all").await);
        if page["hasMore"] != true {
            assert!(page.get("before").is_none());
            break;
        }
        let before = page["before"].as_str().unwrap();
        query = format!("?limit=25&before={}", before.replace(':', "%3A"));
    }
    assert_eq!(paged, all, "the pages are the unpaged list, in order");
    let late: HashSet<&String> = late.iter().collect();
    assert!(paged.iter().all(|id| !late.contains(id)));
    let (now, _) = ids(&srv, "").await;
    assert_eq!(now.len(), 132 + late.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_listing_query_is_refused_by_name() {
    let srv = serve_script(script()).await;
    for (query, why) in [
        ("?limit=0", "limit: expected a positive integer"),
        ("?before=x~y", "before is only allowed together with limit"),
        (
            "?limit=5&before=nocursor",
            "before: expected the page.before",
        ),
        ("?offset=5", "unknown query parameter \"offset\""),
    ] {
        let r = srv.get(&format!("/api/sessions{query}")).await;
        assert_eq!(r.status, 400, "{query}");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{query}: {msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_written_by_another_process_appears_and_a_deleted_one_goes() {
    let srv = serve_script(script()).await;
    assert!(ids(&srv, "").await.0.is_empty());
    let id = srv.create("allow-all").await;
    assert_eq!(ids(&srv, "").await.0, std::slice::from_ref(&id));
    let disk = write_on_disk(&srv, 1);
    let (now, _) = ids(&srv, "").await;
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(now.contains(&disk[0]));
    std::fs::remove_dir_all(
        srv.data_root
            .join("default/agents/penguin/traces/2026-01-01"),
    )
    .unwrap();
    assert_eq!(ids(&srv, "").await.0, [id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_titled_by_its_first_prompt_until_it_is_given_a_title() {
    let srv = serve_script(script()).await;
    let mut user = srv.sse("/api/events", None).await;
    assert_eq!(user.next().await.kind(), "hello");
    let id = srv.create("allow-all").await;
    assert_eq!(user.next().await.kind(), "session_created");
    assert_eq!(info(&srv, &id).await["title"], Value::Null);
    assert_eq!(srv.task(&id, "  Find   the\n penguins ").await.status, 202);
    let titled = user.until(|e| e.kind() == "session_title").await;
    assert_eq!(titled.last().unwrap().json()["title"], "Find the penguins");
    assert_eq!(info(&srv, &id).await["title"], "Find the penguins");
    let (listed, _) = ids(&srv, "").await;
    assert_eq!(listed, std::slice::from_ref(&id));
    let r = srv
        .call(
            reqwest::Method::PATCH,
            &format!("/api/sessions/{id}"),
            Some(json!({"title": "Census"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(info(&srv, &id).await["title"], "Census");
}

async fn info(srv: &TestServer, id: &str) -> Value {
    srv.get(&format!("/api/sessions/{id}")).await.body["session"].clone()
}

/// The default list, the archived ones, and both.
async fn listed(srv: &TestServer) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        ids(srv, "").await.0,
        ids(srv, "?archived=true").await.0,
        ids(srv, "?archived=all").await.0,
    )
}

async fn patch(srv: &TestServer, id: &str, body: Value) -> Value {
    let r = srv.patch(&format!("/api/sessions/{id}"), body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["session"].clone()
}

/// Every page of `query` (with `limit`), in order.
async fn paged(srv: &TestServer, query: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = format!("?limit={limit}{query}");
    loop {
        let (page_ids, page) = ids(srv, &next).await;
        assert!(page_ids.len() <= limit);
        out.extend(page_ids);
        if page["hasMore"] != true {
            return out;
        }
        let before = page["before"].as_str().unwrap().replace(':', "%3A");
        next = format!("?limit={limit}{query}&before={before}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archived_sessions_leave_the_list_pinned_ones_lead_it_and_a_restart_keeps_both() {
    let srv = serve_script(script()).await;
    // d[4] is the most recently active.
    let d = write_on_disk(&srv, 5);
    let (before, _) = ids(&srv, "").await;
    assert_eq!(
        before,
        [
            d[4].clone(),
            d[3].clone(),
            d[2].clone(),
            d[1].clone(),
            d[0].clone()
        ]
    );

    let archived = patch(&srv, &d[3], json!({"archived": true})).await;
    assert_eq!(
        (&archived["archived"], &archived["pinned"]),
        (&json!(true), &json!(false))
    );
    let pinned = patch(&srv, &d[1], json!({"pinned": true})).await;
    assert_eq!(pinned["pinned"], true);
    // Both at once, and unpinned again: a mark can be taken back.
    patch(&srv, &d[0], json!({"pinned": true, "archived": true})).await;
    patch(&srv, &d[0], json!({"pinned": false})).await;

    let expected = (
        vec![d[1].clone(), d[4].clone(), d[2].clone()],
        vec![d[3].clone(), d[0].clone()],
        vec![
            d[1].clone(),
            d[4].clone(),
            d[3].clone(),
            d[2].clone(),
            d[0].clone(),
        ],
    );
    assert_eq!(listed(&srv).await, expected);
    assert_eq!(ids(&srv, "?archived=false").await.0, expected.0);
    // Pages follow the same order, the pinned session's cursor included.
    assert_eq!(paged(&srv, "&archived=all", 1).await, expected.2);
    let one = srv.get("/api/sessions?limit=1").await.body;
    assert!(one["page"]["before"]
        .as_str()
        .unwrap()
        .starts_with("pinned~"));

    // Bad marks are refused by name, and change nothing.
    for (body, why) in [
        (
            json!({"archived": "yes"}),
            "archived: expected a boolean, got a string",
        ),
        (
            json!({"pinned": 1}),
            "pinned: expected a boolean, got a number",
        ),
    ] {
        let r = srv.patch(&format!("/api/sessions/{}", d[2]), body).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.body["error"]["code"], "invalid_field");
        assert_eq!(r.body["error"]["message"], why);
    }
    assert_eq!(listed(&srv).await, expected);

    // A restarted server lists them from disk with the same marks.
    let data = srv.data_root.clone();
    let _kept = srv.stop();
    let dir = TestDir::new();
    let factory = Arc::new(FakeFactory::new(script(), dir.workspace()));
    let again = support::serve(dir, factory, |o| o.data_root = data).await;
    assert_eq!(listed(&again).await, expected);
    let archived = &again.get("/api/sessions?archived=true").await.body["sessions"][0];
    assert_eq!(
        (&archived["id"], &archived["archived"], &archived["pinned"]),
        (&json!(d[3]), &json!(true), &json!(false))
    );
    patch(&again, &d[3], json!({"archived": false})).await;
    assert_eq!(
        ids(&again, "").await.0,
        [d[1].clone(), d[4].clone(), d[3].clone(), d[2].clone()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_finds_titles_and_first_prompts_whatever_the_case_in_pages() {
    let srv = serve_script(script()).await;
    let mut prompts: Vec<String> = (0..30).map(|i| format!("Count penguins #{i}")).collect();
    // Past the 60 characters of a title: only the prompt has it.
    prompts.push(format!(
        "{} then look for the Walrus",
        "and so on ".repeat(8)
    ));
    let d = write_prompts(&srv, &prompts, "/w");

    assert_eq!(
        ids(&srv, "?search=penguins%20%2317").await.0,
        [d[17].clone()]
    );
    assert_eq!(ids(&srv, "?search=WALRUS").await.0, [d[30].clone()]);
    assert!(ids(&srv, "?search=narwhal").await.0.is_empty());
    let all_counts: Vec<String> = d[..30].iter().rev().cloned().collect();
    assert_eq!(paged(&srv, "&search=count", 7).await, all_counts);
    // A blank search is no search.
    assert_eq!(ids(&srv, "?search=%20").await.0.len(), 31);

    // A given title is searched, and the first prompt still is.
    patch(&srv, &d[3], json!({"title": "Census of the birds"})).await;
    assert_eq!(ids(&srv, "?search=census").await.0, [d[3].clone()]);
    assert_eq!(ids(&srv, "?search=count%20%233").await.0, [d[3].clone()]);
    // Archived sessions are searched only when asked for.
    patch(&srv, &d[3], json!({"archived": true})).await;
    assert!(ids(&srv, "?search=census").await.0.is_empty());
    assert_eq!(
        ids(&srv, "?search=census&archived=true").await.0,
        [d[3].clone()]
    );
    // A session this server created and ran is found by its first prompt too.
    let mut user = srv.sse("/api/events", None).await;
    let id = srv.create("allow-all").await;
    assert_eq!(srv.task(&id, "Feed the puffins").await.status, 202);
    user.until(|e| e.kind() == "session_title").await;
    assert_eq!(
        ids(&srv, "?search=puffins").await.0,
        std::slice::from_ref(&id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_neither_archived_nor_pinned() {
    let srv = serve_script(json!({"llm": [text_turn("Counted.")], "tools": {}})).await;
    let id = srv.create("allow-all").await;
    assert_eq!(srv.task(&id, "Count").await.status, 202);
    srv.until_idle(&id).await;
    patch(&srv, &id, json!({"archived": true, "pinned": true})).await;
    let r = srv
        .post(&format!("/api/sessions/{id}/fork"), json!({}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let fork = &r.body["session"];
    assert_eq!(
        (&fork["archived"], &fork["pinned"]),
        (&json!(false), &json!(false))
    );
    assert_eq!(ids(&srv, "").await.0, [fork["id"].as_str().unwrap()]);
}

/// Every open list hears of a mark: `session_marked` on the user channel, with both marks as
/// they are now, for a session on disk and for one loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_reaches_every_list_on_the_user_channel() {
    let srv = serve_script(script()).await;
    let on_disk = write_on_disk(&srv, 1).remove(0);
    let loaded = srv.create("always-ask").await;
    let mut events = srv.sse("/api/events", None).await;
    assert_eq!(events.next().await.kind(), "hello");
    let marked = |id: &str, archived: bool, pinned: bool| json!({"type": "session_marked", "sessionId": id, "archived": archived, "pinned": pinned});
    let mut heard = Vec::new();
    for (id, body, then) in [
        (
            &on_disk,
            json!({"archived": true}),
            marked(&on_disk, true, false),
        ),
        (
            &on_disk,
            json!({"pinned": true}),
            marked(&on_disk, true, true),
        ),
        (
            &loaded,
            json!({"pinned": true}),
            marked(&loaded, false, true),
        ),
        (
            &loaded,
            json!({"archived": true, "pinned": false}),
            marked(&loaded, true, false),
        ),
    ] {
        patch(&srv, id, body).await;
        // Other user events (a session created, its state) may come between.
        loop {
            let ev = events.next().await;
            if ev.kind() == "session_marked" {
                assert_eq!(ev.json(), then);
                heard.push(ev.json());
                break;
            }
        }
    }
    assert_eq!(heard.len(), 4);
    // A title alone marks nothing.
    patch(&srv, &loaded, json!({"title": "named"})).await;
    loop {
        let ev = events.next().await;
        assert_ne!(ev.kind(), "session_marked", "{}", ev.data);
        if ev.kind() == "session_title" {
            break;
        }
    }
}
