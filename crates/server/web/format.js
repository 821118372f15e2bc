// How the views word what the API returns: times, models, the approval modes on offer.

export const APPROVAL_MODES = ["always-ask", "read-only", "allow-all", "deny-all"];

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

export function modelOf(s) {
  return [s.provider, s.model].filter(Boolean).join(" / ") || "—";
}
