// The token and the JSON API.
//
// The token arrives in the URL fragment (`#token=…`), which browsers never send to a server,
// and is kept in sessionStorage: it lives as long as the tab and is not shared with other
// sites. It is removed from the address bar at once so it does not end up in a bookmark, a
// shared link or a screenshot.

const TOKEN_KEY = "penguin.token";

export function takeTokenFromFragment() {
  const hash = location.hash.startsWith("#") ? location.hash.slice(1) : "";
  if (!hash) return false;
  const params = new URLSearchParams(hash);
  const token = params.get("token");
  if (token === null) return false;
  params.delete("token");
  const rest = params.toString();
  history.replaceState(history.state, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  if (token.trim() === "") return false;
  sessionStorage.setItem(TOKEN_KEY, token.trim());
  return true;
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t.trim());
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Every API call: JSON in and out, the token as a bearer header. A 401 signs the page out
// (the token is wrong or the server was restarted with another one).
export async function call(method, path, body, { signOutOn401 = true } = {}) {
  const headers = { Authorization: `Bearer ${token() || ""}` };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, "network", `cannot reach the server (${err.message})`);
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const e = data && data.error ? data.error : { code: "http_" + res.status, message: text || res.statusText };
    if (res.status === 401 && signOutOn401) {
      clearToken();
      window.dispatchEvent(new CustomEvent("penguin:signed-out", { detail: e.message }));
    }
    throw new ApiError(res.status, e.code, e.message);
  }
  return data;
}

const enc = encodeURIComponent;

// Whether the stored token is this server's, without signing out when it is not.
export async function checkToken() {
  await call("GET", "/api/sessions", undefined, { signOutOn401: false });
}

// A failed model request in the CLI's words: {kind, cause, hint, ended}.
export const explain = (failure) => call("POST", "/api/explain", failure);

// The agent's memory: its scopes and their notes.
export const memory = () => call("GET", "/api/memory");

// Tokens and cost added up from the traces: {groupBy, rows, total}; `query` as URLSearchParams.
export const usage = (query) => call("GET", `/api/usage?${query}`);

// A model's price, dollars per million tokens: {price: {input, cachedInput, cacheWrite, output} | null}.
export const price = (provider, model) =>
  call("GET", `/api/price?provider=${enc(provider || "")}&model=${enc(model || "")}`);

// The models a session may be created with, the default first.
export const models = () => call("GET", "/api/models");

// config.toml's models changed (each answers the list after the change), tested, and an
// endpoint asked for its own list.
export const modelAdmin = {
  add: (body) => call("POST", "/api/models", body),
  change: (name, body) => call("PUT", `/api/models/${enc(name)}`, body),
  makeDefault: (name) => call("PUT", `/api/models/${enc(name)}`, { default: true }),
  remove: (name) => call("DELETE", `/api/models/${enc(name)}`),
  test: (name) => call("POST", "/api/models/test", { model: name }),
  discover: (body) => call("POST", "/api/models/discover", body),
};

export const sessions = {
  list: (query) => call("GET", `/api/sessions${query ? `?${query}` : ""}`),
  get: (id) => call("GET", `/api/sessions/${enc(id)}`),
  create: (body) => call("POST", "/api/sessions", body),
  patch: (id, body) => call("PATCH", `/api/sessions/${enc(id)}`, body),
  remove: (id) => call("DELETE", `/api/sessions/${enc(id)}`),
  messages: (id, query) => call("GET", `/api/sessions/${enc(id)}/messages${query ? `?${query}` : ""}`),
  task: (id, text, queueIfBusy, images, skills, thinkingLevel) =>
    call("POST", `/api/sessions/${enc(id)}/tasks`, {
      input: [
        ...(text.trim() ? [{ type: "text", text }] : []),
        ...(images || []).map((imageUrl) => ({ type: "image_url", imageUrl })),
      ],
      queueIfBusy: !!queueIfBusy,
      ...(skills && skills.length ? { skills } : {}),
      ...(thinkingLevel ? { thinkingLevel } : {}),
    }),
  skills: (id) => call("GET", `/api/sessions/${enc(id)}/skills`),
  fork: (id) => call("POST", `/api/sessions/${enc(id)}/fork`, {}),
  rewind: (id, body) => call("POST", `/api/sessions/${enc(id)}/rewind`, body),
  processes: (id) => call("GET", `/api/sessions/${enc(id)}/processes`),
  removeProcess: (id, process) => call("DELETE", `/api/sessions/${enc(id)}/processes/${enc(process)}`),
  goal: (id, text, budget, thinkingLevel) =>
    call("POST", `/api/sessions/${enc(id)}/tasks`, {
      input: [{ type: "text", text }],
      goal: budget ? { budget } : true,
      ...(thinkingLevel ? { thinkingLevel } : {}),
    }),
  goalState: (id) => call("GET", `/api/sessions/${enc(id)}/goal`),
  steer: (id, text) => call("POST", `/api/sessions/${enc(id)}/steer`, { text }),
  unsteer: (id, steerId) => call("DELETE", `/api/sessions/${enc(id)}/steer/${enc(steerId)}`),
  removeFollowUp: (id, fid) => call("DELETE", `/api/sessions/${enc(id)}/follow-ups/${enc(fid)}`),
  decide: (id, callId, decision) => call("POST", `/api/sessions/${enc(id)}/approvals/${enc(callId)}`, { decision }),
  abort: (id) => call("POST", `/api/sessions/${enc(id)}/abort`),
  retryNow: (id) => call("POST", `/api/sessions/${enc(id)}/retry-now`),
  compact: (id) => call("POST", `/api/sessions/${enc(id)}/compact`),
};

// An EventSource or a WebSocket cannot send headers: the stream routes take the token as a query.
export function streamUrl(path) {
  return `${path}?access_token=${enc(token() || "")}`;
}

// A session's Trace as a file the browser saves (`GET /api/sessions/{id}/trace`, which needs
// the token in a header a plain link cannot carry).
export async function downloadTrace(id) {
  const res = await fetch(`/api/sessions/${encodeURIComponent(id)}/trace`, {
    headers: { Authorization: `Bearer ${token()}` },
  });
  if (!res.ok) throw new ApiError(res.status, "download_failed", `the trace could not be downloaded (${res.status})`);
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = `${id}.jsonl`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// A session's workspace files: a folder's entries, what the session changed, and a file's
// bytes (a raw Response: text, an image, or an attachment), previewed or saved.
async function fileResponse(id, path, download) {
  const url = `/api/sessions/${enc(id)}/files/content?path=${enc(path)}${download ? "&download=1" : ""}`;
  let res;
  try {
    res = await fetch(url, { headers: { Authorization: `Bearer ${token() || ""}` }, cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, "network", `cannot reach the server (${err.message})`);
  }
  if (!res.ok) {
    let e = { code: `http_${res.status}`, message: res.statusText };
    try {
      e = (await res.json()).error || e;
    } catch {
      // Not the API's JSON: the status says it.
    }
    throw new ApiError(res.status, e.code, e.message);
  }
  return res;
}

export const files = {
  list: (id, path) => call("GET", `/api/sessions/${enc(id)}/files?path=${enc(path || "")}`),
  changes: (id) => call("GET", `/api/sessions/${enc(id)}/files/changes`),
  content: (id, path) => fileResponse(id, path, false),
  download: async (id, path) => {
    const res = await fileResponse(id, path, true);
    const url = URL.createObjectURL(await res.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = path.split("/").pop() || "file";
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  },
};
