// Small formatters shared by the widgets. "—" stands for a number nobody measured (null).
export const DASH = "—";

export function num(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return DASH;
  return Number(value).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

export function pct(value, digits = 1) {
  return value === null || value === undefined ? DASH : `${num(value, digits)}%`;
}

export function megabytes(mb) {
  if (mb === null || mb === undefined) return DASH;
  return mb >= 1024 ? `${num(mb / 1024, 1)} GB` : `${num(mb, 0)} MB`;
}

export function seconds(value) {
  if (value === null || value === undefined) return DASH;
  return value < 1 ? `${num(value * 1000, 0)} ms` : `${num(value, 2)} s`;
}

export function duration(totalSeconds) {
  if (totalSeconds === null || totalSeconds === undefined) return DASH;
  let s = Math.floor(totalSeconds);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

export function age(isoTime) {
  const s = Math.max(0, (Date.now() - Date.parse(isoTime)) / 1000);
  return s < 60 ? `${Math.floor(s)}s ago` : `${duration(s)} ago`;
}

// "chatcmpl-3f2a9c…": enough of an id to tell rows apart; the full id goes in a title.
export function shortId(id, keep = 8) {
  if (!id) return "";
  const cut = id.indexOf("-");
  return cut < 0 ? id.slice(0, keep) : `${id.slice(0, cut + 1 + keep)}…`;
}
