// A queue's props: the effective ones, and a form that PATCHes what changed. Owner: work item D.
// The API validates (as it does for any client): the page shows its `detail` on a refusal.
import { ApiError, enc, send } from "./api.js";
import { h, mount } from "./dom.js";

// The keys the form edits; `sqs` is shown read-only (set by the SQS API).
export const KEYS = ["accum", "retry", "timeout", "dead_letter"];

// propValue(key, text): a form field as the API takes it. Numbers go as numbers, "infinity"
// (retry) and any other text as a string, so a bad value reaches the API and gets its detail.
// An empty dead_letter is null (removes it); an empty other field is undefined (not sent).
export function propValue(key, text) {
  const t = text.trim();
  if (t === "") return key === "dead_letter" ? null : undefined;
  if (key !== "dead_letter" && /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(t)) return Number(t);
  return t;
}

// The text a field shows for a value of the API (null/absent: empty).
export function propText(v) {
  return v === null || v === undefined ? "" : String(v);
}

// propsPanel(name, {features, onChange}) -> {el, update(queueDoc)}: update() refreshes the
// effective props from the page's poll; the form keeps what the user typed until Save.
export function propsPanel(name, { features, onChange }) {
  const keys = KEYS.filter((k) => k !== "dead_letter" || features.dead_letters);
  const inputs = {};
  for (const k of keys) {
    inputs[k] = h("input", { type: "text", name: k, "data-test": `props-input-${k}`, autocomplete: "off",
      spellcheck: "false", placeholder: k === "retry" ? "number or infinity" : k === "dead_letter" ? "queue name" : "seconds" });
  }
  const effective = h("dl", { class: "props", "data-test": "props-effective" });
  const own = h("p", { class: "muted", "data-test": "props-own" });
  const status = h("p", { class: "status", "data-test": "props-status", role: "status" });
  let loaded = null; // the effective props the form was filled from

  const fill = (props) => {
    loaded = props;
    for (const k of keys) inputs[k].value = propText(props[k]);
  };
  const say = (cls, text) => {
    status.className = `status ${cls}`;
    status.setAttribute("data-state", cls);
    status.textContent = text;
  };
  const save = async (ev) => {
    ev.preventDefault();
    const patch = {};
    for (const k of keys) {
      if (inputs[k].value.trim() === propText(loaded[k])) continue;
      const v = propValue(k, inputs[k].value);
      if (v !== undefined) patch[k] = v;
    }
    if (Object.keys(patch).length === 0) { say("ok", "nothing changed"); return; }
    try {
      await send("PATCH", "/properties/" + enc(name), { body: patch });
      say("ok", "saved");
      loaded = null; // refill from the next queue document
      onChange();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      say("error", `${e.reason}: ${e.detail}`);
    }
  };
  const reset = async () => {
    try {
      await send("DELETE", "/properties/" + enc(name));
      say("ok", "own props reset");
      loaded = null;
      onChange();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      say("error", `${e.reason}: ${e.detail}`);
    }
  };
  const form = h("form", { class: "props-form", "data-test": "props-form", on: { submit: save } },
    keys.map((k) => h("label", {}, h("span", {}, k), inputs[k])),
    h("div", { class: "buttons" },
      h("button", { type: "submit", "data-test": "props-save" }, "Save"),
      h("button", { type: "button", "data-test": "props-reset", title: "forget this queue's own props: the defaults apply",
        on: { click: reset } }, "Reset own props")));
  const el = h("section", { class: "panel", "data-test": "props-panel" }, h("h2", {}, "Properties"), effective, own, form, status);
  return {
    el,
    update(doc) {
      mount(effective, Object.entries(doc.props).map(([k, v]) =>
        [h("dt", {}, k), h("dd", { "data-test": `props-value-${k}`, "data-prop": k }, typeof v === "object" ? JSON.stringify(v) : String(v))]));
      own.textContent = doc.own_props === null ? "No own props: the defaults apply." : `Own props: ${JSON.stringify(doc.own_props)}`;
      if (loaded === null) fill(doc.props);
    },
  };
}
