// One session (`/sessions/ID`): its head, the transcript, and the dock below it (goal and
// connection banners, pending approvals, queued inputs, the composer), all driven by the
// session's stream.

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { header } from "./chrome.js";
import { app, showNotFound } from "./nav.js";
import { SessionStream } from "./stream.js";
import { sessionHead } from "./sessionhead.js";
import { transcriptPane } from "./transcriptpane.js";
import { approvalsPanel, decider, unsandboxable } from "./approvals.js";
import { pendingPanel } from "./pending.js";
import { connectionBanner, goalBanner, traceBanner } from "./banners.js";
import { composer } from "./composer.js";
import { rewindPanel } from "./rewind.js";
import { processesPanel } from "./processes.js";
import { filesPanel } from "./files.js";

export function sessionView(id) {
  document.title = "penguin · session";
  // The session as this view knows it: its info from the API, its task state from the stream.
  const ctx = { id, info: null, taskState: { state: "idle" } };
  const decide = decider(id);
  const conn = h("span", { class: "conn" }, "connecting");
  const goal = goalBanner(id);
  const connection = connectionBanner();
  const trace = traceBanner();
  const head = sessionHead(ctx, { traceWarning: trace.warn });
  const rewind = rewindPanel(ctx);
  const processes = processesPanel(ctx);
  const files = filesPanel(ctx);
  const pane = transcriptPane(ctx, { decide, canRunUnsandboxed: unsandboxable(ctx), rewind: rewind.offer, forkBefore: rewind.forkBefore });
  const approvals = approvalsPanel(ctx, decide);
  const input = composer(ctx);
  ctx.onThinking = head.showThinking;
  head.showThinking(ctx.thinking);
  const pending = pendingPanel(ctx, input.recallInto);
  const { transcript } = pane;

  const loadInfo = () =>
    api.sessions.get(id).then((r) => {
      ctx.info = r.session;
      head.showInfo();
    });
  const showState = () => {
    const s = ctx.taskState.state;
    head.showState(s);
    input.showState(s);
    // A session is titled by its first prompt: read it once the first task runs.
    if (s !== "idle" && ctx.info && !ctx.info.title) loadInfo().catch(() => {});
    pending.show();
  };

  app.dataset.history = "";
  app.replaceChildren(
    header(conn),
    h(
      "main",
      { class: "session" },
      head.el,
      files.el,
      pane.el,
      h("div", { class: "dock" }, goal.el, connection.el, trace.el, processes.el, rewind.el, approvals.el, pending.el, input.attachments, input.el, input.options),
    ),
  );
  showState();

  loadInfo().catch((err) => {
    if (err.status === 404 || err.status === 400) showNotFound(`No session ${id} on this server.`);
    else if (err.status !== 401) toast(err.message);
  });

  const stream = new SessionStream({
    url: api.streamUrl(`/api/sessions/${encodeURIComponent(id)}/socket`),
    loadHistory: () => api.sessions.messages(id, "tailLimit=200"),
    sink: {
      reset: () => transcript.reset(),
      message: (m) => transcript.message(m),
      dropped: (m) => transcript.dropped(m),
      fragment: (f) => transcript.fragment(f),
      fragmentStopped: (f) => transcript.fragmentStopped(f),
      taskState: (ts) => {
        transcript.taskState(ts);
        if (ts) {
          ctx.taskState = ts;
          showState();
          processes.refresh();
          if (ts.state === "idle") files.refresh();
        }
      },
      approvals: (list) => {
        transcript.approvals(list);
        approvals.show(list);
      },
      title: (t) => head.showTitle(t),
      traceWarning: trace.warn,
      goal: (g) => goal.show(g),
      ready: () => {
        transcript.ready();
        pane.showOlder();
        app.dataset.history = "loaded";
      },
    },
    onStatus: (s) => {
      conn.textContent = s;
      conn.className = `conn ${s}`;
      app.dataset.stream = s;
      connection.show(s);
      // Counted for whoever wants to know how the page got back in sync (tests do).
      if (s === "resyncing" || s === "offline") app.dataset[s] = String(Number(app.dataset[s] || 0) + 1);
    },
    onFatal: (err) => {
      if (err.status === 404) showNotFound(`No session ${id} on this server.`);
    },
  });
  pane.follow(stream);
  stream.start();
  return () => {
    stream.close();
    transcript.destroy();
    processes.close();
    files.close();
  };
}
