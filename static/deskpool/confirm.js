// Destructive forms ask first (portal/kit/confirm.py): a form with data-confirm="<question>"
// (rendered by the server in the reader's language) asks it in the browser's own dialog, and
// is sent, marked confirmed=1, only when the person accepts. Delegated from the document, so
// forms that live updates swap in ask too. Without this script the server asks on a page.
(function () {
  "use strict";
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    if (!window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      return;
    }
    let mark = form.querySelector('input[name="confirmed"]');
    if (!mark) {
      mark = document.createElement("input");
      mark.type = "hidden";
      mark.name = "confirmed";
      form.append(mark);
    }
    mark.value = "1";
  });
})();
