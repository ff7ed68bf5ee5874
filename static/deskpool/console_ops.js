// Live alerts on the console's alerts page: each "alert.update" over /ws/updates/ makes the
// page fetch its alerts section again from the fragment URL (the same template the page was
// rendered with) and swap it in, keeping focus where it can. URLs and words come from the
// page (json_script "page-config"); nothing is hard-coded here.
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

  let delay = 500;
  let opened = false;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + config.updates_url);
    ws.onopen = () => {
      delay = 500;
      if (live) live.textContent = config.words.live;
      // After a reconnect, catch up on what was missed while away.
      if (opened) refresh();
      opened = true;
    };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "alert.update") refresh();
    };
    ws.onclose = () => {
      if (live) live.textContent = config.words.reconnecting;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
})();
