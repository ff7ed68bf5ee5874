// Live alerts on the console's alerts page: each "alert.update" over the live updates makes the
// page fetch its alerts section again from the fragment URL (the same template the page was
// rendered with) and swap it in, keeping focus where it can. URLs and words come from the
// page (json_script "page-config"), the socket's path and close codes from the server's wire
// (#live-wire, read by live_socket.js, the pages' one reconnecting socket).
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";
  const configNode = document.getElementById("page-config");
  if (!configNode) return;
  const config = JSON.parse(configNode.textContent);
  const target = document.getElementById("alerts-live");
  const live = document.getElementById("live");
  if (!target) return;

  let pending = null;
  function refresh() {
    if (pending) return pending;
    pending = fetch(config.fragment_url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then((response) => (response.ok ? response.text() : null))
      .then((html) => {
        if (html === null) return;
        const focused = document.activeElement;
        const focusName = focused && target.contains(focused) && focused.closest("form")
          ? focused.closest("form").getAttribute("action") : null;
        target.innerHTML = html;
        target.dataset.refreshed = String(Number(target.dataset.refreshed || "0") + 1);
        if (focusName) {
          const again = target.querySelector('form[action="' + focusName + '"] button');
          if (again) again.focus();
        }
      })
      .catch(() => {})
      .finally(() => { pending = null; });
    return pending;
  }

  let opened = false;
  liveUpdates({
    path: updatesPath(readWire()),
    live() {
      if (live) live.textContent = config.words.live;
      // After a reconnect, catch up on what was missed while away.
      if (opened) refresh();
      opened = true;
    },
    message(msg) {
      if (msg.type === "alert.update") refresh();
    },
    closed(why) {
      if (live) live.textContent = why.final ? config.words.stopped : config.words.reconnecting;
    },
  });
})();
