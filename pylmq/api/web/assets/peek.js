// Peek at a queue's messages (GET /peek/:name), page by page; dead letters with Requeue.
// Owner: work item D. Bodies are only ever text in a <pre> or a base64 note: never HTML.
import { ApiError, enc, get, getWithHeaders, send } from "./api.js";
import { fmtBytes, fmtNum, h, mount } from "./dom.js";

const PREVIEW = 512; // bytes of each body the list shows (the API cuts them: preview=N)
const WHOLE = 1048576; // "Show whole body": the API's largest preview

function binaryLength(b64) {
  const pad = b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0;
  return (b64.length / 4) * 3 - pad;
}

// One body (or compound part): text in a <pre>, or "binary, N bytes" and its base64.
export function bodyView(part) {
  const cut = part.truncated ? h("span", { class: "note", "data-test": "peek-truncated" }, ` (first ${fmtNum(PREVIEW)} bytes)`) : null;
  if (part.body_base64 !== undefined) {
    return h("div", { class: "body" },
      h("span", { class: "note", "data-test": "peek-binary" }, `binary, ${fmtNum(binaryLength(part.body_base64))} bytes, base64:`), cut,
      h("pre", { "data-test": "peek-body" }, part.body_base64));
  }
  return h("div", { class: "body" }, h("pre", { "data-test": "peek-body" }, part.body ?? ""), cut);
}

function preview(entry) {
  if (entry.parts) {
    return h("ol", { class: "parts", "data-test": "peek-parts" }, entry.parts.map((p) =>
      h("li", { "data-test": "peek-part" }, h("span", { class: "ctype" }, p.content_type), bodyView(p))));
  }
  return bodyView(entry);
}

function truncated(entry) {
  return Boolean(entry.truncated || (entry.parts && entry.parts.some((p) => p.truncated)));
}

function when(ts) {
  return ts === null || ts === undefined ? "—" : new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19);
}

