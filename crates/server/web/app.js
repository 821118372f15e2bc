// penguin's web app: the session list and one session's live view, over the server's API.
//
// Every view has its own path (`/`, `/sessions/ID`), so it can be bookmarked, shared and
// reloaded; links are real links, and navigation inside the page only swaps the view.

import * as api from "./api.js";
import { SessionStream } from "./stream.js";
import { SocketSource } from "./socket.js";
import { Transcript } from "./transcript.js";

// Uncaught errors are kept, so a support request (or a test) can read what went wrong.
window.penguinErrors = [];
window.addEventListener("error", (e) => window.penguinErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) =>
  window.penguinErrors.push(String((e.reason && e.reason.stack) || e.reason)),
);

const app = document.getElementById("app");
let teardown = () => {};

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k in e && typeof v !== "string") e[k] = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Makes `parent`'s children exactly `nodes`, moving only what is out of place: a node taken
// out of the document, even to be put back at once, loses focus, so someone typing in a kept
// row would find the next keys going nowhere.
function placeChildren(parent, nodes) {
  const focused = document.activeElement;
  const selection = focused && "selectionStart" in focused ? [focused.selectionStart, focused.selectionEnd] : null;
  nodes.forEach((node, i) => {
    if (parent.children[i] !== node) parent.insertBefore(node, parent.children[i] || null);
  });
  while (parent.children.length > nodes.length) parent.lastElementChild.remove();
  if (focused && focused !== document.activeElement && focused.isConnected) {
    focused.focus();
    try {
      if (selection) focused.setSelectionRange(...selection);
    } catch {
      // Not every input type has a selection to put back.
    }
  }
}

function navigate(path) {
  if (location.pathname !== path) history.pushState(null, "", path);
  route();
}

function link(path, ...children) {
  return h(
    "a",
    {
      href: path,
      onclick: (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(path);
      },
    },
    ...children,
  );
}

let toastTimer = null;
function toast(message, kind = "error") {
  let t = document.getElementById("toast");
  if (!t) {
    t = h("div", { id: "toast", role: "status" });
    document.body.append(t);
  }
  t.textContent = message;
  t.className = `toast ${kind}`;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), 6000);
}

