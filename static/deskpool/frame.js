// The page frame (templates/base.html, docs/accessibility.md).
// - On a phone (the CSS's max-width: 600px) the header's navigation folds behind the menu
//   button: the button toggles it (aria-expanded), Escape inside the header closes it and gives
//   the focus back to the button. The button is shown only by this script, so without it the
//   navigation simply stays open. On a laptop the CSS hides the button and shows the nav.
// - After a form that succeeded, the page opens with its message (Django's messages, at the
//   top of main): the message takes the focus, so a screen reader reads it first and the next
//   Tab goes on from there, unless something on the page already took the focus (an
//   autofocus field, the first error of a refused form, the desktop).
(function () {
  "use strict";

  function foldingMenu() {
    const header = document.getElementById("site-header");
    const button = document.getElementById("menu-toggle");
    const nav = document.getElementById("site-nav");
    if (!header || !button || !nav) return;

    function setOpen(open) {
      header.dataset.menu = open ? "open" : "closed";
      button.setAttribute("aria-expanded", open ? "true" : "false");
    }

    setOpen(false);
    button.hidden = false;
    button.addEventListener("click", () => {
      setOpen(button.getAttribute("aria-expanded") !== "true");
    });
    header.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || button.getAttribute("aria-expanded") !== "true") return;
      if (getComputedStyle(button).display === "none") return; // a laptop: nothing folds
      setOpen(false);
      button.focus();
      event.preventDefault();
    });
  }

  function focusMessages() {
    const messages = document.getElementById("messages");
    const active = document.activeElement;
    if (!messages || (active && active !== document.body)) return;
    messages.focus();
  }

  foldingMenu();
  if (document.readyState === "complete") focusMessages();
  else window.addEventListener("load", focusMessages, { once: true });
})();
