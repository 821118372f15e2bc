//! The HTTP server over real sockets: fake sessions playing a scripted model and scripted
//! tools, a reqwest client, and SSE parsed by hand (the shared harness in `support/`).
//!
//! Mid-task points are made deterministic by gating the run on an `always-ask` approval, and
//! every wait is for a specific event with a bounded timeout.
#![cfg(feature = "testing")]

mod support;

use std::time::Duration;

use penguin_server::ServeOptions;
use penguin_sse_transport::{ChannelConfig, ClientReducer, History, SseConfig};
use serde_json::{json, Value};
use support::script::{model, partial_text, step, usage};
use support::{kinds, within, Ev, TestDir, TestServer, TOKEN};

// ---------------------------------------------------------------------------------------------
// Scenario

fn text_steps(text: &str) -> Vec<Value> {
    vec![
        step(5, partial_text("start", "")),
        step(5, partial_text("delta", text)),
        step(5, partial_text("stop", "")),
        step(
            2,
            model(
                json!({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"}),
            ),
        ),
    ]
}

/// Request 1 streams text (pausing `pause_ms` inside it) and calls `read_file` as `call_1`;
/// request 2 answers "Done."; requests 3 and 4 (follow-up runs) answer plain text.
fn scenario(pause_ms: u64) -> Value {
    let call = |event: &str, name: &str, args: &str| {
        model(
            json!({"type": "partial_tool_call", "role": "assistant", "event_type": event, "name": name, "arguments": args, "tool_call_id": "call_1", "stop_reason": "completed"}),
        )
    };
    let first = vec![
        step(5, partial_text("start", "")),
        step(5, partial_text("delta", "Hello")),
        step(pause_ms, partial_text("delta", " there")),
        step(5, partial_text("stop", "")),
        step(
            2,
            model(
                json!({"type": "text", "role": "assistant", "text": "Hello there", "stop_reason": "completed"}),
            ),
        ),
        step(5, call("start", "read_file", "")),
        step(5, call("delta", "", "{\"path\":\"a.txt\"}")),
        step(5, call("stop", "", "")),
        step(
            2,
            model(
                json!({"type": "tool_call", "role": "assistant", "name": "read_file", "arguments": "{\"path\":\"a.txt\"}", "tool_call_id": "call_1", "stop_reason": "completed"}),
            ),
        ),
        step(5, usage(5, 100)),
    ];
    let out = |event: &str, text: &str| {
        model(
            json!({"type": "partial_tool_call_output", "role": "user", "event_type": event, "output": text, "tool_call_id": "call_1", "stop_reason": "completed"}),
        )
    };
    let tool = vec![
        step(5, out("start", "")),
        step(5, out("delta", "alpha")),
        step(5, out("stop", "")),
        step(
            2,
            model(
                json!({"type": "tool_call_output", "role": "user", "output": "alpha", "tool_call_id": "call_1", "stop_reason": "completed"}),
            ),
        ),
    ];
    let plain = |text: &str, total: u64| {
        let mut s = text_steps(text);
        s.push(step(2, usage(5, total)));
        json!({"stream": s})
    };
    json!({
        "description": "server test",
        "llm": [{"stream": first}, plain("Done.", 200), plain("Again.", 300), plain("Once more.", 400)],
        "tools": {"call_1": {"stream": tool}},
        "runs": []
    })
}

// ---------------------------------------------------------------------------------------------
// Server

/// The server must work within a small descriptor budget: every test of this file runs under
/// a soft limit of 256 open files.
async fn start_with(pause_ms: u64, tweak: impl FnOnce(&mut ServeOptions)) -> TestServer {
    support::low_open_file_limit(256);
    support::serve_script_with(scenario(pause_ms), tweak).await
}

async fn start(pause_ms: u64) -> TestServer {
    start_with(pause_ms, |_| {}).await
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_with_last_event_id_gets_exactly_the_gap_then_snapshot_then_live() {
    let srv = start(0).await;
    let id = srv.create("always-ask").await;
    let mut watcher = srv.stream(&id, None).await;
    let first = watcher.next().await;
    assert!(first.is_state("idle"), "{first:?}");
    let mut client = srv.stream(&id, None).await;
    assert!(client.next().await.is_state("idle"));

    assert_eq!(srv.task(&id, "read a.txt").await.status, 202);
    // The server publishes the input itself, before task_state(running).
    let seen = client.until(|e| e.kind() == "request_begin").await;
    assert_eq!(
        kinds(&seen),
        ["text", "task_state", "tool_list_ready", "request_begin"]
    );
    assert_eq!(seen[0].json()["payload"]["text"], "read a.txt");
    assert!(seen[1].is_state("running"));
    let last_seen = seen.last().unwrap().id.clone();
    drop(client);

    // The run goes on without that client until it waits for the approval.
    let all = watcher.until(|e| e.kind() == "approval_request").await;
    let gap: Vec<Ev> = all
        .iter()
        .skip_while(|e| e.id != last_seen)
        .skip(1)
        .cloned()
        .collect();
    assert!(
        gap.len() > 5,
        "the gap holds the streamed text and the call"
    );

    let mut back = srv.stream(&id, Some(&last_seen)).await;
    let mut replay = Vec::new();
    for _ in 0..gap.len() {
        replay.push(back.next().await);
    }
    assert_eq!(replay, gap, "exactly the missing events, in order");
    let snap = back.next().await;
    assert!(snap.is_state("running"), "{snap:?}");
    assert!(snap.seq() > gap.last().unwrap().seq());
    let pending = back.next().await;
    assert_eq!(pending.kind(), "approval_request", "resent while pending");
    assert_eq!(
        pending.json()["toolCall"]["payload"]["tool_call_id"],
        "call_1"
    );

    let r = srv
        .post(
            &format!("/api/sessions/{id}/approvals/call_1"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let live = back.until(|e| e.is_state("idle")).await;
    let reference = watcher.until(|e| e.is_state("idle")).await;
    assert_eq!(
        live, reference,
        "live events match the uninterrupted client"
    );
    let k = kinds(&live);
    assert_eq!(k[0], "approval_decision");
    assert!(k.contains(&"tool_call_output".to_string()));
    assert!(live.windows(2).all(|w| w[0].seq() < w[1].seq()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_last_event_id_gets_resync_required_first() {
    let srv = start_with(0, |o| {
        o.channel = ChannelConfig {
            max_events: 4,
            ..ChannelConfig::default()
        };
        o.sse = SseConfig {
            heartbeat: Duration::from_millis(50),
        };
    })
    .await;
    let id = srv.create("allow-all").await;
    let mut s = srv.stream(&id, None).await;
    let first = s.next().await;
    assert!(
        first.is_state("idle"),
        "a fresh connection starts with task_state"
    );
    assert_eq!(srv.task(&id, "go").await.status, 202);
    let early = s.next().await;
    assert_eq!(early.kind(), "text");
    s.until(|e| e.is_state("idle")).await;

    let mut back = srv.stream(&id, Some(&early.id)).await;
    let ev = back.next().await;
    assert_eq!(ev.event.as_deref(), Some("server_event"));
    assert_eq!(ev.kind(), "resync_required");
    let snap = back.next().await;
    assert!(snap.is_state("idle"), "{snap:?}");

    // An id from another epoch (a restarted server) misses too.
    let mut other = srv.stream(&id, Some("00000000-3")).await;
    assert_eq!(other.next().await.kind(), "resync_required");

    // Still in the window: the last event id replays nothing and gets the snapshot.
    let mut fresh = srv.stream(&id, Some(&snap.id)).await;
    let ev = fresh.next().await;
    assert!(ev.is_state("idle"), "{ev:?}");

    // Once nobody listens, the idle session's channel is reclaimed by a sweep; a client coming
    // back with an id of the old epoch must resync. The server notices closed connections at
    // its next heartbeat (50 ms here), so wait, bounded, for the sweep to find none.
    drop((s, back, other, fresh));
    let reclaimed = within(async {
        loop {
            if srv.state.sweep_channels(Duration::ZERO).contains(&id) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(reclaimed);
    let mut back = srv.stream(&id, Some(&snap.id)).await;
    assert_eq!(back.next().await.kind(), "resync_required");
    assert!(back.next().await.is_state("idle"));
}

async fn feed(reducer: &mut ClientReducer, ev: &Ev) {
    reducer.on_event(Some(&ev.id), ev.event.as_deref(), &ev.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_joining_mid_task_converges_to_the_watchers_state() {
    // A 400 ms pause inside the streamed text gives the late client an open fragment to join.
    let srv = start(400).await;
    let id = srv.create("always-ask").await;

    let mut w_stream = srv.stream(&id, None).await;
    let mut watcher = ClientReducer::new();
    let ev = w_stream.next().await;
    feed(&mut watcher, &ev).await;
    let h: History = serde_json::from_value(srv.history(&id).await).unwrap();
    assert!(h.messages.is_empty() && h.live.is_none());
    watcher.on_history(h);

    assert_eq!(srv.task(&id, "hello").await.status, 202);
    for ev in w_stream
        .until(|e| e.json()["payload"]["text"] == "Hello")
        .await
    {
        feed(&mut watcher, &ev).await;
    }

    // Connect first, then fetch history, then fold in the buffered events.
    let mut l_stream = srv.stream(&id, None).await;
    let mut late = ClientReducer::new();
    let snap = l_stream.next().await;
    assert!(snap.is_state("running"));
    feed(&mut late, &snap).await;
    let body = srv.history(&id).await;
    assert!(
        body["live"].is_object(),
        "live is present while running: {body}"
    );
    let texts: Vec<&Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["payload"]["type"] == "text")
        .collect();
    assert_eq!(texts.len(), 1, "the input appears once: {body}");
    let h: History = serde_json::from_value(body).unwrap();
    late.on_history(h);

    // Let the run reach its approval, approve it, and follow both clients to the end.
    for ev in w_stream.until(|e| e.kind() == "approval_request").await {
        feed(&mut watcher, &ev).await;
    }
    let r = srv
        .post(
            &format!("/api/sessions/{id}/approvals/call_1"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r.status, 204);
    for ev in w_stream.until(|e| e.is_state("idle")).await {
        feed(&mut watcher, &ev).await;
    }
    for ev in l_stream.until(|e| e.is_state("idle")).await {
        feed(&mut late, &ev).await;
    }

    // session_meta is never streamed (it lives in the trace and the history API): the watcher
    // fetched its history before anything was written, so only the late client has it.
    let (a, mut b) = (watcher.state(), late.state());
    assert_eq!(b.messages[0].payload_type(), "session_meta");
    b.messages.remove(0);
    assert_eq!(a, b, "the late client ends exactly where the watcher does");
    let kinds_seen: Vec<&str> = a.messages.iter().map(|m| m.payload_type()).collect();
    assert_eq!(
        kinds_seen,
        [
            "text",
            "tool_list_ready",
            "request_begin",
            "text",
            "tool_call",
            "approval_decision",
            "token_usage",
            "request_end",
            "tool_call_output",
            "request_begin",
            "text",
            "token_usage",
            "request_end"
        ],
        "{kinds_seen:?}"
    );
    assert!(a.fragments.is_empty());

    // And a third client that arrives after the end gets the same transcript from history.
    let mut after = ClientReducer::new();
    let mut s = srv.stream(&id, None).await;
    feed(&mut after, &s.next().await).await;
    after.on_history(serde_json::from_value(srv.history(&id).await).unwrap());
    let mut transcript = after.state().messages;
    assert_eq!(transcript.remove(0).payload_type(), "session_meta");
    assert_eq!(transcript, a.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_ask_approvals_are_resent_decided_and_aborted_cleanly() {
    let srv = start(0).await;
    let id = srv.create("always-ask").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "first").await.status, 202);
    let evs = s.until(|e| e.kind() == "approval_request").await;
    assert_eq!(
        evs.last().unwrap().json()["toolCall"]["payload"]["name"],
        "read_file"
    );

    // A fresh connection while pending: task_state first, then the pending request.
    let mut s2 = srv.stream(&id, None).await;
    assert!(s2.next().await.is_state("running"));
    assert_eq!(s2.next().await.kind(), "approval_request");

    let path = format!("/api/sessions/{id}/approvals/call_9");
    let r = srv.post(&path, json!({"decision": "allow"})).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "approval_not_found");
    let path = format!("/api/sessions/{id}/approvals/call_1");
    let r = srv.post(&path, json!({"decision": "maybe"})).await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("decision"));

    // Deny over HTTP: the engine records the denial.
    assert_eq!(
        srv.post(&path, json!({"decision": "deny"})).await.status,
        204
    );
    let rest = s.until(|e| e.is_state("idle")).await;
    let decision = rest
        .iter()
        .find(|e| e.kind() == "approval_decision")
        .unwrap();
    assert_eq!(decision.json()["payload"]["decision"], "deny");

    // Abort while an approval is pending: no approval_decision, an abort, then idle.
    let id2 = srv.create("always-ask").await;
    let mut t = srv.stream(&id2, None).await;
    t.next().await;
    assert_eq!(srv.task(&id2, "second").await.status, 202);
    t.until(|e| e.kind() == "approval_request").await;
    let r = srv
        .post(&format!("/api/sessions/{id2}/abort"), json!({}))
        .await;
    assert_eq!(r.status, 202);
    let end = t.until(|e| e.is_state("idle")).await;
    let k = kinds(&end);
    assert!(!k.contains(&"approval_decision".to_string()), "{k:?}");
    assert!(k.contains(&"abort".to_string()), "{k:?}");
    let abort_at = k.iter().position(|x| x == "abort").unwrap();
    assert_eq!(
        abort_at,
        k.len() - 2,
        "abort is the run's last message: {k:?}"
    );
    let r = srv
        .post(&format!("/api/sessions/{id2}/abort"), json!({}))
        .await;
    assert_eq!(r.status, 204, "idle: nothing to abort");
    let r = srv
        .post(&path.replace(&id, &id2), json!({"decision": "allow"}))
        .await;
    assert_eq!(r.status, 404, "the aborted approval is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_sessions_refuse_or_queue_and_follow_ups_start_in_order() {
    let srv = start(0).await;
    let id = srv.create("always-ask").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "one").await.status, 202);
    s.until(|e| e.kind() == "approval_request").await;

    let r = srv.task(&id, "two").await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["error"]["code"], "task_in_progress");

    let r = srv
        .post(
            &format!("/api/sessions/{id}/tasks"),
            json!({"input": [{"type": "text", "text": "later"}], "queueIfBusy": true}),
        )
        .await;
    assert_eq!(r.status, 202);
    assert_eq!(r.body, json!({"sessionId": id, "queued": true}));
    let ts = s.next().await;
    assert_eq!(ts.json()["queued"], 1);
    assert_eq!(ts.json()["pendingFollowUps"][0]["text"], "later");

    // Steering is accepted while running and mirrored in task_state.
    let r = srv
        .post(
            &format!("/api/sessions/{id}/steer"),
            json!({"text": "hurry"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let ts = s.next().await;
    assert_eq!(ts.json()["pendingSteering"][0]["text"], "hurry");

    // A second steering input and a second follow-up, both recalled before they are used.
    let r = srv
        .post(
            &format!("/api/sessions/{id}/steer"),
            json!({"text": "recall me"}),
        )
        .await;
    let steer_id = r.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.next().await.json()["pendingSteering"][1]["text"],
        "recall me"
    );
    let path = format!("/api/sessions/{id}/steer/{steer_id}");
    let r = srv.call(reqwest::Method::DELETE, &path, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"text": "recall me", "images": 0, "files": 0})
    );
    let ts = s.next().await.json();
    assert_eq!(ts["pendingSteering"].as_array().unwrap().len(), 1);
    let r = srv.call(reqwest::Method::DELETE, &path, None).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["error"]["code"], "not_pending");
    let r = srv
        .post(
            &format!("/api/sessions/{id}/tasks"),
            json!({"input": [{"type": "text", "text": "never"}], "queueIfBusy": true, "thinkingLevel": "low"}),
        )
        .await;
    assert_eq!(r.body["queued"], true);
    let ts = s.next().await.json();
    assert_eq!(ts["queued"], 2);
    let fid = ts["pendingFollowUps"][1]["id"].as_str().unwrap().to_owned();
    let r = srv
        .call(
            reqwest::Method::DELETE,
            &format!("/api/sessions/{id}/follow-ups/{fid}"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"text": "never", "images": 0, "files": 0, "thinkingLevel": "low"})
    );
    assert_eq!(s.next().await.json()["queued"], 1);

    // PATCH takes effect at the next approval; this one is still asked.
    let r = srv
        .call(
            reqwest::Method::PATCH,
            &format!("/api/sessions/{id}"),
            Some(json!({"approvalMode": "allow-all", "title": "T"})),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["session"]["approvalMode"], "allow-all");
    assert_eq!(s.next().await.kind(), "session_title");
    let path = format!("/api/sessions/{id}/approvals/call_1");
    assert_eq!(
        srv.post(&path, json!({"decision": "allow"})).await.status,
        204
    );
    let first_run = s.until(|e| e.is_state("idle")).await;
    let steered = first_run.iter().find(|e| {
        e.kind() == "text"
            && e.json()["payload"]["text"]
                .as_str()
                .unwrap()
                .starts_with("[user_steering]")
    });
    assert_eq!(
        steered.map(|e| e.json()["payload"]["text"].clone()),
        Some(json!("[user_steering]\nhurry\n[/user_steering]")),
        "{:?}",
        kinds(&first_run)
    );
    // The follow-up starts by itself: its input, then running, then its own run.
    let next = s.until(|e| e.is_state("running")).await;
    assert_eq!(next[0].json()["payload"]["text"], "later");
    assert_eq!(next.last().unwrap().json()["queued"], 0);
    s.until(|e| e.is_state("idle")).await;

    let r = srv
        .post(
            &format!("/api/sessions/{id}/steer"),
            json!({"text": "late"}),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["error"]["code"], "not_running");
    let r = srv
        .post(&format!("/api/sessions/{id}/retry-now"), json!({}))
        .await;
    assert_eq!((r.status, r.body.clone()), (200, json!({"skipped": false})));
    let r = srv
        .post(&format!("/api/sessions/{id}/compact"), json!({}))
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["error"]["code"], "compaction_not_configured");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_naming_the_problem() {
    // A small body cap, so the oversize request below fits the socket buffers and the client
    // finishes sending before the server answers and closes.
    let srv = start_with(0, |o| o.max_body_bytes = 4096).await;
    let id = srv.create("allow-all").await;

    // Authentication.
    let res = srv.http.get(srv.url("/api/sessions")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let body: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let res = srv
        .http
        .get(srv.url("/api/sessions"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let res = srv
        .http
        .get(srv.url(&format!("/api/sessions/{id}/stream?access_token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200, "streams accept ?access_token=");
    drop(res);
    let res = srv
        .http
        .get(srv.url(&format!("/api/sessions?access_token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status().as_u16(),
        401,
        "only streams take the query token"
    );

    // Unknown things.
    let r = srv.get("/api/sessions/session-nope").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "session_not_found");
    let r = srv.task("session-nope", "x").await;
    assert_eq!(r.status, 404);
    let r = srv.get("/api/nothing").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "not_found");
    let r = srv.get("/api/sessions/..%2F..%2Fetc").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["code"], "invalid_session_id");
    let r = srv
        .call(reqwest::Method::PUT, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(r.status, 405);

    // Bodies.
    let tasks = srv.url(&format!("/api/sessions/{id}/tasks"));
    let raw = |body: &'static str, ct: &'static str| {
        srv.http
            .post(&tasks)
            .bearer_auth(TOKEN)
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let res = raw("{\"input\": [", "application/json").await.unwrap();
    assert_eq!(res.status().as_u16(), 400);
    let body: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "invalid_json");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("line 1"));
    let res = raw("{\"input\": []}", "text/plain").await.unwrap();
    assert_eq!(res.status().as_u16(), 415);
    let res = raw("[1]", "application/json").await.unwrap();
    assert_eq!(res.status().as_u16(), 400);
    let big = format!("{{\"input\": \"{}\"}}", "x".repeat(8 * 1024));
    let res = srv
        .http
        .post(&tasks)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 413);
    let body: Value = serde_json::from_str(&res.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");

    for (body, field) in [
        (json!({"input": "hi"}), "input"),
        (
            json!({"input": [{"type": "text", "text": 5}]}),
            "input[0].text",
        ),
        (json!({"input": [{"type": "video"}]}), "input[0].type"),
        (
            json!({"input": [{"type": "text", "text": "x"}], "queueIfBusy": "yes"}),
            "queueIfBusy",
        ),
        (
            json!({"input": [{"type": "text", "text": "x"}], "thinkingLevel": "huge"}),
            "thinkingLevel",
        ),
    ] {
        let r = srv.post(&format!("/api/sessions/{id}/tasks"), body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(field), "{field}: {msg}");
    }
    let r = srv
        .post("/api/sessions", json!({"approvalMode": "sometimes"}))
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("approvalMode"));
    let r = srv
        .post("/api/sessions", json!({"workspace": "/does/not/exist"}))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["code"], "invalid_request");

    // The session still works after all that.
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "fine").await.status, 202);
    s.until(|e| e.is_state("idle")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_and_deleted_and_the_user_channel_reports_them() {
    let srv = start(0).await;
    let mut user = srv.sse("/api/events", None).await;
    assert_eq!(user.next().await.kind(), "hello");
    let id = srv.create("allow-all").await;
    let created = user.next().await;
    assert_eq!(created.kind(), "session_created");
    assert_eq!(created.json()["sessionId"], id.as_str());

    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "go").await.status, 202);
    // Named by its first prompt.
    let titled = user.next().await;
    assert_eq!(titled.kind(), "session_title");
    assert_eq!(titled.json()["title"], "go");
    let running = user.next().await;
    assert_eq!(running.kind(), "session_state");
    assert_eq!(running.json()["state"], "running");
    assert_eq!(running.json()["hasTrace"], true);
    s.until(|e| e.is_state("idle")).await;
    let idle = user.next().await;
    assert_eq!(idle.json()["state"], "idle");

    let r = srv.get("/api/sessions").await;
    assert_eq!(r.status, 200);
    let ids: Vec<&str> = r.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let r = srv.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(r.body["session"]["state"], "idle");
    assert_eq!(r.body["session"]["provider"], "scripted");

    let h = srv.history(&id).await;
    let msgs = h["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["type"], "session_meta");
    assert_eq!(
        msgs[0]["tracePosition"],
        json!({"fileIndex": 1, "ordinal": 0})
    );
    assert!(h.get("live").is_none());
    let tail = srv
        .get(&format!("/api/sessions/{id}/messages?tailLimit=2"))
        .await;
    assert_eq!(tail.body["messages"].as_array().unwrap().len(), 2);

    let r = srv
        .call(
            reqwest::Method::DELETE,
            &format!("/api/sessions/{id}"),
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(srv.get(&format!("/api/sessions/{id}")).await.status, 404);
    let r = srv.get("/api/sessions").await;
    assert_eq!(r.body["sessions"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_modes_are_read_at_each_call() {
    let srv = start(0).await;

    // deny-all: denied without asking.
    let id = srv.create("deny-all").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "x").await.status, 202);
    let evs = s.until(|e| e.is_state("idle")).await;
    assert!(!kinds(&evs).contains(&"approval_request".to_string()));
    let d = evs
        .iter()
        .find(|e| e.kind() == "approval_decision")
        .unwrap();
    assert_eq!(d.json()["payload"]["decision"], "deny");

    // read-only: read_file only reads, so it is allowed without asking.
    let id = srv.create("read-only").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "x").await.status, 202);
    let evs = s.until(|e| e.is_state("idle")).await;
    assert!(
        !kinds(&evs).contains(&"approval_request".to_string()),
        "{:?}",
        kinds(&evs)
    );
    let d = evs
        .iter()
        .find(|e| e.kind() == "approval_decision")
        .unwrap();
    assert_eq!(d.json()["payload"]["decision"], "allow");

    // The mode is read at each call: a PATCH to always-ask means the same call is now asked.
    let id = srv.create("read-only").await;
    let r = srv
        .call(
            reqwest::Method::PATCH,
            &format!("/api/sessions/{id}"),
            Some(json!({"approvalMode": "always-ask"})),
        )
        .await;
    assert!(r.status < 300, "{}", r.body);
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "y").await.status, 202);
    let evs = s.until(|e| e.kind() == "approval_request").await;
    let at = kinds(&evs).iter().position(|k| k == "tool_call").unwrap();
    assert_eq!(at, evs.len() - 2, "the request follows its call");
    let r = srv
        .post(
            &format!("/api/sessions/{id}/approvals/call_1"),
            json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(r.status, 204);
    s.until(|e| e.is_state("idle")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_serves_and_resumes_sessions_from_their_traces() {
    let first = start(0).await;
    let id = first.create("read-only").await;
    let r = first
        .call(
            reqwest::Method::PATCH,
            &format!("/api/sessions/{id}"),
            Some(json!({"title": "kept", "approvalMode": "allow-all"})),
        )
        .await;
    assert!(r.status < 300, "{}", r.body);
    let mut s = first.stream(&id, None).await;
    s.next().await;
    assert_eq!(first.task(&id, "before restart").await.status, 202);
    s.until(|e| e.is_state("idle")).await;
    let before = first.history(&id).await;

    let root = first.data_root.clone();
    let second = start_with(0, |o| o.data_root = root).await;
    let r = second.get("/api/sessions").await;
    let listed = &r.body["sessions"][0];
    assert_eq!(listed["id"], id.as_str());
    assert_eq!(listed["provider"], "scripted");
    assert_eq!(second.history(&id).await, before);
    let r = second.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(
        (
            r.body["session"]["title"].as_str(),
            r.body["session"]["approvalMode"].as_str()
        ),
        (Some("kept"), Some("allow-all")),
        "settings survive a restart"
    );

    let mut s = second.stream(&id, None).await;
    assert!(s.next().await.is_state("idle"));
    assert_eq!(second.task(&id, "after restart").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    assert!(kinds(&run).contains(&"request_end".to_string()));
    let after = second.history(&id).await;
    let inputs: Vec<&str> = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["payload"]["type"] == "text" && m["payload"]["role"] == "user")
        .map(|m| m["payload"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(inputs, ["before restart", "after restart"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_sessions_are_listed_most_recently_active_first() {
    let first = start(0).await;
    let mut ids = Vec::new();
    for text in ["one", "two"] {
        let id = first.create("read-only").await;
        let mut s = first.stream(&id, None).await;
        s.next().await;
        assert_eq!(first.task(&id, text).await.status, 202);
        s.until(|e| e.is_state("idle")).await;
        ids.push(id);
    }
    // Whatever their ids say (two sessions of one second order by a random suffix), the one
    // whose trace was written last comes first.
    ids.sort();
    let (older, newer) = (ids[1].clone(), ids[0].clone());
    let base = std::time::SystemTime::now();
    let mut stack = vec![first.data_root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with(".jsonl") {
                let at = match name.starts_with(&newer) {
                    true => base,
                    false => base - std::time::Duration::from_secs(60),
                };
                std::fs::File::options()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_modified(at)
                    .unwrap();
            }
        }
    }
    let root = first.data_root.clone();
    let second = start_with(0, |o| o.data_root = root).await;
    let r = second.get("/api/sessions").await;
    let listed: Vec<&str> = r.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [newer.as_str(), older.as_str()]);
    assert!(
        r.body["sessions"][0]["lastActiveAt"].is_string(),
        "{}",
        r.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_compaction_is_its_own_task_and_the_next_task_opens_a_new_trace_file() {
    use support::script::{call_turn, text_turn};
    support::low_open_file_limit(256);
    // The first task calls a tool, then answers; the compaction's summary is the script's next
    // request; the new context's model answers the task after it.
    let script = json!({"llm": [
        call_turn("read_file", "c1", json!({"path": "a.txt"})),
        text_turn("It says alpha."),
        text_turn("[summary]The user asked for a.txt; it says alpha.[/summary]"),
    ], "tools": {"c1": {"stream": [step(0, support::script::tool_output("c1", "alpha"))]}}});
    let dir = TestDir::new();
    let factory = support::FakeFactory::new(script, dir.workspace())
        .with_compaction(json!([text_turn("Still alpha.")]));
    let srv = support::serve(dir, std::sync::Arc::new(factory), |_| {}).await;

    let r = srv
        .post("/api/sessions", json!({"provider": "openai-chat"}))
        .await;
    assert_eq!(r.status, 400, "a provider this server does not serve");
    assert_eq!(r.body["error"]["code"], "invalid_request");
    let id = srv.create("allow-all").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    let compact = format!("/api/sessions/{id}/compact");
    let r = srv.post(&compact, json!({})).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("nothing_to_compact"))
    );
    assert_eq!(srv.task(&id, "hi").await.status, 202);
    let run = s.until(|e| e.is_state("idle")).await;
    let k = kinds(&run);
    assert!(k.contains(&"tool_call".to_string()), "{k:?}");
    assert_eq!(k.iter().filter(|x| *x == "request_end").count(), 2, "{k:?}");

    // A manual compaction: its own task, announced as `compacting`.
    let r = srv.post(&compact, json!({})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let compaction = s.until(|e| e.is_state("idle")).await;
    let k = kinds(&compaction);
    assert!(compaction.iter().any(|e| e.is_state("compacting")), "{k:?}");
    assert!(
        k.contains(&"compaction_begin".to_string()) && k.contains(&"compaction_end".to_string()),
        "{k:?}"
    );
    let r = srv.post(&compact, json!({})).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("already_compacted"))
    );

    // The next task opens the new context with the summary, in a new trace file.
    assert_eq!(srv.task(&id, "and now?").await.status, 202);
    let next = s.until(|e| e.is_state("idle")).await;
    assert!(
        next.iter().any(|e| e.says("Still alpha.")),
        "{:?}",
        kinds(&next)
    );
    let history = srv.history(&id).await;
    let msgs = history["messages"].as_array().unwrap();
    let files: std::collections::BTreeSet<u64> = msgs
        .iter()
        .filter_map(|m| m["tracePosition"]["fileIndex"].as_u64())
        .collect();
    assert_eq!(files.into_iter().collect::<Vec<_>>(), [1, 2]);
    assert!(msgs.iter().any(|m| m["payload"]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("[context_summary]"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_app_is_served_without_the_token_and_the_api_still_needs_it() {
    let srv = start(0).await;
    let get = |path: &str| srv.http.get(srv.url(path)).send();
    for path in ["/", "/sessions/session-anything"] {
        let res = get(path).await.unwrap();
        assert_eq!(res.status().as_u16(), 200, "{path}");
        assert_eq!(
            res.headers()["content-type"].to_str().unwrap(),
            "text/html; charset=utf-8"
        );
        let csp = res.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        let html = res.text().await.unwrap();
        assert!(html.contains(r#"<script type="module" src="/assets/app.js">"#));
    }
    let res = get("/assets/app.js").await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "text/javascript; charset=utf-8"
    );
    let etag = res.headers()["etag"].to_str().unwrap().to_owned();
    // The entry module; the views are modules it imports, served the same way.
    assert!(res.text().await.unwrap().contains("./sessionview.js"));
    let view = get("/assets/sessionview.js").await.unwrap();
    assert_eq!(view.status().as_u16(), 200);
    assert!(view.text().await.unwrap().contains("SessionStream"));
    let again = srv
        .http
        .get(srv.url("/assets/app.js"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(
        again.status().as_u16(),
        304,
        "an unchanged asset is not resent"
    );
    assert_eq!(get("/assets/nope.js").await.unwrap().status().as_u16(), 404);

    // The API, and paths that are neither page nor API, still need the token.
    for path in ["/api/sessions", "/elsewhere", "/sessions/a/b"] {
        assert_eq!(get(path).await.unwrap().status().as_u16(), 401, "{path}");
    }
    assert_eq!(srv.get("/elsewhere").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_pages_backwards_with_the_before_cursor() {
    let srv = start(0).await;
    let id = srv.create("allow-all").await;
    let mut s = srv.stream(&id, None).await;
    s.next().await;
    assert_eq!(srv.task(&id, "read a.txt").await.status, 202);
    s.until(|e| e.is_state("idle")).await;

    let full = srv.history(&id).await;
    let full = full["messages"].as_array().unwrap().clone();
    assert!(full.len() > 8, "{full:?}");
    let path = format!("/api/sessions/{id}/messages");

    // The newest page, then older ones until the start: together, the whole history once.
    let tail = srv.get(&format!("{path}?tailLimit=3")).await;
    assert_eq!(tail.status, 200, "{}", tail.body);
    let mut pages = vec![tail.body["messages"].as_array().unwrap().clone()];
    assert_eq!(pages[0].len(), 3);
    assert_eq!(tail.body["page"]["hasMore"], true);
    let mut before = tail.body["page"]["before"].as_str().unwrap().to_owned();
    assert_eq!(
        before,
        format!(
            "{}:{}",
            pages[0][0]["tracePosition"]["fileIndex"], pages[0][0]["tracePosition"]["ordinal"]
        ),
        "the cursor is the first record of the page"
    );
    loop {
        let r = srv.get(&format!("{path}?before={before}&limit=4")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.get("live").is_none());
        let msgs = r.body["messages"].as_array().unwrap().clone();
        assert!(!msgs.is_empty() && msgs.len() <= 4);
        pages.insert(0, msgs);
        if r.body["page"]["hasMore"] == false {
            assert!(r.body["page"].get("before").is_none());
            break;
        }
        before = r.body["page"]["before"].as_str().unwrap().to_owned();
    }
    let joined: Vec<Value> = pages.into_iter().flatten().collect();
    assert_eq!(joined, full);

    let encoded = srv
        .get(&format!(
            "{path}?before={}&limit=4",
            before.replace(':', "%3A")
        ))
        .await;
    assert_eq!(
        encoded.status, 200,
        "a percent-encoded cursor: {}",
        encoded.body
    );
    let everything = srv.get(&format!("{path}?before=99999:0")).await;
    assert_eq!(everything.body["messages"].as_array().unwrap(), &full);
    assert_eq!(everything.body["page"], json!({"hasMore": false}));
    assert!(full_page_has_no_page_info(&srv.get(&path).await.body));

    for bad in [
        "tailLimit=2&before=1:0",
        "limit=2",
        "before=1",
        "before=a:1",
        "before=1:0&limit=x",
    ] {
        let r = srv.get(&format!("{path}?{bad}")).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_query", "{bad}");
    }
}

fn full_page_has_no_page_info(body: &Value) -> bool {
    body.get("page").is_none()
}

/// Every route of the `api` module's table reaches a handler on a served router: none answers
/// the router's own 404 (`not_found`) or 405 (`method_not_allowed`). (The unit test in `lib.rs`
/// holds the table and the router's list equal; this one holds the list served.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_reaches_a_handler() {
    let srv = support::serve_script(scenario(0)).await;
    let routes: Vec<(String, String)> = include_str!("../src/api.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .filter_map(|row| row.split_once('`'))
        .filter_map(|(route, _)| route.split_once(' '))
        .map(|(method, path)| (method.to_owned(), path.to_owned()))
        .collect();
    assert!(routes.len() > 20, "{routes:?}");
    for (method, path) in routes {
        // A session of its own for each, so a DELETE cannot take another route's session.
        let id = srv.create("allow-all").await;
        let url = srv.url(
            &path
                .replace("{id}", &id)
                .replace("{name}", "app.js")
                .replace("{item}", "nothing")
                .replace("{call}", "nothing")
                .replace("{process}", "nothing"),
        );
        let req = srv
            .http
            .request(method.parse().unwrap(), url)
            .bearer_auth(TOKEN);
        // Streams answer their headers at once; the body is never read.
        let res = within(req.send()).await.unwrap();
        let status = res.status().as_u16();
        let code = match status {
            404 | 405 => res
                .json::<Value>()
                .await
                .ok()
                .map(|b| b["error"]["code"].clone()),
            _ => None,
        };
        assert!(
            !matches!(
                code.as_ref().and_then(Value::as_str),
                Some("not_found" | "method_not_allowed")
            ),
            "{method} {path}: the router answered {status} {code:?}"
        );
    }
}
