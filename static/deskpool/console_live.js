// Console pages without a section of their own to refresh: when the pool changes (a
// session, an audit event, an alert, over /ws/updates/), the sections marked
// data-console-live are fetched again: the same page, rendered by the same template, so
// there is one rendering. A burst reloads once; nothing is swapped while a form has focus.
(function () {
  "use strict";
  const configNode = document.getElementById("console-live-config");
  if (!configNode || !document.querySelector("[data-console-live]")) return;
  const config = JSON.parse(configNode.textContent);
  const EVENTS = new Set(["admin.session", "admin.audit", "alert.update", "pool.alert"]);
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

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + config.updates_url);
    ws.onopen = () => { delay = 500; };
    ws.onmessage = (event) => {
      if (EVENTS.has(JSON.parse(event.data).type)) soon();
    };
    ws.onclose = (event) => {
      if (event.code === 4401 || event.code === 4403) return;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
})();
