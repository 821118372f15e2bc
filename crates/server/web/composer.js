// A session's composer: send when idle; steer, queue or abort while a task runs; start a goal;
// images pasted or dropped go with the next task, and ticked skills are pinned to it.

import * as api from "./api.js";
import { h, toast } from "./dom.js";

const MAX_IMAGE_BYTES = 10 * 1024 * 1024;

// `ctx` is the view's session (`{ id, taskState }`). Returns the parts the view lays out.
export function composer(ctx) {
  const { id } = ctx;
  const input = h("textarea", { name: "input", rows: 3, placeholder: "Ask for something…" });
  const images = attachments();
  const skills = skillPicker(id);
  const sendBtn = h("button", { class: "primary", dataset: { action: "send" } }, "Send");
  const queueBtn = h("button", { dataset: { action: "queue" }, hidden: true }, "Queue as follow-up");
  const abortBtn = h("button", { class: "danger", dataset: { action: "abort" }, hidden: true }, "Abort");
  const goal = goalOption();
  const thinking = thinkingOption(ctx);
  const running = () => ctx.taskState.state !== "idle";

  const submit = async (queue) => {
    const text = input.value;
    if (!text.trim() && !images.list().length) return;
    try {
      if (running() && !queue) {
        await api.sessions.steer(id, text);
      } else if (goal.checked() && !running()) {
        await api.sessions.goal(id, text, goal.budget(), ctx.thinking);
        goal.clear();
      } else {
        await api.sessions.task(id, text, queue || running(), images.list().map((a) => a.url), skills.pinned(), ctx.thinking);
        images.clear();
        skills.clear();
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
  const dropped = (files, e) => {
    if (files.length) {
      e.preventDefault();
      images.attach(files);
    }
  };
  input.addEventListener("paste", (e) => dropped([...(e.clipboardData?.files || [])], e));
  input.addEventListener("dragover", (e) => e.preventDefault());
  input.addEventListener("drop", (e) => dropped([...(e.dataTransfer?.files || [])], e));
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit(false);
    }
  });

  return {
    attachments: images.el,
    el: h("div", { class: "composer" }, input, h("div", { class: "buttons" }, sendBtn, queueBtn, abortBtn)),
    options: h("div", { class: "composer-options" }, goal.el, thinking.el, skills.el),
    // The buttons and the prompt follow the run state.
    showState: (s) => {
      sendBtn.textContent = s === "running" ? "Steer" : s === "compacting" ? "Queue" : "Send";
      sendBtn.dataset.action = s === "running" ? "steer" : "send";
      queueBtn.hidden = s !== "running";
      abortBtn.hidden = s === "idle";
      goal.el.hidden = s !== "idle";
      input.placeholder = s === "running" ? "Steer the running task, or queue a follow-up…" : "Ask for something…";
    },
    // A recalled steering input or follow-up comes back after what is being typed.
    recallInto: (text) => {
      input.value = input.value ? `${input.value}\n\n${text}` : text;
      input.focus();
    },
  };
}

// Images waiting to go with the next task, shown as thumbnails that can be removed.
function attachments() {
  let list = [];
  const el = h("div", { class: "attachments", hidden: true });
  const show = () => {
    el.hidden = list.length === 0;
    el.replaceChildren(
      ...list.map((a, i) => {
        const img = h("img", { alt: a.name, title: a.name });
        img.src = a.url;
        return h(
          "span",
          { class: "attachment", dataset: { index: String(i) } },
          img,
          h("button", { class: "quiet", dataset: { action: "remove-attachment" }, title: "Remove", onclick: () => {
            list.splice(i, 1);
            show();
          } }, "×"),
        );
      }),
    );
  };
  return {
    el,
    list: () => list,
    clear: () => {
      list = [];
      show();
    },
    attach: (files) => {
      for (const f of files) {
        if (!f.type.startsWith("image/")) {
          toast(`${f.name || "That file"} is not an image: only images can be attached.`);
          continue;
        }
        if (f.size > MAX_IMAGE_BYTES) {
          toast(`${f.name} is larger than 10 MiB.`);
          continue;
        }
        const reader = new FileReader();
        reader.onload = () => {
          list.push({ name: f.name || "pasted image", url: String(reader.result) });
          show();
        };
        reader.readAsDataURL(f);
      }
    },
  };
}

// Skills the session is offered; the ticked ones are pinned to the next task.
function skillPicker(id) {
  const el = h("details", { class: "skills", hidden: true });
  const ticked = () => [...el.querySelectorAll("input[name=skill]:checked")];
  api.sessions.skills(id).then(
    ({ skills }) => {
      if (!skills.length) return;
      el.hidden = false;
      el.replaceChildren(
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
  return {
    el,
    pinned: () => ticked().map((c) => c.value),
    clear: () => {
      for (const c of ticked()) c.checked = false;
    },
  };
}

// Goal mode: the input is an objective the session works on round after round until the
// model declares it complete or blocked (or the token budget runs out).
const THINKING_LEVELS = ["none", "low", "medium", "high", "xhigh", "max"];

// How hard the model thinks for this session's next tasks: the model's default, or a level,
// kept per session in this browser. `ctx.thinking` is what tasks are sent with;
// `ctx.onThinking(level)` lets the head show it.
function thinkingOption(ctx) {
  const key = `penguin.thinking.${ctx.id}`;
  const saved = localStorage.getItem(key);
  ctx.thinking = THINKING_LEVELS.includes(saved) ? saved : null;
  const sel = h(
    "select",
    { name: "thinkingLevel", title: "How hard the model thinks for the next tasks" },
    h("option", { value: "" }, "model's default"),
    ...THINKING_LEVELS.map((l) => h("option", { value: l }, l)),
  );
  sel.value = ctx.thinking || "";
  sel.addEventListener("change", () => {
    ctx.thinking = sel.value || null;
    if (ctx.thinking) localStorage.setItem(key, ctx.thinking);
    else localStorage.removeItem(key);
    ctx.onThinking?.(ctx.thinking);
  });
  return { el: h("label", { class: "thinking-option" }, "thinking ", sel) };
}

function goalOption() {
  const box = h("input", { type: "checkbox", name: "goal" });
  const budgetIn = h("input", { name: "budget", type: "number", min: "0", step: "1000", placeholder: "token budget", class: "budget" });
  const el = h("label", { class: "goal-option", title: "Work on this objective in rounds until it is complete or blocked" }, box, " as a goal ", budgetIn);
  return {
    el,
    checked: () => box.checked,
    budget: () => {
      const budget = Number(budgetIn.value);
      return budget > 0 ? budget : null;
    },
    clear: () => {
      box.checked = false;
      budgetIn.value = "";
    },
  };
}
