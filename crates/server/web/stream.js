// A session's stream, consumed with the connect-first + dedup pattern (protocol §5.9,
// docs/protocol.md#s5.9).
//
// `StreamReducer` follows the same rules as the Rust `ClientReducer`
// (crates/sse-transport/src/client.rs), so a page and `penguin watch` that saw the same session
// show the same messages. It tells a sink what changed, one operation at a time, so the page
// updates only what an event touches:
//   reset()                  history (re)loaded: everything that follows rebuilds the view
//   message(msg)             a complete message (or event) to show, in render order
//   dropped(msg)             a complete message already shown from history: only the in-flight
//                            fragment it closes must go
//   fragment(frag)           an in-flight fragment opened or grew
//   fragmentStopped(frag)    a fragment's stop arrived (its complete message follows)
//   taskState(ts), approvals(list), title(text), traceWarning(text), ready()

import { SocketSource } from "./socket.js";

export const DEDUP_WINDOW = 100;

const PARTIAL_KINDS = {
  partial_text: "text",
  partial_thinking: "thinking",
  partial_tool_call: "tool_call",
  partial_tool_call_output: "tool_call_output",
};

const CONTENT_FIELD = {
  text: "text",
  thinking: "thinking",
  tool_call: "arguments",
  tool_call_output: "output",
};

export function splitId(id) {
  if (typeof id !== "string") return null;
  const dash = id.lastIndexOf("-");
  if (dash <= 0) return null;
  const seq = id.slice(dash + 1);
  if (!/^\d+$/.test(seq)) return null;
  return { epoch: id.slice(0, dash), seq: Number(seq) };
}

export function originOf(msg) {
  return Array.isArray(msg.origin) ? msg.origin : [];
}

export function isPartial(msg) {
  return msg.type === "model_msg" && !!msg.payload && msg.payload.type in PARTIAL_KINDS;
}

function isRecordable(msg) {
  return originOf(msg).length === 0 && !isPartial(msg);
}

export function fragmentKey(origin, kind, toolCallId) {
  return `${origin.join("/")}\u0000${kind}::${toolCallId || ""}`;
}

// The fragment kind a complete message closes: user texts close nothing, since only the
// assistant streams `partial_text`.
export function closedKind(msg) {
  if (msg.type !== "model_msg" || !msg.payload) return null;
  const p = msg.payload;
  switch (p.type) {
    case "text":
      return p.role === "assistant" ? "text" : null;
    case "thinking":
    case "tool_call":
    case "tool_call_output":
      return p.type;
    default:
      return null;
  }
}

// The key of the fragment a complete message closes, or null.
export function closedKey(msg) {
  const kind = closedKind(msg);
  return kind ? fragmentKey(originOf(msg), kind, msg.payload.tool_call_id) : null;
}

// The JSON text a message is compared by: history and stream copies of one message are the
// same object written by one serializer, so parsing and re-stringifying both sides yields equal
// text (and ignores whitespace or escaping differences a transport might add).
// A history message's tracePosition, kept where the dedup key (the whole message as JSON) does
// not see it: the stream's copy of the same message has none. `msg.position` for the views.
function keepPosition(v) {
  const at = v.tracePosition;
  delete v.tracePosition;
  if (at) Object.defineProperty(v, "position", { value: at, enumerable: false });
}

function dedupKey(obj) {
  return JSON.stringify(obj);
}

export class StreamReducer {
  constructor(sink) {
    this.sink = sink;
    this.messages = [];
    // In opening order: a Map keeps insertion order, and a restart re-inserts at the end.
    this.fragments = new Map();
    this.taskState = null;
    this.approvals = [];
    this.title = null;
    this.traceWarning = null;
    this.live = false;
    this.buffer = [];
    this.lastEpoch = null;
    this.cursor = null;
    this.dedup = new Set();
    // History is a prefix of the recordable stream, so once a recordable complete message that
    // history lacks has been applied, no later one can be a duplicate: dedup stops there.
    this.dedupOpen = false;
    this.ignored = 0;
  }

  // One SSE event: its id (`lastEventId`), its event name (`message` or `server_event`), data.
  onEvent(id, event, data) {
    const epochSeq = splitId(id);
    if (epochSeq) this.lastEpoch = epochSeq.epoch;
    let parsed;
    try {
      const obj = JSON.parse(data);
      if (event === "server_event") parsed = { server: obj };
      else if (event === "message" || event == null) {
        parsed = obj && typeof obj === "object" && obj.type ? { msg: obj, key: dedupKey(obj) } : null;
      } else parsed = null;
    } catch {
      parsed = null;
    }
    if (parsed && parsed.server && parsed.server.type === "resync_required") {
      // Rebuild from fresh history; the connection stays, and what follows (the initial
      // snapshot first) is buffered until that history arrives.
      this.live = false;
      this.buffer = [];
      return "resync";
    }
    const ev = { epochSeq, parsed };
    if (!this.live) {
      this.buffer.push(ev);
    } else if (this.atOrBeforeCursor(ev)) {
      if (!isPartialEvent(ev)) this.apply(ev, true);
    } else {
      this.apply(ev, this.dedupOpen);
    }
    return null;
  }

