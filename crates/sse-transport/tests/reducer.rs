//! Connect-first + dedup (protocol §5.9 *The client pattern*, `docs/protocol.md#s5.9`): a client
//! that joins mid-task ends with exactly the state of one
//! that watched from the start.

use std::sync::Arc;

use penguin_omni_protocol::{
    build, ApprovalDecision, Frame, OmniMessage, StopReason, StreamEventType::*, Timestamp,
    TokenCounts,
};
use penguin_sse_transport::{
    ApprovalRequest, Channel, ChannelConfig, ClientReducer, History, LiveTail, ServerEvent,
    SessionStatus, Subscription, TaskState,
};
use serde_json::{json, Value};

const OK: StopReason = StopReason::Completed;

/// A minimal session server: a channel, a trace of recordable messages, a run state and the
/// approval registry, wired as §5.5 *Running a task* (`docs/protocol.md#s5.5`) describes.
struct Sim {
    ch: Arc<Channel>,
    trace: Vec<String>,
    status: SessionStatus,
    approvals: Vec<ApprovalRequest>,
    clock: i64,
}

impl Sim {
    fn new() -> Sim {
        let mut sim = Sim {
            ch: Channel::new(ChannelConfig::default()),
            trace: Vec::new(),
            status: SessionStatus::Idle,
            approvals: Vec::new(),
            clock: 1_784_344_222_000,
        };
        // The session_meta lives in the trace only; it is never streamed on the main channel.
        let meta = json!({"timestamp": "2026-07-18T03:10:00.000Z", "type": "session_meta", "payload": {
            "session_id": "session-x", "provider": "p", "model_id": "m", "model_context_window": 1000,
            "system_prompt": "", "agent_state": "/s", "workspace": "/w"}});
        sim.trace.push(meta.to_string());
        sim
    }

    /// Stamps with a strictly increasing clock: dedup is by exact JSON, and two genuinely
    /// different messages must never collide in the same millisecond.
    fn emit(&mut self, m: OmniMessage) {
        self.clock += 1;
        let frame = Frame::new(build::restamped(m, Timestamp::from_unix_millis(self.clock)));
        if frame.message().is_recordable() {
            self.trace.push(frame.json().to_owned());
        }
        self.ch.publish_message(&frame);
    }

    fn task_state(&self) -> ServerEvent {
        ServerEvent::TaskState(TaskState {
            state: self.status,
            queued: Some(0),
            pending_steering: None,
            pending_follow_ups: None,
        })
    }

    fn set_state(&mut self, s: SessionStatus) {
        self.status = s;
        if s == SessionStatus::Idle {
            self.ch.clear_live_tail();
            self.approvals.clear();
        }
        self.ch.publish_server_event(&self.task_state());
    }

    fn request_approval(&mut self, call: OmniMessage) {
        let req = ApprovalRequest {
            origin: call.origin.clone(),
            tool_call: call,
            preview: None,
            always: None,
        };
        self.approvals.push(req.clone());
        self.ch
            .publish_server_event(&ServerEvent::ApprovalRequest(req));
    }

    fn decide(&mut self, id: &str) {
        self.approvals
            .retain(|a| a.tool_call.tool_call_id() != Some(id));
        self.emit(build::approval_decision(ApprovalDecision::Allow, id));
    }

    fn connect(&self) -> Client {
        let mut snapshot = vec![self.task_state()];
        snapshot.extend(
            self.approvals
                .iter()
                .cloned()
                .map(ServerEvent::ApprovalRequest),
        );
        Client {
            sub: self.ch.connect(None, move || snapshot),
            r: ClientReducer::new(),
        }
    }

    /// `live` is captured before the trace is read, as the server does.
    fn live(&self) -> Option<LiveTail> {
        (self.status != SessionStatus::Idle).then(|| self.ch.live_snapshot().into())
    }

    fn read_trace(&self) -> Vec<Value> {
        self.trace
            .iter()
            .enumerate()
            .map(|(i, line)| {
                let mut v: Value = serde_json::from_str(line).unwrap();
                v["tracePosition"] = json!({"fileIndex": 0, "ordinal": i});
                v
            })
            .collect()
    }

    fn history(&self) -> History {
        History {
            live: self.live(),
            messages: self.read_trace(),
        }
    }

    fn complete_messages(&self) -> Vec<OmniMessage> {
        self.trace
            .iter()
            .map(|l| OmniMessage::from_json(l).unwrap())
            .collect()
    }
}

struct Client {
    sub: Subscription,
    r: ClientReducer,
}

impl Client {
    fn pump(&mut self) {
        while let Some(ev) = self.sub.try_next() {
            self.r
                .on_event(Some(&ev.id.to_string()), ev.event, ev.data.as_str());
        }
    }
}

fn stream_text(sim: &mut Sim, origin: Option<&str>, parts: &[&str]) {
    let o = |m: OmniMessage| match origin {
        Some(hop) => m.with_origin(hop),
        None => m,
    };
    sim.emit(o(build::partial_text(Start, "", OK)));
    for p in parts {
        sim.emit(o(build::partial_text(Delta, *p, OK)));
    }
    sim.emit(o(build::partial_text(Stop, "", OK)));
    sim.emit(o(build::assistant_text(parts.concat(), OK)));
}

