// penguin's web app: the session list and one session's live view, over the server's API.
// This module only starts it; each view, and each part of the session view, is a module of
// its own (nav.js routes between them).

import { notFound } from "./chrome.js";
import { modelsView } from "./models.js";
import { startRouting } from "./nav.js";
import { sessionList } from "./sessionlist.js";
import { sessionView } from "./sessionview.js";
import { signIn } from "./signin.js";
import { usageView } from "./usage.js";

// Uncaught errors are kept, so a support request (or a test) can read what went wrong.
window.penguinErrors = [];
window.addEventListener("error", (e) => window.penguinErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) =>
  window.penguinErrors.push(String((e.reason && e.reason.stack) || e.reason)),
);

startRouting({ signIn, list: sessionList, session: sessionView, usage: usageView, models: modelsView, notFound });
