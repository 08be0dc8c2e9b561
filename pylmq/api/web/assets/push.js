// Push a test message from the queue page: POST /messages/:name. Owner: work item D.
import { ApiError, enc, send } from "./api.js";
import { h } from "./dom.js";

// Push options (query parameters); shown only where the store takes them (features.push_options).
const OPTIONS = [
  ["delay", "seconds"],
  ["ttl", "seconds"],
  ["priority", "0-255"],
  ["retry", "number or infinity"],
];

// pushPanel(name, {features, onChange}) -> {el}
export function pushPanel(name, { features, onChange }) {
  const body = h("textarea", { name: "body", rows: 4, cols: 60, spellcheck: "false", "data-test": "push-body" });
  const type = h("input", { type: "text", name: "content-type", value: "text/plain; charset=utf-8", "data-test": "push-type" });
  const opts = {};
  for (const [k, hint] of OPTIONS) {
    opts[k] = h("input", { type: "text", name: k, placeholder: hint, autocomplete: "off", "data-test": `push-opt-${k}` });
  }
  const result = h("pre", { class: "result", "data-test": "push-result", role: "status" });
  const push = async (ev) => {
    ev.preventDefault();
    const query = {};
    if (features.push_options) {
      for (const [k] of OPTIONS) if (opts[k].value.trim() !== "") query[k] = opts[k].value.trim();
    }
    try {
      // The body goes as typed (a string): the API stores it with the given content type.
      const answer = await send("POST", "/messages/" + enc(name), { query, body: body.value, type: type.value || "text/plain" });
      result.className = "result ok";
      result.setAttribute("data-state", "ok");
      result.textContent = `pushed: ${JSON.stringify(answer)}`;
      onChange();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      result.className = "result error";
      result.setAttribute("data-state", "error");
      result.textContent = `${e.reason}: ${e.detail}`;
    }
  };
  const el = h("section", { class: "panel", "data-test": "push-panel" }, h("h2", {}, "Push a message"),
    h("form", { class: "push-form", on: { submit: push } },
      h("label", {}, h("span", {}, "Body"), body),
      h("label", {}, h("span", {}, "Content type"), type),
      features.push_options
        ? h("div", { class: "options", "data-test": "push-options" }, OPTIONS.map(([k]) => h("label", {}, h("span", {}, k), opts[k])))
        : null,
      h("div", { class: "buttons" }, h("button", { type: "submit", "data-test": "push-submit" }, "Push"))),
    result);
  return { el };
}
