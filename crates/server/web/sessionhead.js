// The head of a session's view: its title and run state, what it runs on (model, workspace,
// sandbox), its approval mode, and the actions on the whole session (rename, compact, fork,
// delete).

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { APPROVAL_MODES, APPROVAL_HINTS, modeOption, modelOf, relativeTime } from "./format.js";
import { app, link, navigate } from "./nav.js";

// `ctx` is the view's session: `{ id, info }`, `info` as the API last returned it.
// `traceWarning(text)` says that the session's trace lost records.
export function sessionHead(ctx, { traceWarning }) {
  const { id } = ctx;
  const titleEl = h("h1", { class: "session-title" }, id);
  const metaEl = h("div", { class: "session-meta" });
  const stateEl = h("span", { class: "state idle" }, "idle");
  // The thinking level the composer sends tasks with, when not the model's default.
  const thinkingEl = h("span", { class: "thinking-level", hidden: true });
  const modeSel = h(
    "select",
    {
      name: "approvalMode",
      onchange: async () => {
        try {
          ctx.info = (await api.sessions.patch(id, { approvalMode: modeSel.value })).session;
        } catch (err) {
          toast(err.message);
        }
      },
    },
    APPROVAL_MODES.map((m) => modeOption(h, m)),
  );

  const showInfo = () => {
    const info = ctx.info;
    if (!info) return;
    titleEl.textContent = info.title || info.id;
    document.title = `penguin · ${info.title || info.id}`;
    modeSel.value = info.approvalMode;
    modeSel.title = APPROVAL_HINTS[info.approvalMode] || "";
    metaEl.replaceChildren(...infoParts(info));
    if (info.traceWriteFailures) {
      traceWarning(`This session's trace lost ${info.traceWriteFailures} record(s): what is shown here may not survive a restart.`);
    }
  };
  const headActions = sessionActions(ctx, showInfo);

  const el = h(
    "div",
    { class: "session-head" },
    h("div", { class: "crumbs" }, link("/", "← Sessions")),
    h("div", { class: "title-row" }, titleEl, stateEl, headActions),
    h("div", { class: "meta-row" }, metaEl, thinkingEl, h("label", {}, "approvals ", modeSel)),
  );
  return {
    el,
    showInfo,
    showThinking: (level) => {
      thinkingEl.hidden = !level;
      thinkingEl.textContent = level ? `thinking: ${level}` : "";
    },
    showTitle: (t) => {
      if (ctx.info) ctx.info.title = t;
      titleEl.textContent = t;
    },
    showState: (s) => {
      stateEl.textContent = s;
      stateEl.className = `state ${s}`;
      app.dataset.state = s;
    },
  };
}

// Model, workspace, sandbox (marked weak when part of it is not enforced here), creation.
function infoParts(info) {
  const sandbox = info.sandbox;
  const weak = sandbox && sandbox.notEnforced && sandbox.notEnforced.length;
  // `replaceChildren` writes a `null` child as the text "null": leave absent parts out.
  return [
    h("span", { class: "model", title: `model: ${[info.provider, info.model].filter(Boolean).join(" / ")}` }, modelOf(info)),
    h("span", { class: "workspace", title: info.workspace || "" }, info.workspace || ""),
    sandbox
      ? h("span", { class: `sandbox${weak ? " weak" : ""}`, title: weak ? `not enforced here: ${sandbox.notEnforced.join(", ")}` : "" }, sandbox.summary)
      : null,
    h("span", { title: info.createdAt || "" }, `created ${relativeTime(info.createdAt)}`),
  ].filter(Boolean);
}

// Rename, compact, fork and delete; rename and delete ask first, in place of the buttons.
function sessionActions(ctx, showInfo) {
  const { id } = ctx;
  const el = h("div", { class: "head-actions" });
  const show = () =>
    el.replaceChildren(
      h("button", { class: "quiet", dataset: { action: "rename" }, onclick: rename }, "Rename"),
      h("button", { class: "quiet", dataset: { action: "compact" }, onclick: compact }, "Compact"),
      h("button", { class: "quiet", dataset: { action: "fork" }, onclick: fork, title: "A new session with this one's conversation so far" }, "Fork"),
      h("button", { class: "quiet", dataset: { action: "download-trace" }, onclick: download, title: "This session's Trace, to move it or attach it to a bug report (penguin import)" }, "Trace"),
      h("button", { class: "quiet danger", dataset: { action: "delete" }, onclick: confirmDelete }, "Delete"),
    );
  async function download() {
    try {
      await api.downloadTrace(id);
    } catch (err) {
      toast(err.message);
    }
  }
  function rename() {
    const input = h("input", { name: "title", value: ctx.info?.title || "", placeholder: "title" });
    el.replaceChildren(
      h(
        "form",
        {
          class: "inline",
          onsubmit: async (e) => {
            e.preventDefault();
            try {
              ctx.info = (await api.sessions.patch(id, { title: input.value })).session;
              showInfo();
            } catch (err) {
              toast(err.message);
            }
            show();
          },
        },
        input,
        h("button", { type: "submit", dataset: { action: "save-title" } }, "Save"),
        h("button", { type: "button", class: "quiet", onclick: show }, "Cancel"),
      ),
    );
    input.focus();
  }
  async function fork() {
    try {
      const r = await api.sessions.fork(id);
      navigate(`/sessions/${encodeURIComponent(r.session.id)}`);
    } catch (err) {
      toast(err.message);
    }
  }
  async function compact() {
    try {
      await api.sessions.compact(id);
    } catch (err) {
      toast(err.message);
    }
  }
  function confirmDelete() {
    el.replaceChildren(
      h("span", {}, "Delete this session? "),
      h(
        "button",
        {
          class: "danger",
          dataset: { action: "confirm-delete" },
          onclick: async () => {
            try {
              await api.sessions.remove(id);
              navigate("/");
            } catch (err) {
              toast(err.message);
            }
          },
        },
        "Delete",
      ),
      h("button", { class: "quiet", onclick: show }, "Keep"),
    );
  }
  show();
  return el;
}
