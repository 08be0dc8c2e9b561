// The cluster panel of the overview: this node's runtime and store, the cluster mode, and every
// node with its runtime and state (a stalled peer highlighted). Owner: work item C.
import { fmtAge, h, mount } from "./dom.js";

// What a mode means to an operator (the API's `mode`; null: not part of an Erlang cluster).
function modeText(c) {
  switch (c.mode) {
    case null:
    case undefined:
      return { text: "standalone node", warn: false };
    case "cluster":
      return { text: "joined: queues kept in the Erlang cluster's Mnesia tables", warn: false };
    case "local":
      return { text: "joined: queues kept in this node's own store", warn: false };
    case "standalone":
      return { text: "cut off from the cluster: serving alone", warn: true };
    case "rejoining":
      return { text: "rejoining the cluster: queue routes answer 503 meanwhile", warn: true };
    default:
      return { text: String(c.mode), warn: true };
  }
}

// clusterPanel() -> {el, update(cluster)}; update re-renders only when the document changed.
export function clusterPanel() {
  const el = h("section", { class: "cluster", "data-test": "cluster" });
  let last = "";
  function update(c) {
    const key = JSON.stringify(c);
    if (key === last) return;
    last = key;
    const mode = modeText(c);
    const stalled = c.nodes.filter((n) => n.state === "stalled").length;
    const rows = c.nodes.map((n) => h("tr", { class: n.state === "stalled" ? "stalled" : null, "data-test": "cluster-node",
      "data-node": n.name, "data-state": n.state },
      h("td", { "data-test": "cluster-node-name" }, n.name, n.self ? h("span", { class: "muted" }, " (this node)") : null),
      h("td", { "data-test": "cluster-runtime" }, n.runtime),
      h("td", { "data-test": "cluster-state" }, n.state),
      h("td", { class: "num", "data-test": "cluster-silent" }, n.silent_for === null ? "—" : `${fmtAge(n.silent_for)}`)));
    mount(el,
      h("h2", {}, "Cluster"),
      h("p", { class: mode.warn ? "banner warn" : "mode", "data-test": "cluster-mode", "data-mode": c.mode || "none" },
        mode.text, c.mode_detail ? `: ${c.mode_detail}` : null),
      h("dl", { class: "facts" },
        h("dt", {}, "Node"), h("dd", { "data-test": "cluster-self" }, c.node),
        h("dt", {}, "Runtime"), h("dd", { "data-test": "cluster-self-runtime" }, c.runtime),
        h("dt", {}, "Store"), h("dd", { "data-test": "cluster-store" }, c.store)),
      c.store === "postgres" ? h("p", { class: "muted", "data-test": "cluster-note" },
        "Queues are shared through PostgreSQL; peers are not listed.") : null,
      stalled ? h("p", { class: "banner error", "data-test": "cluster-stalled" },
        `${stalled} node${stalled > 1 ? "s" : ""} stalled`) : null,
      h("table", { class: "nodes", "data-test": "cluster-nodes" },
        h("thead", {}, h("tr", {}, h("th", {}, "Node"), h("th", {}, "Runtime"), h("th", {}, "State"), h("th", { class: "num" }, "Silent"))),
        h("tbody", {}, rows)));
  }
  return { el, update };
}
