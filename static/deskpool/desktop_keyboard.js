// The on-screen keyboard of the desktop page, on touch devices only: its button focuses a
// field out of sight (#keyboard-input), which raises the phone's keyboard; what is typed
// there goes to the desktop as X key presses (rfb.sendKey with the keysym of each
// character, Return for Enter, BackSpace for a deletion).
//
// Phone keyboards seldom send usable key events (Android sends "Unidentified"), and their
// word prediction rewrites what was typed, so the field is compared with what it held
// before: the characters deleted become BackSpaces, the new ones their keysyms. The field
// starts full of filler, so that a Backspace always has something to delete.
import KeyTable from "../vendor/novnc/core/input/keysym.js";
import keysyms from "../vendor/novnc/core/input/keysymdef.js";

const FILLER = "_".repeat(64);

export const isTouchDevice = () =>
  window.matchMedia("(pointer: coarse)").matches || "ontouchstart" in window;

// The X keysym of one character (a code point) as the desktop should receive it.
export function keysymOf(character) {
  if (character === "\n") return KeyTable.XK_Return;
  if (character === "\t") return KeyTable.XK_Tab;
  return keysyms.lookup(character.codePointAt(0));
}

// send(keysym): one press and release on the desktop.
export function setUpKeyboard(button, field, send) {
  if (!isTouchDevice()) return;
  button.hidden = false;
  let before = "";

  function reset() {
    field.value = FILLER;
    field.setSelectionRange(FILLER.length, FILLER.length);
    before = FILLER;
  }

  function forward() {
    const was = [...before];
    const now = [...field.value]; // characters, not UTF-16 halves
    let same = 0;
    while (same < was.length && same < now.length && was[same] === now[same]) same++;
    for (let i = same; i < was.length; i++) send(KeyTable.XK_BackSpace);
    for (const character of now.slice(same)) send(keysymOf(character));
    before = field.value;
    // Keep the filler from running out (Backspaces) or the field from growing long.
    if (now.length < FILLER.length / 2 || now.length > FILLER.length * 4) reset();
  }

  // While a word is being composed (an input method, prediction) it may still change:
  // forward it once it is written.
  field.addEventListener("input", (event) => {
    if (!event.isComposing) forward();
  });
  field.addEventListener("compositionend", forward);
  field.addEventListener("focus", () => {
    reset();
    button.setAttribute("aria-pressed", "true");
  });
  field.addEventListener("blur", () => button.setAttribute("aria-pressed", "false"));
  // The button must not take the focus from the field (that would close the keyboard).
  button.addEventListener("mousedown", (event) => event.preventDefault());
  button.addEventListener("click", () => {
    if (document.activeElement === field) field.blur();
    else field.focus({ preventScroll: true });
  });
}
