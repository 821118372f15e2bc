// A session's background commands (`GET /api/sessions/{id}/processes`): each with its command,
// whether it runs, for how long, the port it listens on (a dev server's address), its latest
// lines, and Stop (or Remove, once it ended). Read again while one runs, and when a task's
// state changes.

import * as api from "./api.js";
import { h, toast } from "./dom.js";

const EVERY_MS = 3000;

function runtime(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

export function processesPanel(ctx) {
  const el = h("details", { class: "processes", hidden: true, open: true });
  const summary = h("summary", {});
  const list = h("div", { class: "process-list" });
  el.append(summary, list);
  let timer = null;
  let closed = false;

  const row = (p) => {
    const state = p.running ? `running ${p.startedAtMs ? runtime(Date.now() - p.startedAtMs) : ""}` : p.exit || "ended";
    const stop = h(
      "button",
      { class: p.running ? "deny" : "quiet", dataset: { action: p.running ? "stop-process" : "remove-process" } },
      p.running ? "Stop" : "Remove",
    );
    stop.addEventListener("click", async () => {
      stop.disabled = true;
      try {
        await api.sessions.removeProcess(ctx.id, p.processId);
        refresh();
      } catch (err) {
        stop.disabled = false;
        toast(err.message);
      }
    });
    const ports = (p.ports || []).map((port) =>
      h("a", { class: "port", href: `http://${location.hostname}:${port}/`, target: "_blank", rel: "noopener noreferrer" }, `:${port}`),
    );
    return h(
      "div",
      { class: "process", dataset: { processId: p.processId, running: String(p.running) } },
      h("div", { class: "process-head" }, h("code", { class: "command", title: p.command }, `$ ${p.command}`), ...ports, h("span", { class: "state" }, state), stop),
      p.recent ? h("pre", { class: "recent" }, p.recent) : null,
    );
  };

  async function refresh() {
    clearTimeout(timer);
    if (closed) return;
    let processes = [];
    try {
      processes = (await api.sessions.processes(ctx.id)).processes || [];
    } catch {
      // A session without background work, or the server away: nothing to show now.
    }
    if (closed) return;
    el.hidden = processes.length === 0;
    const running = processes.filter((p) => p.running).length;
    summary.textContent = `Background commands: ${running} running${processes.length > running ? `, ${processes.length - running} ended` : ""}`;
    list.replaceChildren(...processes.map(row));
    if (running) timer = setTimeout(refresh, EVERY_MS);
  }

  return {
    el,
    refresh,
    close: () => {
      closed = true;
      clearTimeout(timer);
    },
  };
}
