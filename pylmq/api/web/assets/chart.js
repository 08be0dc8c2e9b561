// A small SVG line chart of the node's push and pull rates over a fixed window (15 min).
// Owner: work item C. Hand-written rather than a vendored library: two series of at most 450
// points is all it draws. Drawn through dom.h (classes, no style attributes: CSP style-src 'self').
import { fmtRate, h, mount } from "./dom.js";

const W = 900;
const H = 180;
const PAD = { left: 56, right: 10, top: 10, bottom: 22 };
const SERIES = ["push", "pull"];

// A "nice" upper bound of the y axis (1, 2, 5 x 10^n) at or above max.
function niceMax(max) {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function clock(t) {
  const d = new Date(t * 1000);
  return `${String(d.getUTCHours()).padStart(2, "0")}:${String(d.getUTCMinutes()).padStart(2, "0")}`;
}

// lineChart(el, {window, step, label}) -> {set(rates), append(rates), points()}.
// rates = {t: [epoch s], push: [per s], pull: [per s]} (the API's `rates`); set replaces the
// points, append adds newer ones; points older than `window` seconds before the newest drop.
export function lineChart(el, opts = {}) {
  const windowS = opts.window || 900;
  const step = opts.step || 2;
  const cap = Math.ceil(windowS / step) + 1;
  let t = [];
  const data = { push: [], pull: [] };
  const svg = h("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": opts.label || "push and pull rates", "data-test": "chart" });
  const readout = h("div", { class: "chart-readout", "data-test": "chart-readout" }, "\u00a0");
  const legend = h("div", { class: "chart-legend" },
    h("span", { class: "key push" }, "push/s"), " ", h("span", { class: "key pull" }, "pull/s"),
    h("span", { class: "muted" }, ` · last ${Math.round(windowS / 60)} min, this node`));
  mount(el, legend, svg, readout);

  const x0 = PAD.left;
  const x1 = W - PAD.right;
  const y0 = H - PAD.bottom;
  const y1 = PAD.top;
  let scale = null;

  function trim() {
    const newest = t.length ? t[t.length - 1] : 0;
    let cut = 0;
    while (cut < t.length && (t[cut] < newest - windowS || t.length - cut > cap)) cut += 1;
    if (cut > 0) {
      t = t.slice(cut);
      for (const s of SERIES) data[s] = data[s].slice(cut);
    }
  }

  function draw() {
    const end = t.length ? t[t.length - 1] : 0;
    const start = end - windowS;
    let max = 0;
    for (const s of SERIES) for (const v of data[s]) if (v > max) max = v;
    const top = niceMax(max);
    const sx = (x) => x0 + ((x - start) / windowS) * (x1 - x0);
    const sy = (v) => y0 - (v / top) * (y0 - y1);
    scale = { sx, start, end };
    const grid = [0, 0.5, 1].map((f) => [
      h("line", { class: "grid", x1: x0, x2: x1, y1: sy(top * f), y2: sy(top * f) }),
      h("text", { class: "axis y", x: x0 - 6, y: sy(top * f) + 4 }, fmtRate(top * f)),
    ]);
    const ticks = [];
    if (t.length) {
      for (let m = 0; m <= windowS; m += 300) {
        ticks.push(h("text", { class: "axis x", x: sx(end - m), y: H - 6 }, m === 0 ? clock(end) : `-${m / 60} min`));
      }
    } else {
      ticks.push(h("text", { class: "axis empty", x: (x0 + x1) / 2, y: (y0 + y1) / 2, "data-test": "chart-empty" },
        "collecting rates…"));
    }
    const lines = SERIES.map((s) => {
      const vals = data[s];
      const pts = vals.map((v, i) => `${sx(t[i]).toFixed(1)},${sy(v).toFixed(1)}`).join(" ");
      return h("polyline", { class: `series ${s}`, points: pts, "data-test": `chart-${s}`,
        "data-count": vals.length, "data-last": vals.length ? vals[vals.length - 1] : "",
        "data-max": vals.length ? Math.max(...vals) : "" });
    });
    const cursor = h("line", { class: "cursor", x1: -10, x2: -10, y1: y1, y2: y0, "data-test": "chart-cursor" });
    mount(svg, grid, ticks, lines, cursor);
  }

  // Hover: the values at the nearest point, as text under the chart.
  svg.addEventListener("mousemove", (ev) => {
    if (!scale || t.length === 0) return;
    const box = svg.getBoundingClientRect();
    const x = ((ev.clientX - box.left) / box.width) * W;
    const at = scale.start + ((x - x0) / (x1 - x0)) * windowS;
    let best = 0;
    for (let i = 1; i < t.length; i += 1) if (Math.abs(t[i] - at) < Math.abs(t[best] - at)) best = i;
    const cx = scale.sx(t[best]).toFixed(1);
    const cursor = svg.querySelector(".cursor");
    cursor.setAttribute("x1", cx);
    cursor.setAttribute("x2", cx);
    readout.textContent = `${new Date(t[best] * 1000).toISOString().slice(11, 19)} UTC: ` +
      `push ${fmtRate(data.push[best])}, pull ${fmtRate(data.pull[best])}`;
  });
  svg.addEventListener("mouseleave", () => { readout.textContent = "\u00a0"; });

  // Adds the points newer than the newest one held; says how many.
  function add(rates) {
    const n = Math.min(rates.t.length, rates.push.length, rates.pull.length);
    let added = 0;
    for (let i = 0; i < n; i += 1) {
      if (t.length && rates.t[i] <= t[t.length - 1]) continue; // already have it
      t.push(rates.t[i]);
      data.push.push(rates.push[i]);
      data.pull.push(rates.pull[i]);
      added += 1;
    }
    return added;
  }

  draw();
  return {
    set(rates) {
      t = [];
      data.push = [];
      data.pull = [];
      add(rates);
      trim();
      draw();
    },
    append(rates) {
      if (add(rates) === 0) return; // nothing new: the drawing stays as it is
      trim();
      draw();
    },
    points() { return t.length; },
  };
}
