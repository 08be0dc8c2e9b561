// Boot, hash routing, polling. Owner: work item C. A view is {mount(el, params), unmount()}.
import { ApiError, enc, get, setUnauthorizedHandler } from "./api.js";
import { fmtBytes, fmtNum, fmtRate, h, mount, pager } from "./dom.js";

const routes = [];
let current = null;
let sessionDoc = null;

// session() -> the /console/api/session document read at boot ({auth, authorized, protect,
// node, features}); null before boot.
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
// tab is hidden, 10 s backoff after an error (fn's error shows in the error banner).
export function poller(fn, ms = POLL_MS) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    timer = null;
    if (stopped) return;
    let wait = ms;
    if (!document.hidden) {
      try {
        await fn();
        showError(null);
      } catch (e) {
        showError(e);
        wait = 10000;
      }
    }
    if (!stopped) timer = setTimeout(run, wait);
  };
  run();
  return {
    stop() { stopped = true; if (timer !== null) clearTimeout(timer); },
    now() { if (timer !== null) { clearTimeout(timer); run(); } },
  };
}

export function showError(e) {
  const banner = document.querySelector("[data-test=error-banner]");
  if (e === null) { banner.hidden = true; return; }
  banner.textContent = e instanceof ApiError ? `${e.reason}: ${e.detail}` : String(e);
  banner.hidden = false;
}

function dispatch() {
  const path = decodeURI(location.hash.slice(1)) === "" ? "/" : location.hash.slice(1);
  if (current) current.unmount();
  current = null;
  const el = document.getElementById("view");
  for (const r of routes) {
    const m = path.match(r.re);
    if (m) {
      const params = {};
      r.names.forEach((n, i) => { params[n] = decodeURIComponent(m[i + 1]); });
      current = r.view;
      current.mount(el, params);
      return;
    }
  }
  mount(el, h("p", { "data-test": "not-found" }, "No such page."));
}

// The overview (work item C moves it to overview.js): the queue table, paged.
const overview = {
  state: { offset: 0, limit: 50, filter: "" },
  mount(el) {
    const table = h("tbody", { "data-test": "queue-rows" });
    const totals = h("p", { "data-test": "totals" });
    const pagerBox = h("div", {});
    mount(el, h("h1", {}, "Queues"), totals,
      h("table", { class: "queues", "data-test": "queue-table" },
        h("thead", {}, h("tr", {}, ["Name", "Depth", "In flight", "Delayed", "Memory", "Push", "Pull", "Dead letters"]
          .map((t) => h("th", {}, t)))), table), pagerBox);
    const tick = async () => {
      const s = this.state;
      const doc = await get("/console/api/overview", { offset: s.offset, limit: s.limit, filter: s.filter || undefined });
      totals.textContent = `${fmtNum(doc.totals.queues)} queues, ${fmtNum(doc.totals.messages)} messages`;
      mount(table, doc.page.queues.map((q) => h("tr", { "data-test": "queue-row", "data-queue": q.name },
        h("td", {}, h("a", { href: `#/queue/${enc(q.name)}`, "data-test": "queue-link" }, q.name)),
        h("td", { class: "num", "data-test": "queue-size" }, fmtNum(q.size)),
        h("td", { class: "num", "data-test": "queue-in-flight" }, fmtNum(q.in_flight)),
        h("td", { class: "num" }, fmtNum(q.delayed)),
        h("td", { class: "num" }, fmtBytes(q.memory)),
        h("td", { class: "num" }, fmtRate(q.push_rate)),
        h("td", { class: "num" }, fmtRate(q.pull_rate)),
        h("td", { class: "num" }, q.dead_letter === null ? "—" : fmtNum(q.dead_letters)))));
      mount(pagerBox, pager({ offset: doc.page.offset, limit: doc.page.limit, total: doc.page.matched,
        onPage: (o) => { this.state.offset = o; this.poll.now(); } }));
    };
    this.poll = poller(tick);
  },
  unmount() { this.poll.stop(); },
};

async function boot() {
  setUnauthorizedHandler(() => { if (location.hash !== "#/login") location.hash = "#/login"; });
  const doc = await get("/console/api/session");
  document.querySelector("[data-test=node-name]").textContent = doc.node;
  document.querySelector("[data-test=auth-off-banner]").hidden = doc.auth !== "off";
  sessionDoc = doc;
  route("/", overview);
  // The other pages register themselves from routes.js (work item D's list). Imported only now,
  // after this module has run, so they can import from app.js at their top level.
  await import("./routes.js");
  window.addEventListener("hashchange", dispatch);
  dispatch();
}

boot().catch(showError);
