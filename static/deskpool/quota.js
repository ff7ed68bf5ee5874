// Live answers on the quota requests page: a "quota.update" over the live updates fills in the
// state and answer of the student's request row. URLs and words come from the page
// (json_script "page-config"), the socket's path and close codes from the server's wire
// (#live-wire, read by live_socket.js, the pages' one reconnecting socket). An answer is told
// politely through the pages' announcer (announce.js): the row, each cell after its heading.
import { announce } from "./announce.js";
import { liveUpdates, readWire, updatesPath } from "./live_socket.js";

(function () {
  "use strict";
  const configNode = document.getElementById("page-config");
  if (!configNode) return;
  const config = JSON.parse(configNode.textContent);
  const live = document.getElementById("live");

  // "Course: ML101 — GPU-hours: 5 — … — State: Approved — Answer: …", in the page's language.
  function rowWords(row) {
    const heads = Array.from(row.closest("table").querySelectorAll("thead th"));
    const said = (cell, i) => (heads[i] ? heads[i].textContent.trim() + ": " : "") + cell.textContent;
    return Array.from(row.cells)
      .map((cell, i) => said(cell, i).replace(/\s+/g, " ").trim())
      .join(" — ");
  }

  function apply(request) {
    const row = document.querySelector('#my-requests tr[data-request-id="' + request.id + '"]');
    if (!row) {
      // A request made in another tab: the page shows it on its next load.
      return;
    }
    const before = rowWords(row);
    for (const name of ["state_label", "answer", "hours"]) {
      const cell = row.querySelector('[data-field="' + name + '"]');
      if (cell) cell.textContent = request[name] === "" ? "—" : String(request[name]);
    }
    row.dataset.state = request.state;
    const words = rowWords(row);
    if (words !== before) announce(words);
  }

  liveUpdates({
    path: updatesPath(readWire()),
    live() {
      if (live) live.textContent = config.words.live;
    },
    message(msg) {
      if (msg.type === "quota.update") apply(msg.request);
    },
    closed(why) {
      if (live) live.textContent = why.final ? config.words.stopped : config.words.reconnecting;
    },
  });
})();
