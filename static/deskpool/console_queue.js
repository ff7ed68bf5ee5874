// The console's queue: when a session changes (admin.session over /ws/updates/, a burst
// reloads once), and every 10 s, fetch the queue section again from its fragment URL
// (rendered by the same template as the page) and swap it in.
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

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + live.socket);
    ws.onopen = () => { delay = 500; if (status) status.textContent = ""; refresh(); };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "admin.session" || msg.type === "session.update") soon();
    };
    ws.onclose = (event) => {
      if (event.code === 4403) return;  // not allowed: do not knock again
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
  setInterval(() => { if (!document.hidden) refresh(); }, 10000);
})();
