// The live class: rows of the course's open desktops, replaced as the server sends them.
// Each row arrives as HTML rendered by the same fragment as the page (courses/_class_row.html).
// The socket is the pages' one reconnecting socket (live_socket.js), its path and close codes
// the server's (#live-wire).
import { coursePath, liveUpdates, readWire } from "./live_socket.js";

(function () {
  "use strict";
  const data = document.getElementById("class-live-data");
  const rows = document.getElementById("class-rows");
  if (!data || !rows) return;
  const live = JSON.parse(data.textContent);
  const status = document.getElementById("class-live");
  const empty = document.getElementById("class-empty");
  const token = document.querySelector("input[name=csrfmiddlewaretoken]");

  // Rows rendered for the socket carry no CSRF token: give their forms the page's.
  function withToken(row) {
    if (!token) return;
    row.querySelectorAll("form[method=post]").forEach((form) => {
      if (form.querySelector("input[name=csrfmiddlewaretoken]")) return;
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = "csrfmiddlewaretoken";
      input.value = token.value;
      form.prepend(input);
    });
  }

  function swap(sessionId, html) {
    const old = document.getElementById("class-row-" + sessionId);
    if (!html) {
      if (old) old.remove();
    } else {
      const holder = document.createElement("tbody");
      holder.innerHTML = html.trim();
      const row = holder.firstElementChild;
      withToken(row);
      if (old) old.replaceWith(row);
      else rows.appendChild(row);
    }
    if (empty) empty.hidden = rows.children.length > 0;
  }

  liveUpdates({
    path: coursePath(readWire(), live.course),
    live() {
      if (status) status.textContent = live.words.live;
    },
    message(msg) {
      if (msg.type === "class.row") swap(msg.session, msg.html);
    },
    closed(why) {
      if (status) status.textContent = why.final ? live.words.stopped : live.words.reconnecting;
    },
  });
})();
