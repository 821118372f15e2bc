// The usage page (`/usage`): what the model requests cost, added up from the traces by the
// server (`GET /api/usage`). A chart of cost (or tokens) per day over the chosen range,
// drawn here as SVG, then the range's totals by model.

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { dollars } from "./format.js";
import { app, link } from "./nav.js";

const SVG = "http://www.w3.org/2000/svg";
const RANGES = [
  ["7", "7 days"],
  ["30", "30 days"],
  ["90", "90 days"],
];

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// `YYYY-MM-DD` of a UTC day.
const dayOf = (t) => new Date(t).toISOString().slice(0, 10);

// Every day from `from` to `to` (inclusive), so days without requests show as nothing.
function days(from, to) {
  const out = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); dayOf(t) <= to; t += 86400000) out.push(dayOf(t));
  return out;
}

function compact(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(n >= 1e4 ? 0 : 1)}k`;
  return String(Math.round(n));
}

// A bar per day of `value(row)`, with a y axis of three ticks and a label every few days.
// It scales with the page (viewBox), so one drawing serves a phone and a desktop.
export function chart(rows, dayList, { value, label }) {
  const W = 640, H = 240, L = 52, B = 28, T = 12, R = 8;
  const byDay = new Map(rows.map((r) => [r.group, r]));
  const values = dayList.map((d) => (byDay.has(d) ? value(byDay.get(d)) : 0));
  const max = Math.max(...values, 0) || 1;
  const plotW = W - L - R, plotH = H - T - B;
  const step = plotW / dayList.length;
  const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "usage-chart", role: "img", "aria-label": `${label} per day` });
  for (const f of [0, 0.5, 1]) {
    const y = T + plotH * (1 - f);
    g.append(
      svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }),
      svg("text", { x: L - 6, y: y + 4, "text-anchor": "end", class: "tick" }, label === "cost" ? dollars(max * f) : compact(max * f)),
    );
  }
  const every = Math.ceil(dayList.length / 8);
  dayList.forEach((d, i) => {
    const v = values[i];
    const bh = (v / max) * plotH;
    const x = L + i * step + step * 0.15;
    const bar = svg("rect", {
      x,
      y: T + plotH - bh,
      width: Math.max(step * 0.7, 1),
      height: bh,
      class: "bar",
      "data-day": d,
      "data-value": v,
    });
    bar.append(svg("title", {}, `${d}: ${label === "cost" ? dollars(v) : `${v.toLocaleString("en-US")} tokens`}`));
    g.append(bar);
    if (i % every === 0)
      g.append(svg("text", { x: x + step * 0.35, y: H - 8, "text-anchor": "middle", class: "tick" }, d.slice(5)));
  });
  return g;
}

function costText(r) {
  if (!r.unpriced.length) return dollars(r.cost);
  const none = `no price for ${r.unpriced.join(", ")}`;
  return r.cost ? `${dollars(r.cost)} + ${none}` : none;
}

export function usageView() {
  let range = "30";
  let metric = null; // "cost" or "tokens"; chosen from the data until the reader picks
  let alive = true;
  const chartBox = h("div", { class: "usage-plot" });
  const totals = h("p", { class: "usage-total" });
  const models = h("table", { class: "usage-models" });
  const rangeSel = h(
    "select",
    { "aria-label": "range", onchange: () => ((range = rangeSel.value), load()) },
    RANGES.map(([v, t]) => h("option", { value: v, selected: v === range }, t)),
  );
  const metricSel = h(
    "select",
    { "aria-label": "metric", onchange: () => ((metric = metricSel.value), load()) },
    h("option", { value: "cost" }, "cost"),
    h("option", { value: "tokens" }, "tokens"),
  );

  async function load() {
    const to = dayOf(Date.now());
    const from = dayOf(Date.now() - (Number(range) - 1) * 86400000);
    const q = (groupBy) => new URLSearchParams({ from, to, groupBy }).toString();
    let perDay, perModel;
    try {
      [perDay, perModel] = await Promise.all([api.usage(q("day")), api.usage(q("model"))]);
    } catch (err) {
      toast(err.message);
      return;
    }
    if (!alive) return;
    metric ||= perDay.total.cost > 0 ? "cost" : "tokens";
    metricSel.value = metric;
    const value = metric === "cost" ? (r) => r.cost : (r) => r.tokens.total;
    chartBox.replaceChildren(chart(perDay.rows, days(from, to), { value, label: metric }));
    const t = perDay.total;
    totals.textContent = `${t.requests.toLocaleString("en-US")} requests · ${t.tokens.total.toLocaleString("en-US")} tokens (${t.tokens.cacheRead.toLocaleString("en-US")} cached) · ${costText(t)}`;
    models.replaceChildren(
      h("thead", {}, h("tr", {}, h("th", {}, "model"), h("th", {}, "requests"), h("th", {}, "tokens"), h("th", {}, "cost"))),
      h(
        "tbody",
        {},
        perModel.rows.map((r) =>
          h("tr", {}, h("td", {}, r.group), h("td", {}, r.requests), h("td", {}, r.tokens.total.toLocaleString("en-US")), h("td", {}, costText(r))),
        ),
      ),
    );
    app.dataset.loaded = "usage";
  }

  app.replaceChildren(
    h(
      "main",
      { class: "usage" },
      h("nav", { class: "crumbs" }, link("/", "← Sessions")),
      h("h1", {}, "Usage"),
      h("div", { class: "usage-controls" }, rangeSel, metricSel),
      chartBox,
      totals,
      models,
    ),
  );
  load();
  return () => (alive = false);
}
