// Pending approvals of a session, its subagents' included (with their origin), always in view
// above the composer, and the one way the view answers one.

import * as api from "./api.js";
import { h, toast } from "./dom.js";

// Answers `callId` with `decision`; `buttons` stay disabled unless the answer failed.
export function decider(id) {
  return async (callId, decision, buttons) => {
    for (const b of buttons) b.disabled = true;
    try {
      await api.sessions.decide(id, callId, decision);
    } catch (err) {
      for (const b of buttons) b.disabled = false;
      toast(err.message);
    }
  };
}

// Whether the session's tools offer a run outside the sandbox for calls of tool `name`.
export function unsandboxable(ctx) {
  return (name) => !!ctx.info?.sandbox?.unsandboxedTools?.includes(name);
}

export function approvalsPanel(ctx, decide) {
  const canRunUnsandboxed = unsandboxable(ctx);
  const el = h("div", { class: "approvals", hidden: true });
  const row = (a) => {
    const call = a.request.toolCall?.payload || {};
    const buttons = [];
    const btn = (decision, label) => {
      const b = h("button", { class: decision, dataset: { action: decision } }, label);
      b.addEventListener("click", () => decide(a.toolCallId, decision, buttons));
      buttons.push(b);
      return b;
    };
    return h(
      "div",
      { class: "approval-row", dataset: { callId: a.toolCallId, origin: a.origin.join("/") } },
      h("span", { class: "tool-name" }, call.name || "tool call"),
      a.origin.length ? h("span", { class: "badge", title: a.origin.join(" › ") }, `subagent ${a.origin.map((o) => o.slice(-8)).join(" › ")}`) : null,
      h("code", { class: "args-summary" }, (call.arguments || "").slice(0, 160)),
      btn("allow", "Allow"),
      canRunUnsandboxed(call.name) ? btn("allow_unsandboxed", "Allow unsandboxed") : null,
      btn("deny", "Deny"),
    );
  };
  return {
    el,
    show: (list) => {
      el.hidden = list.length === 0;
      el.replaceChildren(...list.map(row));
    },
  };
}
