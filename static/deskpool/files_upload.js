// The Files page's upload (portal/student/files.py): straight to the node's gateway
// (desktop_upload.js); once it went through, the folder's page is shown anew.
import { setUpUpload } from "./desktop_upload.js";

const form = document.getElementById("files-upload-form");
if (form) {
  setUpUpload({
    form,
    note: document.getElementById("files-upload-note"),
    csrf: form.querySelector("input[name=csrfmiddlewaretoken]").value,
    failed: form.dataset.failed,
    full: form.dataset.full,
    after: (outcome) => window.location.assign(outcome.reload),
  });
}
