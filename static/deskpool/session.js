// Live session page: state, queue position and reason pushed over Channels, no reload.
(function () {
  "use strict";
  const root = document.getElementById("session");
  if (!root) return;
  const sessionId = Number(root.dataset.sessionId);
  const $ = (id) => document.getElementById(id);
  const terminal = new Set(["ENDED", "FAILED", "EXPIRED", "CANCELLED", "LOST"]);
  // The page's words in the reader's language: state labels and the live-connection notes.
  const words = JSON.parse($("session-words").textContent);

  function render(s) {
    const state = $("state");
    state.textContent = words.states[s.state] || s.state;
    state.dataset.state = s.state;
    state.className = "state state-" + s.state.toLowerCase();
    $("position").textContent = s.queue_position ?? "";
    $("position-line").hidden = !s.queue_position;
    $("reason").textContent = s.reason || "";
    $("node").textContent = s.node || "";
    $("slice").textContent = s.slice || "";
    $("placement").hidden = !s.node;
    $("simulated-note").hidden = !s.simulated;
    $("open-desktop").hidden = !s.desktop_url || s.simulated;
    $("stop-form").hidden = terminal.has(s.state);
    deadline = s.state === "PREEMPTING" && s.preempt_deadline ? new Date(s.preempt_deadline) : null;
    tick();
  }

  // The grace countdown of a preempted desktop.
  let deadline = null;
  function tick() {
    $("countdown-line").hidden = !deadline;
    if (!deadline) return;
    const left = Math.max(0, Math.round((deadline - Date.now()) / 1000));
    $("countdown").textContent = Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0");
  }
  setInterval(tick, 1000);

  render(JSON.parse($("session-data").textContent));

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + "/ws/updates/");
    ws.onopen = () => { delay = 500; $("live").textContent = words.live; };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "session.update" && msg.session.id === sessionId) render(msg.session);
    };
    ws.onclose = () => {
      $("live").textContent = words.reconnecting;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
      // Catch up on anything missed while disconnected.
      fetch("/api/v1/sessions/" + sessionId + "/", { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null)).then((s) => s && render(s)).catch(() => {});
    };
  }
  connect();
})();
