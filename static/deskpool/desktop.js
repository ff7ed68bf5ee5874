// The desktop page: noVNC through the gateway on the desktop's node (a single-use ticket from
// the portal for every try: live_socket.js), full screen, the clipboard both ways,
// reconnection after a network blip, the session's timer and live
// banner (the time limit with Extend, the idle verdict, a preemption's grace), the side
// drawer (desktop_drawer.js; its upload, desktop_upload.js; its sound, desktop_audio.js),
// the screen's place in the Tab order and its way out (desktop_focus.js), and, on touch
// devices, the on-screen keyboard (desktop_keyboard.js). Addresses and words
// come from the page (#page-config, in the reader's language); the close codes and socket paths
// from #live-wire (nodeagent/gateway/codes.py).
import RFB from "../vendor/novnc/core/rfb.js";
import { announce } from "./announce.js";
import { setUpAudio } from "./desktop_audio.js";
import { setUpDrawer } from "./desktop_drawer.js";
import { setUpEnded } from "./desktop_ended.js";
import { setUpCanvasKeys } from "./desktop_focus.js";
import { setUpKeyboard } from "./desktop_keyboard.js";
import { setUpUpload } from "./desktop_upload.js";
import { clock, extendRefusal, hhmm as zoned, say } from "./desktop_time.js";
import { liveSocket, pathOpener, readWire, ticketOpener, updatesPath } from "./live_socket.js";

const config = JSON.parse(document.getElementById("page-config").textContent);
const wire = readWire();
const words = config.words;
const $ = (id) => document.getElementById(id);
const screen = $("screen");
const status = $("desktop-status");
const openable = new Set(config.openable);
let session = config.session;

// What the status says once the desktop cannot be opened: suspended (it can be resumed) or ended.
const endedWord = () => (session.state === "SUSPENDED" ? words.suspended_status : words.ended);
const hhmm = (iso) => zoned(iso, config.time_zone);

// --- noVNC, with reconnection while the session can still be opened -----------------------
let rfb = null;
// Why the screen stopped for good, as the page's words name it; the portal's own sentence
// (a refused ticket's detail) goes first.
const FINAL_WORDS = {
  signed_out: "signed_out",
  forbidden: "forbidden",
  not_found: "forbidden",
  too_large: "too_large",
  ticket_invalid: "ticket_refused",
  ticket_foreign: "ticket_refused",
  gave_up: "gave_up",
};
// Why a try failed, where the page can say more than "connection lost".
const RETRY_WORDS = { busy: "retry_busy", unreachable: "retry_unreachable", timeout: "retry_timeout" };
// A try that has not shown the desktop by then is given up and tried again (the gateway or
// the desktop accepted the connection and stayed silent).
const ANSWER_WITHIN_S = config.screen_answer_s;
const retryButton = $("screen-retry");

// Ctrl+Alt+Shift leaves the screen: to the drawer when it is open, else to its button.
const canvasKeys = setUpCanvasKeys({
  screen,
  leave: () => ($("drawer").hidden ? $("drawer-toggle") : $("drawer-close")).focus(),
});

// No credentials: the gateway logs in to the desktop itself and offers this page security
// type None, so the desktop's password never reaches the browser. noVNC takes the already
// open socket (the ticket sent) as its channel.
function attach(channel) {
  rfb = new RFB(screen, channel);
  canvasKeys.adopt(screen.querySelector("canvas"));
  // The desktop follows the window: noVNC asks the desktop (Xvnc's SetDesktopSize) for the
  // size of #screen, now and after every resize, instead of a fixed 1280x800 letterboxed
  // into a phone. Scaling stays on for a desktop that cannot change its size.
  rfb.resizeSession = true;
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => {
    screenSocket.settled();
    status.textContent = words.connected;
  });
  rfb.addEventListener("securityfailure", () => {
    screenSocket.stop();
    status.textContent = words.refused;
  });
  rfb.addEventListener("clipboard", (e) => fromDesktop(e.detail.text));
  window.deskpoolRfb = rfb;
}

