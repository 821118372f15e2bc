// Which view the page shows. Every view has its own path (`/`, `/sessions/ID`), so it can be
// bookmarked, shared and reloaded; links are real links, and navigation inside the page only
// swaps the view. A view is a function that fills `app` and returns what tears it down.

import * as api from "./api.js";
import { h } from "./dom.js";

export const app = document.getElementById("app");
let teardown = () => {};
let views = null;

// Starts routing with the page's views: `{ signIn, list, session, usage, models, notFound }`.
export function startRouting(pageViews) {
  views = pageViews;
  window.addEventListener("popstate", () => route());
  // Opening the printed link in a tab already on this page only changes the fragment: no reload.
  window.addEventListener("hashchange", () => {
    if (api.takeTokenFromFragment()) route();
  });
  window.addEventListener("penguin:signed-out", (e) => route(`Signed out: ${e.detail}`));
  api.takeTokenFromFragment();
  route();
}

export function route(reason) {
  teardown();
  teardown = () => {};
  delete app.dataset.loaded;
  delete app.dataset.state;
  delete app.dataset.stream;
  delete app.dataset.resyncing;
  delete app.dataset.offline;
  if (!api.token()) {
    views.signIn(typeof reason === "string" ? reason : "");
    return;
  }
  const path = location.pathname;
  const m = path.match(/^\/sessions\/([^/]+)\/?$/);
  if (path === "/" || path === "") teardown = views.list();
  else if (path === "/usage") teardown = views.usage();
  else if (path === "/models") teardown = views.models();
  else if (m) teardown = views.session(decodeURIComponent(m[1]));
  else views.notFound(`Nothing at ${path}.`);
}

// Leaves the current view (a session that turned out not to exist) for the not-found one.
export function showNotFound(message) {
  teardown();
  teardown = () => {};
  views.notFound(message);
}

export function navigate(path) {
  if (location.pathname !== path) history.pushState(null, "", path);
  route();
}

export function link(path, ...children) {
  return h(
    "a",
    {
      href: path,
      onclick: (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(path);
      },
    },
    ...children,
  );
}
