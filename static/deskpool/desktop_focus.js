// The desktop's screen and the keyboard (issue 38, no keyboard trap). noVNC's canvas takes
// every key while it has the focus (Tab and Esc go to the desktop, as its programs expect), so
// the page makes it reachable with Tab (tabindex 0, a name, the instructions #screen-help) and
// gives one way out: Ctrl, Alt and Shift held together and let go, with no other key between
// (Guacamole's menu chord). Desktop programs rarely bind the three modifiers alone, and the
// canvas is no text field, so a Chinese input method composes nothing there and sees no
// chord of its own (its switches are Shift or Ctrl+Shift alone, or Ctrl+Space). Once all
// three are let go the focus goes to leave() (the drawer's Close or the Controls button).
// noVNC sees every press and release of the chord, so nothing stays held on the desktop (it
// lets go of its keys only when the window loses the focus, not the canvas).
const CHORD = ["Control", "Alt", "Shift"];
const chordKey = (code) => CHORD.find((name) => code.startsWith(name));

// screen: #screen, where noVNC puts its canvas; leave(): where the focus goes.
export function setUpCanvasKeys({ screen, leave }) {
  const held = new Set();
  let armed = false; // all three were held, and no other key since
  const onCanvas = (event) => event.target.tagName === "CANVAS" && screen.contains(event.target);

  // In the capture phase: before noVNC's own listeners on the canvas.
  document.addEventListener(
    "keydown",
    (event) => {
      if (!onCanvas(event)) return;
      const key = chordKey(event.code);
      if (!key) {
        armed = false;
        return;
      }
      held.add(key);
      if (held.size === CHORD.length) armed = true;
    },
    true
  );
  // The last release leaves. The event still reaches noVNC's listener on the canvas (its
  // path was fixed when it was dispatched), so the desktop sees the key let go.
  document.addEventListener(
    "keyup",
    (event) => {
      if (!onCanvas(event)) return;
      const key = chordKey(event.code);
      if (key) held.delete(key);
      if (!armed || held.size > 0) return;
      armed = false;
      leave();
    },
    true
  );

  // Each new screen (one per connection) gets its name, its instructions and a place in the
  // Tab order.
  function adopt(canvas) {
    if (!canvas) return;
    canvas.tabIndex = 0;
    canvas.setAttribute("role", "application");
    canvas.setAttribute("aria-label", screen.dataset.label);
    canvas.setAttribute("aria-describedby", "screen-help");
    canvas.addEventListener("blur", () => {
      held.clear();
      armed = false;
    });
  }
  return { adopt };
}
