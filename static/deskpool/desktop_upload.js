// A file from this device into the person's home folder (issue 34), for the desktop drawer
// and the Files page (files_upload.js): the portal (POST /files/upload/, the form's action,
// with the folder, the name and the size only) answers a single-use ticket and the node's
// gateway URL; the file then goes straight to the gateway (PUT, the ticket in
// X-Deskpool-Ticket), never through the portal, with its progress in the status line.
const TICKET_HEADER = "X-Deskpool-Ticket";

function put(url, ticket, file, onProgress) {
  // XMLHttpRequest, not fetch: it reports an upload's progress.
  return new Promise((resolve) => {
    const request = new XMLHttpRequest();
    request.open("PUT", url);
    request.setRequestHeader(TICKET_HEADER, ticket);
    request.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(Math.floor((100 * event.loaded) / event.total));
    };
    request.onload = () => {
      let reason = "";
      try {
        reason = JSON.parse(request.responseText).reason || "";
      } catch {
        reason = "";
      }
      // 413: the quota has no room for the file; 507: the node's disk has none (the home's
      // image is full). Either way the home is full, said in the page's language.
      const full = request.status === 413 || request.status === 507;
      resolve({ ok: request.status === 201, reason, full });
    };
    request.onerror = () => resolve({ ok: false, reason: "", full: false });
    request.send(file);
  });
}

export async function uploadFile({ action, csrf, file, folder = "", onProgress = () => {} }) {
  // {ok, message, reload}: what to say when it ended, and the folder's page.
  const asked = await fetch(action, {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-CSRFToken": csrf, Accept: "application/json" },
    body: new URLSearchParams({ path: folder, name: file.name, size: String(file.size) }),
  });
  const grant = await asked.json();
  if (!asked.ok) return { ok: false, message: grant.error || "" };
  onProgress(0, grant.sending);
  const sent = await put(grant.url, grant.ticket, file, (percent) =>
    onProgress(percent, grant.sending),
  );
  return {
    ok: sent.ok,
    message: sent.ok ? grant.done : sent.reason,
    reload: grant.reload,
    full: sent.full,
  };
}

export function setUpUpload({ form, note, csrf, failed, full = "", after = null }) {
  if (!form) return;
  const send = form.querySelector("button[type=submit]");
  const input = form.querySelector("input[type=file]");
  const folder = form.querySelector("input[name=path]");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = input.files[0];
    if (!file) return;
    send.disabled = true;
    try {
      const outcome = await uploadFile({
        action: form.action,
        csrf,
        file,
        folder: folder ? folder.value : "",
        onProgress: (percent, sending) => {
          note.textContent = `${sending} ${percent}%`;
        },
      });
      // A full home in the person's language (the gateway's reason is English).
      note.textContent = (outcome.full && full) || outcome.message || failed;
      if (outcome.ok) {
        form.reset();
        if (after) after(outcome);
      }
    } catch {
      note.textContent = failed;
    } finally {
      send.disabled = false;
    }
  });
}
