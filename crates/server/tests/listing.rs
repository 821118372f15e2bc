//! `GET /api/sessions` from the index: every session on disk and in memory, most recently
//! active first, in pages that neither repeat nor skip a session while others are created.
#![cfg(feature = "testing")]

mod support;

use std::collections::HashSet;

use serde_json::{json, Value};
use support::{serve_script, TestServer};

fn script() -> Value {
    json!({"description": "listing", "llm": [], "tools": {}, "runs": []})
}

/// Writes `n` sessions' traces as another process would (the CLI on the same data root).
fn write_on_disk(srv: &TestServer, n: usize) -> Vec<String> {
    let day = srv
        .data_root
        .join("default/agents/penguin/traces/2026-01-01");
    std::fs::create_dir_all(&day).unwrap();
    (0..n)
        .map(|i| {
            let id = format!("session-2026-01-01-00-00-00-{i:08x}");
            let meta = json!({
                "timestamp": format!("2026-01-01T00:{:02}:{:02}.000Z", i / 60, i % 60),
                "type": "session_meta",
                "payload": {"session_id": id, "provider": "p", "model_id": "m",
                    "model_context_window": "unknown", "system_prompt": "", "agent_state": "",
                    "workspace": "/w"}
            });
            let prompt = json!({
                "timestamp": "2026-01-01T01:00:00.000Z",
                "type": "model_msg",
                "payload": {"type": "text", "role": "user", "text": format!("Count   penguins\n #{i}")}
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
