// What a session's view says about the session as a whole, above its composer: the goal it
// works on, a lost connection, a trace that lost records.

import * as api from "./api.js";
import { h } from "./dom.js";

// The goal banner: the objective, where it stands, rounds and tokens.
export function goalBanner(id) {
  const el = h("div", { class: "goal-banner", hidden: true });
  const show = (g) => {
    el.hidden = !g;
    if (!g) return;
    el.dataset.status = g.status;
    const budget = g.budget > 0 ? ` of ${g.budget.toLocaleString("en-US")}` : "";
    el.replaceChildren(
      h("span", { class: "goal-label" }, "goal"),
      h("span", { class: "goal-objective", title: g.objective }, g.objective),
      h("span", { class: `goal-status ${g.status}` }, g.status.replace(/_/g, " ")),
      h("span", { class: "goal-progress" }, `round ${g.rounds} · ${Number(g.used || 0).toLocaleString("en-US")}${budget} tokens`),
    );
  };
  api.sessions.goalState(id).then((r) => show(r.goal), () => {});
  return { el, show };
}

// Shown while the stream is down; what happens meanwhile is replayed once it is back.
export function connectionBanner() {
  const el = h(
    "div",
    { class: "banner", hidden: true, role: "status" },
    "Connection lost: reconnecting. What happens meanwhile is shown once it is back.",
  );
  return { el, show: (status) => (el.hidden = !["reconnecting", "offline"].includes(status)) };
}

// The trace losing records is not something to hide: what is shown may not survive a restart.
export function traceBanner() {
  const el = h("div", { class: "banner trace", hidden: true, role: "alert" });
  return {
    el,
    warn: (text) => {
      el.textContent = text;
      el.hidden = !text;
    },
  };
}
