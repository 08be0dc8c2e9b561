// The overview page (#/): totals, the node's rate chart, the cluster panel and the queue table
// (filtered, sorted and paged by the node: 10,000 queues cost one page of rows here).
// Owner: work item C.
import { enc, get } from "./api.js";
import { poller } from "./app.js";
import { lineChart } from "./chart.js";
import { clusterPanel } from "./cluster.js";
import { fmtBytes, fmtNum, fmtRate, h, mount, pager } from "./dom.js";

const FILTER_DEBOUNCE_MS = 250;
const COLUMNS = [
  // [title, sort key or null, numeric]
  ["Name", "name", false], ["Depth", "size", true], ["In flight", "in_flight", true], ["Delayed", null, true],
  ["Memory", null, true], ["Push/s", "push", true], ["Pull/s", "pull", true], ["Dead letters", null, true],
];

// Kept across visits of the page (back from a queue page: same filter, sort and page).
const state = { offset: 0, limit: 50, filter: "", sort: "name", order: "asc" };

function cells(q) {
  return [
    fmtNum(q.size), fmtNum(q.in_flight), fmtNum(q.delayed), fmtBytes(q.memory),
    fmtRate(q.push_rate), fmtRate(q.pull_rate), q.dead_letter === null ? "—" : fmtNum(q.dead_letters),
  ];
}
const CELL_TESTS = ["queue-size", "queue-in-flight", "queue-delayed", "queue-memory", "queue-push", "queue-pull", "queue-dead-letters"];

// The rows of one page. While the page shows the same queues in the same order, the rows stay
// and only their numbers change (a link under the pointer is not replaced every poll).
function queueRows(tbody) {
  let names = "";
  let tds = [];
  return (queues) => {
    const key = JSON.stringify(queues.map((q) => q.name));
    if (key !== names) {
      names = key;
      tds = [];
      mount(tbody, queues.map((q) => {
        const row = cells(q).map((text, i) => h("td", { class: "num", "data-test": CELL_TESTS[i] }, text));
        tds.push(row);
        return h("tr", { "data-test": "queue-row", "data-queue": q.name },
          h("td", { class: "name" }, h("a", { href: `#/queue/${enc(q.name)}`, "data-test": "queue-link" }, q.name)), row);
      }));
      if (queues.length === 0) {
        mount(tbody, h("tr", {}, h("td", { colspan: COLUMNS.length, class: "muted", "data-test": "queue-none" },
          state.filter ? "No queue matches the filter." : "No queues yet.")));
      }
      return;
    }
    queues.forEach((q, r) => cells(q).forEach((text, i) => {
      if (tds[r][i].textContent !== text) tds[r][i].textContent = text;
    }));
  };
}

function totalsView(el) {
  const tile = (label, test) => {
    const v = h("span", { class: "value", "data-test": test }, "—");
    el.append(h("div", { class: "tile" }, v, h("span", { class: "label" }, label)));
    return v;
  };
  const t = {
    queues: tile("queues", "totals-queues"), messages: tile("messages", "totals-messages"),
    in_flight: tile("in flight", "totals-in-flight"), push: tile("pushed/s", "totals-push"), pull: tile("pulled/s", "totals-pull"),
  };
  return (doc) => {
    t.queues.textContent = fmtNum(doc.queues);
    t.messages.textContent = fmtNum(doc.messages);
    t.in_flight.textContent = fmtNum(doc.in_flight);
    t.push.textContent = fmtRate(doc.push_rate);
    t.pull.textContent = fmtRate(doc.pull_rate);
  };
}

export const overview = {
  mount(el) {
    const tbody = h("tbody", { "data-test": "queue-rows" });
    const totals = h("div", { class: "totals", "data-test": "totals" });
    const chartBox = h("div", { class: "chart-box", "data-test": "node-chart" });
    const unavailable = h("p", { class: "banner error", "data-test": "overview-unavailable", hidden: true });
    const pagerBox = h("div", {});
    const cluster = clusterPanel();
    const filter = h("input", { type: "search", placeholder: "Filter by name", value: state.filter,
      autocomplete: "off", spellcheck: "false", "aria-label": "Filter queues by name", "data-test": "queue-filter" });
    const heads = COLUMNS.map(([title, key, num]) => {
      if (key === null) return h("th", { class: num ? "num" : null }, title);
      return h("th", { class: num ? "num" : null, "aria-sort": "none" },
        h("button", { type: "button", class: "sort", "data-test": `sort-${key}`,
          on: { click: () => {
            // The same column again flips the order; a new one starts with names A-Z, numbers largest first.
            if (state.sort === key) state.order = state.order === "asc" ? "desc" : "asc";
            else state.order = key === "name" ? "asc" : "desc";
            state.sort = key;
            state.offset = 0;
            this.poll.now();
          } } }, title));
    });
    mount(el,
      h("div", { class: "overview" },
        h("div", { class: "main-col" }, h("h1", {}, "Queues"), unavailable, totals, chartBox),
        h("aside", {}, cluster.el)),
      h("div", { class: "table-tools" }, filter),
      h("table", { class: "queues", "data-test": "queue-table" }, h("thead", {}, h("tr", {}, heads)), tbody),
      pagerBox);
    const setTotals = totalsView(totals);
    const setRows = queueRows(tbody);
    const chart = lineChart(chartBox, { window: 900, step: 2 });
    let seq = null; // the last rate point the chart has (`since` of the next request)
    let debounce = null;
    filter.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        state.filter = filter.value;
        state.offset = 0;
        this.poll.now();
      }, FILTER_DEBOUNCE_MS);
    });
    let pagerKey = "";
    const tick = async () => {
      const s = { ...state };
      const doc = await get("/console/api/overview", { offset: s.offset, limit: s.limit, filter: s.filter || undefined,
        sort: s.sort, order: s.order, since: seq === null ? undefined : seq });
      if (s.sort !== state.sort || s.order !== state.order || s.filter !== state.filter || s.offset !== state.offset) {
        return; // the user changed the view meanwhile: the next poll (started by the change) draws it
      }
      unavailable.hidden = doc.unavailable === null;
      unavailable.textContent = doc.unavailable === null ? "" : `The node cannot serve queues now: ${doc.unavailable}`;
      setTotals(doc.totals);
      cluster.update(doc.cluster);
      const r = doc.rates;
      if (r) {
        // A node that restarted numbers its points anew: start over.
        if (seq === null || r.seq < seq) chart.set(r);
        else chart.append(r);
        if (r.seq > 0) seq = r.seq;
      }
      for (const th of heads) th.removeAttribute("aria-sort");
      const active = COLUMNS.findIndex((c) => c[1] === s.sort);
      heads[active].setAttribute("aria-sort", s.order === "asc" ? "ascending" : "descending");
      setRows(doc.page.queues);
      const p = doc.page;
      const key = `${p.offset}/${p.limit}/${p.matched}/${p.total}`;
      if (key !== pagerKey) {
        pagerKey = key;
        mount(pagerBox, pager({ offset: p.offset, limit: p.limit, total: p.matched,
          onPage: (o) => { state.offset = o; this.poll.now(); } }),
        p.matched !== p.total ? h("span", { class: "muted", "data-test": "queue-matched" },
          `${fmtNum(p.matched)} of ${fmtNum(p.total)} queues match`) : null);
      }
    };
    this.poll = poller(tick);
  },
  unmount() {
    this.poll.stop();
  },
};
