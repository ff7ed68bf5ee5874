// The Files page (portal/student/files.py): each home task on the page is the server's
// rendering of it (templates/portal/files/_task.html, in the reader's language and time
// zone); this script asks /files/tasks/<id>/ how it stands every config.poll_ms and swaps the
// fragment in until the task ends. A finished deletion reloads the folder's page, which
// then lists the folder anew (uploads and downloads are no task: they go through the
// node's gateway). Without this script, the tasks' own pages refresh themselves.
(function () {
  "use strict";
  const configNode = document.getElementById("files-config");
  if (!configNode) return;
  const config = JSON.parse(configNode.textContent);
  const announce = document.getElementById("files-announce");

  function say(box) {
    // Announce how a task ended through the page's one live region (kept on the page).
    const line = box.querySelector(".notice, .files-empty");
    if (announce && line) announce.textContent = line.textContent.trim();
  }

  function poll(url, box, ended) {
    if (!url || !box) return;
    let stopped = false;
    const ask = () => {
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
        .then((task) => {
          if (stopped) return;
          if (task.state === "PENDING") {
            window.setTimeout(ask, config.poll_ms);
            return;
          }
          stopped = true;
          box.innerHTML = task.html;
          say(box);
          ended(task);
        })
        .catch(() => {
          // The portal did not answer (restarting?): ask again a little later.
          if (!stopped) window.setTimeout(ask, config.poll_ms * 4);
        });
    };
    window.setTimeout(ask, config.poll_ms);
  }

  const waiting = (box) => box && box.querySelector('.files-task[data-state="PENDING"]');

  const after = document.getElementById("files-after");
  if (config.after && waiting(after)) {
    poll(config.after, after, () => {
      if (config.reload && !config.listing) window.location.replace(config.reload);
    });
  }
  const listing = document.getElementById("files-listing");
  if (config.listing && waiting(listing)) poll(config.listing, listing, () => {});
})();
