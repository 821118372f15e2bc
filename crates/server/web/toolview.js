// How a tool card shows a call's arguments and its output to a person, rather than as raw JSON:
// a command as `$ cmd`, a file tool as its path, a plan as a checklist, and unified diffs (from
// write_file, edit_file, apply_patch) as a diff view. Every view is built with textContent, never
// HTML, so nothing a model or a command writes can become markup.

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function parse(args) {
  try {
    const v = JSON.parse(args);
    return v && typeof v === "object" && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

const MARKS = { completed: "[x]", in_progress: "[~]", pending: "[ ]" };

// The checklist of an `update_plan` call: `{explanation?, plan: [{step, status}]}`.
export function planView(args) {
  const v = parse(args);
  if (!v || !Array.isArray(v.plan)) return null;
  const box = el("div", "plan");
  if (typeof v.explanation === "string" && v.explanation) box.append(el("p", "plan-why", v.explanation));
  const ul = el("ul", "checklist");
  for (const s of v.plan) {
    const status = MARKS[s && s.status] ? s.status : "pending";
    const li = el("li", `step step-${status}`);
    li.dataset.status = status;
    li.append(el("span", "box", MARKS[status]), el("span", "text", String((s && s.step) || "")));
    ul.append(li);
  }
  box.append(ul);
  return box;
}

// One line for calls a person reads at a glance; null keeps the JSON view.
export function argsLine(name, args) {
  const v = parse(args);
  if (!v) return null;
  const str = (k) => (typeof v[k] === "string" ? v[k] : null);
  switch (name) {
    case "exec_command":
    case "bash":
    case "shell": {
      const cmd = str("cmd") ?? str("command");
      return cmd === null ? null : `$ ${cmd}`;
    }
    case "read_file":
    case "write_file":
    case "edit_file":
    case "read_image":
      return str("path");
    case "list_files":
    case "grep_files": {
      const what = str("pattern") ?? "";
      const where = str("path");
      return where ? `${what} in ${where}` : what || null;
    }
    default:
      return null;
  }
}

// Whether lines[i] starts a unified diff: `--- a/P` or `--- /dev/null`, then `+++ b/P`.
function diffStart(lines, i) {
  return /^--- (a\/|\/dev\/null)/.test(lines[i]) && i + 1 < lines.length && /^\+\+\+ (b\/|\/dev\/null)/.test(lines[i + 1]);
}

// Fills `pre` with `text`, unified diffs in it shown line by line with their kinds (`add`,
// `del`, `hunk`, `head`). Returns whether there was a diff.
export function renderDiffs(pre, text) {
  const lines = text.split("\n");
  let found = false;
  let inDiff = false;
  const frag = document.createDocumentFragment();
  let plain = [];
  const flush = () => {
    if (plain.length) frag.append(document.createTextNode(plain.join("\n") + "\n"));
    plain = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (diffStart(lines, i)) {
      found = inDiff = true;
      flush();
      frag.append(el("span", "diff-line head", line + "\n"), el("span", "diff-line head", lines[i + 1] + "\n"));
      i++;
      continue;
    }
    if (inDiff) {
      const kind = line.startsWith("@@")
        ? "hunk"
        : line.startsWith("+")
          ? "add"
          : line.startsWith("-")
            ? "del"
            : line.startsWith(" ") || line.startsWith("\\")
              ? "ctx"
              : null;
      if (kind) {
        frag.append(el("span", `diff-line ${kind}`, line + "\n"));
        continue;
      }
      inDiff = false;
    }
    plain.push(line);
  }
  if (!found) return false;
  // The last line had no newline of its own.
  if (plain.length && plain[plain.length - 1] === "") plain.pop();
  flush();
  pre.replaceChildren(frag);
  pre.classList.add("has-diff");
  return true;
}
