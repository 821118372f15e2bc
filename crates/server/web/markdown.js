// A small Markdown renderer for model output: fenced and indented code, headings, lists,
// block quotes, tables, rules, emphasis, inline code and links.
//
// Safety comes from the order of work: every piece of source text is HTML-escaped before any
// tag is added, and only tags this file writes reach the DOM. Link targets are limited to
// http(s) and mailto, so a model cannot smuggle a `javascript:` URL into the page.
//
// Code spans and links are cut out of the source first and held as placeholders, so that what
// comes after them (escaping, emphasis) never reaches inside: a link's URL goes into `href`
// exactly as written (`http://a/**b**` stays that, rather than growing a `<strong>`), escaped
// once as an attribute value.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function safeUrl(url) {
  const u = url.trim();
  return /^(https?:\/\/|mailto:)/i.test(u) ? u : null;
}

const CODE_SPAN = /(`+)([\s\S]*?[^`])\1(?!`)/g;
// [text](url), on the source text.
const LINK = /\[([^\]\n]+)\]\(([^)\s]+)\)/g;
// A bare URL after a space or "(", on the source text; trailing punctuation is not part of it.
const BARE_URL = /(^|[\s(])(https?:\/\/[^\s<>"\u0000)]+[^\s<>"\u0000).,;:!?'])/g;
const HELD = /\u0000(\d+)\u0000/g;

function anchor(href, labelHtml) {
  return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer">${labelHtml}</a>`;
}

// Emphasis, strike-through and hard breaks, on text already escaped.
function emphasis(s) {
  s = s.replace(/\*\*([^\s*](?:[\s\S]*?[^\s*])?)\*\*/g, "<strong>$1</strong>");
  s = s.replace(/__([^\s_](?:[\s\S]*?[^\s_])?)__/g, "<strong>$1</strong>");
  s = s.replace(/(^|[^*\w])\*([^\s*](?:[^*]*?[^\s*])?)\*(?!\*)/g, "$1<em>$2</em>");
  s = s.replace(/(^|[^_\w])_([^\s_](?:[^_]*?[^\s_])?)_(?![_\w])/g, "$1<em>$2</em>");
  s = s.replace(/~~([^~\n]+)~~/g, "<del>$1</del>");
  return s.replace(/ {2,}\n/g, "<br>\n");
}

// Inline spans. Code spans, then links, are held as placeholders (NUL, index, NUL: a NUL in
// the source is replaced first, so it cannot forge one) until the rest is escaped and
// emphasized.
function inline(text) {
  const held = [];
  const hold = (html, raw) => {
    held.push({ html, raw });
    return `\u0000${held.length - 1}\u0000`;
  };
  // `raw` gives a placeholder's source back (a code span inside a URL is part of the URL).
  const restore = (s, key) => s.replace(HELD, (_, i) => held[Number(i)][key]);
  let s = String(text).replace(/\u0000/g, "\uFFFD");
  s = s.replace(CODE_SPAN, (m, _ticks, code) =>
    hold(`<code>${escapeHtml(code.trim() === "" ? code : code.replace(/^ (.*) $/s, "$1"))}</code>`, m),
  );
  s = s.replace(LINK, (m, label, url) => {
    const href = safeUrl(restore(url, "raw"));
    if (!href) return m;
    return hold(anchor(href, restore(emphasis(escapeHtml(label)), "html")), m);
  });
  s = s.replace(BARE_URL, (_, pre, url) => `${pre}${hold(anchor(url, escapeHtml(url)), url)}`);
  return restore(emphasis(escapeHtml(s)), "html");
}

function isTableSeparator(line) {
  return /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/.test(line);
}

function splitRow(line) {
  let l = line.trim();
  if (l.startsWith("|")) l = l.slice(1);
  if (l.endsWith("|") && !l.endsWith("\\|")) l = l.slice(0, -1);
  return l.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;

// Renders one list starting at `lines[i]`; nested lists are items indented further.
function list(lines, i) {
  const first = lines[i].match(LIST_ITEM);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const start = ordered ? parseInt(first[2], 10) : 1;
  const items = [];
  while (i < lines.length) {
    const m = lines[i].match(LIST_ITEM);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      items.push({ text: [m[3]], sub: [] });
      i++;
      continue;
    }
    if (m && m[1].length > indent && items.length) {
      const nested = list(lines, i);
      items[items.length - 1].sub.push(nested.html);
      i = nested.next;
      continue;
    }
    // A continuation line: indented text under the current item.
    if (items.length && lines[i].trim() !== "" && /^\s+/.test(lines[i]) && !m) {
      items[items.length - 1].text.push(lines[i].trim());
      i++;
      continue;
    }
    break;
  }
  const tag = ordered ? "ol" : "ul";
  const startAttr = ordered && start !== 1 ? ` start="${start}"` : "";
  const body = items
    .map((it) => `<li>${inline(it.text.join("\n"))}${it.sub.join("")}</li>`)
    .join("");
  return { html: `<${tag}${startAttr}>${body}</${tag}>`, next: i };
}

export function renderMarkdown(src) {
  const lines = String(src).replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let para = [];
  const flush = () => {
    if (para.length) out.push(`<p>${inline(para.join("\n"))}</p>`);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/);
    if (fence) {
      flush();
      const close = fence[1];
      const code = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(close)) code.push(lines[i++]);
      // An unclosed fence (a block still streaming) runs to the end, as it will once closed.
      i++;
      const lang = fence[2] ? ` data-lang="${escapeHtml(fence[2])}"` : "";
      const label = fence[2] ? `<span class="code-lang">${escapeHtml(fence[2])}</span>` : "";
      out.push(`<pre class="code"${lang}>${label}<code>${escapeHtml(code.join("\n"))}</code></pre>`);
      continue;
    }
    if (line.trim() === "") {
      flush();
      i++;
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*?)\s*#*\s*$/);
    if (heading) {
      flush();
      const n = heading[1].length;
      out.push(`<h${n}>${inline(heading[2])}</h${n}>`);
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      out.push("<hr>");
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*> ?/, ""));
      out.push(`<blockquote>${renderMarkdown(quoted.join("\n"))}</blockquote>`);
      continue;
    }
    if (LIST_ITEM.test(line) && (para.length === 0 || !/^\s/.test(line))) {
      flush();
      const l = list(lines, i);
      out.push(l.html);
      i = l.next;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && isTableSeparator(lines[i + 1])) {
      flush();
      const head = splitRow(line);
      const aligns = splitRow(lines[i + 1]).map((c) =>
        c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "",
      );
      i += 2;
      const rows = [];
      while (i < lines.length && lines[i].includes("|") && lines[i].trim() !== "") rows.push(splitRow(lines[i++]));
      const cell = (tag, c, k) =>
        `<${tag}${aligns[k] ? ` class="align-${aligns[k]}"` : ""}>${inline(c)}</${tag}>`;
      out.push(
        `<table><thead><tr>${head.map((c, k) => cell("th", c, k)).join("")}</tr></thead><tbody>` +
          rows.map((r) => `<tr>${head.map((_, k) => cell("td", r[k] ?? "", k)).join("")}</tr>`).join("") +
          "</tbody></table>",
      );
      continue;
    }
    if (/^( {4}|\t)/.test(line) && para.length === 0) {
      const code = [];
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || lines[i].trim() === "")) {
        code.push(lines[i++].replace(/^( {4}|\t)/, ""));
      }
      while (code.length && code[code.length - 1].trim() === "") code.pop();
      out.push(`<pre class="code"><code>${escapeHtml(code.join("\n"))}</code></pre>`);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return out.join("\n");
}
