// The models page (`/models`): the models sessions may run on (`GET /api/models`), each with
// a Test (`POST /api/models/test`: latency, streaming, tool calling, vision, or why it
// fails), Make default, Edit and Remove for those config.toml holds, and a form to add one
// that offers the endpoint's own list of models (`POST /api/models/discover`). The server
// edits config.toml; this page never sees a key, only the name of the variable holding it.

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { app, link } from "./nav.js";

const PROTOCOLS = ["openai-chat", "openai-responses", "anthropic-messages", "gemini", "ollama"];

function keyText(m) {
  if (!m.apiKeyEnv) return m.provider === "demo" ? "offline" : "no key";
  return `${m.apiKeyEnv} ${m.keySet ? "(set)" : "(not set)"}`;
}

// A test report as lines: the answer and latency, then each check; or the classified failure.
function report(r) {
  if (!r.ok) {
    const f = r.failure || {};
    return h(
      "div",
      { class: "model-test failed", dataset: { ok: "false", kind: f.kind || "" } },
      h("strong", {}, "Fails: "),
      f.cause || "no answer",
      f.hint ? h("div", { class: "hint" }, f.hint) : null,
    );
  }
  const check = (what, c) =>
    h("li", { class: `check ${c.status}`, dataset: { check: what, status: c.status } }, h("strong", {}, `${what}: ${c.status}`), c.detail ? ` — ${c.detail}` : "");
  return h(
    "div",
    { class: "model-test", dataset: { ok: "true" } },
    h("div", {}, h("strong", {}, "Answers: "), r.reply || ""),
    h("div", { class: "latency" }, `${r.latencyMs ?? "?"} ms to the first token, ${r.totalMs ?? "?"} ms in all`),
    h("ul", {}, check("streaming", r.streaming), check("tools", r.tools), check("vision", r.vision)),
  );
}

