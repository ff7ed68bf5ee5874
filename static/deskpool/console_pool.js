// The console's pool page: the pool section is reloaded from its fragment URL when a
// session.update or an alert arrives on the live updates, and every 10 s; the join-token page's
// copy buttons. URLs come from the page (json_script "pool-config"), the socket's path and
// close codes from the server's wire (#live-wire, live_socket.js); nothing is hard-coded.
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";

  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", () => {
      const field = document.getElementById(button.dataset.copy);
      if (!field) return;
      field.select();
      if (navigator.clipboard) navigator.clipboard.writeText(field.value);
      else document.execCommand("copy");
    });
  }

  const configNode = document.getElementById("pool-config");
  const section = document.getElementById("pool-section");
  if (!configNode || !section) return;
  const config = JSON.parse(configNode.textContent);
  const REFRESH_MS = 10000;
  const EVENTS = new Set(["admin.session", "session.update", "alert.update"]);
  let pending = false;

  async function refresh() {
    if (pending) return;
    pending = true;
    try {
      const answer = await fetch(config.fragment_url, { credentials: "same-origin" });
      if (answer.ok) section.innerHTML = await answer.text();
    } catch (error) {
      // Offline for a moment: the next tick tries again.
    } finally {
      pending = false;
    }
  }

  let timer = null;
  function soon() {
    // Several events in a burst reload once.
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      refresh();
    }, 300);
  }
  setInterval(refresh, REFRESH_MS);

  liveUpdates({
    path: updatesPath(readWire()),
    message(msg) {
      if (EVENTS.has(msg.type)) soon();
    },
  });
})();
