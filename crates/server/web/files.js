// A session's files (`GET /api/sessions/{id}/files…`): browse its workspace folder by folder,
// preview a file (text with its syntax coloured, a raster image as itself), download one, and
// see which files the session changed, each with its diff. Closed until opened, so a session
// view costs no listing until someone looks; the changes are read again when a task ends.
//
// A workspace file is whatever a model or a command wrote: it is only ever put in the page
// as text (textContent) or as an image from a blob URL, never as markup.

import * as api from "./api.js";
import { h, toast } from "./dom.js";
import { renderDiffs } from "./toolview.js";

const KIB = 1024;

function size(n) {
  if (n < KIB) return `${n} B`;
  if (n < KIB * KIB) return `${(n / KIB).toFixed(1)} KiB`;
  if (n < KIB * KIB * KIB) return `${(n / KIB / KIB).toFixed(1)} MiB`;
  return `${(n / KIB / KIB / KIB).toFixed(1)} GiB`;
}

const ICONS = { dir: "📁", file: "📄", symlink: "🔗", other: "◇" };

// ---------------------------------------------------------------------------------------------
// Syntax colouring: a small tokenizer, enough to tell keywords, strings, comments and numbers
// apart in the languages an agent usually writes. Past `MAX_COLOURED` the text stays plain.

const MAX_COLOURED = 200 * KIB;

const KEYWORDS = new Set(
  (
    "as async await break case catch class const continue crate def default defer del do elif else enum " +
    "export extends false fn for from func function go if impl import in interface is lambda let loop " +
    "match mod module mut new nil None not null or package pass pub raise return self Self static " +
    "struct super switch then this throw trait true True False try type typeof undefined use var void " +
    "where while with yield and fi esac done local echo"
  ).split(" "),
);

// Comment styles by extension: `#` for scripts and configs, `//` and `/* */` for C-like code.
const HASH = new Set(["py", "sh", "bash", "zsh", "rb", "pl", "toml", "yaml", "yml", "conf", "ini", "mk", "r", "dockerfile", "makefile", "gitignore"]);
const SLASH = new Set(["rs", "js", "mjs", "cjs", "ts", "tsx", "jsx", "go", "c", "h", "cc", "cpp", "hpp", "java", "kt", "swift", "cs", "css", "scss", "json", "jsonc", "proto", "zig", "dart", "scala", "php"]);
const PLAIN = new Set(["txt", "md", "markdown", "log", "csv", "tsv", "rst", ""]);

function language(path) {
  const name = path.split("/").pop().toLowerCase();
  const dot = name.lastIndexOf(".");
  const ext = dot > 0 ? name.slice(dot + 1) : name === "makefile" || name === "dockerfile" ? name : "";
  if (PLAIN.has(ext)) return null;
  return { hash: HASH.has(ext), slash: SLASH.has(ext) || !HASH.has(ext) };
}

function tokenRegex(lang) {
  const parts = [];
  if (lang.slash) parts.push(String.raw`\/\/[^\n]*`, String.raw`\/\*[\s\S]*?(?:\*\/|$)`);
  if (lang.hash) parts.push(String.raw`#[^\n]*`);
  parts.push(
    String.raw`"(?:[^"\\\n]|\\.)*"?`,
    String.raw`'(?:[^'\\\n]|\\.)*'?`,
    "`(?:[^`\\\\]|\\\\.)*`?",
    String.raw`\b\d[\d_]*(?:\.\d+)?(?:e[+-]?\d+)?\b|\b0x[0-9a-f_]+\b`,
    String.raw`[A-Za-z_$][\w$]*`,
  );
  return new RegExp(parts.join("|"), "gi");
}

function kindOf(tok) {
  const c = tok[0];
  if (c === "/" || c === "#") return tok.startsWith("/") && !tok.startsWith("//") && !tok.startsWith("/*") ? null : "comment";
  if (c === '"' || c === "'" || c === "`") return "string";
  if (/\d/.test(c)) return "number";
  return KEYWORDS.has(tok) ? "keyword" : null;
}

