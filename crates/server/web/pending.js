// Steering and follow-ups waiting to be used, each recallable into the composer.

import * as api from "./api.js";
import { h, toast } from "./dom.js";

// `recallInto(text)` puts a recalled input back into the composer.
export function pendingPanel(ctx, recallInto) {
  const el = h("div", { class: "pending", hidden: true });
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
              const r = await recall(ctx.id, p.id);
              recallInto(r.text);
            } catch (err) {
              toast(err.code === "not_pending" ? "Too late: it was already delivered." : err.message);
            }
          },
        },
        "Recall",
      ),
    );
  return {
    el,
    show: () => {
      const steer = ctx.taskState.pendingSteering || [];
      const follow = ctx.taskState.pendingFollowUps || [];
      el.hidden = steer.length + follow.length === 0;
      el.replaceChildren(
        ...steer.map((p) => item("steering", p, api.sessions.unsteer)),
        ...follow.map((p) => item("follow-up", p, api.sessions.removeFollowUp)),
      );
    },
  };
}
