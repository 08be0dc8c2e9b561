// Boot, hash routing, polling. Owner: work item C. A view is {mount(el, params), unmount()}.
// Pages: "/" (overview.js), "/login" (login.js); the others come from routes.js (work item D).
import { ApiError, get, getToken, setUnauthorizedHandler } from "./api.js";
import { h, mount } from "./dom.js";

const routes = [];
let current = null;
let sessionDoc = null;

// session() -> the /console/api/session document ({auth, authorized, protect, node, features});
// null before boot. Read again after a login (refreshSession).
export function session() {
  return sessionDoc;
}

// route(pattern, view): pattern like "/queue/:name"; params are decoded.
export function route(pattern, view) {
  const names = [];
  const re = new RegExp("^" + pattern.replace(/:([a-z]+)/g, (_, n) => { names.push(n); return "([^/]+)"; }) + "$");
  routes.push({ re, names, view });
}

// ?poll=MS in the page URL (tests: 500) overrides the 2-s poll.
export const POLL_MS = Number(new URLSearchParams(location.search).get("poll")) || 2000;

// poller(fn, ms) -> {stop(), now()}: runs fn every ms, one call in flight, paused while the
// tab is hidden, 10 s backoff after an error (fn's error shows in the error banner). now()
// runs fn at once, or right after the call in flight (the page's own action shows at once).
export function poller(fn, ms = POLL_MS) {
  let timer = null;
  let stopped = false;
  let running = false;
  let again = false;
  const run = async () => {
    timer = null;
    if (stopped) return;
    let wait = ms;
    if (!document.hidden) {
      running = true;
      try {
        await fn();
        if (!stopped) showError(null);
      } catch (e) {
        // A stopped poller's page is gone (e.g. a 401 moved to the login): its error is moot.
        if (!stopped) showError(e);
        wait = 10000;
      } finally {
        running = false;
      }
    }
    if (again) { again = false; wait = 0; }
    if (!stopped) timer = setTimeout(run, wait);
  };
  // A hidden tab skips its polls; coming back it polls at once rather than after the wait.
  const onVisible = () => { if (!document.hidden && timer !== null) { clearTimeout(timer); run(); } };
  document.addEventListener("visibilitychange", onVisible);
  run();
  return {
    stop() {
      stopped = true;
      document.removeEventListener("visibilitychange", onVisible);
      if (timer !== null) clearTimeout(timer);
    },
    now() {
      if (running) again = true;
      else if (timer !== null) { clearTimeout(timer); run(); }
    },
  };
}

export function showError(e) {
  const banner = document.querySelector("[data-test=error-banner]");
  if (e === null) { banner.hidden = true; return; }
  banner.textContent = e instanceof ApiError ? `${e.reason}: ${e.detail}` : String(e);
  banner.hidden = false;
}

export async function refreshSession() {
  sessionDoc = await get("/console/api/session");
  document.querySelector("[data-test=node-name]").textContent = sessionDoc.node;
  document.querySelector("[data-test=auth-off-banner]").hidden = sessionDoc.auth !== "off";
  document.querySelector("[data-test=nav-login]").hidden = sessionDoc.auth === "off";
  return sessionDoc;
}

// Where the login page sends the user back to.
export let afterLogin = "#/";

function dispatch() {
  const path = location.hash.slice(1) || "/";
  if (current) current.unmount();
  current = null;
  const el = document.getElementById("view");
  // Auth on and no (valid) credential: every console request would be refused, so ask first.
  if (sessionDoc && sessionDoc.auth === "on" && !sessionDoc.authorized && path !== "/login") {
    afterLogin = `#${path}`;
    location.replace("#/login");
    return;
  }
  for (const r of routes) {
    const m = path.match(r.re);
    if (!m) continue;
    const params = {};
    try {
      r.names.forEach((n, i) => { params[n] = decodeURIComponent(m[i + 1]); });
    } catch {
      break; // a malformed %-escape: no such page
    }
    current = r.view;
    current.mount(el, params);
    return;
  }
  mount(el, h("p", { "data-test": "not-found" }, "No such page."));
}

async function boot() {
  setUnauthorizedHandler(() => {
    // The credential was refused (changed on the node, or forgotten): ask for one.
    if (sessionDoc) sessionDoc.authorized = false;
    if (location.hash !== "#/login") dispatch();
  });
  await refreshSession();
  if (getToken() && !sessionDoc.authorized) showError(new Error("the stored credential is refused: log in again"));
  // Imported here, after this module ran, so pages may import from app.js at their top level.
  const [{ overview }, { login }] = await Promise.all([import("./overview.js"), import("./login.js")]);
  route("/", overview);
  route("/login", login);
  await import("./routes.js");
  window.addEventListener("hashchange", dispatch);
  dispatch();
}

boot().catch(showError);