  atOrBeforeCursor(ev) {
    return (
      !!this.cursor && !!ev.epochSeq && ev.epochSeq.epoch === this.cursor.epoch && ev.epochSeq.seq <= this.cursor.seq
    );
  }

  // The `/messages` answer: rebuilds the state from it and the buffered events, then goes live.
  onHistory(history) {
    this.messages = [];
    this.fragments.clear();
    this.taskState = null;
    this.approvals = [];
    this.dedup.clear();
    this.dedupOpen = true;
    this.sink.reset();
    const list = Array.isArray(history.messages) ? history.messages : [];
    const n = list.length;
    list.forEach((v, i) => {
      if (!v || typeof v !== "object" || !v.type) {
        this.ignored++;
        return;
      }
      keepPosition(v);
      if (i + DEDUP_WINDOW >= n) this.dedup.add(dedupKey(v));
      this.messages.push(v);
      this.sink.message(v);
    });

    const live = history.live || null;
    const cursor = live ? splitId(live.cursor) : null;
    const useLive = !!cursor && (this.lastEpoch === null || cursor.epoch === this.lastEpoch);
    const buffer = this.buffer;
    this.buffer = [];
    let ordered;
    if (useLive) {
      this.cursor = cursor;
      const covered = buffer.filter((ev) => this.atOrBeforeCursor(ev));
      const rest = buffer.filter((ev) => !this.atOrBeforeCursor(ev));
      const fragments = (live.fragments || []).map((m) => ({ epochSeq: null, parsed: { msg: m, key: dedupKey(m) } }));
      ordered = covered.filter((ev) => !isPartialEvent(ev)).concat(fragments, rest);
    } else {
      this.cursor = null;
      ordered = buffer;
    }
    for (const ev of ordered) this.apply(ev, true);
    this.live = true;
    this.sink.taskState(this.taskState);
    this.sink.approvals(this.approvals);
    this.sink.ready();
  }

  // Older history (a `before` page) goes in front of what is shown; the view is rebuilt.
  prepend(older) {
    const msgs = older.filter((v) => v && typeof v === "object" && v.type);
    for (const v of msgs) keepPosition(v);
    this.messages = msgs.concat(this.messages);
    this.sink.reset();
    for (const m of this.messages) this.sink.message(m);
    for (const f of this.fragments.values()) this.sink.fragment(f);
    this.sink.taskState(this.taskState);
    this.sink.approvals(this.approvals);
  }

  apply(ev, dedup) {
    const p = ev.parsed;
    if (!p) {
      this.ignored++;
      return;
    }
    if (p.server) {
      this.applyServerEvent(p.server);
      return;
    }
    const msg = p.msg;
    const payload = msg.payload || {};
    if (msg.type === "event_msg" && payload.type === "approval_decision") {
      const origin = originOf(msg).join("/");
      const before = this.approvals.length;
      this.approvals = this.approvals.filter(
        (a) => !(a.origin.join("/") === origin && a.toolCallId === payload.tool_call_id),
      );
      if (this.approvals.length !== before) this.sink.approvals(this.approvals);
    }
    // Partials feed the fragments; a complete message closes the one it finishes, even when
    // it is itself dropped as a duplicate of history.
    this.observe(msg);
    if (isPartial(msg)) return;
    const known = this.dedup.has(p.key);
    if (!known && isRecordable(msg)) this.dedupOpen = false;
    if (dedup && known) {
      this.sink.dropped(msg);
    } else {
      this.messages.push(msg);
      this.sink.message(msg);
    }
  }

  observe(msg) {
    if (msg.type !== "model_msg" || !msg.payload) return;
    const p = msg.payload;
    const kind = PARTIAL_KINDS[p.type];
    const origin = originOf(msg);
    if (!kind) {
      const key = closedKey(msg);
      if (key) this.fragments.delete(key);
      return;
    }
    const key = fragmentKey(origin, kind, p.tool_call_id);
    const open = this.fragments.get(key);
    if (p.event_type === "start" || (p.event_type === "delta" && !open)) {
      if (open) this.fragments.delete(key);
      const f = {
        key,
        kind,
        origin,
        toolCallId: p.tool_call_id || "",
        startedAt: msg.timestamp,
        name: "",
        content: "",
        images: [],
      };
      absorb(f, p);
      this.fragments.set(key, f);
      this.sink.fragment(f);
    } else if (p.event_type === "delta") {
      absorb(open, p);
      this.sink.fragment(open);
    } else if (p.event_type === "stop" && open) {
      this.fragments.delete(key);
      this.sink.fragmentStopped(open);
    }
  }

