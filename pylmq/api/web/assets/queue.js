// The queue page (#/queue/NAME): counts, dead-letter link, purge/delete, and the props, push
// and peek panels. Owner: work item D. The name is only ever text, or enc()'d in a path.
import { ApiError, enc, get, send } from "./api.js";
import { confirm, fmtBytes, fmtNum, fmtRate, h, mount } from "./dom.js";
import { poller, session, showError } from "./app.js";
import { lineChart } from "./chart.js";
import { peekPanel } from "./peek.js";
import { propsPanel } from "./props.js";
import { pushPanel } from "./push.js";

// queue.css is this page's; loaded once, the first time a queue page opens.
function loadStyle() {
  if (document.querySelector('link[href="queue.css"]')) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = "queue.css";
  document.head.append(link);
}

function tile(label, test) {
  const value = h("span", { class: "value", "data-test": test }, "—");
  return [h("div", { class: "tile" }, h("span", { class: "label" }, label), value), value];
}

export const queueView = {
  mount(el, params) {
    // One page's state: a late answer of a page already left never touches the next one.
    const page = { stopped: false, poll: null, ticking: null };
    this.page = page;
    loadStyle();
    showQueue(el, params.name, page).catch(showError);
  },
  unmount() {
    this.page.stopped = true;
    if (this.page.poll) this.page.poll.stop();
  },
};

async function showQueue(el, name, page) {
  const doc = session() ?? (await get("/console/api/session"));
  if (page.stopped) return;
  const features = doc.features;
  const tiles = {};
  const tileEls = [["Depth", "queue-depth"], ["Visible", "queue-visible"], ["In flight", "queue-in-flight"],
    ["Delayed", "queue-delayed"], ["Memory", "queue-memory"], ["Push /s (1 min)", "queue-push-rate"],
    ["Pull /s (1 min)", "queue-pull-rate"]].map(([label, test]) => {
    const [t, v] = tile(label, test);
    tiles[test] = v;
    return t;
  });
  const missing = h("p", { class: "banner error", "data-test": "queue-missing", hidden: true }, `No queue named ${name}.`);
  const dlq = h("p", { class: "dlq", "data-test": "queue-dlq" });
  const virtualOf = h("p", { class: "muted", "data-test": "queue-virtual-of" });
  const status = h("p", { class: "status", "data-test": "queue-status", role: "status" });
  const chartBox = h("div", { class: "chart-box", "data-test": "queue-chart" });
  const chart = lineChart(chartBox, { window: 900, step: 2, label: `push and pull rates of ${name}` });
  const untracked = h("p", { class: "note", "data-test": "queue-chart-untracked", hidden: true },
    "No rate history is kept for this queue now (too many queues are busy): the tiles show its one-minute rates.");
  let seq = null; // the last rate point the chart has (`since` of the next request)
  const changed = () => { if (page.poll) page.poll.now(); };
  const start = () => { if (!page.stopped) page.poll = poller(() => (page.ticking = tick())); };
  const props = propsPanel(name, { features, onChange: changed });
  const push = pushPanel(name, { features, onChange: () => { changed(); peek.refresh(); } });
  const peek = peekPanel(name, { features, onChange: changed });

  const quiet = async () => {
    // No poll while a purge or delete runs: its answer would race the change (a 404 logged).
    page.poll.stop();
    await page.ticking;
  };
  const purge = async () => {
    if (!(await confirm(`Purge ${name}? Every message in it is deleted; its own props are kept.`))) return;
    await quiet();
    try {
      const got = await send("POST", "/purge/" + enc(name));
      status.textContent = `purged ${fmtNum(got.purged)}`;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      status.textContent = `${e.reason}: ${e.detail}`;
    }
    start();
    peek.refresh();
  };
  const remove = async () => {
    if (!(await confirm(`Delete the queue ${name} and its messages?`, { typeName: name }))) return;
    await quiet();
    try {
      await send("DELETE", "/queues/" + enc(name));
      location.hash = "#/";
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      status.textContent = `${e.reason}: ${e.detail}`;
      start();
    }
  };

  mount(el, h("div", { class: "queue-page" },
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Queues"), " / "),
    h("h1", { "data-test": "queue-name" }, name),
    missing,
    h("div", { class: "tiles", "data-test": "queue-tiles" }, tileEls),
    chartBox, untracked,
    dlq, virtualOf,
    h("div", { class: "actions" },
      h("button", { type: "button", class: "danger", "data-test": "queue-purge", on: { click: purge } }, "Purge…"),
      h("button", { type: "button", class: "danger", "data-test": "queue-delete", on: { click: remove } }, "Delete…"),
      status),
    h("div", { class: "columns" }, props.el, push.el),
    peek.el));

  const tick = async () => {
    let doc;
    try {
      doc = await get("/console/api/queue/" + enc(name), { since: seq === null ? undefined : seq });
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) { missing.hidden = false; return; }
      throw e;
    }
    missing.hidden = true;
    const c = doc.counts;
    tiles["queue-depth"].textContent = fmtNum(c.size);
    tiles["queue-visible"].textContent = fmtNum(c.visible);
    tiles["queue-in-flight"].textContent = fmtNum(c.in_flight);
    tiles["queue-delayed"].textContent = fmtNum(c.delayed);
    tiles["queue-memory"].textContent = fmtBytes(doc.memory);
    tiles["queue-push-rate"].textContent = fmtRate(doc.meters.push.one);
    tiles["queue-pull-rate"].textContent = fmtRate(doc.meters.pull.one);
    mount(dlq, doc.dead_letter === null ? "No dead-letter queue." : ["Dead letters go to ",
      h("a", { href: `#/queue/${enc(doc.dead_letter)}`, "data-test": "queue-dlq-link" }, doc.dead_letter),
      doc.dead_letters === null ? " (not created yet)" : [": ", h("span", { "data-test": "queue-dlq-count" }, fmtNum(doc.dead_letters))]]);
    virtualOf.textContent = doc.virtual_of.length ? `Member of the virtual queue(s): ${doc.virtual_of.join(", ")}` : "";
    props.update(doc);
    const r = doc.rates;
    untracked.hidden = r !== null;
    if (r === null) {
      seq = null; // when the queue gets a ring again, its whole history comes at once
    } else {
      // A node that restarted numbers its points anew: start over.
      if (seq === null || r.seq < seq) chart.set(r);
      else chart.append(r);
      if (r.seq > 0) seq = r.seq;
    }
  };
  start();
  peek.refresh();
}
