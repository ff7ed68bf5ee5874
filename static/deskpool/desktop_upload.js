// The drawer's upload (issue 27): a file from this device into the person's home folder,
// through the Files page's upload (portal/student/files.py, asked for JSON): the node that
// keeps the home writes it, and the running desktop sees it at once. The drawer then asks
// how the task stands until the node has answered, and says so in its status line.
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function setUpUpload({ form, note, csrf, failed, pollMs = 500 }) {
  if (!form) return;
  const send = form.querySelector("button[type=submit]");
  const ask = async (url, options = {}) => {
    const answer = await fetch(url, {
      credentials: "same-origin",
      ...options,
      headers: { "X-CSRFToken": csrf, Accept: "application/json" },
    });
    return [answer.ok, await answer.json()];
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    send.disabled = true;
    try {
      let [ok, task] = await ask(form.action, { method: "POST", body: new FormData(form) });
      note.textContent = ok ? task.message : task.error;
      while (ok && task.state === "PENDING") {
        await pause(pollMs);
        [ok, task] = await ask(task.task);
        note.textContent = task.message || task.error || "";
      }
      if (ok && task.state === "DONE") form.reset();
    } catch {
      note.textContent = failed;
    } finally {
      send.disabled = false;
    }
  });
}