  applyServerEvent(ev) {
    switch (ev.type) {
      case "task_state":
        if (ev.state === "idle" && this.approvals.length) {
          this.approvals = [];
          this.sink.approvals(this.approvals);
        }
        this.taskState = ev;
        this.sink.taskState(ev);
        break;
      case "approval_request": {
        const call = ev.toolCall || {};
        const origin = Array.isArray(ev.origin) ? ev.origin : originOf(call);
        const toolCallId = (call.payload && call.payload.tool_call_id) || "";
        this.approvals = this.approvals.filter(
          (a) => !(a.origin.join("/") === origin.join("/") && a.toolCallId === toolCallId),
        );
        this.approvals.push({ origin, toolCallId, request: ev });
        this.sink.approvals(this.approvals);
        break;
      }
      case "session_title":
        this.title = ev.title;
        this.sink.title(ev.title);
        break;
      case "trace_write_failed":
        this.traceWarning = ev.message;
        this.sink.traceWarning(ev.message);
        break;
      case "goal_state":
        this.sink.goal?.(ev.goal);
        break;
      default:
        break;
    }
  }
}

function isPartialEvent(ev) {
  return !!(ev.parsed && ev.parsed.msg && isPartial(ev.parsed.msg));
}

// Folds one partial into a fragment: content appended, a non-empty name or image set replaces
// the stored one (as the server's live tail and `PartialAggregator` do).
function absorb(f, p) {
  const field = CONTENT_FIELD[f.kind];
  if (typeof p[field] === "string") f.content += p[field];
  if (f.kind === "tool_call" && p.name) f.name = p.name;
  if (f.kind === "tool_call_output" && Array.isArray(p.images) && p.images.length) f.images = p.images;
}

// One session's live connection: the event socket opened first, then history, then live.
//
// The SocketSource reconnects a dropped socket by itself and names the last id seen, so the
// server replays the gap (or answers `resync_required`, which reloads history). Only when it
// gives up (the route refused) is a fresh connection opened, with a fresh reducer and
// history, after a growing pause.
export class SessionStream {
  constructor({ url, loadHistory, sink, onStatus, onFatal }) {
    this.url = url;
    this.loadHistory = loadHistory;
    this.sink = sink;
    this.onStatus = onStatus;
    this.onFatal = onFatal;
    this.es = null;
    this.reducer = null;
    this.generation = 0;
    this.retryDelay = 1000;
    this.retryTimer = null;
    this.closed = false;
    this.page = null;
  }

  start() {
    this.closed = false;
    this.reducer = new StreamReducer(this.sink);
    const es = new SocketSource(this.url);
    this.es = es;
    this.onStatus("connecting");
    es.onopen = () => {
      if (es !== this.es) return;
      this.retryDelay = 1000;
      this.onStatus(this.reducer.live ? "live" : "loading");
    };
    es.onmessage = (e) => this.event(es, e.lastEventId, "message", e.data);
    es.addEventListener("server_event", (e) => this.event(es, e.lastEventId, "server_event", e.data));
    es.onerror = () => {
      if (es !== this.es || this.closed) return;
      if (es.readyState === SocketSource.CLOSED) {
        es.close();
        this.onStatus("offline");
        this.retryTimer = setTimeout(() => this.restart(), this.retryDelay);
        this.retryDelay = Math.min(this.retryDelay * 2, 15000);
      } else {
        this.onStatus("reconnecting");
      }
    };
    this.fetchHistory();
  }

  event(es, id, name, data) {
    if (es !== this.es) return;
    if (this.reducer.onEvent(id, name, data) === "resync") {
      this.onStatus("resyncing");
      this.fetchHistory();
    }
  }

  async fetchHistory() {
    const generation = ++this.generation;
    for (let delay = 500; ; delay = Math.min(delay * 2, 8000)) {
      let h;
      try {
        h = await this.loadHistory();
      } catch (err) {
        if (generation !== this.generation || this.closed) return;
        if (err && (err.status === 401 || err.status === 404)) {
          this.onFatal(err);
          return;
        }
        this.onStatus("offline");
        await new Promise((r) => setTimeout(r, delay));
        if (generation !== this.generation || this.closed) return;
        continue;
      }
      if (generation !== this.generation || this.closed) return;
      this.page = h.page || null;
      this.reducer.onHistory(h);
      this.onStatus(this.es && this.es.readyState === SocketSource.OPEN ? "live" : "reconnecting");
      return;
    }
  }

  restart() {
    if (this.closed) return;
    if (this.es) this.es.close();
    this.start();
  }

  close() {
    this.closed = true;
    clearTimeout(this.retryTimer);
    if (this.es) this.es.close();
    this.es = null;
    this.generation++;
  }
}
