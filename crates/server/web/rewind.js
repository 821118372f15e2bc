// "Rewind to here" on a task: the server says what putting the files back as before that task
// would change, the person confirms in the dock, and the session goes on in the fork that holds
// the conversation as it was (before the first task there is none: the files alone go back).

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { navigate } from "./nav.js";

export function rewindPanel(ctx) {
  const el = h("div", { class: "rewind", hidden: true });
  const close = () => {
    el.hidden = true;
    el.replaceChildren();
  };
  // `at` is the task's first input's tracePosition (exact), else `to` its number as counted here.
  async function offer({ at, to }) {
    const which = at ? { at } : { to };
    let plan;
    try {
      plan = await api.sessions.rewind(ctx.id, which);
    } catch (err) {
      toast(err.message);
      return;
    }
    const files = plan.files || { restore: [], remove: [], leftAlone: [], yours: [] };
    // Paths changed between the session's tasks are someone's own work: kept unless ticked.
    const yours = new Set(files.yours || []);
    const line = (what, p) =>
      yours.has(p)
        ? h("li", { dataset: { what, yours: "" } }, `${what} ${p} (yours: changed between tasks, kept)`)
        : h("li", { dataset: { what } }, `${what} ${p}`);
    const undoYours = h("input", { type: "checkbox", dataset: { action: "rewind-yours" } });
    const list = h(
      "ul",
      {},
      ...files.restore.map((p) => line("restore", p)),
      ...files.remove.map((p) => line("remove", p)),
      ...files.leftAlone.map((p) => line("leave", p)),
    );
    const go = h("button", { class: "allow", dataset: { action: "rewind-apply" } }, "Rewind");
    go.addEventListener("click", async () => {
      go.disabled = true;
      try {
        const done = await api.sessions.rewind(ctx.id, { ...which, apply: true, yours: undoYours.checked });
        const failed = done.files?.failed || [];
        if (failed.length) toast(`not rewound: ${failed.join(", ")}`);
        close();
        if (done.session) navigate(`/sessions/${encodeURIComponent(done.session.id)}`);
        else toast("the files are as before the first task", "info");
      } catch (err) {
        go.disabled = false;
        toast(err.message);
      }
    });
    const nothing = !files.restore.length && !files.remove.length;
    el.replaceChildren(
      h("div", { class: "rewind-head" }, nothing ? `The files are already as before task ${plan.to}.` : `To put the files back as before task ${plan.to}:`),
      list,
      yours.size ? h("label", { class: "rewind-yours" }, undoYours, ` Also undo the ${yours.size} change(s) made between tasks`) : "",
      h("p", { class: "muted" }, plan.to > 1 ? `The conversation goes on from a fork holding tasks 1 to ${plan.to - 1}.` : "Before task 1 there is no conversation: the files alone go back."),
      h("div", { class: "rewind-actions" }, go, h("button", { class: "quiet", onclick: close }, "Cancel")),
    );
    el.hidden = false;
  }
  // "Fork from here": a new session holding the conversation before that task, the files
  // untouched, so the task can be asked differently there.
  async function forkBefore({ at, to }) {
    try {
      const done = await api.sessions.rewind(ctx.id, { ...(at ? { at } : { to }), files: false, conversation: true, apply: true });
      if (done.session) navigate(`/sessions/${encodeURIComponent(done.session.id)}`);
    } catch (err) {
      toast(err.message);
    }
  }
  return { el, offer, forkBefore };
}
