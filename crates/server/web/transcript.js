// The transcript of one session: the sink a StreamReducer drives.
//
// Layout rules that follow from the protocol's ordering rules (docs/protocol.md, §0.6 and §0.7):
// - Tool outputs arrive in completion order, not call order, and fragments of different tools
//   interleave: every output is hung on its call's card by (origin, tool_call_id), never placed
//   by arrival.
// - Messages with an `origin` belong to a subagent: they go into a nested run inside the card of
//   the `run_subagent` call that started it, one level per origin hop.
// - Every element made from a complete message carries `data-fp` (type, payload type, id,
//   timestamp, origin), so the page can be compared with the trace one message at a time.

import { dollars, requestCost } from "./format.js";
import { renderMarkdown } from "./markdown.js";
import { closedKey, fragmentKey, originOf } from "./stream.js";
import { argsLine, planView, renderDiffs } from "./toolview.js";

export function fingerprint(msg) {
  const p = msg.payload || {};
  const kind = msg.type === "session_meta" ? "session_meta" : p.type;
  return [msg.type, kind, p.tool_call_id || "", msg.timestamp || "", originOf(msg).join("/")].join("|");
}

function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function mark(el, msg) {
  el.dataset.fp = fingerprint(msg);
  return el;
}

// A message that needs no visible element of its own still gets one, hidden, so every complete
// message has exactly one element (what the exactly-once check counts).
function hiddenMark(msg) {
  const e = mark(h("i", "fp"), msg);
  e.hidden = true;
  return e;
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function formatCount(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : "?";
}

// A text that is one marker block (`[tag]…[/tag]`), possibly followed by a body.
const MARKER = /^\s*\[([a-z_]+)\]\n?([\s\S]*?)\n?\[\/\1\]([\s\S]*)$/;

export function parseMarker(text) {
  const m = typeof text === "string" ? text.match(MARKER) : null;
  return m ? { tag: m[1], inner: m[2], rest: m[3].trim() } : null;
}

// `extractSummary` of the reference, for display: the first non-empty [summary] block, else the
// text without summary tags.
function summaryOf(text) {
  const strip = (s) => s.replace(/\[\/?summary\]|<\/?summary>/g, "").trim();
  for (const re of [/\[summary\]([\s\S]*?)\[\/summary\]/g, /<summary>([\s\S]*?)<\/summary>/g]) {
    for (const m of text.matchAll(re)) {
      const s = strip(m[1]);
      if (s) return s;
    }
  }
  return strip(text.replace(/\[summary\][\s\S]*?\[\/summary\]|<summary>[\s\S]*?<\/summary>/g, ""));
}

// Markdown is re-rendered at most once per tick while text streams in.
const dirty = new Map();
let flushScheduled = false;
function renderLater(el, text) {
  dirty.set(el, text);
  if (!flushScheduled) {
    flushScheduled = true;
    setTimeout(() => {
      flushScheduled = false;
      for (const [e, t] of dirty) e.innerHTML = renderMarkdown(t);
      dirty.clear();
    }, 16);
  }
}
function renderNow(el, text) {
  dirty.delete(el);
  el.innerHTML = renderMarkdown(text);
}

class ToolCard {
  constructor(transcript, scope, id) {
    this.t = transcript;
    this.scope = scope;
    this.id = id;
    this.name = "";
    this.call = null;
    this.liveArgs = null;
    this.decision = null;
    this.output = null;
    this.liveOutput = null;
    this.liveImages = [];
    this.pending = false;
    this.childScope = null;
    this.prompt = null;

    const el = h("div", "card tool");
    el.dataset.callId = id;
    if (scope.origin.length) el.dataset.origin = scope.origin.join("/");
    const head = h("div", "card-head");
    this.nameEl = h("span", "tool-name", "tool call");
    // The id is for the curious (a tooltip), not a line under every step.
    this.idEl = h("span", "call-id");
    this.idEl.title = id;
    this.statusEl = h("span", "status");
    head.append(this.nameEl, this.idEl, this.statusEl);
    this.argsEl = h("pre", "args");
    this.promptEl = h("div", "prompt md");
    this.promptEl.hidden = true;
    this.approvalEl = h("div", "approval");
    this.approvalEl.hidden = true;
    const ask = h("span", "ask", "Run this call?");
    const allow = h("button", "allow", "Allow");
    allow.dataset.action = "allow";
    const deny = h("button", "deny", "Deny");
    deny.dataset.action = "deny";
    // Shown only for a command of a sandboxed session (see setPending).
    this.unsandboxedBtn = h("button", "allow_unsandboxed", "Allow unsandboxed");
    this.unsandboxedBtn.dataset.action = "allow_unsandboxed";
    this.unsandboxedBtn.title = "Run this command once outside the session's sandbox";
    const buttons = [allow, this.unsandboxedBtn, deny];
    for (const b of buttons) {
      b.addEventListener("click", () => this.t.actions.decide(this.id, b.dataset.action, buttons));
    }
    this.approvalEl.append(ask, allow, this.unsandboxedBtn, deny);
    this.decisionEl = h("div", "decision");
    this.decisionEl.hidden = true;
    this.childrenEl = h("div", "children");
    this.outputWrap = h("div", "output");
    this.outputWrap.hidden = true;
    this.outputEl = h("pre", "output-text");
    this.imagesEl = h("div", "output-images");
    this.outputWrap.append(this.outputEl, this.imagesEl);
    el.append(head, this.promptEl, this.argsEl, this.approvalEl, this.decisionEl, this.childrenEl, this.outputWrap);
    this.el = el;
    this.refresh();
  }

  setLiveArgs(name, args) {
    if (name) this.name = name;
    this.liveArgs = args;
    this.showArgs(args);
    this.refresh();
  }

  setCall(msg) {
    this.call = msg;
    this.liveArgs = null;
    mark(this.el, msg);
    const p = msg.payload;
    if (p.name) this.name = p.name;
    this.showArgs(p.arguments || "");
    this.refresh();
  }

  showArgs(args) {
    if (this.name === "run_subagent") {
      let prompt = null;
      try {
        prompt = JSON.parse(args).prompt;
      } catch {
        prompt = null;
      }
      if (typeof prompt === "string") {
        this.prompt = prompt;
        this.promptEl.hidden = false;
        this.argsEl.hidden = true;
        renderLater(this.promptEl, prompt);
        return;
      }
    }
    this.argsEl.hidden = args === "";
    this.argsEl.classList.remove("command");
    this.planEl?.remove();
    this.planEl = null;
    if (this.name === "update_plan") {
      const plan = planView(args);
      if (plan) {
        this.planEl = plan;
        this.argsEl.hidden = true;
        this.argsEl.after(plan);
        return;
      }
    }
    const line = argsLine(this.name, args);
    if (line !== null) {
      this.argsEl.textContent = line;
      this.argsEl.classList.add("command");
      this.argsEl.title = prettyJson(args);
      return;
    }
    this.argsEl.textContent = prettyJson(args);
  }

  setDecision(msg) {
    const p = msg.payload;
    this.decision = p.decision;
    this.decisionEl.replaceChildren();
    // A denial is already the card's status: the decision line says only what the status
    // does not (allowed, forbidden by policy), and who decided when it was a hook, with its
    // reason (the model read the same) and the arguments it ran the call with.
    let label = { allow: "allowed", deny: "", forbidden: "forbidden by policy" }[this.decision] ?? this.decision;
    if (p.decided_by) {
      const verb = { allow: "allowed", deny: "denied", forbidden: "forbidden" }[this.decision] ?? this.decision;
      label = `${verb} by ${p.decided_by}${p.reason ? `: ${p.reason}` : ""}`;
    }
    if (p.updated_arguments) label += ` · run as ${p.updated_arguments}`;
    const line = mark(h("span", `decision-${this.decision}`, label), msg);
    this.decisionEl.append(line);
    this.decisionEl.hidden = label === "";
    this.refresh();
  }

  setLiveOutput(content, images) {
    this.liveOutput = content;
    this.liveImages = images || [];
    if (!this.output) this.showOutput(content, this.liveImages);
    this.refresh();
  }

  clearLiveOutput() {
    this.liveOutput = null;
    if (this.output) this.showOutput(this.output.payload.output || "", this.output.payload.images || []);
    this.refresh();
  }

  setOutput(msg) {
    this.output = msg;
    this.liveOutput = null;
    mark(this.outputEl, msg);
    this.showOutput(msg.payload.output || "", msg.payload.images || []);
    this.refresh();
  }

  showOutput(text, images) {
    // A plan's answer repeats the checklist the card already shows.
    this.outputWrap.hidden = this.name === "update_plan" && !!this.planEl && !images.length;
    if (this.outputWrap.hidden) return;
    this.outputEl.classList.remove("has-diff");
    if (!renderDiffs(this.outputEl, text)) this.outputEl.textContent = text;
    this.outputEl.classList.toggle("empty", text === "");
    this.imagesEl.replaceChildren(
      ...images.filter((u) => typeof u === "string").map((u) => {
        const img = h("img");
        img.src = u;
        img.alt = "tool output image";
        return img;
      }),
    );
  }

  setPending(pending) {
    this.pending = pending;
    this.approvalEl.hidden = !pending;
    if (pending) for (const b of this.approvalEl.querySelectorAll("button")) b.disabled = false;
    this.unsandboxedBtn.hidden = !(pending && this.t.actions.canRunUnsandboxed?.(this.name));
    this.refresh();
  }

  status() {
    const idle = this.t.idle();
    if (this.output) {
      const s = this.output.payload.stop_reason || "completed";
      if (s === "completed") return ["done", "done"];
      if (this.decision === "deny" || this.decision === "forbidden") return ["denied", "denied"];
      return [s, "failed"];
    }
    if (this.decision === "deny" || this.decision === "forbidden") return ["denied", "denied"];
    if (this.pending) return ["awaiting approval", "waiting"];
    if (this.call && (this.call.payload.stop_reason || "completed") !== "completed") return ["interrupted", "failed"];
    if (idle && (this.call || this.liveArgs !== null)) return [this.decision === "allow" ? "no output" : "not run", "failed"];
    if (this.liveOutput !== null || this.decision === "allow") return ["running", "running"];
    if (this.call) return ["pending", "waiting"];
    return ["writing", "running"];
  }

  refresh() {
    this.nameEl.textContent = this.name || "tool call";
    const [text, cls] = this.status();
    this.statusEl.textContent = text;
    this.statusEl.className = `status ${cls}`;
    this.el.dataset.status = text;
  }
}

class Scope {
  constructor(transcript, origin, container, parent) {
    this.t = transcript;
    this.origin = origin;
    this.key = origin.join("/");
    this.el = container;
    this.parent = parent;
    this.cards = new Map();
    this.cardOrder = [];
    this.live = new Map();
    this.compaction = null;
    this.lastCompaction = null;
    this.seenMeta = false;
    this.host = null;
    this.box = null;
    this.headEl = null;
    // The task's token line: one per task, the newest request's (an earlier one is hidden).
    this.usageEl = null;
  }

  append(el) {
    this.el.append(el);
    return el;
  }

  // A new token line: the task's earlier one, if any, steps back.
  usageLine(el) {
    if (this.usageEl) this.usageEl.hidden = true;
    this.usageEl = el;
    return this.append(el);
  }

  // The card of a call. `fresh` is set by what starts a call (its first fragment or the complete
  // call): a finished card with the same id then belongs to an earlier call, and a new card
  // starts.
  card(id, fresh = false) {
    let c = this.cards.get(id);
    if (!c || (fresh && c.output)) {
      c = new ToolCard(this.t, this, id);
      this.cards.set(id, c);
      this.cardOrder.push(c);
      this.append(c.el);
    }
    return c;
  }

  // The oldest `run_subagent` call here that no child run is attached to yet.
  unclaimedSubagentCall(prompt) {
    const free = this.cardOrder.filter((c) => c.name === "run_subagent" && !c.childScope);
    if (prompt !== undefined) return free.find((c) => c.prompt === prompt) || null;
    return free.find((c) => c.decision === "allow") || free[0] || null;
  }
}

export class Transcript {
  // actions: { decide(callId, decision, buttons), retryNow(button), canRunUnsandboxed(toolName),
  //   rewind({at, to}) }
  constructor(root, actions) {
    this.root = root;
    this.actions = actions;
    this.runState = null;
    this.retry = null;
    this.reset();
    this.timer = setInterval(() => this.tick(), 250);
  }

  destroy() {
    clearInterval(this.timer);
  }

  idle() {
    return !!this.runState && this.runState.state === "idle";
  }

  // --- sink operations -------------------------------------------------------------------

  reset() {
    this.root.replaceChildren();
    this.scopes = new Map();
    this.main = new Scope(this, [], this.root, null);
    this.scopes.set("", this.main);
    this.approvalList = [];
    this.retry = null;
  }

  ready() {
    this.refreshCards();
  }

  title() {}

  taskState(ts) {
    if (!ts) return;
    this.runState = ts;
    if (ts.state === "idle") this.endRetry(null);
    this.refreshCards();
  }

  approvals(list) {
    this.approvalList = list;
    const pending = new Set(list.map((a) => `${a.origin.join("/")}\u0000${a.toolCallId}`));
    for (const scope of this.scopes.values()) {
      for (const c of scope.cards.values()) c.setPending(pending.has(`${scope.key}\u0000${c.id}`));
    }
    for (const a of list) {
      const scope = this.scope(a.origin);
      const known = scope.cards.get(a.toolCallId);
      if (known) continue;
      // The call itself is outside the loaded history (or not shown yet): show it from the
      // request, so it can still be answered where it belongs.
      const card = scope.card(a.toolCallId);
      const call = a.request.toolCall;
      if (call && call.payload) card.setLiveArgs(call.payload.name, call.payload.arguments || "");
      card.setPending(true);
    }
  }

  fragment(f) {
    const scope = this.scope(f.origin);
    if (scope.compaction && f.kind === "text") {
      scope.compaction.liveSummary(f.content);
      return;
    }
    switch (f.kind) {
      case "text":
      case "thinking": {
        let live = scope.live.get(f.key);
        if (!live) {
          live = f.kind === "text" ? this.textBlock(scope) : this.thinkingBlock(scope, true);
          live.el.classList.add("streaming");
          scope.live.set(f.key, live);
        }
        renderLater(live.body, f.content);
        break;
      }
      case "tool_call":
        scope.card(f.toolCallId, true).setLiveArgs(f.name, f.content);
        break;
      case "tool_call_output":
        scope.card(f.toolCallId).setLiveOutput(f.content, f.images);
        break;
    }
  }

  fragmentStopped(f) {
    const live = this.scope(f.origin).live.get(f.key);
    if (live) live.el.classList.remove("streaming");
  }

  dropped(msg) {
    const scope = this.scope(originOf(msg));
    const key = closedKey(msg);
    if (!key) return;
    const live = scope.live.get(key);
    if (live) {
      live.el.remove();
      scope.live.delete(key);
    }
    const p = msg.payload;
    if (p.type === "tool_call_output") scope.cards.get(p.tool_call_id)?.clearLiveOutput();
    if (p.type === "tool_call") {
      const c = scope.cards.get(p.tool_call_id);
      if (c && !c.call) {
        // Shown from history under its own card already, if at all; this one only streamed.
        c.liveArgs = null;
        c.refresh();
      }
    }
  }

  message(msg) {
    const scope = this.scope(originOf(msg));
    const p = msg.payload || {};
    if (msg.type === "session_meta") {
      this.sessionMeta(scope, msg);
      return;
    }
    if (scope.compaction) {
      scope.compaction.absorb(msg);
      if (p.type === "compaction_end") {
        scope.lastCompaction = scope.compaction;
        scope.compaction = null;
      }
      return;
    }
    if (msg.type === "model_msg") this.modelMessage(scope, msg, p);
    else if (msg.type === "event_msg") this.eventMessage(scope, msg, p);
    else scope.append(this.genericLine(msg, msg.type));
  }

  // --- messages ----------------------------------------------------------------------------

  modelMessage(scope, msg, p) {
    switch (p.type) {
      case "text":
        if (p.role === "assistant") {
          const key = fragmentKey(scope.origin, "text", "");
          let block = scope.live.get(key);
          scope.live.delete(key);
          if (!block) block = this.textBlock(scope);
          block.el.classList.remove("streaming");
          mark(block.el, msg);
          renderNow(block.body, p.text || "");
        } else {
          this.userText(scope, msg, p);
        }
        break;
      case "thinking": {
        const key = fragmentKey(scope.origin, "thinking", "");
        let block = scope.live.get(key);
        scope.live.delete(key);
        if (!block) block = this.thinkingBlock(scope, false);
        block.el.classList.remove("streaming");
        // Open while it streams, folded once complete, unless the reader chose otherwise.
        if (!block.el.dataset.touched) block.el.open = false;
        mark(block.el, msg);
        renderNow(block.body, p.thinking || "");
        break;
      }
      case "tool_call": {
        const c = scope.cards.get(p.tool_call_id || "");
        // The card its fragments built, unless that one is finished (then this is a new call).
        scope.card(p.tool_call_id || "", !!(c && c.call)).setCall(msg);
        break;
      }
      case "tool_call_output":
        scope.card(p.tool_call_id || "").setOutput(msg);
        break;
      case "image_url": {
        const e = mark(h("div", "msg user image"), msg);
        const img = h("img");
        img.src = p.image_url;
        img.alt = "image";
        e.append(img);
        scope.append(e);
        break;
      }
      case "inline_data":
      case "inline_thinking": {
        const e = mark(h("div", "line muted", `[${p.type}: ${p.mime_type || "binary"}]`), msg);
        scope.append(e);
        break;
      }
      default:
        scope.append(this.genericLine(msg, p.type));
    }
  }

  userText(scope, msg, p) {
    const text = p.text || "";
    const marker = parseMarker(text);
    if (marker) {
      this.markerText(scope, msg, marker);
      return;
    }
    if (p.sender === "parent_agent") {
      this.rehome(scope, text);
      const e = mark(h("div", "msg task-from-parent"), msg);
      e.append(h("div", "who", "task from the parent agent"), h("div", "body plain", text));
      scope.append(e);
      return;
    }
    // A new task: its token line starts afresh.
    scope.usageEl = null;
    const e = mark(h("div", "msg user"), msg);
    const who = p.sender && p.sender !== "user" ? p.sender : "you";
    e.append(h("div", "who", who), h("div", "body plain", text));
    // A person's task in the session itself can be rewound to: the files and the conversation
    // as before it.
    if (scope === this.main && who === "you" && this.actions.rewind) {
      scope.tasks = (scope.tasks || 0) + 1;
      const at = msg.position || null;
      const to = scope.tasks;
      const b = h("button", "quiet rewind-here", "Rewind to here");
      b.dataset.action = "rewind-here";
      b.title = "Put the files and the conversation back as they were before this task";
      b.addEventListener("click", () => this.actions.rewind({ at, to }));
      e.append(b);
      // From the second task on there is a conversation before it to go on from.
      if (to > 1 && this.actions.forkBefore) {
        const f = h("button", "quiet fork-here", "Fork from here");
        f.dataset.action = "fork-here";
        f.title = "A new session holding the conversation before this task (the files untouched), to ask it differently";
        f.addEventListener("click", () => this.actions.forkBefore({ at, to }));
        e.append(f);
      }
    }
    scope.append(e);
  }

  markerText(scope, msg, { tag, inner, rest }) {
    if (tag === "user_steering") {
      const e = mark(h("div", "msg user steering"), msg);
      e.append(h("div", "who", "steering"), h("div", "body plain", inner));
      scope.append(e);
      return;
    }
    if (tag === "context_summary" && scope.lastCompaction) {
      // The compaction card above already shows this summary: one event, not two.
      scope.lastCompaction.attachSummaryText(msg, inner);
      return;
    }
    const d = mark(h("details", `notice marker-${tag}`), msg);
    const summary = h("summary");
    let title;
    switch (tag) {
      case "background_task_done": {
        const field = (k) => (inner.match(new RegExp(`^${k}: (.*)$`, "m")) || [])[1];
        const parts = [field("kind"), field("id"), field("status")].filter(Boolean);
        title = `background task finished${parts.length ? `: ${parts.join(" · ")}` : ""}`;
        break;
      }
      case "context_summary":
        title = "context summary";
        break;
      case "turn_aborted":
        title = "interrupted turn, carried over";
        break;
      case "turn_retried":
        title = "retried turn, carried over";
        break;
      case "goal": {
        const round = (inner.match(/^round: (\d+)/m) || [])[1];
        title = round ? `goal, round ${round}` : "goal";
        break;
      }
      default:
        title = tag.replace(/_/g, " ");
    }
    summary.textContent = title;
    const body = h("div", "md");
    body.innerHTML = renderMarkdown(rest ? `${inner}\n\n${rest}` : inner);
    d.append(summary, body);
    scope.append(d);
  }

  eventMessage(scope, msg, p) {
    switch (p.type) {
      case "approval_decision":
        scope.card(p.tool_call_id || "").setDecision(msg);
        break;
      case "request_begin":
        if (scope === this.main) this.endRetry("retried");
        scope.append(hiddenMark(msg));
        break;
      case "request_end":
        // An interrupted request is told by the abort that follows; only failures show here.
        if (p.status === "completed" || p.status === "aborted") scope.append(hiddenMark(msg));
        else scope.append(this.failedRequest(scope, msg, p));
        break;
      case "token_usage": {
        const r = p.request || {};
        const e = mark(h("div", "usage"), msg);
        e.textContent = `${formatCount(r.total)} tokens in context · ${formatCount(r.output)} out`;
        scope.usageLine(e);
        // The main session's requests are priced at its model (a subagent's at its own,
        // which the page does not know).
        if (scope === this.main)
          this.actions.price?.().then(
            ({ price, model }) => (e.textContent += price ? ` · ${dollars(requestCost(price, r))}` : ` · no price for model ${model}`),
            () => {},
          );
        break;
      }
      case "abort": {
        if (scope === this.main) this.endRetry(null);
        const e = mark(h("div", "line abort"), msg);
        e.textContent = `stopped: ${p.reason || "aborted"}`;
        // A run that gave up on its model ends "failed after N attempts: <cause>", not with
        // the raw error chain.
        const failure = scope === this.main ? this.lastFailure : null;
        if (failure && !/^aborted/.test(p.reason || "aborted")) {
          e.classList.add("failed");
          this.actions.explain?.(failure).then(
            (x) => {
              if (x.ended) e.textContent = `✗ ${x.ended}`;
            },
            () => {},
          );
        }
        if (scope === this.main) this.lastFailure = null;
        scope.append(e);
        break;
      }
      case "compaction_begin": {
        const card = new CompactionCard(msg, p);
        scope.compaction = card;
        scope.append(card.el);
        break;
      }
      case "compaction_end":
        scope.append(this.genericLine(msg, "compaction ended"));
        break;
      case "subagent": {
        const e = mark(h("div", "line muted"), msg);
        e.textContent = `subagent run ${p.session_id} (its trace is not available)`;
        scope.append(e);
        break;
      }
      case "tool_list_ready": {
        const tools = Array.isArray(p.tools) ? p.tools : [];
        const d = mark(h("details", "notice tools"), msg);
        d.append(h("summary", "", `${tools.length} tools ready`));
        // Their names; what each does is its tooltip, not a wall of text.
        const names = h("p", "tool-names");
        tools.forEach((t, i) => {
          const c = h("code", "", t.name || "?");
          c.title = t.description || "";
          names.append(...(i ? [document.createTextNode(" "), c] : [c]));
        });
        d.append(names);
        scope.append(d);
        break;
      }
      case "mcp_connect_end": {
        const results = Array.isArray(p.results) ? p.results : [];
        scope.append(this.genericLine(msg, `MCP servers connected: ${p.status} (${results.length})`));
        break;
      }
      case "mcp_connect_begin": {
        const names = Array.isArray(p.servers) ? p.servers.map((s) => (s && s.name) || s).filter(Boolean) : [];
        scope.append(this.genericLine(msg, names.length ? `connecting MCP servers: ${names.join(", ")}` : "connecting MCP servers"));
        break;
      }
      case "goal_finished":
        scope.append(this.genericLine(msg, `goal ${String(p.outcome || p.status || "finished").replace(/_/g, " ")}${p.rounds ? ` after ${p.rounds} round${p.rounds === 1 ? "" : "s"}` : ""}`));
        break;
      default:
        scope.append(this.genericLine(msg, (p.type || "event").replace(/_/g, " ")));
    }
  }

  failedRequest(scope, msg, p) {
    const e = mark(h("div", "line request-failed"), msg);
    const what = h("span", "what");
    const attempt = p.attempt ? ` (attempt ${p.attempt})` : "";
    what.textContent = `model request ${p.status}` + (p.error_message ? `: ${p.error_message}` : "") + attempt;
    e.append(what);
    if (scope === this.main) this.lastFailure = { status: p.status, errorMessage: p.error_message || null, attempt: p.attempt || 1 };
    // The server words it as the CLI does (one classification); the raw text stays until then
    // and as the element's title.
    what.title = what.textContent;
    const hint = h("div", "hint");
    hint.hidden = true;
    e.append(hint);
    this.actions.explain?.({ status: p.status, errorMessage: p.error_message || null }).then(
      (x) => {
        what.textContent = `request failed${attempt}: ${x.cause}`;
        if (x.hint) {
          hint.textContent = x.hint;
          hint.hidden = false;
        }
      },
      () => {},
    );
    if (scope === this.main && typeof p.retry_in_ms === "number") {
      const count = h("span", "countdown");
      const btn = h("button", "retry-now", "Retry now");
      btn.dataset.action = "retry-now";
      btn.addEventListener("click", () => this.actions.retryNow(btn));
      e.append(count, btn);
      // The wait started when the server stamped the message; a clock ahead of ours must not
      // make the wait look longer than the server's.
      const stamped = Date.parse(msg.timestamp);
      const now = Date.now();
      const deadline = Math.min(Number.isNaN(stamped) ? now : stamped, now) + p.retry_in_ms;
      this.endRetry(null);
      this.retry = { el: e, count, btn, deadline };
      this.tick();
    }
    return e;
  }

  endRetry(outcome) {
    if (!this.retry) return;
    const r = this.retry;
    this.retry = null;
    r.btn.remove();
    r.count.textContent = outcome ? ` · ${outcome}` : "";
    r.el.classList.add("settled");
  }

  tick() {
    if (!this.retry) return;
    if (this.idle()) {
      this.endRetry(null);
      return;
    }
    const left = Math.max(0, this.retry.deadline - Date.now());
    this.retry.count.textContent = left > 0 ? ` · retrying in ${Math.ceil(left / 1000)}s` : " · retrying…";
    this.retry.el.dataset.retryInMs = String(left);
  }

  sessionMeta(scope, msg) {
    const p = msg.payload || {};
    if (scope !== this.main) {
      scope.headEl.textContent = `subagent · ${[p.provider, p.model_id].filter(Boolean).join(" / ")}`;
      scope.headEl.title = p.session_id || "";
      mark(scope.box, msg);
      return;
    }
    const e = mark(h("div", "divider"), msg);
    e.textContent = scope.seenMeta
      ? "new context"
      : `session started · ${[p.provider, p.model_id].filter(Boolean).join(" / ")}`;
    scope.seenMeta = true;
    scope.append(e);
  }

  genericLine(msg, title) {
    const d = mark(h("details", "notice event"), msg);
    d.append(h("summary", "", title));
    const pre = h("pre");
    pre.textContent = JSON.stringify(msg.payload ?? msg, null, 2);
    d.append(pre);
    return d;
  }

  textBlock(scope) {
    const el = h("div", "msg assistant");
    const body = h("div", "body md");
    el.append(body);
    scope.append(el);
    return { el, body };
  }

  thinkingBlock(scope, open) {
    const el = h("details", "msg thinking");
    el.open = open;
    const summary = h("summary", "", "thinking");
    summary.addEventListener("click", () => (el.dataset.touched = "true"));
    el.append(summary);
    const body = h("div", "body md");
    el.append(body);
    scope.append(el);
    return { el, body };
  }

  // --- scopes (subagent nesting) -------------------------------------------------------------

  scope(origin) {
    const key = origin.join("/");
    let s = this.scopes.get(key);
    if (s) return s;
    const parent = this.scope(origin.slice(0, -1));
    const box = h("div", "subagent-run");
    box.dataset.session = origin[origin.length - 1];
    const head = h("div", "subagent-head", "subagent");
    const body = h("div", "subagent-body");
    box.append(head, body);
    s = new Scope(this, origin, body, parent);
    s.box = box;
    s.headEl = head;
    this.scopes.set(key, s);
    const host = parent.unclaimedSubagentCall();
    if (host) {
      this.attach(s, host);
    } else {
      // No call to hang it on (outside the loaded history): it stands on its own.
      parent.append(box);
    }
    return s;
  }

  attach(scope, card) {
    if (scope.host) scope.host.childScope = null;
    scope.host = card;
    card.childScope = scope;
    card.childrenEl.append(scope.box);
  }

  // The child's prompt names its call for sure: concurrent subagents may have been attached by
  // order, which their prompts correct.
  rehome(scope, prompt) {
    if (!scope.parent || (scope.host && scope.host.prompt === prompt)) return;
    const card = scope.parent.unclaimedSubagentCall(prompt);
    if (card) this.attach(scope, card);
  }

  refreshCards() {
    for (const scope of this.scopes.values()) for (const c of scope.cards.values()) c.refresh();
  }
}

class CompactionCard {
  constructor(msg, p) {
    this.el = mark(h("div", "card compaction"), msg);
    const head = h("div", "card-head");
    head.append(h("span", "tool-name", "context compaction"));
    const detail = [p.reason, p.mode].filter(Boolean).join(", ");
    this.info = h("span", "call-id", `${detail}${typeof p.context === "number" ? ` · ${formatCount(p.context)} tokens` : ""}`);
    this.statusEl = h("span", "status running", "compacting");
    head.append(this.info, this.statusEl);
    this.summaryEl = h("details", "summary");
    this.summaryEl.open = true;
    this.summaryEl.append(h("summary", "", "summary"));
    this.summaryBody = h("div", "md");
    this.summaryEl.append(this.summaryBody);
    this.summaryEl.hidden = true;
    this.el.append(head, this.summaryEl);
    this.el.dataset.status = "compacting";
  }

  liveSummary(text) {
    this.summaryEl.hidden = false;
    renderLater(this.summaryBody, summaryOf(text));
  }

  absorb(msg) {
    const p = msg.payload || {};
    // Everything of the compaction request stays in this card; only its summary is shown.
    this.el.append(hiddenMark(msg));
    if (msg.type === "model_msg" && p.type === "text" && p.role === "assistant") {
      const s = summaryOf(p.text || "");
      if (s) {
        this.summaryEl.hidden = false;
        renderNow(this.summaryBody, s);
      }
    } else if (msg.type === "event_msg" && p.type === "compaction_end") {
      const ok = p.status === "completed";
      this.statusEl.textContent = ok ? "compacted" : `${p.status}${p.error_message ? `: ${p.error_message}` : ""}`;
      this.statusEl.className = `status ${ok ? "done" : "failed"}`;
      this.el.dataset.status = p.status;
    } else if (msg.type === "event_msg" && p.type === "token_usage") {
      const r = p.request || {};
      this.info.textContent += ` → summary of ${formatCount(r.output)} tokens`;
    }
  }

  attachSummaryText(msg, inner) {
    this.el.append(hiddenMark(msg));
    if (this.summaryEl.hidden && inner.trim()) {
      this.summaryEl.hidden = false;
      renderNow(this.summaryBody, inner);
    }
  }
}