// peekPanel(name, {features, onChange}) -> {el, refresh()}
export function peekPanel(name, { features, onChange }) {
  const size = h("input", { type: "number", min: 1, max: 1000, value: 20, name: "n", "data-test": "peek-size" });
  const rows = h("tbody", { "data-test": "peek-rows" });
  const note = h("p", { class: "note", "data-test": "peek-note", role: "status" });
  const range = h("span", { "data-test": "peek-range" });
  const prev = h("button", { type: "button", "data-test": "peek-prev", disabled: true, on: { click: () => go(page - 1) } }, "Previous");
  const next = h("button", { type: "button", "data-test": "peek-next", disabled: true, on: { click: () => go(page + 1) } }, "Next");
  const requeueBox = h("div", { class: "requeue", "data-test": "requeue-panel", hidden: true });
  // afters[i]: the `after` of page i (the last id of page i-1; undefined for the first page);
  // starts[i]: how many messages come before page i (pages cut by bytes are shorter than n).
  let afters = [undefined];
  let starts = [0];
  let page = 0;
  let entries = [];
  let cut = false; // the API cut this page at its byte budget: more follow though it is short
  let latest = 0; // the newest list request: an older answer that comes later is dropped

  const n = () => Math.min(1000, Math.max(1, Number(size.value) || 20));

  async function go(target, restarted = false) {
    const after = afters[target];
    const mine = ++latest;
    let got;
    try {
      got = await getWithHeaders("/peek/" + enc(name), { after, n: n(), body: 1, preview: PREVIEW });
      if (mine !== latest) return;
    } catch (e) {
      if (mine !== latest) return;
      if (e instanceof ApiError && e.status === 404 && after !== undefined && !restarted) {
        // The page's last message left the queue (acked, redelivered): start again.
        afters = [undefined];
        starts = [0];
        await go(0, true);
        note.textContent = "A message this page started after has left the queue: back to the first page.";
        return;
      }
      if (e instanceof ApiError) { note.textContent = `${e.reason}: ${e.detail}`; return; }
      throw e;
    }
    page = target;
    entries = got.data;
    cut = got.headers.get("x-lmq-peek-cut") === "true";
    if (entries.length > 0) afters[page + 1] = entries[entries.length - 1].id;
    afters.length = page + 2;
    starts[page + 1] = starts[page] + entries.length;
    starts.length = page + 2;
    note.textContent = restarted ? note.textContent : "";
    render();
  }

  async function whole(i) {
    // Re-peek this one message with the largest preview: after its predecessor, n=1.
    const after = i > 0 ? entries[i - 1].id : afters[page];
    try {
      const [entry] = await get("/peek/" + enc(name), { after, n: 1, body: 1, preview: WHOLE });
      if (!entry || entry.id !== entries[i].id) throw new ApiError(404, "not_found", "gone");
      entries[i] = entry;
      render();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      note.textContent = "This message left the queue.";
    }
  }

  function render() {
    const first = starts[page];
    range.textContent = entries.length === 0 ? "no messages" : `${fmtNum(first + 1)}–${fmtNum(first + entries.length)}`;
    prev.disabled = page === 0;
    next.disabled = entries.length === 0 || (entries.length < n() && !cut);
    mount(rows, entries.map((e, i) => h("tr", { "data-test": "peek-row", "data-id": e.id },
      h("td", { class: "id" }, h("code", {}, e.id)),
      h("td", { "data-test": "peek-state" }, e.state),
      h("td", { class: "num" }, fmtNum(e.attempts)),
      h("td", { class: "num" }, String(e.retry)),
      h("td", {}, when(e.ts)),
      h("td", { class: "num" }, fmtBytes(e.size)),
      h("td", { "data-test": "peek-type" }, e.content_type ?? (e.parts ? "compound" : "—")),
      h("td", { class: "dead", "data-test": "peek-dead" }, e.dead
        ? [h("span", { "data-test": "peek-origin" }, e.dead.origin), " · ", h("span", { "data-test": "peek-reason" }, e.dead.reason),
          ` · ${fmtNum(e.dead.failures)} failures`]
        : "—"),
      h("td", { class: "preview" }, preview(e),
        truncated(e) ? h("button", { type: "button", "data-test": "peek-whole", on: { click: () => whole(i) } }, "Show whole body") : null))));
    requeueBox.hidden = !(features.dead_letters && entries.some((e) => e.dead));
  }

  // Requeue (a dead-letter queue): up to n back to their origins, or all to `to`.
  const rqN = h("input", { type: "number", min: 1, max: 10000, value: 100, name: "n", "data-test": "requeue-n" });
  const rqTo = h("input", { type: "text", name: "to", placeholder: "origin of each", autocomplete: "off", "data-test": "requeue-to" });
  // Outside the requeue box: it stays visible when the requeue emptied the page (box hidden).
  const rqResult = h("p", { class: "status", "data-test": "requeue-result", role: "status" });
  const requeue = async (ev) => {
    ev.preventDefault();
    try {
      const got = await send("POST", "/requeue/" + enc(name), { query: { n: rqN.value, to: rqTo.value.trim() || undefined } });
      rqResult.textContent = `requeued ${fmtNum(got.requeued)}`;
      afters = [undefined];
      starts = [0];
      await go(0);
      onChange();
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      rqResult.textContent = `${e.reason}: ${e.detail}`;
    }
  };
  mount(requeueBox, h("form", { on: { submit: requeue } }, h("strong", {}, "Dead letters: "),
    h("label", {}, "requeue up to ", rqN), h("label", {}, " to ", rqTo), " ",
    h("button", { type: "submit", "data-test": "requeue-submit" }, "Requeue")));

  const refresh = () => go(page);
  size.addEventListener("change", () => { afters = [undefined]; starts = [0]; go(0); });
  const el = h("section", { class: "panel", "data-test": "peek-panel" },
    h("h2", {}, "Messages"),
    h("div", { class: "toolbar" }, h("label", {}, "Page size ", size), " ",
      h("button", { type: "button", "data-test": "peek-refresh", on: { click: refresh } }, "Refresh"), " ", prev, " ", range, " ", next),
    requeueBox, rqResult, note,
    h("table", { class: "peek", "data-test": "peek-table" },
      h("thead", {}, h("tr", {}, ["Id", "State", "Attempts", "Retry", "Due", "Size", "Content type", "Dead letter", "Body"]
        .map((t) => h("th", {}, t)))), rows));
  return { el, refresh };
}
