// Told when away (issue 38): a browser notification when one of the person's desktops becomes
// ready (RUNNING), is about to be preempted (PREEMPTING, with the minutes of grace left), or
// nears its time limit (at the portal's warning moments, #away-config's warn_minutes: those of
// the time-limit e-mails). Only while the page is in the background: a visible page already
// says it. Permission is asked for only when the person presses the button, never on load.
//
// It starts from the person's open sessions as the server rendered them (#away-config) and
// follows them on the pages' one reconnecting socket (live_socket.js), asking for no card
// (?fragment=none): the session payloads alone. The words are the server's, in the reader's
// language, as the other pages' scripts get theirs.
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";
  const configNode = document.getElementById("away-config");
  const part = document.getElementById("away");
  if (!configNode || !part || !("Notification" in window)) return; // no notifications here
  const config = JSON.parse(configNode.textContent);
  const words = config.words;
  const ask = document.getElementById("away-ask");
  const hint = document.getElementById("away-hint");
  const said = document.getElementById("away-said");

  const fill = (text, params) =>
    text.replace(/%\((\w+)\)s/g, (all, name) => (name in params ? String(params[name]) : all));
  const minutesTo = (moment) => Math.max(1, Math.ceil((new Date(moment) - Date.now()) / 60000));

  function showPermission() {
    const permission = Notification.permission;
    part.hidden = false;
    ask.hidden = permission !== "default";
    hint.hidden = permission !== "default";
    said.textContent =
      permission === "granted" ? words.on : permission === "denied" ? words.blocked : "";
  }

  function tell(kind, session, params) {
    if (document.visibilityState !== "hidden" || Notification.permission !== "granted") return;
    try {
      const note = new Notification(fill(words[kind + "_title"], params), {
        body: fill(words[kind + "_body"], params),
        // Two tabs of the portal open: the second notification replaces the first.
        tag: "deskpool-" + session.id + "-" + kind,
        lang: document.documentElement.lang,
      });
      note.addEventListener("click", () => {
        window.focus();
        const url = session.desktop_url;
        if (url && location.pathname !== url) location.assign(url); // to save their work there
        note.close();
      });
    } catch {
      // Some browsers (Chrome on Android) show notifications only from a service worker.
    }
  }

  const known = new Map(); // session id -> its latest payload (state, ends_at, ...)
  const warned = new Map(); // session id -> "ends_at|mark" of the last time-limit warning

  // The nearest warning moment reached before a running desktop's limit, or null.
  function markOf(session) {
    if (session.state !== "RUNNING" || !session.ends_at) return null;
    const left = new Date(session.ends_at) - Date.now();
    if (left <= 0) return null;
    const reached = config.warn_minutes.filter((m) => left <= m * 60000);
    return reached.length ? Math.min(...reached) : null;
  }

  // Once per moment and limit (an extension moves the limit: its warnings come again), as
  // the server's warnings; a moment passed while the page was visible is not told again.
  function checkLimit(session) {
    const mark = markOf(session);
    if (mark === null) return;
    const key = session.ends_at + "|" + mark;
    if (warned.get(session.id) === key) return;
    warned.set(session.id, key);
    tell("limit", session, { id: session.id, minutes: minutesTo(session.ends_at) });
  }

  function seen(session) {
    const before = known.get(session.id);
    known.set(session.id, session);
    if (!before || before.state !== session.state) {
      if (session.state === "RUNNING") {
        tell("ready", session, { id: session.id, name: session.profile_name });
      } else if (session.state === "PREEMPTING" && session.preempt_deadline) {
        tell("preempting", session, {
          id: session.id,
          minutes: minutesTo(session.preempt_deadline),
        });
      }
    }
    checkLimit(session);
  }

  // Once the socket is open, and again after it dropped (a laptop asleep, a worker
  // restarted), ask for each session the page follows (the API answers with the live
  // updates' payload): a change missed meanwhile is told then. An answer overtaken by a
  // live update is dropped (it is older).
  let received = 0;
  function catchUp() {
    const since = received;
    known.forEach((session, id) => {
      const url = config.session_api.replace(/\/0\/$/, "/" + id + "/");
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((r) => (r.ok ? r.json() : null))
        .then((fresh) => fresh && received === since && seen(fresh))
        .catch(() => {});
    });
  }

  let watching = false;
  function watch() {
    if (watching) return;
    watching = true;
    for (const [id, session] of Object.entries(config.sessions)) {
      const entry = { id: Number(id), ...session };
      known.set(entry.id, entry);
      const mark = markOf(entry);
      if (mark !== null) warned.set(entry.id, entry.ends_at + "|" + mark); // the page said it
    }
    liveUpdates({
      path: updatesPath(readWire(), "none"),
      live() {
        catchUp();
        part.dataset.live = "true"; // following the sessions now (the browser tests wait for it)
      },
      closed() {
        delete part.dataset.live;
      },
      message(msg) {
        if (msg.type !== "session.update" || !msg.session) return;
        received += 1;
        seen(msg.session);
      },
    });
    // The warning moments pass without a message: look every 15 s.
    setInterval(() => known.forEach(checkLimit), 15000);
  }

  ask.addEventListener("click", async () => {
    await Notification.requestPermission();
    showPermission();
    if (Notification.permission === "granted") watch();
  });
  showPermission();
  if (Notification.permission === "granted") watch();
})();