// `text` into `pre` as spans of its tokens' kinds (all through textContent).
export function colour(pre, text, path) {
  const lang = language(path);
  if (!lang || text.length > MAX_COLOURED) {
    pre.textContent = text;
    return;
  }
  const frag = document.createDocumentFragment();
  const re = tokenRegex(lang);
  let last = 0;
  let plain = "";
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m[0] === "") {
      re.lastIndex++;
      continue;
    }
    const kind = kindOf(m[0]);
    if (!kind) continue;
    plain += text.slice(last, m.index);
    if (plain) frag.append(document.createTextNode(plain));
    plain = "";
    const span = document.createElement("span");
    span.className = `tok-${kind}`;
    span.textContent = m[0];
    frag.append(span);
    last = m.index + m[0].length;
  }
  plain += text.slice(last);
  if (plain) frag.append(document.createTextNode(plain));
  pre.replaceChildren(frag);
}

// ---------------------------------------------------------------------------------------------

export function filesPanel(ctx) {
  const el = h("details", { class: "files-panel", dataset: { panel: "files" } });
  const summary = h("summary", {}, "Files");
  const browseTab = h("button", { class: "tab", dataset: { tab: "browse" }, onclick: () => show("browse") }, "Browse");
  const changedTab = h("button", { class: "tab", dataset: { tab: "changed" }, onclick: () => show("changed") }, "Changed");
  const body = h("div", { class: "files-body" });
  el.append(summary, h("div", { class: "files-tabs", role: "tablist" }, browseTab, changedTab), body);

  let tab = "browse";
  let dir = "";
  let opened = null; // the file previewed: its path
  let objectUrl = null;
  let closed = false;

  const dropObjectUrl = () => {
    if (objectUrl) URL.revokeObjectURL(objectUrl);
    objectUrl = null;
  };

  function show(which) {
    tab = which;
    browseTab.classList.toggle("active", tab === "browse");
    changedTab.classList.toggle("active", tab === "changed");
    el.dataset.tab = tab;
    if (tab === "changed") loadChanges();
    else if (opened) preview(opened);
    else list(dir);
  }

  // The path as links back up: the root, then each folder.
  function crumbs(path, isFile) {
    const parts = path ? path.split("/") : [];
    const nav = h("nav", { class: "files-crumbs" }, h("a", { href: "#", dataset: { path: "" }, onclick: (e) => (e.preventDefault(), go("")) }, "workspace"));
    parts.forEach((name, i) => {
      const to = parts.slice(0, i + 1).join("/");
      const last = i === parts.length - 1;
      nav.append(" / ", last && isFile ? h("span", {}, name) : h("a", { href: "#", dataset: { path: to }, onclick: (e) => (e.preventDefault(), go(to)) }, name));
    });
    return nav;
  }

  function go(path) {
    opened = null;
    dropObjectUrl();
    list(path);
  }

  async function list(path) {
    dir = path;
    el.dataset.dir = path;
    let listing;
    try {
      listing = await api.files.list(ctx.id, path);
    } catch (err) {
      body.replaceChildren(crumbs(path, false), h("p", { class: "files-error" }, err.message));
      return;
    }
    if (closed || opened || tab !== "browse") return;
    dir = listing.path;
    el.dataset.dir = dir;
    const rows = listing.entries.map((e) => {
      const full = dir ? `${dir}/${e.name}` : e.name;
      const open = () => (e.kind === "dir" || e.kind === "symlink" ? openLink(full, e) : preview(full));
      return h(
        "li",
        { class: `entry ${e.kind}`, dataset: { name: e.name, kind: e.kind } },
        h("button", { class: "entry-open", onclick: open, title: e.target ? `→ ${e.target}` : full }, h("span", { class: "icon", "aria-hidden": "true" }, ICONS[e.kind] || ""), h("span", { class: "name" }, e.name)),
        h("span", { class: "size" }, e.kind === "file" ? size(e.size) : e.target ? `→ ${e.target}` : ""),
      );
    });
    body.replaceChildren(
      crumbs(dir, false),
      rows.length ? h("ul", { class: "entries" }, rows) : h("p", { class: "muted" }, "Empty (files the ignore files exclude are not listed)."),
    );
  }

  // A link is opened as what it leads to: a folder is listed, a file previewed (the server
  // refuses one that leads out of the workspace, and says so).
  async function openLink(full, e) {
    if (e.kind === "dir") return go(full);
    try {
      await api.files.list(ctx.id, full);
      go(full);
    } catch (err) {
      if (err.code === "not_a_directory") preview(full);
      else toast(err.message);
    }
  }

  async function preview(path) {
    opened = path;
    dropObjectUrl();
    el.dataset.file = path;
    const download = h("button", { class: "quiet", dataset: { action: "download-file" }, onclick: () => save(path) }, "Download");
    const back = h("button", { class: "quiet", dataset: { action: "close-file" }, onclick: () => go(parentOf(path)) }, "Close");
    const view = h("div", { class: "file-view" }, h("p", { class: "muted" }, "Loading…"));
    body.replaceChildren(h("div", { class: "file-head" }, crumbs(path, true), h("span", { class: "file-actions" }, download, back)), view);
    let res;
    try {
      res = await api.files.content(ctx.id, path);
    } catch (err) {
      view.replaceChildren(h("p", { class: "files-error" }, err.message));
      return;
    }
    if (closed || opened !== path) return;
    const type = res.headers.get("content-type") || "";
    const attachment = (res.headers.get("content-disposition") || "").startsWith("attachment");
    if (type.startsWith("image/")) {
      objectUrl = URL.createObjectURL(await res.blob());
      view.replaceChildren(h("img", { class: "file-image", src: objectUrl, alt: path }));
    } else if (type.startsWith("text/plain") && !attachment) {
      const text = await res.text();
      const pre = h("pre", { class: "file-text code" });
      colour(pre, text, path);
      view.replaceChildren(pre);
    } else {
      view.replaceChildren(h("p", { class: "muted" }, `Not text or an image this page can show (${type || "unknown type"}): download it to open it.`));
    }
    view.dataset.loaded = type.split(";")[0];
  }

  async function save(path) {
    try {
      await api.files.download(ctx.id, path);
    } catch (err) {
      toast(err.message);
    }
  }

  async function loadChanges() {
    let answer;
    try {
      answer = await api.files.changes(ctx.id);
    } catch (err) {
      answer = { error: err };
    }
    if (closed || tab !== "changed") return;
    changedTab.textContent = answer.files ? `Changed (${answer.files.length})` : "Changed";
    if (answer.error) {
      const why = answer.error.code === "no_checkpoints" ? `Nothing to compare with: ${answer.error.message}` : answer.error.message;
      body.replaceChildren(h("p", { class: "muted files-error" }, why));
      return;
    }
    const items = answer.files.map((f) => {
      const pre = h("pre", { class: "file-diff" });
      if (f.diff) renderDiffs(pre, f.diff + "\n");
      else pre.textContent = f.note || "";
      return h(
        "details",
        { class: `changed ${f.status}`, dataset: { path: f.path, status: f.status } },
        h(
          "summary",
          {},
          h("span", { class: `status ${f.status}`, title: f.status }, f.status[0].toUpperCase()),
          h("span", { class: "name" }, f.path),
          h("span", { class: "counts" }, h("span", { class: "plus" }, `+${f.added}`), " ", h("span", { class: "minus" }, `−${f.removed}`)),
          f.others ? h("span", { class: "others", title: "Changed between this session's tasks too: the diff holds that change as well" }, "also changed by others") : null,
        ),
        pre,
      );
    });
    // `replaceChildren` writes a `null` child as the text "null": absent parts are left out.
    const parts = [
      h("p", { class: "muted" }, `Since before this session's first task${answer.sinceMs ? ` (${new Date(answer.sinceMs).toLocaleString()})` : ""}.`),
      items.length ? h("div", { class: "changed-list" }, items) : h("p", { class: "muted" }, "No file changed."),
      answer.unknown && answer.unknown.length ? h("p", { class: "muted" }, `Not compared: ${answer.unknown.join(", ")}`) : null,
    ];
    body.replaceChildren(...parts.filter(Boolean));
  }

  el.addEventListener("toggle", () => {
    if (el.open) show(tab);
  });

  return {
    el,
    // A task ended: what it changed is worth reading again, if someone is looking.
    refresh: () => {
      if (el.open && tab === "changed") loadChanges();
    },
    close: () => {
      closed = true;
      dropObjectUrl();
    },
  };
}

function parentOf(path) {
  const i = path.lastIndexOf("/");
  return i < 0 ? "" : path.slice(0, i);
}
