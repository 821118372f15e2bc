// Pending approvals of a session, its subagents' included (with their origin), always in view
// above the composer, and the one way the view answers one.

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { argsLine, renderDiffs } from "./toolview.js";

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
    const always = (what) => {
      const b = btn("allow_always", "Always");
      b.title = `Allow, and from now on ${what} in this session`;
      return b;
    };
    // A command as `$ cmd`, a file tool by its path; the JSON only for the rest.
    const summary = argsLine(call.name, call.arguments || "") ?? (call.arguments || "").slice(0, 160);
    // What the call would change (an edit's diff, computed by the server without writing),
    // so an edit is never approved blind.
    let preview = null;
    if (a.request.preview) {
      preview = h("pre", { class: "approval-preview tool-output" });
      renderDiffs(preview, a.request.preview) || (preview.textContent = a.request.preview);
    }
    return h(
      "div",
      { class: "approval-row", dataset: { callId: a.toolCallId, origin: a.origin.join("/") } },
      h(
        "div",
        { class: "approval-head" },
        h("span", { class: "tool-name" }, call.name || "tool call"),
        a.origin.length ? h("span", { class: "badge", title: a.origin.join(" › ") }, `subagent ${a.origin.map((o) => o.slice(-8)).join(" › ")}`) : null,
        h("code", { class: "args-summary", title: call.arguments || "" }, summary),
        btn("allow", "Allow"),
        // Offered where "always" grants more than this call (the server says what).
        a.request.always ? always(a.request.always) : null,
        canRunUnsandboxed(call.name) ? btn("allow_unsandboxed", "Allow unsandboxed") : null,
        btn("deny", "Deny"),
      ),
      preview,
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