// The page never closes the screen itself, so every close is unexpected: try again (a new
// ticket) while the session can still be opened, and say why it stopped otherwise.
function screenClosed(why) {
  if (ended.over) return;
  if (why.retryIn !== null) {
    const seconds = Math.max(1, Math.round(why.retryIn / 1000));
    const template = words[RETRY_WORDS[why.reason]] || words.retrying;
    status.textContent = say(template, { seconds, limit: ANSWER_WITHIN_S });
  } else if (["ended", "not_running", "session_ended"].includes(why.reason)) {
    status.textContent = endedWord();
    ended.end(session);
  } else {
    status.textContent = why.detail || words[FINAL_WORDS[why.reason]] || words.disconnected;
    // Given up (or refused): the person may try again from the start.
    retryButton.hidden = false;
  }
}
retryButton.addEventListener("click", () => window.location.reload());

async function stillOpenable() {
  try {
    const answer = await fetch(config.session_api, { credentials: "same-origin" });
    if (!answer.ok) return false;
    session = await answer.json();
    showTime();
    if (!openable.has(session.state)) ended.end(session);
    return openable.has(session.state);
  } catch {
    return true; // the network itself is down: keep trying
  }
}

const ticket = { api: config.ticket_api, csrf: config.csrf_token };
// Once the desktop has ended: no more tries for the screen, its sound off (desktop_ended.js).
const ended = setUpEnded({
  config,
  words,
  stop() {
    screenSocket.stop();
    rfb = null;
    sound?.stop();
  },
});
const screenSocket = liveSocket({
  wire,
  open: ticketOpener({ ...ticket, purpose: "screen" }),
  opened: attach,
  closed: screenClosed,
  canRetry: stillOpenable,
  answerWithinMs: ANSWER_WITHIN_S * 1000,
});

// --- full screen ---------------------------------------------------------------------------
$("fullscreen").addEventListener("click", () => {
  if (document.fullscreenElement) document.exitFullscreen();
  else screen.requestFullscreen?.().catch(() => {});
});

// --- clipboard both ways (in the drawer) ----------------------------------------------------
const text = $("clipboard-text");
const note = $("clipboard-note");

function fromDesktop(value) {
  text.value = value;
  note.textContent = words.copied;
  // Where the browser allows it (a secure page, focus), the system clipboard gets it too.
  navigator.clipboard?.writeText(value).catch(() => {});
}

$("clipboard-send").addEventListener("click", () => {
  if (!rfb) return;
  rfb.clipboardPasteFrom(text.value);
  note.textContent = words.sent;
});

// --- the session's timer and banner ---------------------------------------------------------
// The banner: the time limit from 15 minutes before it (the time left, the end time, Extend;
// louder from 5 minutes), the idle verdict (warned: the suspension time; suspended), and a
// preemption's grace. Times as HH:MM in the reader's zone (config.time_zone).
const timer = $("session-timer");
const banner = $("desktop-banner");
const bannerText = $("banner-text");
const bannerLeft = $("banner-left");
const extendButton = $("banner-extend");
const resumeLink = $("banner-resume");
const answer = $("banner-answer");
const WARN_MINUTES = config.warn_minutes; // [15, 5]
const LOUD_MINUTES = Math.min(...WARN_MINUTES);
const ANSWER_MS = 60000; // how long the Extend's answer stays

function bannerState(now) {
  const lines = [];
  let loud = false;
  let extend = false;
  let left = null;
  const idle = session.idle || {};
  const endsAt = session.ends_at ? new Date(session.ends_at) : null;
  if (session.state === "PREEMPTING" && session.preempt_deadline) {
    const minutes = (new Date(session.preempt_deadline) - now) / 60000;
    lines.push(say(words.preempting, { minutes: Math.max(1, Math.ceil(minutes)) }));
    loud = true;
  } else if (endsAt && session.state === "RUNNING") {
    const minutes = (endsAt - now) / 60000;
    const warn = WARN_MINUTES.filter((m) => minutes <= m).pop();
    if (warn !== undefined && minutes > 0) {
      lines.push(say(words.limit_soon, { minutes: warn, time: hhmm(session.ends_at) }));
      loud = warn <= LOUD_MINUTES;
      extend = extendRefusal(session, config, words) === null;
      left = say(words.time_left, { time: clock((endsAt - now) / 1000) });
    }
  }
  if (session.state === "SUSPENDED" || idle.state === "suspended") {
    lines.push(words.suspended);
  } else if (idle.state === "warned") {
    const at = idle.suspends_at;
    lines.push(at ? say(words.idle_warned, { time: hhmm(at) }) : words.idle_warned_soon);
    if (at && (new Date(at) - now) / 60000 <= LOUD_MINUTES) loud = true;
  }
  return { text: lines.join(" "), loud, extend, left };
}

