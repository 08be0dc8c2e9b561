// The default props editor (#/defaults): the [regex, props] list that gives a queue the props
// of the first entry its name matches. Owner: work item D. Save is PUT /properties: the API
// validates the list (regexes, props) exactly as for any client and the page shows its detail.
import { ApiError, get, send } from "./api.js";
import { confirm, h, mount } from "./dom.js";
import { session, showError } from "./app.js";
import { KEYS, propText, propValue } from "./props.js";

function loadStyle() {
  if (document.querySelector('link[href="queue.css"]')) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = "queue.css";
  document.head.append(link);
}

export const defaultsView = {
  mount(el) {
    const page = { stopped: false };
    this.page = page;
    loadStyle();
    showDefaults(el, page).catch(showError);
  },
  unmount() {
    this.page.stopped = true;
  },
};

async function showDefaults(el, page) {
  const features = (session() ?? (await get("/console/api/session"))).features;
  const keys = KEYS.filter((k) => k !== "dead_letter" || features.dead_letters);
  const rows = h("tbody", { "data-test": "defaults-rows" });
  const status = h("p", { class: "status", "data-test": "defaults-status", role: "status" });
  // Each entry: {regex, props: {key: text}, extra: props the form does not edit (sqs), kept as they are}.
  let list = [];

  const say = (state, text) => {
    status.setAttribute("data-state", state);
    status.className = `status ${state}`;
    status.textContent = text;
  };
  const load = async () => {
    const got = await get("/properties");
    if (page.stopped) return;
    list = got.map(([regex, props]) => {
      const texts = {};
      const extra = {};
      for (const [k, v] of Object.entries(props)) {
        if (keys.includes(k)) texts[k] = propText(v);
        else extra[k] = v;
      }
      return { regex, props: texts, extra };
    });
    render();
  };
  const input = (entry, k, test) => h("input", { type: "text", value: k === "regex" ? entry.regex : entry.props[k] ?? "",
    "data-test": test, autocomplete: "off", spellcheck: "false",
    on: { input: (ev) => { if (k === "regex") entry.regex = ev.target.value; else entry.props[k] = ev.target.value; } } });
  const move = (i, by) => {
    const j = i + by;
    if (j < 0 || j >= list.length) return;
    [list[i], list[j]] = [list[j], list[i]];
    render();
  };
  function render() {
    mount(rows, list.map((entry, i) => h("tr", { "data-test": "defaults-row", "data-index": i },
      h("td", {}, input(entry, "regex", "defaults-regex")),
      keys.map((k) => h("td", {}, input(entry, k, `defaults-${k}`))),
      h("td", { class: "muted" }, Object.keys(entry.extra).length ? JSON.stringify(entry.extra) : ""),
      h("td", { class: "buttons" },
        h("button", { type: "button", title: "up", "data-test": "defaults-up", disabled: i === 0, on: { click: () => move(i, -1) } }, "↑"),
        h("button", { type: "button", title: "down", "data-test": "defaults-down", disabled: i === list.length - 1,
          on: { click: () => move(i, 1) } }, "↓"),
        h("button", { type: "button", "data-test": "defaults-remove", on: { click: () => { list.splice(i, 1); render(); } } }, "Remove")))));
  }
  const save = async () => {
    const body = list.map((entry) => {
      const props = { ...entry.extra };
      for (const k of keys) {
        const v = propValue(k, entry.props[k] ?? "");
        if (v !== undefined && v !== null) props[k] = v;
      }
      return [entry.regex, props];
    });
    try {
      await send("PUT", "/properties", { body });
      say("ok", "saved");
      await load();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      say("error", `${e.reason}: ${e.detail}`);
    }
  };
  const reset = async () => {
    if (!(await confirm("Empty the default props list? Queues keep their own props; the system defaults apply otherwise."))) return;
    try {
      await send("DELETE", "/properties");
      say("ok", "the default list is empty");
      await load();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      say("error", `${e.reason}: ${e.detail}`);
    }
  };
  mount(el, h("div", { class: "defaults-page" },
    h("h1", {}, "Default props"),
    h("p", { class: "muted" }, "A queue takes the props of the first entry whose regex matches its name, under its own props. ",
      "Empty fields are not set; retry takes a number or infinity."),
    h("table", { class: "defaults", "data-test": "defaults-table" },
      h("thead", {}, h("tr", {}, h("th", {}, "Regex"), keys.map((k) => h("th", {}, k)), h("th", {}, "Other"), h("th", {}, ""))),
      rows),
    h("div", { class: "buttons" },
      h("button", { type: "button", "data-test": "defaults-add",
        on: { click: () => { list.push({ regex: "", props: {}, extra: {} }); render(); } } }, "Add entry"),
      h("button", { type: "button", "data-test": "defaults-save", on: { click: save } }, "Save"),
      h("button", { type: "button", class: "danger", "data-test": "defaults-reset", on: { click: reset } }, "Empty the list…")),
    status));
  await load();
}
