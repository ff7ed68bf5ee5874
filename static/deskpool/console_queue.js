// The console's queue: when a session changes (admin.session over the live updates, a burst
// reloads once), and every 10 s, fetch the queue section again from its fragment URL
// (rendered by the same template as the page) and swap it in. The socket is the pages' one
// reconnecting socket (live_socket.js), its path and close codes the server's (#live-wire).
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";
  const data = document.getElementById("queue-live-data");
  const holder = document.getElementById("queue-tiers");
  if (!data || !holder) return;
  const live = JSON.parse(data.textContent);
  const status = document.getElementById("queue-live");
  let pending = false;

  function typing() {
    // Do not swap the forms away under someone typing a reason.
    const active = document.activeElement;
    return active && holder.contains(active) && active.value;
  }

  async function refresh() {
    if (pending) return;
    pending = true;
    try {
      while (typing()) await new Promise((resolve) => setTimeout(resolve, 1000));
      const response = await fetch(live.fragment, { credentials: "same-origin" });
      if (response.ok) holder.innerHTML = await response.text();
    } finally {
      pending = false;
    }
  }

  let timer = null;
  function soon() {
    if (timer) return;
    timer = setTimeout(() => { timer = null; refresh(); }, 300);
  }

  liveUpdates({
    path: updatesPath(readWire()),
    live() {
      if (status) status.textContent = "";
      refresh();
    },
    message(msg) {
      if (msg.type === "admin.session" || msg.type === "session.update") soon();
    },
    closed(why) {
      if (status && why.final) status.textContent = live.words.stopped;
    },
  });
  setInterval(() => { if (!document.hidden) refresh(); }, 10000);
})();
