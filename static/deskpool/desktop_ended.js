// The desktop page once its desktop has ended (stopped by its person, an admin, a teacher, the
// time limit, preemption, the idle policy): the screen goes, the page says so and why (the
// session's state and reason, from the live updates), every control that would act on the
// desktop is disabled, and "My desktops" and "New desktop" are offered (#desktop-ended).
import { say } from "./desktop_time.js";

const $ = (id) => document.getElementById(id);

// What acts on the desktop: disabled for good once it has ended.
const CONTROLS = [
  "keyboard-toggle",
  "banner-extend",
  "drawer-extend",
  "drawer-stop",
  "stop-yes",
  "fullscreen",
  "sound-toggle",
  "drawer-upload-file",
  "drawer-upload-send",
  "clipboard-text",
  "clipboard-send",
  "screen-retry",
];

// stop(): the caller's sockets and sound, closed once, when the desktop is first seen ended.
export function setUpEnded({ config, words, stop }) {
  const panel = $("desktop-ended");
  const title = $("ended-title");
  const why = $("ended-why");
  let over = false;

  function disable() {
    for (const id of CONTROLS) {
      const control = $(id);
      if (control) control.disabled = true;
    }
    const ask = $("stop-confirm");
    if (ask) ask.hidden = true;
  }

  // The session as last heard of: its state and reason, in the reader's language.
  function explain(session) {
    title.textContent = session.state === "SUSPENDED" ? words.suspended_title : words.ended_title;
    const state = say(words.state, { state: config.states[session.state] || session.state });
    why.textContent = session.reason ? `${state}. ${session.reason}` : state;
  }

  return {
    get over() {
      return over;
    },
    // The desktop has ended: once, the screen and its controls go and the panel says why;
    // later calls only bring the reason up to date (STOPPING, then ENDED with its reason).
    end(session) {
      explain(session);
      disable();
      if (over) return;
      over = true;
      stop();
      $("screen").hidden = true;
      $("screen-help").hidden = true; // how to reach the screen, now gone
      panel.hidden = false;
      title.focus();
    },
    // Called every second by the page: a control the drawer turned back on is off again.
    hold() {
      if (over) disable();
    },
  };
}
