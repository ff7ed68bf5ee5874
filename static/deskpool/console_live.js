// Console pages without a section of their own to refresh: when the pool changes (a
// session, an audit event, an alert, over the live updates), the sections marked
// data-console-live are fetched again: the same page, rendered by the same template, so
// there is one rendering. A burst reloads once; nothing is swapped while a form has focus.
// The socket is the pages' one reconnecting socket (live_socket.js), its path and close codes
// the server's (#live-wire).
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";
  if (!document.querySelector("[data-console-live]")) return;
  const EVENTS = new Set(["admin.session", "admin.audit", "alert.update"]);
  let pending = false;
  let timer = null;

  function editing() {
    const active = document.activeElement;
    return Boolean(active && active.closest && active.closest("form"));
  }

  async function refresh() {
    if (pending || editing()) return;
    pending = true;
    try {
      const answer = await fetch(location.href, { credentials: "same-origin" });
      if (!answer.ok) return;
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      for (const section of document.querySelectorAll("[data-console-live]")) {
        const replacement = fresh.getElementById(section.id);
        if (replacement) section.replaceWith(document.adoptNode(replacement));
      }
    } catch (error) {
      // Offline for a moment: the next event tries again.
    } finally {
      pending = false;
    }
  }

  function soon() {
    if (timer) return;
    timer = setTimeout(() => { timer = null; refresh(); }, 2000);
  }

  liveUpdates({
    path: updatesPath(readWire()),
    message(msg) {
      if (EVENTS.has(msg.type)) soon();
    },
  });
})();
