// The login page (#/login): the node's bearer token, kept in this tab's sessionStorage only and
// sent as an Authorization header (never in a URL). Owner: work item C.
import { forgetToken, getToken, setToken } from "./api.js";
import { afterLogin, refreshSession, session, showError } from "./app.js";
import { h, mount } from "./dom.js";

const TOKEN68 = /^[A-Za-z0-9\-._~+/]+=*$/;

export const login = {
  mount(el) {
    showError(null);
    const s = session();
    const input = h("input", { type: "password", id: "login-token", autocomplete: "off", spellcheck: "false",
      "data-test": "login-token" });
    const message = h("p", { class: "banner error", role: "alert", "data-test": "login-error", hidden: true });
    const status = h("p", { "data-test": "login-status" });
    const forget = h("button", { type: "button", "data-test": "login-forget", hidden: !getToken(),
      on: { click: async () => {
        forgetToken();
        forget.hidden = true;
        await refreshSession();
        status.textContent = "Credential forgotten.";
      } } }, "Forget credential");
    const form = h("form", { class: "login", "data-test": "login-form" },
      h("label", { for: "login-token" }, "Token"), input,
      h("button", { type: "submit", "data-test": "login-submit" }, "Log in"), forget);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault(); // no navigation: the token never goes into a URL
      message.hidden = true;
      const token = input.value.trim();
      if (!token) return;
      // Tokens are RFC 6750 token68 (app.config refuses others). Anything else, say a dash or
      // a space pasted from a document, cannot go in a header: fetch would throw on it before
      // sending, and a kept one would break every request of this tab, its next boot included.
      if (!TOKEN68.test(token)) {
        input.value = "";
        message.textContent = "This is not a token: a token is made of A-Z a-z 0-9 - . _ ~ + / (then =).";
        message.hidden = false;
        return;
      }
      setToken(token);
      // The session document says whether the node takes it, without a refused (401) request.
      const doc = await refreshSession().catch((e) => { showError(e); return null; });
      if (doc === null) return;
      if (!doc.authorized) {
        forgetToken();
        input.value = "";
        message.textContent = "The node refused this credential.";
        message.hidden = false;
        return;
      }
      location.hash = afterLogin === "#/login" ? "#/" : afterLogin;
    });
    let intro;
    if (s && s.auth === "off") intro = "This node asks for no credential (no http_auth in app.config).";
    else if (s && s.authorized) intro = "You are logged in. A new token replaces the one in use.";
    else intro = "This node asks for a credential: enter its token (http_auth in app.config).";
    mount(el, h("h1", {}, "Log in"), h("p", { "data-test": "login-intro" }, intro), message, form, status);
    input.focus();
  },
  unmount() {},
};
