// The console's only way to the node: fetch with the credential (if any) as a header.
// Owner: work item C. Signatures are the contract other modules build on.

const TOKEN_KEY = "pylmq.token";

export class ApiError extends Error {
  constructor(status, reason, detail) {
    super(`${status} ${reason}: ${detail}`);
    this.status = status;
    this.reason = reason;
    this.detail = detail;
  }
}

// A queue name as one path segment (names may hold "/", "%", "?", "#", spaces, unicode).
export function enc(name) {
  return encodeURIComponent(name);
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

function url(path, query) {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null) qs.set(k, String(v));
  }
  const s = qs.toString();
  return s ? `${path}?${s}` : path;
}

// Called on every 401 (set by app.js: it routes to #/login).
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

// send(method, path, {query, body, type}) -> parsed JSON, text, or null (204).
// path is absolute ("/console/api/overview", "/messages/" + enc(name)).
export async function send(method, path, opts = {}) {
  return (await exchange(method, path, opts)).data;
}

// getWithHeaders(path, query) -> {data, headers}: for answers that say more in a header.
export function getWithHeaders(path, query) {
  return exchange("GET", path, { query });
}

async function exchange(method, path, opts) {
  const headers = {};
  const token = getToken();
  if (token) headers["Authorization"] = `Bearer ${token}`;
  let body = opts.body;
  if (body !== undefined && opts.type === undefined && typeof body !== "string" && !(body instanceof Blob)) {
    body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  } else if (opts.type !== undefined) {
    headers["Content-Type"] = opts.type;
  }
  const resp = await fetch(url(path, opts.query), { method, headers, body, cache: "no-store", credentials: "omit" });
  const ctype = resp.headers.get("Content-Type") || "";
  const data = resp.status === 204 ? null : ctype.startsWith("application/json") ? await resp.json() : await resp.text();
  if (!resp.ok) {
    const reason = data && data.error ? data.error : String(resp.status);
    const detail = data && data.detail ? data.detail : resp.statusText;
    if (resp.status === 401) onUnauthorized();
    throw new ApiError(resp.status, reason, detail);
  }
  return { data, headers: resp.headers };
}

export function get(path, query) {
  return send("GET", path, { query });
}
