// Building and updating the page's elements: the one element helper every view uses, a way to
// reorder children without losing the reader's focus, and the toast that reports failures.

export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k in e && typeof v !== "string") e[k] = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Makes `parent`'s children exactly `nodes`, moving only what is out of place: a node taken
// out of the document, even to be put back at once, loses focus, so someone typing in a kept
// row would find the next keys going nowhere.
export function placeChildren(parent, nodes) {
  const focused = document.activeElement;
  const selection = focused && "selectionStart" in focused ? [focused.selectionStart, focused.selectionEnd] : null;
  nodes.forEach((node, i) => {
    if (parent.children[i] !== node) parent.insertBefore(node, parent.children[i] || null);
  });
  while (parent.children.length > nodes.length) parent.lastElementChild.remove();
  if (focused && focused !== document.activeElement && focused.isConnected) {
    focused.focus();
    try {
      if (selection) focused.setSelectionRange(...selection);
    } catch {
      // Not every input type has a selection to put back.
    }
  }
}

let toastTimer = null;
export function toast(message, kind = "error") {
  let t = document.getElementById("toast");
  if (!t) {
    t = h("div", { id: "toast", role: "status" });
    document.body.append(t);
  }
  t.textContent = message;
  t.className = `toast ${kind}`;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (t.hidden = true), 6000);
}
