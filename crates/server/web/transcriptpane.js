// The scrolling pane a session's transcript lives in: it stays at the bottom while the reader
// is there, and loads earlier pages of the history on demand.

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { modelOf } from "./format.js";
import { Transcript } from "./transcript.js";

// `decide` answers an approval from a tool card; `canRunUnsandboxed(name)` says whether a card
// offers a run outside the sandbox.
export function transcriptPane(ctx, { decide, canRunUnsandboxed, rewind, forkBefore }) {
  const { id } = ctx;
  const el = h("div", { class: "pane" });
  const olderBtn = h("button", { class: "quiet older", hidden: true, dataset: { action: "load-earlier" } }, "Load earlier messages");
  const transcriptEl = h("div", { class: "transcript", id: "transcript" });
  el.append(olderBtn, transcriptEl);
  let stick = true;
  el.addEventListener("scroll", () => {
    stick = el.scrollHeight - el.scrollTop - el.clientHeight < 60;
  });
  new MutationObserver(() => {
    if (stick) el.scrollTop = el.scrollHeight;
  }).observe(transcriptEl, { childList: true, subtree: true, characterData: true });

  let pricing = null;
  const transcript = new Transcript(transcriptEl, {
    decide,
    canRunUnsandboxed,
    rewind,
    forkBefore,
    explain: (failure) => api.explain(failure),
    // The session model's price and name, asked once: `{price, model}`.
    price: () =>
      (pricing ||= (ctx.info ? Promise.resolve({ session: ctx.info }) : api.sessions.get(id)).then((r) =>
        api.price(r.session.provider, r.session.model).then((p) => ({ price: p.price, model: modelOf(r.session) })),
      )),
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

  let stream = null;
  const showOlder = () => (olderBtn.hidden = !(stream && stream.page && stream.page.hasMore));
  olderBtn.addEventListener("click", async () => {
    const before = stream && stream.page && stream.page.before;
    if (!before) return;
    olderBtn.disabled = true;
    const keep = el.scrollHeight - el.scrollTop;
    try {
      const older = await api.sessions.messages(id, `before=${encodeURIComponent(before)}&limit=200`);
      stream.page = older.page || null;
      stick = false;
      stream.reducer.prepend(older.messages || []);
      el.scrollTop = el.scrollHeight - keep;
    } catch (err) {
      toast(err.message);
    }
    olderBtn.disabled = false;
    showOlder();
  });

  return {
    el,
    transcript,
    // The stream whose history pages "Load earlier messages" continues.
    follow: (s) => (stream = s),
    showOlder,
  };
}