function relativeTime(iso) {
  if (!iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 45) return "just now";
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

function modelOf(s) {
  return [s.provider, s.model].filter(Boolean).join(" / ") || "—";
}

function header(...right) {
  return h(
    "header",
    { class: "top" },
    link("/", h("img", { src: "/assets/favicon.svg", alt: "", class: "logo" }), h("span", { class: "brand" }, "penguin")),
    h("div", { class: "spacer" }),
    ...right,
    h(
      "button",
      {
        class: "quiet",
        dataset: { action: "sign-out" },
        onclick: () => {
          api.clearToken();
          route();
        },
      },
      "Sign out",
    ),
  );
}

// --- sign in -----------------------------------------------------------------------------------

function signIn(reason) {
  document.title = "penguin · sign in";
  const input = h("input", {
    type: "password",
    name: "token",
    autocomplete: "current-password",
    placeholder: "access token",
    required: true,
  });
  const error = h("p", { class: "error", hidden: !reason }, reason || "");
  const form = h(
    "form",
    {
      class: "sign-in",
      onsubmit: async (e) => {
        e.preventDefault();
        api.setToken(input.value);
        try {
          await api.checkToken();
          route();
        } catch (err) {
          api.clearToken();
          error.hidden = false;
          error.textContent = err.status === 401 ? "That token was refused." : err.message;
        }
      },
    },
    h("h1", {}, "penguin"),
    h(
      "p",
      {},
      "Open the link ",
      h("code", {}, "penguin serve"),
      " printed, or paste the server's access token (from PENGUIN_TOKEN or the server-token file).",
    ),
    input,
    h("button", { type: "submit" }, "Sign in"),
    error,
  );
  app.replaceChildren(h("main", { class: "center" }, form));
  input.focus();
}

// --- the session list ----------------------------------------------------------------------

function sessionList() {
  document.title = "penguin · sessions";
  const rows = h("ul", { class: "session-list" });
  const empty = h("p", { class: "muted", hidden: true }, "No sessions yet: create one above.");
  // What the agent remembers, by scope (the user's, each workspace's): read-only here.
  const memoryEl = h("details", { class: "memory", hidden: true });
  api.memory().then(
    ({ scopes }) => {
      const withNotes = scopes.filter((s) => (s.notes || []).length);
      if (!withNotes.length) return;
      memoryEl.hidden = false;
      memoryEl.replaceChildren(
        h("summary", {}, `Memory (${withNotes.reduce((n, s) => n + s.notes.length, 0)} notes)`),
        ...withNotes.map((s) =>
          h(
            "section",
            { class: "memory-scope", dataset: { scope: s.key } },
            h("h3", {}, s.kind === "user" ? "You" : s.workspace || s.key),
            h(
              "ul",
              {},
              s.notes.map((n) =>
                h("li", { dataset: { note: n.name } }, h("strong", {}, n.title || n.name), h("span", { class: "muted" }, n.description ? ` — ${n.description}` : "")),
              ),
            ),
          ),
        ),
      );
    },
    () => {},
  );
  // One page at first; "Show more" asks for the next (the server pages the list).
  const PAGE = 50;
  let shown = PAGE;
  const moreBtn = h("button", { class: "quiet more", hidden: true, dataset: { action: "more" } }, "Show more");
  const mode = h(
    "select",
    { name: "approvalMode" },
    ["always-ask", "read-only", "allow-all", "deny-all"].map((m) => h("option", { value: m }, m)),
  );
  const workspace = h("input", { name: "workspace", placeholder: "workspace (default: the server's)" });
  // The models this server offers; a free field only when it names none.
  const model = h("select", { name: "model" }, h("option", { value: "" }, "model: the server's default"));
  api.models().then(
    ({ models }) => {
      if (!models.length) return;
      model.replaceChildren(
        ...models.map((m) =>
          h("option", { value: m.default ? "" : m.name }, `${m.name}${m.name === m.modelId ? "" : ` (${m.modelId})`}${m.default ? " · default" : ""}`),
        ),
      );
    },
    () => {},
  );
  const sandbox = h(
    "select",
    { name: "sandbox" },
    h("option", { value: "" }, "server's default"),
    ["workspace-write", "read-only", "off"].map((m) => h("option", { value: m }, m)),
  );
  const create = h(
    "form",
    {
      class: "create",
      onsubmit: async (e) => {
        e.preventDefault();
        const body = { approvalMode: mode.value };
        if (workspace.value.trim()) body.workspace = workspace.value.trim();
        if (model.value) body.model = model.value;
        if (sandbox.value) body.sandbox = { mode: sandbox.value };
        try {
          const r = await api.sessions.create(body);
          navigate(`/sessions/${encodeURIComponent(r.session.id)}`);
        } catch (err) {
          toast(err.message);
        }
      },
    },
    workspace,
    model,
    h("label", {}, "approvals ", mode),
    h("label", {}, "sandbox ", sandbox),
    h("button", { type: "submit", dataset: { action: "create" } }, "New session"),
  );

  let stale = false;
  const refresh = async () => {
    if (stale) return;
    try {
      const { sessions, page } = await api.sessions.list(`limit=${shown}`);
      if (stale) return;
      moreBtn.hidden = !(page && page.hasMore);
      // A row being renamed or confirming a delete stays as it is: an update elsewhere must
      // not throw away what the reader is typing.
      // An unchanged row is kept too, so a click aimed at it is not lost to a redraw.
      const kept = new Map(
        [...rows.children]
          .filter((tr) => tr.dataset.editing || sessions.some((s) => tr.dataset.info === JSON.stringify(s)))
          .map((tr) => [tr.dataset.session, tr]),
      );
      placeChildren(rows, sessions.map((s) => kept.get(s.id) || row(s)));
      empty.hidden = sessions.length > 0;
      app.dataset.loaded = "true";
    } catch (err) {
      if (err.status !== 401) toast(err.message);
    }
  };

  const row = (s) => {
    const title = s.title || s.id;
    const path = `/sessions/${encodeURIComponent(s.id)}`;
    const titleCell = h("div", { class: "title" }, link(path, title), s.source ? h("span", { class: "badge" }, s.source) : null);
    const actions = h("div", { class: "actions" });
    const done = () => {
      delete tr.dataset.editing;
      refresh();
    };
    const showActions = () =>
      actions.replaceChildren(
        h("button", { class: "quiet", dataset: { action: "rename" }, onclick: rename }, "Rename"),
        h("button", { class: "quiet danger", dataset: { action: "delete" }, onclick: confirmDelete }, "Delete"),
      );
    function rename() {
      tr.dataset.editing = "true";
      const input = h("input", { value: s.title || "", name: "title", placeholder: "title" });
      const save = async (e) => {
        e.preventDefault();
        try {
          await api.sessions.patch(s.id, { title: input.value });
        } catch (err) {
          toast(err.message);
        }
        done();
      };
      titleCell.replaceChildren(
        h(
          "form",
          { class: "inline", onsubmit: save },
          input,
          h("button", { type: "submit", dataset: { action: "save-title" } }, "Save"),
          h("button", { type: "button", class: "quiet", onclick: done }, "Cancel"),
        ),
      );
      input.focus();
    }
    function confirmDelete() {
      tr.dataset.editing = "true";
      actions.replaceChildren(
        h("span", {}, "Delete this session and its trace? "),
        h(
          "button",
          {
            class: "danger",
            dataset: { action: "confirm-delete" },
            onclick: async () => {
              try {
                await api.sessions.remove(s.id);
              } catch (err) {
                toast(err.message);
              }
              done();
            },
          },
          "Delete",
        ),
        h("button", { class: "quiet", onclick: done }, "Keep"),
      );
    }
    showActions();
    // A chat list: what it is about, when it last moved, whether it runs; the rest below.
    const tr = h(
      "li",
      { class: "session-item", dataset: { session: s.id, state: s.state, info: JSON.stringify(s) } },
      h(
        "div",
        { class: "line1" },
        titleCell,
        h("span", { class: `state ${s.state}` }, s.state),
        h("span", { class: "when", title: `last active ${s.lastActiveAt || "?"} · created ${s.createdAt || "?"}` }, relativeTime(s.lastActiveAt || s.createdAt)),
      ),
      h(
        "div",
        { class: "line2" },
        h("span", { class: "model" }, modelOf(s)),
        h("span", { class: "workspace", title: s.workspace || "" }, s.workspace || ""),
        actions,
      ),
    );
    return tr;
  };

  app.replaceChildren(
    header(),
    h(
      "main",
      { class: "list" },
      h("h1", {}, "Sessions"),
      create,
      rows,
      moreBtn,
      empty,
      memoryEl,
    ),
  );

  // The user channel tells when any session starts, stops, appears or gets a title.
  const events = new SocketSource(api.streamUrl("/api/events/socket"));
  let timer = null;
  events.addEventListener("server_event", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 150);
  });
  moreBtn.addEventListener("click", () => {
    shown += PAGE;
    refresh();
  });
  refresh();
  return () => {
    stale = true;
    clearTimeout(timer);
    events.close();
  };
}

