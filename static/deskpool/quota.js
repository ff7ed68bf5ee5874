// Live answers on the quota requests page: a "quota.update" over /ws/updates/ fills in the
// state and answer of the student's request row. URLs and words come from the page
// (json_script "page-config"); nothing is hard-coded here.
(function () {
  "use strict";
  const configNode = document.getElementById("page-config");
  if (!configNode) return;
  const config = JSON.parse(configNode.textContent);
  const live = document.getElementById("live");

  function apply(request) {
    const row = document.querySelector('#my-requests tr[data-request-id="' + request.id + '"]');
    if (!row) {
      // A request made in another tab: the page shows it on its next load.
      return;
    }
    for (const name of ["state_label", "answer", "hours"]) {
      const cell = row.querySelector('[data-field="' + name + '"]');
      if (cell) cell.textContent = request[name] === "" ? "—" : String(request[name]);
    }
    row.dataset.state = request.state;
  }

  let delay = 500;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + location.host + config.updates_url);
    ws.onopen = () => {
      delay = 500;
      if (live) live.textContent = config.words.live;
    };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "quota.update") apply(msg.request);
    };
    ws.onclose = () => {
      if (live) live.textContent = config.words.reconnecting;
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
})();