#[test]
fn a_mid_task_client_converges_to_the_from_start_client() {
    let mut sim = Sim::new();
    let mut a = sim.connect();
    a.pump();
    a.r.on_history(sim.history());
    assert!(a.r.is_live());

    sim.emit(build::user_text("list the files"));
    sim.set_state(SessionStatus::Running);
    sim.emit(build::request_begin());
    sim.emit(build::partial_thinking(Start, "", OK));
    sim.emit(build::partial_thinking(Delta, "The user wants ", OK));
    sim.emit(build::partial_thinking(Delta, "files.", OK));
    sim.emit(build::partial_thinking(Stop, "", OK));
    sim.emit(build::thinking("The user wants files.", OK, None));
    sim.emit(build::partial_text(Start, "", OK));
    sim.emit(build::partial_text(Delta, "Let me", OK));
    sim.emit(build::partial_text(Delta, " check", OK));
    // A subagent is streaming too; its fragment is open when B joins.
    sim.emit(build::partial_text(Start, "child ", OK).with_origin("kid"));
    sim.emit(build::partial_text(Delta, "says", OK).with_origin("kid"));

    // B opens its stream first ...
    let mut b = sim.connect();
    sim.emit(build::partial_text(Delta, " the", OK));
    b.pump();
    sim.emit(build::partial_text(Delta, " files.", OK));
    sim.emit(build::partial_text(Delta, " more", OK).with_origin("kid"));
    // ... then asks for history: the live cursor is taken here, and the text completes (into
    // the trace) before the trace is read.
    let live = sim.live();
    sim.emit(build::partial_text(Stop, "", OK));
    sim.emit(build::assistant_text("Let me check the files.", OK));
    let history = History {
        live,
        messages: sim.read_trace(),
    };
    sim.emit(build::partial_tool_call(Start, "bash", "", "c1", OK));
    // " files.", the child's " more" (both ≤ cursor, so already in the live tail) and the
    // completed text (in history) are still in flight when the history answer lands.
    b.r.on_history(history);
    assert!(b.r.is_live());
    b.pump();
    a.pump();
    assert_eq!(a.r.state(), b.r.state(), "right after B went live");
    assert_eq!(
        b.r.state().fragments.len(),
        2,
        "child text and tool call in flight"
    );

    sim.emit(build::partial_tool_call(
        Delta,
        "",
        r#"{"cmd":"ls"}"#,
        "c1",
        OK,
    ));
    sim.emit(build::partial_tool_call(Stop, "", "", "c1", OK));
    let call = build::tool_call("bash", r#"{"cmd":"ls"}"#, "c1", OK, None);
    sim.emit(call.clone());
    sim.request_approval(build::restamped(
        call,
        Timestamp::from_unix_millis(sim.clock),
    ));

    // C joins while the approval is pending: it learns of it from the snapshot only.
    let mut c = sim.connect();
    c.pump();
    c.r.on_history(sim.history());
    a.pump();
    b.pump();
    assert_eq!(a.r.state(), c.r.state(), "C right after joining");
    assert_eq!(a.r.state(), b.r.state());
    assert_eq!(c.r.state().approvals.len(), 1);

    sim.decide("c1");
    sim.emit(build::partial_tool_call_output(Start, "", "c1", OK));
    sim.emit(build::partial_tool_call_output(Delta, "a.txt\n", "c1", OK));
    sim.emit(build::partial_text(Delta, "!", OK).with_origin("kid"));
    sim.emit(build::partial_text(Stop, "", OK).with_origin("kid"));
    sim.emit(build::assistant_text("child says more!", OK).with_origin("kid"));
    sim.emit(build::partial_tool_call_output(Delta, "b.txt\n", "c1", OK));
    sim.emit(build::partial_tool_call_output(Stop, "", "c1", OK));
    sim.emit(build::tool_call_output("a.txt\nb.txt\n", "c1", OK));
    sim.emit(build::token_usage(
        TokenCounts::new(0, 10, 5),
        TokenCounts::new(0, 10, 5),
    ));
    sim.emit(build::request_end(OK, Default::default()));
    sim.emit(build::request_begin());
    stream_text(&mut sim, None, &["Two ", "files."]);
    sim.emit(build::request_end(OK, Default::default()));
    sim.set_state(SessionStatus::Idle);

    for cl in [&mut a, &mut b, &mut c] {
        cl.pump();
    }
    let end = a.r.state();
    assert_eq!(end, b.r.state());
    assert_eq!(end, c.r.state());
    assert!(end.fragments.is_empty());
    assert!(end.approvals.is_empty());
    assert_eq!(end.task_state.as_ref().unwrap().state, SessionStatus::Idle);
    // The rendered messages are the trace plus the subagent's message, in stream order.
    let mut rendered = end.messages.clone();
    let child_at = rendered.iter().position(OmniMessage::has_origin).unwrap();
    let child = rendered.remove(child_at);
    assert_eq!(child.origin, Some(vec!["kid".to_owned()]));
    assert_eq!(child.model().unwrap().content(), Some("child says more!"));
    assert_eq!(rendered[child_at].payload_type(), "tool_call_output");
    assert_eq!(rendered, sim.complete_messages());
    assert_eq!(a.r.ignored() + b.r.ignored() + c.r.ignored(), 0);
}

#[test]
fn a_duplicate_complete_drops_the_fragment_it_closes() {
    let mut sim = Sim::new();
    sim.set_state(SessionStatus::Running);
    sim.emit(build::partial_tool_call_output(
        Start,
        "partial out",
        "c7",
        OK,
    ));
    let mut b = sim.connect();
    let live = sim.live();
    // The complete output lands without a stop (an interrupted tool) and reaches the trace
    // before the history read.
    sim.emit(build::tool_call_output(
        "partial out",
        "c7",
        StopReason::Aborted,
    ));
    let history = History {
        live,
        messages: sim.read_trace(),
    };
    b.pump();
    b.r.on_history(history);
    let st = b.r.state();
    assert!(st.fragments.is_empty(), "{:?}", st.fragments);
    let outputs = st
        .messages
        .iter()
        .filter(|m| m.payload_type() == "tool_call_output")
        .count();
    assert_eq!(outputs, 1, "deduplicated against history");
}

#[test]
fn resync_required_rebuilds_from_fresh_history() {
    let mut sim = Sim::new();
    let mut a = sim.connect();
    a.pump();
    a.r.on_history(sim.history());
    sim.emit(build::user_text("hi"));
    a.pump();
    assert!(!a.r.state().needs_history);

    a.r.on_event(
        Some("00000000-9"),
        Some("server_event"),
        r#"{"type":"resync_required"}"#,
    );
    assert!(a.r.state().needs_history);
    // Events after the resync are buffered until history is in.
    a.r.on_event(
        Some("00000000-10"),
        Some("server_event"),
        &ServerEvent::TaskState(TaskState {
            state: SessionStatus::Running,
            queued: Some(0),
            pending_steering: None,
            pending_follow_ups: None,
        })
        .to_json(),
    );
    assert_eq!(
        a.r.state().task_state.as_ref().unwrap().state,
        SessionStatus::Idle
    );
    a.r.on_history(sim.history());
    let st = a.r.state();
    assert!(!st.needs_history);
    assert_eq!(st.task_state.unwrap().state, SessionStatus::Running);
    assert_eq!(st.messages, sim.complete_messages());
}

#[test]
fn approvals_are_keyed_by_origin_and_call_id_and_cleared_at_idle() {
    let mut r = ClientReducer::new();
    r.on_history(History {
        messages: Vec::new(),
        live: None,
    });
    let call = build::tool_call("bash", "{}", "same", OK, None);
    let parent = ServerEvent::ApprovalRequest(ApprovalRequest {
        tool_call: call.clone(),
        origin: None,
        preview: None,
        always: None,
    });
    let child = ServerEvent::ApprovalRequest(ApprovalRequest {
        tool_call: call.clone().with_origin("kid"),
        origin: Some(vec!["kid".into()]),
        preview: None,
        always: None,
    });
    for ev in [&parent, &child, &parent] {
        r.on_event(None, Some("server_event"), &ev.to_json());
    }
    let st = r.state();
    assert_eq!(
        st.approvals.len(),
        2,
        "same id, different origins; re-registration replaces"
    );
    assert_eq!(st.approvals[0].origin, vec!["kid".to_owned()]);
    assert_eq!(st.approvals[1].origin, Vec::<String>::new());

    let decision = build::approval_decision(ApprovalDecision::Allow, "same").with_origin("kid");
    r.on_event(None, None, &decision.to_json());
    assert_eq!(r.state().approvals.len(), 1);
    assert!(r.state().approvals[0].origin.is_empty());

    let idle = ServerEvent::TaskState(TaskState {
        state: SessionStatus::Idle,
        queued: Some(0),
        pending_steering: None,
        pending_follow_ups: None,
    });
    r.on_event(None, Some("server_event"), &idle.to_json());
    assert!(r.state().approvals.is_empty());
}

#[test]
fn a_live_tail_from_another_epoch_is_ignored() {
    let mut sim = Sim::new();
    sim.set_state(SessionStatus::Running);
    sim.emit(build::partial_text(Start, "stale", OK));
    let mut r = ClientReducer::new();
    r.on_event(
        Some("ffffffff-3"),
        Some("server_event"),
        &sim.task_state().to_json(),
    );
    r.on_history(sim.history());
    assert!(r.state().fragments.is_empty());
    // Without a live tail in use, an event at any seq is applied normally.
    r.on_event(
        Some(&sim.ch.last_event_id().to_string()),
        None,
        &build::partial_text(Delta, "x", OK).to_json(),
    );
    assert_eq!(r.state().fragments[0].content, "x");
}
