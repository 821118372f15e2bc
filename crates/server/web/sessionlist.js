// The session list (`/`): a chat list of the sessions, live through the user channel and
// paged with "Show more", searched and filtered by the server (`?search=`, `?archived=true`),
// pinned ones first, grouped by workspace; the form that creates one; the agent's memory,
// read-only.

import * as api from "./api.js";
import { h, placeChildren, toast } from "./dom.js";
import { APPROVAL_MODES, modeOption, modelOf, relativeTime } from "./format.js";
import { header } from "./chrome.js";
import { app, link, navigate } from "./nav.js";
import { SocketSource } from "./socket.js";

// One page at first; "Show more" asks for the next (the server pages the list).
const PAGE = 50;

// Workspaces whose group the reader folded: kept while the page lives, across redraws.
const folded = new Set();

export function sessionList() {
  document.title = "penguin · sessions";
  const groups = h("div", { class: "session-groups" });
  const empty = h("p", { class: "muted", hidden: true }, "No sessions yet: create one above.");
  let shown = PAGE;
  const moreBtn = h("button", { class: "quiet more", hidden: true, dataset: { action: "more" } }, "Show more");
  const search = h("input", { type: "search", name: "search", placeholder: "Search titles and prompts", "aria-label": "search sessions" });
  const archivedBtn = h("button", { type: "button", class: "quiet toggle", dataset: { action: "archived" }, "aria-pressed": "false" }, "Archived");
  let archived = false;

  let stale = false;
  // Only the newest answer is drawn: a slow one for an older search must not replace it.
  let asked = 0;
  const refresh = async () => {
    if (stale) return;
    const ask = ++asked;
    const query = new URLSearchParams({ limit: String(shown) });
    if (archived) query.set("archived", "true");
    if (search.value.trim()) query.set("search", search.value.trim());
    try {
      const { sessions, page } = await api.sessions.list(query.toString());
      if (stale || ask !== asked) return;
      moreBtn.hidden = !(page && page.hasMore);
      // A row being renamed or confirming a delete stays as it is: an update elsewhere must
      // not throw away what the reader is typing.
      // An unchanged row is kept too, so a click aimed at it is not lost to a redraw.
      const kept = new Map(
        [...groups.querySelectorAll("li.session-item")]
          .filter((tr) => tr.dataset.editing || sessions.some((s) => tr.dataset.info === JSON.stringify(s)))
          .map((tr) => [tr.dataset.session, tr]),
      );
      const rows = sessions.map((s) => [s, kept.get(s.id) || sessionRow(s, refresh)]);
      placeChildren(groups, grouped(rows, groups));
      empty.textContent = search.value.trim() ? "No sessions match." : archived ? "No archived sessions." : "No sessions yet: create one above.";
      empty.hidden = sessions.length > 0;
      app.dataset.loaded = "true";
    } catch (err) {
      if (err.status !== 401) toast(err.message);
    }
  };

  app.replaceChildren(
    header(),
    h(
      "main",
      { class: "list" },
      h("h1", {}, "Sessions"),
      h("nav", { class: "crumbs" }, link("/usage", "Usage and cost"), " · ", link("/models", "Models")),
      createForm(),
      h("div", { class: "list-tools" }, search, archivedBtn),
      groups,
      moreBtn,
      empty,
      memoryPanel(),
    ),
  );

  // The user channel tells when any session starts, stops, appears or gets a title.
  const events = new SocketSource(api.streamUrl("/api/events/socket"));
  let timer = null;
  const soon = (ms) => {
    clearTimeout(timer);
    timer = setTimeout(refresh, ms);
  };
  events.addEventListener("server_event", () => soon(150));
  // The server searches: one request once the reader pauses, not one per key.
  search.addEventListener("input", () => {
    shown = PAGE;
    soon(250);
  });
  archivedBtn.addEventListener("click", () => {
    archived = !archived;
    archivedBtn.setAttribute("aria-pressed", String(archived));
    shown = PAGE;
    refresh();
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

// The rows in groups, in the server's order: the pinned sessions first, then one group per
// workspace, the most recently active first. A group is foldable; its element is reused from
// `parent` so a redraw keeps it (and the reader's focus) in place.
function grouped(rows, parent) {
  const order = [];
  const byKey = new Map();
  for (const [s, tr] of rows) {
    const key = s.pinned ? "\u0000pinned" : s.workspace || "";
    if (!byKey.has(key)) {
      byKey.set(key, []);
      order.push(key);
    }
    byKey.get(key).push(tr);
  }
  const existing = new Map([...parent.children].map((g) => [g.dataset.group, g]));
  return order.map((key) => {
    const items = byKey.get(key);
    let group = existing.get(key);
    if (!group) {
      const pinned = key === "\u0000pinned";
      const label = pinned ? "Pinned" : shortPath(key) || "no workspace";
      const toggle = h("button", { type: "button", class: "group-toggle", title: pinned ? "" : key, "aria-expanded": "true" }, h("span", { class: "chevron" }, "▾"), h("span", { class: "group-name" }, label), h("span", { class: "count muted" }));
      const list = h("ul", { class: "session-list" });
      group = h("section", { class: "session-group", dataset: { group: key } }, toggle, list);
      toggle.addEventListener("click", () => {
        if (folded.has(key)) folded.delete(key);
        else folded.add(key);
        fold(group, key);
      });
    }
    group.querySelector(".count").textContent = ` ${items.length}`;
    placeChildren(group.querySelector("ul"), items);
    fold(group, key);
    return group;
  });
}

function fold(group, key) {
  const open = !folded.has(key);
  group.querySelector("ul").hidden = !open;
  group.querySelector(".group-toggle").setAttribute("aria-expanded", String(open));
  group.dataset.folded = String(!open);
}

// A workspace as a person tells it apart: its last two folders.
function shortPath(path) {
  const parts = path.split("/").filter(Boolean);
  return parts.length > 2 ? `…/${parts.slice(-2).join("/")}` : path;
}

// What the agent remembers, by scope (the user's, each workspace's): read-only here.
function memoryPanel() {
  const el = h("details", { class: "memory", hidden: true });
  api.memory().then(
    ({ scopes }) => {
      const withNotes = scopes.filter((s) => (s.notes || []).length);
      if (!withNotes.length) return;
      el.hidden = false;
      el.replaceChildren(
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
  return el;
}

// A new session: workspace, a model the server offers, approval mode and sandbox.
function createForm() {
  const mode = h(
    "select",
    { name: "approvalMode", title: "what the session asks before it runs" },
    h("option", { value: "" }, `server's default`),
    APPROVAL_MODES.map((m) => modeOption(h, m)),
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
  return h(
    "form",
    {
      class: "create",
      onsubmit: async (e) => {
        e.preventDefault();
        const body = {};
        if (mode.value) body.approvalMode = mode.value;
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
}

// One session's row: what it is about, when it last moved, whether it runs; the rest below,
// with rename and delete. `refresh` redraws the list once an edit is done.
function sessionRow(s, refresh) {
  const title = s.title || s.id;
  const path = `/sessions/${encodeURIComponent(s.id)}`;
  const titleCell = h(
    "div",
    { class: "title" },
    link(path, title),
    s.source ? h("span", { class: "badge" }, s.source) : null,
    s.archived ? h("span", { class: "badge" }, "archived") : null,
  );
  const actions = h("div", { class: "actions" });
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
  const done = () => {
    delete tr.dataset.editing;
    refresh();
  };
  const rename = () => {
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
  };
  const confirmDelete = () => {
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
  };
  // Pin and archive change one mark and redraw: the server orders and filters the list.
  const mark = (body) => async () => {
    try {
      await api.sessions.patch(s.id, body);
    } catch (err) {
      toast(err.message);
    }
    refresh();
  };
  actions.replaceChildren(
    h("button", { class: "quiet", dataset: { action: s.pinned ? "unpin" : "pin" }, onclick: mark({ pinned: !s.pinned }) }, s.pinned ? "Unpin" : "Pin"),
    h("button", { class: "quiet", dataset: { action: s.archived ? "unarchive" : "archive" }, onclick: mark({ archived: !s.archived }) }, s.archived ? "Unarchive" : "Archive"),
    h("button", { class: "quiet", dataset: { action: "rename" }, onclick: rename }, "Rename"),
    h("button", { class: "quiet danger", dataset: { action: "delete" }, onclick: confirmDelete }, "Delete"),
  );
  return tr;
}
