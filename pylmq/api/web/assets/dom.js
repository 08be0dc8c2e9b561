// DOM building without HTML strings: text through textContent, attributes on an allow-list.
// Owner: work item C. No innerHTML/outerHTML/insertAdjacentHTML/document.write/eval anywhere.

const ATTRS = new Set([
  "class", "id", "href", "title", "type", "name", "value", "placeholder", "disabled", "hidden",
  "colspan", "rowspan", "for", "min", "max", "step", "autocomplete", "checked", "selected",
  "readonly", "rows", "cols", "role", "tabindex", "open", "lang", "width", "height", "viewBox",
  "points", "d", "x", "y", "x1", "x2", "y1", "y2", "fill", "stroke", "stroke-width", "spellcheck",
]);

// h(tag, attrs, ...children): attrs may hold allowed attributes, data-* / aria-*, and
// on: {event: handler} (listeners, never on* attributes). Children: nodes, strings, numbers,
// arrays of them; null/undefined/false are skipped.
export function h(tag, attrs, ...children) {
  const svg = tag === "svg" || tag === "polyline" || tag === "line" || tag === "path" || tag === "g" || tag === "text";
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "on") {
      for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    } else if (v === null || v === undefined || v === false) {
      continue;
    } else if (ATTRS.has(k) || k.startsWith("data-") || k.startsWith("aria-")) {
      if (k === "href" && !String(v).startsWith("#/")) throw new Error(`href must be a #/ route, got ${v}`);
      el.setAttribute(k, v === true ? "" : String(v));
    } else {
      throw new Error(`attribute not allowed: ${k}`);
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// Replace all children of el.
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtNum(n) {
  return n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US");
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function fmtRate(r) {
  if (r === null || r === undefined) return "—";
  return `${Number(r).toFixed(r < 10 ? 2 : 1)}/s`;
}

export function fmtAge(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Number(seconds);
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// confirm(text, {typeName}) -> Promise<bool>, in the page's <dialog>; with typeName the user
// must type it before "Confirm" is enabled (delete a queue).
export function confirm(text, opts = {}) {
  const dialog = document.getElementById("dialog");
  return new Promise((resolve) => {
    const input = opts.typeName ? h("input", { type: "text", "data-test": "confirm-input", autocomplete: "off" }) : null;
    const ok = h("button", { type: "button", "data-test": "confirm-ok", disabled: Boolean(opts.typeName) }, "Confirm");
    const cancel = h("button", { type: "button", "data-test": "confirm-cancel" }, "Cancel");
    const done = (answer) => {
      dialog.close();
      dialog.replaceChildren();
      resolve(answer);
    };
    if (input) input.addEventListener("input", () => { ok.disabled = input.value !== opts.typeName; });
    ok.addEventListener("click", () => done(true));
    cancel.addEventListener("click", () => done(false));
    mount(dialog, h("p", { "data-test": "confirm-text" }, text),
      opts.typeName ? h("p", {}, "Type ", h("code", {}, opts.typeName), " to confirm.") : null, input,
      h("div", { class: "buttons" }, cancel, ok));
    dialog.showModal();
  });
}

// pager({offset, limit, total, onPage}) -> element: "1–50 of 10,000" with Previous/Next.
export function pager({ offset, limit, total, onPage }) {
  const first = total === 0 ? 0 : offset + 1;
  const last = Math.min(offset + limit, total);
  return h("div", { class: "pager", "data-test": "pager" },
    h("button", { type: "button", "data-test": "pager-prev", disabled: offset === 0,
      on: { click: () => onPage(Math.max(0, offset - limit)) } }, "Previous"),
    h("span", { "data-test": "pager-range" }, `${fmtNum(first)}–${fmtNum(last)} of ${fmtNum(total)}`),
    h("button", { type: "button", "data-test": "pager-next", disabled: last >= total,
      on: { click: () => onPage(offset + limit) } }, "Next"));
}