export function modelsView() {
  let alive = true;
  let editing = null; // the name of the model the form changes; null: the form adds
  const list = h("div", { class: "model-list" });
  const formBox = h("section", { class: "model-form" });

  async function load(answer) {
    let data = answer;
    if (!data) {
      try {
        data = await api.models();
      } catch (err) {
        toast(err.message);
        return;
      }
    }
    if (!alive) return;
    list.replaceChildren(...data.models.map(card));
    app.dataset.loaded = "models";
  }

  // What an edit answers is the list after it.
  async function change(what, done) {
    try {
      const answer = await what();
      await load(answer);
      if (done) done();
      return true;
    } catch (err) {
      toast(err.message);
      return false;
    }
  }

  function card(m) {
    const result = h("div", { class: "model-result" });
    const testBtn = h("button", {
      onclick: async () => {
        testBtn.disabled = true;
        result.replaceChildren(h("div", { class: "model-test running" }, "Testing…"));
        try {
          result.replaceChildren(report(await api.modelAdmin.test(m.name)));
        } catch (err) {
          result.replaceChildren(h("div", { class: "model-test failed" }, err.message));
        }
        testBtn.disabled = false;
      },
    }, "Test");
    const buttons = [testBtn];
    if (!m.default && (m.configured || m.provider === "demo")) {
      buttons.push(h("button", { onclick: () => change(() => api.modelAdmin.makeDefault(m.name)) }, "Make default"));
    }
    if (m.configured) {
      buttons.push(h("button", { onclick: () => openForm(m) }, "Edit"));
      const removeBtn = h("button", {
        class: "danger",
        onclick: () => {
          // A second click confirms: no dialog to lose on a phone.
          if (removeBtn.dataset.armed) change(() => api.modelAdmin.remove(m.name));
          else {
            removeBtn.dataset.armed = "1";
            removeBtn.textContent = "Remove? Click again";
          }
        },
      }, "Remove");
      buttons.push(removeBtn);
    }
    return h(
      "article",
      { class: "model", dataset: { name: m.name, default: String(m.default) } },
      h("header", {}, h("span", { class: "model-name" }, m.name), m.default ? h("span", { class: "badge" }, "default") : null),
      h(
        "dl",
        {},
        h("dt", {}, "protocol"), h("dd", {}, m.provider),
        h("dt", {}, "model"), h("dd", {}, m.modelId),
        h("dt", {}, "endpoint"), h("dd", {}, m.baseUrl || "built in"),
        h("dt", {}, "key"), h("dd", {}, keyText(m)),
      ),
      h("div", { class: "model-actions" }, buttons),
      result,
    );
  }

  function openForm(m) {
    editing = m ? m.name : null;
    const field = (label, input) => h("label", {}, h("span", {}, label), input);
    const name = h("input", { name: "name", required: true, value: m ? m.name : "", disabled: !!m, placeholder: "local", autocomplete: "off" });
    const protocol = h(
      "select",
      { name: "protocol" },
      PROTOCOLS.map((p) => h("option", { value: p, selected: m ? m.provider === p : p === "openai-chat" }, p)),
    );
    const baseUrl = h("input", { name: "baseUrl", value: m ? m.baseUrl || "" : "", placeholder: "the protocol's default", autocomplete: "off" });
    const ids = h("datalist", { id: "endpoint-models" });
    const model = h("input", { name: "model", required: true, value: m ? m.modelId : "", list: "endpoint-models", autocomplete: "off" });
    const keyEnv = h("input", { name: "apiKeyEnv", value: m ? m.apiKeyEnv || "" : "", placeholder: "OPENAI_API_KEY (a variable's name, not the key)", autocomplete: "off" });
    const makeDefault = h("input", { type: "checkbox", name: "default" });
    const offered = h("div", { class: "offered" });
    const listBtn = h("button", {
      type: "button",
      onclick: async () => {
        offered.textContent = "Asking the endpoint…";
        try {
          const r = await api.modelAdmin.discover({ protocol: protocol.value, baseUrl: baseUrl.value || null, apiKeyEnv: keyEnv.value || null });
          ids.replaceChildren(...r.models.map((id) => h("option", { value: id })));
          offered.replaceChildren(
            r.models.length ? `${r.models.length} offered: ` : "The endpoint lists no models.",
            ...r.models.slice(0, 40).map((id) => h("button", { type: "button", class: "chip", onclick: () => (model.value = id) }, id)),
          );
        } catch (err) {
          offered.textContent = err.message;
        }
      },
    }, "List the endpoint's models");
    const form = h(
      "form",
      {
        onsubmit: async (e) => {
          e.preventDefault();
          const body = { protocol: protocol.value, baseUrl: baseUrl.value.trim(), model: model.value.trim(), apiKeyEnv: keyEnv.value.trim() };
          // An edit sends only what changed: the form shows the defaults in force (the
          // protocol's base URL and key variable), which the file need not spell out.
          if (m) {
            const was = { protocol: m.provider, baseUrl: m.baseUrl || "", model: m.modelId, apiKeyEnv: m.apiKeyEnv || "" };
            for (const k of Object.keys(body)) if (body[k] === was[k]) delete body[k];
          }
          if (makeDefault.checked) body.default = true;
          const ok = editing
            ? await change(() => api.modelAdmin.change(editing, body))
            : await change(() => api.modelAdmin.add({ name: name.value.trim(), ...body }));
          if (ok) closeForm();
        },
      },
      h("h2", {}, m ? `Edit ${m.name}` : "Add a model"),
      field("Name", name),
      field("Protocol", protocol),
      field("Base URL", baseUrl),
      field("Key variable", keyEnv),
      h("div", { class: "discover" }, listBtn, offered),
      field("Model id", model),
      ids,
      h("label", { class: "check" }, makeDefault, h("span", {}, "Make it the default")),
      h("div", { class: "model-actions" }, h("button", { class: "primary", type: "submit" }, m ? "Save" : "Add"), h("button", { type: "button", onclick: closeForm }, "Cancel")),
    );
    formBox.replaceChildren(form);
    (m ? protocol : name).focus();
  }

  function closeForm() {
    editing = null;
    formBox.replaceChildren(h("button", { class: "primary", onclick: () => openForm(null) }, "Add a model"));
  }

  app.replaceChildren(
    h(
      "main",
      { class: "models" },
      h("nav", { class: "crumbs" }, link("/", "← Sessions")),
      h("h1", {}, "Models"),
      h("p", { class: "muted" }, "Changes are written to config.toml, its comments kept. Keys stay in the environment: a model names the variable that holds its key."),
      formBox,
      list,
    ),
  );
  closeForm();
  load();
  return () => (alive = false);
}
