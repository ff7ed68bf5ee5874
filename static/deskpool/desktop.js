// The desktop page: noVNC through the portal's authenticated WebSocket proxy, full screen,
// the clipboard both ways, reconnection after a network blip, the session's timer and live
// banner (the time limit with Extend, the idle verdict, a preemption's grace), the side
// drawer (desktop_drawer.js; its upload, desktop_upload.js; its sound, desktop_audio.js)
// and, on touch devices, the on-screen keyboard (desktop_keyboard.js). Addresses and words
// come from the page (#page-config, in the reader's language).
import RFB from "../vendor/novnc/core/rfb.js";
import { setUpAudio } from "./desktop_audio.js";
import { setUpDrawer } from "./desktop_drawer.js";
import { setUpKeyboard } from "./desktop_keyboard.js";
import { setUpUpload } from "./desktop_upload.js";
import { clock, extendRefusal, hhmm as zoned, say } from "./desktop_time.js";

const config = JSON.parse(document.getElementById("page-config").textContent);
const words = config.words;
const $ = (id) => document.getElementById(id);
const screen = $("screen");
const status = $("desktop-status");
const scheme = location.protocol === "https:" ? "wss://" : "ws://";
const openable = new Set(config.openable);
let session = config.session;

// What the status says once the desktop cannot be opened: suspended (it can be resumed) or ended.
const endedWord = () => (session.state === "SUSPENDED" ? words.suspended_status : words.ended);
const hhmm = (iso) => zoned(iso, config.time_zone);

// --- noVNC, with reconnection while the session can still be opened -----------------------
let rfb = null;
let retryDelay = 1000;
let refused = false; // the relay refused the handshake: trying again will not help
// The relay's close codes after which trying again cannot help (portal/live/desktop_relay.py):
// signed out, no longer allowed to open it, a message over the relay's size limit.
const FINAL_CLOSES = { 4401: "signed_out", 4403: "forbidden", 4413: "too_large" };
let closeCode = null;

function connect() {
  // No credentials: the portal's relay logs in to the desktop itself and offers this page
  // security type None, so the desktop's password never reaches the browser. The page opens
  // the socket itself (noVNC takes it as a channel) to read the relay's close code.
  const channel = new WebSocket(scheme + location.host + config.proxy_url);
  closeCode = null;
  channel.addEventListener("close", (event) => {
    closeCode = event.code;
  });
  rfb = new RFB(screen, channel);
  // The desktop follows the window: noVNC asks the desktop (Xvnc's SetDesktopSize) for the
  // size of #screen, now and after every resize, instead of a fixed 1280x800 letterboxed
  // into a phone. Scaling stays on for a desktop that cannot change its size.
  rfb.resizeSession = true;
  rfb.scaleViewport = true;
  rfb.addEventListener("connect", () => {
    retryDelay = 1000;
    status.textContent = words.connected;
  });
  // The page never closes the connection itself, so every disconnect is unexpected (noVNC
  // calls a close by the server "clean"): try again while the session can still be opened.
  rfb.addEventListener("disconnect", () => {
    if (refused) return;
    if (closeCode in FINAL_CLOSES) {
      refused = true;
      status.textContent = words[FINAL_CLOSES[closeCode]];
      return;
    }
    status.textContent = words.disconnected;
    retry();
  });
  rfb.addEventListener("securityfailure", () => {
    refused = true;
    status.textContent = words.refused;
  });
  rfb.addEventListener("clipboard", (e) => fromDesktop(e.detail.text));
  window.deskpoolRfb = rfb;
}

async function stillOpenable() {
  try {
    const answer = await fetch(config.session_api, { credentials: "same-origin" });
    if (!answer.ok) return false;
    session = await answer.json();
    showTime();
    return openable.has(session.state);
  } catch {
    return true; // the network itself is down: keep trying
  }
}

function retry() {
  const seconds = Math.round(retryDelay / 1000);
  status.textContent = say(words.retrying, { seconds });
  setTimeout(async () => {
    if (await stillOpenable()) {
      connect();
    } else {
      status.textContent = endedWord();
    }
  }, retryDelay);
  retryDelay = Math.min(retryDelay * 2, 30000);
}

connect();

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

function showTime() {
  const now = new Date();
  const endsAt = session.ends_at ? new Date(session.ends_at) : null;
  timer.hidden = !endsAt;
  if (endsAt) timer.textContent = say(words.time_left, { time: clock((endsAt - now) / 1000) });
  const shown = bannerState(now);
  // The alert's words change only when the message does (minutes, not seconds), so a
  // screen reader is not interrupted every second; the countdown beside it is not live.
  if (shown.text !== bannerText.textContent) bannerText.textContent = shown.text;
  bannerLeft.hidden = !shown.left;
  bannerLeft.textContent = shown.left || "";
  extendButton.hidden = !shown.extend;
  resumeLink.hidden = session.state !== "SUSPENDED";
  banner.dataset.level = shown.loud ? "urgent" : "soon";
  banner.hidden = !shown.text && !answer.textContent;
  drawer.show(now);
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
  if (!openable.has(session.state)) status.textContent = endedWord();
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
});

if (config.audio_url) {
  setUpAudio({
    button: $("sound-toggle"),
    meter: $("sound-level"),
    note: $("sound-note"),
    url: scheme + location.host + config.audio_url,
    words,
    canRetry: () => openable.has(session.state),
  });
}

// Live updates for this session: its state, grace deadline and time limit.
let liveDelay = 500;
function listen() {
  const ws = new WebSocket(scheme + location.host + config.updates_url);
  ws.onopen = () => {
    liveDelay = 500;
  };
  ws.onmessage = (event) => {
    const msg = JSON.parse(event.data);
    if (msg.type === "session.update" && msg.session.id === session.id) follow(msg.session);
  };
  ws.onclose = () => {
    setTimeout(listen, liveDelay);
    liveDelay = Math.min(liveDelay * 2, 10000);
  };
}
listen();
