// The sign-in view: the token pasted by hand when the page was not opened with the link
// `penguin serve` prints.

import * as api from "./api.js";
import { h } from "./dom.js";
import { app, route } from "./nav.js";

export function signIn(reason) {
  document.title = "penguin · sign in";
  const input = h("input", {
    type: "password",
    name: "token",
    autocomplete: "current-password",
    placeholder: "access token",
    required: true,
  });
  const error = h("p", { class: "error", hidden: !reason }, reason || "");
  const form = h(
    "form",
    {
      class: "sign-in",
      onsubmit: async (e) => {
        e.preventDefault();
        api.setToken(input.value);
        try {
          await api.checkToken();
          route();
        } catch (err) {
          api.clearToken();
          error.hidden = false;
          error.textContent = err.status === 401 ? "That token was refused." : err.message;
        }
      },
    },
    h("h1", {}, "penguin"),
    h(
      "p",
      {},
      "Open the link ",
      h("code", {}, "penguin serve"),
      " printed, or paste the server's access token (from PENGUIN_TOKEN or the server-token file).",
    ),
    input,
    h("button", { type: "submit" }, "Sign in"),
    error,
  );
  app.replaceChildren(h("main", { class: "center" }, form));
  input.focus();
}