// --- one session ---------------------------------------------------------------------------

function sessionView(id) {
  document.title = "penguin · session";
  let info = null;
  let taskState = { state: "idle" };
  let stream = null;

  const titleEl = h("h1", { class: "session-title" }, id);
  const metaEl = h("div", { class: "session-meta" });
  const stateEl = h("span", { class: "state idle" }, "idle");
  const connEl = h("span", { class: "conn" }, "connecting");
  const modeSel = h(
    "select",
    {
      name: "approvalMode",
      onchange: async () => {
        try {
          info = (await api.sessions.patch(id, { approvalMode: modeSel.value })).session;
        } catch (err) {
          toast(err.message);
        }
      },
    },
    ["always-ask", "read-only", "allow-all", "deny-all"].map((m) => h("option", { value: m }, m)),
  );
  const headActions = h("div", { class: "head-actions" });
  const showHeadActions = () =>
    headActions.replaceChildren(
      h("button", { class: "quiet", dataset: { action: "rename" }, onclick: rename }, "Rename"),
      h("button", { class: "quiet", dataset: { action: "compact" }, onclick: compact }, "Compact"),
      h("button", { class: "quiet", dataset: { action: "fork" }, onclick: fork, title: "A new session with this one's conversation so far" }, "Fork"),
      h("button", { class: "quiet danger", dataset: { action: "delete" }, onclick: confirmDelete }, "Delete"),
    );
  function rename() {
    const input = h("input", { name: "title", value: info?.title || "", placeholder: "title" });
    headActions.replaceChildren(
      h(
        "form",
        {
          class: "inline",
          onsubmit: async (e) => {
            e.preventDefault();
            try {
              info = (await api.sessions.patch(id, { title: input.value })).session;
              showInfo();
            } catch (err) {
              toast(err.message);
            }
            showHeadActions();
          },
        },
        input,
        h("button", { type: "submit", dataset: { action: "save-title" } }, "Save"),
        h("button", { type: "button", class: "quiet", onclick: showHeadActions }, "Cancel"),
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
    headActions.replaceChildren(
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
      h("button", { class: "quiet", onclick: showHeadActions }, "Keep"),
    );
  }
  showHeadActions();

  function showInfo() {
    if (!info) return;
    titleEl.textContent = info.title || info.id;
    document.title = `penguin · ${info.title || info.id}`;
    modeSel.value = info.approvalMode;
    const sandbox = info.sandbox;
    // `replaceChildren` writes a `null` child as the text "null": leave absent parts out.
    const parts = [
      h("span", { title: "model" }, modelOf(info)),
      h("span", { class: "workspace", title: info.workspace || "" }, info.workspace || ""),
      sandbox
        ? h(
            "span",
            {
              class: `sandbox${sandbox.notEnforced && sandbox.notEnforced.length ? " weak" : ""}`,
              title: sandbox.notEnforced && sandbox.notEnforced.length ? `not enforced here: ${sandbox.notEnforced.join(", ")}` : "",
            },
            sandbox.summary,
          )
        : null,
      h("span", { title: info.createdAt || "" }, `created ${relativeTime(info.createdAt)}`),
    ];
    metaEl.replaceChildren(...parts.filter(Boolean));
    if (info.traceWriteFailures) {
      traceWarning(`This session's trace lost ${info.traceWriteFailures} record(s): what is shown here may not survive a restart.`);
    }
  }

  // Transcript and its scrolling: stay at the bottom while the reader is there.
  const pane = h("div", { class: "pane" });
  const olderBtn = h("button", { class: "quiet older", hidden: true, dataset: { action: "load-earlier" } }, "Load earlier messages");
  const transcriptEl = h("div", { class: "transcript", id: "transcript" });
  pane.append(olderBtn, transcriptEl);
  let stick = true;
  pane.addEventListener("scroll", () => {
    stick = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 60;
  });
  new MutationObserver(() => {
    if (stick) pane.scrollTop = pane.scrollHeight;
  }).observe(transcriptEl, { childList: true, subtree: true, characterData: true });

  const decide = async (callId, decision, buttons) => {
    for (const b of buttons) b.disabled = true;
    try {
      await api.sessions.decide(id, callId, decision);
    } catch (err) {
      for (const b of buttons) b.disabled = false;
      toast(err.message);
    }
  };
  // The session's tools say which calls may run once outside the sandbox.
  const canRunUnsandboxed = (name) => !!info?.sandbox?.unsandboxedTools?.includes(name);
  const transcript = new Transcript(transcriptEl, {
    decide,
    canRunUnsandboxed,
    explain: (failure) => api.explain(failure),
    retryNow: async (btn) => {
      btn.disabled = true;
      try {
        await api.sessions.retryNow(id);
      } catch (err) {
        btn.disabled = false;
        toast(err.message);
      }
    },
  });

  const banner = h(
    "div",
    { class: "banner", hidden: true, role: "status" },
    "Connection lost: reconnecting. What happens meanwhile is shown once it is back.",
  );
  // The trace losing records is not something to hide: what is shown may not survive a restart.
  const traceBanner = h("div", { class: "banner trace", hidden: true, role: "alert" });
  const traceWarning = (text) => {
    traceBanner.textContent = text;
    traceBanner.hidden = !text;
  };

  // Pending approvals, including subagents' (with their origin), always in view.
  const approvalsEl = h("div", { class: "approvals", hidden: true });
  const showApprovals = (list) => {
    approvalsEl.hidden = list.length === 0;
    approvalsEl.replaceChildren(
      ...list.map((a) => {
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
      }),
    );
  };

  // Steering and follow-ups waiting to be used, each recallable into the composer.
  const pendingEl = h("div", { class: "pending", hidden: true });
  const showPending = () => {
    const steer = taskState.pendingSteering || [];
    const follow = taskState.pendingFollowUps || [];
    pendingEl.hidden = steer.length + follow.length === 0;
    const item = (kind, p, recall) =>
      h(
        "div",
        { class: `pending-item ${kind}`, dataset: { id: p.id, kind } },
        h("span", { class: "badge" }, kind === "steering" ? "steering, queued" : "follow-up, queued"),
        h("span", { class: "text" }, p.text),
        h(
          "button",
          {
            class: "quiet",
            dataset: { action: "recall" },
            onclick: async () => {
              try {
                const r = await recall(id, p.id);
                input.value = input.value ? `${input.value}\n\n${r.text}` : r.text;
                input.focus();
              } catch (err) {
                toast(err.code === "not_pending" ? "Too late: it was already delivered." : err.message);
              }
            },
          },
          "Recall",
        ),
      );
    pendingEl.replaceChildren(
      ...steer.map((p) => item("steering", p, api.sessions.unsteer)),
      ...follow.map((p) => item("follow-up", p, api.sessions.removeFollowUp)),
    );
  };

  // The goal banner: the objective, where it stands, rounds and tokens.
  const goalEl = h("div", { class: "goal-banner", hidden: true });
  const showGoal = (g) => {
    goalEl.hidden = !g;
    if (!g) return;
    goalEl.dataset.status = g.status;
    const budget = g.budget > 0 ? ` of ${g.budget.toLocaleString("en-US")}` : "";
    goalEl.replaceChildren(
      h("span", { class: "goal-label" }, "goal"),
      h("span", { class: "goal-objective", title: g.objective }, g.objective),
      h("span", { class: `goal-status ${g.status}` }, g.status.replace(/_/g, " ")),
      h("span", { class: "goal-progress" }, `round ${g.rounds} · ${Number(g.used || 0).toLocaleString("en-US")}${budget} tokens`),
    );
  };
  api.sessions.goalState(id).then((r) => showGoal(r.goal), () => {});

  // Images pasted or dropped into the composer go with the next task as image parts.
  let attachments = [];
  const attachEl = h("div", { class: "attachments", hidden: true });
  const showAttachments = () => {
    attachEl.hidden = attachments.length === 0;
    attachEl.replaceChildren(
      ...attachments.map((a, i) => {
        const img = h("img", { alt: a.name, title: a.name });
        img.src = a.url;
        return h(
          "span",
          { class: "attachment", dataset: { index: String(i) } },
          img,
          h("button", { class: "quiet", dataset: { action: "remove-attachment" }, title: "Remove", onclick: () => {
            attachments.splice(i, 1);
            showAttachments();
          } }, "×"),
        );
      }),
    );
  };
  const clearAttachments = () => {
    attachments = [];
    showAttachments();
  };
  const attach = (files) => {
    for (const f of files) {
      if (!f.type.startsWith("image/")) {
        toast(`${f.name || "That file"} is not an image: only images can be attached.`);
        continue;
      }
      if (f.size > 10 * 1024 * 1024) {
        toast(`${f.name} is larger than 10 MiB.`);
        continue;
      }
      const reader = new FileReader();
      reader.onload = () => {
        attachments.push({ name: f.name || "pasted image", url: String(reader.result) });
        showAttachments();
      };
      reader.readAsDataURL(f);
    }
  };

  // Skills the session is offered; the ticked ones are pinned to the next task.
  const skillsEl = h("details", { class: "skills", hidden: true });
  const pinned = () => [...skillsEl.querySelectorAll("input[name=skill]:checked")].map((c) => c.value);
  api.sessions.skills(id).then(
    ({ skills }) => {
      if (!skills.length) return;
      skillsEl.hidden = false;
      skillsEl.replaceChildren(
        h("summary", {}, `Skills (${skills.length})`),
        ...skills.map((s) =>
          h(
            "label",
            { class: "skill", title: s.path || "", dataset: { skill: s.name } },
            h("input", { type: "checkbox", name: "skill", value: s.name }),
            h("span", { class: "skill-name" }, s.name),
            h("span", { class: "muted" }, ` ${s.shortDescription || s.description || ""}`),
          ),
        ),
      );
    },
    () => {},
  );

  // The composer: send when idle; steer, queue or abort while a task runs.
  const input = h("textarea", { name: "input", rows: 3, placeholder: "Ask for something…" });
  const sendBtn = h("button", { class: "primary", dataset: { action: "send" } }, "Send");
  const queueBtn = h("button", { dataset: { action: "queue" }, hidden: true }, "Queue as follow-up");
  const abortBtn = h("button", { class: "danger", dataset: { action: "abort" }, hidden: true }, "Abort");
  // Goal mode: the input is an objective the session works on round after round until the
  // model declares it complete or blocked (or the token budget runs out).
  const goalBox = h("input", { type: "checkbox", name: "goal" });
  const budgetIn = h("input", { name: "budget", type: "number", min: "0", step: "1000", placeholder: "token budget", class: "budget" });
  const goalOpt = h("label", { class: "goal-option", title: "Work on this objective in rounds until it is complete or blocked" }, goalBox, " as a goal ", budgetIn);
  const running = () => taskState.state !== "idle";
  const submit = async (queue) => {
    const text = input.value;
    if (!text.trim() && !attachments.length) return;
    try {
      if (running() && !queue) {
        await api.sessions.steer(id, text);
      } else if (goalBox.checked && !running()) {
        const budget = Number(budgetIn.value);
        await api.sessions.goal(id, text, budget > 0 ? budget : null);
        goalBox.checked = false;
        budgetIn.value = "";
      } else {
        await api.sessions.task(id, text, queue || running(), attachments.map((a) => a.url), pinned());
        clearAttachments();
        for (const c of skillsEl.querySelectorAll("input[name=skill]:checked")) c.checked = false;
      }
      input.value = "";
    } catch (err) {
      if (err.code === "not_running") toast("The task has ended: press Send to start a new one.");
      else toast(err.message);
    }
  };
  sendBtn.addEventListener("click", () => submit(false));
  queueBtn.addEventListener("click", () => submit(true));
  abortBtn.addEventListener("click", async () => {
    try {
      await api.sessions.abort(id);
    } catch (err) {
      toast(err.message);
    }
  });
  input.addEventListener("paste", (e) => {
    const files = [...(e.clipboardData?.files || [])];
    if (files.length) {
      e.preventDefault();
      attach(files);
    }
  });
  input.addEventListener("dragover", (e) => e.preventDefault());
  input.addEventListener("drop", (e) => {
    const files = [...(e.dataTransfer?.files || [])];
    if (files.length) {
      e.preventDefault();
      attach(files);
    }
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit(false);
    }
  });
  const showState = () => {
    const s = taskState.state;
    stateEl.textContent = s;
    stateEl.className = `state ${s}`;
    app.dataset.state = s;
    sendBtn.textContent = s === "running" ? "Steer" : s === "compacting" ? "Queue" : "Send";
    sendBtn.dataset.action = s === "running" ? "steer" : "send";
    queueBtn.hidden = s !== "running";
    abortBtn.hidden = s === "idle";
    goalOpt.hidden = s !== "idle";
    // A session is titled by its first prompt: read it once the first task runs.
    if (s !== "idle" && info && !info.title) {
      api.sessions.get(id).then((r) => {
        info = r.session;
        showInfo();
      }, () => {});
    }
    input.placeholder = s === "running" ? "Steer the running task, or queue a follow-up…" : "Ask for something…";
    showPending();
  };

  const sink = {
    reset: () => transcript.reset(),
    message: (m) => transcript.message(m),
    dropped: (m) => transcript.dropped(m),
    fragment: (f) => transcript.fragment(f),
    fragmentStopped: (f) => transcript.fragmentStopped(f),
    taskState: (ts) => {
      transcript.taskState(ts);
      if (ts) {
        taskState = ts;
        showState();
      }
    },
    approvals: (list) => {
      transcript.approvals(list);
      showApprovals(list);
    },
    title: (t) => {
      if (info) info.title = t;
      titleEl.textContent = t;
    },
    traceWarning,
    goal: (g) => showGoal(g),
    ready: () => {
      transcript.ready();
      olderBtn.hidden = !(stream.page && stream.page.hasMore);
      app.dataset.history = "loaded";
    },
  };

  olderBtn.addEventListener("click", async () => {
    const before = stream.page && stream.page.before;
    if (!before) return;
    olderBtn.disabled = true;
    const keep = pane.scrollHeight - pane.scrollTop;
    try {
      const h = await api.sessions.messages(id, `before=${encodeURIComponent(before)}&limit=200`);
      stream.page = h.page || null;
      stick = false;
      stream.reducer.prepend(h.messages || []);
      pane.scrollTop = pane.scrollHeight - keep;
    } catch (err) {
      toast(err.message);
    }
    olderBtn.disabled = false;
    olderBtn.hidden = !(stream.page && stream.page.hasMore);
  });

  app.dataset.history = "";
  app.replaceChildren(
    header(connEl),
    h(
      "main",
      { class: "session" },
      h(
        "div",
        { class: "session-head" },
        h("div", { class: "crumbs" }, link("/", "← Sessions")),
        h("div", { class: "title-row" }, titleEl, stateEl, headActions),
        h("div", { class: "meta-row" }, metaEl, h("label", {}, "approvals ", modeSel)),
      ),
      pane,
      h(
        "div",
        { class: "dock" },
        goalEl,
        banner,
        traceBanner,
        approvalsEl,
        pendingEl,
        attachEl,
        h("div", { class: "composer" }, input, h("div", { class: "buttons" }, sendBtn, queueBtn, abortBtn)),
        h("div", { class: "composer-options" }, goalOpt, skillsEl),
      ),
    ),
  );
  showState();

  api.sessions
    .get(id)
    .then((r) => {
      info = r.session;
      showInfo();
    })
    .catch((err) => {
      if (err.status === 404 || err.status === 400) notFound(`No session ${id} on this server.`);
      else if (err.status !== 401) toast(err.message);
    });

  stream = new SessionStream({
    url: api.streamUrl(`/api/sessions/${encodeURIComponent(id)}/socket`),
    loadHistory: () => api.sessions.messages(id, "tailLimit=200"),
    sink,
    onStatus: (s) => {
      connEl.textContent = s;
      connEl.className = `conn ${s}`;
      app.dataset.stream = s;
      banner.hidden = !["reconnecting", "offline"].includes(s);
      // Counted for whoever wants to know how the page got back in sync (tests do).
      if (s === "resyncing" || s === "offline") app.dataset[s] = String(Number(app.dataset[s] || 0) + 1);
    },
    onFatal: (err) => {
      if (err.status === 404) notFound(`No session ${id} on this server.`);
    },
  });
  stream.start();
  return () => {
    stream.close();
    transcript.destroy();
  };
}

function notFound(message) {
  teardown();
  teardown = () => {};
  document.title = "penguin · not found";
  app.replaceChildren(header(), h("main", { class: "center" }, h("h1", {}, "Not found"), h("p", {}, message), link("/", "← Sessions")));
}

// --- routing -------------------------------------------------------------------------------

function route(reason) {
  teardown();
  teardown = () => {};
  delete app.dataset.loaded;
  delete app.dataset.state;
  delete app.dataset.stream;
  delete app.dataset.resyncing;
  delete app.dataset.offline;
  if (!api.token()) {
    signIn(typeof reason === "string" ? reason : "");
    return;
  }
  const path = location.pathname;
  const m = path.match(/^\/sessions\/([^/]+)\/?$/);
  if (path === "/" || path === "") teardown = sessionList();
  else if (m) teardown = sessionView(decodeURIComponent(m[1]));
  else notFound(`Nothing at ${path}.`);
}

window.addEventListener("popstate", () => route());
// Opening the printed link in a tab already on this page only changes the fragment: no reload.
window.addEventListener("hashchange", () => {
  if (api.takeTokenFromFragment()) route();
});
window.addEventListener("penguin:signed-out", (e) => route(`Signed out: ${e.detail}`));
api.takeTokenFromFragment();
route();
