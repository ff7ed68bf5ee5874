// The console's pool page: the pool section is reloaded from its fragment URL when a
// session.update or an alert arrives on /ws/updates/, and every 10 s; the join-token page's
// copy buttons. URLs come from the page (json_script "pool-config"); nothing is hard-coded.
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
  const EVENTS = new Set(["admin.session", "session.update", "pool.alert", "alert.update"]);
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

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + config.updates_url);
    ws.onopen = () => {
      delay = 500;
    };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (EVENTS.has(msg.type)) soon();
    };
    ws.onclose = () => {
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
})();