let preemptTold = false; // its first warning has been told
function showTime() {
  const now = new Date();
  const endsAt = session.ends_at ? new Date(session.ends_at) : null;
  timer.hidden = !endsAt;
  if (endsAt) timer.textContent = say(words.time_left, { time: clock((endsAt - now) / 1000) });
  const shown = bannerState(now);
  // The words change only when the message does (minutes, not seconds) and are told
  // politely, at most every 30 s (announce.js), a preemption's first warning at once; the
  // countdown beside them is not live.
  if (shown.text !== bannerText.textContent) {
    bannerText.textContent = shown.text;
    const preempting = session.state === "PREEMPTING";
    announce(shown.text, { now: preempting && !preemptTold });
    preemptTold = preempting;
  }
  bannerLeft.hidden = !shown.left;
  bannerLeft.textContent = shown.left || "";
  extendButton.hidden = !shown.extend;
  resumeLink.hidden = session.state !== "SUSPENDED";
  banner.dataset.level = shown.loud ? "urgent" : "soon";
  banner.hidden = !shown.text && !answer.textContent;
  drawer.show(now);
  ended.hold();
}

// Extend: one more step through the API (the session cookie and the CSRF token); the answer
// is the session with its new limit, or 409 with the refusal's reason in plain words.
let answerTimer = null;
function tell(message) {
  answer.textContent = message;
  clearTimeout(answerTimer);
  answerTimer = setTimeout(() => {
    answer.textContent = "";
    showTime();
  }, ANSWER_MS);
  showTime();
}

// The banner's and the drawer's Extend: the words that answer it.
async function requestExtension() {
  try {
    const reply = await fetch(config.extend_api, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": config.csrf_token, Accept: "application/json" },
    });
    const body = await reply.json().catch(() => ({}));
    if (reply.ok && body.id === session.id) {
      session = body;
      return say(words.extended, { time: hhmm(session.ends_at) });
    }
    return body.detail || words.extend_failed;
  } catch {
    return words.extend_failed; // the network
  }
}

extendButton.addEventListener("click", async () => {
  extendButton.disabled = true;
  tell(await requestExtension());
  extendButton.disabled = false;
});

// The session as the API or a live update now gives it.
function follow(changed) {
  session = changed;
  showTime();
  if (!openable.has(session.state)) {
    status.textContent = endedWord();
    ended.end(session);
  }
}

const drawer = setUpDrawer({
  config,
  words,
  current: () => session,
  update: follow,
  extend: requestExtension,
});
setInterval(showTime, 1000);
showTime();

// --- the on-screen keyboard (touch devices) ------------------------------------------------
setUpKeyboard($("keyboard-toggle"), $("keyboard-input"), (keysym) => rfb?.sendKey(keysym));
setUpUpload({
  form: $("drawer-upload"),
  note: $("drawer-upload-note"),
  csrf: config.csrf_token,
  failed: words.upload_failed,
  full: words.home_full,
});

const sound = config.has_sound
  ? setUpAudio({
    button: $("sound-toggle"),
    meter: $("sound-level"),
    note: $("sound-note"),
    ticket,
    wire,
    words,
    canRetry: () => openable.has(session.state),
  })
  : null;

// Live updates for this session: its state, grace deadline and time limit. They stop on
// sign-out (the portal closes with the wire's signed_out); the screen says why.
const updates = liveSocket({
  wire,
  open: pathOpener(updatesPath(wire, config.fragment)),
  opened(socket) {
    socket.addEventListener("open", () => updates.settled());
    socket.addEventListener("message", (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "session.update" && msg.session.id === session.id) follow(msg.session);
    });
  },
  firstDelayMs: 500,
  maxDelayMs: 10000,
  maxTries: Infinity,
});
