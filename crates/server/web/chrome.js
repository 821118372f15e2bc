// What every signed-in view shares: the top bar (home, sign out) and the not-found page.

import * as api from "./api.js";
import { h } from "./dom.js";
import { app, link, route } from "./nav.js";

export function header(...right) {
  return h(
    "header",
    { class: "top" },
    link("/", h("img", { src: "/assets/favicon.svg", alt: "", class: "logo" }), h("span", { class: "brand" }, "penguin")),
    h("div", { class: "spacer" }),
    ...right,
    h(
      "button",
      {
        class: "quiet",
        dataset: { action: "sign-out" },
        onclick: () => {
          api.clearToken();
          route();
        },
      },
      "Sign out",
    ),
  );
}

export function notFound(message) {
  document.title = "penguin · not found";
  app.replaceChildren(header(), h("main", { class: "center" }, h("h1", {}, "Not found"), h("p", {}, message), link("/", "← Sessions")));
}
