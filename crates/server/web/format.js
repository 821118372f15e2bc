// How the views word what the API returns: times, models, the approval modes on offer.

// The server's default comes first; the hints are what each mode asks (the engine's
// `ApprovalMode::describe`, in the same words).
export const APPROVAL_MODES = ["read-only", "always-ask", "allow-all", "deny-all"];
export const APPROVAL_HINTS = {
  "read-only": "asks before edits and commands; reads, searches and plans run",
  "always-ask": "asks before every tool call",
  "allow-all": "every tool call runs without asking",
  "deny-all": "every tool call is denied",
};

// An approval mode as an <option>: its name, and what it asks as the tooltip.
export const modeOption = (h, m) => h("option", { value: m, title: APPROVAL_HINTS[m] }, m);

export function relativeTime(iso) {
  if (!iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 45) return "just now";
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return new Date(t).toLocaleDateString();
}

// A session's model as its configured name (two configured models may share a provider and
// an id), else the provider and the id.
export function modelOf(s) {
  return s.modelName || [s.provider, s.model].filter(Boolean).join(" / ") || "—";
}

// Dollars as the CLI words them: cents from a dollar up, four decimals below, "$0" for nothing.
export function dollars(cost) {
  if (!cost) return "$0";
  return cost >= 1 ? `$${cost.toFixed(2)}` : `$${cost.toFixed(4)}`;
}

// What a request's token counts (`token_usage`'s `request`) cost at `price` (dollars per
// million tokens), the formula of docs/cost.md: the cached prompt at cachedInput, the rest of
// the prompt (the wire's cache_write) at cacheWrite, output at output.
export function requestCost(price, counts) {
  const n = (k) => Number(counts[k] || 0);
  return (n("cache_read") * price.cachedInput + n("cache_write") * price.cacheWrite + n("output") * price.output) / 1e6;
}
