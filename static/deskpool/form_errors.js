// A refused form puts the focus on its first error (WCAG 3.3.1, 2.4.3), on every page: when
// the page loads with an error of a form, the first one in reading order takes the focus.
// The pages mark their errors one way (docs/accessibility.md, "Refused forms"):
//  - a refused field has aria-invalid="true" and aria-describedby naming its error's id (as
//    Django's as_field_group renders it); its error is a .error/.errorlist in the form;
//  - an error of the whole form is a .error/.errors/.errorlist in the form, or an element
//    marked data-form-error where it stands outside the form it is about.
// A message that describes a refused field hands the focus to that field, so that the reader
// hears the field, its error and can correct it at once; any other message (the summary of
// the form) takes the focus itself (tabindex -1) and the next Tab reaches the form.
(function () {
  "use strict";
  const ERRORS =
    'form [aria-invalid="true"], form .errorlist, form .error, form .errors, [data-form-error]';
  const CONTROLS = "input, select, textarea, button";
  const GROUPS = 'fieldset, [role="group"], [role="radiogroup"]';

  // The refused field that names the message in its aria-describedby: the control itself,
  // or the first refused control of a group (a fieldset of radios or checkboxes) that does.
  // The message's id may be on a list inside it ({{ field.errors }} in a wrapper).
  function describedField(message) {
    const ids = [message, ...message.querySelectorAll("[id]")].map((e) => e.id).filter(Boolean);
    for (const holder of document.querySelectorAll("[aria-describedby]")) {
      const names = holder.getAttribute("aria-describedby").split(/\s+/);
      if (!ids.some((id) => names.includes(id))) continue;
      if (holder.matches(CONTROLS)) {
        if (holder.getAttribute("aria-invalid") === "true") return holder;
      } else if (holder.matches(GROUPS)) {
        const inside = holder.querySelector('[aria-invalid="true"]');
        if (inside) return inside;
      }
    }
    return null;
  }

  function focusable(field) {
    // A radio group: the checked radio is the one Tab reaches, so it takes the focus.
    if (field.type === "radio" && field.name && field.form) {
      const checked = field.form.querySelector(
        'input[type="radio"][name="' + CSS.escape(field.name) + '"]:checked');
      if (checked && !checked.disabled) return checked;
    }
    return field;
  }

  function focusFirstError() {
    // A refused control that cannot take the focus (disabled) leaves it to the next error.
    const first = [...document.querySelectorAll(ERRORS)].find(
      (e) => !e.closest("[hidden]") && !(e.matches(CONTROLS) && e.disabled));
    if (!first) return;
    let target = first.matches(CONTROLS) ? first : describedField(first);
    if (target && !target.disabled) {
      target = focusable(target);
    } else {
      target = first;
      if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    }
    // A form folded into a closed <details> (one added by hand) opens to show its error.
    for (let fold = target.closest("details"); fold; fold = fold.parentElement.closest("details")) {
      fold.open = true;
    }
    target.focus();
    if (document.activeElement === target) target.scrollIntoView({ block: "center" });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", focusFirstError);
  } else {
    focusFirstError();
  }
})();
